//! The release guard: a vGPU whose VFIO device a process holds open (a guest's QEMU) is not
//! removed from under it unless forced. The simulator serves `proc/<pid>/fd` links to the
//! device's group node or its `vfio-dev` character device, as the kernel does. Forced, the
//! removal is written and the kernel (the simulator) holds it until the holder lets go: the
//! manager waits up to its release timeout and then fails with `HostError::Timeout`.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{addr, gpu, manager, paths};
use uuid::Uuid;
use vgpu_core::{Error, ErrorKind, Manager, host::SriovOptions, model::VgpuHandle, state::Start};
use vgpu_sim::SimHost;
use vgpu_testing::wait_for;

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:41:00.0";
const FLEX: &str = "0000:4d:00.0";
const UUID: Uuid = Uuid::from_u128(0x0d6c_4c1a_5e1f_4b8e_a1d2_0000_0000_0009);
const QEMU: u32 = 4242;

/// The group node of the VFIO device whose sysfs directory is `dir`, as a process sees it.
fn group_node(dir: &Path) -> String {
    let group = std::fs::read_link(dir.join("iommu_group")).unwrap();
    format!("/dev/vfio/{}", group.file_name().unwrap().to_string_lossy())
}

/// The `vfio-dev` character device of the VFIO device whose sysfs directory is `dir`.
fn cdev_node(dir: &Path) -> String {
    let entry = std::fs::read_dir(dir.join("vfio-dev"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    format!("/dev/vfio/devices/{}", entry.file_name().to_string_lossy())
}

fn mdev_dir(host: &SimHost, uuid: Uuid) -> std::path::PathBuf {
    host.root().join(format!("sys/bus/mdev/devices/{uuid}"))
}

/// `(what, path, waited_ms)` of an [`HostError::Timeout`].
fn timeout(err: &Error) -> Option<(String, PathBuf, u128)> {
    match err {
        Error::Host(vgpu_core::error::HostError::Timeout {
            what,
            path,
            waited_ms,
        }) => Some((what.clone(), path.clone(), *waited_ms)),
        _ => None,
    }
}

/// The writes the simulator holds until nothing blocks them: the `# waiting <path>: <why>`
/// lines of its control file.
fn waiting(host: &SimHost) -> Vec<String> {
    std::fs::read_to_string(host.root().join(".vgpu-sim/control"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("# waiting "))
        .map(str::to_owned)
        .collect()
}

fn held_open(err: &Error) -> Option<(&str, u32, &str, &str)> {
    match err {
        Error::HeldOpen {
            device,
            pid,
            command,
            node,
        } => Some((device, *pid, command, node)),
        _ => None,
    }
}

#[test]
fn destroy_of_an_mdev_open_by_a_process_is_refused_naming_it() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    let err = manager(&host).destroy(VgpuHandle::Mdev(UUID)).unwrap_err();
    assert_eq!(
        (held_open(&err), err.kind(), gpu(&host, T4).vgpus.len()),
        (
            Some((
                UUID.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            ErrorKind::Busy,
            1
        )
    );
}

/// Forced, the removal is written; the kernel holds it until the holder lets go, and the
/// manager gives up at its deadline saying what it waited for. The mdev is still there.
#[test]
fn destroy_with_force_of_an_mdev_held_open_times_out_naming_what_it_waited_for() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    let err = manager(&host)
        .with_force(true)
        .with_release_timeout(Duration::from_millis(200))
        .destroy(VgpuHandle::Mdev(UUID))
        .unwrap_err();
    let remove = paths(&host)
        .pci_device(&addr(T4))
        .join(UUID.to_string())
        .join("remove");
    assert_eq!(
        (timeout(&err), gpu(&host, T4).vgpus.len()),
        (
            Some((
                format!(
                    "the release of mediated device {UUID} by the processes holding it open \
                     (writing \"1\" stays pending in the kernel until then)"
                ),
                remove,
                200
            )),
            1
        )
    );
}

#[test]
fn destroy_with_force_timed_out_removal_takes_effect_when_the_holder_exits() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    host.hold(QEMU, "qemu-system-x86", &group_node(&mdev_dir(&host, UUID)))
        .unwrap();
    manager(&host)
        .with_force(true)
        .with_release_timeout(Duration::from_millis(100))
        .destroy(VgpuHandle::Mdev(UUID))
        .unwrap_err();
    host.drop_process(QEMU).unwrap();
    assert!(wait_for(Duration::from_secs(5), || gpu(&host, T4)
        .vgpus
        .is_empty()));
}

#[test]
fn destroy_with_force_goes_through_when_the_holder_exits_in_time() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    host.hold(QEMU, "qemu-system-x86", &group_node(&mdev_dir(&host, UUID)))
        .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // QEMU exits once the forced removal waits in the kernel for it.
            let remove = format!("{UUID}/remove: ");
            assert!(wait_for(Duration::from_secs(10), || waiting(&host)
                .iter()
                .any(|w| w.contains(&remove))));
            host.drop_process(QEMU).unwrap();
        });
        manager(&host)
            .with_force(true)
            .with_release_timeout(Duration::from_secs(10))
            .destroy(VgpuHandle::Mdev(UUID))
            .unwrap();
    });
    assert_eq!(gpu(&host, T4).vgpus.len(), 0);
}

#[test]
fn stop_with_force_of_a_vendor_vf_held_open_times_out() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created = manager(&host)
        .create(addr(L40S), "L40S-24Q", None, None)
        .unwrap();
    let VgpuHandle::Vf(vf) = created.id else {
        panic!("a vendor-VFIO vGPU is named by its VF: {:?}", created.id);
    };
    host.hold(
        QEMU,
        "qemu-system-x86",
        &cdev_node(&paths(&host).pci_device(&vf)),
    )
    .unwrap();
    let err = manager(&host)
        .with_force(true)
        .with_release_timeout(Duration::from_millis(200))
        .stop(created.id)
        .unwrap_err();
    let path = paths(&host)
        .pci_device(&vf)
        .join("nvidia/current_vgpu_type");
    assert_eq!(
        (
            timeout(&err).map(|(_, p, ms)| (p, ms)),
            gpu(&host, L40S).vgpus.len()
        ),
        (Some((path, 200)), 1)
    );
}

#[test]
fn unbind_with_force_of_a_plain_vf_held_open_times_out_and_keeps_vfio_pci() {
    let host = SimHost::mount_for_test("flex-sriov");
    let (_, vf, _) = flex_vf_open_by_qemu(&host);
    let err = manager(&host)
        .with_force(true)
        .with_release_timeout(Duration::from_millis(200))
        .unbind(vf, false)
        .unwrap_err();
    assert_eq!(
        (
            timeout(&err).map(|(_, p, ms)| (p, ms)),
            gpu(&host, FLEX).vfs[0].driver.as_deref()
        ),
        (
            Some((paths(&host).pci_drivers().join("vfio-pci/unbind"), 200)),
            Some("vfio-pci")
        )
    );
}

#[test]
fn disabling_vfs_with_force_while_one_is_held_open_times_out() {
    let host = SimHost::mount_for_test("flex-sriov");
    let (_, _, _) = flex_vf_open_by_qemu(&host);
    let err = manager(&host)
        .with_force(true)
        .with_sriov_options(SriovOptions {
            force: true,
            timeout: Duration::from_millis(200),
        })
        .set_vfs(addr(FLEX), 0, None, false)
        .unwrap_err();
    assert_eq!(
        (
            timeout(&err).map(|(_, p, ms)| (p, ms)),
            gpu(&host, FLEX).vfs.len()
        ),
        (
            Some((
                paths(&host).pci_device(&addr(FLEX)).join("sriov_numvfs"),
                200
            )),
            2
        )
    );
}

#[test]
fn destroy_after_the_holder_exits_goes_through() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    host.drop_process(QEMU).unwrap();
    manager(&host).destroy(VgpuHandle::Mdev(UUID)).unwrap();
    assert_eq!(gpu(&host, T4).vgpus.len(), 0);
}

#[test]
fn a_process_holding_another_device_does_not_block_destroy() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    host.hold(QEMU, "qemu-system-x86", "/dev/vfio/999").unwrap();
    manager(&host).destroy(VgpuHandle::Mdev(UUID)).unwrap();
    assert_eq!(gpu(&host, T4).vgpus.len(), 0);
}

#[test]
fn stop_of_a_vendor_vf_open_through_its_cdev_is_refused() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created = manager(&host)
        .create(addr(L40S), "L40S-24Q", None, None)
        .unwrap();
    let VgpuHandle::Vf(vf) = created.id else {
        panic!("a vendor-VFIO vGPU is named by its VF: {:?}", created.id);
    };
    let node = cdev_node(&paths(&host).pci_device(&vf));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    let err = manager(&host).stop(created.id).unwrap_err();
    assert_eq!(
        (held_open(&err), gpu(&host, L40S).vgpus.len()),
        (
            Some((
                vf.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            1
        )
    );
}

/// A plain VF given to a guest: neither `unbind` nor disabling the VFs takes it away.
fn flex_vf_open_by_qemu(host: &SimHost) -> (Manager, vgpu_core::model::pci::PciAddress, String) {
    let manager = manager(host);
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    let created = manager.create(addr(FLEX), "vf", None, None).unwrap();
    let VgpuHandle::Vf(vf) = created.id else {
        panic!("a plain VF is named by its address: {:?}", created.id);
    };
    let node = group_node(&paths(host).pci_device(&vf));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    (manager, vf, node)
}

#[test]
fn unbind_of_a_plain_vf_open_by_a_process_is_refused() {
    let host = SimHost::mount_for_test("flex-sriov");
    let (manager, vf, node) = flex_vf_open_by_qemu(&host);
    let err = manager.unbind(vf, false).unwrap_err();
    assert_eq!(
        (held_open(&err), gpu(&host, FLEX).vfs[0].driver.as_deref()),
        (
            Some((
                vf.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            Some("vfio-pci")
        )
    );
}

#[test]
fn disabling_vfs_while_one_is_open_by_a_process_is_refused() {
    let host = SimHost::mount_for_test("flex-sriov");
    let (manager, vf, node) = flex_vf_open_by_qemu(&host);
    let err = manager.set_vfs(addr(FLEX), 0, None, false).unwrap_err();
    assert_eq!(
        (held_open(&err), gpu(&host, FLEX).vfs.len()),
        (
            Some((
                vf.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            2
        )
    );
}

#[test]
fn guard_reads_the_holders_command_name() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), None)
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(7, "crosvm", "/dev/null").unwrap();
    host.hold(7, "crosvm", &node).unwrap();
    let err = manager(&host).destroy(VgpuHandle::Mdev(UUID)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{UUID} is open by process 7 (crosvm) through {node}")
    );
}

#[test]
fn guard_ignores_addresses_it_does_not_hold() {
    // A VF address whose device does not exist has no nodes: nothing to guard.
    let host = SimHost::mount_for_test("t4-legacy");
    let err = manager(&host)
        .destroy(VgpuHandle::Vf(addr("0000:3b:00.7")))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn bind_of_a_plain_vf_open_by_a_process_to_another_driver_is_refused() {
    let host = SimHost::mount_for_test("flex-sriov");
    let (manager, vf, node) = flex_vf_open_by_qemu(&host);
    let err = manager.bind(vf, "i915", None, false).unwrap_err();
    assert_eq!(
        (held_open(&err), gpu(&host, FLEX).vfs[0].driver.as_deref()),
        (
            Some((
                vf.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            Some("vfio-pci")
        )
    );
}

/// Undefining takes the vGPU away at the next boot: refused while a process holds it open,
/// and the definition stays.
#[test]
fn undefine_of_a_defined_mdev_open_by_a_process_is_refused_naming_it() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "T4-2Q", Some(UUID), Some(Start::Manual))
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();

    let err = manager.undefine(VgpuHandle::Mdev(UUID)).unwrap_err();

    assert_eq!(
        (
            held_open(&err),
            err.kind(),
            manager.definitions().mdev(UUID).unwrap().is_some()
        ),
        (
            Some((
                UUID.to_string().as_str(),
                QEMU,
                "qemu-system-x86",
                node.as_str()
            )),
            ErrorKind::Busy,
            true
        )
    );
}

/// Forced, the definition goes and the vGPU keeps running under its holder.
#[test]
fn undefine_with_force_of_a_defined_mdev_open_by_a_process_removes_only_its_definition() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(UUID), Some(Start::Manual))
        .unwrap();
    let node = group_node(&mdev_dir(&host, UUID));
    host.hold(QEMU, "qemu-system-x86", &node).unwrap();
    let manager = manager(&host).with_force(true);

    let removed = manager.undefine(VgpuHandle::Mdev(UUID)).unwrap();

    assert_eq!(
        (
            removed,
            manager.definitions().mdev(UUID).unwrap(),
            gpu(&host, T4).vgpus.len()
        ),
        (true, None, 1)
    );
}
