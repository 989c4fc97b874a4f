//! `vgpuctl completions SHELL`: the shell's completion script for `vgpuctl`, generated from the
//! command-line definition ([`crate::Cli`]) by `clap_complete`. It reads nothing on the host, so
//! `vgpuctl` runs it itself, without libvirt.

use std::io::Write;

use anyhow::{Context, Result};
use clap::CommandFactory;

/// A shell `vgpuctl completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// bash (bash-completion loads it from /usr/share/bash-completion/completions/vgpuctl).
    Bash,
    /// zsh (a `_vgpuctl` file in a directory of `$fpath`).
    Zsh,
    /// fish (`vgpuctl.fish` in a `vendor_completions.d` directory).
    Fish,
}

impl Shell {
    /// The file name the shell looks the script up by.
    pub fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "vgpuctl",
            Shell::Zsh => "_vgpuctl",
            Shell::Fish => "vgpuctl.fish",
        }
    }

    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// Writes `shell`'s completion script for `vgpuctl` to `out`.
pub fn write(shell: Shell, out: &mut dyn Write) -> Result<()> {
    // clap_complete panics when its writer fails (a closed pipe): it writes to memory here, and
    // only the copy to `out` can fail, as an error.
    let mut script = Vec::new();
    clap_complete::generate(
        shell.generator(),
        &mut crate::Cli::command(),
        "vgpuctl",
        &mut script,
    );
    out.write_all(&script)
        .and_then(|()| out.flush())
        .context("cannot write the completion script")
}
