//! `vgpuctl` changing a simulated host (`vgpu-sim`) across crashes and restarts: killed
//! commands, `restore`, persistence and the real mdevctl as a peer, the release guard.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// Polls until `path` exists (the killed command got that far), with a deadline.
fn wait_for(path: &Path) {
    assert!(
        vgpu_testing::wait_for(Duration::from_secs(20), || path.exists()),
        "{} did not appear",
        path.display()
    );
}

/// The writes the simulator holds until nothing blocks them: the `# waiting <path>: <why>`
/// lines of its control file.
fn waiting(h: &Host) -> Vec<String> {
    std::fs::read_to_string(h.sim.root().join(".vgpu-sim/control"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("# waiting "))
        .map(str::to_owned)
        .collect()
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
fn restore_and_list_defined_name_the_corrupt_definition_files() {
    let h = host("t4-legacy");
    let dir = h.state.path().join("etc/mdevctl.d").join(T4);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(UUID_PEER), "nvidia-231 auto\n").unwrap();
    let modes = h.state.path().join("etc/vgpu/size-mode");
    std::fs::create_dir_all(&modes).unwrap();
    let mode_file = modes.join(format!("{T4}.json"));
    std::fs::write(&mode_file, "mixed\n").unwrap();

    let report = json(&vgpuctl(&h, &["restore", "--json"]));
    let listed = json(&vgpuctl(&h, &["list", "--defined", "--json"]));

    // Each entry's two fields, where both are strings.
    let pairs = |entries: &serde_json::Value, first: &str, second: &str| -> Vec<(String, String)> {
        let field = |e: &serde_json::Value, name: &str| e[name].as_str().map(str::to_owned);
        let entries = entries.as_array().unwrap();
        entries
            .iter()
            .filter_map(|e| Some((field(e, first)?, field(e, second)?)))
            .collect()
    };
    let failed = pairs(&report["steps"], "action", "error");
    let warned = pairs(&listed["warnings"], "device", "message");
    let mdev_file = format!("{T4}/{UUID_PEER}");
    let mode_file = mode_file.display().to_string();
    assert_eq!(listed["definitions"], serde_json::json!([]));
    for (found, kinds) in [
        (failed, ["size-mode", "mdev"]),
        (warned, ["size-mode definition", "mdev definition"]),
    ] {
        let names: Vec<&str> = found.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(names, kinds);
        assert!(found[0].1.contains(&mode_file), "{}", found[0].1);
        assert!(found[1].1.contains(&mdev_file), "{}", found[1].1);
    }
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
    let on_stub = || {
        std::fs::read_link(&driver)
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_os_string()))
            == Some("pci-pf-stub".into())
    };
    assert!(
        vgpu_testing::wait_for(Duration::from_secs(20), on_stub),
        "the PF never reached pci-pf-stub"
    );
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
                "kind": null,
                "reason": null
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
            // QEMU exits once the forced removal waits in the kernel for it.
            let remove = format!("{UUID}/remove: ");
            assert!(vgpu_testing::wait_for(Duration::from_secs(20), || {
                waiting(&h).iter().any(|w| w.contains(&remove))
            }));
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
                     through {node}"
                ),
                "kind": "busy"
            }),
            vec![UUID.to_owned()],
            Some(0),
            Vec::<String>::new()
        )
    );
}

// ---- local-memory quotas across a reboot ----

/// The Flex 170 as one 8 GiB VF and four 2 GiB ones for guests, kept at boot.
const FLEX_DESKTOPS: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"vfio-pci\"\nsizes = [\"8GiB\", \"4x2GiB\"]\n";

/// The Flex 170 with `FLEX_DESKTOPS` applied, then rebooted; and the desired-state file.
fn flex_desktops_rebooted() -> (Host, String) {
    let mut h = host("flex-sriov");
    let file = h.state.path().join("host.toml");
    std::fs::write(&file, FLEX_DESKTOPS).unwrap();
    let file = file.to_str().unwrap().to_owned();
    assert_eq!(vgpuctl(&h, &["apply", "-f", &file]).status.code(), Some(0));
    reboot(&mut h);
    (h, file)
}

#[test]
fn restore_after_reboot_sets_each_recorded_quota_before_binding_vfio_pci() {
    let (h, file) = flex_desktops_rebooted();

    let restored = vgpuctl(&h, &["restore", "--json"]);

    let planned = vgpuctl(&h, &["plan", "-f", &file]);
    let vfio = serde_json::json!("vfio-pci");
    let gib = |n: u64| serde_json::json!(n * 1024);
    assert_eq!(
        (restored.status.code(), flex_vfs(&h), planned.status.code()),
        (
            Some(0),
            vec![
                (gib(8), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio)
            ],
            Some(0)
        )
    );
}

#[test]
fn restore_json_shows_each_quota_step_lowered_first() {
    let (h, _) = flex_desktops_rebooted();

    let report = json(&vgpuctl(&h, &["restore", "--json"]));

    let quota = |vf: u32, to_mib: u64| {
        serde_json::json!({
            "action": "quota",
            "device": format!("0000:4d:00.{vf}"),
            "vf": vf,
            "from_mib": 3276,
            "to_mib": to_mib,
            "outcome": "created",
            "error": null,
            "kind": null,
            "reason": null
        })
    };
    assert_eq!(
        report["steps"].as_array().unwrap()[1..6],
        [
            quota(2, 2048),
            quota(3, 2048),
            quota(4, 2048),
            quota(5, 2048),
            quota(1, 8192)
        ]
    );
}

#[test]
fn restore_table_shows_each_quota_from_and_to() {
    let (h, _) = flex_desktops_rebooted();

    let out = vgpuctl(&h, &["restore"]);

    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "STEP                     DEVICE        OUTCOME  DETAIL\n\
         sriov                    0000:4d:00.0  created\n\
         quota 3276 MiB -> 2 GiB  0000:4d:00.2  created\n\
         quota 3276 MiB -> 2 GiB  0000:4d:00.3  created\n\
         quota 3276 MiB -> 2 GiB  0000:4d:00.4  created\n\
         quota 3276 MiB -> 2 GiB  0000:4d:00.5  created\n\
         quota 3276 MiB -> 8 GiB  0000:4d:00.1  created\n\
         bind                     0000:4d:00.1  created\n\
         bind                     0000:4d:00.2  created\n\
         bind                     0000:4d:00.3  created\n\
         bind                     0000:4d:00.4  created\n\
         bind                     0000:4d:00.5  created\n"
    );
}

#[test]
fn restore_quota_fault_after_reboot_exits_1_with_that_vf_off_vfio_pci() {
    let (h, _) = flex_desktops_rebooted();
    h.sim
        .control("fail-next 1 EIO */iov/vf1/gt0/lmem_quota")
        .unwrap();

    let restored = vgpuctl(&h, &["restore", "--json"]);

    let failed: Vec<serde_json::Value> = json(&restored)["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"] == "failed")
        .map(|s| serde_json::json!([s["action"], s["device"], s["kind"]]))
        .collect();
    assert_eq!(
        (restored.status.code(), failed, flex_vfs(&h)[0].clone()),
        (
            Some(1),
            vec![
                serde_json::json!(["quota", "0000:4d:00.1", "host-fault"]),
                serde_json::json!(["bind", "0000:4d:00.1", "conflict"])
            ],
            (serde_json::json!(3276), serde_json::json!("i915"))
        )
    );
}

#[test]
fn restore_device_of_the_pf_after_reboot_sets_quotas_then_binds_its_vfs() {
    let (h, _) = flex_desktops_rebooted();

    let out = vgpuctl(&h, &["restore", "--device", FLEX, "--json"]);

    let vfio = serde_json::json!("vfio-pci");
    let gib = |n: u64| serde_json::json!(n * 1024);
    assert_eq!(
        (out.status.code(), flex_vfs(&h)),
        (
            Some(0),
            vec![
                (gib(8), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio.clone()),
                (gib(2), vfio)
            ]
        )
    );
}

/// The VFs came back (enabled by hand, at the equal share) before the PF's restore: udev's
/// restore of a VF does not bind it to vfio-pci without its quota.
#[test]
fn restore_device_of_a_vf_without_its_quota_leaves_it_on_its_driver() {
    let (h, _) = flex_desktops_rebooted();
    vgpuctl(&h, &["sriov", FLEX, "--vfs", "5"]);

    let out = vgpuctl(&h, &["restore", "--device", "0000:4d:00.1", "--json"]);

    let report = json(&out);
    assert_eq!(
        (
            out.status.code(),
            &report["steps"][0]["action"],
            &report["steps"][0]["error"],
            &report["steps"][0]["kind"],
            flex_vfs(&h)[0].clone()
        ),
        (
            Some(1),
            &serde_json::json!("bind"),
            &serde_json::json!(
                "0000:4d:00.1 is defined as VF 1 with 8 GiB of local memory but holds 3276 MiB"
            ),
            &serde_json::json!("conflict"),
            (serde_json::json!(3276), serde_json::json!("i915"))
        )
    );
}

/// Every file under `dir`, relative to it, sorted; none when it does not exist.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            found.extend(
                files_under(&path)
                    .into_iter()
                    .map(|f| format!("{name}/{f}")),
            );
        } else {
            found.push(path.file_name().unwrap().to_str().unwrap().to_owned());
        }
    }
    found.sort();
    found
}

/// What a GPU offered is learned, not defined: it is kept under var/lib/vgpu, and a create and
/// destroy without --define leave etc/ empty. An offer an earlier version left under
/// etc/vgpu/offers is read there, and the next change moves it.
#[test]
fn offers_live_under_var_lib_and_one_left_under_etc_is_read_then_moved() {
    const L40S: &str = "0000:41:00.0";
    let h = host("l40s-vendor-vfio");
    let made = vgpuctl(&h, &["create", L40S, "--type", "L40S-12Q"]);
    let id = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    assert_eq!(vgpuctl(&h, &["destroy", &id]).status.code(), Some(0));
    let etc_after_destroy = files_under(&h.state.path().join("etc"));
    let learned = h.state.path().join("var/lib/vgpu/offers");
    let learned_after_destroy = files_under(&learned);
    let types =
        |h: &Host| String::from_utf8(vgpuctl(h, &["types", L40S, "--json"]).stdout).unwrap();
    let with_offer = types(&h);
    // As an earlier version left it.
    let legacy = h.state.path().join("etc/vgpu/offers");
    std::fs::create_dir_all(&legacy).unwrap();
    let file = format!("{L40S}.json");
    std::fs::rename(learned.join(&file), legacy.join(&file)).unwrap();
    let read_from_etc = types(&h);
    let made = vgpuctl(&h, &["create", L40S, "--type", "L40S-12Q"]);

    assert_eq!(
        (
            made.status.code(),
            etc_after_destroy,
            learned_after_destroy,
            read_from_etc == with_offer,
            files_under(&h.state.path().join("etc")),
            h.state.path().join("etc/vgpu").exists(),
            files_under(&learned),
        ),
        (
            Some(0),
            Vec::<String>::new(),
            vec![file.clone()],
            true,
            Vec::<String>::new(),
            false,
            vec![file]
        )
    );
}

/// One rule for `--define`: what `sriov`, `bind`, `create` and `provision` made comes back at
/// boot (`restore`), unless `--manual`; `list --defined` says what manual means.
#[test]
fn define_brings_back_at_boot_what_it_made_unless_manual() {
    const MIXED_FLEX: &str = "0001:03:00.0";
    const MIXED_FLEX_VF: &str = "0001:03:00.1";
    const MANUAL: &str = "7d0f6a2e-5b3c-4e1d-8a9f-0c1b2d3e4f5b";
    let mut h = host("mixed");
    let made = [
        vgpuctl(&h, &["sriov", MIXED_FLEX, "--vfs", "4", "--define"]),
        vgpuctl(&h, &["bind", MIXED_FLEX_VF, "--define"]),
        vgpuctl(
            &h,
            &["create", T4, "--type", "T4-2Q", "--uuid", UUID, "--define"],
        ),
        vgpuctl(
            &h,
            &[
                "create", T4, "--type", "T4-2Q", "--uuid", MANUAL, "--define", "--manual",
            ],
        ),
    ]
    .map(|o| o.status.code());

    reboot(&mut h);
    let restored = vgpuctl(&h, &["restore"]).status.code();

    let list = list(&h);
    let vf_driver = gpu(&list, MIXED_FLEX)["vfs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|vf| vf["address"] == MIXED_FLEX_VF)
        .map(|vf| vf["driver"].clone());
    let defined = String::from_utf8(vgpuctl(&h, &["list", "--defined"]).stdout).unwrap();
    assert_eq!(
        (
            made,
            restored,
            vf_driver,
            vgpu_ids(&h, T4),
            defined.lines().filter(|l| l.contains(" manual ")).count(),
            defined.lines().last().map(str::to_owned),
        ),
        (
            [Some(0); 4],
            Some(0),
            Some(serde_json::json!("vfio-pci")),
            vec![UUID.to_owned()],
            1,
            Some(
                "manual: kept, but not made at boot; `vgpuctl start ID` makes it. `--define` \
                 makes auto unless --manual."
                    .to_owned()
            ),
        )
    );
}
