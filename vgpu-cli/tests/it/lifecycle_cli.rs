//! `vgpuctl` changing a simulated host (`vgpu-sim`) as an operator would: processes, exit
//! codes, JSON, persistence, concurrency, crashes, and the real mdevctl as a peer.

use crate::common;

use std::process::{Child, Output, Stdio};

use crate::common::*;

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

/// A GPU name that names no GPU (a short address no GPU has, or no address at all) is a GPU
/// not found for every command that takes a GPU, as `types` says it: `create`, `define`,
/// `sriov` and `sched` resolve it first (`resolve_gpu`).
#[test]
fn unknown_gpu_name_is_the_same_gpu_not_found_for_every_command() {
    let h = host("t4-legacy");
    for name in ["99:00.0", "gpu0"] {
        let not_found = format!(
            "no GPU matches {name:?} under {}/sys/bus/pci/devices\nhint: run `vgpuctl list` to see the GPUs on this host\n",
            h.sim.root().display()
        );
        let commands: [&[&str]; 5] = [
            &["types", name],
            &["create", name, "--type", "nvidia-231"],
            &["define", name, "--type", "nvidia-231"],
            &["sriov", name, "--vfs", "2"],
            &["sched", name, "--policy", "best-effort"],
        ];
        let found: Vec<(Option<i32>, bool)> = commands
            .iter()
            .map(|args| {
                let out = vgpuctl(&h, args);
                (out.status.code(), stderr(&out).ends_with(&not_found))
            })
            .collect();
        assert_eq!(found, vec![(Some(1), true); 5], "{not_found}");
    }
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
        "vgpuctl: error: cannot bind 0000:3a:00.0 to vfio-pci: 0000:3a:00.0 is not a GPU or a VF of one\nhint: --force binds a device that is not a GPU\n"
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

/// A vendor-VFIO GPU lists in sysfs only what fits beside its vGPUs; `types` still lists
/// every type it supports, and another type has no room, saying why.
#[test]
fn create_other_type_on_vendor_vfio_gpu_holding_one_is_no_capacity_naming_the_type_held() {
    let h = host("mixed");
    let before = supported_types(&vgpuctl(&h, &["types", "5e:00.0", "--json"]));
    let made = vgpuctl(&h, &["create", "5e:00.0", "--type", "L40S-12Q"]);

    let refused = vgpuctl(&h, &["--json", "create", "5e:00.0", "--type", "L40S-24Q"]);

    assert_eq!(
        (
            made.status.code(),
            refused.status.code(),
            json(&refused),
            before.len(),
            supported_types(&vgpuctl(&h, &["types", "5e:00.0", "--json"])) == before,
        ),
        (
            Some(0),
            Some(1),
            serde_json::json!({
                "error": "cannot create a L40S-24Q vGPU on 5e:00.0: GPU 0000:5e:00.0 has room \
                          for 0 more vGPU(s) of type 1155, not 1: NVIDIA \
                          L40S-12Q runs on the GPU or is defined for it, and the type cannot \
                          share a GPU with it",
                "kind": "no-capacity"
            }),
            30,
            true
        )
    );
}

/// The limit each type shows on a vendor-VFIO GPU holding another: the type held.
#[test]
fn types_of_vendor_vfio_gpu_holding_one_type_show_it_as_the_limit_of_the_others() {
    let h = host("mixed");
    assert_eq!(
        vgpuctl(&h, &["create", "5e:00.0", "--type", "L40S-12Q"])
            .status
            .code(),
        Some(0)
    );

    let types = json(&vgpuctl(&h, &["types", "5e:00.0", "--json"]));

    let limits: Vec<(String, serde_json::Value)> = types["gpus"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "NVIDIA L40S-24Q" || t["name"] == "NVIDIA L40S-12Q")
        .map(|t| (t["id"].as_str().unwrap().to_owned(), t["limit"].clone()))
        .collect();
    assert_eq!(
        limits,
        vec![
            (
                "1153".to_owned(),
                serde_json::json!({"kind": "max", "max": 4})
            ),
            (
                "1155".to_owned(),
                serde_json::json!({"kind": "mixing", "with": "NVIDIA L40S-12Q"})
            ),
        ]
    );
}

/// A relative state root that does not exist yet, as the quick start gives: it is created
/// below the working directory.
#[test]
fn create_with_a_relative_state_root_not_there_yet_creates_it() {
    let h = host("t4-legacy");
    let cwd = tempfile::tempdir().unwrap();

    let made = std::process::Command::new(common::vgpuctl_exe())
        .current_dir(cwd.path())
        .arg("--root")
        .arg(h.sim.root())
        .args(["--state-root", "state", "create", T4, "--type", "T4-2Q"])
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT")
        .output()
        .unwrap();

    assert_eq!(
        (
            made.status.code(),
            stderr(&made),
            cwd.path().join("state/run").is_dir()
        ),
        (Some(0), String::new(), true)
    );
}
