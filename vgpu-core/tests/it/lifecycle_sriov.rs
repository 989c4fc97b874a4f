//! Enabling and disabling SR-IOV VFs and binding drivers on the simulated host (`vgpu-sim`)
//! through [`Manager`]: the production code path writes to a FUSE filesystem that answers like
//! the kernel. Creating and destroying vGPUs is in `lifecycle.rs`.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::Path;

use uuid::Uuid;
use vgpu_core::{
    Error, ErrorKind, HostPaths, Manager,
    host::{SriovChange, SriovOptions},
    model::pci::PciAddress,
};

use crate::common::{NONE_PENDING, addr, audit, gpu, inventory, manager, paths, pending, record};
use vgpu_sim::{FsOp, SimHost};

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
const FLEX: &str = "0000:4d:00.0";
const FLEX_VF0: &str = "0000:4d:00.1";
const EPERM: i32 = 1;
const EIO: i32 = 5;
const EBUSY: i32 = 16;
const ENODEV: i32 = 19;
const ENOSPC: i32 = 28;

const FIXED: Uuid = Uuid::from_u128(0x0d6c_4c1a_5e1f_4b8e_a1d2_0000_0000_0001);

/// A device attribute as the simulated kernel shows it.
fn attr(host: &SimHost, address: &str, name: &str) -> String {
    std::fs::read_to_string(paths(host).pci_device(&addr(address)).join(name)).unwrap()
}

// ----- binding a GPU to another driver -----

#[test]
fn binding_a_busy_nvidia_gpu_away_is_refused_by_its_unbind_lock() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    let err = manager.bind(addr(T4), "vfio-pci", None, false).unwrap_err();
    let Error::Host(vgpu_core::error::HostError::UnbindLockRefused { path }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (path.clone(), err.kind(), gpu(&host, T4).driver),
        (
            paths(&host)
                .proc()
                .join("driver/nvidia/gpus")
                .join(T4)
                .join("unbindLock"),
            ErrorKind::Busy,
            Some("nvidia".to_owned())
        )
    );
}

#[test]
fn binding_an_idle_nvidia_gpu_away_takes_its_unbind_lock() {
    let host = SimHost::mount_for_test("t4-legacy");
    let previous = manager(&host)
        .bind(addr(T4), "vfio-pci", None, false)
        .unwrap();
    assert_eq!(
        (previous, gpu(&host, T4).driver),
        (Some("nvidia".to_owned()), Some("vfio-pci".to_owned()))
    );
}

// ----- VF counts of an NVIDIA GPU (L40S) -----

#[test]
fn l40s_disable_vfs_through_nvidia_sequence() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let change = manager(&host).set_vfs(addr(L40S), 0, None, false).unwrap();
    assert_eq!(
        change,
        SriovChange {
            pf: addr(L40S),
            before: 32,
            requested: 0,
            enabled: 0,
            vfs: Vec::new(),
        }
    );
}

#[test]
fn l40s_reenable_vfs_rebinds_pf_and_vfs_to_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    manager.set_vfs(addr(L40S), 0, None, false).unwrap();
    manager.set_vfs(addr(L40S), 32, None, false).unwrap();
    let gpu = gpu(&host, L40S);
    let drivers: Vec<Option<String>> = gpu.vfs.iter().map(|v| v.driver.clone()).collect();
    assert_eq!(
        (gpu.driver, drivers),
        (
            Some("nvidia".to_owned()),
            vec![Some("nvidia".to_owned()); 32]
        )
    );
}

#[test]
fn l40s_partial_vf_count_is_refused_for_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    manager.set_vfs(addr(L40S), 0, None, false).unwrap();
    let err = manager.set_vfs(addr(L40S), 4, None, false).unwrap_err();
    let Error::Host(vgpu_core::error::HostError::BadVfCount {
        pf,
        asked,
        total,
        all_or_none,
    }) = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*pf, *asked, *total, *all_or_none, err.kind()),
        (addr(L40S), 4, 32, true, ErrorKind::BadInput)
    );
}

#[test]
fn l40s_vf_in_use_blocks_disable_without_force() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    manager.create(addr(L40S), "L40S-8Q", None, None).unwrap();
    let err = manager.set_vfs(addr(L40S), 0, None, false).unwrap_err();
    let Error::InUse { device, by } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (device.as_str(), by.as_str(), err.kind()),
        (L40S_VF0, "it holds NVIDIA vGPU type 1152", ErrorKind::Busy)
    );
}

#[test]
fn l40s_failed_numvfs_write_rebinds_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    manager.set_vfs(addr(L40S), 0, None, false).unwrap();
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err = manager.set_vfs(addr(L40S), 32, None, false).unwrap_err();
    let gpu = gpu(&host, L40S);
    assert_eq!(
        (err.errno(), pending(&host), gpu.driver, gpu.vfs.len()),
        (Some(EIO), NONE_PENDING, Some("nvidia".to_owned()), 0)
    );
}

// ----- a failure injected at each step of NVIDIA's enable sequence leaves the host as it was -----

/// The L40S host with its VFs disabled: the start of NVIDIA's enable sequence.
fn l40s_without_vfs() -> SimHost {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    manager(&host).set_vfs(addr(L40S), 0, None, false).unwrap();
    host
}

fn unbind_lock(host: &SimHost) -> String {
    std::fs::read_to_string(
        paths(host)
            .proc()
            .join("driver/nvidia/gpus")
            .join(L40S)
            .join("unbindLock"),
    )
    .unwrap()
}

#[test]
fn nvidia_enable_failing_at_unbind_lock_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EPERM, "*/unbindLock");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (err.errno(), err.kind(), pending(&host), inventory(&host)),
        (Some(EPERM), ErrorKind::Permission, NONE_PENDING, before)
    );
}

#[test]
fn nvidia_enable_failing_at_driver_override_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, ENOSPC, "*/0000:41:00.0/driver_override");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), inventory(&host)),
        (Some(ENOSPC), NONE_PENDING, before)
    );
}

#[test]
fn nvidia_enable_failing_at_unbind_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/drivers/nvidia/unbind");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            inventory(&host),
            attr(&host, L40S, "driver_override")
        ),
        (Some(EBUSY), NONE_PENDING, before, "(null)\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_probe_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, ENODEV, "*drivers_probe");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            inventory(&host),
            attr(&host, L40S, "driver_override")
        ),
        (Some(ENODEV), NONE_PENDING, before, "(null)\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_numvfs_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            inventory(&host),
            attr(&host, L40S, "driver_override")
        ),
        (Some(EIO), NONE_PENDING, before, "(null)\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_stub_bind_releases_unbind_lock() {
    let host = l40s_without_vfs();
    host.fail_next(1, ENOSPC, "*/0000:41:00.0/driver_override");
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, None, false)
        .unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), unbind_lock(&host)),
        (Some(ENOSPC), NONE_PENDING, "0\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_vf_rebind_puts_count_back() {
    let host = l40s_without_vfs();
    host.fail_next(1, EIO, "*/0000:41:00.5/driver_override");
    // Without autoprobe the VFs come up unbound, and each is bound to nvidia in turn.
    let err = manager(&host)
        .set_vfs(addr(L40S), 32, Some(false), false)
        .unwrap_err();
    let gpu = gpu(&host, L40S);
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            gpu.driver,
            gpu.vfs.len(),
            attr(&host, L40S, "driver_override")
        ),
        (
            Some(EIO),
            NONE_PENDING,
            Some("nvidia".to_owned()),
            0,
            "(null)\n".to_owned()
        )
    );
}

/// A sequence interrupted with the PF on pci-pf-stub (as after a SIGKILL) is finished.
#[test]
fn nvidia_pf_left_on_stub_is_finished() {
    let host = l40s_without_vfs();
    let manager = manager(&host);
    manager
        .bind(addr(L40S), "pci-pf-stub", None, false)
        .unwrap();
    let change = manager.set_vfs(addr(L40S), 32, None, false).unwrap();
    let gpu = gpu(&host, L40S);
    assert_eq!(
        (
            change.enabled,
            gpu.driver,
            attr(&host, L40S, "driver_override")
        ),
        (32, Some("nvidia".to_owned()), "(null)\n".to_owned())
    );
}

// ----- plain SR-IOV (Flex) -----

#[test]
fn flex_enable_vfs_appear() {
    let host = SimHost::mount_for_test("flex-sriov");
    let change = manager(&host).set_vfs(addr(FLEX), 4, None, false).unwrap();
    assert_eq!(
        change,
        SriovChange {
            pf: addr(FLEX),
            before: 0,
            requested: 4,
            enabled: 4,
            vfs: vec![
                addr("0000:4d:00.1"),
                addr("0000:4d:00.2"),
                addr("0000:4d:00.3"),
                addr("0000:4d:00.4"),
            ],
        }
    );
}

#[test]
fn flex_change_count_goes_through_zero() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 4, None, false).unwrap();
    let change = manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    assert_eq!(
        (change.before, change.enabled, change.vfs),
        (4, 2, vec![addr("0000:4d:00.1"), addr("0000:4d:00.2")])
    );
}

#[test]
fn flex_count_above_total_is_refused() {
    let host = SimHost::mount_for_test("flex-sriov");
    let err = manager(&host)
        .set_vfs(addr(FLEX), 17, None, false)
        .unwrap_err();
    let Error::Host(vgpu_core::error::HostError::BadVfCount {
        pf,
        asked,
        total,
        all_or_none,
    }) = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*pf, *asked, *total, *all_or_none, err.kind()),
        (addr(FLEX), 17, 16, false, ErrorKind::BadInput)
    );
}

#[test]
fn flex_count_above_total_writes_nothing() {
    let host = SimHost::mount_for_test("flex-sriov");
    host.reset_counters();
    manager(&host)
        .set_vfs(addr(FLEX), 17, None, false)
        .unwrap_err();
    assert_eq!(host.counters().get(FsOp::Write), 0);
}

#[test]
fn flex_injected_disable_failure_keeps_vfs_and_errno() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 4, None, false).unwrap();
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err = manager.set_vfs(addr(FLEX), 2, None, false).unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), gpu(&host, FLEX).vfs.len()),
        (Some(EIO), NONE_PENDING, 4)
    );
}

#[test]
fn flex_injected_enable_failure_puts_autoprobe_back() {
    let host = SimHost::mount_for_test("flex-sriov");
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err = manager(&host)
        .set_vfs(addr(FLEX), 2, Some(false), false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            attr(&host, FLEX, "sriov_drivers_autoprobe")
        ),
        (Some(EIO), NONE_PENDING, "1\n".to_owned())
    );
}

#[test]
fn flex_injected_enable_failure_audits_the_undo() {
    let host = SimHost::mount_for_test("flex-sriov");
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err = manager(&host)
        .set_vfs(addr(FLEX), 2, Some(false), false)
        .unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), audit(&paths(&host))),
        (
            Some(EIO),
            NONE_PENDING,
            vec![
                record("sriov", FLEX, "started"),
                record("autoprobe", FLEX, "ok"),
                record("sriov", FLEX, &err.chain()),
                record("undo-autoprobe", FLEX, "ok"),
                record("sriov", FLEX, &err.chain()),
            ]
        )
    );
}

#[test]
fn flex_vf_for_guest_blocks_count_change_without_force() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    manager.create(addr(FLEX), "vf", None, None).unwrap();
    let err = manager.set_vfs(addr(FLEX), 0, None, false).unwrap_err();
    let Error::InUse { device, by } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (device.as_str(), by.as_str(), err.kind()),
        (FLEX_VF0, "it is bound to vfio-pci", ErrorKind::Busy)
    );
}

#[test]
fn flex_vf_for_guest_is_taken_away_with_force() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host).with_sriov_options(SriovOptions {
        force: true,
        ..Default::default()
    });
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    manager.create(addr(FLEX), "vf", None, None).unwrap();
    let change = manager.set_vfs(addr(FLEX), 0, None, false).unwrap();
    assert_eq!((change.enabled, gpu(&host, FLEX).vfs.len()), (0, 0));
}

#[test]
fn flex_injected_probe_failure_rebinds_previous_driver() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 1, None, false).unwrap();
    let vf = gpu(&host, FLEX).vfs[0].clone();
    host.fail_next(1, EIO, "*drivers_probe");
    let err = manager
        .bind(vf.address, "vfio-pci", None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            gpu(&host, FLEX).vfs[0].driver.clone()
        ),
        (Some(EIO), NONE_PENDING, vf.driver)
    );
}

#[test]
fn autoprobe_off_leaves_new_vfs_unbound() {
    let host = SimHost::mount_for_test("flex-sriov");
    manager(&host)
        .set_vfs(addr(FLEX), 1, Some(false), false)
        .unwrap();
    assert_eq!(gpu(&host, FLEX).vfs[0].driver, None);
}

#[test]
fn sriov_slow_enable_is_waited_for() {
    let host = SimHost::mount_for_test("flex-sriov");
    host.control("latency sriov-enable 300").unwrap();
    let change = manager(&host).set_vfs(addr(FLEX), 2, None, false).unwrap();
    assert_eq!(change.vfs, vec![addr("0000:4d:00.1"), addr("0000:4d:00.2")]);
}

// ----- a failure injected at each step of binding a VF leaves the host as it was -----

fn flex_with_vf() -> (SimHost, PciAddress) {
    let host = SimHost::mount_for_test("flex-sriov");
    let change = manager(&host).set_vfs(addr(FLEX), 1, None, false).unwrap();
    (host, change.vfs[0])
}

#[test]
fn vf_bind_failing_at_driver_override_leaves_host_unchanged() {
    let (host, vf) = flex_with_vf();
    let before = inventory(&host);
    host.fail_next(1, EPERM, "*/driver_override");
    let err = manager(&host)
        .bind(vf, "vfio-pci", None, false)
        .unwrap_err();
    assert_eq!(
        (err.errno(), err.kind(), pending(&host), inventory(&host)),
        (Some(EPERM), ErrorKind::Permission, NONE_PENDING, before)
    );
}

#[test]
fn vf_bind_failing_at_unbind_leaves_host_unchanged() {
    let (host, vf) = flex_with_vf();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/unbind");
    let err = manager(&host)
        .bind(vf, "vfio-pci", None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            inventory(&host),
            attr(&host, FLEX_VF0, "driver_override")
        ),
        (Some(EBUSY), NONE_PENDING, before, "(null)\n".to_owned())
    );
}

#[test]
fn vf_bind_failing_at_probe_clears_override() {
    let (host, vf) = flex_with_vf();
    host.fail_next(1, ENODEV, "*drivers_probe");
    let err = manager(&host)
        .bind(vf, "vfio-pci", None, false)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            attr(&host, FLEX_VF0, "driver_override")
        ),
        (Some(ENODEV), NONE_PENDING, "(null)\n".to_owned())
    );
}

// ----- a static tree, where VFs never appear -----

/// A Flex 170 PF on `i915` as plain files: `sriov_numvfs` takes any write, but no VF ever
/// appears, as on a kernel whose driver never finishes enabling them.
fn static_flex(root: &Path) -> HostPaths {
    let pf = root.join("sys/bus/pci/devices").join(FLEX);
    std::fs::create_dir_all(&pf).unwrap();
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers/i915")).unwrap();
    std::os::unix::fs::symlink("../../drivers/i915", pf.join("driver")).unwrap();
    for (name, value) in [
        ("vendor", "0x8086\n"),
        ("device", "0x56c0\n"),
        ("class", "0x038000\n"),
        ("driver_override", "(null)\n"),
        ("sriov_totalvfs", "16\n"),
        ("sriov_numvfs", "0\n"),
        ("sriov_drivers_autoprobe", "1\n"),
    ] {
        std::fs::write(pf.join(name), value).unwrap();
    }
    HostPaths::new(root)
}

/// The wait ends at its deadline with an error naming the PF.
#[test]
fn vfs_that_never_appear_time_out() {
    let root = tempfile::tempdir().unwrap();
    let paths = static_flex(root.path());
    let manager = Manager::new(&paths, "test").with_sriov_options(SriovOptions {
        force: false,
        timeout: std::time::Duration::from_millis(50),
    });
    let err = manager.set_vfs(addr(FLEX), 2, None, false).unwrap_err();
    let Error::Host(vgpu_core::error::HostError::Timeout {
        what,
        path,
        waited_ms,
    }) = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (what.as_str(), path.clone(), *waited_ms, err.kind()),
        (
            "2 VFs of 0000:4d:00.0",
            paths.pci_device(&addr(FLEX)),
            50,
            ErrorKind::HostFault
        )
    );
}

/// After the timeout the count is put back.
#[test]
fn vfs_that_never_appear_count_is_put_back() {
    let root = tempfile::tempdir().unwrap();
    let paths = static_flex(root.path());
    let manager = Manager::new(&paths, "test").with_sriov_options(SriovOptions {
        force: false,
        timeout: std::time::Duration::from_millis(50),
    });
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap_err();
    let numvfs =
        std::fs::read_to_string(paths.pci_device(&addr(FLEX)).join("sriov_numvfs")).unwrap();
    assert_eq!(numvfs, "0\n");
}

// ----- Intel local-memory quotas -----

#[test]
fn flex_vfs_show_their_local_memory_quota() {
    let host = SimHost::mount_for_test("flex-sriov");
    assert!(gpu(&host, FLEX).vfs.is_empty());
    manager(&host).set_vfs(addr(FLEX), 2, None, false).unwrap();
    let quotas: Vec<Option<u64>> = gpu(&host, FLEX).vfs.iter().map(|v| v.memory_mib).collect();
    assert_eq!(quotas, vec![Some(8192), Some(8192)]);
}

#[test]
fn vfs_without_quotas_have_no_memory() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    assert!(gpu(&host, L40S).vfs.iter().all(|v| v.memory_mib.is_none()));
}
