//! NVIDIA's mixed-size (heterogeneous) vGPU mode and vGPU placements ("vGPU Management" of
//! the NVML API Reference, vGPU 17 and later): the mode of a GPU, read and set, the
//! placements a type supports and those it can take now, and a vGPU's placement id.
//!
//! The mode and the creatable placements are a simulator's (`sim_root`): a GPU the data
//! alone describes has no mode (`NVML_ERROR_NOT_SUPPORTED`). Setting the mode is the
//! simulator's control line `size-mode <pci> equal|mixed`; its refusal is NVML's error:
//! `EBUSY` (a vGPU exists) `NVML_ERROR_IN_USE`, `ENODEV` (no such mode)
//! `NVML_ERROR_NOT_SUPPORTED`, anything else `NVML_ERROR_UNKNOWN`.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    NVML_VGPU_PGPU_HETEROGENEOUS_MODE, NVML_VGPU_PGPU_HOMOGENEOUS_MODE, nvmlDevice_t,
    nvmlEnableState_enum_NVML_FEATURE_DISABLED as DISABLED,
    nvmlEnableState_enum_NVML_FEATURE_ENABLED as ENABLED,
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH as VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_t, nvmlVgpuHeterogeneousMode_t,
    nvmlVgpuInstance_t, nvmlVgpuPlacementId_t, nvmlVgpuPlacementList_t, nvmlVgpuTypeId_t,
};

use super::core::on_gpu;
use super::{refusal_of, struct_version};
use crate::data::Placements;
use crate::sim;
use crate::state::{device_index, done, gpu, put, with, with_mut};

/// `nvmlVgpuHeterogeneousMode_v1` (`0x1000008`).
const HETEROGENEOUS_MODE_V1: u32 = struct_version::<nvmlVgpuHeterogeneousMode_t>(1);
/// `nvmlVgpuPlacementId_v1`.
const PLACEMENT_ID_V1: u32 = struct_version::<nvmlVgpuPlacementId_t>(1);
/// `nvmlVgpuPlacementList_v2`.
const PLACEMENT_LIST_V2: u32 = struct_version::<nvmlVgpuPlacementList_t>(2);

/// `nvmlDeviceGetVgpuHeterogeneousMode`: `NVML_FEATURE_ENABLED` in mixed-size mode,
/// `NVML_FEATURE_DISABLED` in equal mode; `ARGUMENT_VERSION_MISMATCH` for a version other
/// than 1, `NOT_SUPPORTED` on a GPU without the mode.
///
/// # Safety
/// `mode` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuHeterogeneousMode(
    device: nvmlDevice_t,
    mode: *mut nvmlVgpuHeterogeneousMode_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetVgpuHeterogeneousMode",
        device,
        |_, g| {
            if mode.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid as the caller promises.
            let mut value = unsafe { mode.read() };
            if value.version != HETEROGENEOUS_MODE_V1 {
                return Err(VERSION_MISMATCH);
            }
            let mixed = g.size_mode.ok_or(NOT_SUPPORTED)?;
            value.mode = if mixed { ENABLED } else { DISABLED };
            // SAFETY: as above.
            unsafe { put(mode, value) }
        },
    ))
}

/// `nvmlDeviceSetVgpuHeterogeneousMode`: `ARGUMENT_VERSION_MISMATCH` for a version other
/// than 1, `INVALID_ARGUMENT` for a mode other than enabled or disabled, `NOT_SUPPORTED` on a
/// GPU without the mode, `IN_USE` while the GPU has a vGPU (the simulator decides).
///
/// # Safety
/// `mode` is null or valid for a read.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceSetVgpuHeterogeneousMode(
    device: nvmlDevice_t,
    mode: *const nvmlVgpuHeterogeneousMode_t,
) -> nvmlReturn_t {
    let Ok(index) = device_index(device) else {
        return INVALID_ARGUMENT;
    };
    done(with_mut(
        "nvmlDeviceSetVgpuHeterogeneousMode",
        Some(index),
        |d, _| {
            if mode.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid for a read as the caller promises.
            let value = unsafe { mode.read() };
            if value.version != HETEROGENEOUS_MODE_V1 {
                return Err(VERSION_MISMATCH);
            }
            let mixed = match value.mode {
                ENABLED => true,
                DISABLED => false,
                _ => return Err(INVALID_ARGUMENT),
            };
            let g = gpu(d, index)?;
            g.size_mode.ok_or(NOT_SUPPORTED)?;
            let root = d.sim_root.clone().ok_or(NOT_SUPPORTED)?;
            let word = if mixed { "mixed" } else { "equal" };
            sim::control(&root, &format!("size-mode {} {word}", g.pci))
                .map_err(|e| refusal_of(&e))?;
            sim::refresh(d, &root, sim::Need::default()).map_err(|_| UNKNOWN)
        },
    ))
}

/// Writes `placements` into the caller's list: the count and `INSUFFICIENT_SIZE` when its
/// array is null or shorter (`count` on entry), else the ids; no ids is success, count 0.
///
/// # Safety
/// `list` is valid for a read and a write; its `placementIds` null or valid for `count`
/// writes.
unsafe fn put_placements(
    list: *mut nvmlVgpuPlacementList_t,
    mut value: nvmlVgpuPlacementList_t,
    placements: &Placements,
) -> Result<(), nvmlReturn_t> {
    let room = value.count;
    let len = u32::try_from(placements.ids.len()).map_err(|_| INVALID_ARGUMENT)?;
    value.placementSize = placements.size;
    value.count = len;
    // No ids is an answer, as NVML's lists give it (`put_list`): there is nothing to copy.
    if len == 0 {
        // SAFETY: as the caller promises.
        return unsafe { put(list, value) };
    }
    if room < len || value.placementIds.is_null() {
        // SAFETY: as the caller promises.
        unsafe { put(list, value)? };
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `placementIds` is valid for `room >= len` elements as the caller promises.
    unsafe {
        std::ptr::copy_nonoverlapping(
            placements.ids.as_ptr(),
            value.placementIds,
            placements.ids.len(),
        );
        put(list, value)
    }
}

/// `nvmlDeviceGetVgpuTypeCreatablePlacements`: the placement ids a new vGPU of the type may
/// take now, in the GPU's mode (none when it cannot be created now);
/// `ARGUMENT_VERSION_MISMATCH` for a list other than version 2, `INVALID_ARGUMENT` for a
/// type the GPU does not support, `NOT_SUPPORTED` for one without placements; the count
/// and `INSUFFICIENT_SIZE` when the caller's array is null or short.
///
/// # Safety
/// `list` is null or valid for a read and a write; its `placementIds` null or valid for
/// `count` writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuTypeCreatablePlacements(
    device: nvmlDevice_t,
    type_id: nvmlVgpuTypeId_t,
    list: *mut nvmlVgpuPlacementList_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetVgpuTypeCreatablePlacements",
        device,
        |_, g| {
            if list.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid as the caller promises.
            let value = unsafe { list.read() };
            if value.version != PLACEMENT_LIST_V2 {
                return Err(VERSION_MISMATCH);
            }
            let t = g
                .types
                .iter()
                .find(|t| t.id == type_id)
                .ok_or(INVALID_ARGUMENT)?;
            let size = t.placements.as_ref().ok_or(NOT_SUPPORTED)?.size;
            let ids = t.creatable_placements.clone().ok_or(NOT_SUPPORTED)?;
            // SAFETY: as the caller promises.
            unsafe { put_placements(list, value, &Placements { size, ids }) }
        },
    ))
}

/// The placements of a type for `nvmlDeviceGetVgpuTypeSupportedPlacements` in list mode
/// `mode`: mixed-size (`NVML_VGPU_PGPU_HETEROGENEOUS_MODE`) or equal
/// (`NVML_VGPU_PGPU_HOMOGENEOUS_MODE`); `INVALID_ARGUMENT` for another mode.
pub(crate) fn supported_in_mode(
    t: &crate::data::VgpuType,
    mode: c_uint,
) -> Result<&Placements, nvmlReturn_t> {
    match mode {
        NVML_VGPU_PGPU_HETEROGENEOUS_MODE => t.placements.as_ref().ok_or(NOT_SUPPORTED),
        NVML_VGPU_PGPU_HOMOGENEOUS_MODE => t.placements_equal.as_ref().ok_or(NOT_SUPPORTED),
        _ => Err(INVALID_ARGUMENT),
    }
}

/// `nvmlDeviceGetVgpuTypeSupportedPlacements`: the placements of a type in the list's
/// `mode`, whatever is in use; `ARGUMENT_VERSION_MISMATCH` for a list other than version
/// 2; the count and `INSUFFICIENT_SIZE` when the caller's array is null or short.
///
/// # Safety
/// `list` is null or valid for a read and a write; its `placementIds` null or valid for
/// `count` writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuTypeSupportedPlacements(
    device: nvmlDevice_t,
    type_id: nvmlVgpuTypeId_t,
    list: *mut nvmlVgpuPlacementList_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetVgpuTypeSupportedPlacements",
        device,
        |_, g| {
            if list.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid as the caller promises.
            let value = unsafe { list.read() };
            if value.version != PLACEMENT_LIST_V2 {
                return Err(VERSION_MISMATCH);
            }
            let t = g
                .types
                .iter()
                .find(|t| t.id == type_id)
                .ok_or(INVALID_ARGUMENT)?;
            let placements = supported_in_mode(t, value.mode)?;
            // SAFETY: as the caller promises.
            unsafe { put_placements(list, value, placements) }
        },
    ))
}

/// `nvmlVgpuInstanceGetPlacementId`: `ARGUMENT_VERSION_MISMATCH` for a version other than
/// 1, `NOT_FOUND` for an unknown vGPU, `NOT_SUPPORTED` for one without a placement.
///
/// # Safety
/// `placement` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetPlacementId(
    instance: nvmlVgpuInstance_t,
    placement: *mut nvmlVgpuPlacementId_t,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetPlacementId", None, |d| {
        if placement.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: not null, valid as the caller promises.
        let mut value = unsafe { placement.read() };
        if value.version != PLACEMENT_ID_V1 {
            return Err(VERSION_MISMATCH);
        }
        let v = d
            .gpus
            .iter()
            .flat_map(|g| g.vgpus.iter())
            .find(|v| v.instance == instance)
            .ok_or(NOT_FOUND)?;
        value.placementId = v.placement_id.ok_or(NOT_SUPPORTED)?;
        // SAFETY: as above.
        unsafe { put(placement, value) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heterogeneous_mode_v1_is_0x1000008() {
        assert_eq!(HETEROGENEOUS_MODE_V1, 0x0100_0008);
    }

    #[test]
    fn placement_id_v1_is_size_8_version_1() {
        assert_eq!(PLACEMENT_ID_V1, 0x0100_0008);
    }
}
