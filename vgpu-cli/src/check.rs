//! `vgpuctl check [GPU]`: IOMMU, interrupt remapping, VFIO and IOMMU-group isolation
//! (`vgpu_core::checks::check_host`), host-wide or for one GPU and its VFs.

use std::io::Write;

use anyhow::Result;

use vgpu_core::checks::Status;

use crate::context::Context;
use crate::render::{self, CheckReport};
use crate::{EXIT_CHECK_FAILED, EXIT_OK};

/// `vgpuctl check [GPU]`. Exits [`EXIT_CHECK_FAILED`] when a host check fails, or, for one GPU,
/// when it or a VF of it cannot be assigned.
pub(crate) fn run(ctx: &Context<'_>, gpu: Option<&str>, out: &mut dyn Write) -> Result<u8> {
    let inventory = ctx.inventory()?;
    let mut report = vgpu_core::checks::check_host(ctx.paths(), &inventory);
    if let Some(name) = gpu {
        let target = vgpu_core::discovery::find_gpu(&inventory, name, ctx.paths())?;
        let mine: Vec<_> = std::iter::once(target.address)
            .chain(target.vfs.iter().map(|v| v.address))
            .collect();
        report.devices.retain(|d| mine.contains(&d.address));
    }
    // Host-wide, a device that shares its group is a warning (iommu-groups), not a failure of
    // the host.
    let failed = if gpu.is_some() {
        report.worst() == Status::Fail
    } else {
        report.checks.iter().any(|c| c.status == Status::Fail)
    };
    let shown = CheckReport {
        report: &report,
        warnings: &inventory.warnings,
    };
    render::emit(&shown, ctx.format(), out)?;
    Ok(if failed { EXIT_CHECK_FAILED } else { EXIT_OK })
}
