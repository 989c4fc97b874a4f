//! `vgpuctl-libvirt`: `vgpuctl` linked with libvirt. `vgpuctl` runs it, with the same command
//! line, for the commands that need libvirt (`attach`, `detach`, `owners`), and as
//! `owners --json` for what libvirt knows; it runs every other command too.
//!
//! The domain commands are this crate's ([`vm`]), and so are libvirt's facts asked of the
//! linked library ([`linked`]). Everything else is `vgpu-cli`'s library, which does not
//! depend on libvirt.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use vgpu_cli::{Cli, Command, Context, LinkedErrors};

mod linked;
mod vm;

fn main() -> ExitCode {
    vgpu_cli::main(run, LIBVIRT_ERRORS)
}

/// Runs `cli`: the domain commands here, every other one with libvirt's facts from libvirt
/// itself.
fn run(cli: &Cli, out: &mut dyn Write) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Vm(command) => vm::run(&Context::new(cli, linked::facts), command, out),
        _ => vgpu_cli::run_local(cli, out, linked::facts),
    }
}

/// `vgpu-libvirt`'s errors, for the error report.
const LIBVIRT_ERRORS: LinkedErrors = LinkedErrors {
    kind: libvirt_kind,
    core: libvirt_core,
};

fn libvirt_kind(cause: &(dyn std::error::Error + 'static)) -> Option<vgpu_core::ErrorKind> {
    cause
        .downcast_ref::<vgpu_libvirt::Error>()
        .map(vgpu_libvirt::Error::kind)
}

fn libvirt_core<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a vgpu_core::Error> {
    match cause.downcast_ref::<vgpu_libvirt::Error>() {
        Some(vgpu_libvirt::Error::Core(core)) => Some(core),
        _ => None,
    }
}
