//! `cargo run -p vgpu-cli --example gen-docs -- OUTDIR`: writes vgpuctl's man pages to
//! OUTDIR/man8/, the desired-state file's page to OUTDIR/man5/, and its bash, zsh and fish completion scripts to OUTDIR/completions/, for
//! `make install` and the Debian package.
//!
//! Why an example, not `build.rs` (as mdevctl does) nor a binary: a build script cannot see the
//! command-line definition without compiling `vgpu-core` and `vgpu-domain` a second time, for
//! the host, at every build of `vgpu-cli`; a binary would be built and installed with
//! `vgpuctl`. An example is built only by `cargo test` (which checks it) and by whoever asks for
//! the pages; it uses `clap_mangen` as a dev-dependency, so `vgpuctl` does not depend on it.
//! The completions come from the same function `vgpuctl completions` runs.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::ValueEnum as _;

use vgpu_cli::completions::{self, Shell};

mod man;

const USAGE: &str = "usage: gen-docs OUTDIR\n\n\
Writes OUTDIR/man8/*.8 (vgpuctl's pages), OUTDIR/man5/*.5 (the file formats) and\n\
OUTDIR/completions/ (bash, zsh, fish). SOURCE_DATE_EPOCH sets the pages' date.";

fn main() -> Result<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let out = match (args.next(), args.next()) {
        (Some(arg), None) if arg == "-h" || arg == "--help" => {
            writeln!(std::io::stdout(), "{USAGE}").context("cannot write to stdout")?;
            return Ok(ExitCode::SUCCESS);
        }
        (Some(out), None) if !out.to_string_lossy().starts_with('-') => PathBuf::from(out),
        _ => {
            writeln!(std::io::stderr(), "{USAGE}").context("cannot write to stderr")?;
            return Ok(ExitCode::from(2));
        }
    };
    let man_dir = out.join("man8");
    let format_dir = out.join("man5");
    let completions_dir = out.join("completions");
    for dir in [&man_dir, &format_dir, &completions_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    man::write_man_pages(&man_dir)?;
    man::write_format_pages(&format_dir)?;
    for shell in Shell::value_variants() {
        let path = completions_dir.join(shell.file_name());
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        completions::write(*shell, &mut file)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
