//! `vgpu-model`: the model of a GPU virtualisation host as plain data, and every pure parser of
//! the kernel's and vendors' text. Nothing here reads the host, prints, or calls a library.
//!
//! - The inventory discovery reports: [`Inventory`], [`Gpu`], [`Vf`], [`VgpuType`] counted per
//!   physical GPU, [`Vgpu`]; [`pci::PciAddress`]; what changed between two ([`delta`]).
//! - What NVML says of a GPU ([`nvml`]), as data.
//! - Persistent definitions as data ([`definition`]): what `restore` makes again.
//! - The built-in type catalog ([`catalog`]) for facts sysfs does not state.
//! - The usage ledger's intervals and monthly summaries ([`usage`]).
//! - The parsers of sysfs text and vGPU type names ([`parse`]), and of names a caller gives
//!   ([`name`]).
//!
//! `vgpu-plan` plans over this model; `vgpu-core` reads it from a host.

#![forbid(unsafe_code)]

pub mod catalog;
pub mod checks;
pub mod definition;
pub mod delta;
pub mod driver_params;
pub mod holder;
pub mod kind;
pub mod limit;
pub mod location;
pub mod migration;
pub mod name;
pub mod nvml;
pub mod parse;
pub mod pci;
pub mod policy;
pub mod serde_hex;
pub mod sizes;
pub mod usage;

use std::fmt;

use serde::Serialize;
use uuid::Uuid;

use pci::{PciAddress, SriovCapability};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR_ID: u16 = 0x10de;
/// The type name that asks for a whole plain SR-IOV VF on a GPU whose backend is `sriov`.
pub const PLAIN_VF_TYPE: &str = "vf";
/// How a GPU offers virtual GPUs (see `docs/host-interfaces.md`).
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
    /// NVIDIA: its size mode for time-sliced vGPUs, where NVML reports one (a GPU that
    /// supports mixed-size mode); `None` elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_mode: Option<sizes::SizeMode>,
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
    /// Its share of the GPU's local memory in MiB, where the PF's driver provisions VFs with
    /// quotas (Intel's SR-IOV: `drm/card<N>/iov/vf<M>/gt0/lmem_quota`); `None` elsewhere.
    pub memory_mib: Option<u64>,
}

/// A vGPU type as offered by one physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VgpuType {
    /// The id: an mdev type id (`nvidia-222`), or an NVIDIA vendor-VFIO id in decimal (`1145`).
    pub id: String,
    /// Its name, when one of [`NameSource`]'s sources states it.
    pub name: Option<String>,
    /// Where the name (and the frame buffer and instances that follow from it) came from;
    /// `None` without a name.
    pub name_source: Option<NameSource>,
    /// Fixed frame buffer of each vGPU, in MiB.
    pub framebuffer_mib: Option<u64>,
    /// vGPUs of this type the physical GPU holds at most.
    pub max_instances: Option<u32>,
    /// How many more can be created now, on this physical GPU: the one answer of
    /// `vgpu-plan`'s `room` once the host state is settled
    /// (`HostState::settle`); what the parents offer, capped at
    /// `max_instances`, straight from discovery.
    pub available: u32,
    /// What keeps `available` from being higher; `None` where discovery alone counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<limit::Limit>,
    /// How many exist now.
    pub in_use: u32,
    /// The VFIO device API (`vfio-pci`).
    pub device_api: Option<String>,
    /// The raw `description`.
    pub description: Option<String>,
    /// For a MIG-backed type (its name `<GPU>-<slices>-<GB><class>…`), the GPU instance it
    /// needs; `None` for a time-sliced type or a type without a name.
    pub mig: Option<MigBacking>,
    /// What the parents offer, summed (before the per-GPU cap).
    #[serde(skip)]
    pub offered: u32,
    /// On a GPU in mixed-size mode: the slots of the placement region one vGPU takes (its
    /// frame buffer in GiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_size: Option<u32>,
    /// On a GPU in mixed-size mode: the placement ids a new vGPU of the type can take now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placements: Option<Vec<u32>>,
}

/// Where a vGPU type's name comes from, most trusted first: the GPU's own offer, what `vgpu`
/// recorded when it set the type, NVML, the offer `vgpu` recorded earlier, the built-in
/// catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NameSource {
    /// Sysfs: the type's `name`, or a VF's `creatable_vgpu_types`.
    Sysfs,
    /// The definition `vgpu` wrote when it set the type.
    Definition,
    /// NVML's supported-type list.
    Nvml,
    /// An offer the GPU's sysfs made earlier under the same driver version, as `vgpu`
    /// recorded it: a type the GPU supports that sysfs hides while other vGPUs run.
    Recorded,
    /// The built-in catalog, by type id and GPU model; ids can change between drivers.
    Catalog,
}

impl fmt::Display for NameSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameSource::Sysfs => "sysfs",
            NameSource::Definition => "definition",
            NameSource::Nvml => "nvml",
            NameSource::Recorded => "recorded",
            NameSource::Catalog => "catalog",
        })
    }
}

/// What a MIG-backed vGPU type runs on: a GPU instance of one profile (NVIDIA Virtual GPU
/// Software User Guide, "MIG-Backed NVIDIA vGPU").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigBacking {
    /// Compute slices of the GPU instance (`H200X-1-18C`: 1).
    pub slices: u32,
    /// The GPU-instance profile, as NVML and `nvidia-smi mig -lgip` name it: `1g.18gb`, or
    /// with a media-engine suffix (`+me`, `-me`, `+me.all`).
    pub gpu_instance_profile: String,
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
    /// On a GPU in mixed-size mode: its placement id (its first 1-GiB slot), where it is
    /// known: NVML's, a VF's `nvidia/vgpu_params`, else its definition's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<u32>,
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

impl Serialize for VgpuHandle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for VgpuHandle {
    /// The text [`Serialize`] writes: a UUID or a PCI address.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Gpu {
    /// A GPU of which only the address and the backend are known: no ids, driver, NUMA node
    /// or IOMMU group, no VFs, types or vGPUs. The start of a GPU built by hand (an embedder's
    /// inventory, a test); set the fields that matter after.
    pub fn new(address: PciAddress, backend: Backend) -> Self {
        Gpu {
            size_mode: None,
            address,
            vendor_id: None,
            device_id: None,
            subsystem_vendor_id: None,
            subsystem_device_id: None,
            class: None,
            vendor: None,
            model: None,
            driver: None,
            numa_node: None,
            iommu_group: None,
            backend,
            sriov: None,
            vfs: Vec::new(),
            types: Vec::new(),
            vgpus: Vec::new(),
        }
    }

    /// The VFs of a plain SR-IOV GPU ([`Backend::Sriov`]) that are bound to `vfio-pci`: each
    /// is given to a guest whole, as a vGPU of type `vf` (discovery lists each in
    /// [`Gpu::vgpus`] too).
    pub fn guest_vfs(&self) -> impl Iterator<Item = &Vf> {
        self.vfs.iter().filter(move |vf| {
            self.backend == Backend::Sriov && vf.driver.as_deref() == Some("vfio-pci")
        })
    }
}

/// How human output names a type: its name (`GRID T4-4Q`, `NVIDIA L40S-12Q`) where it has one,
/// its id (`i915-GVTg_V5_4`) otherwise. Every command that takes a type (`--type`, `types =`
/// in host.toml) takes the name, so the name is what an operator types back. Tables of types
/// and JSON show the id beside it.
pub fn type_label<'a>(id: &'a str, name: Option<&'a str>) -> &'a str {
    name.unwrap_or(id)
}

/// The NVML vGPU type id that a type id of sysfs names: `nvidia-231` (an mdev type) and `1153`
/// (a type of NVIDIA's vendor-specific VFIO) are NVML's types 231 and 1153. `None` for other
/// vendors' types: an mdev type id is `<driver>-<name>` (the kernel's `vfio-mediated-device`
/// documentation), so a bare number is only ever NVIDIA's `creatable_vgpu_types`.
pub fn nvml_type_id(id: &str) -> Option<u32> {
    id.strip_prefix("nvidia-").unwrap_or(id).parse().ok()
}

impl VgpuType {
    /// This type as human output names it ([`type_label`]).
    pub fn label(&self) -> &str {
        type_label(&self.id, self.name.as_deref())
    }

    /// Recomputes `available` from what the parents offer, capped at `max_instances` less the
    /// vGPUs in use (an A40's 32 VFs still hold 24 A40-2Q).
    pub fn recount(&mut self) {
        self.available = match self.max_instances {
            Some(max) => self.offered.min(max.saturating_sub(self.in_use)),
            None => self.offered,
        };
    }
}

/// The order types are listed in: `nvidia-9` before `nvidia-10`, `1145` before `2164`.
pub fn type_order(id: &str) -> (String, u64, String) {
    let stem = id.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = id[stem.len()..].parse().unwrap_or(0);
    (stem.to_owned(), number, id.to_owned())
}

/// Whether `driver` holds a device for assignment to a guest rather than for the host:
/// `vfio-pci`, a vfio variant driver (`mlx5_vfio_pci`, `xe-vfio-pci`...), or `pci-stub`.
#[inline]
pub fn is_passthrough_driver(driver: &str) -> bool {
    driver == "pci-stub"
        || driver == "vfio-pci"
        || driver.ends_with("vfio_pci")
        || driver.ends_with("vfio-pci")
}

/// Why [`Inventory::gpu`] found no one GPU by a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuLookupError {
    /// No GPU has that address.
    #[error("no GPU {name}")]
    NotFound {
        /// The name given.
        name: String,
    },
    /// A short address (`bus:device.function`) that GPUs in more than one PCI domain have.
    #[error("{name} names more than one GPU")]
    Ambiguous {
        /// The name given.
        name: String,
        /// The GPUs it could mean.
        candidates: Vec<PciAddress>,
    },
}

impl Inventory {
    /// The name of type `type_id` on the GPU at `device`, or on the GPU `device` is a VF of
    /// (an mdev parent may be either); `None` when no source names it. In a settled host state
    /// (`HostState::settle`) this is the type's one identity, so every command that names a
    /// type asks here.
    pub fn type_name(&self, device: PciAddress, type_id: &str) -> Option<&str> {
        self.gpus
            .iter()
            .find(|g| g.address == device || g.vfs.iter().any(|v| v.address == device))
            .and_then(|g| g.types.iter().find(|t| t.id == type_id))
            .and_then(|t| t.name.as_deref())
    }

    /// The GPU named by `name`: a full address (`0000:41:00.0`), or the `bus:device.function`
    /// part when only one GPU has it.
    pub fn gpu(&self, name: &str) -> Result<&Gpu, GpuLookupError> {
        if let Ok(address) = name.parse::<PciAddress>() {
            return self
                .gpus
                .iter()
                .find(|g| g.address == address)
                .ok_or_else(|| GpuLookupError::NotFound {
                    name: name.to_owned(),
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
            [] => Err(GpuLookupError::NotFound {
                name: name.to_owned(),
            }),
            many => Err(GpuLookupError::Ambiguous {
                name: name.to_owned(),
                candidates: many.iter().map(|g| g.address).collect(),
            }),
        }
    }
}

/// What a caller can do about an error: the few categories that decide a retry, another
/// GPU, or a message to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// What was named does not exist (a GPU, a vGPU, a type, a definition).
    NotFound,
    /// The host's state or its definitions contradict the request (exists already, defined
    /// already, not enabled yet): change the state first.
    Conflict,
    /// No room for the vGPUs asked for: try another GPU or type.
    NoCapacity,
    /// In use or locked right now: retry later, or free it first.
    Busy,
    /// The kernel refused the change as not permitted.
    Permission,
    /// The request itself is malformed or cannot apply to that device.
    BadInput,
    /// The host misbehaved: unreadable or unexpected sysfs, a failed write, a timeout.
    HostFault,
    /// A signal stopped the command; what it had done was undone.
    Interrupted,
    /// The tenant policy (`tenants.toml`) forbids it: another GPU, or another tenant's quota.
    Policy,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::NotFound => "not-found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::NoCapacity => "no-capacity",
            ErrorKind::Busy => "busy",
            ErrorKind::Permission => "permission",
            ErrorKind::BadInput => "bad-input",
            ErrorKind::HostFault => "host-fault",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Policy => "policy",
        })
    }
}
