//! vGPU scheduler definitions: `etc/vgpu/sched/<gpu>.json`, the scheduler a GPU is to have.
//! NVIDIA's driver keeps the scheduler only while it is loaded, and refuses a change while the
//! GPU holds vGPUs (vGPU user guide, "Changing Scheduling Behavior for Time-Sliced vGPUs"), so
//! `restore` sets it again before it makes the GPU's vGPUs.
//!
//! ```json
//! {"version": 1, "policy": "fixed-share", "timeslice_ms": null}
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{SizeModeDefinition, Store};
use crate::error::{Error, Result};
use crate::model::nvml::{SchedulerPolicy, SchedulerRequest};
use crate::model::pci::PciAddress;
use crate::state::format::{FORMAT_VERSION, decode_own, definition, encode_own};

const SCHED_DIR: &str = "sched";

/// The vGPU scheduler a GPU is to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SchedDefinition {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its policy and time slice.
    pub request: SchedulerRequest,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedFile {
    version: u32,
    policy: SchedulerPolicy,
    #[serde(default)]
    timeslice_ms: Option<u32>,
}

fn encode(path: &Path, d: &SchedDefinition) -> Result<Vec<u8>> {
    check(path, d.request)?;
    encode_own(
        path,
        &SchedFile {
            version: FORMAT_VERSION,
            policy: d.request.policy,
            timeslice_ms: d.request.timeslice_ms,
        },
    )
}

fn decode(path: &Path, gpu: PciAddress, text: &str) -> Result<SchedDefinition> {
    let file: SchedFile = decode_own(path, text)?;
    let request = SchedulerRequest {
        policy: file.policy,
        timeslice_ms: file.timeslice_ms,
    };
    check(path, request)?;
    Ok(SchedDefinition { gpu, request })
}

/// Best effort takes no time slice.
fn check(path: &Path, request: SchedulerRequest) -> Result<()> {
    if request.timeslice_ms.is_some() && !request.policy.takes_timeslice() {
        return Err(definition(
            path,
            format!("{} takes no time slice", request.policy),
        ));
    }
    Ok(())
}

super::own_kind!(
    /// A GPU's vGPU scheduler.
    Sched, SCHED_DIR, SchedDefinition, gpu, decode, encode
);

impl Store {
    /// Every scheduler definition that can be read, sorted by GPU, and an error for each file
    /// that cannot.
    pub fn scheds_lenient(&self) -> (Vec<SchedDefinition>, Vec<Error>) {
        self.own_lenient::<Sched>()
    }

    /// Every size-mode definition that can be read, sorted by GPU, and an error for each file
    /// that cannot.
    pub fn size_modes_lenient(&self) -> (Vec<SizeModeDefinition>, Vec<Error>) {
        self.own_lenient::<super::SizeModeKind>()
    }

    /// The scheduler definition of `gpu`; `None` when there is none.
    pub fn sched_of(&self, gpu: PciAddress) -> Result<Option<SchedDefinition>> {
        self.own_of::<Sched>(gpu)
    }
}
