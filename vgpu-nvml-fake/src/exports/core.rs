//! Initialisation, the system, and device queries every driver has had.
//!
//! Every entry point writes only through the caller's out-pointers, after checking each for
//! null (`NVML_ERROR_INVALID_ARGUMENT`), as `nvml.h` documents for the real library.

use std::ffi::{CStr, c_char, c_uint};

use nvml_wrapper_sys::bindings::{
    NVML_CC_SYSTEM_FEATURE_DISABLED, NVML_CC_SYSTEM_FEATURE_ENABLED, nvmlDevice_t,
    nvmlEnableState_enum_NVML_FEATURE_DISABLED, nvmlEnableState_enum_NVML_FEATURE_ENABLED,
    nvmlEnableState_t, nvmlGpuVirtualizationMode_t, nvmlHostVgpuMode_t, nvmlPciInfo_t,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED, nvmlReturn_t,
    nvmlSystemConfComputeSettings_t,
};

use crate::data::Mode;
use crate::state::{self, Answer, device_handle, device_index, done, gpu, put, put_str, with};

#[unsafe(no_mangle)]
extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    state::init()
}

#[unsafe(no_mangle)]
extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    state::init()
}

#[unsafe(no_mangle)]
extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    state::shutdown()
}

/// `nvmlSystemGetDriverVersion`.
///
/// # Safety
/// `version` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    done(with("nvmlSystemGetDriverVersion", None, |d| {
        // SAFETY: as the caller promises.
        unsafe { put_str(version, length, &d.driver_version) }
    }))
}

/// `nvmlSystemGetNVMLVersion`.
///
/// # Safety
/// `version` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    done(with("nvmlSystemGetNVMLVersion", None, |d| {
        // SAFETY: as the caller promises.
        unsafe { put_str(version, length, &d.nvml_version) }
    }))
}

/// `nvmlDeviceGetCount_v2`.
///
/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    done(with("nvmlDeviceGetCount_v2", None, |d| {
        let n = u32::try_from(d.gpus.len()).map_err(|_| INVALID_ARGUMENT)?;
        // SAFETY: as the caller promises.
        unsafe { put(count, n) }
    }))
}

/// `nvmlDeviceGetHandleByIndex_v2`.
///
/// # Safety
/// `device` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let index = index as usize;
    done(with("nvmlDeviceGetHandleByIndex_v2", Some(index), |d| {
        gpu(d, index)?;
        // SAFETY: as the caller promises.
        unsafe { put(device, device_handle(index)) }
    }))
}

/// The PCI address `text` names, in the kernel's form (`0000:41:00.0`): NVML takes a domain
/// of four or eight hex digits, in either case.
fn canonical_bus_id(text: &str) -> Option<String> {
    let (domain, rest) = text.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (slot, function) = rest.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let slot = u8::from_str_radix(slot, 16).ok()?;
    let function = u8::from_str_radix(function, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"))
}

/// `nvmlDeviceGetHandleByPciBusId_v2`.
///
/// # Safety
/// `bus_id` is null or a NUL-terminated string; `device` null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    done(with("nvmlDeviceGetHandleByPciBusId_v2", None, |d| {
        if bus_id.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: not null, NUL-terminated as the caller promises.
        let text = unsafe { CStr::from_ptr(bus_id) }.to_string_lossy();
        let wanted = canonical_bus_id(&text).ok_or(INVALID_ARGUMENT)?;
        let index = d
            .gpus
            .iter()
            .position(|g| canonical_bus_id(&g.pci).as_deref() == Some(wanted.as_str()))
            .ok_or(NOT_FOUND)?;
        // SAFETY: as the caller promises.
        unsafe { put(device, device_handle(index)) }
    }))
}

/// Answers `function` about `device` with `f` on its GPU's data.
pub(crate) fn on_gpu<T>(
    function: &str,
    device: nvmlDevice_t,
    f: impl FnOnce(&crate::data::Data, &crate::data::Gpu) -> Answer<T>,
) -> Answer<T> {
    let index = device_index(device)?;
    with(function, Some(index), |d| f(d, gpu(d, index)?))
}

/// Writes `text` into a C character array (NUL-terminated, cut to fit).
pub(crate) fn fill(array: &mut [c_char], text: &str) {
    let room = array.len().saturating_sub(1);
    for (slot, byte) in array
        .iter_mut()
        .zip(text.bytes().take(room).chain(std::iter::repeat(0)))
    {
        *slot = byte as c_char;
    }
}

/// `nvmlDeviceGetPciInfo_v3`.
///
/// # Safety
/// `pci` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetPciInfo_v3", device, |_, g| {
        let bus_id = canonical_bus_id(&g.pci).ok_or(INVALID_ARGUMENT)?;
        // NVML prints the domain with eight digits and the rest in upper case.
        let (domain, rest) = bus_id.split_once(':').ok_or(INVALID_ARGUMENT)?;
        let domain_num = u32::from_str_radix(domain, 16).map_err(|_| INVALID_ARGUMENT)?;
        let long = format!("{domain_num:08X}:{}", rest.to_uppercase());
        let parts: Vec<u32> = rest
            .split([':', '.'])
            .map(|p| u32::from_str_radix(p, 16).unwrap_or(0))
            .collect();
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: domain_num,
            bus: parts.first().copied().unwrap_or(0),
            device: parts.get(1).copied().unwrap_or(0),
            pciDeviceId: g.pci_device_id,
            pciSubSystemId: 0,
            busId: [0; 32],
        };
        fill(&mut info.busIdLegacy, &long);
        fill(&mut info.busId, &long);
        // SAFETY: as the caller promises.
        unsafe { put(pci, info) }
    }))
}

/// `nvmlDeviceGetName`.
///
/// # Safety
/// `name` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetName", device, |_, g| {
        // SAFETY: as the caller promises.
        unsafe { put_str(name, length, &g.name) }
    }))
}

/// `nvmlDeviceGetUUID`.
///
/// # Safety
/// `uuid` is null or valid for `length` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetUUID", device, |_, g| {
        // SAFETY: as the caller promises.
        unsafe { put_str(uuid, length, &g.uuid) }
    }))
}

/// `nvmlDeviceGetIndex`.
///
/// # Safety
/// `index` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetIndex", device, |_, _| {
        let i = u32::try_from(device_index(device)?).map_err(|_| INVALID_ARGUMENT)?;
        // SAFETY: as the caller promises.
        unsafe { put(index, i) }
    }))
}

/// `nvmlDeviceGetVirtualizationMode`.
///
/// # Safety
/// `mode` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVirtualizationMode(
    device: nvmlDevice_t,
    mode: *mut nvmlGpuVirtualizationMode_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetVirtualizationMode", device, |_, g| {
        let value = match g.virtualization_mode.as_str() {
            "none" => 0,
            "passthrough" => 1,
            "vgpu" => 2,
            "host-vgpu" => 3,
            "host-vsga" => 4,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: as the caller promises.
        unsafe { put(mode, value) }
    }))
}

/// `nvmlDeviceGetHostVgpuMode`.
///
/// # Safety
/// `mode` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetHostVgpuMode(
    device: nvmlDevice_t,
    mode: *mut nvmlHostVgpuMode_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetHostVgpuMode", device, |_, g| {
        let value = match g.host_vgpu_mode.as_str() {
            "non-sriov" => 0,
            "sriov" => 1,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: as the caller promises.
        unsafe { put(mode, value) }
    }))
}

fn mode_pair(mode: Option<Mode>) -> Answer<(u32, u32)> {
    let m = mode.ok_or(NOT_SUPPORTED)?;
    Ok((u32::from(m.current), u32::from(m.pending)))
}

/// `nvmlDeviceGetMigMode`.
///
/// # Safety
/// `current` and `pending` are null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetMigMode", device, |_, g| {
        let (c, p) = mode_pair(g.mig)?;
        // SAFETY: as the caller promises.
        unsafe {
            put(current, c)?;
            put(pending, p)
        }
    }))
}

fn enable_state(on: u32) -> nvmlEnableState_t {
    if on != 0 {
        nvmlEnableState_enum_NVML_FEATURE_ENABLED
    } else {
        nvmlEnableState_enum_NVML_FEATURE_DISABLED
    }
}

/// `nvmlDeviceGetEccMode`.
///
/// # Safety
/// `current` and `pending` are null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetEccMode", device, |_, g| {
        let (c, p) = mode_pair(g.ecc)?;
        // SAFETY: as the caller promises.
        unsafe {
            put(current, enable_state(c))?;
            put(pending, enable_state(p))
        }
    }))
}

/// `nvmlSystemGetConfComputeSettings`.
///
/// # Safety
/// `settings` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlSystemGetConfComputeSettings(
    settings: *mut nvmlSystemConfComputeSettings_t,
) -> nvmlReturn_t {
    done(with("nvmlSystemGetConfComputeSettings", None, |d| {
        if settings.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: not null, valid as the caller promises; the caller set `version`.
        let version = unsafe { settings.read() }.version;
        let value = nvmlSystemConfComputeSettings_t {
            version,
            environment: 0,
            ccFeature: if d.confidential_computing {
                NVML_CC_SYSTEM_FEATURE_ENABLED
            } else {
                NVML_CC_SYSTEM_FEATURE_DISABLED
            },
            devToolsMode: 0,
            multiGpuMode: 0,
        };
        // SAFETY: as above.
        unsafe { put(settings, value) }
    }))
}

#[cfg(test)]
mod tests {
    use super::canonical_bus_id;

    #[test]
    fn canonical_bus_id_eight_digit_upper_case_domain_is_the_kernel_s() {
        assert_eq!(
            canonical_bus_id("00000000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
    }

    #[test]
    fn canonical_bus_id_without_function_is_none() {
        assert_eq!(canonical_bus_id("0000:41:00"), None);
    }
}
