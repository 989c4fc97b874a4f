//! Intel SR-IOV local-memory quotas: `drm/card<N>/iov/vf<M>/gt0/lmem_quota` under a Flex PF
//! on Intel's out-of-tree `i915`, an equal share per enabled VF, and the errnos of a store.

use std::path::PathBuf;

use crate::common::{cat, echo, host};
use vgpu_sim::SimHost;

const FLEX_PF: &str = "0000:4d:00.0";
const GIB: u64 = 1 << 30;

fn quota_path(h: &SimHost, m: u32) -> PathBuf {
    h.root()
        .join(format!("sys/class/drm/card0/iov/vf{m}/gt0/lmem_quota"))
}

fn quota(h: &SimHost, m: u32) -> u64 {
    cat(&quota_path(h, m))
        .expect("read")
        .trim()
        .parse()
        .expect("number")
}

fn pf(h: &SimHost, attr: &str) -> PathBuf {
    h.root()
        .join(format!("sys/bus/pci/devices/{FLEX_PF}/{attr}"))
}

/// Two VFs without their probe (so they stay unbound).
fn two_unbound_vfs() -> SimHost {
    let h = host("flex-sriov");
    echo(&pf(&h, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pf(&h, "sriov_numvfs"), "2").expect("enable");
    h
}

#[test]
fn class_drm_links_to_the_pf_card() {
    let h = host("flex-sriov");
    let link = std::fs::read_link(h.root().join("sys/class/drm/card0")).expect("link");
    assert!(
        link.to_string_lossy()
            .ends_with(&format!("{FLEX_PF}/drm/card0")),
        "{link:?}"
    );
    assert!(!quota_path(&h, 1).exists(), "no VFs, no quotas");
}

#[test]
fn enable_gives_each_vf_an_equal_share() {
    let h = two_unbound_vfs();
    assert_eq!(quota(&h, 1), 8 * GIB);
    assert_eq!(quota(&h, 2), 8 * GIB);
    assert!(!quota_path(&h, 3).exists());
}

#[test]
fn quota_files_go_with_the_vfs() {
    let h = two_unbound_vfs();
    echo(&pf(&h, "sriov_numvfs"), "0").expect("disable");
    assert!(!quota_path(&h, 1).exists());
}

#[test]
fn write_sets_quota_and_checks_the_total() {
    let h = two_unbound_vfs();
    echo(&quota_path(&h, 1), &format!("{}", 4 * GIB)).expect("lower");
    assert_eq!(quota(&h, 1), 4 * GIB);
    assert_eq!(echo(&quota_path(&h, 2), &format!("{}\n", 12 * GIB)), Ok(()));
    assert_eq!(
        echo(&quota_path(&h, 1), &format!("{}", 4 * GIB + 1)),
        Err(libc::EDQUOT)
    );
    assert_eq!(echo(&quota_path(&h, 1), "lots"), Err(libc::EINVAL));
    assert_eq!(quota(&h, 1), 4 * GIB);
}

#[test]
fn write_refused_while_the_vf_is_bound() {
    let h = host("flex-sriov");
    echo(&pf(&h, "sriov_numvfs"), "2").expect("enable");
    echo(&h.root().join("sys/bus/pci/drivers_probe"), "0000:4d:00.1").ok();
    let bound = h
        .root()
        .join("sys/bus/pci/devices/0000:4d:00.1/driver")
        .symlink_metadata()
        .is_ok();
    if !bound {
        echo(
            &h.root().join("sys/bus/pci/drivers/i915/bind"),
            "0000:4d:00.1",
        )
        .expect("bind");
    }
    assert_eq!(
        echo(&quota_path(&h, 1), &format!("{GIB}")),
        Err(libc::EBUSY)
    );
}

fn max_quota(h: &SimHost) -> u64 {
    cat(&h
        .root()
        .join("sys/class/drm/card0/iov/pf/gt0/available/lmem_max_quota"))
    .expect("read")
    .trim()
    .parse()
    .expect("number")
}

#[test]
fn max_quota_without_vfs_is_all_local_memory() {
    let h = host("flex-sriov");
    assert_eq!(max_quota(&h), 16 * GIB);
}

#[test]
fn max_quota_is_what_no_vf_holds() {
    let h = two_unbound_vfs();
    echo(&quota_path(&h, 1), &format!("{}", 2 * GIB)).expect("lower");
    assert_eq!(max_quota(&h), 6 * GIB);
}
