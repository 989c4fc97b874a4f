//! `make install` and `contrib/udev/60-vgpu.rules`: the installed rule and unit name the
//! installed vgpuctl, and the host's own `systemd-udevd` (started for the test when none runs)
//! runs `vgpuctl restore --device %k` from the rule for a real PCI function of this machine.
//! The rule is installed under /run/udev/rules.d matching only that function, the command's
//! state (lock, audit log) goes to a temporary directory, and the event is a synthetic `bind`
//! (`udevadm trigger --action=bind`), which binds nothing: no other rule acts on it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use vgpu_testing::udevd::{Udevd, first_pci_function, run};
use vgpu_testing::wait_for;

use crate::common;

/// The workspace root, where the Makefile is.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `make install` of this test's vgpuctl with `vars`.
fn make_install(vars: &[String]) {
    let output = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(workspace())
        .arg("install")
        .arg(format!("VGPUCTL_BUILD={}", common::vgpuctl_exe().display()))
        .args(vars)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "make install: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `make install DESTDIR=<dir> PREFIX=/opt/vgpu`, with the default rule and unit directories.
fn installed_in(dir: &Path) {
    make_install(&[
        format!("DESTDIR={}", dir.display()),
        "PREFIX=/opt/vgpu".to_owned(),
    ]);
}

/// The value of every `KEY+="..."` (or `KEY="..."`) of `key` in a rule file's text.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(", "))
        .filter_map(|part| {
            let rest = part.strip_prefix(key)?;
            let rest = rest.strip_prefix("+=").or_else(|| rest.strip_prefix('='))?;
            rest.strip_prefix('"')?.strip_suffix('"')
        })
        .collect()
}

#[test]
fn make_install_rule_runs_installed_vgpuctl_restore_device() {
    let dir = tempfile::tempdir().unwrap();
    installed_in(dir.path());
    let rule = std::fs::read_to_string(dir.path().join("etc/udev/rules.d/60-vgpu.rules")).unwrap();
    assert_eq!(
        values(&rule, "RUN"),
        ["/opt/vgpu/bin/vgpuctl restore --device %k"; 3]
    );
}

#[test]
fn make_install_rule_names_an_executable_that_exists() {
    let dir = tempfile::tempdir().unwrap();
    installed_in(dir.path());
    let rule = std::fs::read_to_string(dir.path().join("etc/udev/rules.d/60-vgpu.rules")).unwrap();
    let programs: Vec<&str> = values(&rule, "RUN")
        .iter()
        .filter_map(|run| run.split(' ').next())
        .collect();
    let installed = dir
        .path()
        .join(programs[0].trim_start_matches('/'))
        .metadata()
        .unwrap();
    assert_eq!(
        (
            programs,
            installed.is_file(),
            installed.permissions().mode() & 0o777
        ),
        (vec!["/opt/vgpu/bin/vgpuctl"; 3], true, 0o755)
    );
}

#[test]
fn make_install_puts_vgpuctl_libvirt_beside_vgpuctl() {
    let dir = tempfile::tempdir().unwrap();
    installed_in(dir.path());
    let installed = dir.path().join("opt/vgpu/bin/vgpuctl-libvirt");
    let copied = std::fs::read(&installed).unwrap();
    assert_eq!(
        (
            copied == std::fs::read(common::helper()).unwrap(),
            installed.metadata().unwrap().permissions().mode() & 0o777
        ),
        (true, 0o755)
    );
}

#[test]
fn make_install_unit_runs_the_same_vgpuctl() {
    let dir = tempfile::tempdir().unwrap();
    installed_in(dir.path());
    let unit = std::fs::read_to_string(dir.path().join("etc/systemd/system/vgpu-restore.service"))
        .unwrap();
    let lines: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("ExecStart=") || l.starts_with("ConditionPathExists="))
        .collect();
    assert_eq!(
        lines,
        [
            "ConditionPathExists=/opt/vgpu/bin/vgpuctl",
            "ExecStart=/opt/vgpu/bin/vgpuctl restore"
        ]
    );
}

/// Removes the test rule and has udev read its rules again, however the test ends.
struct RuntimeRule {
    path: PathBuf,
}

impl Drop for RuntimeRule {
    fn drop(&mut self) {
        if let Err(err) = std::fs::remove_file(&self.path) {
            assert!(
                std::thread::panicking(),
                "cannot remove {}: {err}",
                self.path.display()
            );
        }
        run("udevadm", &["control", "--reload"]);
    }
}

/// The audit log's entries, or none while it does not exist.
fn audit(path: &Path) -> Vec<vgpu_core::state::AuditEntry> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => panic!("{}: {err}", path.display()),
    }
}

#[test]
fn udev_runs_restore_device_from_the_installed_rule() {
    let Some(udevd) = Udevd::ensure() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (prefix, rules, units, state) = (
        dir.path().join("usr"),
        dir.path().join("rules"),
        dir.path().join("units"),
        dir.path().join("state"),
    );
    make_install(&[
        format!("PREFIX={}", prefix.display()),
        format!("UDEVRULESDIR={}", rules.display()),
        format!("SYSTEMDUNITDIR={}", units.display()),
    ]);
    let device = first_pci_function();
    // The installed rule, matching this machine's function instead of GPUs, with the command's
    // state in the temporary directory.
    let vgpuctl = prefix.join("bin/vgpuctl");
    let installed = std::fs::read_to_string(rules.join("60-vgpu.rules")).unwrap();
    let class_match = "ATTR{class}!=\"0x03*|0x12*\", GOTO=\"vgpu_end\"";
    assert!(installed.contains(class_match), "{installed}");
    let test_rule = installed
        .replace(
            class_match,
            &format!("KERNEL!=\"{device}\", GOTO=\"vgpu_end\""),
        )
        .replace(
            &format!("{} restore", vgpuctl.display()),
            &format!(
                "{} --state-root {} restore",
                vgpuctl.display(),
                state.display()
            ),
        );
    let rule = RuntimeRule {
        path: PathBuf::from(format!(
            "/run/udev/rules.d/60-vgpu-test-{}.rules",
            std::process::id()
        )),
    };
    std::fs::create_dir_all("/run/udev/rules.d").unwrap();
    std::fs::write(&rule.path, test_rule).unwrap();
    udevd.reload();
    run(
        "udevadm",
        &[
            "trigger",
            "--settle",
            "--action=bind",
            &format!("/sys/bus/pci/devices/{device}"),
        ],
    );
    let log = state.join("var/log/vgpu/audit.jsonl");
    let done = |e: &vgpu_core::state::AuditEntry| e.action == "restore" && e.result != "started";
    let finished = wait_for(Duration::from_secs(30), || audit(&log).iter().any(done));
    drop(rule);
    assert!(finished, "no restore in {}", log.display());
    let entries: Vec<(String, String, String, String)> = audit(&log)
        .into_iter()
        .map(|e| (e.command, e.action, e.device, e.result))
        .collect();
    let command = format!(
        "{} --state-root {} restore --device {device}",
        vgpuctl.display(),
        state.display()
    );
    assert_eq!(
        entries,
        [
            (
                command.clone(),
                "restore".to_owned(),
                device.clone(),
                "started".to_owned()
            ),
            (
                command,
                "restore".to_owned(),
                device.clone(),
                "ok".to_owned()
            )
        ]
    );
}
