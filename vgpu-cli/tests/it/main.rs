//! `vgpu-cli`'s integration tests in one binary: each module was a test file of its own. One
//! binary links once, where 25 took 25 links.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod alerts_cli;
mod common;
mod completions_cli;
mod error_kinds;
mod exit_codes;
mod golden;
mod hook_cli;
mod hook_libvirtd;
mod interrupt_cli;
mod kill_cli;
mod kubevirt_config;
mod libvirt_helper;
mod lifecycle_cli;
mod man_pages;
mod mig_cli;
mod migrate_cli;
mod migrate_nvml;
mod mixed_size_cli;
mod no_libvirt;
mod nova_config;
mod nova_inventory;
mod nvml_cli;
mod one_truth;
mod persistence_cli;
mod plans_cli;
mod qos_cli;
mod race_cli;
mod restore_device_cli;
mod scrub_cli;
mod telemetry_cli;
mod tenants_cli;
mod udev_rule;
mod usage_cli;
mod vm_cli;
mod watch_cli;
