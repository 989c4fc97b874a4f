//! The test NVML library of `vgpu-nvml-fake` as a driver from before vGPU 15 ships it
//! (`libvgpu_nvml_fake_legacy.so`): the same data file and answers, but the scheduler
//! functions (`nvmlDeviceGetVgpuScheduler*`, `nvmlDeviceSetVgpuSchedulerState`), the versioned
//! GPU-instance profile query (`nvmlDeviceGetGpuInstanceProfileInfoV`) and vGPU placements
//! (`nvmlDeviceGetVgpuTypeSupportedPlacements`) are not exported at all, so that a caller's
//! handling of a symbol the library lacks is tested. Nor are the MIG changes
//! (`nvmlDeviceSetMigMode`, GPU-instance placements, creation and destruction). Functions as old as vGPU 11 (R450), such
//! as `nvmlVgpuInstanceGetMdevUUID`, are exported as by the full build.
//!
//! The sources are those of `vgpu-nvml-fake`, less the modules of those functions.

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, reason = "the exported names are NVML's")]

#[path = "../../src/data.rs"]
#[allow(
    dead_code,
    reason = "the change log serves only the full build's changes"
)]
mod data;
#[path = "../../src/sim.rs"]
#[allow(
    dead_code,
    reason = "the control file serves only the full build's changes"
)]
mod sim;
#[path = "../../src/state.rs"]
#[allow(
    dead_code,
    reason = "the change helpers serve only the full build's changes"
)]
mod state;

mod exports;

pub use sim::SIM_ENV;
pub use state::{DATA_ENV, DATA_FILE};
