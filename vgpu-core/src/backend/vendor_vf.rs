//! NVIDIA's vendor-specific VFIO interface: each VF holds at most one vGPU, made by writing a
//! type id listed in `nvidia/creatable_vgpu_types` to `nvidia/current_vgpu_type` and ended by
//! writing `0` (NVIDIA Virtual GPU Software User Guide, "Creating an NVIDIA vGPU on a Linux
//! with KVM hypervisor that uses a vendor-specific VFIO framework"). A MIG-backed type runs
//! on a GPU instance, written to `nvidia/gpu_instance_id` first (same guide, "MIG-backed
//! vGPUs"); which instances exist and are free comes from NVML.

use std::time::Duration;

use super::{Placement, Running};
use crate::error::{Error, Object, Result};
use crate::host::nvidia::NvidiaVf;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::child;
use crate::host::sysfs::write_attr_within;
use crate::model::Gpu;
use crate::model::pci::PciAddress;
use crate::nvml::{NvmlCell, mig};

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
    fits_vf(&PciDevice::new(paths, *vf), *type_id)
}

/// [`fits`] for the VF `vf`: it holds no vGPU and lists `type_id` as creatable.
pub(super) fn fits_vf(vf: &PciDevice, type_id: u32) -> Result<bool> {
    match NvidiaVf::of_device(vf)? {
        Some(nvidia) => Ok(nvidia.current_type()?.is_none()
            && nvidia.creatable_types()?.iter().any(|c| c.id == type_id)),
        None => Ok(false),
    }
}

fn vendor_vf(paths: &HostPaths, vf: PciAddress) -> Result<NvidiaVf> {
    NvidiaVf::of(&paths.pci_device(&vf))?.ok_or_else(|| no_vendor_vf(paths, vf))
}

/// [`Error::NotFound`]: VF `vf` has no `nvidia/` directory.
fn no_vendor_vf(paths: &HostPaths, vf: PciAddress) -> Error {
    Error::NotFound {
        what: Object::VendorVf,
        id: vf.to_string(),
        path: paths.pci_device(&vf).join("nvidia"),
    }
}

/// The name NVML gives vGPU type `type_id` of GPU `pf`, when NVML is loaded and knows it.
fn nvml_type_name(nvml: &NvmlCell, pf: PciAddress, type_id: u32) -> Option<String> {
    let gpu = nvml.get().read_gpu(pf).into_value()?;
    gpu.supported_types
        .into_value()?
        .into_iter()
        .find(|t| t.id == type_id)?
        .name
        .into_value()
}

/// Creates a vGPU of type `type_id` on `vf`, after checking the VF is free and lists the type
/// as creatable, and verifies the VF reads it back. A MIG-backed type (by its name, from
/// `creatable_vgpu_types` or NVML) first gets a free GPU instance of its profile written to
/// `gpu_instance_id`, which is put back as it was if the type cannot be set; MIG mode off,
/// no free instance, or no NVML to tell, are refused before anything is written.
pub(crate) fn set_type(
    paths: &HostPaths,
    vf: PciAddress,
    type_id: u32,
    nvml: &NvmlCell,
) -> Result<()> {
    // Held open: the path down to the VF is looked up once for all its files.
    let device = PciDevice::new(paths, vf).held_open();
    let nvidia = NvidiaVf::of_device(&device)?.ok_or_else(|| no_vendor_vf(paths, vf))?;
    if let Some(current) = nvidia.current_type()? {
        return Err(Error::InUse {
            device: vf.to_string(),
            by: format!("it holds NVIDIA vGPU type {current}"),
        });
    }
    let creatable = nvidia.creatable_types()?;
    let listed = creatable.iter().find(|c| c.id == type_id);
    // The PF is read only where it is needed: for NVML's name of a type not listed, and for
    // the GPU instance of a MIG-backed one.
    let pf = match listed {
        Some(c) if mig::backing(&c.name).is_none() => None,
        _ => device.physfn()?,
    };
    let name = match (listed, pf) {
        (Some(c), _) => Some(c.name.clone()),
        // Not creatable now: NVML may still name it, and say why (MIG off, no instance).
        (None, Some(pf)) => nvml_type_name(nvml, pf, type_id),
        (None, None) => None,
    };
    let instance = match (pf, name.as_deref().and_then(mig::backing)) {
        (Some(pf), Some(_)) => mig::instance_for(paths, nvml.get(), pf, type_id, name.as_deref())?,
        _ => None,
    };
    if listed.is_none() {
        return Err(Error::NoCapacity {
            gpu: vf,
            type_id: type_id.to_string(),
            asked: 1,
            available: 0,
            reserved: 0,
            limit: None,
            path: nvidia.path().join("creatable_vgpu_types"),
        });
    }
    let gi_path = child(nvidia.path(), "gpu_instance_id");
    let previous_gi = instance.as_ref().and_then(|_| nvidia.gpu_instance_id());
    if let Some((_, gi)) = &instance {
        nvidia.write("gpu_instance_id", &gi.to_string())?;
    }
    let path = nvidia.path().join("current_vgpu_type");
    let result = nvidia
        .write("current_vgpu_type", &type_id.to_string())
        .and_then(|()| match nvidia.current_type()? {
            Some(now) if now == type_id => Ok(()),
            other => Err(Error::NotApplied {
                path: path.clone(),
                expected: type_id.to_string(),
                found: other.map_or_else(|| "0".to_owned(), |t| t.to_string()),
            }),
        });
    if let (Err(_), Some(_), Some(previous)) = (&result, &instance, previous_gi) {
        // The instance written holds nothing without a vGPU; put back what the VF had.
        if let Err(err) = nvidia.write("gpu_instance_id", &previous.to_string()) {
            tracing::error!(vf = %vf, "cannot put back {}: {}", gi_path.display(), err.chain());
        }
    }
    result
}

/// Destroys the vGPU on `vf` (writes `0`); returns the type it held. NVIDIA's driver holds
/// the write while a process has the VF's VFIO device open: after `within`,
/// [`HostError::Timeout`](crate::host::HostError::Timeout).
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
pub(super) fn running(vf: &PciDevice) -> Result<Option<Running>> {
    match NvidiaVf::of_device(vf)? {
        Some(nvidia) => Ok(nvidia
            .current_type()?
            .map(|type_id| Running::VendorVf { type_id })),
        None => Ok(None),
    }
}

/// The vendor vGPU type a VF holds, in words.
pub(super) fn vf_holder(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    Ok(match running(&PciDevice::new(paths, vf))? {
        Some(Running::VendorVf { type_id }) => Some(format!("it holds NVIDIA vGPU type {type_id}")),
        _ => None,
    })
}
