//! GPU instances ("Multi Instance GPU Management" of the NVML API Reference): a GPU in MIG
//! mode lists the profiles and instances of its data; a GPU without MIG mode answers
//! `NVML_ERROR_NOT_SUPPORTED`, as a real one does.

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_t, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED, nvmlReturn_t,
};

use super::core::on_gpu;
use crate::data::{Gpu, Profile};
use crate::state::{Answer, device_index, done, gpu, instance_handle, instance_of, put, with};

/// The profile at `index` of a GPU in MIG mode.
pub(crate) fn profile(g: &Gpu, index: u32) -> Answer<&Profile> {
    if !g.mig.is_some_and(|m| m.current) {
        return Err(NOT_SUPPORTED);
    }
    g.profiles
        .iter()
        .find(|p| p.index == index)
        .ok_or(NOT_SUPPORTED)
}

/// `nvmlDeviceGetGpuInstanceProfileInfo`.
///
/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    index: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetGpuInstanceProfileInfo",
        device,
        |_, g| {
            let p = profile(g, index)?;
            let value = nvmlGpuInstanceProfileInfo_t {
                id: p.id,
                isP2pSupported: 0,
                sliceCount: p.slices,
                instanceCount: p.instance_count,
                multiprocessorCount: 0,
                copyEngineCount: 0,
                decoderCount: 0,
                encoderCount: 0,
                jpegCount: 0,
                ofaCount: 0,
                memorySizeMB: p.memory_mib,
            };
            // SAFETY: as the caller promises.
            unsafe { put(info, value) }
        },
    ))
}

/// `nvmlDeviceGetGpuInstances`: the instances of profile `profile_id`.
///
/// # Safety
/// `count` is null or valid for a write; `instances` null or valid for as many writes as the
/// profile's instance count.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile_id: c_uint,
    instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetGpuInstances", device, |_, g| {
        if !g.mig.is_some_and(|m| m.current) {
            return Err(NOT_SUPPORTED);
        }
        if instances.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let index = device_index(device)?;
        let handles = g
            .gpu_instances
            .iter()
            .filter(|gi| gi.profile_id == profile_id)
            .map(|gi| instance_handle(index, gi.id))
            .collect::<Answer<Vec<nvmlGpuInstance_t>>>()?;
        let room = g
            .profiles
            .iter()
            .find(|p| p.id == profile_id)
            .map_or(0, |p| p.instance_count as usize);
        if handles.len() > room {
            return Err(INVALID_ARGUMENT);
        }
        let n = u32::try_from(handles.len()).map_err(|_| INVALID_ARGUMENT)?;
        // SAFETY: `instances` is valid for the profile's instance count (`room`), at least
        // `handles.len()`, as the caller promises; `count` as the caller promises.
        unsafe {
            std::ptr::copy_nonoverlapping(handles.as_ptr(), instances, handles.len());
            put(count, n)
        }
    }))
}

/// `nvmlGpuInstanceGetInfo`.
///
/// # Safety
/// `info` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    let Ok((gpu_index, id)) = instance_of(instance) else {
        return INVALID_ARGUMENT;
    };
    done(with("nvmlGpuInstanceGetInfo", Some(gpu_index), |d| {
        let g = gpu(d, gpu_index)?;
        // A destroyed instance's handle names no instance.
        let gi = g
            .gpu_instances
            .iter()
            .find(|gi| gi.id == id)
            .ok_or(INVALID_ARGUMENT)?;
        let value = nvmlGpuInstanceInfo_t {
            device: crate::state::device_handle(gpu_index),
            id: gi.id,
            profileId: gi.profile_id,
            placement: nvmlGpuInstancePlacement_t {
                start: gi.placement_start,
                size: gi.placement_size,
            },
        };
        // SAFETY: as the caller promises.
        unsafe { put(info, value) }
    }))
}
