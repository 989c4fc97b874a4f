//! `vgpuctl` as a process: exit codes and error messages.

use std::process::{Command, Output};

use vgpu_testing::{FakeHost, PciSpec, addr, scenarios};

fn vgpuctl(root: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("VGPU_ROOT")
        .output()
        .expect("vgpuctl runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn every_interface() -> FakeHost {
    let host = FakeHost::new().unwrap();
    scenarios::every_interface(&host).unwrap();
    host
}

#[test]
fn list_on_every_interface_host_exits_0() {
    assert_eq!(
        vgpuctl(every_interface().root(), &["list"]).status.code(),
        Some(0)
    );
}

#[test]
fn unknown_subcommand_exits_2() {
    assert_eq!(
        vgpuctl(every_interface().root(), &["frobnicate"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn unknown_gpu_exits_1() {
    assert_eq!(
        vgpuctl(every_interface().root(), &["types", "0000:99:00.0"])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn unknown_gpu_error_names_it_once_with_hint() {
    let host = every_interface();
    let out = vgpuctl(host.root(), &["types", "0000:99:00.0"]);
    let expected = format!(
        "vgpuctl: error: no GPU matches \"0000:99:00.0\" under {}/sys/bus/pci/devices\nhint: run `vgpuctl list` to see the GPUs on this host\n",
        host.root().display()
    );
    assert_eq!(stderr(&out), expected);
}

#[test]
fn missing_root_exits_1_with_errno() {
    let dir = tempfile::tempdir().unwrap();
    let out = vgpuctl(&dir.path().join("absent"), &["list"]);
    assert!(
        out.status.code() == Some(1)
            && stderr(&out).contains("No such file or directory (os error 2)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_gpu_sharing_group_with_nic_exits_3() {
    let host = every_interface();
    host.pci(
        &PciSpec::new(addr("0000:3b:00.1"), 0x8086, 0x1572, 0x020000)
            .driver("i40e")
            .group(12),
    )
    .unwrap();
    host.remove("sys/devices/pci0000:3b/0000:3b:00.1").unwrap();
    host.pci(
        &PciSpec::new(addr("0000:3c:00.0"), 0x8086, 0x1572, 0x020000)
            .driver("i40e")
            .group(12),
    )
    .unwrap();
    assert_eq!(
        vgpuctl(host.root(), &["check", "0000:3b:00.0"])
            .status
            .code(),
        Some(3)
    );
}

#[test]
fn check_host_with_shared_group_exits_0_with_warning() {
    let host = every_interface();
    host.pci(
        &PciSpec::new(addr("0000:3c:00.0"), 0x8086, 0x1572, 0x020000)
            .driver("i40e")
            .group(12),
    )
    .unwrap();
    assert_eq!(vgpuctl(host.root(), &["check"]).status.code(), Some(0));
}

#[test]
fn check_isolated_gpu_exits_0() {
    assert_eq!(
        vgpuctl(every_interface().root(), &["check", "0000:81:00.0"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn json_flag_prints_parseable_json() {
    let out = vgpuctl(every_interface().root(), &["list", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["gpus"][0]["address"], "0000:00:02.0");
}

#[test]
fn json_error_is_printed_as_json_on_stdout() {
    let out = vgpuctl(
        every_interface().root(),
        &["types", "0000:99:00.0", "--json"],
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (
            out.status.code(),
            value["error"]
                .as_str()
                .map(|e| e.starts_with("no GPU matches \"0000:99:00.0\"")),
            &value["kind"]
        ),
        (Some(1), Some(true), &serde_json::json!("not-found"))
    );
}

/// With --json, a usage error is JSON on stdout as every other error is, and still exits 2.
#[test]
fn usage_error_with_json_is_json_on_stdout() {
    let out = vgpuctl(
        every_interface().root(),
        &["--json", "create", "0000:3b:00.0"],
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            out.status.code(),
            value["kind"].clone(),
            value["error"]
                .as_str()
                .unwrap()
                .starts_with("the following required arguments were not provided")
        ),
        (Some(2), serde_json::json!("usage"), true),
        "{value}"
    );
}

/// A command's `--help` lists its own options, then the global ones under their heading.
#[test]
fn help_lists_own_options_before_global_ones() {
    let out = vgpuctl(every_interface().root(), &["create", "--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let own = text.find("--type <TYPE>").unwrap();
    let heading = text.find("Global options:").unwrap();
    let root = text.find("--root <DIR>").unwrap();
    assert!(own < heading && heading < root, "{text}");
}

/// A simulated host given as `--root` alone: its file system takes no state files (ENOSYS),
/// and the error says to give `--state-root`.
#[test]
fn a_change_on_a_simulated_root_without_state_root_names_state_root() {
    let sim = vgpu_sim::SimHost::mount_for_test("t4-legacy");
    let out = Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
        .arg("--root")
        .arg(sim.root())
        .args(["create", "0000:3b:00.0", "--type", "T4-2Q"])
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT")
        .output()
        .expect("vgpuctl runs");
    let err = stderr(&out);
    assert_eq!(
        (
            out.status.code(),
            err.contains("Function not implemented"),
            err.contains("hint: this root takes no files of vgpu's own"),
            err.contains("give --state-root DIR"),
        ),
        (Some(1), true, true, true),
        "{err}"
    );
}
