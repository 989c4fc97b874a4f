//! Helpers shared by the simulator-driven lifecycle tests.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use vgpu_core::{
    HostPaths, Manager, discover,
    model::{Gpu, Inventory, pci::PciAddress},
    state::AuditEntry,
};
use vgpu_sim::SimHost;

pub(crate) fn addr(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// The simulated kernel, with the state trees (definitions, the lock, the audit log, run/
/// records of previous drivers) in this test binary's scratch directory: the simulator serves
/// only sys/, proc/ and dev/.
pub(crate) fn paths(host: &SimHost) -> HostPaths {
    let name = host.root().file_name().unwrap().to_owned();
    HostPaths::new(host.root()).with_state_root(Path::new(env!("CARGO_TARGET_TMPDIR")).join(name))
}

pub(crate) fn manager(host: &SimHost) -> Manager {
    Manager::new(&paths(host), "test")
}

pub(crate) fn inventory(host: &SimHost) -> Inventory {
    discover(&paths(host)).unwrap()
}

pub(crate) fn gpu(host: &SimHost, address: &str) -> Gpu {
    inventory(host)
        .gpus
        .into_iter()
        .find(|g| g.address == addr(address))
        .unwrap()
}

/// The faults and latencies the simulator still holds (`.vgpu-sim/control` without its
/// header): empty once every injected fault has fired.
pub(crate) fn pending(host: &SimHost) -> Vec<String> {
    std::fs::read_to_string(host.root().join(".vgpu-sim/control"))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

pub(crate) const NONE_PENDING: Vec<String> = Vec::new();

/// `(action, device, result)` of every audit record.
pub(crate) fn audit(paths: &HostPaths) -> Vec<(String, String, String)> {
    std::fs::read_to_string(paths.var().join("log/vgpu/audit.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<AuditEntry>(line).unwrap())
        .map(|e| (e.action, e.device, e.result))
        .collect()
}

pub(crate) fn record(action: &str, device: &str, result: &str) -> (String, String, String) {
    (action.to_owned(), device.to_owned(), result.to_owned())
}

/// A reboot of `host`: the simulator unmounted and its profile mounted fresh (VFs off, every
/// driver as it boots), with what the disk keeps (`etc/`: the definitions, `var/`: the audit
/// log) carried to the new host's state root; `run/` starts empty, as a tmpfs does.
pub(crate) fn reboot(host: SimHost) -> SimHost {
    let profile = vgpu_sim::Profile::builtin(&host.profile_name()).unwrap();
    let before = paths(&host);
    host.unmount().unwrap();
    let booted = SimHost::mount_profile_for_test(profile);
    let after = paths(&booted);
    vgpu_testing::disk::copy_tree(&before.etc(), &after.etc()).unwrap();
    vgpu_testing::disk::copy_tree(&before.var(), &after.var()).unwrap();
    booted
}
