//! The vGPU scheduler: its state, log, capabilities, and changes to it (recorded in the call
//! log beside the data file, so that the caller's test can check the exact values).

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlReturn_enum_NVML_ERROR_IN_USE as IN_USE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_t, nvmlVgpuSchedulerCapabilities_t,
    nvmlVgpuSchedulerGetState_t, nvmlVgpuSchedulerLog_t, nvmlVgpuSchedulerParams_t,
    nvmlVgpuSchedulerParams_t__bindgen_ty_2, nvmlVgpuSchedulerSetState_t,
};

use super::core::on_gpu;
use super::refusal_of;
use crate::data::{self, Call};
use crate::sim::{self, policy_name};
use crate::state::{device_index, done, gpu, put, with_mut};

/// `NVML_VGPU_SCHEDULER_ARR_ENABLE`.
const ARR_ENABLE: u32 = 2;

fn params(timeslice: u32) -> nvmlVgpuSchedulerParams_t {
    nvmlVgpuSchedulerParams_t {
        vgpuSchedData: nvmlVgpuSchedulerParams_t__bindgen_ty_2 { timeslice },
    }
}

/// `nvmlDeviceGetVgpuSchedulerState`.
///
/// # Safety
/// `state` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerState(
    device: nvmlDevice_t,
    state: *mut nvmlVgpuSchedulerGetState_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetVgpuSchedulerState", device, |_, g| {
        let s = g.scheduler.ok_or(NOT_SUPPORTED)?;
        let value = nvmlVgpuSchedulerGetState_t {
            schedulerPolicy: s.policy,
            arrMode: s.arr_mode,
            schedulerParams: params(s.timeslice_ns),
        };
        // SAFETY: as the caller promises.
        unsafe { put(state, value) }
    }))
}

/// `nvmlDeviceGetVgpuSchedulerLog`: no entries, the state's parameters.
///
/// # Safety
/// `log` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerLog(
    device: nvmlDevice_t,
    log: *mut nvmlVgpuSchedulerLog_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetVgpuSchedulerLog", device, |_, g| {
        let s = g.scheduler.ok_or(NOT_SUPPORTED)?;
        if log.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: an all-zero log is valid (integers and unions of integers); `log` is not
        // null and valid for a write as the caller promises.
        unsafe {
            let mut value: nvmlVgpuSchedulerLog_t = std::mem::zeroed();
            value.engineId = 1;
            value.schedulerPolicy = s.policy;
            value.arrMode = s.arr_mode;
            value.schedulerParams = params(s.timeslice_ns);
            put(log, value)
        }
    }))
}

/// `nvmlDeviceGetVgpuSchedulerCapabilities`.
///
/// # Safety
/// `caps` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuSchedulerCapabilities(
    device: nvmlDevice_t,
    caps: *mut nvmlVgpuSchedulerCapabilities_t,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetVgpuSchedulerCapabilities",
        device,
        |_, g| {
            let c = g.scheduler_capabilities.as_ref().ok_or(NOT_SUPPORTED)?;
            let mut supported = [0u32; 3];
            for (slot, policy) in supported.iter_mut().zip(&c.policies) {
                *slot = *policy;
            }
            let value = nvmlVgpuSchedulerCapabilities_t {
                supportedSchedulers: supported,
                maxTimeslice: c.max_timeslice_ns,
                minTimeslice: c.min_timeslice_ns,
                isArrModeSupported: u32::from(c.arr_supported),
                maxFrequencyForARR: 0,
                minFrequencyForARR: 0,
                maxAvgFactorForARR: 0,
                minAvgFactorForARR: 0,
            };
            // SAFETY: as the caller promises.
            unsafe { put(caps, value) }
        },
    ))
}

/// `nvmlDeviceSetVgpuSchedulerState`: refused (`NVML_ERROR_IN_USE`) while vGPUs run,
/// `NVML_ERROR_INVALID_ARGUMENT` for a policy or time slice outside the capabilities;
/// otherwise recorded in the call log and applied. On a simulated GPU whose scheduler the
/// data does not give, the simulator's control line `vgpu-scheduler` applies it, and its
/// refusal is NVML's error (`EBUSY` `NVML_ERROR_IN_USE`, `EINVAL`
/// `NVML_ERROR_INVALID_ARGUMENT`, `ENODEV` `NVML_ERROR_NOT_SUPPORTED`).
///
/// # Safety
/// `state` is null or valid for a read.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceSetVgpuSchedulerState(
    device: nvmlDevice_t,
    state: *mut nvmlVgpuSchedulerSetState_t,
) -> nvmlReturn_t {
    let Ok(index) = device_index(device) else {
        return INVALID_ARGUMENT;
    };
    done(with_mut(
        "nvmlDeviceSetVgpuSchedulerState",
        Some(index),
        |d, path| {
            if state.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid for a read as the caller promises.
            let asked = unsafe { state.read() };
            // SAFETY: both members of the union start with a u32 the caller wrote; which one
            // holds the time slice (or ARR frequency) follows `enableARRMode`.
            let timeslice = unsafe {
                if asked.enableARRMode == ARR_ENABLE {
                    asked.schedulerParams.vgpuSchedDataWithARR.frequency
                } else {
                    asked.schedulerParams.vgpuSchedData.timeslice
                }
            };
            let g = gpu(d, index)?;
            let caps = g.scheduler_capabilities.as_ref().ok_or(NOT_SUPPORTED)?;
            if !caps.policies.contains(&asked.schedulerPolicy) {
                return Err(INVALID_ARGUMENT);
            }
            if timeslice != 0
                && !(caps.min_timeslice_ns..=caps.max_timeslice_ns).contains(&timeslice)
            {
                return Err(INVALID_ARGUMENT);
            }
            if !g.vgpus.is_empty() {
                return Err(IN_USE);
            }
            let sim_root = d.sim_root.clone().filter(|_| !g.given.scheduler);
            if let Some(root) = &sim_root {
                let policy = policy_name(asked.schedulerPolicy).ok_or(INVALID_ARGUMENT)?;
                // The simulator keeps no adaptive round robin: its frequency is not a slice.
                let slice = if asked.enableARRMode == ARR_ENABLE {
                    0
                } else {
                    timeslice
                };
                sim::control(root, &format!("vgpu-scheduler {} {policy} {slice}", g.pci))
                    .map_err(|e| refusal_of(&e))?;
            }
            let call = Call::SetScheduler {
                gpu: g.pci.clone(),
                policy: asked.schedulerPolicy,
                arr_mode: asked.enableARRMode,
                timeslice_ns: timeslice,
            };
            data::record(path, &call).map_err(|_| UNKNOWN)?;
            d.apply(&call);
            match sim_root {
                Some(root) => sim::refresh(d, &root, sim::Need::default()).map_err(|_| UNKNOWN),
                None => Ok(()),
            }
        },
    ))
}
