//! The `vgpu-sim mount` command: foreground mount, unmount on SIGTERM.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{IGPU, NamespaceCopy, is_mounted};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[test]
fn mount_command_unmounts_on_sigterm() {
    vgpu_sim::fuse_for_test();
    let dir = tempfile::tempdir().expect("mount point");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vgpu-sim"))
        .args(["mount", "--profile", "gvtg"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("start vgpu-sim");
    let parent = dir.path().join("sys/class/mdev_bus").join(IGPU);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !parent.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let was_mounted = is_mounted(dir.path());
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("signal");
    let status = child.wait().expect("wait");
    assert_eq!(
        (was_mounted, status.success(), is_mounted(dir.path())),
        (true, true, false)
    );
}

/// A mount namespace made while the simulator was mounted keeps a copy of the mount that the
/// unmount does not reach. The simulator exits on SIGTERM all the same, unmounted here, and the
/// copy stops being served when it exits (it is not waited for).
#[test]
fn mount_command_exits_on_sigterm_while_another_namespace_has_the_mount() {
    vgpu_sim::fuse_for_test();
    let dir = tempfile::tempdir().expect("mount point");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vgpu-sim"))
        .args(["mount", "--profile", "t4-legacy"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start vgpu-sim");
    // Its first line comes once the mount answers.
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("vgpu-sim's first line");
    assert!(line.contains(" mounted on "), "vgpu-sim said {line:?}");
    let mut copy = NamespaceCopy::start(dir.path());
    let before = copy.probe();
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("signal");
    let status = child.wait().expect("wait");
    assert_eq!(
        (
            before,
            status.success(),
            is_mounted(dir.path()),
            copy.probe()
        ),
        (
            "copy=1 served=1".to_owned(),
            true,
            false,
            "copy=1 served=0".to_owned()
        )
    );
}
