//! Host discovery: every GPU physical function, its VFs, vGPU types and vGPUs.
//!
//! Discovery reads sysfs only (plus the built-in [`catalog`](crate::catalog) for facts sysfs
//! does not state). A device whose files are broken is still listed, with what could be read,
//! and each problem becomes a [`Warning`] naming the device and the path: one broken device
//! never hides the others.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use uuid::Uuid;

use crate::catalog;
use crate::error::{Error, Result};
use crate::mdev::MdevParent;
use crate::nvidia::NvidiaVf;
use crate::parse::{
    gvtg_type_instances, parse_gvtg_description, parse_nvidia_description, parse_nvidia_type_name,
};
use crate::paths::HostPaths;
use crate::pci::PciAddress;
use crate::pci_device::{PciDevice, SriovCapability};
use crate::sysfs;

/// How a GPU offers virtual GPUs (`shared/REFERENCE.md` §3-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Mediated devices on the physical function (NVIDIA up to Turing, Intel GVT-g).
    Mdev,
    /// Mediated devices on SR-IOV VFs, one per VF (NVIDIA Ampere).
    VfMdev,
    /// NVIDIA's vendor-specific VFIO interface on VFs (Ada, Hopper, Blackwell).
    NvidiaVfio,
    /// Plain SR-IOV VFs assigned whole (Intel Flex, AMD MxGPU), enabled or not.
    Sriov,
    /// No virtualisation interface: the GPU can only be passed through whole.
    None,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Mdev => "mdev",
            Backend::VfMdev => "vf-mdev",
            Backend::NvidiaVfio => "nvidia-vfio",
            Backend::Sriov => "sriov",
            Backend::None => "none",
        })
    }
}

/// What the host has: its GPUs and the problems met while reading them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// Every GPU physical function, by address.
    pub gpus: Vec<Gpu>,
    /// Problems with individual devices; discovery carried on past each.
    pub warnings: Vec<Warning>,
}

/// A problem with one device met during discovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The device (a PCI address, or the sysfs name that failed to parse).
    pub device: String,
    /// The error and its causes, joined by `: `.
    pub message: String,
}

/// A GPU physical function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Its PCI address.
    pub address: PciAddress,
    /// PCI vendor id.
    #[serde(serialize_with = "crate::serde_hex::option_u16")]
    pub vendor_id: Option<u16>,
    /// PCI device id.
    #[serde(serialize_with = "crate::serde_hex::option_u16")]
    pub device_id: Option<u16>,
    /// PCI subsystem vendor id.
    #[serde(serialize_with = "crate::serde_hex::option_u16")]
    pub subsystem_vendor_id: Option<u16>,
    /// PCI subsystem device id.
    #[serde(serialize_with = "crate::serde_hex::option_u16")]
    pub subsystem_device_id: Option<u16>,
    /// 24-bit PCI class code.
    #[serde(serialize_with = "crate::serde_hex::option_class")]
    pub class: Option<u32>,
    /// Vendor name from the PCI ID database.
    pub vendor: Option<String>,
    /// Model name from the PCI ID database.
    pub model: Option<String>,
    /// The bound driver.
    pub driver: Option<String>,
    /// NUMA node; `None` when the kernel does not know (`-1`).
    pub numa_node: Option<u32>,
    /// IOMMU group; `None` without an IOMMU.
    pub iommu_group: Option<u32>,
    /// How it offers vGPUs.
    pub backend: Backend,
    /// Its SR-IOV capability, if it has one.
    pub sriov: Option<SriovCapability>,
    /// Its enabled virtual functions.
    pub vfs: Vec<Vf>,
    /// vGPU types, merged across the PF and its VFs, counted per physical GPU.
    pub types: Vec<VgpuType>,
    /// vGPUs that exist on it now.
    pub vgpus: Vec<Vgpu>,
}

/// An enabled SR-IOV virtual function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vf {
    /// Its PCI address.
    pub address: PciAddress,
    /// The bound driver.
    pub driver: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// The vGPU type it holds: the NVIDIA vendor-VFIO type id, or the type of the mdev on it.
    pub vgpu_type: Option<String>,
}

/// A vGPU type as offered by one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VgpuType {
    /// The id: an mdev type id (`nvidia-222`), or an NVIDIA vendor-VFIO id in decimal (`1145`).
    pub id: String,
    /// Its name, when sysfs (or, for types in use, another VF) states it.
    pub name: Option<String>,
    /// Fixed frame buffer of each vGPU, in MiB.
    pub framebuffer_mib: Option<u64>,
    /// vGPUs of this type the physical GPU holds at most.
    pub max_instances: Option<u32>,
    /// How many more can be created now, on this physical GPU.
    pub available: u32,
    /// How many exist now.
    pub in_use: u32,
    /// The VFIO device API (`vfio-pci`).
    pub device_api: Option<String>,
    /// The raw `description`.
    pub description: Option<String>,
    /// What the parents offer, summed (before the per-GPU cap).
    #[serde(skip)]
    offered: u32,
}

/// An existing vGPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vgpu {
    /// Its handle: the mdev UUID, or the address of the VF that holds it.
    pub id: VgpuHandle,
    /// Its type id.
    #[serde(rename = "type")]
    pub type_id: String,
    /// The device it sits on: the mdev parent (PF or VF), or the PF of a vendor-VFIO VF.
    pub parent: PciAddress,
}

/// How a vGPU is named: a mediated device's UUID or the VF that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VgpuHandle {
    /// A mediated device.
    Mdev(Uuid),
    /// A virtual function (NVIDIA vendor VFIO, or a plain VF).
    Vf(PciAddress),
}

impl fmt::Display for VgpuHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VgpuHandle::Mdev(uuid) => uuid.fmt(f),
            VgpuHandle::Vf(address) => address.fmt(f),
        }
    }
}

impl std::str::FromStr for VgpuHandle {
    type Err = Error;

    /// A mediated device's UUID, or a VF's PCI address.
    fn from_str(text: &str) -> Result<Self> {
        if let Ok(uuid) = Uuid::try_parse(text) {
            return Ok(VgpuHandle::Mdev(uuid));
        }
        text.parse::<PciAddress>()
            .map(VgpuHandle::Vf)
            .map_err(|_| Error::Invalid {
                message: format!("{text:?} is neither a mediated device UUID nor a PCI address"),
            })
    }
}

impl Serialize for VgpuHandle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Inventory {
    /// The GPU named by `name`: a full address (`0000:41:00.0`), or the `bus:device.function`
    /// part when only one GPU has it.
    pub fn gpu(&self, name: &str, paths: &HostPaths) -> Result<&Gpu> {
        if let Ok(address) = name.parse::<PciAddress>() {
            return self
                .gpus
                .iter()
                .find(|g| g.address == address)
                .ok_or_else(|| Error::NoSuchDevice {
                    name: name.to_owned(),
                    path: paths.pci_devices(),
                });
        }
        let matches: Vec<&Gpu> = self
            .gpus
            .iter()
            .filter(|g| {
                let full = g.address.to_string();
                full.split_once(':').is_some_and(|(_, short)| short == name)
            })
            .collect();
        match matches.as_slice() {
            [gpu] => Ok(gpu),
            [] => Err(Error::NoSuchDevice {
                name: name.to_owned(),
                path: paths.pci_devices(),
            }),
            many => Err(Error::Ambiguous {
                name: name.to_owned(),
                candidates: many
                    .iter()
                    .map(|g| g.address.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// The error's message with its causes, as one line.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Some error types print their source in their own message; say it once.
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Collects per-device problems while discovery carries on.
struct Warnings(Vec<Warning>);

impl Warnings {
    fn push(&mut self, device: impl ToString, err: &Error) {
        let warning = Warning {
            device: device.to_string(),
            message: error_chain(err),
        };
        tracing::warn!(device = %warning.device, "{}", warning.message);
        self.0.push(warning);
    }

    /// The value, or `None` after recording the error against `device`.
    fn ok<T>(&mut self, device: PciAddress, result: Result<Option<T>>) -> Option<T> {
        match result {
            Ok(value) => value,
            Err(err) => {
                self.push(device, &err);
                None
            }
        }
    }

    fn list<T>(&mut self, device: PciAddress, result: Result<Vec<T>>) -> Vec<T> {
        self.ok(device, result.map(Some)).unwrap_or_default()
    }
}

fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 16, 0x03 | 0x12)
}

/// Discovers every GPU physical function on the host at `paths`.
///
/// Fails only when the PCI device list itself cannot be read; problems with single devices
/// become [`Inventory::warnings`].
pub fn discover(paths: &HostPaths) -> Result<Inventory> {
    let devices_dir = paths.pci_devices();
    let names = sysfs::dir_names_required(&devices_dir)?;
    let mut warnings = Warnings(Vec::new());
    let mdev_parents: BTreeSet<PciAddress> = sysfs::dir_names(&paths.mdev_bus())?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    let mut gpus = Vec::new();
    for name in names {
        let address = match name.parse::<PciAddress>() {
            Ok(address) => address,
            Err(_) => {
                let err = sysfs::parse_error(&devices_dir.join(&name), &name, "a PCI address");
                warnings.push(&name, &err);
                continue;
            }
        };
        let device = PciDevice::new(paths, address);
        if !device.exists() {
            let err = Error::DanglingLink {
                path: device.path().to_path_buf(),
            };
            warnings.push(address, &err);
            continue;
        }
        if warnings.ok(address, device.physfn()).is_some() {
            continue;
        }
        let class = warnings.ok(address, device.class());
        let is_gpu = class.is_some_and(is_gpu_class) || mdev_parents.contains(&address);
        if is_gpu {
            gpus.push(read_gpu(paths, &device, class, &mut warnings));
        }
    }
    Ok(Inventory {
        gpus,
        warnings: warnings.0,
    })
}

/// Reads one GPU physical function, with the problems met; fails when `address` is not a
/// GPU PF on this host.
pub fn discover_gpu(paths: &HostPaths, address: PciAddress) -> Result<(Gpu, Vec<Warning>)> {
    let device = PciDevice::new(paths, address);
    let not_gpu = || Error::NoSuchDevice {
        name: address.to_string(),
        path: paths.pci_devices(),
    };
    if !device.exists() || device.physfn()?.is_some() {
        return Err(not_gpu());
    }
    let class = device.class()?;
    let parent = sysfs::exists(&paths.mdev_bus().join(address.to_string()));
    if !(class.is_some_and(is_gpu_class) || parent) {
        return Err(not_gpu());
    }
    let mut warnings = Warnings(Vec::new());
    let gpu = read_gpu(paths, &device, class, &mut warnings);
    Ok((gpu, warnings.0))
}

fn read_gpu(
    paths: &HostPaths,
    device: &PciDevice,
    class: Option<u32>,
    warnings: &mut Warnings,
) -> Gpu {
    let address = device.address();
    let vendor_id = warnings.ok(address, device.vendor_id());
    let device_id = warnings.ok(address, device.device_id());
    let (vendor, model) = pci_names(vendor_id, device_id);
    let sriov = warnings.ok(address, device.sriov());
    let vf_addresses = warnings.list(address, device.virtfns());
    let vf_devices: Vec<PciDevice> = vf_addresses
        .into_iter()
        .map(|a| PciDevice::new(paths, a))
        .collect();

    let pf_parent = MdevParent::new(device.path());
    let vf_parents: Vec<(PciAddress, MdevParent)> = vf_devices
        .iter()
        .map(|vf| (vf.address(), MdevParent::new(vf.path())))
        .filter(|(_, parent)| parent.is_parent())
        .collect();
    let nvidia_vfs: Vec<(PciAddress, NvidiaVf)> = vf_devices
        .iter()
        .filter_map(|vf| NvidiaVf::of(vf.path()).map(|n| (vf.address(), n)))
        .collect();
    let backend = if pf_parent.is_parent() {
        Backend::Mdev
    } else if !vf_parents.is_empty() {
        Backend::VfMdev
    } else if !nvidia_vfs.is_empty() {
        Backend::NvidiaVfio
    } else if sriov.as_ref().is_some_and(|s| s.total_vfs > 0) {
        Backend::Sriov
    } else {
        Backend::None
    };

    let (types, vgpus) = match backend {
        Backend::Mdev => mdev_types(&[(address, pf_parent)], warnings),
        Backend::VfMdev => mdev_types(&vf_parents, warnings),
        Backend::NvidiaVfio => nvidia_types(address, &nvidia_vfs, warnings),
        Backend::Sriov | Backend::None => (Vec::new(), Vec::new()),
    };

    let vfs = vf_devices
        .iter()
        .map(|vf| {
            let vf_address = vf.address();
            let vgpu_type = vgpus
                .iter()
                .find(|v| v.id == VgpuHandle::Vf(vf_address) || v.parent == vf_address)
                .map(|v| v.type_id.clone());
            Vf {
                address: vf_address,
                driver: warnings.ok(vf_address, vf.driver()),
                iommu_group: warnings.ok(vf_address, vf.iommu_group()),
                vgpu_type,
            }
        })
        .collect();

    Gpu {
        address,
        vendor_id,
        device_id,
        subsystem_vendor_id: warnings.ok(address, device.subsystem_vendor_id()),
        subsystem_device_id: warnings.ok(address, device.subsystem_device_id()),
        class,
        vendor,
        model,
        driver: warnings.ok(address, device.driver()),
        numa_node: warnings.ok(address, device.numa_node()),
        iommu_group: warnings.ok(address, device.iommu_group()),
        backend,
        sriov,
        vfs,
        types,
        vgpus,
    }
}

fn pci_names(vendor_id: Option<u16>, device_id: Option<u16>) -> (Option<String>, Option<String>) {
    let vendor = vendor_id.and_then(|vid| {
        pci_ids::Vendors::iter()
            .find(|v| v.id() == vid)
            .map(|v| v.name().to_owned())
    });
    let model = vendor_id
        .zip(device_id)
        .and_then(|(vid, pid)| pci_ids::Device::from_vid_pid(vid, pid))
        .map(|d| d.name().to_owned());
    (vendor, model)
}

/// What the parents of one physical GPU say about one type, added up.
#[derive(Default)]
struct TypeTally {
    name: Option<String>,
    description: Option<String>,
    device_api: Option<String>,
    offered: u32,
    in_use: u32,
}

/// Frame buffer and instances per GPU, from the most specific source that states them:
/// the NVIDIA or GVT-g description, the NVIDIA type-name grammar, the GVT-g type id, the
/// catalog.
fn type_facts(id: &str, tally: &TypeTally) -> (Option<u64>, Option<u32>) {
    let nvidia = tally
        .description
        .as_deref()
        .and_then(|d| parse_nvidia_description(d).ok());
    let gvtg = tally
        .description
        .as_deref()
        .and_then(|d| parse_gvtg_description(d).ok());
    let known = tally.name.as_deref().and_then(catalog::by_name);
    let framebuffer = nvidia
        .as_ref()
        .and_then(|d| d.framebuffer_mib)
        .or_else(|| gvtg.as_ref().and_then(|d| d.framebuffer_mib()))
        .or_else(|| {
            tally
                .name
                .as_deref()
                .and_then(parse_nvidia_type_name)
                .map(|n| n.framebuffer_mib)
        })
        .or_else(|| known.map(|k| k.framebuffer_mib));
    let max = nvidia
        .and_then(|d| d.max_instance)
        .or_else(|| gvtg_type_instances(id))
        .or_else(|| known.map(|k| k.max_instances));
    (framebuffer, max)
}

fn finish_type(id: String, tally: TypeTally) -> VgpuType {
    let (framebuffer_mib, max_instances) = type_facts(&id, &tally);
    // Parents each report what they could take; the physical GPU can take no more than its
    // per-GPU maximum less what it already holds (an A40's 32 VFs still hold 24 A40-2Q).
    let mut ty = VgpuType {
        id,
        name: tally.name,
        framebuffer_mib,
        max_instances,
        available: 0,
        in_use: tally.in_use,
        device_api: tally.device_api,
        description: tally.description,
        offered: tally.offered,
    };
    ty.recount();
    ty
}

/// Warns about a description in a known vendor format with a field that does not parse, so
/// that a capacity figure silently missing from it does not go unnoticed.
fn check_description(
    text: &str,
    path: &std::path::Path,
    parent: PciAddress,
    warnings: &mut Warnings,
) {
    let failed = match (parse_nvidia_description(text), parse_gvtg_description(text)) {
        (Err(err @ crate::parse::ParseError::Field { .. }), _)
        | (_, Err(err @ crate::parse::ParseError::Field { .. })) => err,
        _ => return,
    };
    warnings.push(
        parent,
        &Error::Format {
            path: path.to_path_buf(),
            source: failed,
        },
    );
}

impl VgpuType {
    /// Recomputes `available` from what the parents offer, capped at `max_instances` less the
    /// vGPUs in use (an A40's 32 VFs still hold 24 A40-2Q).
    pub fn recount(&mut self) {
        self.available = match self.max_instances {
            Some(max) => self.offered.min(max.saturating_sub(self.in_use)),
            None => self.offered,
        };
    }
}

/// Orders `nvidia-9` before `nvidia-10`, and `1145` before `2164`.
fn natural_key(id: &str) -> (String, u64, String) {
    let stem = id.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = id[stem.len()..].parse().unwrap_or(0);
    (stem.to_owned(), number, id.to_owned())
}

fn sorted_types(tallies: BTreeMap<String, TypeTally>) -> Vec<VgpuType> {
    let mut types: Vec<VgpuType> = tallies
        .into_iter()
        .map(|(id, t)| finish_type(id, t))
        .collect();
    types.sort_by_cached_key(|t| natural_key(&t.id));
    types
}

fn mdev_types(
    parents: &[(PciAddress, MdevParent)],
    warnings: &mut Warnings,
) -> (Vec<VgpuType>, Vec<Vgpu>) {
    let mut tallies: BTreeMap<String, TypeTally> = BTreeMap::new();
    let mut vgpus = Vec::new();
    for (address, parent) in parents {
        for mdev_type in warnings.list(*address, parent.types()) {
            let tally = tallies.entry(mdev_type.id().to_owned()).or_default();
            if tally.name.is_none() {
                tally.name = warnings.ok(*address, mdev_type.name());
            }
            if tally.description.is_none() {
                tally.description = warnings.ok(*address, mdev_type.description());
                if let Some(text) = &tally.description {
                    check_description(
                        text,
                        &mdev_type.path().join("description"),
                        *address,
                        warnings,
                    );
                }
            }
            if tally.device_api.is_none() {
                tally.device_api = warnings.ok(*address, mdev_type.device_api());
            }
            let available = match mdev_type.available_instances() {
                Ok(Some(n)) => n,
                Ok(None) => {
                    warnings.push(
                        *address,
                        &sysfs::missing(&mdev_type.path().join("available_instances")),
                    );
                    0
                }
                Err(err) => {
                    warnings.push(*address, &err);
                    0
                }
            };
            tally.offered = tally.offered.saturating_add(available);
            let count = warnings
                .ok(*address, mdev_type.device_count().map(Some))
                .unwrap_or(0);
            tally.in_use = tally.in_use.saturating_add(count);
        }
        for mdev in warnings.list(*address, parent.devices()) {
            vgpus.push(Vgpu {
                id: VgpuHandle::Mdev(mdev.uuid),
                type_id: mdev.type_id,
                parent: *address,
            });
        }
    }
    vgpus.sort_by_key(|v| (v.parent, v.id));
    (sorted_types(tallies), vgpus)
}

fn nvidia_types(
    pf: PciAddress,
    vfs: &[(PciAddress, NvidiaVf)],
    warnings: &mut Warnings,
) -> (Vec<VgpuType>, Vec<Vgpu>) {
    let mut tallies: BTreeMap<String, TypeTally> = BTreeMap::new();
    let mut vgpus = Vec::new();
    for (address, vf) in vfs {
        match warnings.ok(*address, vf.current_type()) {
            Some(current) => {
                let id = current.to_string();
                tallies.entry(id.clone()).or_default().in_use += 1;
                vgpus.push(Vgpu {
                    id: VgpuHandle::Vf(*address),
                    type_id: id,
                    parent: pf,
                });
            }
            None => {
                for creatable in warnings.list(*address, vf.creatable_types()) {
                    let tally = tallies.entry(creatable.id.to_string()).or_default();
                    tally.name.get_or_insert(creatable.name);
                    tally.offered += 1;
                }
            }
        }
    }
    (sorted_types(tallies), vgpus)
}
