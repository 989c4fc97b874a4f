//! NVIDIA's mixed-size mode through `vgpuctl`, on the simulated `l40s-vendor-vfio` host with
//! the test NVML as a view of the simulator: `size-mode` shows and sets the mode, refused
//! while vGPUs exist and without NVML; `create` places a vGPU where it takes the least room
//! from larger ones (or at `--placement`); `types` gives placements; two sizes share one GPU.
//! Reboots, resets and `restore` are in `persistence`; plans, `apply` and what the mode
//! excludes in `plans`.

use std::process::Output;

use vgpu_testing::fake_nvml::FakeNvml;

use crate::common::{self, Host, host};

mod persistence;
mod plans;

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
