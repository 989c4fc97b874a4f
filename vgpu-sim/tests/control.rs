//! Faults, latency, hot-unplug, counters and the mount guard.

mod common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use common::{cat, echo, host, link, pci};
use vgpu_sim::{FsOp, KernelOp, LatencyOp, SimHost};

const T4: &str = "0000:3b:00.0";
const FLEX: &str = "0001:03:00.0";

fn control(h: &SimHost) -> std::path::PathBuf {
    h.root().join(".vgpu-sim/control")
}

fn is_mounted(dir: &std::path::Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.to_string_lossy();
    text.lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

#[test]
fn control_fail_next_fails_matching_write_with_errno() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "fail-next 1 EIO */sriov_numvfs\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Err(libc::EIO));
}

#[test]
fn control_fail_next_leaves_state_unchanged() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "fail-next 1 EIO */sriov_numvfs\n").expect("command");
    let _ = echo(&pci(&h, FLEX, "sriov_numvfs"), "2");
    assert_eq!(cat(&pci(&h, FLEX, "sriov_numvfs")), Ok("0\n".into()));
}

#[test]
fn control_fail_next_expires_after_count() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "fail-next 1 EBUSY */sriov_numvfs\n").expect("command");
    let _ = echo(&pci(&h, FLEX, "sriov_numvfs"), "2");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Ok(()));
}

#[test]
fn control_fail_next_other_path_unaffected() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "fail-next 1 EIO */create\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Ok(()));
}

#[test]
fn control_unknown_command_is_einval() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(echo(&control(&h), "explode now\n"), Err(libc::EINVAL));
}

#[test]
fn control_errno_zero_is_einval() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(
        echo(&control(&h), "fail-next 1 0 */sriov_numvfs\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_errno_above_133_is_einval() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(
        echo(&control(&h), "fail-next 1 134 */sriov_numvfs\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_errno_number_133_is_accepted() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "fail-next 1 133 */sriov_numvfs\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Err(133));
}

#[test]
fn control_latency_above_60000_ms_is_einval() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(
        echo(&control(&h), "latency sriov-enable 60001\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_fault_beyond_1024_pending_is_einval() {
    let Some(h) = host("mixed") else { return };
    let full = "fail-next 1 EIO */create\n".repeat(1024);
    echo(&control(&h), &full).expect("1024 faults fit");
    assert_eq!(
        echo(&control(&h), "fail-next 1 EIO */create\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_refused_write_applies_none_of_its_lines() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(
        echo(&control(&h), "latency bind 10\nunplug 0000:99:00.0\n"),
        Err(libc::ENODEV)
    );
    assert_eq!(cat(&control(&h)), Ok("# vgpu-sim profile mixed\n".into()));
}

#[test]
fn api_try_fail_next_errno_zero_fails() {
    let Some(h) = host("mixed") else { return };
    assert!(matches!(
        h.try_fail_next(1, 0, "*/create"),
        Err(vgpu_sim::SimError::Control { .. })
    ));
}

#[test]
fn api_set_latency_above_60000_ms_fails() {
    let Some(h) = host("mixed") else { return };
    assert!(matches!(
        h.set_latency(
            LatencyOp::Kernel(KernelOp::Bind),
            Duration::from_millis(60_001)
        ),
        Err(vgpu_sim::SimError::Control { .. })
    ));
}

#[test]
fn control_read_shows_pending_fault() {
    let Some(h) = host("mixed") else { return };
    echo(
        &control(&h),
        "fail-next 3 EBUSY */create\nlatency mdev-create 80\n",
    )
    .expect("command");
    assert_eq!(
        cat(&control(&h)),
        Ok("# vgpu-sim profile mixed\nfail-next 3 EBUSY */create\nlatency mdev-create 80\n".into())
    );
}

#[test]
fn control_latency_delays_sriov_enable() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), "latency sriov-enable 300\n").expect("command");
    let start = Instant::now();
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn control_unplug_removes_device() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), &format!("unplug {T4}\n")).expect("command");
    assert_eq!(link(&pci(&h, T4, "")), Err(libc::ENOENT));
}

#[test]
fn control_unplug_then_rescan_leaves_device_gone() {
    let Some(h) = host("mixed") else { return };
    echo(&control(&h), &format!("unplug {T4}\n")).expect("command");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(link(&pci(&h, T4, "")), Err(libc::ENOENT));
}

#[test]
fn control_unplug_unknown_device_is_enodev() {
    let Some(h) = host("mixed") else { return };
    assert_eq!(
        echo(&control(&h), "unplug 0000:99:00.0\n"),
        Err(libc::ENODEV)
    );
}

#[test]
fn unplug_with_open_attribute_write_is_enodev() {
    let Some(h) = host("mixed") else { return };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(pci(&h, T4, "reset"))
        .expect("open reset");
    h.unplug(T4.parse().expect("addr")).expect("unplug");
    assert_eq!(
        f.write_all(b"1").map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENODEV))
    );
}

#[test]
fn counters_reset_reads_all_zero() {
    let Some(h) = host("mixed") else { return };
    let _ = cat(&pci(&h, T4, "vendor"));
    echo(&control(&h), "counters-reset\n").expect("command");
    assert_eq!(
        cat(&h.root().join(".vgpu-sim/counters")),
        Ok(
            "lookup 0\ngetattr 0\nsetattr 0\nreadlink 0\nopen 0\nread 0\nwrite 0\nreaddir 0\n"
                .into()
        )
    );
}

#[test]
fn counters_count_one_readlink() {
    let Some(h) = host("mixed") else { return };
    let canonical = h
        .root()
        .join("sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/driver");
    h.reset_counters();
    let _ = link(&canonical);
    assert_eq!(h.counters().get(FsOp::Readlink), 1);
}

#[test]
fn counters_count_lookups_of_a_path() {
    let Some(h) = host("mixed") else { return };
    h.reset_counters();
    let _ = cat(&h.root().join("proc/cmdline"));
    assert!(h.counters().get(FsOp::Lookup) >= 2);
}

#[test]
fn api_fail_next_fails_write() {
    let Some(h) = host("mixed") else { return };
    h.fail_next(1, libc::ENOSPC, "*/nvidia-231/create");
    let create = h
        .root()
        .join("sys/class/mdev_bus")
        .join(T4)
        .join("mdev_supported_types/nvidia-231/create");
    assert_eq!(
        echo(&create, "11111111-2222-3333-4444-555555555555"),
        Err(libc::ENOSPC)
    );
}

#[test]
fn api_latency_delays_mdev_create() {
    let Some(h) = host("mixed") else { return };
    h.set_latency(
        LatencyOp::Kernel(KernelOp::MdevCreate),
        Duration::from_millis(80),
    )
    .expect("latency");
    let create = h
        .root()
        .join("sys/class/mdev_bus")
        .join(T4)
        .join("mdev_supported_types/nvidia-231/create");
    let start = Instant::now();
    echo(&create, "11111111-2222-3333-4444-555555555555").expect("create");
    assert!(start.elapsed() >= Duration::from_millis(80));
}

#[test]
fn api_control_unknown_command_fails() {
    let Some(h) = host("mixed") else { return };
    assert!(matches!(
        h.control("nope"),
        Err(vgpu_sim::SimError::Control { .. })
    ));
}

#[test]
fn mount_guard_drop_unmounts() {
    let Some(h) = host("t4-legacy") else { return };
    let dir = h.root().to_owned();
    drop(h);
    assert!(!is_mounted(&dir));
}

#[test]
fn mount_guard_unmounts_when_test_panics() {
    let Some(h) = host("t4-legacy") else { return };
    let dir = h.root().to_owned();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = h;
        panic!("test failure while mounted");
    }));
    assert!(r.is_err() && !is_mounted(&dir));
}

#[test]
fn mount_at_missing_dir_is_mount_point_error() {
    let r = SimHost::mount_at(
        vgpu_sim::Profile::builtin("gvtg").expect("profile"),
        std::path::Path::new("/nonexistent/vgpu-sim"),
    );
    assert!(matches!(r, Err(vgpu_sim::SimError::MountPoint { .. })));
}
