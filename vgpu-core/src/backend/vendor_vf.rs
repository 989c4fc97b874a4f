//! NVIDIA's vendor-specific VFIO interface: each VF holds at most one vGPU, made by writing a
//! type id listed in `nvidia/creatable_vgpu_types` to `nvidia/current_vgpu_type` and ended by
//! writing `0` (NVIDIA Virtual GPU Software User Guide, "Creating an NVIDIA vGPU on a Linux
//! with KVM hypervisor that uses a vendor-specific VFIO framework").

use std::time::Duration;

use super::{Placement, Running};
use crate::error::{Error, Object, Result};
use crate::host::nvidia::NvidiaVf;
use crate::host::paths::HostPaths;
use crate::host::sysfs::{write_attr, write_attr_within};
use crate::model::Gpu;
use crate::model::pci::PciAddress;

/// Each VF, in `virtfnN` order.
pub(super) fn candidates(gpu: &Gpu, type_id: &str) -> Result<Vec<Placement>> {
    let type_id = parse_type_id(type_id)?;
    Ok(gpu
        .vfs
        .iter()
        .map(|vf| Placement::VendorVf {
            vf: vf.address,
            type_id,
        })
        .collect())
}

fn parse_type_id(id: &str) -> Result<u32> {
    id.parse::<u32>()
        .ok()
        .filter(|n| *n != 0)
        .ok_or_else(|| Error::bad_name(id, "an NVIDIA vendor-VFIO type id (a non-zero number)"))
}

/// Whether the VF holds no vGPU and lists the type as creatable.
pub(super) fn fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    let Placement::VendorVf { vf, type_id } = placement else {
        return Ok(false);
    };
    match NvidiaVf::of(&paths.pci_device(vf)) {
        Some(nvidia) => Ok(nvidia.current_type()?.is_none()
            && nvidia.creatable_types()?.iter().any(|c| c.id == *type_id)),
        None => Ok(false),
    }
}

fn vendor_vf(paths: &HostPaths, vf: PciAddress) -> Result<NvidiaVf> {
    let dir = paths.pci_device(&vf);
    NvidiaVf::of(&dir).ok_or_else(|| Error::NotFound {
        what: Object::VendorVf,
        id: vf.to_string(),
        path: dir.join("nvidia"),
    })
}

/// Creates a vGPU of type `type_id` on `vf`, after checking the VF is free and lists the type
/// as creatable, and verifies the VF reads it back.
pub(crate) fn set_type(paths: &HostPaths, vf: PciAddress, type_id: u32) -> Result<()> {
    let nvidia = vendor_vf(paths, vf)?;
    if let Some(current) = nvidia.current_type()? {
        return Err(Error::InUse {
            device: vf.to_string(),
            by: format!("it holds NVIDIA vGPU type {current}"),
        });
    }
    if !nvidia.creatable_types()?.iter().any(|c| c.id == type_id) {
        return Err(Error::NoCapacity {
            gpu: vf,
            type_id: type_id.to_string(),
            asked: 1,
            available: 0,
            reserved: 0,
            path: nvidia.path().join("creatable_vgpu_types"),
        });
    }
    let path = nvidia.path().join("current_vgpu_type");
    write_attr(&path, &type_id.to_string())?;
    match nvidia.current_type()? {
        Some(now) if now == type_id => Ok(()),
        other => Err(Error::NotApplied {
            path,
            expected: type_id.to_string(),
            found: other.map_or_else(|| "0".to_owned(), |t| t.to_string()),
        }),
    }
}

/// Destroys the vGPU on `vf` (writes `0`); returns the type it held. NVIDIA's driver holds
/// the write while a process has the VF's VFIO device open: after `within`,
/// [`Error::Timeout`].
pub(crate) fn clear_type(paths: &HostPaths, vf: PciAddress, within: Duration) -> Result<u32> {
    let nvidia = vendor_vf(paths, vf)?;
    let Some(current) = nvidia.current_type()? else {
        return Err(Error::NotFound {
            what: Object::Vgpu,
            id: vf.to_string(),
            path: nvidia.path().join("current_vgpu_type"),
        });
    };
    write_attr_within(
        &nvidia.path().join("current_vgpu_type"),
        "0",
        within,
        &format!("the release of the vGPU on {vf} by the processes holding it open"),
    )?;
    Ok(current)
}

/// The vendor vGPU on `vf`, if it is a vendor-VFIO VF holding one.
pub(super) fn running(paths: &HostPaths, vf: PciAddress) -> Result<Option<Running>> {
    match NvidiaVf::of(&paths.pci_device(&vf)) {
        Some(nvidia) => Ok(nvidia
            .current_type()?
            .map(|type_id| Running::VendorVf { type_id })),
        None => Ok(None),
    }
}

/// The vendor vGPU type a VF holds, in words.
pub(super) fn vf_holder(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    Ok(match running(paths, vf)? {
        Some(Running::VendorVf { type_id }) => Some(format!("it holds NVIDIA vGPU type {type_id}")),
        _ => None,
    })
}
