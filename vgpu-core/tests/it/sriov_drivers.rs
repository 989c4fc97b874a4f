//! VF counts and drivers as the kernel has them, on the simulated host: a PF driver that
//! lowers `sriov_totalvfs` or enables fewer VFs than asked, VFs whose driver probe runs after
//! the `sriov_numvfs` write, and `vfio-pci` refusing a PF with VFs (the driver is read back).

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{addr, gpu, manager};
use vgpu_core::{Error, host::SriovChange};
use vgpu_sim::{Profile, SimHost};

const FLEX: &str = "0000:4d:00.0";
const L40S: &str = "0000:41:00.0";

/// `flex-sriov` with the PF's SR-IOV settings changed by `edit`.
fn flex_with(edit: impl FnOnce(&mut vgpu_sim::profile::SriovSpec)) -> SimHost {
    let mut p = Profile::builtin("flex-sriov").unwrap();
    let pf = p
        .devices
        .iter_mut()
        .find(|d| d.addr.to_string() == FLEX)
        .unwrap();
    edit(pf.sriov.as_mut().unwrap());
    SimHost::mount_profile_for_test(p)
}

// ----- a driver that enables fewer VFs, or lowers sriov_totalvfs -----

#[test]
fn set_vfs_partial_enable_reports_requested_and_enabled() {
    let host = flex_with(|s| s.driver_enables_at_most = Some(3));
    let change = manager(&host).set_vfs(addr(FLEX), 4, None, false).unwrap();
    assert_eq!(
        change,
        SriovChange {
            pf: addr(FLEX),
            before: 0,
            requested: 4,
            enabled: 3,
            vfs: vec![
                addr("0000:4d:00.1"),
                addr("0000:4d:00.2"),
                addr("0000:4d:00.3")
            ],
        }
    );
}

#[test]
fn set_vfs_above_driver_lowered_total_is_refused_with_that_total() {
    let host = flex_with(|s| s.driver_max_vfs = Some(7));
    let err = manager(&host)
        .set_vfs(addr(FLEX), 8, None, false)
        .unwrap_err();
    let Error::Host(vgpu_core::error::HostError::BadVfCount { asked, total, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!((*asked, *total), (8, 7));
}

#[test]
fn set_vfs_up_to_driver_lowered_total_enables_them() {
    let host = flex_with(|s| s.driver_max_vfs = Some(7));
    let change = manager(&host).set_vfs(addr(FLEX), 7, None, false).unwrap();
    assert_eq!((change.requested, change.enabled), (7, 7));
}

// ----- VFs probed after the write -----

fn flex_probing_late() -> SimHost {
    let host = SimHost::mount_for_test("flex-sriov");
    host.control("latency async-probe 300").unwrap();
    host
}

/// `i915` drives its VFs on the host: `set_vfs` returns once each new VF has it.
#[test]
fn set_vfs_waits_for_the_new_vfs_driver() {
    let host = flex_probing_late();
    manager(&host).set_vfs(addr(FLEX), 2, None, false).unwrap();
    let drivers: Vec<Option<String>> = gpu(&host, FLEX).vfs.into_iter().map(|v| v.driver).collect();
    assert_eq!(
        drivers,
        vec![Some("i915".to_owned()), Some("i915".to_owned())]
    );
}

/// The driver recorded before a VF goes to a guest is the one the kernel gave it, so that
/// `destroy` gives the VF back to `i915`.
#[test]
fn vf_given_to_a_guest_right_after_set_vfs_goes_back_to_i915() {
    let host = flex_probing_late();
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 1, None, false).unwrap();
    let created = manager.create(addr(FLEX), "vf", None, None).unwrap();
    manager.destroy(created.id).unwrap();
    assert_eq!(
        (
            created.previous_driver,
            gpu(&host, FLEX).vfs[0].driver.clone()
        ),
        (Some("i915".to_owned()), Some("i915".to_owned()))
    );
}

/// NVIDIA's sequence binds every VF to `nvidia` itself, probe or not.
#[test]
fn nvidia_set_vfs_with_late_probe_leaves_every_vf_on_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    manager.set_vfs(addr(L40S), 0, None, false).unwrap();
    host.control("latency async-probe 300").unwrap();
    manager.set_vfs(addr(L40S), 32, None, false).unwrap();
    let vfs = gpu(&host, L40S).vfs;
    let on_nvidia = vfs
        .iter()
        .filter(|v| v.driver.as_deref() == Some("nvidia"))
        .count();
    assert_eq!((vfs.len(), on_nvidia), (32, 32));
}

// ----- vfio-pci refuses a PF with VFs -----

#[test]
fn bind_vfio_pci_to_pf_with_vfs_is_not_bound_and_pf_goes_back() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let err = manager(&host)
        .bind(addr(L40S), "vfio-pci", None, false)
        .unwrap_err();
    let Error::Host(vgpu_core::error::HostError::NotBound { wanted, found, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (wanted.as_str(), found.clone(), gpu(&host, L40S).driver),
        ("vfio-pci", None, Some("nvidia".to_owned()))
    );
}
