//! Creating and destroying vGPUs, one kernel operation at a time, on every interface:
//! a mediated device on the PF or on a VF, an NVIDIA vendor-VFIO type on a VF, or a plain VF
//! bound to `vfio-pci`.
//!
//! Each function checks what it can before writing (the type exists on that parent, there is
//! capacity), performs one operation, and verifies the result. Choosing where a vGPU goes is
//! [`place`]'s job: first fit, in VF order.

use serde::Serialize;
use uuid::Uuid;

use crate::driver;
use crate::error::{Error, Result};
use crate::inventory::{Backend, Gpu, VgpuHandle, VgpuType};
use crate::mdev::MdevParent;
use crate::nvidia::NvidiaVf;
use crate::parse::strip_vendor_prefix;
use crate::paths::HostPaths;
use crate::pci::PciAddress;
use crate::pci_device::PciDevice;
use crate::sysfs::{self, write_attr};

/// NVIDIA's PCI vendor id.
const NVIDIA: u16 = 0x10de;

/// The type name that asks for a whole plain SR-IOV VF on a GPU whose backend is `sriov`.
pub const PLAIN_VF_TYPE: &str = "vf";

/// Checks a type id or name given by a user: 1 to 64 characters of letters, digits, space,
/// `_`, `-`, `.`, and not a path.
pub fn validate_type(text: &str) -> Result<()> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && !text.contains("..")
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            message: format!("{text:?} is not a vGPU type id or name"),
        })
    }
}

/// The type of `gpu` that `wanted` names: its id (`nvidia-231`, `1151`), its name
/// (`GRID T4-2Q`), or its name without the vendor prefix (`T4-2Q`), case-insensitively.
pub fn resolve_type<'a>(gpu: &'a Gpu, wanted: &str) -> Result<&'a VgpuType> {
    validate_type(wanted)?;
    let bare = strip_vendor_prefix(wanted);
    let found = gpu.types.iter().find(|t| t.id == wanted).or_else(|| {
        gpu.types.iter().find(|t| {
            t.name
                .as_deref()
                .is_some_and(|n| n == wanted || strip_vendor_prefix(n).eq_ignore_ascii_case(bare))
        })
    });
    found.ok_or_else(|| {
        let offered: Vec<String> = gpu
            .types
            .iter()
            .map(|t| match &t.name {
                Some(name) => format!("{} ({name})", t.id),
                None => t.id.clone(),
            })
            .collect();
        Error::Invalid {
            message: format!(
                "GPU {} offers no vGPU type {wanted:?}; it offers: {}",
                gpu.address,
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
        }
    })
}

fn no_capacity(paths: &HostPaths, gpu: PciAddress, type_id: &str) -> Error {
    Error::NoCapacity {
        gpu,
        type_id: type_id.to_owned(),
        path: paths.pci_device(&gpu),
    }
}

/// Where a new vGPU goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Placement {
    /// A mediated device of `type_id` on `parent` (the PF, or a VF).
    Mdev {
        /// The mdev parent.
        parent: PciAddress,
        /// The mdev type id.
        type_id: String,
    },
    /// An NVIDIA vendor-VFIO type on a VF.
    VendorVf {
        /// The VF.
        vf: PciAddress,
        /// The numeric type id.
        type_id: u32,
    },
    /// A whole VF bound to `vfio-pci`.
    PlainVf {
        /// The VF.
        vf: PciAddress,
    },
}

impl Placement {
    /// The PCI device it sits on: the mdev parent (PF or VF), or the VF.
    pub fn device(&self) -> Option<PciAddress> {
        match self {
            Placement::Mdev { parent, .. } => Some(*parent),
            Placement::VendorVf { vf, .. } | Placement::PlainVf { vf } => Some(*vf),
        }
    }
}

/// Chooses where a vGPU of type `wanted` goes on `gpu`: the PF for mdev on the PF, otherwise
/// the first VF (in `virtfnN` order) that can take it. Fails when the GPU has no capacity left.
pub fn place(paths: &HostPaths, gpu: &Gpu, wanted: &str) -> Result<Placement> {
    place_excluding(paths, gpu, wanted, &[])
}

/// Like [`place`], but never on one of the VFs in `reserved` (VFs that definitions hold for
/// vGPUs that are not running now).
pub fn place_excluding(
    paths: &HostPaths,
    gpu: &Gpu,
    wanted: &str,
    reserved: &[PciAddress],
) -> Result<Placement> {
    let type_id = placement_type(gpu, wanted)?;
    if gpu.backend == Backend::Sriov && gpu.vfs.is_empty() {
        return Err(Error::Invalid {
            message: format!(
                "GPU {} has no VFs enabled: enable them first (vgpuctl sriov)",
                gpu.address
            ),
        });
    }
    let available = gpu
        .types
        .iter()
        .find(|t| t.id == type_id)
        .map(|t| t.available);
    if available == Some(0) {
        return Err(no_capacity(paths, gpu.address, &type_id));
    }
    for placement in candidates(gpu, &type_id)? {
        if placement.device().is_some_and(|vf| reserved.contains(&vf)) {
            continue;
        }
        if fits(paths, &placement)? {
            return Ok(placement);
        }
    }
    Err(no_capacity(paths, gpu.address, &type_id))
}

/// The type id a vGPU of `wanted` has on `gpu`: the id of the type `wanted` names, or
/// [`PLAIN_VF_TYPE`] for a plain SR-IOV GPU (which must be asked for by that name).
pub fn placement_type(gpu: &Gpu, wanted: &str) -> Result<String> {
    match gpu.backend {
        Backend::Sriov if gpu.vendor_id == Some(NVIDIA) => Err(Error::Invalid {
            message: format!(
                "NVIDIA GPU {} shows no vGPU types: enable its VFs (vgpuctl sriov {} --vfs N) with the NVIDIA vGPU manager running",
                gpu.address, gpu.address
            ),
        }),
        Backend::Sriov if wanted != PLAIN_VF_TYPE => Err(Error::Invalid {
            message: format!(
                "GPU {} offers whole SR-IOV VFs: use type {PLAIN_VF_TYPE:?}, not {wanted:?}",
                gpu.address
            ),
        }),
        Backend::Sriov => Ok(PLAIN_VF_TYPE.to_owned()),
        Backend::None => Err(Error::Invalid {
            message: format!(
                "GPU {} offers no vGPUs (backend {})",
                gpu.address, gpu.backend
            ),
        }),
        Backend::Mdev | Backend::VfMdev | Backend::NvidiaVfio => {
            Ok(resolve_type(gpu, wanted)?.id.clone())
        }
    }
}

/// Every place a vGPU of `type_id` could go on `gpu`, in the order they are tried: the PF for
/// mdev on the PF, otherwise each VF in `virtfnN` order.
pub fn candidates(gpu: &Gpu, type_id: &str) -> Result<Vec<Placement>> {
    let mdev_on = |parent: PciAddress| Placement::Mdev {
        parent,
        type_id: type_id.to_owned(),
    };
    Ok(match gpu.backend {
        Backend::Mdev => vec![mdev_on(gpu.address)],
        Backend::VfMdev => gpu.vfs.iter().map(|vf| mdev_on(vf.address)).collect(),
        Backend::NvidiaVfio => {
            let type_id = parse_vendor_type_id(type_id)?;
            gpu.vfs
                .iter()
                .map(|vf| Placement::VendorVf {
                    vf: vf.address,
                    type_id,
                })
                .collect()
        }
        Backend::Sriov => gpu
            .vfs
            .iter()
            .map(|vf| Placement::PlainVf { vf: vf.address })
            .collect(),
        Backend::None => Vec::new(),
    })
}

/// Whether `placement` can take one more vGPU now, as the kernel shows it: the mdev type has
/// an instance available on that parent; the vendor VF is free and lists the type as
/// creatable; the plain VF is not held by a passthrough driver.
pub fn fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    match placement {
        Placement::Mdev { parent, type_id } => {
            let parent = MdevParent::new(paths.pci_device(parent));
            match parent.types()?.into_iter().find(|t| t.id() == type_id) {
                Some(t) => Ok(t.available_instances()?.unwrap_or(0) > 0),
                None => Ok(false),
            }
        }
        Placement::VendorVf { vf, type_id } => match NvidiaVf::of(&paths.pci_device(vf)) {
            Some(nvidia) => Ok(nvidia.current_type()?.is_none()
                && nvidia.creatable_types()?.iter().any(|c| c.id == *type_id)),
            None => Ok(false),
        },
        Placement::PlainVf { vf } => Ok(!PciDevice::new(paths, *vf)
            .driver()?
            .as_deref()
            .is_some_and(driver::is_passthrough_driver)),
    }
}

/// Carries out `placement`: creates the mediated device (named `uuid`, or a new random UUID),
/// sets the vendor type, or binds the plain VF for a guest. Returns the vGPU's handle and,
/// for a plain VF, the driver it had.
pub fn realize(
    paths: &HostPaths,
    placement: &Placement,
    uuid: Option<Uuid>,
) -> Result<(VgpuHandle, Option<String>)> {
    match placement {
        Placement::Mdev { parent, type_id } => {
            let uuid = uuid.unwrap_or_else(Uuid::new_v4);
            create_mdev(paths, *parent, type_id, uuid)?;
            Ok((VgpuHandle::Mdev(uuid), None))
        }
        Placement::VendorVf { .. } | Placement::PlainVf { .. } if uuid.is_some() => {
            Err(Error::Invalid {
                message: format!(
                    "the vGPU on {} is named by its VF: a UUID does not apply",
                    placement
                        .device()
                        .map_or_else(String::new, |d| d.to_string())
                ),
            })
        }
        Placement::VendorVf { vf, type_id } => {
            set_vf_type(paths, *vf, *type_id)?;
            Ok((VgpuHandle::Vf(*vf), None))
        }
        Placement::PlainVf { vf } => Ok((VgpuHandle::Vf(*vf), bind_plain_vf(paths, *vf)?)),
    }
}

fn parse_vendor_type_id(id: &str) -> Result<u32> {
    id.parse::<u32>()
        .ok()
        .filter(|n| *n != 0)
        .ok_or_else(|| Error::Invalid {
            message: format!("{id:?} is not an NVIDIA vendor-VFIO type id"),
        })
}

/// Creates mediated device `uuid` of `type_id` on `parent`, after checking the type exists
/// there and has an instance available, and verifies that the device appeared.
pub fn create_mdev(paths: &HostPaths, parent: PciAddress, type_id: &str, uuid: Uuid) -> Result<()> {
    validate_type(type_id)?;
    let parent_dir = paths.pci_device(&parent);
    let mdev_parent = MdevParent::new(&parent_dir);
    if !mdev_parent.is_parent() {
        return Err(Error::Invalid {
            message: format!("{parent} is not a mediated-device parent"),
        });
    }
    let Some(mdev_type) = mdev_parent.types()?.into_iter().find(|t| t.id() == type_id) else {
        return Err(Error::Invalid {
            message: format!("{parent} offers no mdev type {type_id}"),
        });
    };
    if sysfs::exists(&paths.mdev_devices().join(uuid.to_string())) {
        return Err(Error::Invalid {
            message: format!("mediated device {uuid} already exists"),
        });
    }
    if mdev_type.available_instances()?.unwrap_or(0) == 0 {
        return Err(no_capacity(paths, parent, type_id));
    }
    write_attr(&mdev_type.path().join("create"), &uuid.to_string())?;
    let created = parent_dir.join(uuid.to_string());
    if !sysfs::is_dir(&created) {
        return Err(Error::Missing { path: created });
    }
    Ok(())
}

/// The parent of mediated device `uuid`; `None` when it does not exist.
pub fn mdev_parent(paths: &HostPaths, uuid: Uuid) -> Result<Option<PciAddress>> {
    let link = paths.mdev_devices().join(uuid.to_string());
    let target = match std::fs::canonicalize(&link) {
        Ok(target) => target,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Read { path: link, source }),
    };
    let parent = target
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    match parent.as_deref().map(str::parse::<PciAddress>) {
        Some(Ok(address)) => Ok(Some(address)),
        _ => Err(sysfs::parse_error(
            &link,
            &target.to_string_lossy(),
            "a mediated device under a PCI parent",
        )),
    }
}

/// Removes mediated device `uuid`; returns its parent.
pub fn remove_mdev(paths: &HostPaths, uuid: Uuid) -> Result<PciAddress> {
    let Some(parent) = mdev_parent(paths, uuid)? else {
        return Err(Error::NoSuchDevice {
            name: uuid.to_string(),
            path: paths.mdev_devices(),
        });
    };
    let dir = paths.pci_device(&parent).join(uuid.to_string());
    write_attr(&dir.join("remove"), "1")?;
    if sysfs::exists(&dir) {
        return Err(Error::Invalid {
            message: format!("mediated device {uuid} is still present after remove"),
        });
    }
    Ok(parent)
}

fn vendor_vf(paths: &HostPaths, vf: PciAddress) -> Result<NvidiaVf> {
    NvidiaVf::of(&paths.pci_device(&vf)).ok_or_else(|| Error::Invalid {
        message: format!("{vf} is not an NVIDIA vendor-VFIO VF (no nvidia/ directory)"),
    })
}

/// Creates a vGPU of NVIDIA vendor-VFIO type `type_id` on `vf` (`current_vgpu_type`), after
/// checking the VF is free and lists the type as creatable.
pub fn set_vf_type(paths: &HostPaths, vf: PciAddress, type_id: u32) -> Result<()> {
    let nvidia = vendor_vf(paths, vf)?;
    if let Some(current) = nvidia.current_type()? {
        return Err(Error::Invalid {
            message: format!("{vf} already holds vGPU type {current}"),
        });
    }
    if !nvidia.creatable_types()?.iter().any(|c| c.id == type_id) {
        return Err(Error::Invalid {
            message: format!(
                "{vf} cannot create vGPU type {type_id} now (not in creatable_vgpu_types)"
            ),
        });
    }
    write_attr(
        &nvidia.path().join("current_vgpu_type"),
        &type_id.to_string(),
    )?;
    match nvidia.current_type()? {
        Some(now) if now == type_id => Ok(()),
        other => Err(Error::Invalid {
            message: format!(
                "{vf} reads type {} after writing {type_id}",
                other.unwrap_or(0)
            ),
        }),
    }
}

/// Destroys the vendor-VFIO vGPU on `vf` (writes `0`); returns the type it held.
pub fn clear_vf_type(paths: &HostPaths, vf: PciAddress) -> Result<u32> {
    let nvidia = vendor_vf(paths, vf)?;
    let Some(current) = nvidia.current_type()? else {
        return Err(Error::Invalid {
            message: format!("{vf} holds no vGPU"),
        });
    };
    write_attr(&nvidia.path().join("current_vgpu_type"), "0")?;
    Ok(current)
}

/// A vGPU that was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    /// Its handle.
    pub id: VgpuHandle,
    /// The physical GPU.
    pub gpu: PciAddress,
    /// Where it went.
    pub placement: Placement,
    /// For a plain VF, the driver it had before `vfio-pci`.
    pub previous_driver: Option<String>,
}

/// Creates a vGPU of type `wanted` on `gpu` wherever [`place`] puts it. `uuid` names a
/// mediated device (a random one is made when `None`); it is refused for VF-based vGPUs.
pub fn create(paths: &HostPaths, gpu: &Gpu, wanted: &str, uuid: Option<Uuid>) -> Result<Created> {
    let placement = place(paths, gpu, wanted)?;
    let (id, previous_driver) = realize(paths, &placement, uuid)?;
    Ok(Created {
        id,
        gpu: gpu.address,
        placement,
        previous_driver,
    })
}

/// Binds a plain VF to `vfio-pci` for a guest and records the driver it had; returns that
/// driver. If the record cannot be written, the VF goes back to that driver.
pub fn bind_plain_vf(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    let previous = driver::bind(paths, vf, "vfio-pci")?;
    if let Err(err) = driver::remember_previous(paths, vf, previous.as_deref()) {
        if let Err(undo) = driver::restore(paths, vf, previous.as_deref()) {
            tracing::error!(%vf, "cannot give the VF back after failing to record its driver: {undo}");
        }
        return Err(err);
    }
    Ok(previous)
}

/// Gives a plain VF back to the driver recorded when it was bound for a guest, or, with no
/// record, to `fallback` when given, else to its default driver.
pub fn release_plain_vf(
    paths: &HostPaths,
    vf: PciAddress,
    fallback: Option<Option<&str>>,
) -> Result<()> {
    match driver::recalled_previous(paths, vf)? {
        Some(previous) => driver::restore(paths, vf, previous.as_deref())?,
        None => match fallback {
            Some(previous) => driver::restore(paths, vf, previous)?,
            None => driver::reprobe(paths, vf).map(|_| ())?,
        },
    }
    driver::forget_previous(paths, vf)
}

/// What kind of vGPU a handle names now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Running {
    /// A mediated device on `parent`.
    Mdev {
        /// Its parent.
        parent: PciAddress,
    },
    /// An NVIDIA vendor-VFIO vGPU of `type_id` on the VF.
    VendorVf {
        /// Its type.
        type_id: u32,
    },
    /// A VF bound to `vfio-pci`.
    PlainVf,
}

/// What `handle` names on the host now; `None` when no vGPU answers to it.
pub fn running(paths: &HostPaths, handle: VgpuHandle) -> Result<Option<Running>> {
    match handle {
        VgpuHandle::Mdev(uuid) => {
            Ok(mdev_parent(paths, uuid)?.map(|parent| Running::Mdev { parent }))
        }
        VgpuHandle::Vf(vf) => {
            let device = PciDevice::new(paths, vf);
            if !device.exists() {
                return Ok(None);
            }
            if let Some(nvidia) = NvidiaVf::of(device.path()) {
                return Ok(nvidia
                    .current_type()?
                    .map(|type_id| Running::VendorVf { type_id }));
            }
            let is_vf = device.physfn()?.is_some();
            Ok((is_vf && device.driver()?.as_deref() == Some("vfio-pci"))
                .then_some(Running::PlainVf))
        }
    }
}

/// Destroys the vGPU named by `handle`: removes the mediated device, clears the VF's vendor
/// type, or gives a plain VF back to the driver it had (its default driver if unrecorded). Returns what it was.
pub fn destroy(paths: &HostPaths, handle: VgpuHandle) -> Result<Running> {
    let Some(what) = running(paths, handle)? else {
        return Err(Error::NoSuchDevice {
            name: handle.to_string(),
            path: paths.sys(),
        });
    };
    match (&what, handle) {
        (Running::Mdev { .. }, VgpuHandle::Mdev(uuid)) => {
            remove_mdev(paths, uuid)?;
        }
        (Running::VendorVf { .. }, VgpuHandle::Vf(vf)) => {
            clear_vf_type(paths, vf)?;
        }
        (Running::PlainVf, VgpuHandle::Vf(vf)) => {
            release_plain_vf(paths, vf, None)?;
        }
        _ => {
            return Err(Error::NoSuchDevice {
                name: handle.to_string(),
                path: paths.sys(),
            });
        }
    }
    Ok(what)
}
