//! `vgpuctl completions SHELL`: the shell's completion script for `vgpuctl`, generated from the
//! command-line definition ([`crate::Cli`]) by `clap_complete`. It reads nothing on the host, so
//! `vgpuctl` runs it itself, without libvirt.

use std::io::Write;

use anyhow::{Context, Result};
use clap::CommandFactory;

pub use crate::args::Shell;

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
