//! The exported NVML functions, by area.

mod core;
mod mig;
mod mig_write;
mod migration;
mod newer;
mod sched;
mod vgpu;
