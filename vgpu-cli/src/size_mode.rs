//! `vgpuctl size-mode`: the size mode of an NVIDIA GPU, read from NVML, or set through the
//! manager (audited, under the host lock).

use std::io::Write;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::model::nvml::Fact;
use vgpu_core::model::pci::PciAddress;
use vgpu_core::model::sizes::SizeMode;

use crate::EXIT_OK;
use crate::SizeModeName;
use crate::context::Context;
use crate::render::{self, Line, Report, Table};

/// `size-mode GPU`: the mode, or why it is unknown, and the vGPUs that keep it as it is.
#[derive(Serialize)]
struct SizeModeReport {
    gpu: PciAddress,
    /// The mode; `null` when NVML does not report one.
    size_mode: Option<SizeMode>,
    /// Why NVML reports none (no mixed-size mode on this GPU, an older driver, no NVML).
    #[serde(skip_serializing_if = "Option::is_none")]
    unknown: Option<String>,
    /// The vGPUs on the GPU: while any exists, the mode cannot change.
    vgpus: Vec<String>,
}

impl Report for SizeModeReport {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut table = Table::new(&["GPU", "SIZE MODE", "VGPUS"]);
        let mode = match (&self.size_mode, &self.unknown) {
            (Some(mode), _) => mode.to_string(),
            (None, why) => format!(
                "unknown ({})",
                why.as_deref().unwrap_or("NVML says nothing")
            ),
        };
        let vgpus = if self.vgpus.is_empty() {
            "none".to_owned()
        } else {
            self.vgpus.join(", ")
        };
        table.row(vec![self.gpu.to_string(), mode, vgpus]);
        table.write(out)
    }
}

/// `vgpuctl size-mode GPU [equal|mixed [--define]]`: shows the mode, or sets it.
pub(crate) fn run(
    ctx: &Context<'_>,
    gpu: &str,
    mode: Option<SizeModeName>,
    define: bool,
    out: &mut dyn Write,
) -> Result<u8> {
    let Some(mode) = mode else {
        let inventory = ctx.state()?.inventory;
        let gpu = vgpu_core::discovery::find_gpu(&inventory, gpu, ctx.paths())?;
        let (size_mode, unknown) = match ctx.nvml().size_mode(gpu.address) {
            Fact::Value(mode) => (Some(mode), None),
            Fact::Unavailable(why) => (None, Some(why.reason)),
        };
        let report = SizeModeReport {
            gpu: gpu.address,
            size_mode,
            unknown,
            vgpus: gpu.vgpus.iter().map(|v| v.id.to_string()).collect(),
        };
        render::emit(&report, ctx.format(), out)?;
        return Ok(EXIT_OK);
    };
    let mode = SizeMode::from(mode);
    let change = vgpu_core::discovery::resolve_gpu(ctx.paths(), gpu)
        .and_then(|address| match define {
            true => ctx.manager().set_size_mode_defined(address, mode),
            false => ctx.manager().set_size_mode(address, mode),
        })
        .with_context(|| format!("cannot set the size mode of {gpu} to {mode}"))?;
    let line = if change.changed {
        format!(
            "{}: size mode {} (was {})",
            change.gpu, change.after, change.before
        )
    } else {
        format!(
            "{}: size mode already {}: nothing changed",
            change.gpu, change.after
        )
    };
    render::emit(&Line::new(&change, line), ctx.format(), out)?;
    Ok(EXIT_OK)
}
