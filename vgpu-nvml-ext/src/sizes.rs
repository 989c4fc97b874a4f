//! Mixed-size mode of time-sliced vGPUs (NVML 12.4 and later; NVIDIA NVML API Reference,
//! "vGPU Management"): the GPU's mode (`nvmlDeviceGetVgpuHeterogeneousMode`,
//! `nvmlDeviceSetVgpuHeterogeneousMode`), where a type can be created now
//! (`nvmlDeviceGetVgpuTypeCreatablePlacements`), and where a running vGPU sits
//! (`nvmlVgpuInstanceGetPlacementId`).

use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlVgpuHeterogeneousMode_v1_t, nvmlVgpuPlacementId_v1_t};

use crate::{VgpuPlacements, struct_version};

/// The version tag of `nvmlVgpuHeterogeneousMode_v1_t` (`0x1000008`).
pub const VGPU_HETEROGENEOUS_MODE_V1: u32 = struct_version::<nvmlVgpuHeterogeneousMode_v1_t>(1);

/// The version tag of `nvmlVgpuPlacementId_v1_t` (`0x1000008`).
pub const VGPU_PLACEMENT_ID_V1: u32 = struct_version::<nvmlVgpuPlacementId_v1_t>(1);

/// `NVML_FEATURE_ENABLED`: the mode field of a GPU in mixed-size mode.
const ENABLED: c_uint = nvml_wrapper_sys::bindings::nvmlEnableState_enum_NVML_FEATURE_ENABLED;

/// Whether `device` runs in mixed-size mode (`nvmlDeviceGetVgpuHeterogeneousMode`).
/// `NVML_ERROR_NOT_SUPPORTED` on a GPU without the mode.
pub fn vgpu_heterogeneous_mode(device: &Device<'_>) -> Result<bool, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    let mut mode = nvmlVgpuHeterogeneousMode_v1_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: 0,
    };
    // SAFETY: `mode` is a local of the version NVML is told.
    nvml_try(unsafe { sym(handle, &mut mode) })?;
    Ok(mode.mode == ENABLED)
}

/// Puts `device` in mixed-size mode, or back in equal-size mode
/// (`nvmlDeviceSetVgpuHeterogeneousMode`). NVML refuses it (`NVML_ERROR_IN_USE`) while the
/// GPU holds a vGPU.
pub fn set_vgpu_heterogeneous_mode(device: &Device<'_>, mixed: bool) -> Result<(), NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceSetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    let mode = nvmlVgpuHeterogeneousMode_v1_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: if mixed { ENABLED } else { 0 },
    };
    // SAFETY: `mode` is a local of the version NVML is told, read only.
    nvml_try(unsafe { sym(handle, &mode) })
}

/// The placement ids at which a vGPU of type `type_id` can be created on `device` now
/// (`nvmlDeviceGetVgpuTypeCreatablePlacements`).
pub fn vgpu_type_creatable_placements(
    device: &Device<'_>,
    type_id: u32,
) -> Result<VgpuPlacements, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetVgpuTypeCreatablePlacements
            .as_ref(),
    )?;
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    crate::placement_list(|list| {
        // SAFETY: `list` is NVML's structure of the version it is told, its id array (null,
        // or `count` long) owned by `placement_list` for the call.
        unsafe { sym(handle, type_id, list) }
    })
}

/// The placement id of the running vGPU `instance` (`nvmlVgpuInstanceGetPlacementId`).
pub fn vgpu_instance_placement_id(nvml: &Nvml, instance: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlVgpuInstanceGetPlacementId.as_ref())?;
    let mut placement = nvmlVgpuPlacementId_v1_t {
        version: VGPU_PLACEMENT_ID_V1,
        placementId: 0,
    };
    // SAFETY: `placement` is a local of the version NVML is told.
    nvml_try(unsafe { sym(instance, &mut placement) })?;
    Ok(placement.placementId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_versions_are_those_of_nvml_h() {
        assert_eq!(VGPU_HETEROGENEOUS_MODE_V1, 0x0100_0008);
        assert_eq!(VGPU_PLACEMENT_ID_V1, 0x0100_0008);
    }
}
