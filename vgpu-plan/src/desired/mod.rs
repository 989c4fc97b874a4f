//! The desired state of a host: named configs, each a list of GPU selections with the
//! partition and MIG geometry every selected GPU should hold. Plain data, read from
//! `host.toml` ([`crate::desired::host_toml`]), NVIDIA vgpu-device-manager's v1 YAML
//! ([`crate::desired::device_manager`]) or NVIDIA mig-parted's v1 YAML ([`crate::desired::mig_parted`]); nothing
//! here reads the host.

pub mod device_manager;
pub mod host_toml;
pub mod mig_parted;
mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::definition::Start;
use crate::model::nvml::SchedulerRequest;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;

pub use crate::model::location::Location;

/// The formats a desired-state file can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `vgpu`'s own `host.toml` (see `docs/desired-state.md`).
    HostToml,
    /// NVIDIA vgpu-device-manager's configuration file, `version: v1`.
    DeviceManagerYaml,
    /// NVIDIA mig-parted's configuration file, `version: v1` with `mig-configs`.
    MigPartedYaml,
}

impl Format {
    /// The format a file's name implies: YAML for `.yaml` and `.yml` (vgpu-device-manager's;
    /// [`Format::of_file`] tells mig-parted's apart by content), `host.toml` otherwise.
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => Format::DeviceManagerYaml,
            _ => Format::HostToml,
        }
    }

    /// The format of a file, by name and text: a YAML file whose top level has `mig-configs`
    /// and no `vgpu-configs` is mig-parted's; otherwise as [`Format::of_path`] says.
    pub fn of_file(path: &Path, text: &str) -> Format {
        match Format::of_path(path) {
            Format::DeviceManagerYaml if crate::desired::mig_parted::is_mig_parted(text) => {
                Format::MigPartedYaml
            }
            format => format,
        }
    }
}

/// A desired-state file: its named configs, in the order of their names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredFile {
    /// Where it was read from (named in errors and plans).
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its configs.
    pub configs: Vec<Desired>,
}

/// One named config: what each selection of GPUs should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The config's name (`-c NAME`).
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Its selections, in file order.
    pub entries: Vec<Entry>,
}

/// One selection of GPUs and the partition each of them should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Which GPUs.
    pub selection: Selection,
    /// What each of them holds.
    pub partition: Partition,
    /// The NVIDIA series a size maps to (`Q` unless the file says otherwise).
    pub series: char,
    /// Whether a size with no type of exactly that frame buffer takes the smallest above it.
    pub round_up: bool,
    /// When the vGPUs are started: at boot (`auto`) or on request (`manual`). Every vGPU the
    /// plan makes or keeps is defined with it.
    pub persistence: Start,
    /// What the VFs of a plain SR-IOV GPU are bound to.
    pub vf_driver: VfDriver,
    /// The vGPU scheduler each selected NVIDIA GPU should run, when the entry says
    /// (`scheduler = { policy = "equal-share", timeslice_ms = 2 }`).
    pub scheduler: Option<SchedulerRequest>,
    /// The MIG geometry each selected GPU should have, when the entry says or its types imply
    /// one; `None` leaves MIG mode and the GPU instances as they are.
    pub mig: Option<MigRequest>,
    /// The tenant the entry's vGPUs are for (`tenant = "acme"`): `apply` asks the tenant
    /// policy before it makes them, as the hook does. `None` checks nothing.
    pub tenant: Option<String>,
    /// The size mode each selected NVIDIA GPU should run in, when the entry says
    /// (`size_mode = "mixed"`) or its types imply one; `None` leaves the mode as it is.
    pub size_mode: Option<SizeModeRequest>,
    /// Where the selection is in the file.
    pub at: Location,
}

/// The size mode an entry asks for, and where the file says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeModeRequest {
    /// The mode.
    pub mode: SizeMode,
    /// Where it is: the `size_mode` value, or the second type it is implied by.
    pub at: Location,
    /// Whether the entry's types imply it, rather than the file writing it.
    pub implied: bool,
}

impl SizeModeRequest {
    /// The mode that `types` imply: mixed-size mode when they name two or more NVIDIA
    /// time-sliced types (`L40S-24Q` and `L40S-12Q`), which share a GPU only in that mode.
    /// `None` for one type, for MIG-backed types, and for ids or names outside NVIDIA's grammar.
    pub fn implied_by(types: &[TypeItem]) -> Option<SizeModeRequest> {
        let second = types.get(1)?;
        let time_sliced = types.iter().all(|item| {
            crate::parse::parse_nvidia_type_name(&item.name).is_some_and(|p| p.mig_slices.is_none())
        });
        time_sliced.then_some(SizeModeRequest {
            mode: SizeMode::Mixed,
            at: second.at,
            implied: true,
        })
    }
}

/// The MIG mode and GPU instances a GPU should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigGeometry {
    /// MIG mode off (`mig = "disabled"`, mig-parted's `mig-enabled: false`).
    Disabled,
    /// MIG mode on, with these GPU instances and no others: profile (`1g.18gb`, as
    /// `nvidia-smi mig -lgip` names it without `MIG `) and count, each count 1 or more. An
    /// empty map is MIG mode on without instances.
    Instances(BTreeMap<String, u32>),
}

/// The MIG geometry an entry asks for, and where the file says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigRequest {
    /// The geometry.
    pub geometry: MigGeometry,
    /// Where it is: the `mig` value, mig-parted's entry, or the first MIG-backed type it is
    /// implied by.
    pub at: Location,
    /// Whether the entry's MIG-backed vGPU types imply it (a vgpu-device-manager entry), rather
    /// than the file writing it.
    pub implied: bool,
}

impl MigGeometry {
    /// The geometry that vGPUs of `types` need, when every type is MIG-backed: one GPU
    /// instance of its profile per vGPU (`7 x H200X-1-18C` needs `7 x 1g.18gb`). NVIDIA's
    /// MIG-backed type name `<GPU>-<slices>-<GB><class>[ME|NOME|MEALL]` gives the profile,
    /// `<slices>g.<GB>gb` with `+me`, `-me` or `+me.all`, so the GPU's memory is not needed.
    /// When every type is time-sliced (`H200X-141C`), MIG mode off: a time-sliced vGPU takes
    /// the whole GPU. The planner drops that on a GPU not in MIG mode. `None` when `types` is
    /// empty or mixes the two, or holds an id or a name outside NVIDIA's grammar.
    pub fn implied_by(types: &[TypeItem]) -> Option<MigGeometry> {
        if types.is_empty() {
            return None;
        }
        let parsed: Option<Vec<_>> = types
            .iter()
            .map(|item| crate::parse::parse_nvidia_type_name(&item.name))
            .collect();
        if parsed?.iter().all(|p| p.mig_slices.is_none()) {
            return Some(MigGeometry::Disabled);
        }
        let mut instances = BTreeMap::new();
        for item in types {
            let backing = crate::parse::mig_backing(&item.name)?;
            let count: &mut u32 = instances.entry(backing.gpu_instance_profile).or_default();
            *count = count.saturating_add(item.count);
        }
        Some(MigGeometry::Instances(instances))
    }
}

/// Which GPUs an entry applies to. Every criterion given must hold (they are ANDed); `all`
/// and the criteria other than `address` consider only GPUs that offer vGPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Every GPU that offers vGPUs.
    pub all: bool,
    /// Whether matching no GPU is expected on some hosts (`optional = true`; every
    /// vgpu-device-manager entry, whose configs serve fleets of mixed hosts): otherwise a
    /// selection with criteria that matches nothing fails `assert` and `apply`.
    pub optional: bool,
    /// The GPU at this address (also one that offers no vGPUs, to be told so).
    pub address: Option<PciAddress>,
    /// The model: the PCI database's name (`AD102GL [L40S]`), its bracketed part (`L40S`), or
    /// the last words of that (`T4` for `[Tesla T4]`), case-insensitively.
    pub model: Option<String>,
    /// The PCI vendor id.
    pub vendor: Option<u16>,
    /// The NUMA node.
    pub numa_node: Option<u32>,
    /// PCI `(vendor, device)` ids, any of which matches (vgpu-device-manager's
    /// `device-filter`); empty for any.
    pub device_ids: Vec<(u16, u16)>,
    /// Positions among the host's NVIDIA GPUs in address order (vgpu-device-manager's
    /// `devices: [0, 1]`); `None` for any.
    pub nvidia_indices: Option<Vec<u32>>,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.all {
            parts.push("all".to_owned());
        }
        if let Some(address) = self.address {
            parts.push(format!("address {address}"));
        }
        if let Some(model) = &self.model {
            parts.push(format!("model {model:?}"));
        }
        if let Some(vendor) = self.vendor {
            parts.push(format!("vendor {vendor:04x}"));
        }
        if let Some(node) = self.numa_node {
            parts.push(format!("numa {node}"));
        }
        if !self.device_ids.is_empty() {
            let ids: Vec<String> = self
                .device_ids
                .iter()
                .map(|(v, d)| format!("{v:04x}:{d:04x}"))
                .collect();
            parts.push(format!("device {}", ids.join("|")));
        }
        if let Some(indices) = &self.nvidia_indices {
            let list: Vec<String> = indices.iter().map(u32::to_string).collect();
            parts.push(format!("devices [{}]", list.join(", ")));
        }
        f.write_str(&parts.join(", "))
    }
}

/// What every GPU of a selection holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    /// Frame-buffer sizes: `"4x12GiB"`, or `"12GiB"` for as many as fit.
    Sizes(Vec<SizeItem>),
    /// Types with counts (`{ "L40S-12Q" = 4 }`); none means no vGPUs.
    Types(Vec<TypeItem>),
    /// A VF count for a plain SR-IOV GPU.
    Vfs {
        /// How many VFs.
        count: u32,
        /// Where the count is in the file.
        at: Location,
    },
    /// Nothing said of vGPUs: a mig-parted entry, which gives MIG geometry only.
    Unchanged,
}

/// One size of a [`Partition::Sizes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeItem {
    /// How many; `None` for as many as fit.
    pub count: Option<u32>,
    /// Frame buffer of each, in MiB.
    pub framebuffer_mib: u64,
    /// Where it is in the file.
    pub at: Location,
}

/// One type of a [`Partition::Types`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeItem {
    /// The type: an id, a name, or a name without its vendor prefix.
    pub name: String,
    /// How many.
    pub count: u32,
    /// Where it is in the file.
    pub at: Location,
}

/// What the VFs of a plain SR-IOV GPU are bound to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VfDriver {
    /// `vfio-pci`: every VF is a vGPU ready for a guest (defined as a binding).
    #[default]
    VfioPci,
    /// The driver the kernel probes (the VFs stay with the host).
    Default,
}

impl DesiredFile {
    /// Parses `text`, read from `path`, as `format`. Every error names the file, the line and
    /// the column, and what was expected there.
    pub fn parse(path: impl Into<PathBuf>, format: Format, text: &str) -> Result<DesiredFile> {
        let path = path.into();
        let configs = match format {
            Format::HostToml => crate::desired::host_toml::parse(&path, text)?,
            Format::DeviceManagerYaml => crate::desired::device_manager::parse(&path, text)?,
            Format::MigPartedYaml => crate::desired::mig_parted::parse(&path, text)?,
        };
        Ok(DesiredFile {
            path,
            format,
            configs,
        })
    }

    /// The config called `name`; without a name, the one called `default`, or the only one.
    pub fn config(&self, name: Option<&str>) -> Result<&Desired> {
        let found = match name {
            Some(name) => self.configs.iter().find(|c| c.name == name),
            None => self.configs.iter().find(|c| c.name == "default").or(
                match self.configs.as_slice() {
                    [only] => Some(only),
                    _ => None,
                },
            ),
        };
        found.ok_or_else(|| Error::NoConfig {
            path: self.path.clone(),
            name: name.map(str::to_owned),
            known: self.configs.iter().map(|c| c.name.clone()).collect(),
        })
    }
}

/// An error at `at` in the file at `path`.
pub(crate) fn error_at(path: &Path, at: Location, message: impl Into<String>) -> Error {
    Error::Desired {
        path: path.to_path_buf(),
        line: at.line,
        column: at.column,
        message: message.into(),
    }
}

/// What a size must look like, for error messages.
pub(crate) const SIZE_EXPECTED: &str =
    "expected a size such as \"12GiB\", \"512MiB\" or \"4x12GiB\" (count x size)";

/// Parses a size: `[<count>x]<number><unit>`, the unit `GiB` or `MiB`, the count at least 1, the
/// size a whole number of MiB above 0 (`1.5GiB` is 1536 MiB).
pub(crate) fn parse_size(text: &str) -> Result<(Option<u32>, u64), String> {
    let text = text.trim();
    let (count, size) = match text.split_once(['x', 'X']) {
        Some((count, size)) => {
            let count = count.trim();
            let parsed = count
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0 && count.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("{count:?} is not a count of 1 or more: {SIZE_EXPECTED}"))?;
            (Some(parsed), size.trim())
        }
        None => (None, text),
    };
    let (number, per_unit) = if let Some(n) = size.strip_suffix("GiB") {
        (n.trim(), 1024u64)
    } else if let Some(n) = size.strip_suffix("MiB") {
        (n.trim(), 1u64)
    } else {
        return Err(format!("{size:?} has no unit GiB or MiB: {SIZE_EXPECTED}"));
    };
    let mib = parse_decimal_mib(number, per_unit)
        .ok_or_else(|| format!("{size:?} is not a whole number of MiB above 0: {SIZE_EXPECTED}"))?;
    Ok((count, mib))
}

/// `number` (digits, optionally with a fraction) times `per_unit` MiB, when that is a whole
/// number of MiB above 0 that fits 48 bits (256 TiB: no GPU holds more).
fn parse_decimal_mib(number: &str, per_unit: u64) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 6 {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let scale = 10u64.pow(fraction.len() as u32);
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let total = whole.checked_mul(scale)?.checked_add(fraction)?;
    let scaled = total.checked_mul(per_unit)?;
    (scaled % scale == 0)
        .then_some(scaled / scale)
        .filter(|mib| *mib > 0 && *mib < (1 << 48))
}

/// Parses a frame-buffer size given by a user: `12GiB`, `512MiB`, `1.5GiB` (a whole number of
/// MiB above 0), in MiB.
pub fn parse_framebuffer(text: &str) -> Result<u64> {
    match parse_size(text) {
        Ok((None, mib)) => Ok(mib),
        _ => Err(Error::bad_name(
            text,
            "a frame-buffer size such as \"12GiB\" or \"512MiB\"",
        )),
    }
}

/// What a GPU-instance profile must look like, for error messages.
pub(crate) const PROFILE_EXPECTED: &str = "expected a GPU-instance profile such as \"1g.18gb\" \
     or \"1g.18gb+me\": <slices>g.<GB>gb, then optionally +me, +me.all, +gfx or -me";

/// Parses a GPU-instance profile name as `nvidia-smi mig -lgip` prints it without `MIG `:
/// `<slices>g.<GB>gb`, slices 1 to 8, GB 1 or more, no leading zeros, then optionally one of
/// the suffixes NVIDIA's profiles have (`+me`, `+me.all`, `+gfx`, `-me`).
pub(crate) fn parse_gpu_instance_profile(text: &str) -> Result<String, String> {
    let bad = || format!("{text:?} is not a GPU-instance profile: {PROFILE_EXPECTED}");
    let base_end = text.find(['+', '-']).unwrap_or(text.len());
    let (base, suffix) = text.split_at(base_end);
    if !matches!(suffix, "" | "+me" | "+me.all" | "+gfx" | "-me") {
        return Err(bad());
    }
    let (slices, gb) = base
        .strip_suffix("gb")
        .and_then(|b| b.split_once("g."))
        .ok_or_else(bad)?;
    let number = |digits: &str| {
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        canonical.then(|| digits.parse::<u32>().ok()).flatten()
    };
    match (number(slices), number(gb)) {
        (Some(1..=8), Some(_)) => Ok(text.to_owned()),
        _ => Err(bad()),
    }
}

/// Parses a series letter: `A`, `B`, `C` or `Q` (either case).
pub(crate) fn parse_series(text: &str) -> Option<char> {
    let mut chars = text.trim().chars();
    let c = chars.next()?.to_ascii_uppercase();
    (chars.next().is_none() && matches!(c, 'A' | 'B' | 'C' | 'Q')).then_some(c)
}

/// Parses a vendor: `nvidia`, `intel`, `amd` (any case) or a PCI vendor id in hex (`10de`,
/// `0x10de`).
pub(crate) fn parse_vendor(text: &str) -> Option<u16> {
    let text = text.trim();
    match text.to_ascii_lowercase().as_str() {
        "nvidia" => return Some(0x10de),
        "intel" => return Some(0x8086),
        "amd" | "ati" => return Some(0x1002),
        _ => {}
    }
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    (hex.len() == 4 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u16::from_str_radix(hex, 16).ok())
        .flatten()
}

#[cfg(test)]
mod tests;
