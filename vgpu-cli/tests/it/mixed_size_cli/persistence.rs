//! Mixed-size mode across reboots, GPU resets and `restore`: the mode and the placements
//! come back as defined.

use super::*;

#[test]
fn restore_after_a_reboot_sets_mixed_size_mode_then_makes_the_vgpu_at_its_placement() {
    let mut m = Mixed::new("mixed");
    let out = m.run(&DEFINE_1Q_AT_5);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let vf = common::json(&out)["id"].as_str().unwrap().to_owned();

    common::reboot(&mut m.host);
    // The test NVML views the simulator freshly mounted.
    m.nvml = FakeNvml::on_sim("", m.host.sim.root()).unwrap();
    let before = common::json(&m.run(&["--json", "size-mode", L40S]));
    let restored = m.run(&["restore"]);
    let after = common::json(&m.run(&["--json", "size-mode", L40S]));

    assert_eq!(before["size_mode"], "equal");
    assert_eq!(
        restored.status.code(),
        Some(0),
        "{}",
        common::stderr(&restored)
    );
    assert_eq!(after["size_mode"], "mixed");
    assert_eq!(sim_placement(&m.host, &vf), 5);
    // NVML matches a VF's vGPU to no VF: `list` gives the placement its definition made it at.
    let listed = common::json(&m.run(&["--json", "list", L40S]));
    let vgpu = listed["gpus"][0]["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == vf.as_str())
        .cloned();
    assert_eq!(
        vgpu.map(|v| v["placement"].clone()),
        Some(serde_json::json!(5))
    );
}

#[test]
fn after_a_gpu_reset_create_puts_the_defined_size_mode_back_before_the_vgpu() {
    let m = defined_mixed_after_a_reset();
    let before = common::json(&m.run(&["--json", "size-mode", L40S]));

    let (code, made) = m.create("L40S-1Q", None);
    let after = common::json(&m.run(&["--json", "size-mode", L40S]));

    assert_eq!(before["size_mode"], "equal");
    assert_eq!(
        (code, &made["placement_id"]),
        (Some(0), &serde_json::json!(17))
    );
    assert_eq!(after["size_mode"], "mixed");
    assert_eq!(sim_placement(&m.host, made["id"].as_str().unwrap()), 17);
}

#[test]
fn size_mode_define_is_set_again_by_restore_after_a_reboot_and_a_refusal_records_nothing() {
    let mut m = Mixed::new("mixed");
    let path = m
        .host
        .state
        .path()
        .join(format!("etc/vgpu/size-mode/{L40S}.json"));
    let (_, made) = m.create("L40S-1Q", None);

    // Refused while the GPU holds a vGPU: the definition is not left behind.
    let refused = m.run(&["size-mode", L40S, "equal", "--define"]);
    let recorded_then = path.exists();
    let destroyed = m.run(&["destroy", made["id"].as_str().unwrap()]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        common::stderr(&destroyed)
    );
    let defined = m.run(&["size-mode", L40S, "mixed", "--define"]);
    let file = std::fs::read_to_string(&path).unwrap();
    common::reboot(&mut m.host);
    m.nvml = FakeNvml::on_sim("", m.host.sim.root()).unwrap();
    let before = common::json(&m.run(&["--json", "size-mode", L40S]));
    let listed_before = m.defined_size_mode();
    let restored = common::json(&m.run(&["--json", "restore"]));
    let after = common::json(&m.run(&["--json", "size-mode", L40S]));

    let shown = |active: bool| {
        serde_json::json!({"kind": "size-mode", "id": L40S, "on": L40S, "what": "mixed",
                           "start": null, "active": active})
    };
    assert_eq!(
        (listed_before, m.defined_size_mode()),
        (Some(shown(false)), Some(shown(true)))
    );
    assert_eq!((refused.status.code(), recorded_then), (Some(1), false));
    assert_eq!(
        defined.status.code(),
        Some(0),
        "{}",
        common::stderr(&defined)
    );
    assert_eq!(file, "{\n  \"version\": 1,\n  \"mode\": \"mixed\"\n}\n");
    assert_eq!(before["size_mode"], "equal");
    let step = restored["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == "size-mode")
        .cloned();
    assert_eq!(
        step.map(|s| (s["device"].clone(), s["outcome"].clone())),
        Some((serde_json::json!(L40S), serde_json::json!("created")))
    );
    assert_eq!(after["size_mode"], "mixed");
}

#[test]
fn equal_size_mode_and_a_placement_cannot_both_be_defined() {
    let m = Mixed::new("mixed");
    let mode_path = m
        .host
        .state
        .path()
        .join(format!("etc/vgpu/size-mode/{L40S}.json"));
    let equal = m.run(&["size-mode", L40S, "equal", "--define"]);
    let mixed_now = m.run(&["size-mode", L40S, "mixed"]);

    // Defined equal, mixed now: a vGPU defined at a placement is refused, nothing made.
    let refused_vgpu = m.run(&DEFINE_1Q_AT_5);
    let vgpu_then = sim_placement(&m.host, "0000:41:00.4");
    // `apply` says so before it changes anything.
    let plan = host_toml(&m, "\"L40S-1Q\" = 1");
    let refused_apply = common::json(&m.run(&["--json", "apply", "-f", &plan]));
    let vgpu_after_apply = sim_placement(&m.host, "0000:41:00.4");
    let listed = common::json(&m.run(&["--json", "list", "--defined"]));
    // Defined mixed: the vGPU is defined; then equal-size mode is refused, the file kept.
    let mixed = m.run(&["size-mode", L40S, "mixed", "--define"]);
    let made = m.run(&DEFINE_1Q_AT_5);
    let vf = common::json(&made)["id"].as_str().unwrap().to_owned();
    let refused_mode = m.run(&["--json", "size-mode", L40S, "equal", "--define"]);
    let file = std::fs::read_to_string(&mode_path).unwrap();

    for out in [&equal, &mixed_now, &mixed, &made] {
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(out));
    }
    let disagree = |placed: &str| {
        format!(
            "the definitions of GPU {L40S} disagree: equal-size mode ({}) and vGPUs at \
             placements ({placed}), which need mixed-size mode; undefine one or the other",
            mode_path.display()
        )
    };
    let refusal = |out: &Output| {
        let json = common::json(out);
        (
            out.status.code(),
            json["kind"].clone(),
            json["error"].clone(),
        )
    };
    let first_vf = "0000:41:00.4";
    assert_eq!(
        refusal(&refused_vgpu),
        (
            Some(1),
            "conflict".into(),
            format!(
                "cannot create a L40S-1Q vGPU on {L40S}: {}",
                disagree(first_vf)
            )
            .into()
        )
    );
    let kinds: Vec<&serde_json::Value> = listed["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["kind"])
        .collect();
    assert_eq!(kinds, ["size-mode"]);
    assert_eq!(vgpu_then, serde_json::Value::Null);
    let applied = &refused_apply["gpus"][0];
    assert_eq!(
        (&applied["outcome"], &applied["kind"], &vgpu_after_apply),
        (
            &serde_json::json!("failed"),
            &serde_json::json!("conflict"),
            &serde_json::Value::Null
        ),
        "{refused_apply}"
    );
    assert_eq!(vf, first_vf);
    assert_eq!(
        refusal(&refused_mode),
        (
            Some(1),
            "conflict".into(),
            format!(
                "cannot set the size mode of {L40S} to equal: {}",
                disagree(&vf)
            )
            .into()
        )
    );
    assert_eq!(file, "{\n  \"version\": 1,\n  \"mode\": \"mixed\"\n}\n");
}

#[test]
fn restore_makes_the_vgpus_defined_at_placements_before_one_defined_without() {
    let mut m = Mixed::new("mixed");
    // A 24Q defined without a placement (as `apply` keeps one) on the first VF, then a 1Q
    // at 5 on the next: made first, the 24Q would take 0 and leave the 1Q no room.
    let defined = m.run(&["--json", "define", L40S, "--type", "L40S-24Q", "--auto"]);
    let placed = m.run(&DEFINE_1Q_AT_5);
    let big = common::json(&defined)["id"].as_str().unwrap().to_owned();
    let small = common::json(&placed)["id"].as_str().unwrap().to_owned();

    common::reboot(&mut m.host);
    m.nvml = FakeNvml::on_sim("", m.host.sim.root()).unwrap();
    let restored = m.run(&["restore"]);

    for out in [&defined, &placed, &restored] {
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(out));
    }
    assert!(big < small, "{big} {small}");
    assert_eq!(
        (sim_placement(&m.host, &small), sim_placement(&m.host, &big)),
        (5.into(), 24.into())
    );
}

#[test]
fn restore_of_a_vf_sets_its_gpu_s_scheduler_and_size_mode_before_its_vgpu() {
    let mut m = Mixed::new("equal");
    for args in [
        ["sched", L40S, "--policy", "equal-share", "--define"].as_slice(),
        ["size-mode", L40S, "mixed", "--define"].as_slice(),
    ] {
        let out = m.run(args);
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    }
    let made = m.run(&["--json", "create", L40S, "--type", "L40S-1Q", "--define"]);
    assert_eq!(made.status.code(), Some(0), "{}", common::stderr(&made));
    let vf = common::json(&made)["id"].as_str().unwrap().to_owned();
    common::reboot(&mut m.host);
    m.nvml = FakeNvml::on_sim("", m.host.sim.root()).unwrap();

    // udev restores every VF that appears: one with nothing defined leaves the GPU alone.
    let other = common::json(&m.run(&["--json", "restore", "--device", &common::vf("41", 1)]));
    let sched_then = common::json(&m.run(&["--json", "sched", L40S]));
    let restored = common::json(&m.run(&["--json", "restore", "--device", &vf]));
    let sched = common::json(&m.run(&["--json", "sched", L40S]));

    let steps: Vec<(serde_json::Value, serde_json::Value)> = restored["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["action"].clone(), s["device"].clone()))
        .collect();
    let step = |action: &str, device: &str| (serde_json::json!(action), serde_json::json!(device));
    assert_eq!(
        steps,
        [
            step("scheduler", L40S),
            step("size-mode", L40S),
            step("vf-vgpu", &vf)
        ]
    );
    assert_eq!(other["steps"], serde_json::json!([]));
    assert_eq!(sched_then["scheduler"]["policy"], "best-effort");
    assert_eq!(sched["scheduler"]["policy"], "equal-share");
    assert_eq!(sim_placement(&m.host, &vf), 17);
}

#[test]
fn list_defined_warns_of_gpu_settings_defined_so_they_disagree() {
    // Each command refuses such a pair; files written by hand, or before, can hold one.
    let m = Mixed::new("equal");
    let etc = m.host.state.path().join("etc/vgpu");
    for (kind, text) in [
        ("size-mode", "{\"version\": 1, \"mode\": \"mixed\"}\n"),
        (
            "sched",
            "{\"version\": 1, \"policy\": \"fixed-share\", \"timeslice_ms\": null}\n",
        ),
    ] {
        std::fs::create_dir_all(etc.join(kind)).unwrap();
        std::fs::write(etc.join(kind).join(format!("{L40S}.json")), text).unwrap();
    }

    let listed = common::json(&m.run(&["--json", "list", "--defined"]));

    assert_eq!(
        listed["warnings"],
        serde_json::json!([{
            "device": L40S,
            "message": format!(
                "the definitions of GPU {L40S} disagree: mixed-size mode and the fixed-share \
                 scheduler, which it does not take; define another policy (vgpuctl sched {L40S} \
                 --policy equal-share --define) or equal-size mode (vgpuctl size-mode {L40S} \
                 equal --define)"
            )
        }])
    );
}
