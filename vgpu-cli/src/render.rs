//! The one rendering of every result: a command builds a value that is both JSON
//! (`serde::Serialize`) and a table ([`Report`]), and [`emit`] writes it in the format asked for.
//!
//! JSON field names are part of the interface (documented in `docs/json.md`); tables may change.

use std::io::{self, Write};

use serde::{Serialize, Serializer};

use vgpu_core::checks::GroupMember;
use vgpu_core::checks::Report as Checks;
use vgpu_core::{
    model::{Backend, Gpu, Inventory, VgpuType, Warning, pci::PciAddress},
    nvml::Nvml,
};

/// A command's result: JSON for programs, and this table (or text) for people.
pub trait Report: Serialize {
    /// Writes it for people.
    fn table(&self, out: &mut dyn Write) -> io::Result<()>;
}

/// How results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people: [`Report::table`].
    Table,
    /// `--json`: pretty JSON and a newline.
    Json,
    /// `--json` of a command that streams (`watch`): one JSON object per line.
    JsonLines,
}

impl Format {
    /// `--json` or not.
    pub fn of(json: bool) -> Self {
        if json { Format::Json } else { Format::Table }
    }

    /// The format of each item of a stream: JSON one object per line.
    pub fn streamed(self) -> Self {
        match self {
            Format::Json => Format::JsonLines,
            other => other,
        }
    }
}

/// Writes `value` as `format` says. Every command's result goes through here.
pub fn emit<R: Report + ?Sized>(value: &R, format: Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Table => value.table(out),
        Format::Json => json(out, value),
        Format::JsonLines => {
            serde_json::to_writer(&mut *out, value)?;
            writeln!(out)
        }
    }
}

/// Writes `value` as pretty JSON and a newline.
pub fn json(out: &mut dyn Write, value: &(impl Serialize + ?Sized)) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// A result people read as one line: `value` in JSON, `line` in a table.
pub struct Line<'a, T: ?Sized> {
    value: &'a T,
    line: String,
}

impl<'a, T: Serialize + ?Sized> Line<'a, T> {
    /// `value`, said to people as `line`.
    pub fn new(value: &'a T, line: impl Into<String>) -> Self {
        Line {
            value,
            line: line.into(),
        }
    }
}

impl<T: Serialize + ?Sized> Serialize for Line<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<T: Serialize + ?Sized> Report for Line<'_, T> {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{}", self.line)
    }
}

/// `list`: the GPUs of `inventory`, with `--vgpus` a line per vGPU under them.
pub(crate) struct ListReport<'a> {
    pub(crate) inventory: &'a Inventory,
    /// NVML's facts are read from it for JSON only: the table does not show them.
    pub(crate) nvml: &'a Nvml,
    pub(crate) vgpus: bool,
}

/// `list --json`.
#[derive(Serialize)]
struct ListJson<'a> {
    gpus: Vec<GpuJson<'a>>,
    warnings: &'a [Warning],
    nvml: &'a vgpu_core::model::nvml::NvmlStatus,
}

/// One GPU in `list --json`: what discovery found, and what NVML says about it (`null` when
/// NVML is not loaded or does not manage it).
#[derive(Serialize)]
struct GpuJson<'a> {
    #[serde(flatten)]
    gpu: &'a Gpu,
    nvml: Option<&'a vgpu_core::model::nvml::NvmlGpu>,
}

impl Serialize for ListReport<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let facts = self.nvml.read();
        ListJson {
            gpus: self
                .inventory
                .gpus
                .iter()
                .map(|gpu| GpuJson {
                    gpu,
                    nvml: facts.gpu(gpu.address),
                })
                .collect(),
            warnings: &self.inventory.warnings,
            nvml: self.nvml.status(),
        }
        .serialize(serializer)
    }
}

impl Report for ListReport<'_> {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        list_table(out, self.inventory, self.nvml.status())?;
        if self.vgpus {
            vgpus_table(out, self.inventory)?;
        }
        Ok(())
    }
}

/// `types`: the types of each of `gpus`.
pub(crate) struct TypesReport<'a> {
    pub(crate) gpus: Vec<&'a Gpu>,
}

/// One GPU in `types --json`.
#[derive(Serialize)]
struct TypesJson<'a> {
    address: PciAddress,
    backend: Backend,
    types: &'a [VgpuType],
}

/// `types --json`.
#[derive(Serialize)]
struct TypesListJson<'a> {
    gpus: Vec<TypesJson<'a>>,
}

impl Serialize for TypesReport<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let gpus = self
            .gpus
            .iter()
            .map(|g| TypesJson {
                address: g.address,
                backend: g.backend,
                types: &g.types,
            })
            .collect();
        TypesListJson { gpus }.serialize(serializer)
    }
}

impl Report for TypesReport<'_> {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let gpus = &self.gpus;
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
        if table.is_empty() {
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
}

/// `check`: the host checks and device isolation (the JSON), and discovery's warnings (the
/// table shows them too). The table is two: host checks with remedies, then device isolation.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct CheckReport<'a> {
    pub(crate) report: &'a Checks,
    #[serde(skip)]
    pub(crate) warnings: &'a [Warning],
}

impl Report for CheckReport<'_> {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let (report, warns) = (self.report, self.warnings);
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
}

/// A table whose columns are as wide as their widest cell: the one table writer.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers and no row yet.
    pub(crate) fn new(headers: &[&str]) -> Self {
        Self {
            rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Adds a row.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no row beyond its header.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.len() == 1
    }

    /// Writes the header and the rows, each line without trailing blanks.
    pub(crate) fn write(&self, out: &mut dyn Write) -> io::Result<()> {
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

/// `value`, or `-` when there is none.
pub(crate) fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The `Warnings:` section under a table; nothing when there are none.
pub(crate) fn warnings(out: &mut dyn Write, warnings: &[Warning]) -> io::Result<()> {
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
fn list_table(
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

/// A size in MiB as `8 GiB` or `3276 MiB`.
pub(crate) fn size_text(mib: u64) -> String {
    if mib % 1024 == 0 {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}

/// `restore` as a table of steps; a quota step says what the VF had and gets.
impl Report for vgpu_core::manager::RestoreReport {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let report = self;
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
}

/// `provision` as a table, one row per GPU.
impl Report for [vgpu_core::manager::GpuReport] {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let reports = self;
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
}

/// How a table names a vGPU type: [`vgpu_core::model::type_label`], with the name
/// [`vgpu_core::model::Inventory::type_name`] knows: `GRID T4-2Q`, or the id without a name.
pub(crate) fn type_label(type_id: &str, name: Option<&str>) -> String {
    vgpu_core::model::type_label(type_id, name).to_owned()
}

/// `owners` as a table: one row per vGPU and holder, orphans with `-`, then the references to
/// devices that are not on this host.
impl Report for vgpu_domain::Owners {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        let owners = self;
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
                    holder.holder.domain.clone(),
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
}

/// `list --vgpus`: a line per vGPU, under the GPU table.
fn vgpus_table(out: &mut dyn Write, inventory: &Inventory) -> io::Result<()> {
    let mut table = Table::new(&["GPU", "VGPU", "TYPE", "NAME", "ON"]);
    for gpu in &inventory.gpus {
        for vgpu in &gpu.vgpus {
            table.row(vec![
                gpu.address.to_string(),
                vgpu.id.to_string(),
                vgpu.type_id.clone(),
                opt(inventory.type_name(gpu.address, &vgpu.type_id)),
                vgpu.parent.to_string(),
            ]);
        }
    }
    writeln!(out)?;
    if table.is_empty() {
        writeln!(out, "No vGPUs.")
    } else {
        table.write(out)
    }
}
