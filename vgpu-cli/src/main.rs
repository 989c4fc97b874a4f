//! `vgpuctl`: discover GPUs, list vGPU types and check IOMMU readiness on a KVM host.
//!
//! Exit codes: 0 success, 1 error, 2 usage, 3 `check` found a failure, 4 `plan` found changes
//! pending.

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
    vgpu_cli::init_logging(&cli);
    // One write(2) per 64 KiB rather than per line: `list --json` on a large host is thousands
    // of lines. Every path below flushes before it returns; streamed lines (apply's progress)
    // flush themselves.
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    match run(&cli, &mut out) {
        Ok(code) => match out.flush() {
            Ok(()) => ExitCode::from(code),
            // The reader went away (`vgpuctl list | head`): what it read was complete.
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(code),
            Err(_) => ExitCode::from(1),
        },
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            if cli.json {
                // Programs reading --json get the error as JSON too (the text goes to stderr).
                let chain: Vec<String> = err.chain().map(ToString::to_string).collect();
                let kind = vgpu_cli::error_kind(&err);
                let value = serde_json::json!({ "error": chain.join(": "), "kind": kind });
                // stdout may be the very thing that failed; stderr still says it.
                let _printed = writeln!(out, "{value}");
            }
            // The error report matters more than output a closed stdout could not take.
            let _flushed = out.flush();
            let mut stderr = io::stderr().lock();
            // Nothing more can be done if stderr is gone.
            let _written = vgpu_cli::write_error(&mut stderr, &err);
            ExitCode::from(1)
        }
    }
}

/// Whether `err` is stdout's reader having gone away (`vgpuctl list | head`).
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<io::Error>())
        .any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}
