//! The vGPU scheduler of one GPU: best effort, equal share or fixed share, and the time slice
//! where the policy takes one (NVIDIA Virtual GPU Software User Guide, "Changing Scheduling
//! Behavior for Time-Sliced vGPUs"; NVML `nvmlDeviceGetVgpuSchedulerState`,
//! `nvmlDeviceSetVgpuSchedulerState`, `nvmlDeviceGetVgpuSchedulerCapabilities`).
//!
//! NVML takes a new state only while no vGPU runs on the GPU ("Scheduler state and params will
//! be allowed to set only when no VM is running", NVML API Reference): a change is refused
//! before NVML is asked when vGPUs run, and NVML's own refusal is passed on otherwise.

use crate::model::nvml::{NS_PER_MS, ns_as_ms};
use serde::Serialize;

use crate::error::NvmlError;
use crate::model::nvml::{SchedulerCapabilities, SchedulerPolicy};
use crate::model::pci::PciAddress;

pub use crate::model::nvml::SchedulerRequest;
#[cfg(feature = "nvml")]
pub(crate) use crate::model::nvml::already;

/// NVML's number for `policy` (`NVML_VGPU_SCHEDULER_POLICY_*`).
pub(crate) fn policy_code(policy: SchedulerPolicy) -> u32 {
    match policy {
        SchedulerPolicy::BestEffort => 1,
        SchedulerPolicy::EqualShare => 2,
        SchedulerPolicy::FixedShare => 3,
    }
}

/// The policy NVML numbers `code`, if it is one this library knows.
pub(crate) fn policy_of(code: u32) -> Option<SchedulerPolicy> {
    SchedulerPolicy::ALL
        .into_iter()
        .find(|p| policy_code(*p) == code)
}

/// Checks `request` for `gpu` before NVML is asked: the policy among those the GPU supports,
/// a time slice only for a policy that takes one and within the GPU's range, and no vGPU
/// running (`running` names them). Returns the time slice to give NVML, in nanoseconds (`0`
/// for the driver's default).
pub(crate) fn check(
    gpu: PciAddress,
    request: SchedulerRequest,
    capabilities: &SchedulerCapabilities,
    running: &[String],
) -> Result<u32, NvmlError> {
    if !capabilities.policies.contains(&request.policy) {
        return Err(NvmlError::PolicyNotSupported {
            gpu,
            policy: request.policy,
            supported: capabilities.policies.clone(),
        });
    }
    let timeslice_ns = match request.timeslice_ms {
        None => 0,
        Some(ms) => {
            let bad = |reason: String| NvmlError::BadTimeslice {
                gpu,
                policy: request.policy,
                asked_ms: ms,
                reason,
            };
            if !request.policy.takes_timeslice() {
                return Err(bad(format!(
                    "{} takes no time slice (equal-share and fixed-share do)",
                    request.policy
                )));
            }
            let ns = u64::from(ms) * NS_PER_MS;
            let (min, max) = (
                u64::from(capabilities.min_timeslice_ns),
                u64::from(capabilities.max_timeslice_ns),
            );
            if ns < min || ns > max {
                return Err(bad(format!(
                    "the GPU takes {} to {} ms",
                    ns_as_ms(min),
                    ns_as_ms(max)
                )));
            }
            // `ns` is at most `max`, a u32.
            u32::try_from(ns).map_err(|_| bad("too long".to_owned()))?
        }
    };
    if !running.is_empty() {
        return Err(NvmlError::VgpusRunning {
            gpu,
            running: running.to_vec(),
        });
    }
    Ok(timeslice_ns)
}

#[cfg(feature = "nvml")]
mod device {
    //! Reading and setting the scheduler through NVML.

    use nvml_wrapper::Device;
    use nvml_wrapper::struct_wrappers::device::{VgpuSchedulerSetParams, VgpuSchedulerSetState};

    use super::{policy_code, policy_of};
    use crate::model::nvml::{
        ArrMode, Fact, SchedulerCapabilities, SchedulerPolicy, SchedulerState, Unavailable,
    };
    use crate::nvml::read::{fact, unavailable};

    fn arr_mode(code: u32) -> ArrMode {
        match code {
            0 => ArrMode::Default,
            1 => ArrMode::Disabled,
            2 => ArrMode::Enabled,
            other => ArrMode::Other(other),
        }
    }

    /// The scheduler's state, with the time slice from its log.
    pub(crate) fn read_state(device: &Device<'_>) -> Fact<SchedulerState> {
        let timeslice_ns = fact("nvmlDeviceGetVgpuSchedulerLog", device.vgpu_scheduler_log())
            .map(|log| log.scheduler_params.timeslice);
        fact(
            "nvmlDeviceGetVgpuSchedulerState",
            device.vgpu_scheduler_state(),
        )
        .map(|state| SchedulerState {
            policy: policy_of(state.scheduler_policy),
            raw_policy: state.scheduler_policy,
            arr_mode: arr_mode(state.arr_mode),
            timeslice_ns,
        })
    }

    /// What the scheduler can be set to.
    pub(crate) fn read_capabilities(device: &Device<'_>) -> Fact<SchedulerCapabilities> {
        fact(
            "nvmlDeviceGetVgpuSchedulerCapabilities",
            device.vgpu_scheduler_capabilities(),
        )
        .map(|caps| {
            let mut policies: Vec<SchedulerPolicy> = caps
                .supported_schedulers
                .iter()
                .filter_map(|code| policy_of(*code))
                .collect();
            policies.sort();
            policies.dedup();
            SchedulerCapabilities {
                policies,
                arr_supported: caps.is_arr_mode_supported,
                min_timeslice_ns: caps.min_time_slice,
                max_timeslice_ns: caps.max_time_slice,
            }
        })
    }

    /// Asks NVML to set `policy` with `timeslice_ns` (0: the default), adaptive round-robin
    /// left at the driver's default.
    pub(crate) fn set(
        device: &Device<'_>,
        policy: SchedulerPolicy,
        timeslice_ns: u32,
    ) -> Result<(), Unavailable> {
        let state = VgpuSchedulerSetState {
            scheduler_policy: policy_code(policy),
            enable_arr_mode: 0,
            scheduler_params: VgpuSchedulerSetParams {
                avg_factor: None,
                frequency_or_timeslice: timeslice_ns,
            },
        };
        device
            .set_vgpu_scheduler_state(state)
            .map_err(|err| unavailable("nvmlDeviceSetVgpuSchedulerState", &err))
    }
}

#[cfg(feature = "nvml")]
pub(crate) use device::{read_capabilities, read_state};

/// What a scheduler change found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedulerChange {
    /// The GPU.
    pub gpu: PciAddress,
    /// The state before.
    pub before: crate::model::nvml::SchedulerState,
    /// The state after, read back.
    pub after: crate::model::nvml::SchedulerState,
    /// Whether NVML was asked to change anything (false when it was already so).
    pub changed: bool,
}

impl crate::nvml::Nvml {
    /// The scheduler state and capabilities of the GPU at `gpu`.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn scheduler(
        &self,
        gpu: PciAddress,
    ) -> Result<(crate::model::nvml::SchedulerState, SchedulerCapabilities), NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            let call = |why| NvmlError::Call { gpu, why };
            let device = crate::nvml::read::device_at(nvml, gpu).map_err(call)?;
            let state = read_state(&device)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            let caps = read_capabilities(&device)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            return Ok((state, caps));
        }
        Err(self.needed_for(format!("read the vGPU scheduler of {gpu}")))
    }

    /// The scheduler state of the GPU at `gpu`, with the reason when it cannot be read.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn scheduler_state(
        &self,
        gpu: PciAddress,
    ) -> crate::model::nvml::Fact<crate::model::nvml::SchedulerState> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return match crate::nvml::read::device_at(nvml, gpu) {
                Ok(device) => read_state(&device),
                Err(why) => crate::model::nvml::Fact::Unavailable(why),
            };
        }
        self.not_loaded()
    }

    /// Sets the scheduler of `gpu` to `request` after [`check`]ing it (`running`: the vGPUs
    /// on it that sysfs shows; NVML's own list is added), then reads it back. Nothing is
    /// asked of NVML when the GPU is already so. Callers go through
    /// [`Manager::set_scheduler`](crate::Manager::set_scheduler).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn set_scheduler(
        &self,
        gpu: PciAddress,
        request: SchedulerRequest,
        running: &[String],
    ) -> Result<SchedulerChange, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            let call = |why| NvmlError::Call { gpu, why };
            let (before, caps) = self.scheduler(gpu)?;
            if already(&before, request) {
                return Ok(SchedulerChange {
                    gpu,
                    after: before.clone(),
                    before,
                    changed: false,
                });
            }
            let device = crate::nvml::read::device_at(nvml, gpu).map_err(call)?;
            let mut running = running.to_vec();
            match vgpu_nvml_ext::active_vgpu_instances(&device) {
                Ok(ids) => {
                    for id in ids {
                        let name = format!("NVML vGPU instance {id}");
                        if !running.contains(&name) {
                            running.push(name);
                        }
                    }
                }
                Err(err) => {
                    return Err(call(crate::nvml::read::unavailable(
                        "nvmlDeviceGetActiveVgpus",
                        &err,
                    )));
                }
            }
            let timeslice_ns = check(gpu, request, &caps, &running)?;
            device::set(&device, request.policy, timeslice_ns).map_err(call)?;
            let after = read_state(&device)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            return Ok(SchedulerChange {
                gpu,
                before,
                after,
                changed: true,
            });
        }
        Err(self.needed_for(format!("set the vGPU scheduler of {gpu}")))
    }

    /// [`NvmlError::NotLoaded`] for `needed_for`.
    pub(crate) fn needed_for(&self, needed_for: String) -> NvmlError {
        NvmlError::NotLoaded {
            needed_for,
            reason: self
                .status()
                .reason
                .clone()
                .unwrap_or_else(|| "not initialised".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> SchedulerCapabilities {
        SchedulerCapabilities {
            policies: vec![
                SchedulerPolicy::BestEffort,
                SchedulerPolicy::EqualShare,
                SchedulerPolicy::FixedShare,
            ],
            arr_supported: true,
            min_timeslice_ns: 1_000_000,
            max_timeslice_ns: 30_000_000,
        }
    }

    fn gpu() -> PciAddress {
        "0000:41:00.0".parse().expect("valid address")
    }

    fn request(policy: SchedulerPolicy, timeslice_ms: Option<u32>) -> SchedulerRequest {
        SchedulerRequest {
            policy,
            timeslice_ms,
        }
    }

    #[test]
    fn check_equal_share_with_timeslice_gives_nanoseconds() {
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::EqualShare, Some(2)),
                &caps(),
                &[]
            ),
            Ok(2_000_000)
        );
    }

    #[test]
    fn check_without_timeslice_asks_for_default() {
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::FixedShare, None),
                &caps(),
                &[]
            ),
            Ok(0)
        );
    }

    #[test]
    fn check_best_effort_with_timeslice_is_bad_timeslice() {
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::BestEffort, Some(2)),
                &caps(),
                &[]
            ),
            Err(NvmlError::BadTimeslice {
                gpu: gpu(),
                policy: SchedulerPolicy::BestEffort,
                asked_ms: 2,
                reason: "best-effort takes no time slice (equal-share and fixed-share do)"
                    .to_owned(),
            })
        );
    }

    #[test]
    fn check_timeslice_above_max_names_range() {
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::EqualShare, Some(31)),
                &caps(),
                &[]
            )
            .map_err(|e| e.to_string()),
            Err(
                "time slice 31 ms for equal-share on 0000:41:00.0: the GPU takes 1 to 30 ms"
                    .to_owned()
            )
        );
    }

    #[test]
    fn check_unsupported_policy_lists_supported() {
        let mut only = caps();
        only.policies = vec![SchedulerPolicy::BestEffort];
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::FixedShare, None),
                &only,
                &[]
            ),
            Err(NvmlError::PolicyNotSupported {
                gpu: gpu(),
                policy: SchedulerPolicy::FixedShare,
                supported: vec![SchedulerPolicy::BestEffort],
            })
        );
    }

    #[test]
    fn check_running_vgpus_is_refused_naming_them() {
        assert_eq!(
            check(
                gpu(),
                request(SchedulerPolicy::EqualShare, None),
                &caps(),
                &["0000:41:00.4".to_owned()]
            ),
            Err(NvmlError::VgpusRunning {
                gpu: gpu(),
                running: vec!["0000:41:00.4".to_owned()],
            })
        );
    }

    #[test]
    fn policy_of_unknown_code_is_none() {
        assert_eq!(policy_of(0), None);
    }
}
