//! `vgpu-sim`'s integration tests in one binary: each module was a test file of its own. One
//! binary links once, where 17 took 17 links.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod blocking;
mod cli;
mod common;
mod control;
mod drivers;
mod fidelity;
mod inodes;
mod libvirt_nodedev;
mod lmem_quota;
mod mdev_nvidia;
mod mdevctl;
mod mig;
mod mixed_size;
mod nvidia_sched;
mod processes;
mod profile_settings;
mod semantics;
mod uevents;
mod unmount;
mod vfio;
