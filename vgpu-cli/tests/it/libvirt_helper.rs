//! `vgpuctl` and `vgpuctl-libvirt`: `vgpuctl` does not link libvirt, hands the commands that
//! need libvirt to the `vgpuctl-libvirt` beside it, and asks it what libvirt knows for the
//! others.

use std::path::Path;
use std::process::{Command, Output};

use vgpu_testing::{FakeHost, scenarios};

use crate::common;

fn vgpuctl() -> &'static Path {
    common::vgpuctl_exe()
}

fn helper() -> &'static Path {
    common::helper()
}

/// The shared objects the dynamic loader maps for `exe`, as `ldd` lists them (the loader
/// prints them and exits when `LD_TRACE_LOADED_OBJECTS` is set).
fn loaded_objects(exe: &Path) -> String {
    let out = Command::new(exe)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn run(exe: &Path, root: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_CONNECT")
        .output()
        .unwrap()
}

fn every_interface() -> FakeHost {
    let host = FakeHost::new().unwrap();
    scenarios::every_interface(&host).unwrap();
    host
}

#[test]
fn vgpuctl_loads_libudev_but_not_libvirt() {
    let objects = loaded_objects(vgpuctl());
    assert_eq!(
        (
            objects.contains("libudev.so.1"),
            objects.contains("libvirt.so")
        ),
        (true, false),
        "{objects}"
    );
}

#[test]
fn helper_loads_libvirt() {
    assert!(
        loaded_objects(helper()).contains("libvirt.so.0"),
        "{}",
        loaded_objects(helper())
    );
}

#[test]
fn owners_through_vgpuctl_matches_the_helper_run_directly() {
    let host = every_interface();
    let args = ["--json", "--connect", "test:///default", "owners"];
    let through = run(vgpuctl(), host.root(), &args);
    let direct = run(helper(), host.root(), &args);
    assert_eq!(
        (through.status.code(), &through.stdout, &through.stderr),
        (Some(0), &direct.stdout, &direct.stderr)
    );
}

#[test]
fn owners_json_through_vgpuctl_lists_every_vgpu_unheld() {
    let host = every_interface();
    let out = run(
        vgpuctl(),
        host.root(),
        &["--json", "--connect", "test:///default", "owners"],
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let unheld: Vec<(&str, usize)> = value["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap(),
                v["holders"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        (out.status.code(), unheld),
        (
            Some(0),
            vec![
                ("1f3a5b7c-0000-4000-8000-000000000001", 0),
                ("1f3a5b7c-0000-4000-8000-000000000002", 0),
                ("a4000000-0000-4000-8000-000000000000", 0),
                ("0000:81:00.4", 0),
            ]
        )
    );
}

#[test]
fn libvirt_command_without_helper_exits_1_naming_it_with_hint() {
    let host = every_interface();
    let (alone, exe) = common::vgpuctl_alone();
    let out = run(&exe, host.root(), &["owners"]);
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr)),
        (
            Some(1),
            format!(
                "vgpuctl: error: cannot run {}: No such file or directory (os error 2)\n\
                 hint: vgpuctl-libvirt, which runs the commands that talk to libvirt, belongs \
                 beside vgpuctl (`make install` puts both in BINDIR)\n",
                alone.path().join("vgpuctl-libvirt").display()
            )
            .into()
        )
    );
}

/// Without a loadable libvirt library the dynamic loader stops `vgpuctl-libvirt` (exit 127).
/// `vgpuctl` says what is missing and what installs it, and exits 1. An empty
/// `libvirt.so.0` first on `LD_LIBRARY_PATH` is what the loader refuses here.
#[test]
fn libvirt_command_without_libvirt_library_says_what_to_install() {
    let host = every_interface();
    let lib = tempfile::tempdir().unwrap();
    std::fs::write(lib.path().join("libvirt.so.0"), b"").unwrap();

    let out = Command::new(vgpuctl())
        .arg("--root")
        .arg(host.root())
        .args(["detach", "vm1", "0000:81:00.4"])
        .env("LD_LIBRARY_PATH", lib.path())
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_CONNECT")
        .output()
        .unwrap();

    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr)),
        (
            Some(1),
            format!(
                "vgpuctl: error: libvirt's client library (libvirt.so.0) is not installed or \
                 cannot be loaded: {}: error while loading shared libraries: {}: file too short\n\
                 hint: install libvirt's client library (Debian: `apt-get install libvirt0`); \
                 only attach, detach, owners and the holders of a device need it\n",
                helper().display(),
                lib.path().join("libvirt.so.0").display()
            )
            .into()
        )
    );
}

#[test]
fn libvirt_command_without_helper_json_error_names_it() {
    let host = every_interface();
    let (alone, exe) = common::vgpuctl_alone();
    let out = run(
        &exe,
        host.root(),
        &["--json", "detach", "vm1", "0000:81:00.4"],
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (out.status.code(), value),
        (
            Some(1),
            serde_json::json!({
                "error": format!(
                    "cannot run {}: No such file or directory (os error 2)",
                    alone.path().join("vgpuctl-libvirt").display()
                ),
                "kind": "host-fault",
            })
        )
    );
}

/// A desired-state file that asks nothing of any GPU of the host.
fn empty_plan(dir: &Path) -> String {
    let file = dir.join("host.toml");
    std::fs::write(
        &file,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"no such GPU\"\noptional = true\nvfs = 1\n",
    )
    .unwrap();
    file.to_str().unwrap().to_owned()
}

#[test]
fn plan_through_vgpuctl_asks_the_helper_what_libvirt_knows() {
    let host = every_interface();
    let dir = tempfile::tempdir().unwrap();
    let file = empty_plan(dir.path());
    let args = ["--connect", "test:///default", "plan", "-f", &file];
    let through = run(vgpuctl(), host.root(), &args);
    let direct = run(helper(), host.root(), &args);
    assert_eq!(
        (through.status.code(), &through.stdout, &through.stderr),
        (Some(0), &direct.stdout, &direct.stderr)
    );
}

/// `plan` uses libvirt only to learn which domains hold vGPUs: without the helper it plans,
/// saying once what it could not learn.
#[test]
fn plan_without_helper_runs_and_says_once_that_holders_are_unknown() {
    let host = every_interface();
    let (alone, exe) = common::vgpuctl_alone();
    let file = empty_plan(alone.path());
    let out = run(
        &exe,
        host.root(),
        &["--connect", "test:///default", "plan", "-f", &file],
    );
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr)),
        (
            Some(0),
            format!(
                "vgpuctl: warning: libvirt at test:///default did not answer, so vGPUs its \
                 domains hold are not known: cannot run {}: No such file or directory (os \
                 error 2)\n",
                alone.path().join("vgpuctl-libvirt").display()
            )
            .into()
        )
    );
}

#[test]
fn local_command_without_helper_runs() {
    let host = every_interface();
    let (_alone, exe) = common::vgpuctl_alone();
    let without = run(&exe, host.root(), &["--json", "list"]);
    let with = run(vgpuctl(), host.root(), &["--json", "list"]);
    assert_eq!(
        (without.status.code(), &without.stdout),
        (Some(0), &with.stdout)
    );
}

#[test]
fn destroy_force_without_helper_is_run_by_vgpuctl() {
    let host = every_interface();
    let (_alone, exe) = common::vgpuctl_alone();
    let out = run(&exe, host.root(), &["destroy", "--force", "not-a-vgpu"]);
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr)),
        (
            Some(1),
            "vgpuctl: error: \"not-a-vgpu\" is not a vGPU id (a mediated device UUID or a VF's \
             PCI address)\n"
                .into()
        )
    );
}

#[test]
fn run_local_owners_is_refused_naming_the_helper() {
    use clap::Parser as _;
    let cli = vgpu_cli::Cli::try_parse_from(["vgpuctl", "owners"]).unwrap();
    let err = vgpu_cli::run_local(&cli, &mut Vec::new(), vgpu_cli::libvirt_facts::from_helper)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "this command talks to libvirt: vgpuctl-libvirt runs it"
    );
}
