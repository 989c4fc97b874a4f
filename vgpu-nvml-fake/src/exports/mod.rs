//! The exported NVML functions, by area.

mod core;
mod mig;
mod newer;
mod sched;
mod vgpu;
