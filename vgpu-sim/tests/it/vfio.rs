//! VFIO device nodes: `<device>/vfio-dev/vfio<N>/dev`, `dev/vfio/<group>` and
//! `dev/vfio/devices/vfio<N>` appear when a function or mdev becomes a VFIO device and go when
//! it stops being one.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::Path;

use crate::common::{
    A4000, A4000_AUDIO, T4, UUID_A, cat, driver_file, drivers_probe, echo, host, link, ls,
    mdev_type, pci,
};
use vgpu_sim::SimHost;

/// `flex-sriov`: the Flex 170 PF on `i915`, no VFs at boot (IOMMU groups up to 71).
const FLEX_PF: &str = "0000:4d:00.0";
/// Its VFs once enabled: groups 72, 73, 74.
const FLEX_VF0: &str = "0000:4d:00.1";
const FLEX_VF1: &str = "0000:4d:00.2";
const FLEX_VF2: &str = "0000:4d:00.3";
/// `l40s-vendor-vfio`: the first L40S PF and its first VF (group 62).
const L40S_PF: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";

/// (kind is a char device, permission bits, major, minor) of a node, or the errno.
fn node(path: &Path) -> Result<(bool, u32, u32, u32), i32> {
    let m = std::fs::metadata(path).map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    Ok((
        m.file_type().is_char_device(),
        m.mode() & 0o7777,
        libc::major(m.rdev()),
        libc::minor(m.rdev()),
    ))
}

fn dev_vfio(h: &SimHost) -> Result<Vec<String>, i32> {
    ls(&h.root().join("dev/vfio"))
}

fn dev_vfio_devices(h: &SimHost) -> Result<Vec<String>, i32> {
    ls(&h.root().join("dev/vfio/devices"))
}

fn names(v: &[&str]) -> Result<Vec<String>, i32> {
    Ok(v.iter().map(|s| (*s).to_owned()).collect())
}

/// `flex-sriov` with `n` VFs, autoprobe off (the VFs stay unbound).
fn flex_with_vfs(n: u8) -> SimHost {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), &n.to_string()).expect("enable VFs");
    h
}

fn bind_vfio_pci(h: &SimHost, addr: &str) {
    echo(&pci(h, addr, "driver_override"), "vfio-pci").expect("override");
    echo(&driver_file(h, "vfio-pci", "bind"), addr).expect("bind vfio-pci");
}

fn set_vgpu_type(h: &SimHost, vf: &str, id: &str) -> Result<(), i32> {
    echo(&pci(h, vf, "nvidia/current_vgpu_type"), id)
}

/// `<root>/sys/bus/mdev/devices/<uuid>/<rest>`.
fn mdev(h: &SimHost, uuid: &str, rest: &str) -> std::path::PathBuf {
    h.root().join("sys/bus/mdev/devices").join(uuid).join(rest)
}

// ----- vfio-pci -----

#[test]
fn vfio_pci_bound_at_boot_has_group_node_and_cdev() {
    let h = host("mixed");
    assert_eq!(
        (dev_vfio(&h), dev_vfio_devices(&h)),
        (names(&["141", "devices", "vfio"]), names(&["vfio0"]))
    );
}

#[test]
fn vfio_pci_cdev_dev_file_reads_major_511_and_index() {
    let h = host("mixed");
    assert_eq!(
        cat(&pci(&h, A4000, "vfio-dev/vfio0/dev")),
        Ok("511:0\n".into())
    );
}

#[test]
fn vfio_pci_cdev_uevent_names_devtmpfs_node() {
    let h = host("mixed");
    assert_eq!(
        cat(&pci(&h, A4000, "vfio-dev/vfio0/uevent")),
        Ok("MAJOR=511\nMINOR=0\nDEVNAME=vfio/devices/vfio0\n".into())
    );
}

#[test]
fn vfio_pci_cdev_device_link_points_back_to_function() {
    let h = host("mixed");
    assert_eq!(
        link(&pci(&h, A4000, "vfio-dev/vfio0/device")),
        Ok(format!("../../../{A4000}"))
    );
}

#[test]
fn sys_class_vfio_dev_links_to_cdev_directory() {
    let h = host("mixed");
    assert_eq!(
        link(&h.root().join("sys/class/vfio-dev/vfio0")),
        Ok(format!(
            "../../devices/pci0000:ae/0000:ae:00.0/{A4000}/vfio-dev/vfio0"
        ))
    );
}

#[test]
fn sys_class_vfio_group_dev_reads_group_major_and_number() {
    let h = host("mixed");
    assert_eq!(
        cat(&h.root().join("sys/class/vfio/141/dev")),
        Ok("243:141\n".into())
    );
}

#[test]
fn dev_vfio_group_node_is_char_device_0600_with_group_rdev() {
    let h = host("mixed");
    assert_eq!(
        node(&h.root().join("dev/vfio/141")),
        Ok((true, 0o600, 243, 141))
    );
}

#[test]
fn dev_vfio_cdev_node_is_char_device_0600_with_rdev_511_index() {
    let h = host("mixed");
    assert_eq!(
        node(&h.root().join("dev/vfio/devices/vfio0")),
        Ok((true, 0o600, 511, 0))
    );
}

#[test]
fn dev_vfio_container_is_char_device_0666_10_196() {
    let h = host("mixed");
    assert_eq!(
        node(&h.root().join("dev/vfio/vfio")),
        Ok((true, 0o666, 10, 196))
    );
}

#[test]
fn vfio_pci_second_function_of_group_adds_cdev_not_group_node() {
    let h = host("mixed");
    echo(&driver_file(&h, "snd_hda_intel", "unbind"), A4000_AUDIO).expect("unbind audio");
    echo(&pci(&h, A4000_AUDIO, "driver_override"), "vfio-pci").expect("override");
    echo(&drivers_probe(&h), A4000_AUDIO).expect("probe");
    assert_eq!(
        (dev_vfio(&h), dev_vfio_devices(&h)),
        (
            names(&["141", "devices", "vfio"]),
            names(&["vfio0", "vfio1"])
        )
    );
}

#[test]
fn no_vfio_device_leaves_only_container() {
    let h = host("flex-sriov");
    assert_eq!(
        (dev_vfio(&h), dev_vfio_devices(&h)),
        (names(&["vfio"]), Err(libc::ENOENT))
    );
}

#[test]
fn vfio_pci_bind_vf_creates_group_node_and_cdev() {
    let h = flex_with_vfs(2);
    bind_vfio_pci(&h, FLEX_VF0);
    assert_eq!(
        (
            dev_vfio(&h),
            dev_vfio_devices(&h),
            cat(&pci(&h, FLEX_VF0, "vfio-dev/vfio0/dev"))
        ),
        (
            names(&["72", "devices", "vfio"]),
            names(&["vfio0"]),
            Ok("511:0\n".into())
        )
    );
}

#[test]
fn vfio_pci_unbind_removes_group_node_and_cdev() {
    let h = flex_with_vfs(2);
    bind_vfio_pci(&h, FLEX_VF0);
    echo(&driver_file(&h, "vfio-pci", "unbind"), FLEX_VF0).expect("unbind");
    assert_eq!(
        (dev_vfio(&h), ls(&pci(&h, FLEX_VF0, "vfio-dev"))),
        (names(&["vfio"]), Err(libc::ENOENT))
    );
}

#[test]
fn vfio_pci_unbound_node_path_is_enoent() {
    let h = flex_with_vfs(2);
    bind_vfio_pci(&h, FLEX_VF0);
    node(&h.root().join("dev/vfio/devices/vfio0")).expect("cdev while bound");
    echo(&driver_file(&h, "vfio-pci", "unbind"), FLEX_VF0).expect("unbind");
    assert_eq!(
        node(&h.root().join("dev/vfio/devices/vfio0")),
        Err(libc::ENOENT)
    );
}

#[test]
fn sriov_disable_removes_vfio_nodes_of_bound_vf() {
    let h = flex_with_vfs(2);
    bind_vfio_pci(&h, FLEX_VF0);
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "0").expect("disable VFs");
    assert_eq!(
        (dev_vfio(&h), dev_vfio_devices(&h)),
        (names(&["vfio"]), Err(libc::ENOENT))
    );
}

#[test]
fn unplug_pf_removes_vfio_nodes_of_its_vfs() {
    let h = flex_with_vfs(2);
    bind_vfio_pci(&h, FLEX_VF0);
    h.unplug(FLEX_PF.parse().expect("address")).expect("unplug");
    assert_eq!(dev_vfio(&h), names(&["vfio"]));
}

#[test]
fn vfio_cdev_index_lowest_free_is_reused() {
    let h = flex_with_vfs(3);
    bind_vfio_pci(&h, FLEX_VF0);
    bind_vfio_pci(&h, FLEX_VF1);
    echo(&driver_file(&h, "vfio-pci", "unbind"), FLEX_VF0).expect("unbind");
    bind_vfio_pci(&h, FLEX_VF2);
    assert_eq!(
        (
            ls(&pci(&h, FLEX_VF1, "vfio-dev")),
            ls(&pci(&h, FLEX_VF2, "vfio-dev"))
        ),
        (names(&["vfio1"]), names(&["vfio0"]))
    );
}

// ----- NVIDIA vendor VFIO -----

#[test]
fn vendor_vf_without_vgpu_type_has_no_vfio_dev() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        (ls(&pci(&h, L40S_VF0, "vfio-dev")), dev_vfio(&h)),
        (Err(libc::ENOENT), names(&["vfio"]))
    );
}

#[test]
fn vendor_vf_type_set_creates_group_node_and_cdev() {
    let h = host("l40s-vendor-vfio");
    set_vgpu_type(&h, L40S_VF0, "1147").expect("create vGPU");
    assert_eq!(
        (
            dev_vfio(&h),
            dev_vfio_devices(&h),
            cat(&pci(&h, L40S_VF0, "vfio-dev/vfio0/dev"))
        ),
        (
            names(&["62", "devices", "vfio"]),
            names(&["vfio0"]),
            Ok("511:0\n".into())
        )
    );
}

#[test]
fn vendor_vf_group_node_rdev_is_its_group() {
    let h = host("l40s-vendor-vfio");
    set_vgpu_type(&h, L40S_VF0, "1147").expect("create vGPU");
    assert_eq!(
        node(&h.root().join("dev/vfio/62")),
        Ok((true, 0o600, 243, 62))
    );
}

#[test]
fn vendor_vf_type_cleared_removes_vfio_nodes() {
    let h = host("l40s-vendor-vfio");
    set_vgpu_type(&h, L40S_VF0, "1147").expect("create vGPU");
    set_vgpu_type(&h, L40S_VF0, "0").expect("destroy vGPU");
    assert_eq!(
        (ls(&pci(&h, L40S_VF0, "vfio-dev")), dev_vfio(&h)),
        (Err(libc::ENOENT), names(&["vfio"]))
    );
}

#[test]
fn vendor_vf_refused_type_creates_no_vfio_nodes() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        (set_vgpu_type(&h, L40S_VF0, "1"), dev_vfio(&h)),
        (Err(libc::EINVAL), names(&["vfio"]))
    );
}

#[test]
fn unplug_l40s_pf_removes_vendor_vf_vfio_nodes() {
    let h = host("l40s-vendor-vfio");
    set_vgpu_type(&h, L40S_VF0, "1147").expect("create vGPU");
    h.unplug(L40S_PF.parse().expect("address")).expect("unplug");
    assert_eq!(dev_vfio(&h), names(&["vfio"]));
}

// ----- mdev -----

fn t4_with_mdev() -> SimHost {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create mdev");
    h
}

#[test]
fn mdev_create_creates_group_node_and_cdev() {
    let h = t4_with_mdev();
    assert_eq!(
        (
            dev_vfio(&h),
            dev_vfio_devices(&h),
            cat(&mdev(&h, UUID_A, "vfio-dev/vfio0/dev"))
        ),
        (
            names(&["92", "devices", "vfio"]),
            names(&["vfio0"]),
            Ok("511:0\n".into())
        )
    );
}

#[test]
fn mdev_cdev_device_link_points_back_to_mdev() {
    let h = t4_with_mdev();
    assert_eq!(
        link(&mdev(&h, UUID_A, "vfio-dev/vfio0/device")),
        Ok(format!("../../../{UUID_A}"))
    );
}

#[test]
fn mdev_group_node_rdev_is_its_group() {
    let h = t4_with_mdev();
    assert_eq!(
        node(&h.root().join("dev/vfio/92")),
        Ok((true, 0o600, 243, 92))
    );
}

#[test]
fn mdev_remove_removes_vfio_nodes() {
    let h = t4_with_mdev();
    echo(&mdev(&h, UUID_A, "remove"), "1").expect("remove mdev");
    assert_eq!(
        (dev_vfio(&h), dev_vfio_devices(&h)),
        (names(&["vfio"]), Err(libc::ENOENT))
    );
}

#[test]
fn unplug_mdev_parent_removes_mdev_vfio_nodes() {
    let h = t4_with_mdev();
    h.unplug(T4.parse().expect("address")).expect("unplug");
    assert_eq!(dev_vfio(&h), names(&["vfio"]));
}

#[test]
fn no_iommu_mdev_has_no_vfio_nodes() {
    let h = host("no-iommu");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create mdev");
    assert_eq!(
        (ls(&mdev(&h, UUID_A, "vfio-dev")), dev_vfio(&h)),
        (Err(libc::ENOENT), names(&["vfio"]))
    );
}
