//! `vgpuctl-libvirt`: `vgpuctl` linked with libvirt. `vgpuctl` runs it, with the same command
//! line, for the commands that need libvirt (`attach`, `detach`, `owners`), and as
//! `owners --json` for what libvirt knows; it runs every other command too.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    vgpu_cli::main(vgpu_cli::run)
}
