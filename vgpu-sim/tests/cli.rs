//! The `vgpu-sim mount` command: foreground mount, unmount on SIGTERM.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn is_mounted(dir: &std::path::Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.to_string_lossy();
    text.lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

#[test]
fn mount_command_unmounts_on_sigterm() {
    if let Some(reason) = vgpu_sim::require_fuse() {
        assert!(
            std::env::var_os("CI").is_none(),
            "FUSE is required in CI: {reason}"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("mount point");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vgpu-sim"))
        .args(["mount", "--profile", "gvtg"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("start vgpu-sim");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.path().join("sys/class/mdev_bus/0000:00:02.0").exists() && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    kill(pid, Signal::SIGTERM).expect("signal");
    let status = child.wait().expect("wait");
    assert!(status.success() && !is_mounted(dir.path()));
}
