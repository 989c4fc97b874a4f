//! Writes the kernel holds instead of refusing: removing an mdev, unbinding a function,
//! disabling VFs or clearing a vendor vGPU while a process holds the VFIO device
//! (`vfio_unregister_group_dev` waits), and unbinding NVIDIA's driver from a vGPU GPU whose
//! `unbindLock` is not held. The write returns once nothing holds it; a killed writer gets
//! out; the other requests are served meanwhile.

use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;

use crate::common::{
    RETURNS_WITHIN, STILL_WAITING, T4, UUID_A, cat, cdev_node, driver_file, drivers_probe, echo,
    echo_later, eventually, group_node, host, link, mdev_dir, mdev_type, pci, unbind_lock, waiting,
};
use vgpu_sim::SimHost;

const QEMU: u32 = 4242;
/// `flex-sriov`: the Flex PF and its first VF once enabled.
const FLEX: &str = "0000:4d:00.0";
const FLEX_VF0: &str = "0000:4d:00.1";
/// `l40s-vendor-vfio`: the first L40S PF and its first VF.
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
/// `mixed`: the L40S PF and its first VF.
const MIXED_L40S: &str = "0000:5e:00.0";
const MIXED_L40S_VF0: &str = "0000:5e:00.4";

/// `t4-legacy` with mdev `UUID_A` (T4-2Q) held open by QEMU through its group node.
fn t4_mdev_held() -> (SimHost, PathBuf) {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    let dir = mdev_dir(&h, UUID_A);
    h.hold(QEMU, "qemu-system-x86", &group_node(&dir))
        .expect("hold");
    (h, dir)
}

/// `flex-sriov` with 2 VFs, the first on `vfio-pci` and held open by QEMU.
fn flex_vf_held() -> SimHost {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    echo(&pci(&h, FLEX_VF0, "driver_override"), "vfio-pci").expect("override");
    echo(&driver_file(&h, "i915", "unbind"), FLEX_VF0).expect("unbind i915");
    echo(&drivers_probe(&h), FLEX_VF0).expect("probe vfio-pci");
    let node = group_node(&pci(&h, FLEX_VF0, ""));
    h.hold(QEMU, "qemu-system-x86", &node).expect("hold");
    h
}

// ----- mdev remove -----

#[test]
fn mdev_remove_while_held_is_still_waiting_and_mdev_present() {
    let (_h, dir) = t4_mdev_held();
    let rx = echo_later(dir.join("remove"), "1");
    assert_eq!(
        (rx.recv_timeout(STILL_WAITING), dir.exists()),
        (Err(RecvTimeoutError::Timeout), true)
    );
}

#[test]
fn mdev_remove_while_held_completes_when_holder_exits() {
    let (h, dir) = t4_mdev_held();
    let rx = echo_later(dir.join("remove"), "1");
    assert!(eventually(|| !waiting(&h).is_empty()));
    h.drop_process(QEMU).expect("drop");
    assert_eq!(
        (rx.recv_timeout(RETURNS_WITHIN), dir.exists()),
        (Ok(Ok(())), false)
    );
}

#[test]
fn mdev_remove_while_held_through_cdev_waits() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    let dir = mdev_dir(&h, UUID_A);
    h.hold(QEMU, "qemu-system-x86", &cdev_node(&dir))
        .expect("hold");
    let rx = echo_later(dir.join("remove"), "1");
    assert_eq!(
        rx.recv_timeout(STILL_WAITING),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn mdev_remove_while_held_is_listed_in_control_file() {
    let (h, dir) = t4_mdev_held();
    let node = group_node(&dir);
    let _rx = echo_later(dir.join("remove"), "1");
    assert!(eventually(|| !waiting(&h).is_empty()));
    let canonical = std::fs::canonicalize(&dir).expect("mdev dir");
    let below_root = canonical
        .strip_prefix(h.root())
        .expect("below the root")
        .join("remove");
    assert_eq!(
        waiting(&h),
        vec![format!(
            "{}: process {QEMU} (qemu-system-x86) holds {node}",
            below_root.display()
        )]
    );
}

#[test]
fn mdev_remove_while_held_other_requests_are_served() {
    let (h, dir) = t4_mdev_held();
    let _rx = echo_later(dir.join("remove"), "1");
    assert!(eventually(|| !waiting(&h).is_empty()));
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-231", "available_instances")),
        Ok("7\n".into())
    );
}

#[test]
fn mdev_remove_with_holder_of_another_device_does_not_wait() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    h.hold(QEMU, "qemu-system-x86", "/dev/vfio/999")
        .expect("hold");
    assert_eq!(echo(&mdev_dir(&h, UUID_A).join("remove"), "1"), Ok(()));
}

/// The writer is a shell: `SIGKILL` ends it although its write is held, the write is not
/// carried out, and the simulator stops waiting for it.
#[test]
fn mdev_remove_writer_killed_exits_and_mdev_stays() {
    let (h, dir) = t4_mdev_held();
    let remove = dir.join("remove");
    let mut sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("echo 1 > '{}'", remove.display()))
        .spawn()
        .expect("sh");
    assert!(eventually(|| !waiting(&h).is_empty()));
    sh.kill().expect("SIGKILL");
    let exited = eventually(|| sh.try_wait().is_ok_and(|s| s.is_some()));
    assert_eq!(
        (exited, dir.exists(), eventually(|| waiting(&h).is_empty())),
        (true, true, true)
    );
}

#[test]
fn unmount_with_a_waiting_write_answers_it_enodev() {
    let (h, dir) = t4_mdev_held();
    let rx = echo_later(dir.join("remove"), "1");
    assert!(eventually(|| !waiting(&h).is_empty()));
    drop(h);
    assert_eq!(rx.recv_timeout(RETURNS_WITHIN), Ok(Err(libc::ENODEV)));
}

#[test]
fn ninth_waiting_write_is_ebusy() {
    let h = host("t4-legacy");
    let uuids: Vec<String> = (1..=9)
        .map(|i| format!("{i:08x}-2222-3333-4444-555555555555"))
        .collect();
    for u in &uuids {
        echo(&mdev_type(&h, T4, "nvidia-230", "create"), u).expect("create");
        h.hold(QEMU, "qemu-system-x86", &group_node(&mdev_dir(&h, u)))
            .expect("hold");
    }
    let _pending: Vec<_> = uuids[..8]
        .iter()
        .map(|u| echo_later(mdev_dir(&h, u).join("remove"), "1"))
        .collect();
    assert!(eventually(|| waiting(&h).len() == 8));
    assert_eq!(
        echo(&mdev_dir(&h, &uuids[8]).join("remove"), "1"),
        Err(libc::EBUSY)
    );
}

// ----- PCI functions on vfio-pci -----

#[test]
fn vfio_pci_unbind_of_held_vf_waits() {
    let h = flex_vf_held();
    let rx = echo_later(driver_file(&h, "vfio-pci", "unbind"), FLEX_VF0);
    assert_eq!(
        (
            rx.recv_timeout(STILL_WAITING),
            link(&pci(&h, FLEX_VF0, "driver")).map(|l| l.ends_with("/vfio-pci"))
        ),
        (Err(RecvTimeoutError::Timeout), Ok(true))
    );
}

#[test]
fn vfio_pci_unbind_of_held_vf_completes_when_holder_exits() {
    let h = flex_vf_held();
    let rx = echo_later(driver_file(&h, "vfio-pci", "unbind"), FLEX_VF0);
    assert!(eventually(|| !waiting(&h).is_empty()));
    h.drop_process(QEMU).expect("drop");
    assert_eq!(
        (
            rx.recv_timeout(RETURNS_WITHIN),
            link(&pci(&h, FLEX_VF0, "driver"))
        ),
        (Ok(Ok(())), Err(libc::ENOENT))
    );
}

#[test]
fn sriov_numvfs_zero_with_held_vf_waits() {
    let h = flex_vf_held();
    let rx = echo_later(pci(&h, FLEX, "sriov_numvfs"), "0");
    assert_eq!(
        (
            rx.recv_timeout(STILL_WAITING),
            cat(&pci(&h, FLEX, "sriov_numvfs"))
        ),
        (Err(RecvTimeoutError::Timeout), Ok("2\n".into()))
    );
}

#[test]
fn sriov_numvfs_zero_with_held_vf_removes_vfs_when_holder_exits() {
    let h = flex_vf_held();
    let rx = echo_later(pci(&h, FLEX, "sriov_numvfs"), "0");
    assert!(eventually(|| !waiting(&h).is_empty()));
    h.drop_process(QEMU).expect("drop");
    assert_eq!(
        (
            rx.recv_timeout(RETURNS_WITHIN),
            pci(&h, FLEX_VF0, "").exists()
        ),
        (Ok(Ok(())), false)
    );
}

#[test]
fn pci_remove_of_held_vf_waits() {
    let h = flex_vf_held();
    let rx = echo_later(pci(&h, FLEX_VF0, "remove"), "1");
    assert_eq!(
        rx.recv_timeout(STILL_WAITING),
        Err(RecvTimeoutError::Timeout)
    );
}

// ----- NVIDIA -----

#[test]
fn vendor_vf_type_clear_while_held_waits() {
    let h = host("l40s-vendor-vfio");
    let current = pci(&h, L40S_VF0, "nvidia/current_vgpu_type");
    echo(&current, "1145").expect("create");
    h.hold(QEMU, "qemu-system-x86", &cdev_node(&pci(&h, L40S_VF0, "")))
        .expect("hold");
    let rx = echo_later(current.clone(), "0");
    assert_eq!(
        (rx.recv_timeout(STILL_WAITING), cat(&current)),
        (Err(RecvTimeoutError::Timeout), Ok("1145\n".into()))
    );
}

#[test]
fn nvidia_unbind_pf_without_unbind_lock_waits() {
    let h = host("l40s-vendor-vfio");
    let rx = echo_later(driver_file(&h, "nvidia", "unbind"), L40S);
    assert_eq!(
        (
            rx.recv_timeout(STILL_WAITING),
            link(&pci(&h, L40S, "driver")).map(|l| l.ends_with("/nvidia"))
        ),
        (Err(RecvTimeoutError::Timeout), Ok(true))
    );
}

#[test]
fn nvidia_unbind_pf_waiting_completes_when_unbind_lock_taken() {
    let h = host("l40s-vendor-vfio");
    let rx = echo_later(driver_file(&h, "nvidia", "unbind"), L40S);
    assert!(eventually(|| !waiting(&h).is_empty()));
    echo(&unbind_lock(&h, L40S), "1").expect("take unbindLock");
    assert_eq!(
        (
            rx.recv_timeout(RETURNS_WITHIN),
            link(&pci(&h, L40S, "driver"))
        ),
        (Ok(Ok(())), Err(libc::ENOENT))
    );
}

#[test]
fn nvidia_unbind_pf_with_unbind_lock_does_not_wait() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind");
    assert_eq!(link(&pci(&h, T4, "driver")), Err(libc::ENOENT));
}

#[test]
fn nvidia_unbind_pf_after_unbind_lock_released_waits() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&unbind_lock(&h, T4), "0").expect("release unbindLock");
    let rx = echo_later(driver_file(&h, "nvidia", "unbind"), T4);
    assert_eq!(
        rx.recv_timeout(STILL_WAITING),
        Err(RecvTimeoutError::Timeout)
    );
}

#[test]
fn nvidia_unbind_gpu_with_vgpu_waits_until_vgpu_gone_and_lock_taken() {
    let h = host("mixed");
    let current = pci(&h, MIXED_L40S_VF0, "nvidia/current_vgpu_type");
    echo(&current, "1145").expect("create");
    let rx = echo_later(driver_file(&h, "nvidia", "unbind"), MIXED_L40S);
    assert_eq!(
        rx.recv_timeout(STILL_WAITING),
        Err(RecvTimeoutError::Timeout)
    );
    echo(&current, "0").expect("destroy");
    echo(&unbind_lock(&h, MIXED_L40S), "1").expect("take unbindLock");
    assert_eq!(rx.recv_timeout(RETURNS_WITHIN), Ok(Ok(())));
}
