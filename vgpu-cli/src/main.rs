//! `vgpuctl`: discover GPUs, list vGPU types and check IOMMU readiness on a KVM host.
//!
//! Exit codes: 0 success, 1 error, 2 usage, 3 `check` found a failure.

#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

use vgpu_cli::{Cli, run};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help and version to stdout with exit 0, usage errors to stderr with 2.
            let _printed = err.print();
            return ExitCode::from(if err.use_stderr() { 2 } else { 0 });
        }
    };
    vgpu_cli::init_logging(cli.verbose);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match run(&cli, &mut out) {
        Ok(code) => {
            if out.flush().is_err() {
                return ExitCode::from(1);
            }
            ExitCode::from(code)
        }
        Err(err) => {
            let _flushed = out.flush();
            let mut stderr = io::stderr().lock();
            // Nothing more can be done if stderr is gone.
            let _written = vgpu_cli::write_error(&mut stderr, &err);
            ExitCode::from(1)
        }
    }
}
