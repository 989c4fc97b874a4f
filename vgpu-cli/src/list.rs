//! `vgpuctl list`: the GPUs (all, or one), with `--vgpus` a line per vGPU, and with
//! `--defined` every definition, running or not (as `mdevctl list --defined`); and
//! `vgpuctl types`.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use vgpu_core::host::HostPaths;
use vgpu_core::model::nvml::{Fact, already};
use vgpu_core::model::{VgpuHandle, Warning};
use vgpu_core::plan::capacity::HostState;
use vgpu_core::state::Store;

use crate::EXIT_OK;
use crate::context::Context;
use crate::render::{self, ListReport, Report, Table, TypesReport};

/// One definition in `list --defined`.
#[derive(Debug, Serialize)]
pub(crate) struct Defined {
    /// `mdev`, `vf-vgpu`, `binding`, `sriov`, `scheduler` or `size-mode`.
    kind: &'static str,
    /// The vGPU, VF or PF it is about.
    id: String,
    /// The device it goes on: the mdev parent, the GPU, or the PF itself.
    pub(crate) on: String,
    /// What it sets: the type, the driver, the VF count.
    what: String,
    /// When it starts (`auto`, `manual`); `None` for a VF count, a scheduler or a size mode
    /// (always set by `restore`).
    pub(crate) start: Option<String>,
    /// Whether the host is as it says now.
    pub(crate) active: bool,
}

/// Every definition of `state`, with whether it is in effect, in a stable order.
pub(crate) fn definitions(state: &HostState) -> Vec<Defined> {
    let inventory = &state.inventory;
    let running = |id: VgpuHandle| {
        inventory
            .gpus
            .iter()
            .any(|g| g.vgpus.iter().any(|v| v.id == id))
    };
    let type_label = |gpu: vgpu_core::model::pci::PciAddress, type_id: &str| {
        render::type_label(type_id, inventory.type_name(gpu, type_id))
    };
    let defs = &state.definitions;
    let mut out = Vec::new();
    for d in &defs.sriov {
        let now = inventory
            .gpus
            .iter()
            .find(|g| g.address == d.pf)
            .and_then(|g| g.sriov.as_ref())
            .map(|s| s.num_vfs);
        out.push(Defined {
            kind: "sriov",
            id: d.pf.to_string(),
            on: d.pf.to_string(),
            what: format!("{} VFs", d.num_vfs),
            start: None,
            active: now == Some(d.num_vfs),
        });
    }
    for d in &defs.mdevs {
        let parent = d.parent.parse().ok();
        out.push(Defined {
            kind: "mdev",
            id: d.uuid.to_string(),
            on: d.parent.clone(),
            what: match parent {
                Some(parent) => type_label(parent, &d.mdev_type),
                None => d.mdev_type.clone(),
            },
            start: Some(d.start.to_string()),
            active: running(VgpuHandle::Mdev(d.uuid)),
        });
    }
    for d in &defs.vf_vgpus {
        let id = d.type_id.to_string();
        out.push(Defined {
            kind: "vf-vgpu",
            id: d.vf.to_string(),
            on: d.gpu.to_string(),
            // The settled name; the definition's own when the GPU is not there to name it.
            what: render::type_label(
                &id,
                inventory.type_name(d.gpu, &id).or(d.type_name.as_deref()),
            ),
            start: Some(d.start.to_string()),
            active: running(VgpuHandle::Vf(d.vf)),
        });
    }
    for d in &defs.bindings {
        let driver_now = inventory
            .gpus
            .iter()
            .flat_map(|g| &g.vfs)
            .find(|v| v.address == d.address)
            .and_then(|v| v.driver.clone())
            .or_else(|| {
                inventory
                    .gpus
                    .iter()
                    .find(|g| g.address == d.address)
                    .and_then(|g| g.driver.clone())
            });
        out.push(Defined {
            kind: "binding",
            id: d.address.to_string(),
            on: d.address.to_string(),
            what: d.driver.clone(),
            start: Some(d.start.to_string()),
            active: driver_now.as_deref() == Some(d.driver.as_str()),
        });
    }
    out
}

/// The scheduler and size-mode definitions of the host at `paths` (`etc/vgpu/sched/`,
/// `etc/vgpu/size-mode/`), each active when NVML shows its GPU so now (`state`). A file that
/// cannot be read is left out: the state's warnings name it, as they name every definition
/// that cannot be read.
fn gpu_settings(paths: &HostPaths, state: &HostState) -> Vec<Defined> {
    let store = Store::new(paths);
    let (scheds, _in_warnings) = store.scheds_lenient();
    let (modes, _in_warnings) = store.size_modes_lenient();
    let scheds = scheds.into_iter().map(|d| {
        let now = state.schedulers.get(&d.gpu).and_then(Fact::value);
        let what = match d.request.timeslice_ms {
            Some(ms) => format!("{}, time slice {ms} ms", d.request.policy),
            None => d.request.policy.to_string(),
        };
        Defined {
            kind: "scheduler",
            id: d.gpu.to_string(),
            on: d.gpu.to_string(),
            what,
            start: None,
            active: now.is_some_and(|now| already(now, d.request)),
        }
    });
    let modes = modes.into_iter().map(|d| Defined {
        kind: "size-mode",
        id: d.gpu.to_string(),
        on: d.gpu.to_string(),
        what: d.mode.to_string(),
        start: None,
        active: state.sizes.get(&d.gpu).is_some_and(|s| s.mode == d.mode),
    });
    scheds.chain(modes).collect()
}

/// `list --defined`: every definition, running or not, and the files that cannot be read.
#[derive(Serialize)]
struct DefinedReport {
    definitions: Vec<Defined>,
    warnings: Vec<Warning>,
}

impl Report for DefinedReport {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        self.definitions_table(out)?;
        render::warnings(out, &self.warnings)
    }
}

impl DefinedReport {
    fn definitions_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.definitions.is_empty() {
            return writeln!(out, "No definitions.");
        }
        let mut table = Table::new(&["KIND", "ID", "ON", "WHAT", "START", "ACTIVE"]);
        for d in &self.definitions {
            table.row(vec![
                d.kind.to_owned(),
                d.id.clone(),
                d.on.clone(),
                d.what.clone(),
                render::opt(d.start.as_deref()),
                if d.active { "yes" } else { "no" }.to_owned(),
            ]);
        }
        table.write(out)?;
        if self
            .definitions
            .iter()
            .any(|d| d.start.as_deref() == Some("manual"))
        {
            writeln!(
                out,
                "\nmanual: kept, but not made at boot; `vgpuctl start ID` makes it. \
                 `--define` makes auto unless --manual."
            )?;
        }
        Ok(())
    }
}

/// `vgpuctl list [GPU] [--defined] [--vgpus]`.
pub(crate) fn list(
    ctx: &Context<'_>,
    gpu: Option<&str>,
    defined: bool,
    vgpus: bool,
    out: &mut dyn Write,
) -> Result<u8> {
    let state = ctx.state()?;
    if defined {
        let mut definitions = definitions(&state);
        definitions.extend(gpu_settings(ctx.paths(), &state));
        let report = DefinedReport {
            definitions,
            warnings: state.inventory.warnings,
        };
        render::emit(&report, ctx.format(), out)?;
        return Ok(EXIT_OK);
    }
    let mut inventory = state.inventory;
    if let Some(name) = gpu {
        let address = vgpu_core::discovery::find_gpu(&inventory, name, ctx.paths())?.address;
        inventory.gpus.retain(|g| g.address == address);
    }
    let report = ListReport {
        inventory: &inventory,
        nvml: ctx.nvml(),
        vgpus,
    };
    render::emit(&report, ctx.format(), out)?;
    Ok(EXIT_OK)
}

/// `vgpuctl types [GPU]`.
pub(crate) fn types(ctx: &Context<'_>, gpu: Option<&str>, out: &mut dyn Write) -> Result<u8> {
    let inventory = ctx.state()?.inventory;
    let gpus = match gpu {
        Some(name) => vec![vgpu_core::discovery::find_gpu(
            &inventory,
            name,
            ctx.paths(),
        )?],
        None => inventory.gpus.iter().collect(),
    };
    render::emit(&TypesReport { gpus }, ctx.format(), out)?;
    Ok(EXIT_OK)
}
