//! Functions of newer drivers (the versioned profile query; vGPU 17's placements are in
//! `placement`): the legacy build of
//! the fake leaves them out, as an older `libnvidia-ml.so.1` does.

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuInstanceProfileInfo_v2_t,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT, nvmlReturn_t,
};

use super::core::on_gpu;
use super::mig::profile;
use super::struct_version;
use crate::state::{done, put};

/// `nvmlDeviceGetGpuInstanceProfileInfoV` (version 2: with the profile's name).
///
/// # Safety
/// `info` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    index: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        device,
        |_, g| {
            if info.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid as the caller promises.
            let version = unsafe { info.read() }.version;
            if version != struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2) {
                return Err(INVALID_ARGUMENT);
            }
            let p = profile(g, index)?;
            let mut name = [0 as c_char; 96];
            for (slot, byte) in name.iter_mut().zip(p.name.bytes().take(95)) {
                *slot = byte as c_char;
            }
            let value = nvmlGpuInstanceProfileInfo_v2_t {
                version,
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
                name,
            };
            // SAFETY: as above.
            unsafe { put(info, value) }
        },
    ))
}
