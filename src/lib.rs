//! `vgpu`: manage vGPUs and SR-IOV virtual functions on KVM hosts.
//!
//! This crate re-exports [`vgpu_core`] so that orchestrators can depend on one name; the
//! workspace's end-to-end tests and examples live beside it.

#![forbid(unsafe_code)]

pub use vgpu_core::*;
