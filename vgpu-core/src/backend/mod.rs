//! The four ways a GPU offers vGPUs, each in one module behind one dispatch:
//!
//! - [`mdev`]: a mediated device on the PF (NVIDIA up to Turing, Intel GVT-g) or on a VF
//!   (NVIDIA Ampere), per the kernel's `Documentation/driver-api/vfio-mediated-device.rst`;
//! - [`vendor_vf`]: NVIDIA's vendor-specific VFIO interface, a type written to a VF's
//!   `nvidia/current_vgpu_type` (Ada, Hopper, Blackwell; NVIDIA vGPU 17+);
//! - [`plain_vf`]: a whole SR-IOV VF bound to `vfio-pci` (Intel Flex, AMD MxGPU).
//!
//! Each module answers the same questions: where a vGPU could go ([`candidates`]), whether a
//! place takes one more now ([`fits`]), how to make one there ([`realize`]), what a handle
//! names now ([`running`]), how to remove it ([`destroy`]), and what holds a VF
//! ([`vf_holder`]). Choosing among places, honouring definitions, and undoing are the
//! manager's job.

pub(crate) mod mdev;
pub(crate) mod plain_vf;
pub(crate) mod vendor_vf;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use crate::error::{Error, HostError, Object, Result};
use crate::host::driver::GiveBack;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::SysDir;
use crate::host::vfio::{self, Holder};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, VgpuHandle, VgpuType};
use crate::nvml::NvmlCell;

// Also taken from here by `capacity` and `plan`.
pub(crate) use crate::model::PLAIN_VF_TYPE;
pub(crate) use crate::parse::name_matches;

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
    /// The PCI function it sits on: the mdev parent (PF or VF), or the VF.
    pub fn device(&self) -> PciAddress {
        match self {
            Placement::Mdev { parent, .. } => *parent,
            Placement::VendorVf { vf, .. } | Placement::PlainVf { vf } => *vf,
        }
    }

    /// The handle the vGPU made here will have: `uuid` (or a new random one) for a mediated
    /// device, the VF otherwise, where a UUID does not apply.
    pub(crate) fn handle(&self, uuid: Option<Uuid>) -> Result<VgpuHandle> {
        self.vgpu(uuid).map(|vgpu| vgpu.handle())
    }

    /// The vGPU to make here, under `uuid` (or a new random one) for a mediated device; a VF
    /// is its own handle, and a UUID for one is [`Error::UuidNotApplicable`].
    pub(crate) fn vgpu(&self, uuid: Option<Uuid>) -> Result<NewVgpu> {
        match (self, uuid) {
            (Placement::Mdev { parent, type_id }, uuid) => Ok(NewVgpu::Mdev {
                parent: *parent,
                type_id: type_id.clone(),
                uuid: uuid.unwrap_or_else(Uuid::new_v4),
            }),
            (&Placement::VendorVf { vf, type_id }, None) => Ok(NewVgpu::VendorVf { vf, type_id }),
            (&Placement::PlainVf { vf }, None) => Ok(NewVgpu::PlainVf { vf }),
            (_, Some(_)) => Err(Error::UuidNotApplicable {
                device: self.device(),
            }),
        }
    }
}

/// A vGPU to make: its place and its handle, of one kind, so that a handle of another kind
/// than its place cannot be asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NewVgpu {
    /// A mediated device of `type_id` on `parent`, named `uuid`.
    Mdev {
        parent: PciAddress,
        type_id: String,
        uuid: Uuid,
    },
    /// NVIDIA's vendor type `type_id` set on `vf`.
    VendorVf { vf: PciAddress, type_id: u32 },
    /// `vf` bound to `vfio-pci`.
    PlainVf { vf: PciAddress },
}

impl NewVgpu {
    /// The handle the vGPU has once made.
    pub(crate) fn handle(&self) -> VgpuHandle {
        match self {
            NewVgpu::Mdev { uuid, .. } => VgpuHandle::Mdev(*uuid),
            NewVgpu::VendorVf { vf, .. } | NewVgpu::PlainVf { vf } => VgpuHandle::Vf(*vf),
        }
    }
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

pub(crate) use crate::capacity::Reservations;

pub(crate) fn validate_type(text: &str) -> Result<()> {
    Ok(crate::model::name::validate_type(text)?)
}

/// The type of `gpu` that `wanted` names: its id (`nvidia-231`, `1151`), its name
/// (`GRID T4-2Q`), or its name without the vendor prefix (`T4-2Q`), case-insensitively.
pub(crate) fn resolve_type<'a>(gpu: &'a Gpu, wanted: &str) -> Result<&'a VgpuType> {
    validate_type(wanted)?;
    let found = gpu.types.iter().find(|t| t.id == wanted).or_else(|| {
        gpu.types
            .iter()
            .find(|t| t.name.as_deref().is_some_and(|n| name_matches(n, wanted)))
    });
    found.ok_or_else(|| Error::UnknownType {
        gpu: gpu.address,
        wanted: wanted.to_owned(),
        offered: gpu.types.iter().map(|t| t.label().to_owned()).collect(),
    })
}

/// The type id a vGPU of `wanted` has on `gpu`: the id of the type `wanted` names, or
/// [`PLAIN_VF_TYPE`] for a plain SR-IOV GPU (which must be asked for by that name, and have
/// VFs enabled).
pub(crate) fn placement_type(gpu: &Gpu, wanted: &str) -> Result<String> {
    match gpu.backend {
        // NVIDIA's vGPU types show only on enabled VFs.
        Backend::Sriov if gpu.vendor_id == Some(NVIDIA_VENDOR_ID) => Err(Error::NoVfs {
            gpu: gpu.address,
            backend: gpu.backend,
        }),
        Backend::Sriov if wanted != PLAIN_VF_TYPE => Err(Error::UnknownType {
            gpu: gpu.address,
            wanted: wanted.to_owned(),
            offered: vec![PLAIN_VF_TYPE.to_owned()],
        }),
        Backend::Sriov if gpu.vfs.is_empty() => Err(Error::NoVfs {
            gpu: gpu.address,
            backend: gpu.backend,
        }),
        Backend::Sriov => Ok(PLAIN_VF_TYPE.to_owned()),
        Backend::None => Err(Error::NotVirtualizable {
            gpu: gpu.address,
            backend: gpu.backend,
        }),
        Backend::Mdev | Backend::VfMdev | Backend::NvidiaVfio => {
            Ok(resolve_type(gpu, wanted)?.id.clone())
        }
    }
}

/// Every place a vGPU of `type_id` could go on `gpu`, in the order they are tried (the PF
/// for mdev on the PF, otherwise each VF in `virtfnN` order), leaving out reserved VFs.
pub(crate) fn candidates(
    gpu: &Gpu,
    type_id: &str,
    reserved: &Reservations,
) -> Result<Vec<Placement>> {
    let all = match gpu.backend {
        Backend::Mdev | Backend::VfMdev => mdev::candidates(gpu, type_id),
        Backend::NvidiaVfio => vendor_vf::candidates(gpu, type_id)?,
        Backend::Sriov => plain_vf::candidates(gpu),
        Backend::None => Vec::new(),
    };
    Ok(all
        .into_iter()
        .filter(|p| !reserved.vfs.contains(&p.device()))
        .collect())
}

/// Whether `placement` can take one more vGPU now, as the kernel shows it.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    match placement {
        Placement::Mdev { .. } => mdev::fits(paths, placement),
        Placement::VendorVf { .. } => vendor_vf::fits(paths, placement),
        Placement::PlainVf { .. } => plain_vf::fits(paths, placement),
    }
}

/// [`fits`], a vendor-VFIO VF reached from the parent directory of `gpu`, its PF held open
/// ([`PciDevice::beside`]): one lookup for the VF, not the walk down the device list's link.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn fits_beside(
    paths: &HostPaths,
    gpu: &PciDevice,
    placement: &Placement,
) -> Result<bool> {
    match placement {
        Placement::VendorVf { vf, type_id } => {
            let devices = SysDir::new(paths.pci_devices());
            match gpu.beside(&[*vf], &devices).pop() {
                Some(device) => vendor_vf::fits_vf(&device, *type_id),
                None => Ok(false),
            }
        }
        _ => fits(paths, placement),
    }
}

/// Asks NVIDIA's driver to place the next vGPU made through `nvidia` (a vendor-VFIO VF's
/// `nvidia` directory, or a mediated device's) at placement `id`: written before the VF's
/// type is set, or before the mediated device is opened.
pub(crate) fn write_placement(nvidia: &std::path::Path, id: u32) -> Result<()> {
    crate::host::sysfs::write_attr(
        &nvidia.join("vgpu_params"),
        &crate::model::sizes::placement_param(id),
    )
}

/// Makes `vgpu` at placement `at` in mixed-size mode ([`realize`] where `at` is `None`):
/// `vgpu-placement-id` is written to a VF's `nvidia/vgpu_params` before its type is set, or to
/// a new mediated device's before anything opens it. For an undo, which records no steps.
pub(crate) fn realize_placed_at(
    paths: &HostPaths,
    vgpu: &NewVgpu,
    at: Option<u32>,
    within: Duration,
    nvml: &NvmlCell,
) -> Result<Option<String>> {
    if let (Some(id), NewVgpu::VendorVf { vf, .. }) = (at, vgpu) {
        write_placement(&paths.pci_device(vf).join("nvidia"), id)?;
    }
    let made = realize(paths, vgpu, within, nvml)?;
    if let (Some(id), NewVgpu::Mdev { uuid, .. }) = (at, vgpu) {
        write_placement(
            &paths.mdev_devices().join(uuid.to_string()).join("nvidia"),
            id,
        )?;
    }
    Ok(made)
}

/// Makes `vgpu` (from [`Placement::vgpu`]): creates the mediated
/// device, sets the vendor type (a MIG-backed one on a free GPU instance `nvml` names), or
/// binds the plain VF for a guest. Returns, for a plain VF, the driver it had.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn realize(
    paths: &HostPaths,
    vgpu: &NewVgpu,
    within: Duration,
    nvml: &NvmlCell,
) -> Result<Option<String>> {
    match vgpu {
        NewVgpu::Mdev {
            parent,
            type_id,
            uuid,
        } => mdev::create(paths, *parent, type_id, *uuid).map(|()| None),
        NewVgpu::VendorVf { vf, type_id } => {
            vendor_vf::set_type(paths, *vf, *type_id, nvml).map(|()| None)
        }
        NewVgpu::PlainVf { vf } => plain_vf::bind(paths, *vf, within),
    }
}

/// Whether `err`, from making a vGPU at `placement`, says that the place was taken after it was
/// chosen: by another tool that does not take `vgpu`'s lock (mdevctl, libvirt's node devices,
/// a vendor agent). That is the kernel refusing the write as full ([`HostError::NoSpace`](crate::host::HostError::NoSpace): `EUSERS`
/// from the mdev core's instance count, `ENOSPC` from GVT-g, `EDQUOT`), the place showing no room
/// when it was about to be made ([`Error::NoCapacity`], [`Error::InUse`]), or NVIDIA's driver
/// refusing a type (`EPERM`, `EINVAL`: [`HostError::Denied`](crate::host::HostError::Denied), [`HostError::Write`](crate::host::HostError::Write)) on a VF that, read
/// again, holds one now or no longer lists it.
pub(crate) fn taken(paths: &HostPaths, placement: &Placement, err: &Error) -> Result<bool> {
    match (placement, err) {
        (
            _,
            Error::Host(HostError::NoSpace { .. }) | Error::NoCapacity { .. } | Error::InUse { .. },
        ) => Ok(true),
        (
            Placement::VendorVf { .. },
            Error::Host(HostError::Denied { .. } | HostError::Write { .. }),
        ) => Ok(!fits(paths, placement)?),
        _ => Ok(false),
    }
}

/// What `handle` names on the host now; `None` when no vGPU answers to it.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn running(paths: &HostPaths, handle: VgpuHandle) -> Result<Option<Running>> {
    match handle {
        VgpuHandle::Mdev(uuid) => {
            Ok(mdev::parent_of(paths, uuid)?.map(|parent| Running::Mdev { parent }))
        }
        // Held open: the path down to the VF is looked up once for all its files.
        VgpuHandle::Vf(vf) => vf_running(&PciDevice::new(paths, vf).held_open()),
    }
}

/// [`running`] for the VF `device`, which the caller holds open to read more of it.
pub(crate) fn vf_running(device: &PciDevice) -> Result<Option<Running>> {
    if !device.exists() {
        return Ok(None);
    }
    if let Some(running) = vendor_vf::running(device)? {
        return Ok(Some(running));
    }
    plain_vf::running(device)
}

/// Destroys the vGPU named by `handle`: removes the mediated device, clears the VF's vendor
/// type, or gives a plain VF back to the driver it had (`fallback` when none is recorded, its
/// default driver when `fallback` is `None`). Returns what it was. The kernel holds each of
/// these writes while a process has the device open; `within` bounds the wait
/// ([`HostError::Timeout`](crate::host::HostError::Timeout)).
pub(crate) fn destroy(
    paths: &HostPaths,
    handle: VgpuHandle,
    fallback: GiveBack<'_>,
    within: Duration,
) -> Result<Running> {
    let not_found = || Error::NotFound {
        what: Object::Vgpu,
        id: handle.to_string(),
        path: match handle {
            VgpuHandle::Mdev(_) => paths.mdev_devices(),
            VgpuHandle::Vf(_) => paths.pci_devices(),
        },
    };
    let what = running(paths, handle)?.ok_or_else(not_found)?;
    match (&what, handle) {
        (Running::Mdev { .. }, VgpuHandle::Mdev(uuid)) => {
            mdev::remove(paths, uuid, within)?;
        }
        (Running::VendorVf { .. }, VgpuHandle::Vf(vf)) => {
            vendor_vf::clear_type(paths, vf, within)?;
        }
        (Running::PlainVf, VgpuHandle::Vf(vf)) => {
            plain_vf::release(paths, vf, fallback, within)?;
        }
        _ => return Err(not_found()),
    }
    Ok(what)
}

/// What holds VF `vf` so that it cannot be taken away now (a mediated device, a vendor vGPU
/// type, a passthrough driver), in words; `None` when nothing does.
pub(crate) fn vf_holder(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    if let Some(holder) = mdev::vf_holder(paths, vf)? {
        return Ok(Some(holder));
    }
    if let Some(holder) = vendor_vf::vf_holder(paths, vf)? {
        return Ok(Some(holder));
    }
    plain_vf::vf_holder(paths, vf)
}

/// For each of `handles` whose VFIO device a process holds open, the first such process, in
/// one pass over the processes.
pub(crate) fn open_handles(
    paths: &HostPaths,
    handles: &[VgpuHandle],
) -> Result<BTreeMap<VgpuHandle, Holder>> {
    let mut by_node: BTreeMap<String, VgpuHandle> = BTreeMap::new();
    for handle in handles {
        let nodes = match *handle {
            VgpuHandle::Mdev(uuid) => vfio::mdev_nodes(paths, uuid)?,
            VgpuHandle::Vf(address) => vfio::pci_nodes(paths, address)?,
        };
        for node in nodes {
            by_node.insert(node, *handle);
        }
    }
    let nodes = by_node.keys().cloned().collect();
    let mut held = BTreeMap::new();
    for (node, holder) in vfio::holders_by_node(paths, &nodes)? {
        if let Some(handle) = by_node.get(&node) {
            held.entry(*handle).or_insert(holder);
        }
    }
    Ok(held)
}

/// The processes holding the VFIO device of `handle` open.
pub(crate) fn open_by(paths: &HostPaths, handle: VgpuHandle) -> Result<Vec<Holder>> {
    let nodes = match handle {
        VgpuHandle::Mdev(uuid) => vfio::mdev_nodes(paths, uuid)?,
        VgpuHandle::Vf(address) => vfio::pci_nodes(paths, address)?,
    };
    vfio::holders(paths, &nodes)
}
