//! `vgpuctl list`: the GPUs (all, or one), with `--vgpus` a line per vGPU, and with
//! `--defined` every definition, running or not (as `mdevctl list --defined`).

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use vgpu_core::{
    model::{Inventory, VgpuHandle},
    plan::capacity::HostState,
};

use crate::render;

/// One definition in `list --defined`.
#[derive(Debug, Serialize)]
pub(crate) struct Defined {
    /// `mdev`, `vf-vgpu`, `binding` or `sriov`.
    kind: &'static str,
    /// The vGPU, VF or PF it is about.
    id: String,
    /// The device it goes on: the mdev parent, the GPU, or the PF itself.
    on: String,
    /// What it sets: the type, the driver, the VF count.
    what: String,
    /// When it starts (`auto`, `manual`); `None` for a VF count (always set by `restore`).
    start: Option<String>,
    /// Whether the host is as it says now.
    active: bool,
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

/// `list --defined` as a table or JSON.
pub(crate) fn defined(json: bool, state: &HostState, out: &mut dyn Write) -> Result<()> {
    let list = definitions(state);
    if json {
        #[derive(Serialize)]
        struct DefinedJson<'a> {
            definitions: &'a [Defined],
        }
        render::json(out, &DefinedJson { definitions: &list })?;
        return Ok(());
    }
    if list.is_empty() {
        writeln!(out, "No definitions.")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = std::iter::once(
        ["KIND", "ID", "ON", "WHAT", "START", "ACTIVE"]
            .map(str::to_owned)
            .to_vec(),
    )
    .chain(list.iter().map(|d| {
        vec![
            d.kind.to_owned(),
            d.id.clone(),
            d.on.clone(),
            d.what.clone(),
            d.start.clone().unwrap_or_else(|| "-".to_owned()),
            if d.active { "yes" } else { "no" }.to_owned(),
        ]
    }))
    .collect();
    render::rows(out, &rows)?;
    Ok(())
}

/// `list --vgpus`: a line per vGPU, under the GPU table.
pub(crate) fn vgpus(inventory: &Inventory, out: &mut dyn Write) -> Result<()> {
    let mut rows = vec![
        ["GPU", "VGPU", "TYPE", "NAME", "ON"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for gpu in &inventory.gpus {
        for vgpu in &gpu.vgpus {
            let name = inventory
                .type_name(gpu.address, &vgpu.type_id)
                .unwrap_or("-")
                .to_owned();
            rows.push(vec![
                gpu.address.to_string(),
                vgpu.id.to_string(),
                vgpu.type_id.clone(),
                name,
                vgpu.parent.to_string(),
            ]);
        }
    }
    writeln!(out)?;
    if rows.len() == 1 {
        writeln!(out, "No vGPUs.")?;
    } else {
        render::rows(out, &rows)?;
    }
    Ok(())
}
