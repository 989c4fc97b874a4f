//! vGPU types, running vGPUs and their utilisation ("vGPU Management" of the NVML API
//! Reference). Type and vGPU-instance ids are system-wide in NVML: they are looked up over
//! every GPU of the data.

use std::ffi::{c_char, c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEncoderSessionInfo_t,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED, nvmlReturn_t, nvmlValue_t,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT, nvmlValueType_t, nvmlVgpuInstance_t,
    nvmlVgpuInstanceUtilizationSample_t, nvmlVgpuTypeId_t,
    nvmlVgpuVmIdType_NVML_VGPU_VM_ID_DOMAIN_ID, nvmlVgpuVmIdType_NVML_VGPU_VM_ID_UUID,
    nvmlVgpuVmIdType_t,
};

use super::core::on_gpu;
use crate::data::{Data, Gpu, Vgpu, VgpuType};
use crate::state::{Answer, done, put, put_list, put_str, put_str_sized, with};

/// `INVALID_GPU_INSTANCE_PROFILE_ID` and `INVALID_GPU_INSTANCE_ID` of `nvml.h`.
const INVALID_ID: u32 = 0xFFFF_FFFF;

const MIB: u64 = 1024 * 1024;

fn vgpu_type(data: &Data, id: u32) -> Answer<&VgpuType> {
    data.gpus
        .iter()
        .flat_map(|g| g.types.iter())
        .find(|t| t.id == id)
        .ok_or(INVALID_ARGUMENT)
}

fn vgpu(data: &Data, instance: u32) -> Answer<(&Gpu, &Vgpu)> {
    data.gpus
        .iter()
        .flat_map(|g| g.vgpus.iter().map(move |v| (g, v)))
        .find(|(_, v)| v.instance == instance)
        .ok_or(NOT_FOUND)
}

/// `nvmlDeviceGetSupportedVgpus`.
///
/// # Safety
/// `count` is null or valid for a read and a write; `ids` null or valid for `*count` writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetSupportedVgpus(
    device: nvmlDevice_t,
    count: *mut c_uint,
    ids: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetSupportedVgpus", device, |_, g| {
        let list: Vec<u32> = g.types.iter().map(|t| t.id).collect();
        // SAFETY: as the caller promises.
        unsafe { put_list(count, ids, &list) }
    }))
}

/// `nvmlDeviceGetCreatableVgpus`.
///
/// # Safety
/// As [`nvmlDeviceGetSupportedVgpus`].
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetCreatableVgpus(
    device: nvmlDevice_t,
    count: *mut c_uint,
    ids: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetCreatableVgpus", device, |_, g| {
        // SAFETY: as the caller promises.
        unsafe { put_list(count, ids, &g.creatable) }
    }))
}

/// `nvmlVgpuTypeGetName`.
///
/// # Safety
/// `size` is null or valid for a read and a write; `name` null or valid for `*size` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetName(
    id: nvmlVgpuTypeId_t,
    name: *mut c_char,
    size: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuTypeGetName", None, |d| {
        let t = vgpu_type(d, id)?;
        // SAFETY: as the caller promises.
        unsafe { put_str_sized(name, size, &t.name) }
    }))
}

/// `nvmlVgpuTypeGetClass`.
///
/// # Safety
/// As [`nvmlVgpuTypeGetName`].
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetClass(
    id: nvmlVgpuTypeId_t,
    class: *mut c_char,
    size: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuTypeGetClass", None, |d| {
        let t = vgpu_type(d, id)?;
        // SAFETY: as the caller promises.
        unsafe { put_str_sized(class, size, &t.class) }
    }))
}

/// `nvmlVgpuTypeGetFramebufferSize`.
///
/// # Safety
/// `size` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetFramebufferSize(
    id: nvmlVgpuTypeId_t,
    size: *mut c_ulonglong,
) -> nvmlReturn_t {
    done(with("nvmlVgpuTypeGetFramebufferSize", None, |d| {
        let bytes = vgpu_type(d, id)?.framebuffer_mib.saturating_mul(MIB);
        // SAFETY: as the caller promises.
        unsafe { put(size, bytes) }
    }))
}

/// `nvmlVgpuTypeGetMaxInstances`.
///
/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetMaxInstances(
    device: nvmlDevice_t,
    id: nvmlVgpuTypeId_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlVgpuTypeGetMaxInstances", device, |_, g| {
        let t = g
            .types
            .iter()
            .find(|t| t.id == id)
            .ok_or(INVALID_ARGUMENT)?;
        // SAFETY: as the caller promises.
        unsafe { put(count, t.max_instances) }
    }))
}

/// `nvmlVgpuTypeGetMaxInstancesPerVm`.
///
/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetMaxInstancesPerVm(
    id: nvmlVgpuTypeId_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuTypeGetMaxInstancesPerVm", None, |d| {
        let n = vgpu_type(d, id)?.max_instances_per_vm;
        // SAFETY: as the caller promises.
        unsafe { put(count, n) }
    }))
}

/// `nvmlVgpuTypeGetGpuInstanceProfileId`.
///
/// # Safety
/// `profile` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuTypeGetGpuInstanceProfileId(
    id: nvmlVgpuTypeId_t,
    profile: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuTypeGetGpuInstanceProfileId", None, |d| {
        let p = vgpu_type(d, id)?
            .gpu_instance_profile_id
            .unwrap_or(INVALID_ID);
        // SAFETY: as the caller promises.
        unsafe { put(profile, p) }
    }))
}

/// `nvmlDeviceGetActiveVgpus`.
///
/// # Safety
/// As [`nvmlDeviceGetSupportedVgpus`].
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetActiveVgpus(
    device: nvmlDevice_t,
    count: *mut c_uint,
    instances: *mut nvmlVgpuInstance_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetActiveVgpus", device, |_, g| {
        let list: Vec<u32> = g.vgpus.iter().map(|v| v.instance).collect();
        // SAFETY: as the caller promises.
        unsafe { put_list(count, instances, &list) }
    }))
}

/// `nvmlVgpuInstanceGetType`.
///
/// # Safety
/// `id` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetType(
    instance: nvmlVgpuInstance_t,
    id: *mut nvmlVgpuTypeId_t,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetType", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        // SAFETY: as the caller promises.
        unsafe { put(id, v.type_id) }
    }))
}

/// `nvmlVgpuInstanceGetUUID`.
///
/// # Safety
/// `uuid` is null or valid for `size` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetUUID(
    instance: nvmlVgpuInstance_t,
    uuid: *mut c_char,
    size: c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetUUID", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        // SAFETY: as the caller promises.
        unsafe { put_str(uuid, size, &v.uuid) }
    }))
}

/// `nvmlVgpuInstanceGetMdevUUID`: `NOT_SUPPORTED` for a vGPU whose data names no mediated
/// device.
///
/// # Safety
/// `uuid` is null or valid for `size` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetMdevUUID(
    instance: nvmlVgpuInstance_t,
    uuid: *mut c_char,
    size: c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetMdevUUID", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        let mdev = v.mdev_uuid.as_deref().ok_or(NOT_SUPPORTED)?;
        // SAFETY: as the caller promises.
        unsafe { put_str(uuid, size, mdev) }
    }))
}

/// `nvmlVgpuInstanceGetVmID`: `NOT_SUPPORTED` for a vGPU whose VM the data does not name
/// (one a simulated host runs).
///
/// # Safety
/// `vm_id` is null or valid for `size` bytes; `kind` null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetVmID(
    instance: nvmlVgpuInstance_t,
    vm_id: *mut c_char,
    size: c_uint,
    kind: *mut nvmlVgpuVmIdType_t,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetVmID", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        let vm = v.vm_id.as_ref().ok_or(NOT_SUPPORTED)?;
        let k = match vm.kind.as_str() {
            "domain" => nvmlVgpuVmIdType_NVML_VGPU_VM_ID_DOMAIN_ID,
            "uuid" => nvmlVgpuVmIdType_NVML_VGPU_VM_ID_UUID,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: as the caller promises.
        unsafe {
            put_str(vm_id, size, &vm.id)?;
            put(kind, k)
        }
    }))
}

/// `nvmlVgpuInstanceGetFbUsage`.
///
/// # Safety
/// `usage` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetFbUsage(
    instance: nvmlVgpuInstance_t,
    usage: *mut c_ulonglong,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetFbUsage", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        // SAFETY: as the caller promises.
        unsafe { put(usage, v.fb_usage_mib.saturating_mul(MIB)) }
    }))
}

/// `nvmlVgpuInstanceGetEncoderSessions`: the count only (the session list is empty).
///
/// # Safety
/// `count` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetEncoderSessions(
    instance: nvmlVgpuInstance_t,
    count: *mut c_uint,
    sessions: *mut nvmlEncoderSessionInfo_t,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetEncoderSessions", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        let n = v.encoder.map_or(0, |e| e.sessions);
        if !sessions.is_null() {
            // The fake keeps no per-session detail: only counts are asked for.
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: as the caller promises.
        unsafe { put(count, n) }
    }))
}

/// `nvmlVgpuInstanceGetEncoderStats`.
///
/// # Safety
/// The three out-pointers are null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetEncoderStats(
    instance: nvmlVgpuInstance_t,
    sessions: *mut c_uint,
    fps: *mut c_uint,
    latency: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetEncoderStats", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        let e = v.encoder.unwrap_or(crate::data::Encoder {
            sessions: 0,
            average_fps: 0,
            average_latency_us: 0,
        });
        // SAFETY: as the caller promises.
        unsafe {
            put(sessions, e.sessions)?;
            put(fps, e.average_fps)?;
            put(latency, e.average_latency_us)
        }
    }))
}

/// `nvmlVgpuInstanceGetGpuInstanceId`.
///
/// # Safety
/// `id` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetGpuInstanceId(
    instance: nvmlVgpuInstance_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetGpuInstanceId", None, |d| {
        let (_, v) = vgpu(d, instance)?;
        // SAFETY: as the caller promises.
        unsafe { put(id, v.gpu_instance_id.unwrap_or(INVALID_ID)) }
    }))
}

/// `nvmlDeviceGetVgpuUtilization`: the samples newer than `last_seen`, values as unsigned
/// integers.
///
/// # Safety
/// `kind` and `count` are null or valid for a read and a write; `samples` null or valid for
/// `*count` writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuUtilization(
    device: nvmlDevice_t,
    last_seen: c_ulonglong,
    kind: *mut nvmlValueType_t,
    count: *mut c_uint,
    samples: *mut nvmlVgpuInstanceUtilizationSample_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetVgpuUtilization", device, |_, g| {
        let value = |v: u32| nvmlValue_t { uiVal: v };
        let list: Vec<nvmlVgpuInstanceUtilizationSample_t> = g
            .vgpus
            .iter()
            .flat_map(|v| v.utilization.iter().map(move |s| (v.instance, s)))
            .filter(|(_, s)| s.timestamp_us > last_seen)
            .map(|(instance, s)| nvmlVgpuInstanceUtilizationSample_t {
                vgpuInstance: instance,
                timeStamp: s.timestamp_us,
                smUtil: value(s.sm),
                memUtil: value(s.memory),
                encUtil: value(s.encoder),
                decUtil: value(s.decoder),
            })
            .collect();
        // SAFETY: as the caller promises.
        unsafe {
            put(kind, nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT)?;
            put_list(count, samples, &list)
        }
    }))
}
