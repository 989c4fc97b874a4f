//! The two renderings of every result: aligned tables for people and JSON for programs.
//!
//! JSON field names are part of the interface (documented in `docs/json.md`); tables may change.

use std::io::{self, Write};

use serde::Serialize;

use vgpu_core::checks::GroupMember;
use vgpu_core::checks::Report;
use vgpu_core::model::{Backend, Gpu, Inventory, VgpuType, Warning, pci::PciAddress};

/// `list --json`.
#[derive(Serialize)]
pub(crate) struct ListJson<'a> {
    pub(crate) gpus: Vec<GpuJson<'a>>,
    pub(crate) warnings: &'a [Warning],
    pub(crate) nvml: &'a vgpu_core::model::nvml::NvmlStatus,
}

/// One GPU in `list --json`: what discovery found, and what NVML says about it (`null` when
/// NVML is not loaded or does not manage it).
#[derive(Serialize)]
pub(crate) struct GpuJson<'a> {
    #[serde(flatten)]
    pub(crate) gpu: &'a Gpu,
    pub(crate) nvml: Option<&'a vgpu_core::model::nvml::NvmlGpu>,
}

/// One GPU in `types --json`.
#[derive(Serialize)]
pub(crate) struct TypesJson<'a> {
    pub(crate) address: PciAddress,
    pub(crate) backend: Backend,
    pub(crate) types: &'a [VgpuType],
}

/// `types --json`.
#[derive(Serialize)]
pub(crate) struct TypesListJson<'a> {
    pub(crate) gpus: Vec<TypesJson<'a>>,
}

/// Writes `value` as pretty JSON and a newline.
pub fn json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// Writes `rows` (the first is the header) as a table whose columns are as wide as their
/// widest cell.
pub(crate) fn rows(out: &mut dyn Write, rows: &[Vec<String>]) -> io::Result<()> {
    let Some((header, body)) = rows.split_first() else {
        return Ok(());
    };
    let headers: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&headers);
    for row in body {
        table.row(row.clone());
    }
    table.write(out)
}

/// A table whose columns are as wide as their widest cell.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(headers: &[&str]) -> Self {
        Self {
            rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn warnings(out: &mut dyn Write, warnings: &[Warning]) -> io::Result<()> {
    if warnings.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "Warnings:")?;
    for w in warnings {
        writeln!(out, "  {}: {}", w.device, w.message)?;
    }
    Ok(())
}

/// `list` as a table.
pub(crate) fn list_table(
    out: &mut dyn Write,
    inventory: &Inventory,
    nvml: &vgpu_core::model::nvml::NvmlStatus,
) -> io::Result<()> {
    let mut table = Table::new(&[
        "ADDRESS", "IDS", "MODEL", "DRIVER", "NUMA", "GROUP", "BACKEND", "VFS", "TYPES", "VGPUS",
    ]);
    for gpu in &inventory.gpus {
        let ids = format!(
            "{}:{}",
            opt(gpu.vendor_id.map(|v| format!("{v:04x}"))),
            opt(gpu.device_id.map(|d| format!("{d:04x}")))
        );
        let vfs = gpu
            .sriov
            .as_ref()
            .map(|s| format!("{}/{}", s.num_vfs, s.total_vfs));
        table.row(vec![
            gpu.address.to_string(),
            ids,
            opt(gpu.model.as_deref()),
            opt(gpu.driver.as_deref()),
            opt(gpu.numa_node),
            opt(gpu.iommu_group),
            gpu.backend.to_string(),
            opt(vfs),
            gpu.types.len().to_string(),
            gpu.vgpus.len().to_string(),
        ]);
    }
    if inventory.gpus.is_empty() {
        writeln!(out, "No GPUs found.")?;
    } else {
        table.write(out)?;
    }
    let nvidia = inventory.gpus.iter().any(|g| g.vendor_id == Some(0x10de));
    if let (true, Some(reason)) = (nvidia, &nvml.reason) {
        writeln!(out)?;
        writeln!(
            out,
            "NVML not used ({reason}); vGPU facts come from sysfs and the built-in catalog."
        )?;
    }
    warnings(out, &inventory.warnings)
}

/// `types` as a table.
pub(crate) fn types_table(out: &mut dyn Write, gpus: &[&Gpu]) -> io::Result<()> {
    let mut table = Table::new(&[
        "GPU", "TYPE", "NAME", "FB_MIB", "MAX", "AVAIL", "USED", "MIG", "LIMIT",
    ]);
    let mut from_catalog = false;
    for gpu in gpus {
        for t in &gpu.types {
            // A name only the catalog gives is marked: its id can differ between drivers.
            let catalog = t.name_source == Some(vgpu_core::model::NameSource::Catalog);
            from_catalog |= catalog;
            let name = match (&t.name, catalog) {
                (Some(name), true) => format!("{name}*"),
                (name, _) => opt(name.as_deref()),
            };
            table.row(vec![
                gpu.address.to_string(),
                t.id.clone(),
                name,
                opt(t.framebuffer_mib),
                opt(t.max_instances),
                t.available.to_string(),
                t.in_use.to_string(),
                opt(t.mig.as_ref().map(|m| m.gpu_instance_profile.as_str())),
                opt(t
                    .limit
                    .as_ref()
                    .map(vgpu_core::plan::capacity::Limit::short)),
            ]);
        }
    }
    if table.rows.len() == 1 {
        return writeln!(out, "No vGPU types offered.");
    }
    table.write(out)?;
    if from_catalog {
        writeln!(out)?;
        writeln!(
            out,
            "* named by the built-in catalog: no free VF lists the type, and NVML does not name it."
        )?;
    }
    Ok(())
}

fn members(list: &[GroupMember]) -> String {
    list.iter()
        .map(|m| {
            format!(
                "{} ({})",
                m.address,
                m.driver.as_deref().unwrap_or("no driver")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `check` as two tables: host checks with remedies, then device isolation.
pub(crate) fn check_table(
    out: &mut dyn Write,
    report: &Report,
    warns: &[Warning],
) -> io::Result<()> {
    let mut table = Table::new(&["CHECK", "STATUS", "FINDING"]);
    for check in &report.checks {
        table.row(vec![
            check.id.to_owned(),
            check.status.to_string(),
            check.summary.clone(),
        ]);
    }
    table.write(out)?;
    let remedies: Vec<_> = report
        .checks
        .iter()
        .filter_map(|c| c.remedy.as_ref().map(|r| (c.id, r)))
        .collect();
    if !remedies.is_empty() {
        writeln!(out)?;
        writeln!(out, "To fix:")?;
        for (id, remedy) in remedies {
            writeln!(out, "  {id}: {remedy}")?;
        }
    }
    if !report.devices.is_empty() {
        writeln!(out)?;
        let mut devices = Table::new(&["DEVICE", "GROUP", "ISOLATED", "DETAIL"]);
        for d in &report.devices {
            let mut detail = Vec::new();
            if !d.blockers.is_empty() {
                detail.push(format!("blocked by {}", members(&d.blockers)));
            }
            if !d.companions.is_empty() {
                let detach = if d.isolated && !d.ready {
                    " (detach them from their host drivers first)"
                } else {
                    ""
                };
                detail.push(format!("assign with {}{detach}", members(&d.companions)));
            }
            if d.iommu_group.is_none() {
                detail.push("no IOMMU group".to_owned());
            }
            detail.extend(d.problems.iter().cloned());
            devices.row(vec![
                d.address.to_string(),
                opt(d.iommu_group),
                if d.isolated { "yes" } else { "no" }.to_owned(),
                detail.join("; "),
            ]);
        }
        devices.write(out)?;
    }
    warnings(out, warns)
}

/// A size in MiB as `8 GiB` or `3276 MiB`.
pub(crate) fn size_text(mib: u64) -> String {
    if mib % 1024 == 0 {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}

/// `restore` as a table of steps; a quota step says what the VF had and gets.
pub(crate) fn restore_table(
    out: &mut dyn Write,
    report: &vgpu_core::manager::RestoreReport,
) -> io::Result<()> {
    if report.steps.is_empty() {
        return writeln!(out, "Nothing is defined.");
    }
    let mut table = Table::new(&["STEP", "DEVICE", "OUTCOME", "DETAIL"]);
    for step in &report.steps {
        let action = match &step.quota {
            Some(q) => match q.from_mib {
                Some(from) => format!("quota {} -> {}", size_text(from), size_text(q.to_mib)),
                None => format!("quota -> {}", size_text(q.to_mib)),
            },
            None => step.action.to_owned(),
        };
        // A failed step's error, or what a waiting step's device lacks.
        let detail = step.error.as_ref().or(step.reason.as_ref());
        table.row(vec![
            action,
            step.device.clone(),
            step.outcome.to_string(),
            detail.cloned().unwrap_or_default(),
        ]);
    }
    table.write(out)
}

/// `provision` as a table, one row per GPU.
pub(crate) fn provision_table(
    out: &mut dyn Write,
    reports: &[vgpu_core::manager::GpuReport],
) -> io::Result<()> {
    let mut table = Table::new(&["GPU", "VFS", "CREATED", "SECONDS", "ERROR"]);
    for r in reports {
        table.row(vec![
            r.gpu.to_string(),
            opt(r.sriov.as_ref().map(|s| s.enabled)),
            r.created.len().to_string(),
            format!("{:.2}", r.elapsed_ms as f64 / 1000.0),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    table.write(out)
}

/// How a table names a vGPU type: its id, with its name when one is known
/// ([`vgpu_core::model::Inventory::type_name`]): `nvidia-231 (GRID T4-2Q)`. Every table that names
/// a type by its id and name shows this label.
pub(crate) fn type_label(type_id: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{type_id} ({name})"),
        None => type_id.to_owned(),
    }
}

/// `owners` as a table: one row per vGPU and holder, orphans with `-`, then the references to
/// devices that are not on this host.
pub fn owners_table(out: &mut dyn Write, owners: &vgpu_domain::Owners) -> io::Result<()> {
    let mut table = Table::new(&["VGPU", "GPU", "TYPE", "DOMAIN", "STATE", "LIVE", "CONFIG"]);
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    for owned in &owners.vgpus {
        let cells = |domain: String, state: &str, live: String, config: String| {
            vec![
                owned.id.to_string(),
                owned.gpu.to_string(),
                type_label(&owned.type_id, owned.type_name.as_deref()),
                domain,
                state.to_owned(),
                live,
                config,
            ]
        };
        if owned.holders.is_empty() {
            table.row(cells("-".to_owned(), "-", "-".to_owned(), "-".to_owned()));
        }
        for holder in &owned.holders {
            table.row(cells(
                holder.domain.clone(),
                if holder.running {
                    "running"
                } else {
                    "shut off"
                },
                yes_no(holder.live),
                yes_no(holder.config),
            ));
        }
    }
    table.write(out)?;
    if !owners.missing.is_empty() {
        writeln!(out)?;
        writeln!(out, "Referenced by domains but not on this host:")?;
        let mut missing = Table::new(&["DEVICE", "DOMAIN", "LIVE", "CONFIG"]);
        for r in &owners.missing {
            missing.row(vec![
                r.device.to_string(),
                r.domain.clone(),
                yes_no(r.live),
                yes_no(r.config),
            ]);
        }
        missing.write(out)?;
    }
    Ok(())
}
