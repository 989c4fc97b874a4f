//! Faults, latency, hot-unplug, counters and the mount guard.

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use crate::common::{FLEX, T4, UUID_A, cat, echo, host, is_mounted, link, ls, mdev_type, pci};
use vgpu_sim::{FsOp, KernelOp, LatencyOp, SimHost};

fn control(h: &SimHost) -> std::path::PathBuf {
    h.root().join(".vgpu-sim/control")
}

#[test]
fn control_fail_next_fails_matching_write_with_errno() {
    let h = host("mixed");
    echo(&control(&h), "fail-next 1 EIO */sriov_numvfs\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Err(libc::EIO));
}

#[test]
fn control_fail_next_leaves_state_unchanged() {
    let h = host("mixed");
    echo(&control(&h), "fail-next 1 EIO */sriov_numvfs\n").expect("command");
    assert_eq!(
        (
            echo(&pci(&h, FLEX, "sriov_numvfs"), "2"),
            cat(&pci(&h, FLEX, "sriov_numvfs"))
        ),
        (Err(libc::EIO), Ok("0\n".into()))
    );
}

#[test]
fn control_fail_next_expires_after_count() {
    let h = host("mixed");
    echo(&control(&h), "fail-next 1 EBUSY */sriov_numvfs\n").expect("command");
    assert_eq!(
        (
            echo(&pci(&h, FLEX, "sriov_numvfs"), "2"),
            echo(&pci(&h, FLEX, "sriov_numvfs"), "2")
        ),
        (Err(libc::EBUSY), Ok(()))
    );
}

#[test]
fn control_fail_next_other_path_unaffected() {
    let h = host("mixed");
    echo(&control(&h), "fail-next 1 EIO */create\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Ok(()));
}

#[test]
fn control_unknown_command_is_einval() {
    let h = host("mixed");
    assert_eq!(echo(&control(&h), "explode now\n"), Err(libc::EINVAL));
}

#[test]
fn control_errno_zero_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "fail-next 1 0 */sriov_numvfs\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_errno_above_133_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "fail-next 1 134 */sriov_numvfs\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_errno_number_133_is_accepted() {
    let h = host("mixed");
    echo(&control(&h), "fail-next 1 133 */sriov_numvfs\n").expect("command");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Err(133));
}

#[test]
fn control_latency_above_60000_ms_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "latency sriov-enable 60001\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_fault_beyond_1024_pending_is_einval() {
    let h = host("mixed");
    let full = "fail-next 1 EIO */create\n".repeat(1024);
    echo(&control(&h), &full).expect("1024 faults fit");
    assert_eq!(
        echo(&control(&h), "fail-next 1 EIO */create\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_refused_write_applies_none_of_its_lines() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "latency bind 10\nunplug 0000:99:00.0\n"),
        Err(libc::ENODEV)
    );
    assert_eq!(cat(&control(&h)), Ok("# vgpu-sim profile mixed\n".into()));
}

#[test]
fn api_try_fail_next_errno_zero_fails() {
    let h = host("mixed");
    assert!(matches!(
        h.try_fail_next(1, 0, "*/create"),
        Err(vgpu_sim::SimError::Control { .. })
    ));
}

#[test]
fn api_set_latency_above_60000_ms_fails() {
    let h = host("mixed");
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
    let h = host("mixed");
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
    let h = host("mixed");
    echo(&control(&h), "latency sriov-enable 300\n").expect("command");
    let start = Instant::now();
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn control_unplug_removes_device() {
    let h = host("mixed");
    assert_eq!(cat(&pci(&h, T4, "vendor")), Ok("0x10de\n".into()));
    echo(&control(&h), &format!("unplug {T4}\n")).expect("command");
    assert_eq!(link(&pci(&h, T4, "")), Err(libc::ENOENT));
}

#[test]
fn control_unplug_then_rescan_leaves_device_gone() {
    let h = host("mixed");
    assert_eq!(cat(&pci(&h, T4, "vendor")), Ok("0x10de\n".into()));
    echo(&control(&h), &format!("unplug {T4}\n")).expect("command");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(link(&pci(&h, T4, "")), Err(libc::ENOENT));
}

#[test]
fn control_unplug_unknown_device_is_enodev() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "unplug 0000:99:00.0\n"),
        Err(libc::ENODEV)
    );
}

#[test]
fn unplug_with_open_attribute_write_is_enodev() {
    let h = host("mixed");
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
    let h = host("mixed");
    cat(&pci(&h, T4, "vendor")).expect("vendor");
    echo(&control(&h), "counters-reset\n").expect("command");
    let text = cat(&h.root().join(".vgpu-sim/counters")).expect("counters");
    // The last line is the inodes held now, which a reset leaves alone.
    let (ops, _inodes) = text.split_once("inodes ").expect("an inodes line");
    assert_eq!(
        ops,
        "lookup 0\ngetattr 0\nsetattr 0\nreadlink 0\nopen 0\nread 0\nwrite 0\nreaddir 0\n"
    );
}

#[test]
fn counters_count_one_readlink() {
    let h = host("mixed");
    let canonical = h
        .root()
        .join("sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/driver");
    h.reset_counters();
    link(&canonical).expect("driver link");
    assert_eq!(h.counters().get(FsOp::Readlink), 1);
}

#[test]
fn counters_count_lookups_of_a_path() {
    let h = host("mixed");
    h.reset_counters();
    cat(&h.root().join("proc/cmdline")).expect("cmdline");
    assert!(h.counters().get(FsOp::Lookup) >= 2);
}

#[test]
fn counters_count_one_open_and_one_read() {
    let h = host("mixed");
    let vendor = pci(&h, T4, "vendor");
    h.reset_counters();
    let mut buf = [0u8; 64];
    let n = std::fs::File::open(&vendor)
        .and_then(|mut f| f.read(&mut buf))
        .expect("read vendor");
    let c = h.counters();
    assert_eq!(
        (&buf[..n], c.get(FsOp::Open), c.get(FsOp::Read)),
        (&b"0x10de\n"[..], 1, 1)
    );
}

#[test]
fn counters_count_one_write() {
    let h = host("mixed");
    let reset = pci(&h, T4, "reset");
    h.reset_counters();
    echo(&reset, "1").expect("reset");
    let c = h.counters();
    assert_eq!((c.get(FsOp::Open), c.get(FsOp::Write)), (1, 1));
}

#[test]
fn counters_count_getattr_of_stat() {
    let h = host("mixed");
    let vendor = pci(&h, T4, "vendor");
    h.reset_counters();
    std::fs::metadata(&vendor).expect("stat");
    assert_eq!(h.counters().get(FsOp::Getattr), 1);
}

#[test]
fn counters_count_readdir_of_listing() {
    let h = host("mixed");
    let dir = h.root().join("sys/bus/mdev");
    h.reset_counters();
    assert_eq!(ls(&dir), Ok(vec!["devices".to_owned()]));
    assert_eq!(h.counters().get(FsOp::Readdir), 2);
}

#[test]
fn counters_skip_the_control_directory() {
    let h = host("mixed");
    h.reset_counters();
    cat(&control(&h)).expect("read control");
    echo(&control(&h), "clear\n").expect("write control");
    ls(&h.root().join(".vgpu-sim")).expect("list control dir");
    cat(&h.root().join(".vgpu-sim/counters")).expect("read counters");
    assert_eq!(h.counters().total(), 0);
}

#[test]
fn api_fail_next_fails_write() {
    let h = host("mixed");
    h.fail_next(1, libc::ENOSPC, "*/nvidia-231/create");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A),
        Err(libc::ENOSPC)
    );
}

#[test]
fn api_latency_delays_mdev_create() {
    let h = host("mixed");
    h.set_latency(
        LatencyOp::Kernel(KernelOp::MdevCreate),
        Duration::from_millis(80),
    )
    .expect("latency");
    let start = Instant::now();
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert!(start.elapsed() >= Duration::from_millis(80));
}

#[test]
fn api_control_unknown_command_fails() {
    let h = host("mixed");
    assert!(matches!(
        h.control("nope"),
        Err(vgpu_sim::SimError::Control { .. })
    ));
}

#[test]
fn mount_guard_drop_unmounts() {
    let h = host("t4-legacy");
    let dir = h.root().to_owned();
    let was_mounted = is_mounted(&dir);
    drop(h);
    assert_eq!((was_mounted, is_mounted(&dir)), (true, false));
}

#[test]
fn mount_guard_unmounts_when_test_panics() {
    let h = host("t4-legacy");
    let dir = h.root().to_owned();
    let was_mounted = is_mounted(&dir);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = h;
        panic!("test failure while mounted");
    }));
    assert_eq!(
        (was_mounted, r.is_err(), is_mounted(&dir)),
        (true, true, false)
    );
}

#[test]
fn unmount_succeeds_and_leaves_dir_unmounted() {
    let h = host("t4-legacy");
    let dir = h.root().to_owned();
    let was_mounted = is_mounted(&dir);
    let r = h.unmount();
    assert_eq!(
        (was_mounted, r.is_ok(), is_mounted(&dir)),
        (true, true, false)
    );
}

#[test]
fn mount_at_missing_dir_is_mount_point_error() {
    let r = SimHost::mount_at(
        vgpu_sim::Profile::builtin("gvtg").expect("profile"),
        std::path::Path::new("/nonexistent/vgpu-sim"),
    );
    assert!(matches!(r, Err(vgpu_sim::SimError::MountPoint { .. })));
}

/// The `.vgpu-sim/generation` line: the boot id and the generation.
fn generation(h: &SimHost) -> (String, u64) {
    let line = cat(&h.root().join(".vgpu-sim/generation")).expect("generation");
    let (boot, n) = line.trim_end().split_once(' ').expect("boot id and number");
    (boot.to_owned(), n.parse().expect("decimal generation"))
}

#[test]
fn generation_unchanged_by_reads() {
    let h = host("mixed");
    let before = generation(&h);
    cat(&pci(&h, FLEX, "sriov_numvfs")).expect("read");
    ls(&h.root().join("sys/bus/pci/devices")).expect("list");
    cat(&control(&h)).expect("control reads");
    assert_eq!(generation(&h), before);
}

#[test]
fn generation_grows_on_a_store() {
    let h = host("mixed");
    let (boot, n) = generation(&h);
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("store");
    let (boot_after, after) = generation(&h);
    assert!(boot_after == boot && after > n, "{n} -> {after}");
}

#[test]
fn generation_grows_on_a_refused_store() {
    let h = host("mixed");
    let (_, n) = generation(&h);
    assert_eq!(
        echo(&pci(&h, FLEX, "sriov_numvfs"), "junk"),
        Err(libc::EINVAL)
    );
    assert!(generation(&h).1 > n);
}

#[test]
fn generation_grows_on_a_control_line() {
    let h = host("mixed");
    let (_, n) = generation(&h);
    echo(&control(&h), "latency sriov-enable 10\n").expect("command");
    let (_, after_write) = generation(&h);
    h.control("latency sriov-enable 0").expect("command");
    let (_, after_method) = generation(&h);
    assert!(
        n < after_write && after_write < after_method,
        "{n} -> {after_write} -> {after_method}"
    );
}

#[test]
fn generation_of_another_boot_has_another_boot_id() {
    let (a, b) = (host("mixed"), host("mixed"));
    assert_ne!(generation(&a).0, generation(&b).0);
}
