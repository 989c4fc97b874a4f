//! `vgpuctl` changing a simulated host (`vgpu-sim`) as an operator would: processes, exit
//! codes, JSON, persistence, concurrency, crashes, and the real mdevctl as a peer.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use vgpu_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const FLEX: &str = "0000:4d:00.0";
const UUID: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
const UUID_PEER: &str = "7d0f6a2e-5b3c-4e1d-8a9f-0c1b2d3e4f5a";

struct Host {
    sim: SimHost,
    state: tempfile::TempDir,
}

fn host(profile: &str) -> Host {
    let sim = SimHost::mount_for_test(profile);
    let state = tempfile::tempdir().unwrap();
    Host { sim, state }
}

fn command(host: &Host, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpuctl"));
    cmd.arg("--root")
        .arg(host.sim.root())
        .arg("--state-root")
        .arg(host.state.path());
    cmd.args(args)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT");
    cmd
}

fn vgpuctl(host: &Host, args: &[&str]) -> Output {
    command(host, args).output().unwrap()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn list(host: &Host) -> serde_json::Value {
    json(&vgpuctl(host, &["list", "--json"]))
}

fn gpu<'a>(list: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    list["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == address)
        .unwrap()
}

fn vgpu_ids(host: &Host, address: &str) -> Vec<String> {
    let list = list(host);
    gpu(&list, address)["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn create_json_names_uuid_and_parent() {
    let h = host("t4-legacy");
    let out = vgpuctl(
        &h,
        &["create", T4, "--type", "T4-2Q", "--uuid", UUID, "--json"],
    );
    let value = json(&out);
    assert_eq!(
        (
            out.status.code(),
            &value["id"],
            &value["placement"]["parent"],
            &value["placement"]["type_id"]
        ),
        (
            Some(0),
            &serde_json::json!(UUID),
            &serde_json::json!(T4),
            &serde_json::json!("nvidia-231")
        )
    );
}

#[test]
fn create_then_destroy_leaves_no_vgpu() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["create", T4, "--type", "nvidia-231", "--uuid", UUID]);
    let out = vgpuctl(&h, &["destroy", UUID]);
    assert_eq!(
        (out.status.code(), vgpu_ids(&h, T4)),
        (Some(0), Vec::<String>::new())
    );
}

#[test]
fn create_define_auto_writes_mdevctl_definition() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "create",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--define",
            "--auto",
        ],
    );
    let file = h.state.path().join("etc/mdevctl.d").join(T4).join(UUID);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"mdev_type": "nvidia-231", "start": "auto", "attrs": []})
    );
}

#[test]
fn malformed_type_exits_1_and_changes_nothing() {
    let h = host("t4-legacy");
    let before = list(&h);
    let out = vgpuctl(&h, &["create", T4, "--type", "../x"]);
    assert_eq!((out.status.code(), list(&h)), (Some(1), before));
}

#[test]
fn malformed_type_error_is_clear() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["create", T4, "--type", "../x"]);
    assert_eq!(
        stderr(&out),
        "vgpuctl: error: cannot create a ../x vGPU on 0000:3b:00.0: \"../x\" is not a vGPU type id or name\n"
    );
}

#[test]
fn malformed_uuid_exits_2() {
    let h = host("t4-legacy");
    assert_eq!(
        vgpuctl(&h, &["create", T4, "--type", "nvidia-231", "--uuid", "x"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn unknown_gpu_exits_1_with_hint() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["create", "0000:99:00.0", "--type", "nvidia-231"]);
    assert!(
        out.status.code() == Some(1) && stderr(&out).contains("hint: run `vgpuctl list`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn destroy_of_unknown_id_exits_1_as_not_found() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["destroy", UUID, "--json"]);
    let value = json(&out);
    assert_eq!(
        (out.status.code(), &value["kind"], &value["error"]),
        (
            Some(1),
            &serde_json::json!("not-found"),
            &serde_json::json!(format!(
                "cannot destroy {UUID}: no vGPU matches \"{UUID}\" under {}/sys/bus/mdev/devices",
                h.sim.root().display()
            ))
        )
    );
}

#[test]
fn destroy_of_garbage_id_exits_1() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["destroy", "garbage"]);
    assert_eq!(
        stderr(&out),
        "vgpuctl: error: \"garbage\" is not a vGPU id (a mediated device UUID or a VF's PCI address)\n"
    );
}

#[test]
fn injected_ebusy_is_reported_with_path_and_errno() {
    let h = host("t4-legacy");
    h.sim.fail_next(1, 16, "*/nvidia-231/create");
    let out = vgpuctl(&h, &["create", T4, "--type", "nvidia-231"]);
    let err = stderr(&out);
    assert!(
        err.contains("mdev_supported_types/nvidia-231/create is busy")
            && err.contains("(os error 16)"),
        "{err}"
    );
}

#[test]
fn injected_failure_with_define_leaves_no_definition() {
    let h = host("t4-legacy");
    h.sim.fail_next(1, 5, "*/nvidia-231/create");
    vgpuctl(
        &h,
        &[
            "create",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--define",
        ],
    );
    assert!(
        !h.state
            .path()
            .join("etc/mdevctl.d")
            .join(T4)
            .join(UUID)
            .exists()
    );
}

#[test]
fn audit_log_records_create_with_uid_and_result() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["create", T4, "--type", "nvidia-231"]);
    let log = std::fs::read_to_string(h.state.path().join("var/log/vgpu/audit.jsonl")).unwrap();
    let entry: serde_json::Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            &entry["action"],
            &entry["device"],
            &entry["result"],
            &entry["uid"]
        ),
        (
            &serde_json::json!("create"),
            &serde_json::json!(T4),
            &serde_json::json!("ok"),
            &serde_json::json!(nix::unistd::getuid().as_raw())
        )
    );
}

#[test]
fn sriov_then_plain_vf_create_and_destroy_on_flex() {
    let h = host("flex-sriov");
    vgpuctl(&h, &["sriov", FLEX, "--vfs", "2"]);
    let created = json(&vgpuctl(&h, &["create", FLEX, "--type", "vf", "--json"]));
    let vf = created["id"].as_str().unwrap().to_owned();
    let bound = gpu(&list(&h), FLEX)["vfs"][0]["driver"].clone();
    vgpuctl(&h, &["destroy", &vf]);
    let back = gpu(&list(&h), FLEX)["vfs"][0]["driver"].clone();
    assert_eq!(
        (bound, back),
        (serde_json::json!("vfio-pci"), serde_json::json!("i915"))
    );
}

/// Eight processes at once ask for a T4-8Q (two fit on a T4): exactly two succeed.
#[test]
fn concurrent_creates_allocate_exactly_capacity() {
    let h = host("t4-legacy");
    h.sim.control("latency mdev-create 30").unwrap();
    let children: Vec<Child> = (0..8)
        .map(|_| {
            command(&h, &["create", T4, "--type", "GRID T4-8Q", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let succeeded = outputs.iter().filter(|o| o.status.success()).count();
    let refused = outputs
        .iter()
        .filter(|o| !o.status.success() && json(o)["kind"] == "no-capacity")
        .count();
    assert_eq!((succeeded, refused, vgpu_ids(&h, T4).len()), (2, 6, 2));
}

#[test]
fn concurrent_creates_are_all_audited() {
    let h = host("t4-legacy");
    let children: Vec<Child> = (0..8)
        .map(|_| {
            command(&h, &["create", T4, "--type", "GRID T4-8Q"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        child.wait().unwrap();
    }
    let log = std::fs::read_to_string(h.state.path().join("var/log/vgpu/audit.jsonl")).unwrap();
    let outcomes: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["action"] == "create" && e["result"] != "started")
        .map(|e| e["result"].to_string())
        .collect();
    assert_eq!(
        (
            outcomes.len(),
            outcomes.iter().filter(|r| *r == "\"ok\"").count()
        ),
        (8, 2)
    );
}

/// Polls until `path` exists (the killed command got that far), with a deadline.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigkill_during_create_then_restore_matches_definitions() {
    let h = host("t4-legacy");
    h.sim.control("latency mdev-create 1500").unwrap();
    let mut child = command(
        &h,
        &[
            "create",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--define",
            "--auto",
        ],
    )
    .spawn()
    .unwrap();
    wait_for(&h.state.path().join("etc/mdevctl.d").join(T4).join(UUID));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    h.sim.control("clear").unwrap();
    let out = vgpuctl(&h, &["restore"]);
    assert_eq!(
        (out.status.code(), vgpu_ids(&h, T4)),
        (Some(0), vec![UUID.to_owned()])
    );
}

#[test]
fn sigkill_during_vf_enable_then_restore_matches_definitions() {
    let h = host("flex-sriov");
    h.sim.control("latency sriov-enable 1500").unwrap();
    let mut child = command(&h, &["sriov", FLEX, "--vfs", "4", "--define"])
        .spawn()
        .unwrap();
    wait_for(
        &h.state
            .path()
            .join("etc/vgpu/sriov")
            .join(format!("{FLEX}.json")),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    h.sim.control("clear").unwrap();
    let out = vgpuctl(&h, &["restore"]);
    assert_eq!(
        (out.status.code(), &gpu(&list(&h), FLEX)["sriov"]["num_vfs"]),
        (Some(0), &serde_json::json!(4))
    );
}

#[test]
fn restore_twice_changes_nothing_the_second_time() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "define",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--auto",
        ],
    );
    vgpuctl(&h, &["restore"]);
    let second = json(&vgpuctl(&h, &["restore", "--json"]));
    assert_eq!(second["steps"][0]["outcome"], "unchanged");
}

#[test]
fn restore_carries_on_past_a_corrupt_definition() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "define",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--auto",
        ],
    );
    let bad = h
        .state
        .path()
        .join("etc/mdevctl.d")
        .join(T4)
        .join(UUID_PEER);
    std::fs::write(&bad, "nvidia-231 auto\n").unwrap();
    let out = vgpuctl(&h, &["restore"]);
    assert_eq!(
        (out.status.code(), vgpu_ids(&h, T4)),
        (Some(1), vec![UUID.to_owned()])
    );
}

#[test]
fn restore_names_the_corrupt_definition_file() {
    let h = host("t4-legacy");
    let dir = h.state.path().join("etc/mdevctl.d").join(T4);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(UUID_PEER), "nvidia-231 auto\n").unwrap();
    let report = json(&vgpuctl(&h, &["restore", "--json"]));
    let error = report["steps"][0]["error"].as_str().unwrap();
    assert!(error.contains(&format!("{T4}/{UUID_PEER}")), "{error}");
}

#[test]
fn stop_keeps_definition_and_start_brings_it_back() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "create",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--define",
        ],
    );
    vgpuctl(&h, &["stop", UUID]);
    let stopped = vgpu_ids(&h, T4);
    vgpuctl(&h, &["start", UUID]);
    assert_eq!(
        (stopped, vgpu_ids(&h, T4)),
        (Vec::<String>::new(), vec![UUID.to_owned()])
    );
}

// ----- the real mdevctl as a peer -----

fn mdevctl(h: &Host, args: &[&str]) -> Output {
    vgpu_sim::peer::mdevctl_for_test();
    let etc = h.state.path().join("etc/mdevctl.d");
    vgpu_sim::peer::prepare_mdevctl_store(&etc).unwrap();
    vgpu_sim::peer::mdevctl(Some(h.sim.root()), &etc, args).unwrap()
}

#[test]
fn mdevctl_lists_a_definition_made_by_vgpuctl() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "define",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--auto",
        ],
    );
    let out = mdevctl(&h, &["list", "-d"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{UUID} {T4} nvidia-231 auto\n\n")
    );
}

#[test]
fn vgpuctl_restore_starts_a_definition_made_by_mdevctl() {
    let h = host("t4-legacy");
    let out = mdevctl(
        &h,
        &[
            "define",
            "-u",
            UUID_PEER,
            "-p",
            T4,
            "-t",
            "nvidia-231",
            "--auto",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    vgpuctl(&h, &["restore"]);
    assert_eq!(vgpu_ids(&h, T4), vec![UUID_PEER.to_owned()]);
}

#[test]
fn mdevctl_sees_a_device_created_by_vgpuctl() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["create", T4, "--type", "nvidia-231", "--uuid", UUID]);
    let out = mdevctl(&h, &["list"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{UUID} {T4} nvidia-231 manual\n\n")
    );
}

// ----- provision -----

#[test]
fn provision_count_creates_exactly_that_many() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["provision", T4, "--type", "T4-2Q", "--count", "3"]);
    assert_eq!((out.status.code(), vgpu_ids(&h, T4).len()), (Some(0), 3));
}

#[test]
fn provision_all_fills_every_gpu() {
    let h = host("t4-legacy");
    let report = json(&vgpuctl(
        &h,
        &["provision", "--all", "--type", "GRID T4-8Q", "--json"],
    ));
    let created: Vec<usize> = report
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["created"].as_array().unwrap().len())
        .collect();
    assert_eq!(created, [2, 2]);
}

#[test]
fn provision_beyond_capacity_creates_nothing() {
    let h = host("t4-legacy");
    let out = vgpuctl(
        &h,
        &["provision", T4, "--type", "GRID T4-8Q", "--count", "3"],
    );
    assert!(
        out.status.code() == Some(1) && vgpu_ids(&h, T4).is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn provision_failing_midway_rolls_back_its_vgpus() {
    let h = host("a40-vf-mdev");
    // vGPUs go on VFs in order: the third VF's create fails, the two made before are removed.
    h.sim
        .control("fail-next 1 EIO */0000:41:00.6/mdev_supported_types/nvidia-558/create")
        .unwrap();
    let out = vgpuctl(
        &h,
        &[
            "provision",
            "0000:41:00.0",
            "--type",
            "A40-2Q",
            "--count",
            "4",
            "--json",
        ],
    );
    let report = json(&out);
    assert_eq!(
        (
            out.status.code(),
            report[0]["created"].as_array().unwrap().len(),
            vgpu_ids(&h, "0000:41:00.0").len()
        ),
        (Some(1), 0, 0)
    );
}

#[test]
fn provision_failure_names_path_and_errno() {
    let h = host("a40-vf-mdev");
    h.sim
        .control("fail-next 1 EIO */0000:41:00.6/mdev_supported_types/nvidia-558/create")
        .unwrap();
    let report = json(&vgpuctl(
        &h,
        &[
            "provision",
            "0000:41:00.0",
            "--type",
            "A40-2Q",
            "--count",
            "4",
            "--json",
        ],
    ));
    let error = report[0]["error"].as_str().unwrap();
    assert!(
        error.contains("0000:41:00.6/mdev_supported_types/nvidia-558/create")
            && error.contains("os error 5"),
        "{error}"
    );
}

#[test]
fn provision_enables_vfs_then_binds_them_on_flex() {
    let h = host("flex-sriov");
    let out = vgpuctl(&h, &["provision", FLEX, "--vfs", "2", "--type", "vf"]);
    let list = list(&h);
    let drivers: Vec<&serde_json::Value> = gpu(&list, FLEX)["vfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["driver"])
        .collect();
    assert_eq!(
        (out.status.code(), drivers),
        (
            Some(0),
            vec![
                &serde_json::json!("vfio-pci"),
                &serde_json::json!("vfio-pci")
            ]
        )
    );
}

// ----- definitions are never replaced; bind/unbind stay on what vgpuctl owns -----

#[test]
fn define_of_a_defined_uuid_is_refused_and_keeps_the_definition() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "define",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--auto",
        ],
    );
    let out = vgpuctl(&h, &["define", T4, "--type", "nvidia-222", "--uuid", UUID]);
    let file = h.state.path().join("etc/mdevctl.d").join(T4).join(UUID);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(
        (out.status.code(), &value["mdev_type"], &value["start"]),
        (
            Some(1),
            &serde_json::json!("nvidia-231"),
            &serde_json::json!("auto")
        )
    );
}

#[test]
fn failed_create_of_a_defined_uuid_keeps_the_definition() {
    let h = host("t4-legacy");
    vgpuctl(
        &h,
        &[
            "define",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--auto",
        ],
    );
    h.sim.fail_next(1, 5, "*/create");
    vgpuctl(
        &h,
        &[
            "create",
            T4,
            "--type",
            "nvidia-231",
            "--uuid",
            UUID,
            "--define",
        ],
    );
    assert!(
        h.state
            .path()
            .join("etc/mdevctl.d")
            .join(T4)
            .join(UUID)
            .exists()
    );
}

#[test]
fn create_skips_a_vf_reserved_by_a_definition() {
    let h = host("l40s-vendor-vfio");
    let defined = json(&vgpuctl(
        &h,
        &[
            "define",
            "0000:41:00.0",
            "--type",
            "L40S-8Q",
            "--auto",
            "--json",
        ],
    ));
    let created = json(&vgpuctl(
        &h,
        &["create", "0000:41:00.0", "--type", "L40S-8Q", "--json"],
    ));
    assert_eq!(
        (defined["id"].as_str(), created["id"].as_str()),
        (Some("0000:41:00.4"), Some("0000:41:00.5"))
    );
}

#[test]
fn bind_of_a_non_gpu_is_refused_without_force() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["bind", "0000:3a:00.0"]);
    assert_eq!(
        stderr(&out),
        "vgpuctl: error: cannot bind 0000:3a:00.0 to vfio-pci: 0000:3a:00.0 is not a GPU or a VF of one (force to bind it anyway)\n"
    );
}

#[test]
fn unbind_of_a_device_vgpuctl_did_not_bind_is_refused() {
    let h = host("t4-legacy");
    let out = vgpuctl(&h, &["unbind", "0000:d8:00.0"]);
    let driver = gpu(&list(&h), "0000:d8:00.0")["driver"].clone();
    assert_eq!(
        (out.status.code(), driver),
        (Some(1), serde_json::json!("nvidia"))
    );
}

#[test]
fn bind_then_unbind_returns_the_previous_driver() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["bind", "0000:d8:00.0"]);
    let bound = gpu(&list(&h), "0000:d8:00.0")["driver"].clone();
    vgpuctl(&h, &["unbind", "0000:d8:00.0"]);
    let back = gpu(&list(&h), "0000:d8:00.0")["driver"].clone();
    assert_eq!(
        (bound, back),
        (serde_json::json!("vfio-pci"), serde_json::json!("nvidia"))
    );
}

#[test]
fn plain_vf_destroy_restores_no_driver_when_it_had_none() {
    let h = host("flex-sriov");
    vgpuctl(&h, &["sriov", FLEX, "--vfs", "1", "--autoprobe", "off"]);
    let created = json(&vgpuctl(&h, &["create", FLEX, "--type", "vf", "--json"]));
    vgpuctl(&h, &["destroy", created["id"].as_str().unwrap()]);
    assert_eq!(
        gpu(&list(&h), FLEX)["vfs"][0]["driver"],
        serde_json::Value::Null
    );
}

#[test]
fn provision_naming_a_gpu_twice_is_refused() {
    let h = host("t4-legacy");
    let out = vgpuctl(
        &h,
        &[
            "provision",
            T4,
            "3b:00.0",
            "--type",
            "nvidia-231",
            "--count",
            "2",
        ],
    );
    assert!(
        out.status.code() == Some(1) && stderr(&out).contains("GPU 0000:3b:00.0 is named twice"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn audit_log_records_start_step_and_outcome() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["create", T4, "--type", "nvidia-231", "--uuid", UUID]);
    let log = std::fs::read_to_string(h.state.path().join("var/log/vgpu/audit.jsonl")).unwrap();
    let entries: Vec<(String, String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["device"].as_str().unwrap().to_owned(),
                e["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("create".to_owned(), T4.to_owned(), "started".to_owned()),
            ("start".to_owned(), UUID.to_owned(), "ok".to_owned()),
            ("create".to_owned(), T4.to_owned(), "ok".to_owned()),
        ]
    );
}

#[test]
fn sigkill_inside_nvidia_sequence_then_restore_finishes_it() {
    let h = host("l40s-vendor-vfio");
    const L40S: &str = "0000:41:00.0";
    vgpuctl(&h, &["sriov", L40S, "--vfs", "0"]);
    h.sim.control("latency sriov-enable 1500").unwrap();
    let mut child = command(&h, &["sriov", L40S, "--vfs", "32", "--define"])
        .spawn()
        .unwrap();
    // Killed while the count is being written, with the PF on pci-pf-stub.
    let driver = h
        .sim
        .root()
        .join("sys/bus/pci/devices")
        .join(L40S)
        .join("driver");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_link(&driver)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_os_string()))
        != Some("pci-pf-stub".into())
    {
        assert!(
            Instant::now() < deadline,
            "the PF never reached pci-pf-stub"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    h.sim.control("clear").unwrap();
    let out = vgpuctl(&h, &["restore"]);
    let list = list(&h);
    let gpu = gpu(&list, L40S);
    assert_eq!(
        (
            out.status.code(),
            &gpu["driver"],
            &gpu["sriov"]["num_vfs"],
            gpu["vfs"].as_array().unwrap().len()
        ),
        (
            Some(0),
            &serde_json::json!("nvidia"),
            &serde_json::json!(32),
            32
        )
    );
}

// ----- undo of what a failed command changed besides the device itself -----

#[test]
fn failed_sriov_puts_autoprobe_and_definition_back() {
    let h = host("flex-sriov");
    h.sim.fail_next(1, 5, "*/sriov_numvfs");
    let out = vgpuctl(
        &h,
        &[
            "sriov",
            FLEX,
            "--vfs",
            "2",
            "--autoprobe",
            "off",
            "--define",
        ],
    );
    let list = list(&h);
    let sriov = &gpu(&list, FLEX)["sriov"];
    let defined = h
        .state
        .path()
        .join("etc/vgpu/sriov")
        .join(format!("{FLEX}.json"))
        .exists();
    assert_eq!(
        (
            out.status.code(),
            &sriov["drivers_autoprobe"],
            &sriov["num_vfs"],
            defined
        ),
        (
            Some(1),
            &serde_json::json!(true),
            &serde_json::json!(0),
            false
        )
    );
}

#[test]
fn provision_failing_midway_rolls_back_its_vf_change() {
    let h = host("flex-sriov");
    // The second VF's bind fails: the first VF is given back and the VFs are disabled again.
    h.sim.fail_next(1, 5, "*/0000:4d:00.2/driver_override");
    let out = vgpuctl(
        &h,
        &[
            "provision",
            FLEX,
            "--vfs",
            "2",
            "--type",
            "vf",
            "--count",
            "2",
        ],
    );
    let list = list(&h);
    assert_eq!(
        (
            out.status.code(),
            &gpu(&list, FLEX)["sriov"]["num_vfs"],
            gpu(&list, FLEX)["vfs"].as_array().unwrap().len()
        ),
        (Some(1), &serde_json::json!(0), 0)
    );
}

#[test]
fn failed_bind_with_define_leaves_no_binding_definition() {
    let h = host("t4-legacy");
    h.sim.fail_next(1, 19, "*drivers_probe");
    let out = vgpuctl(&h, &["bind", "0000:d8:00.0", "--define", "--auto"]);
    let defined = h
        .state
        .path()
        .join("etc/vgpu/bindings/0000:d8:00.0.json")
        .exists();
    let driver = gpu(&list(&h), "0000:d8:00.0")["driver"].clone();
    assert_eq!(
        (out.status.code(), defined, driver),
        (Some(1), false, serde_json::json!("nvidia"))
    );
}

#[test]
fn restore_removes_an_mdev_whose_attribute_is_refused() {
    let h = host("t4-legacy");
    let dir = h.state.path().join("etc/mdevctl.d").join(T4);
    std::fs::create_dir_all(&dir).unwrap();
    let definition =
        r#"{"mdev_type": "nvidia-231", "start": "auto", "attrs": [{"no_such_attr": "1"}]}"#;
    std::fs::write(dir.join(UUID), definition).unwrap();
    let report = json(&vgpuctl(&h, &["restore", "--json"]));
    let error = report["steps"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        report["steps"][0]["outcome"] == "failed"
            && error.contains(&format!("{UUID}/no_such_attr"))
            && vgpu_ids(&h, T4).is_empty(),
        "{report}"
    );
}

const L40S: &str = "0000:41:00.0";

/// `define --auto` holds one of the L40S's two L40S-24Q places: `provision --count 2` must not
/// give it away (it is refused and makes nothing).
#[test]
fn provision_count_past_a_definitions_room_fails_and_makes_nothing() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let out = vgpuctl(
        &h,
        &[
            "provision",
            L40S,
            "--type",
            "L40S-24Q",
            "--count",
            "2",
            "--json",
        ],
    );
    let report = json(&out);
    assert_eq!(
        (
            out.status.code(),
            &report[0]["kind"],
            &report[0]["created"],
            vgpu_ids(&h, L40S)
        ),
        (
            Some(1),
            &serde_json::json!("no-capacity"),
            &serde_json::json!([]),
            Vec::<String>::new()
        )
    );
}

/// Provisioning around a definition fills the other VF; `restore` then starts the defined
/// vGPU on the VF it reserved.
#[test]
fn provision_then_restore_starts_the_defined_vgpu_on_its_reserved_vf() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let provisioned = json(&vgpuctl(
        &h,
        &["provision", L40S, "--type", "L40S-24Q", "--json"],
    ));
    let restored = json(&vgpuctl(&h, &["restore", "--json"]));
    assert_eq!(
        (
            &provisioned[0]["created"],
            &restored["steps"],
            vgpu_ids(&h, L40S)
        ),
        (
            &serde_json::json!(["0000:41:00.5"]),
            &serde_json::json!([{
                "action": "vf-vgpu",
                "device": "0000:41:00.4",
                "outcome": "created",
                "error": null,
                "kind": null
            }]),
            vec!["0000:41:00.4".to_owned(), "0000:41:00.5".to_owned()]
        )
    );
}

/// A guest's QEMU holds the mdev's group node open: `destroy` names it and changes nothing;
/// `--force` writes the removal, which the kernel (the simulator) holds until QEMU exits.
#[test]
fn destroy_of_a_vgpu_open_by_a_process_names_it_until_forced() {
    let h = host("t4-legacy");
    vgpuctl(&h, &["create", T4, "--type", "T4-2Q", "--uuid", UUID]);
    let group = std::fs::read_link(
        h.sim
            .root()
            .join(format!("sys/bus/mdev/devices/{UUID}/iommu_group")),
    )
    .unwrap();
    let node = format!("/dev/vfio/{}", group.file_name().unwrap().to_string_lossy());
    h.sim.hold(4242, "qemu-system-x86", &node).unwrap();
    let refused = vgpuctl(&h, &["destroy", UUID, "--json"]);
    let kept = vgpu_ids(&h, T4);
    let forced = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            h.sim.drop_process(4242).unwrap();
        });
        vgpuctl(&h, &["destroy", UUID, "--force"])
    });
    assert_eq!(
        (
            refused.status.code(),
            json(&refused),
            kept,
            forced.status.code(),
            vgpu_ids(&h, T4)
        ),
        (
            Some(1),
            serde_json::json!({
                "error": format!(
                    "cannot destroy {UUID}: {UUID} is open by process 4242 (qemu-system-x86) \
                     through {node} (force to remove it anyway)"
                ),
                "kind": "busy"
            }),
            vec![UUID.to_owned()],
            Some(0),
            Vec::<String>::new()
        )
    );
}
