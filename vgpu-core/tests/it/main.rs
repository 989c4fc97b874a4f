//! `vgpu-core`'s integration tests in one binary: each module was a test file of its own. One
//! binary links once, where 15 took 15 links.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod checks;
mod common;
mod create_race;
mod discovery;
mod embedder;
mod fixtures;
mod hook;
mod lifecycle;
mod lifecycle_sriov;
mod mig;
mod nvml;
mod nvml_migration;
mod plans;
mod quota_plans;
mod release_guard;
mod sched;
mod sriov_drivers;
