//! Mixed-size mode in plans and `apply`: placements, feasibility, rollback, and what the
//! mode does not go with (the fixed-share scheduler, MIG mode).

use super::*;

#[test]
fn mixed_size_mode_and_the_fixed_share_scheduler_are_refused_together() {
    let m = Mixed::new("mixed");
    let fixed = ["--json", "sched", L40S, "--policy", "fixed-share"];

    let on_mixed = m.run(&fixed);
    let equal = m.run(&["size-mode", L40S, "equal"]);
    let on_equal = m.run(&[&fixed[..], &["--define"]].concat());
    let to_mixed = m.run(&["--json", "size-mode", L40S, "mixed"]);
    // Equal share now, fixed share still defined: mixed may be set, not defined.
    let equal_share = m.run(&["sched", L40S, "--policy", "equal-share"]);
    let to_mixed_defined = m.run(&["--json", "size-mode", L40S, "mixed", "--define"]);
    let mode = common::json(&m.run(&["--json", "size-mode", L40S]));

    let refusal = |out: &Output| {
        let json = common::json(out);
        (
            out.status.code(),
            json["kind"].clone(),
            json["error"].clone(),
        )
    };
    assert_eq!(
        refusal(&on_mixed),
        (
            Some(1),
            "conflict".into(),
            format!(
                "cannot set the vGPU scheduler of {L40S} to fixed-share: mixed-size mode on {L40S} \
                 does not go with the fixed-share scheduler: set equal-size mode first \
                 (vgpuctl size-mode {L40S} equal)"
            )
            .into()
        )
    );
    for out in [&equal, &on_equal, &equal_share] {
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(out));
    }
    assert_eq!(
        refusal(&to_mixed),
        (
            Some(1),
            "conflict".into(),
            format!(
                "cannot set the size mode of {L40S} to mixed: mixed-size mode on {L40S} does not \
                 go with the fixed-share scheduler, which it runs: set another policy first \
                 (vgpuctl sched {L40S} --policy equal-share)"
            )
            .into()
        )
    );
    assert_eq!(
        refusal(&to_mixed_defined).2,
        format!(
            "cannot set the size mode of {L40S} to mixed: mixed-size mode on {L40S} does not go \
             with the fixed-share scheduler, which its scheduler definition sets: define another \
             policy first (vgpuctl sched {L40S} --policy equal-share --define)"
        )
    );
    assert_eq!(mode["size_mode"], "equal");
}

#[test]
fn plan_place_and_create_put_a_vgpu_beside_a_running_24q_at_the_same_placement() {
    // An operator's GPU: a 24Q runs at 24, made before the plan.
    let m = Mixed::new("mixed");
    let (code, held) = m.create("L40S-24Q", Some("24"));
    assert_eq!((code, held["placement_id"].as_u64()), (Some(0), Some(24)));
    let file = host_toml(&m, "\"L40S-24Q\" = 1, \"L40S-1Q\" = 1");

    let planned = m.run(&["--json", "plan", "-f", &file]);
    let placed = common::json(&m.run(&["--json", "place", "--count", "1", "--type", "L40S-1Q"]));
    let (created, made) = m.create("L40S-1Q", None);

    let plan = common::json(&planned);
    let steps = plan["gpus"][0]["steps"].as_array().unwrap();
    let creates: Vec<&serde_json::Value> = steps
        .iter()
        .filter(|s| s["action"] == "create")
        .map(|s| &s["placement"])
        .collect();
    assert_eq!(planned.status.code(), Some(4), "{plan}");
    assert_eq!(created, Some(0));
    // Both keep the 16 GiB placement at 0 and the 24 GiB one in the first half free.
    assert_eq!(creates, [&made["placement_id"]]);
    assert_eq!(placed["picks"][0]["placement_id"], made["placement_id"]);
    assert_eq!(made["placement_id"], 17);
}

#[test]
fn a_plan_no_placement_fits_is_refused_saying_the_most_that_fits() {
    let m = Mixed::new("equal");
    let file = host_toml(&m, "\"L40S-16Q\" = 2, \"L40S-12Q\" = 1");

    let out = m.run(&["plan", "-f", &file]);

    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "1 x NVIDIA L40S-12Q + 2 x NVIDIA L40S-16Q (44 of 48 GiB) cannot be placed in \
             mixed-size mode: at most 2 x NVIDIA L40S-16Q fit"
        ),
        "{text}"
    );
}

#[test]
fn apply_of_two_sizes_sets_mixed_size_mode_and_makes_them_at_their_placements() {
    let m = Mixed::new("equal");
    let file = host_toml(&m, "\"L40S-24Q\" = 1, \"L40S-12Q\" = 2");

    let applied = m.run(&["apply", "-f", &file]);
    let mode = common::json(&m.run(&["--json", "size-mode", L40S]));
    let asserted = m.run(&["assert", "-f", &file]);

    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        common::stderr(&applied)
    );
    assert_eq!(mode["size_mode"], "mixed");
    // 24 + 12 + 12 GiB fill the region only at these placements: 24Q at 24, the 12Qs below.
    let mut at: Vec<serde_json::Value> = mode["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| sim_placement(&m.host, id.as_str().unwrap()))
        .collect();
    at.sort_by_key(|v| v.as_u64());
    assert_eq!(at, [0, 12, 24].map(serde_json::Value::from));
    // Kept for `restore`, as the vGPUs are.
    assert_eq!(
        m.defined_size_mode()
            .map(|d| (d["what"].clone(), d["active"].clone())),
        Some(("mixed".into(), true.into()))
    );
    assert_eq!(
        asserted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&asserted.stdout)
    );
    assert_eq!(
        m.placements("L40S-12Q"),
        serde_json::json!({"placement_size": 12, "placements": [], "available": 0})
    );
}

#[test]
fn mixed_size_mode_and_mig_mode_are_refused_together_in_plans_and_size_mode() {
    const H100: &str = "0000:c1:00.0";
    let m = Mixed::on("mixed-size");
    let file = m.host.state.path().join("mig.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\n\n[configs.default]\n\n[[configs.default.gpu]]\naddress = \"{H100}\"\n\
             mig = {{ \"1g.10gb\" = 1 }}\ntypes = {{}}\n"
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();

    let mixed = m.run(&["size-mode", H100, "mixed", "--define"]);
    let planned = m.run(&["plan", "-f", file]);
    // Equal-size mode now, as after a reboot; the definition still says mixed.
    let equal = m.run(&["size-mode", H100, "equal"]);
    let applied = m.run(&["apply", "-f", file]);
    let refused = m.run(&["--json", "size-mode", H100, "mixed"]);
    let defined = common::json(&m.run(&["--json", "list", "--defined"]));

    for out in [&mixed, &equal, &applied] {
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(out));
    }
    assert_eq!(planned.status.code(), Some(1));
    let plan = String::from_utf8_lossy(&planned.stdout);
    assert!(
        plan.contains("it would run mixed-size mode beside MIG mode, which it does not take"),
        "{plan}"
    );
    // The plan leaves the GPU in equal-size mode: apply records that.
    let modes: Vec<&serde_json::Value> = defined["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "size-mode")
        .map(|d| &d["what"])
        .collect();
    assert_eq!(modes, [&serde_json::json!("equal")]);
    let error = common::json(&refused);
    assert_eq!(
        (refused.status.code(), &error["kind"], &error["error"]),
        (
            Some(1),
            &serde_json::json!("conflict"),
            &serde_json::json!(format!(
                "cannot set the size mode of {H100} to mixed: mixed-size mode on {H100} does \
                 not go with MIG mode, which is on: turn MIG mode off first"
            ))
        )
    );
}

#[test]
fn a_failed_apply_makes_the_vgpu_it_destroyed_again_at_its_placement() {
    let m = Mixed::new("mixed");
    // A 1Q at 29: the driver's default would put it back at 0.
    let (code, held) = m.create("L40S-1Q", Some("29"));
    assert_eq!((code, held["placement_id"].as_u64()), (Some(0), Some(29)));
    let one_q = held["id"].as_str().unwrap().to_owned();
    let file = host_toml(&m, "\"L40S-24Q\" = 2");
    // The plan destroys the 1Q, then makes a 24Q on its VF and one on the next: that one fails.
    let second = common::vf("41", 1);
    m.host
        .sim
        .fail_next(1, 5, &format!("*/{second}/nvidia/current_vgpu_type"));

    let applied = m.run(&["apply", "-f", &file]);

    assert_eq!(
        applied.status.code(),
        Some(1),
        "{}",
        common::stderr(&applied)
    );
    assert_eq!(sim_placement(&m.host, &one_q), 29);
    assert_eq!(sim_placement(&m.host, &second), serde_json::Value::Null);
    // Its VF's `nvidia/vgpu_params` says where it is, defined or not.
    let listed = common::json(&m.run(&["--json", "list", L40S]));
    let placements: Vec<(serde_json::Value, serde_json::Value)> = listed["gpus"][0]["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["id"].clone(), v["placement"].clone()))
        .collect();
    assert_eq!(
        placements,
        [(serde_json::json!(one_q), serde_json::json!(29))]
    );
}

#[test]
fn apply_of_mixed_sizes_is_refused_where_fixed_share_is_defined_though_not_running() {
    let m = Mixed::new("equal");
    for args in [
        ["sched", L40S, "--policy", "fixed-share", "--define"].as_slice(),
        // Another policy runs now: the plan, which reads what runs, sees no conflict.
        ["sched", L40S, "--policy", "equal-share"].as_slice(),
    ] {
        let out = m.run(args);
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    }
    let file = host_toml(&m, "\"L40S-24Q\" = 1, \"L40S-12Q\" = 2");

    let applied = m.run(&["--json", "apply", "-f", &file]);
    let mode = common::json(&m.run(&["--json", "size-mode", L40S]));

    let json = common::json(&applied);
    let gpu = &json["gpus"][0];
    assert_eq!(applied.status.code(), Some(1), "{json}");
    assert_eq!(gpu["kind"], "conflict", "{json}");
    assert_eq!(
        gpu["error"],
        format!(
            "mixed-size mode on {L40S} does not go with the fixed-share scheduler, which its \
             scheduler definition sets: define another policy first (vgpuctl sched {L40S} \
             --policy equal-share --define)"
        )
    );
    assert_eq!(
        (&mode["size_mode"], &mode["vgpus"]),
        (&"equal".into(), &serde_json::json!([]))
    );
}
