//! The `vgpu-sim mount` command: foreground mount, unmount on SIGTERM.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{IGPU, is_mounted};
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
