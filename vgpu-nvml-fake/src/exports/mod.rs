//! The exported NVML functions, by area.

mod core;
mod mig;
mod mig_write;
mod migration;
mod newer;
mod placement;
mod sched;
mod vgpu;
