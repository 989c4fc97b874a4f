//! `vgpuctl`: discover GPUs, list vGPU types and check IOMMU readiness on a KVM host.
//!
//! Exit codes: 0 success, 1 error, 2 usage, 3 `check` found a failure, 4 `plan` found changes
//! pending.
//!
//! The commands that need libvirt ([`vgpu_cli::Command::uses_libvirt`]: `attach`, `detach`,
//! `owners`) are run by `vgpuctl-libvirt` (crate `vgpu-cli-libvirt`), installed beside it.
//! Other commands ask it only what libvirt knows, when a libvirt socket exists
//! ([`vgpu_cli::libvirt_facts`]). This crate does not depend on libvirt, so this executable
//! does not link it: it runs on a host without libvirt's library, and does not load it and the
//! libraries it needs before every command.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    vgpu_cli::main(
        |cli, out| {
            if cli.command.uses_libvirt() {
                Err(vgpu_cli::exec_libvirt_helper())
            } else {
                vgpu_cli::run_local(cli, out, vgpu_cli::libvirt_facts::from_helper)
            }
        },
        vgpu_cli::LinkedErrors::NONE,
    )
}
