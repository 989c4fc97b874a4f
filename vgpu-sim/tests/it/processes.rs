//! Simulated processes holding files open: `hold`/`drop` through the control file and the
//! Rust API, `proc/<pid>/comm` and `proc/<pid>/fd/<n>`.

use std::path::PathBuf;

use crate::common::{cat, echo, host, link, ls};
use vgpu_sim::{SimError, SimHost};

fn control(h: &SimHost) -> PathBuf {
    h.root().join(".vgpu-sim/control")
}

fn proc_path(h: &SimHost, rest: &str) -> PathBuf {
    h.root().join("proc").join(rest)
}

fn names(v: &[&str]) -> Result<Vec<String>, i32> {
    Ok(v.iter().map(|s| (*s).to_owned()).collect())
}

// ----- control file -----

#[test]
fn control_hold_creates_pid_dir_with_comm_and_fd() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu-system-x86 /dev/vfio/141\n").expect("hold");
    assert_eq!(ls(&proc_path(&h, "4242")), names(&["comm", "fd"]));
}

#[test]
fn control_hold_comm_reads_name_and_newline() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu-system-x86 /dev/vfio/141\n").expect("hold");
    assert_eq!(
        cat(&proc_path(&h, "4242/comm")),
        Ok("qemu-system-x86\n".into())
    );
}

#[test]
fn control_hold_fd_3_link_reads_target_literally() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(
        link(&proc_path(&h, "4242/fd/3")),
        Ok("/dev/vfio/141".into())
    );
}

#[test]
fn control_hold_second_file_gets_fd_4() {
    let h = host("mixed");
    echo(
        &control(&h),
        "hold 4242 qemu /dev/vfio/141\nhold 4242 qemu /dev/vfio/devices/vfio0\n",
    )
    .expect("hold");
    assert_eq!(
        (
            ls(&proc_path(&h, "4242/fd")),
            link(&proc_path(&h, "4242/fd/4"))
        ),
        (names(&["3", "4"]), Ok("/dev/vfio/devices/vfio0".into()))
    );
}

#[test]
fn control_hold_pseudo_file_target_is_accepted() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu anon_inode:[vfio-device]\n").expect("hold");
    assert_eq!(
        link(&proc_path(&h, "4242/fd/3")),
        Ok("anon_inode:[vfio-device]".into())
    );
}

#[test]
fn proc_readdir_lists_pids_beside_existing_entries() {
    let h = host("mixed");
    echo(
        &control(&h),
        "hold 4242 qemu /dev/vfio/141\nhold 17 bash /dev/null\n",
    )
    .expect("hold");
    assert_eq!(
        ls(&h.root().join("proc")),
        names(&["17", "4242", "cmdline", "cpuinfo", "driver", "sys"])
    );
}

#[test]
fn proc_existing_files_still_served_with_processes() {
    let h = host("t4-legacy");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(
        cat(&proc_path(&h, "cmdline")),
        Ok("BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=/dev/mapper/vg-root ro intel_iommu=on iommu=pt quiet\n".into())
    );
}

/// `proc/sys/kernel/random/boot_id`: a UUID, another one at each boot (mount), as the kernel's.
#[test]
fn proc_boot_id_is_new_at_each_boot() {
    let read = |h: &SimHost| {
        let text = cat(&proc_path(h, "sys/kernel/random/boot_id")).expect("boot_id");
        uuid::Uuid::parse_str(text.trim_end_matches('\n')).expect("a UUID")
    };
    let first = host("mixed");
    let second = host("mixed");
    let (a, b) = (read(&first), read(&second));
    assert_eq!((a == read(&first), a != b), (true, true));
}

#[test]
fn control_drop_removes_pid_dir() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    echo(&control(&h), "drop 4242\n").expect("drop");
    assert_eq!(
        (ls(&proc_path(&h, "4242")), ls(&h.root().join("proc")),),
        (
            Err(libc::ENOENT),
            names(&["cmdline", "cpuinfo", "driver", "sys"])
        )
    );
}

#[test]
fn fd_link_of_dropped_process_is_enoent() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    let fd = proc_path(&h, "4242/fd/3");
    link(&fd).expect("link while running");
    echo(&control(&h), "drop 4242\n").expect("drop");
    assert_eq!(link(&fd), Err(libc::ENOENT));
}

#[test]
fn comm_open_before_drop_reads_esrch_after() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    let f = std::fs::File::open(proc_path(&h, "4242/comm")).expect("open comm");
    echo(&control(&h), "drop 4242\n").expect("drop");
    assert_eq!(
        std::io::read_to_string(f).map_err(|e| e.raw_os_error()),
        Err(Some(libc::ESRCH))
    );
}

#[test]
fn control_clear_drops_processes() {
    let h = host("mixed");
    echo(
        &control(&h),
        "hold 4242 qemu /dev/vfio/141\nhold 17 bash /dev/null\n",
    )
    .expect("hold");
    echo(&control(&h), "clear\n").expect("clear");
    assert_eq!(
        ls(&h.root().join("proc")),
        names(&["cmdline", "cpuinfo", "driver", "sys"])
    );
}

#[test]
fn control_hold_then_drop_in_one_write_is_accepted() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\ndrop 4242\n").expect("hold, drop");
    assert_eq!(ls(&proc_path(&h, "4242")), Err(libc::ENOENT));
}

#[test]
fn control_hold_pid_max_is_accepted() {
    let h = host("mixed");
    echo(&control(&h), "hold 4194304 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(cat(&proc_path(&h, "4194304/comm")), Ok("qemu\n".into()));
}

#[test]
fn control_hold_comm_of_15_bytes_is_accepted() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 abcdefghijklmno /dev/vfio/141\n").expect("hold");
    assert_eq!(
        cat(&proc_path(&h, "4242/comm")),
        Ok("abcdefghijklmno\n".into())
    );
}

// ----- refused lines -----

#[test]
fn control_hold_pid_zero_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "hold 0 qemu /dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_pid_above_max_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "hold 4194305 qemu /dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_signed_pid_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "hold +42 qemu /dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_comm_of_16_bytes_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "hold 4242 abcdefghijklmnop /dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_relative_target_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&control(&h), "hold 4242 qemu dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_target_of_4096_bytes_is_einval() {
    let h = host("mixed");
    let target = format!("/{}", "a".repeat(4095));
    assert_eq!(
        echo(&control(&h), &format!("hold 4242 qemu {target}\n")),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_hold_without_target_is_einval() {
    let h = host("mixed");
    assert_eq!(echo(&control(&h), "hold 4242 qemu\n"), Err(libc::EINVAL));
}

#[test]
fn control_hold_running_pid_under_other_name_is_einval() {
    let h = host("mixed");
    echo(&control(&h), "hold 4242 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(
        echo(&control(&h), "hold 4242 bash /dev/null\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn control_drop_unknown_pid_is_esrch() {
    let h = host("mixed");
    assert_eq!(echo(&control(&h), "drop 4242\n"), Err(libc::ESRCH));
}

#[test]
fn control_drop_without_pid_is_einval() {
    let h = host("mixed");
    assert_eq!(echo(&control(&h), "drop\n"), Err(libc::EINVAL));
}

#[test]
fn control_refused_hold_write_applies_none_of_its_lines() {
    let h = host("mixed");
    assert_eq!(
        echo(
            &control(&h),
            "hold 10 qemu /dev/vfio/141\nhold 0 qemu /dev/vfio/141\n"
        ),
        Err(libc::EINVAL)
    );
    assert_eq!(ls(&proc_path(&h, "10")), Err(libc::ENOENT));
}

#[test]
fn control_refused_drop_write_applies_none_of_its_lines() {
    let h = host("mixed");
    echo(&control(&h), "hold 10 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(echo(&control(&h), "drop 10\ndrop 11\n"), Err(libc::ESRCH));
    assert_eq!(cat(&proc_path(&h, "10/comm")), Ok("qemu\n".into()));
}

#[test]
fn control_refused_clear_write_keeps_processes() {
    let h = host("mixed");
    echo(&control(&h), "hold 10 qemu /dev/vfio/141\n").expect("hold");
    assert_eq!(
        echo(&control(&h), "clear\nhold 0 qemu /dev/vfio/141\n"),
        Err(libc::EINVAL)
    );
    assert_eq!(cat(&proc_path(&h, "10/comm")), Ok("qemu\n".into()));
}

#[test]
fn control_hold_beyond_4096_descriptors_is_einval() {
    let h = host("mixed");
    echo(&control(&h), &"hold 7 q /x\n".repeat(4096)).expect("4096 descriptors fit");
    assert_eq!(echo(&control(&h), "hold 8 q /x\n"), Err(libc::EINVAL));
}

#[test]
fn control_drop_frees_descriptors_under_the_limit() {
    let h = host("mixed");
    echo(&control(&h), &"hold 7 q /x\n".repeat(4096)).expect("4096 descriptors fit");
    echo(&control(&h), "drop 7\n").expect("drop");
    echo(&control(&h), "hold 8 q /x\n").expect("hold after drop");
    assert_eq!(link(&proc_path(&h, "8/fd/3")), Ok("/x".into()));
}

// ----- Rust API -----

#[test]
fn api_hold_returns_fd_and_serves_link() {
    let h = host("t4-legacy");
    let fd = h.hold(4242, "qemu", "/dev/vfio/devices/vfio0");
    assert_eq!(
        (fd.ok(), link(&proc_path(&h, "4242/fd/3"))),
        (Some(3), Ok("/dev/vfio/devices/vfio0".into()))
    );
}

#[test]
fn api_hold_second_file_returns_fd_4() {
    let h = host("t4-legacy");
    h.hold(4242, "qemu", "/dev/vfio/92").expect("hold");
    assert_eq!(
        h.hold(4242, "qemu", "/dev/vfio/devices/vfio0").ok(),
        Some(4)
    );
}

#[test]
fn api_hold_comm_with_space_fails() {
    let h = host("t4-legacy");
    assert!(matches!(
        h.hold(4242, "qemu kvm", "/dev/vfio/92"),
        Err(SimError::Control { .. })
    ));
}

#[test]
fn api_hold_target_with_space_fails() {
    let h = host("t4-legacy");
    assert!(matches!(
        h.hold(4242, "qemu", "/dev/vfio/92 (deleted)"),
        Err(SimError::Control { .. })
    ));
}

#[test]
fn api_hold_pid_zero_fails_and_creates_nothing() {
    let h = host("t4-legacy");
    let r = h.hold(0, "qemu", "/dev/vfio/92");
    assert_eq!(
        (
            matches!(r, Err(SimError::Control { .. })),
            ls(&proc_path(&h, "0"))
        ),
        (true, Err(libc::ENOENT))
    );
}

#[test]
fn api_drop_process_removes_pid_dir() {
    let h = host("t4-legacy");
    h.hold(4242, "qemu", "/dev/vfio/92").expect("hold");
    h.drop_process(4242).expect("drop");
    assert_eq!(ls(&proc_path(&h, "4242")), Err(libc::ENOENT));
}

#[test]
fn api_drop_process_unknown_pid_fails() {
    let h = host("t4-legacy");
    assert!(matches!(
        h.drop_process(4242),
        Err(SimError::Control { .. })
    ));
}

#[test]
fn api_control_hold_line_serves_link() {
    let h = host("t4-legacy");
    h.control("hold 4242 qemu /dev/vfio/92").expect("hold");
    assert_eq!(link(&proc_path(&h, "4242/fd/3")), Ok("/dev/vfio/92".into()));
}
