//! The hook under a real system `libvirtd` (Debian's `libvirt-daemon`), started here as root.
//!
//! libvirt reads hooks from `/etc/libvirt/hooks`, a path fixed when it is built, so the daemon
//! runs in a private mount namespace (`unshare -m`) where a temporary directory is bind-mounted
//! over `/etc/libvirt` (its `libvirtd.conf`, `qemu.conf` and `hooks/`), and others over
//! `/run/libvirt`, `/var/lib/libvirt`, `/var/log/libvirt` and `/var/cache/libvirt`. Its socket
//! and pid file are in the temporary directory (`unix_sock_dir`, `--pid-file`), reached from outside as
//! `qemu:///system?socket=…`. The simulated host is mounted before the namespace is made, so
//! the hook libvirt runs sees it. Nothing here skips: a host where libvirtd cannot run fails.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use vgpu_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const MDEV: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
const LIBVIRTD: &str = "/usr/sbin/libvirtd";

/// A system libvirtd in its own mount namespace, killed on drop.
struct Daemon {
    dir: tempfile::TempDir,
    child: Child,
}

impl Daemon {
    /// Starts libvirtd with the hook installed by `vgpuctl hook install` for `sim` and `state`.
    fn start(sim: &SimHost, state: &Path) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test starts a system libvirtd and must run as root"
        );
        assert!(
            Path::new(LIBVIRTD).exists(),
            "{LIBVIRTD} is missing: install libvirt-daemon (scripts/install-deps.sh does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["etc/hooks", "run", "lib", "log", "cache", "sock"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(
            root.join("etc/libvirtd.conf"),
            format!(
                "unix_sock_dir = \"{sock}\"\nunix_sock_rw_perms = \"0700\"\n\
                 auth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n\
                 log_outputs = \"3:file:{log}\"\n",
                sock = root.join("sock").display(),
                log = root.join("libvirtd.log").display()
            ),
        )
        .unwrap();
        std::fs::write(root.join("etc/qemu.conf"), "stdio_handler = \"file\"\n").unwrap();
        let install = vgpuctl(sim, state)
            .args(["hook", "install", "--dir"])
            .arg(root.join("etc/hooks"))
            .output()
            .unwrap();
        assert!(install.status.success(), "{}", text(&install.stderr));
        let script = format!(
            "set -e\n\
             mkdir -p /etc/libvirt /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt\n\
             mount --bind {r}/etc /etc/libvirt\n\
             mount --bind {r}/run /run/libvirt\n\
             mount --bind {r}/lib /var/lib/libvirt\n\
             mount --bind {r}/log /var/log/libvirt\n\
             mount --bind {r}/cache /var/cache/libvirt\n\
             exec {LIBVIRTD} --config /etc/libvirt/libvirtd.conf --pid-file {r}/libvirtd.pid\n",
            r = root.display()
        );
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("libvirtd.stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut daemon = Daemon { dir, child };
        let socket = daemon.dir.path().join("sock/libvirt-sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            if let Some(status) = daemon.child.try_wait().unwrap() {
                panic!("libvirtd exited with {status}: {}", daemon.logs());
            }
            assert!(
                Instant::now() < deadline,
                "libvirtd made no socket in 30 s: {}",
                daemon.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        daemon
    }

    fn uri(&self) -> String {
        format!(
            "qemu:///system?socket={}",
            self.dir.path().join("sock/libvirt-sock").display()
        )
    }

    fn virsh(&self, args: &[&str]) -> Output {
        Command::new("virsh")
            .arg("-c")
            .arg(self.uri())
            .args(args)
            .output()
            .unwrap()
    }

    /// Defines a domain named `name` with `devices`.
    fn define(&self, name: &str, devices: &str) {
        let xml = self.dir.path().join(format!("{name}.xml"));
        std::fs::write(
            &xml,
            format!(
                "<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>\
                 <os><type arch='x86_64' machine='pc'>hvm</type></os>\
                 <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{devices}</devices>\
                 </domain>"
            ),
        )
        .unwrap();
        let out = self.virsh(&["define", xml.to_str().unwrap()]);
        assert!(out.status.success(), "virsh define: {}", text(&out.stderr));
    }

    fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!("{}\n{}", read("libvirtd.stderr"), read("libvirtd.log"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM lets libvirtd remove its socket and pid file; its namespace goes with it.
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _signalled = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

fn vgpuctl(sim: &SimHost, state: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpuctl"));
    cmd.arg("--root")
        .arg(sim.root())
        .arg("--state-root")
        .arg(state)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn mdev_hostdev(uuid: &str) -> String {
    format!(
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\
         <source><address uuid='{uuid}'/></source></hostdev>"
    )
}

/// The audit log's `(action, device, result)` of lines the hook wrote.
fn hook_audit(state: &Path) -> Vec<(String, String, String)> {
    let log = std::fs::read_to_string(state.join("var/log/vgpu/audit.jsonl")).unwrap_or_default();
    log.lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|v| v["command"].as_str().unwrap().contains(" hook qemu "))
        .map(|v| {
            let field = |name: &str| v[name].as_str().unwrap().to_owned();
            (field("action"), field("device"), field("result"))
        })
        .collect()
}

fn mdev_running(sim: &SimHost) -> bool {
    sim.root().join("sys/bus/mdev/devices").join(MDEV).exists()
}

fn state_dir() -> (tempfile::TempDir, PathBuf) {
    let state = tempfile::tempdir().unwrap();
    let path = state.path().to_path_buf();
    (state, path)
}

/// `virsh start` runs the hook's `prepare`, which starts the defined mdev on the simulated T4;
/// QEMU cannot be given it on this host (no VFIO), so the start fails as libvirt reports it,
/// and libvirt's `release` runs the hook again, which removes the mdev, keeping its definition.
#[test]
fn virsh_start_runs_the_hook_which_makes_the_mdev_and_release_removes_it() {
    let sim = SimHost::mount_for_test("mixed");
    let (_state, state) = state_dir();
    let defined = vgpuctl(&sim, &state)
        .args(["define", T4, "--type", "T4-2Q", "--uuid", MDEV])
        .output()
        .unwrap();
    assert!(defined.status.success(), "{}", text(&defined.stderr));
    let daemon = Daemon::start(&sim, &state);
    daemon.define("vm1", &mdev_hostdev(MDEV));
    let start = daemon.virsh(&["start", "vm1"]);
    let ok = |action: &str, device: &str| (action.to_owned(), device.to_owned(), "ok".to_owned());
    let audit = hook_audit(&state);
    assert_eq!(
        (
            start.status.success(),
            text(&start.stderr).contains("Mediated host device assignment requires VFIO support"),
            audit.contains(&ok("start", MDEV)),
            audit.contains(&ok("stop", MDEV)),
            mdev_running(&sim),
            state.join("etc/mdevctl.d").join(T4).join(MDEV).exists()
        ),
        (false, true, true, true, false, true),
        "virsh start: {}\naudit: {audit:?}\n{}",
        text(&start.stderr),
        daemon.logs()
    );
}

/// A vGPU the hook cannot make aborts the start with the hook's one line, as libvirt shows it.
#[test]
fn virsh_start_of_a_domain_whose_mdev_is_not_defined_fails_with_the_hooks_line() {
    let sim = SimHost::mount_for_test("mixed");
    let (_state, state) = state_dir();
    let daemon = Daemon::start(&sim, &state);
    daemon.define("vm2", &mdev_hostdev(MDEV));
    let start = daemon.virsh(&["start", "vm2"]);
    let stderr = text(&start.stderr);
    assert_eq!(
        (
            start.status.success(),
            stderr.contains("Hook script execution failed"),
            stderr.contains(&format!(
                "vgpu hook: vm2 prepare: domain vm2: cannot make {MDEV} ready: {MDEV} is neither running nor defined"
            ))
        ),
        (false, true, true),
        "{stderr}"
    );
}
