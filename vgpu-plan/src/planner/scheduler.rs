//! The `scheduler` key of a selection: a step that sets an NVIDIA GPU's vGPU scheduler, placed
//! after the steps that take vGPUs away and before those that start or create them (NVML sets
//! the scheduler only while no vGPU runs), or the reason it cannot be planned.

use crate::HostState;
use crate::desired::Entry;
use crate::model::nvml::Fact;
use crate::model::nvml::already;
use crate::model::{Gpu, NVIDIA_VENDOR_ID};
use crate::steps::{GpuPlan, Refusal, Refused, Step};

/// Adds to `out` the scheduler step `entry` asks of `gpu`, or why it cannot be taken.
pub(crate) fn plan(host: &HostState, gpu: &Gpu, entry: &Entry, out: &mut GpuPlan) {
    let Some(request) = entry.scheduler else {
        return;
    };
    let refuse =
        |out: &mut GpuPlan, refusal| out.refusals.push(Refused::new(refusal, Some(entry.at)));
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
        return refuse(out, Refusal::SchedulerNotNvidia);
    }
    let state = match host.schedulers.get(&gpu.address) {
        Some(Fact::Value(state)) => state,
        Some(Fact::Unavailable(why)) => {
            return refuse(
                out,
                Refusal::SchedulerUnknown {
                    why: why.reason.clone(),
                },
            );
        }
        None => {
            return refuse(
                out,
                Refusal::SchedulerUnknown {
                    why: "it was not read from NVML".to_owned(),
                },
            );
        }
    };
    if already(state, request) {
        return;
    }
    let running: Vec<_> = out
        .keep
        .iter()
        .copied()
        .filter(|id| out.before.vgpus.contains(id))
        .collect();
    if !running.is_empty() {
        return refuse(out, Refusal::SchedulerBusy { running });
    }
    let at = out
        .steps
        .iter()
        .position(|s| matches!(s, Step::Start { .. } | Step::Create { .. }))
        .unwrap_or(out.steps.len());
    out.steps.insert(
        at,
        Step::Scheduler {
            policy: request.policy,
            timeslice_ms: request.timeslice_ms,
        },
    );
}

#[cfg(test)]
mod tests;
