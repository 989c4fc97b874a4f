//! The real `mdevctl` (an independent implementation) against the simulator, in a private
//! mount namespace: `/sys` is the simulator's, `/etc/mdevctl.d` a temporary directory.

use std::path::Path;
use std::process::Output;

use crate::common::{IGPU, T4, UUID_A, UUID_B, cat, host, ls, mdev_type};
use vgpu_sim::SimHost;

/// The simulator and a private mdevctl store; fails the test when mdevctl or FUSE is missing.
fn setup(profile: &str) -> (SimHost, tempfile::TempDir) {
    vgpu_sim::peer::mdevctl_for_test();
    let h = host(profile);
    let etc = tempfile::tempdir().expect("temporary mdevctl store");
    vgpu_sim::peer::prepare_mdevctl_store(etc.path()).expect("mdevctl store");
    (h, etc)
}

/// Runs `mdevctl ARGS` with the simulator's `sys` on `/sys`.
fn mdevctl(h: &SimHost, etc: &Path, args: &[&str]) -> Output {
    vgpu_sim::peer::mdevctl(Some(h.root()), etc, args).expect("run unshare")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn mdevctl_types_shows_type_with_name_description_and_count() {
    let (h, etc) = setup("t4-legacy");
    let out = mdevctl(&h, etc.path(), &["types", "-p", T4]);
    assert!(
        stdout(&out).starts_with(
            "0000:3b:00.0\n  nvidia-222\n    Available instances: 16\n    Device API: vfio-pci\n    \
             Name: GRID T4-1B\n    Description: num_heads=4, frl_config=45, framebuffer=1024M, \
             max_resolution=5120x2880, max_instance=16\n"
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn mdevctl_types_lists_every_parent() {
    let (h, etc) = setup("mixed");
    let out = mdevctl(&h, etc.path(), &["types"]);
    let parents: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .map(str::to_owned)
        .collect();
    assert_eq!(parents, vec![IGPU.to_owned(), T4.to_owned()]);
}

#[test]
fn mdevctl_start_creates_device_that_list_shows() {
    let (h, etc) = setup("t4-legacy");
    let started = mdevctl(
        &h,
        etc.path(),
        &["start", "-u", UUID_A, "-p", T4, "-t", "nvidia-231"],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let out = mdevctl(&h, etc.path(), &["list"]);
    assert_eq!(stdout(&out), format!("{UUID_A} {T4} nvidia-231 manual\n\n"));
}

#[test]
fn mdevctl_start_lowers_available_instances() {
    let (h, etc) = setup("t4-legacy");
    let started = mdevctl(
        &h,
        etc.path(),
        &["start", "-u", UUID_A, "-p", T4, "-t", "nvidia-231"],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-231", "available_instances")),
        Ok("7\n".into())
    );
}

#[test]
fn mdevctl_stop_removes_device() {
    let (h, etc) = setup("t4-legacy");
    let started = mdevctl(
        &h,
        etc.path(),
        &["start", "-u", UUID_A, "-p", T4, "-t", "nvidia-231"],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let stopped = mdevctl(&h, etc.path(), &["stop", "-u", UUID_A]);
    assert!(
        stopped.status.success(),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    assert_eq!(ls(&h.root().join("sys/bus/mdev/devices")), Ok(vec![]));
}

#[test]
fn mdevctl_start_beyond_capacity_fails() {
    let (h, etc) = setup("t4-legacy");
    let first = mdevctl(
        &h,
        etc.path(),
        &["start", "-u", UUID_A, "-p", T4, "-t", "nvidia-234"],
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = mdevctl(
        &h,
        etc.path(),
        &["start", "-u", UUID_B, "-p", T4, "-t", "nvidia-234"],
    );
    assert_eq!(
        (
            second.status.code(),
            ls(&h.root().join("sys/bus/mdev/devices"))
        ),
        (Some(1), Ok(vec![UUID_A.to_owned()]))
    );
}

#[test]
fn mdevctl_define_and_start_writes_store_and_creates_device() {
    let (h, etc) = setup("gvtg");
    let defined = mdevctl(
        &h,
        etc.path(),
        &["define", "-u", UUID_A, "-p", IGPU, "-t", "i915-GVTg_V5_4"],
    );
    assert!(
        defined.status.success(),
        "{}",
        String::from_utf8_lossy(&defined.stderr)
    );
    let started = mdevctl(&h, etc.path(), &["start", "-u", UUID_A]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    assert_eq!(
        ls(&mdev_type(&h, IGPU, "i915-GVTg_V5_4", "devices")),
        Ok(vec![UUID_A.to_owned()])
    );
}
