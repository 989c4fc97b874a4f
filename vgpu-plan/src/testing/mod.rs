//! Fixtures for benchmarks and tests, not for planning: GPUs built in memory, as discovery
//! reports them. This crate's tests, its benchmark and `vgpu-core`'s tests use them.

pub mod fleet;

#[cfg(test)]
pub(crate) mod unit;
