//! The exported functions every driver has: those of `vgpu-nvml-fake` less the scheduler,
//! the versioned profile query and placements.

#[path = "../../../src/exports/core.rs"]
mod core;
#[path = "../../../src/exports/mig.rs"]
mod mig;
#[path = "../../../src/exports/vgpu.rs"]
mod vgpu;
