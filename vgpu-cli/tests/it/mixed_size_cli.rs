//! NVIDIA's mixed-size mode through `vgpuctl`, on the simulated `l40s-vendor-vfio` host with
//! the test NVML as a view of the simulator: `size-mode` shows and sets the mode, refused
//! while vGPUs exist and without NVML; `create` places a vGPU where it takes the least room
//! from larger ones (or at `--placement`); `types` gives placements; two sizes share one GPU.

use std::process::Output;

use vgpu_testing::fake_nvml::FakeNvml;

use crate::common::{self, Host, host};

const L40S: &str = "0000:41:00.0";

/// `create` of an L40S-1Q at placement 5, defined, as JSON.
const DEFINE_1Q_AT_5: [&str; 8] = [
    "--json",
    "create",
    L40S,
    "--type",
    "L40S-1Q",
    "--placement",
    "5",
    "--define",
];

struct Mixed {
    host: Host,
    nvml: FakeNvml,
}

impl Mixed {
    /// The host with the test NVML on its simulator, its first L40S in `mode`.
    fn new(mode: &str) -> Self {
        Self::with_nvml(mode, "")
    }

    /// The simulated host `profile` as it boots, with the test NVML on its simulator.
    fn on(profile: &str) -> Self {
        let host = host(profile);
        let nvml = FakeNvml::on_sim("", host.sim.root()).unwrap();
        Mixed { host, nvml }
    }

    /// [`Mixed::new`], the test NVML also given `data` (its behaviours).
    fn with_nvml(mode: &str, data: &str) -> Self {
        let host = host("l40s-vendor-vfio");
        let nvml = FakeNvml::on_sim(data, host.sim.root()).unwrap();
        let m = Mixed { host, nvml };
        if mode == "mixed" {
            let out = m.run(&["size-mode", L40S, "mixed"]);
            assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        }
        m
    }

    /// `vgpuctl --nvml-library FAKE ARGS…`.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--nvml-library", self.nvml.library().to_str().unwrap()];
        all.extend_from_slice(args);
        common::vgpuctl(&self.host, &all)
    }

    /// `create L40S --type TYPE [--placement N] --json`: the exit code and the placement id.
    fn create(&self, type_name: &str, placement: Option<&str>) -> (Option<i32>, serde_json::Value) {
        let mut args = vec!["--json", "create", L40S, "--type", type_name];
        if let Some(id) = placement {
            args.extend(["--placement", id]);
        }
        let out = self.run(&args);
        (out.status.code(), common::json(&out))
    }

    /// The hook's `prepare begin` of domain `vm1` (tenant `acme`) with an L40S-1Q on `vf`.
    fn prepare_1q(&self, vf: &str) -> Output {
        let hooks = common::install_hook(
            &self.host,
            &["--nvml-library", self.nvml.library().to_str().unwrap()],
        );
        let domain = common::domain(1, "acme", "L40S-1Q", &[vf.to_owned()]);
        common::run_hook(hooks.path(), "vm1", "prepare", "begin", &domain)
    }

    /// The size-mode definition `list --defined --json` shows, if any.
    fn defined_size_mode(&self) -> Option<serde_json::Value> {
        let json = common::json(&self.run(&["--json", "list", "--defined"]));
        json["definitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["kind"] == "size-mode")
            .cloned()
    }

    /// The free placements of `type_name` on the L40S, as `types --json` gives them.
    fn placements(&self, type_name: &str) -> serde_json::Value {
        let json = common::json(&self.run(&["--json", "types", L40S]));
        let gpu = &json["gpus"][0];
        let ty = gpu["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == format!("NVIDIA {type_name}"))
            .unwrap();
        serde_json::json!({
            "placement_size": ty["placement_size"],
            "placements": ty["placements"],
            "available": ty["available"],
        })
    }
}

#[test]
fn size_mode_shows_equal_at_boot_and_sets_mixed() {
    let m = Mixed::new("equal");

    let shown = common::json(&m.run(&["--json", "size-mode", L40S]));
    let set = m.run(&["size-mode", L40S, "mixed"]);
    let again = m.run(&["size-mode", L40S, "mixed"]);
    let list = common::json(&m.run(&["--json", "list", L40S]));

    assert_eq!(
        shown,
        serde_json::json!({"gpu": L40S, "size_mode": "equal", "vgpus": []})
    );
    assert_eq!(
        String::from_utf8_lossy(&set.stdout),
        "0000:41:00.0: size mode mixed (was equal)\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "0000:41:00.0: size mode already mixed: nothing changed\n"
    );
    assert_eq!(list["gpus"][0]["size_mode"], "mixed");
}

#[test]
fn create_keeps_both_16q_placements_free_where_the_driver_would_not() {
    let m = Mixed::new("mixed");

    let (code, ours) = m.create("L40S-1Q", None);
    let after_ours = m.placements("L40S-16Q");
    let (_, driver) = m.create("L40S-1Q", Some("0"));
    let after_driver = m.placements("L40S-16Q");

    assert_eq!(code, Some(0));
    // The driver's default, the lowest free id, is 0, where a 16 GiB vGPU starts.
    assert_eq!(ours["placement_id"], 17);
    assert_eq!(
        after_ours,
        serde_json::json!({"placement_size": 16, "placements": [0, 32], "available": 2})
    );
    assert_eq!(driver["placement_id"], 0);
    assert_eq!(
        after_driver,
        serde_json::json!({"placement_size": 16, "placements": [32], "available": 1})
    );
}

#[test]
fn two_sizes_share_a_mixed_gpu() {
    let m = Mixed::new("mixed");

    let (big, big_json) = m.create("L40S-24Q", Some("24"));
    let (small, small_json) = m.create("L40S-12Q", None);
    let list = common::json(&m.run(&["--json", "list", L40S]));

    assert_eq!((big, small), (Some(0), Some(0)));
    assert_eq!(
        (&big_json["placement_id"], &small_json["placement_id"]),
        (&serde_json::json!(24), &serde_json::json!(0))
    );
    let mut types: Vec<&str> = list["gpus"][0]["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["type"].as_str().unwrap())
        .collect();
    types.sort_unstable();
    assert_eq!(types, vec!["1153", "1155"]);
    assert_eq!(
        m.placements("L40S-12Q"),
        serde_json::json!({"placement_size": 12, "placements": [12], "available": 1})
    );
}

#[test]
fn equal_size_mode_keeps_one_type_and_refuses_a_placement() {
    let m = Mixed::new("equal");

    let (first, _) = m.create("L40S-24Q", None);
    let (second, refused) = m.create("L40S-12Q", None);
    let (placed, not_mixed) = m.create("L40S-24Q", Some("24"));

    assert_eq!((first, second, placed), (Some(0), Some(1), Some(1)));
    assert_eq!(refused["kind"], "no-capacity");
    assert_eq!(not_mixed["kind"], "conflict");
    assert_eq!(
        not_mixed["error"],
        "cannot create a L40S-24Q vGPU on 0000:41:00.0: 0000:41:00.0 is not in mixed-size mode \
         (equal-size mode): a placement applies in mixed-size mode only"
    );
}

#[test]
fn a_placement_the_driver_cannot_take_is_refused_naming_those_it_can() {
    let m = Mixed::new("mixed");
    m.create("L40S-1Q", Some("0"));

    let (code, refused) = m.create("L40S-16Q", Some("0"));

    assert_eq!(code, Some(1));
    assert_eq!(refused["kind"], "no-capacity");
    assert_eq!(
        refused["error"],
        "cannot create a L40S-16Q vGPU on 0000:41:00.0: NVIDIA L40S-16Q cannot be created at \
         placement 0 on 0000:41:00.0 now (it can at: 32)"
    );
    assert_eq!(common::vgpu_ids(&m.host, L40S).len(), 1);
}

#[test]
fn size_mode_is_refused_while_the_gpu_holds_vgpus_naming_them() {
    let m = Mixed::new("mixed");
    m.create("L40S-1Q", None);

    let out = m.run(&["--json", "size-mode", L40S, "equal"]);

    assert_eq!(out.status.code(), Some(1));
    let json = common::json(&out);
    assert_eq!(json["kind"], "busy");
    assert_eq!(
        json["error"],
        format!(
            "cannot set the size mode of {L40S} to equal: the size mode of {L40S} cannot change \
             while it holds vGPUs ({})",
            common::vgpu_ids(&m.host, L40S).join(", ")
        )
    );
}

#[test]
fn size_mode_without_nvml_is_refused_naming_nvml() {
    let h = host("l40s-vendor-vfio");

    let out = common::vgpuctl(&h, &["--json", "size-mode", L40S, "mixed"]);
    let shown = common::json(&common::vgpuctl(&h, &["--json", "size-mode", L40S]));

    assert_eq!(out.status.code(), Some(1));
    let error = common::json(&out)["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with(&format!(
            "cannot set the size mode of {L40S} to mixed: NVML is needed to set the size mode \
             of {L40S}, but it is not loaded: "
        )),
        "{error}"
    );
    assert_eq!(shown["size_mode"], serde_json::Value::Null);
}

/// The placement id the simulator publishes for the vGPU on `vf` of the L40S.
fn sim_placement(host: &Host, vf: &str) -> serde_json::Value {
    let path = host
        .sim
        .root()
        .join(format!(".vgpu-sim/nvidia/{L40S}.json"));
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    state["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vf"] == vf)
        .map_or(serde_json::Value::Null, |v| v["placement_id"].clone())
}

/// Writes `1` to the L40S's `reset`: the GPU forgets its size mode, and no reboot runs
/// `restore`.
fn reset_gpu(m: &Mixed) {
    let reset = m
        .host
        .sim
        .root()
        .join(format!("sys/bus/pci/devices/{L40S}/reset"));
    std::fs::write(reset, "1").unwrap();
}

/// The L40S defined in mixed-size mode, then reset: it runs equal-size mode.
fn defined_mixed_after_a_reset() -> Mixed {
    let m = Mixed::new("equal");
    let defined = m.run(&["size-mode", L40S, "mixed", "--define"]);
    assert_eq!(
        defined.status.code(),
        Some(0),
        "{}",
        common::stderr(&defined)
    );
    reset_gpu(&m);
    m
}

#[test]
fn the_hook_puts_back_the_defined_size_mode_and_places_where_it_takes_the_least_room() {
    let m = defined_mixed_after_a_reset();
    let vf = common::vf("41", 0);

    let out = m.prepare_1q(&vf);

    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let mode = common::json(&m.run(&["--json", "size-mode", L40S]));
    assert_eq!(mode["size_mode"], "mixed");
    // The driver's default would be 0, where a 16 GiB vGPU starts.
    assert_eq!(sim_placement(&m.host, &vf), 17);
}

#[test]
fn the_hook_makes_no_vgpu_where_nvml_does_not_list_its_placements() {
    let failing = "[functions]\nnvmlDeviceGetVgpuTypeCreatablePlacements = \"unknown\"\n";
    let m = Mixed::with_nvml("mixed", failing);
    let vf = common::vf("41", 0);

    let out = m.prepare_1q(&vf);
    let types = common::json(&m.run(&["--json", "types", L40S]));

    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::stderr(&out).contains(&format!(
            "GPU {L40S} has room for 0 more vGPU(s) of type 1147, not 1: NVML does not say \
             where the type can be placed in mixed-size mode"
        )),
        "{}",
        common::stderr(&out)
    );
    assert_eq!(sim_placement(&m.host, &vf), serde_json::Value::Null);
    let one_q = types["gpus"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "NVIDIA L40S-1Q")
        .map(|t| (t["available"].clone(), t["limit"].clone()));
    let unknown = serde_json::json!({"kind": "placements-unknown"});
    assert_eq!(one_q, Some((0.into(), unknown)));
}

#[test]
fn migrate_begin_places_an_incoming_vgpu_where_it_keeps_the_most_room() {
    // The GPU holds a 24Q at 24 already: an operator's host is not empty.
    let m = Mixed::new("mixed");
    let (code, held) = m.create("L40S-24Q", Some("24"));
    assert_eq!(code, Some(0));
    let hooks = common::install_hook(
        &m.host,
        &["--nvml-library", m.nvml.library().to_str().unwrap()],
    );
    let vf = common::vf("41", 1);
    assert_ne!(held["id"], serde_json::json!(vf));

    let out = common::run_hook(
        hooks.path(),
        "vm1",
        "migrate",
        "begin",
        &common::domain(1, "acme", "L40S-1Q", std::slice::from_ref(&vf)),
    );

    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    // The driver's default would be 0, where the last 16 GiB placement starts.
    assert_eq!(sim_placement(&m.host, &vf), 17);
}

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

/// A host.toml for the L40S with `types`.
fn host_toml(m: &Mixed, types: &str) -> String {
    let path = m.host.state.path().join("host.toml");
    std::fs::write(
        &path,
        format!(
            "version = 1\n\n[configs.default]\n\n\
             [[configs.default.gpu]]\naddress = \"{L40S}\"\ntypes = {{ {types} }}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
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
    assert_eq!(mode["vgpus"].as_array().unwrap().len(), 3);
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
fn an_mdev_defined_at_a_placement_on_an_a10_vf_is_made_there_and_kept_for_mdevctl() {
    const A10: &str = "0000:81:00.0";
    let m = Mixed::on("mixed-size");

    let mode = m.run(&["size-mode", A10, "mixed"]);
    let made = m.run(&[
        "--json",
        "create",
        A10,
        "--type",
        "A10-1Q",
        "--placement",
        "5",
        "--define",
    ]);
    let json = common::json(&made);

    assert_eq!(mode.status.code(), Some(0), "{}", common::stderr(&mode));
    assert_eq!(made.status.code(), Some(0), "{}", common::stderr(&made));
    let uuid = json["id"].as_str().unwrap();
    let state = m
        .host
        .sim
        .root()
        .join(format!(".vgpu-sim/nvidia/{A10}.json"));
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    let placed = state["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["mdev"] == uuid)
        .map(|v| v["placement_id"].clone());
    assert_eq!(placed, Some(5.into()));
    // mdevctl's store: etc/mdevctl.d/<parent VF>/<uuid>.
    let store = m.host.state.path().join("etc/mdevctl.d");
    let parents = std::fs::read_dir(&store).unwrap();
    let files: Vec<_> = parents
        .map(|p| p.unwrap().path().join(uuid))
        .filter(|f| f.exists())
        .collect();
    assert_eq!(files.len(), 1, "{json}");
    let definition = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        definition.contains("\"nvidia/vgpu_params\": \"vgpu-placement-id=5\""),
        "{definition}"
    );
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
