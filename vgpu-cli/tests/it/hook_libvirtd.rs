//! The hook under a real system `libvirtd` (Debian's `libvirt-daemon`), started here as root.
//!
//! libvirt reads hooks from `/etc/libvirt/hooks`, a path fixed when it is built, so the daemon
//! (`vgpu_sim::libvirtd`) runs in a private mount namespace (`unshare -m`) where a temporary
//! directory is bind-mounted over `/etc/libvirt` (its `libvirtd.conf` and `qemu.conf`), the
//! directory the hook is installed in over `/etc/libvirt/hooks`, and others over
//! `/run/libvirt`, `/var/lib/libvirt`, `/var/log/libvirt` and `/var/cache/libvirt`. Its socket
//! and pid file are in the temporary directory (`unix_sock_dir`, `--pid-file`), reached from
//! outside as `qemu:///system?socket=…`. The simulated host is mounted before the namespace is
//! made, so the hook libvirt runs sees it. Nothing here skips: a host where libvirtd cannot run
//! fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use vgpu_sim::SimHost;
use vgpu_sim::libvirtd::Libvirtd;

use crate::common::{NS, mdev_hostdev};

const T4: &str = "0000:3b:00.0";
const MDEV: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
/// The UUID of the domain migrated offline.
const VM3: &str = "00000000-0000-4000-8000-000000000003";

/// A system libvirtd in its own mount namespace with the hook installed by `vgpuctl hook
/// install` for `sim` and `state`, stopped on drop; the hooks directory lives as long.
fn start(sim: &SimHost, state: &Path) -> (Libvirtd, tempfile::TempDir) {
    start_as(sim, state, "00000000-0000-4000-8000-0000000000d1")
}

/// [`start`], the daemon reporting `host_uuid`.
fn start_as(sim: &SimHost, state: &Path, host_uuid: &str) -> (Libvirtd, tempfile::TempDir) {
    let daemon = Libvirtd::builder("qemu")
        .config("qemu.conf", "stdio_handler = \"file\"\n")
        .host_uuid(host_uuid);
    if let Some(why) = daemon.missing() {
        panic!("this test starts a system libvirtd: {why} (scripts/install-deps.sh)");
    }
    let hooks = tempfile::tempdir().unwrap();
    let install = vgpuctl(sim, state)
        .args(["hook", "install", "--dir"])
        .arg(hooks.path())
        .output()
        .unwrap();
    assert!(install.status.success(), "{}", text(&install.stderr));
    let daemon = daemon
        .hooks(hooks.path())
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    (daemon, hooks)
}

/// Defines a domain named `name` with `devices`.
fn define(daemon: &Libvirtd, name: &str, devices: &str) {
    define_with(daemon, name, "", devices);
}

/// [`define`], with `metadata` (a `<metadata>` element, or nothing).
fn define_with(daemon: &Libvirtd, name: &str, metadata: &str, devices: &str) {
    let mut xml = tempfile::NamedTempFile::new().unwrap();
    write!(
        xml,
        "<domain type='qemu'><name>{name}</name>{metadata}<memory unit='MiB'>64</memory>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os>\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{devices}</devices>\
         </domain>"
    )
    .unwrap();
    let out = daemon.virsh(&["define", xml.path().to_str().unwrap()]);
    assert!(out.status.success(), "virsh define: {}", text(&out.stderr));
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
    let (daemon, _hooks) = start(&sim, &state);
    define(&daemon, "vm1", &mdev_hostdev(MDEV));
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
    let (daemon, _hooks) = start(&sim, &state);
    define(&daemon, "vm2", &mdev_hostdev(MDEV));
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

/// An offline migration (`virsh migrate --offline --persistent`) between two system libvirtd.
/// The destination's libvirt runs the hook's `migrate begin` with the domain XML, and defines
/// the domain with the XML the hook printed: the mdev UUID is held there, so the hook made
/// another. The destination's `virsh start` runs `prepare`, which finds that mdev the domain's
/// own; QEMU cannot take it here (no VFIO), and `release` gives it back. A domain whose vGPU
/// type is unknown is refused with the hook's line, and the destination defines nothing.
#[test]
fn offline_migration_defines_the_domain_with_the_hooks_xml_and_its_start_gives_the_mdev_back() {
    let dest = SimHost::mount_for_test("mixed");
    let (_state, state) = state_dir();
    let held = vgpuctl(&dest, &state)
        .args(["create", T4, "--type", "T4-2Q", "--uuid", MDEV])
        .output()
        .unwrap();
    assert!(held.status.success(), "{}", text(&held.stderr));
    let (target, _hooks) = start_as(&dest, &state, "00000000-0000-4000-8000-0000000000d2");
    let source = Libvirtd::builder("qemu")
        .host_uuid("00000000-0000-4000-8000-0000000000d3")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let metadata = format!(
        "<uuid>{VM3}</uuid><metadata><vgpu:vgpu xmlns:vgpu=\"{NS}\">\
         <device id=\"{MDEV}\" type=\"GRID T4-2Q\"/></vgpu:vgpu></metadata>"
    );
    define_with(&source, "vm3", &metadata, &mdev_hostdev(MDEV));
    let migrate = source.virsh(&["migrate", "--offline", "--persistent", "vm3", target.uri()]);
    assert!(
        migrate.status.success(),
        "virsh migrate: {}\n{}",
        text(&migrate.stderr),
        target.logs()
    );
    let record = format!("{}", state.join("run/vgpu/hook").join(VM3).display());
    let audit = hook_audit(&state);
    let made = audit
        .iter()
        .find(|(action, _, _)| action == "start")
        .map(|(_, device, _)| device.clone())
        .unwrap_or_default();
    let line = |action: &str, device: &str| (action.to_owned(), device.to_owned(), "ok".to_owned());
    let begun = |action: &str| (action.to_owned(), "vm3".to_owned(), "started".to_owned());
    assert_eq!(
        audit,
        [
            begun("hook-migrate"),
            line("record", &record),
            line("start", &made),
            line("hook-migrate", "vm3"),
        ]
    );
    let xml = text(&target.virsh(&["dumpxml", "vm3"]).stdout);
    assert!(
        made != MDEV
            && xml.contains(&format!("<address uuid='{made}'/>"))
            && xml.contains(&format!("<device id=\"{made}\" type=\"GRID T4-2Q\"/>"))
            && !xml.contains(MDEV),
        "{xml}"
    );

    let start = target.virsh(&["start", "vm3"]);
    assert_eq!(
        (
            start.status.success(),
            text(&start.stderr).contains("Mediated host device assignment requires VFIO support"),
        ),
        (false, true),
        "{}",
        text(&start.stderr)
    );
    assert_eq!(
        hook_audit(&state)[4..],
        [
            begun("hook-prepare"),
            line("hook-prepare", "vm3"),
            begun("hook-release"),
            line("stop", &made),
            line("record", &record),
            line("hook-release", "vm3"),
        ]
    );
    let mdevs = dest.root().join("sys/bus/mdev/devices");
    assert_eq!(
        (
            mdevs.join(&made).exists(),
            mdevs.join(MDEV).exists(),
            Path::new(&record).exists()
        ),
        (false, true, false)
    );

    let other = "9a3e5c71-2b4d-4f60-8e1a-3c5b7d9f0a21";
    define_with(&source, "vm4", "", &mdev_hostdev(other));
    let refused = source.virsh(&["migrate", "--offline", "--persistent", "vm4", target.uri()]);
    let why = text(&refused.stderr);
    assert_eq!(
        (
            refused.status.code(),
            why.contains(&format!(
                "vgpu hook: vm4 migrate: domain vm4: cannot make {other} ready: the vGPU type of \
                 {other} is unknown here"
            )) && why.contains(
                "(hint: name a type in the domain's metadata, map its Nova flavor in hook.toml, \
                 or give it with `vgpuctl attach` on the source, which records it)"
            ),
            text(&target.virsh(&["list", "--all", "--name"]).stdout).trim(),
            mdevs.join(other).exists()
        ),
        (Some(1), true, "vm3", false),
        "{why}"
    );
}
