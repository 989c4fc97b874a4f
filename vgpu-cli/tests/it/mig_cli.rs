//! MIG geometry in plans on `h200-mig` with the test NVML library as a view of the simulator
//! (`sim_root`), which owns the GPU instances as NVIDIA's driver does: `apply` makes the
//! instances and then the MIG-backed vGPUs, undoes both on a fault, and `restore` makes them
//! again after a reboot.

use std::process::Output;

use crate::common::{Host, command, host, json, supported_types, vgpu_ids};
use vgpu_testing::fake_nvml::FakeNvml;

const H200: &str = "0000:18:00.0";
const H200_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");

/// Seven 1g.18gb instances, each with an H200X-1-18C.
const SEVEN: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"1g.18gb\" = 7 }\ntypes = { \"H200X-1-18C\" = 7 }\n";

/// The same, as a vgpu-device-manager config: the types imply the instances.
const SEVEN_YAML: &str = "version: v1\nvgpu-configs:\n  seven:\n  - devices: all\n    vgpu-devices:\n      \"H200X-1-18C\": 7\n";

/// A simulated H200 and a test NVML reading it.
struct Mig {
    host: Host,
    fake: FakeNvml,
}

impl Mig {
    fn new() -> Self {
        let host = host("h200-mig");
        let fake = FakeNvml::new(&data_for(&host)).unwrap();
        Mig { host, fake }
    }

    fn vgpuctl(&self, args: &[&str]) -> Output {
        command(&self.host, args)
            .arg("--nvml-library")
            .arg(self.fake.library())
            .env_remove("VGPU_NVML_LIBRARY")
            .output()
            .unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.host.state.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Each GPU instance as NVML lists it: (profile, start), sorted.
    fn instances(&self) -> Vec<(String, u64)> {
        let list = json(&self.vgpuctl(&["list", "--json"]));
        let gpu = list["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["address"] == H200)
            .unwrap()
            .clone();
        let mut out: Vec<(String, u64)> = gpu["nvml"]["gpu_instances"]["value"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|gi| {
                (
                    gi["profile"]["value"].as_str().unwrap().to_owned(),
                    gi["placement_start"].as_u64().unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// The test NVML's data, a view of `host`'s simulator.
fn data_for(host: &Host) -> String {
    vgpu_testing::fake_nvml::with_sim_root(H200_DATA, host.sim.root())
}

fn one_g(starts: &[u64]) -> Vec<(String, u64)> {
    starts.iter().map(|s| ("1g.18gb".to_owned(), *s)).collect()
}

#[test]
fn apply_makes_seven_instances_then_seven_vgpus_and_a_second_apply_changes_nothing() {
    let mig = Mig::new();
    let file = mig.file("host.toml", SEVEN);

    let applied = mig.vgpuctl(&["apply", "-f", &file]);
    let planned = mig.vgpuctl(&["plan", "-f", &file]);

    assert_eq!(
        (
            applied.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len(),
            planned.status.code()
        ),
        (Some(0), one_g(&[0, 1, 2, 3, 4, 5, 6]), 7, Some(0)),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

#[test]
fn plan_shows_the_instance_steps_before_the_vgpus() {
    let mig = Mig::new();
    let file = mig.file("host.toml", SEVEN);

    let plan = json(&mig.vgpuctl(&["plan", "-f", &file, "--json"]));

    let actions: Vec<String> = plan["gpus"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let start = s["start"]
                .as_u64()
                .map(|n| format!("@{n}"))
                .unwrap_or_default();
            format!("{}{start}", s["action"].as_str().unwrap())
        })
        .collect();
    let mut expected = vec!["destroy-gpu-instance@0".to_owned()];
    expected.extend(
        [0, 1, 2, 3, 6]
            .iter()
            .map(|n| format!("create-gpu-instance@{n}")),
    );
    expected.extend(std::iter::repeat_n("create".to_owned(), 7));
    assert_eq!(actions, expected);
}

#[test]
fn a_vgpu_device_manager_config_implies_its_instances() {
    let mig = Mig::new();
    let file = mig.file("vgpu.yaml", SEVEN_YAML);

    let applied = mig.vgpuctl(&["apply", "-f", &file, "-c", "seven"]);

    assert_eq!(
        (
            applied.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len()
        ),
        (Some(0), one_g(&[0, 1, 2, 3, 4, 5, 6]), 7)
    );
}

#[test]
fn a_fault_half_way_undoes_the_vgpus_and_the_instances() {
    let mig = Mig::new();
    let file = mig.file("host.toml", SEVEN);
    mig.host
        .sim
        .control("fail-next 1 EIO */0000:18:01.2/nvidia/current_vgpu_type")
        .unwrap();

    let applied = mig.vgpuctl(&["apply", "-f", &file]);

    let mut before = one_g(&[4, 5]);
    before.push(("2g.35gb".to_owned(), 0));
    assert_eq!(
        (
            applied.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len(),
            std::fs::read_to_string(mig.host.state.path().join("etc/vgpu/mig/0000:18:00.0.json"))
                .ok()
        ),
        (Some(1), before, 0, None)
    );
}

#[test]
fn restore_after_a_reboot_makes_the_instances_at_their_placements_then_the_vgpus() {
    let mut mig = Mig::new();
    let file = mig.file("host.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &file]).status.code(), Some(0));
    // A reboot: the simulator mounted fresh (its instances as the profile has them, made
    // before boot), the test NVML reading it again, definitions kept.
    mig.host.sim = vgpu_sim::SimHost::mount_for_test("h200-mig");
    std::fs::remove_dir_all(mig.host.state.path().join("run")).unwrap();
    mig.fake = FakeNvml::new(&data_for(&mig.host)).unwrap();
    // Without the instances made before boot.
    for id in [9, 10, 3] {
        mig.host
            .sim
            .control(&format!("gpu-instance-remove {H200} {id}"))
            .unwrap();
    }
    let empty = mig.instances();

    let restored = mig.vgpuctl(&["restore"]);

    assert_eq!(
        (
            empty,
            restored.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len()
        ),
        (vec![], Some(0), one_g(&[0, 1, 2, 3, 4, 5, 6]), 7),
        "{}",
        String::from_utf8_lossy(&restored.stdout)
    );
}

/// A reboot into instances the definition does not name (the profile boots with 1g at
/// slices 4 and 5 and a 2g at slice 0): `restore` removes the 2g, keeps the 1g where the
/// definition has them, makes the rest, then every vGPU.
#[test]
fn restore_after_a_reboot_removes_instances_no_definition_names_first() {
    let mut mig = Mig::new();
    let file = mig.file("host.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &file]).status.code(), Some(0));
    mig.host.sim = vgpu_sim::SimHost::mount_for_test("h200-mig");
    std::fs::remove_dir_all(mig.host.state.path().join("run")).unwrap();
    mig.fake = FakeNvml::new(&data_for(&mig.host)).unwrap();
    let booted = mig.instances();

    let restored = mig.vgpuctl(&["restore"]);

    assert_eq!(
        (
            booted,
            restored.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len()
        ),
        (
            vec![
                ("1g.18gb".to_owned(), 4),
                ("1g.18gb".to_owned(), 5),
                ("2g.35gb".to_owned(), 0)
            ],
            Some(0),
            one_g(&[0, 1, 2, 3, 4, 5, 6]),
            7
        ),
        "{}",
        String::from_utf8_lossy(&restored.stdout)
    );
}

#[test]
fn eight_1g_instances_do_not_fit_and_the_plan_says_so() {
    let mig = Mig::new();
    let file = mig.file(
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"1g.18gb\" = 8 }\ntypes = { \"H200X-1-18C\" = 7 }\n",
    );

    let plan = json(&mig.vgpuctl(&["plan", "-f", &file, "--json"]));

    assert_eq!(
        (
            &plan["gpus"][0]["refusals"][0]["reason"],
            &plan["gpus"][0]["refusals"][0]["message"]
        ),
        (
            &serde_json::json!("mig-no-fit"),
            &serde_json::json!(
                "the MIG geometry does not fit: the GPU instances do not fit together on the GPU"
            )
        )
    );
}

#[test]
fn a_profile_the_gpu_lacks_is_refused_naming_those_it_has() {
    let mig = Mig::new();
    let file = mig.file(
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"2g.20gb\" = 1 }\ntypes = { \"H200X-1-18C\" = 1 }\n",
    );

    let plan = json(&mig.vgpuctl(&["plan", "-f", &file, "--json"]));

    assert_eq!(
        &plan["gpus"][0]["refusals"][0]["reason"],
        &serde_json::json!("mig-profile-unknown")
    );
}

/// Two 3g.71gb instances, as a mig-parted config.
const TWO_3G_PARTED: &str = "version: v1\nmig-configs:\n  two-3g:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"3g.71gb\": 2\n";

fn three_g(starts: &[u64]) -> Vec<(String, u64)> {
    starts.iter().map(|s| ("3g.71gb".to_owned(), *s)).collect()
}

#[test]
fn a_mig_parted_config_sets_the_geometry_and_leaves_the_vgpus() {
    let mig = Mig::new();
    let file = mig.file("mig.yaml", TWO_3G_PARTED);

    let applied = mig.vgpuctl(&["apply", "-f", &file, "-c", "two-3g"]);
    let again = mig.vgpuctl(&["plan", "-f", &file, "-c", "two-3g"]);

    assert_eq!(
        (applied.status.code(), mig.instances(), again.status.code()),
        (Some(0), three_g(&[0, 4]), Some(0)),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

#[test]
fn another_geometry_takes_the_vgpus_and_instances_away_then_makes_the_new_ones() {
    let mig = Mig::new();
    let seven = mig.file("host.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &seven]).status.code(), Some(0));
    let two = mig.file(
        "two.toml",
        "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"3g.71gb\" = 2 }\ntypes = {}\n",
    );

    let applied = mig.vgpuctl(&["apply", "-f", &two]);

    let defined: serde_json::Value = serde_json::from_slice(
        &std::fs::read(mig.host.state.path().join("etc/vgpu/mig/0000:18:00.0.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            applied.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len(),
            defined
        ),
        (
            Some(0),
            three_g(&[0, 4]),
            0,
            serde_json::json!({
                "version": 1,
                "enabled": true,
                "instances": [
                    {"profile": "3g.71gb", "start": 0},
                    {"profile": "3g.71gb", "start": 4}
                ]
            })
        )
    );
}

/// A vGPU on an instance the mig-parted geometry removes: mig-parted leaves vGPUs alone, so
/// the plan refuses rather than take the vGPU away.
#[test]
fn a_mig_parted_geometry_under_a_running_vgpu_is_refused() {
    let mig = Mig::new();
    let seven = mig.file("host.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &seven]).status.code(), Some(0));
    let file = mig.file("mig.yaml", TWO_3G_PARTED);

    let plan = json(&mig.vgpuctl(&["plan", "-f", &file, "-c", "two-3g", "--json"]));

    let refusal = &plan["gpus"][0]["refusals"][0];
    assert_eq!(
        (
            &refusal["reason"],
            &refusal["config"],
            refusal["vgpus"].as_array().map(Vec::len),
            &refusal["message"],
        ),
        (
            &serde_json::json!("mig-under-vgpus"),
            &serde_json::json!("two-3g"),
            Some(7),
            &serde_json::json!(
                "config \"two-3g\" changes only MIG geometry, and would remove GPU instance(s) \
                 1 (1g.18gb), 2 (1g.18gb), 3 (1g.18gb), 4 (1g.18gb), 5 (1g.18gb), 9 (1g.18gb), \
                 10 (1g.18gb) under vGPU(s) 0000:18:00.4, 0000:18:00.5, 0000:18:00.6, \
                 0000:18:00.7, 0000:18:01.0, 0000:18:01.1, 0000:18:01.2: remove those vGPUs \
                 first, or use a config that names both the geometry and the vGPUs"
            ),
        )
    );
}

/// Seven 1g vGPUs, then three 2g ones, as two vgpu-device-manager configs.
const SEVEN_THEN_THREE_YAML: &str = "version: v1\nvgpu-configs:\n  seven:\n  - devices: all\n    vgpu-devices:\n      \"H200X-1-18C\": 7\n  three:\n  - devices: all\n    vgpu-devices:\n      \"H200X-2-35C\": 3\n";

fn two_g(starts: &[u64]) -> Vec<(String, u64)> {
    starts.iter().map(|s| ("2g.35gb".to_owned(), *s)).collect()
}

/// Day two on a MIG GPU: another MIG-backed type is one apply: the 1g vGPUs go, their
/// instances go, three 2g instances are made, then the 2g vGPUs.
#[test]
fn a_vgpu_device_manager_type_change_to_another_profile_is_one_apply() {
    let mig = Mig::new();
    let file = mig.file("vgpu.yaml", SEVEN_THEN_THREE_YAML);
    assert_eq!(
        mig.vgpuctl(&["apply", "-f", &file, "-c", "seven"])
            .status
            .code(),
        Some(0)
    );

    let planned = mig.vgpuctl(&["plan", "-f", &file, "-c", "three"]);
    let applied = mig.vgpuctl(&["apply", "-f", &file, "-c", "three"]);
    let asserted = mig.vgpuctl(&["assert", "-f", &file, "-c", "three"]);

    assert_eq!(
        (
            planned.status.code(),
            applied.status.code(),
            asserted.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len()
        ),
        (Some(4), Some(0), Some(0), two_g(&[0, 2, 4]), 3),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

/// NVIDIA's single-type configs for the H200, one after the other (vgpu-device-manager's
/// format): MIG-backed types on four profiles, time-sliced types, and back. Each is one apply
/// (a time-sliced type implies MIG mode off); `types` lists the same supported set throughout.
#[test]
fn h200_single_type_configs_in_sequence_each_reach_their_config_in_one_apply() {
    let mig = Mig::new();
    let sequence = [
        ("H200X-1-18C", 7),
        ("H200X-141C", 1),
        ("H200X-2-35C", 3),
        ("H200X-3-71C", 2),
        ("H200X-7-141C", 1),
        ("H200X-14C", 10),
        ("H200X-1-18C", 7),
    ];
    let mut yaml = String::from("version: v1\nvgpu-configs:\n");
    for (name, count) in &sequence[..6] {
        yaml.push_str(&format!(
            "  {name}:\n  - devices: all\n    vgpu-devices:\n      \"{name}\": {count}\n"
        ));
    }
    let file = mig.file("vgpu.yaml", &yaml);
    let supported = supported_types(&mig.vgpuctl(&["types", H200, "--json"]));

    let mut steps = Vec::new();
    for (config, _) in &sequence {
        let applied = mig.vgpuctl(&["apply", "-f", &file, "-c", config]);
        let asserted = mig.vgpuctl(&["assert", "-f", &file, "-c", config]);
        steps.push((
            *config,
            applied.status.code(),
            asserted.status.code(),
            supported_types(&mig.vgpuctl(&["types", H200, "--json"])) == supported,
        ));
    }

    let reached: Vec<(&str, Option<i32>, Option<i32>, bool)> = sequence
        .iter()
        .map(|(config, _)| (*config, Some(0), Some(0), true))
        .collect();
    assert_eq!((steps, supported.len()), (reached, 16));
}

/// The same change back, from an explicit geometry and types in host.toml.
#[test]
fn a_host_toml_geometry_and_type_change_back_to_1g_is_one_apply() {
    let mig = Mig::new();
    let three = mig.file(
        "three.toml",
        "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"2g.35gb\" = 3 }\ntypes = { \"H200X-2-35C\" = 3 }\n",
    );
    let seven = mig.file("seven.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &three]).status.code(), Some(0));

    let applied = mig.vgpuctl(&["apply", "-f", &seven]);

    assert_eq!(
        (
            applied.status.code(),
            mig.instances(),
            vgpu_ids(&mig.host, H200).len()
        ),
        (Some(0), one_g(&[0, 1, 2, 3, 4, 5, 6]), 7),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

/// A change of geometry that fails at its last vGPU: every vGPU and instance comes back as
/// it was, the old geometry's definition too.
#[test]
fn a_change_of_geometry_failing_half_way_rolls_back_to_the_old_one() {
    let mig = Mig::new();
    let seven = mig.file("host.toml", SEVEN);
    assert_eq!(mig.vgpuctl(&["apply", "-f", &seven]).status.code(), Some(0));
    let definition = mig.host.state.path().join("etc/vgpu/mig/0000:18:00.0.json");
    let before = (
        mig.instances(),
        vgpu_ids(&mig.host, H200),
        std::fs::read(&definition).unwrap(),
    );
    let three = mig.file(
        "three.toml",
        "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"2g.35gb\" = 3 }\ntypes = { \"H200X-2-35C\" = 3 }\n",
    );
    mig.host
        .sim
        .control("fail-next 1 EIO */0000:18:00.6/nvidia/current_vgpu_type")
        .unwrap();

    let applied = mig.vgpuctl(&["apply", "-f", &three]);

    assert_eq!(
        (
            applied.status.code(),
            (
                mig.instances(),
                vgpu_ids(&mig.host, H200),
                std::fs::read(&definition).unwrap()
            )
        ),
        (Some(1), before)
    );
}

/// MIG mode off, and a mode change that waits for a GPU reset: `apply` takes the change back,
/// fails naming the reset, and leaves no MIG definition behind.
#[test]
fn turning_mig_on_when_the_driver_wants_a_reset_is_taken_back_and_refused() {
    let host = host("h200-mig");
    // Without GPU instances, MIG mode off: MIG mode changes only on a GPU that has none.
    for id in [9, 10, 3] {
        host.sim
            .control(&format!("gpu-instance-remove {H200} {id}"))
            .unwrap();
    }
    host.sim.control(&format!("mig-mode {H200} off")).unwrap();
    let data = format!("{}mig_reset_required = true\n", data_for(&host));
    let mig = Mig {
        fake: FakeNvml::new(&data).unwrap(),
        host,
    };
    let file = mig.file(
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\nmig = { \"1g.18gb\" = 1 }\ntypes = {}\n",
    );

    let planned = json(&mig.vgpuctl(&["plan", "-f", &file, "--json"]));
    let applied = mig.vgpuctl(&["apply", "-f", &file]);
    let mode = json(&mig.vgpuctl(&["list", "--json"]))["gpus"][0]["nvml"]["mig_mode"].clone();

    assert_eq!(
        (
            planned["gpus"][0]["steps"][0].clone(),
            applied.status.code(),
            String::from_utf8_lossy(&applied.stdout).contains("waits for a GPU reset"),
            mode,
            mig.host
                .state
                .path()
                .join("etc/vgpu/mig/0000:18:00.0.json")
                .exists()
        ),
        (
            serde_json::json!({"action": "mig-mode", "on": true}),
            Some(1),
            true,
            serde_json::json!({"value": {"current": false, "pending": false}}),
            false
        ),
        "{}",
        String::from_utf8_lossy(&applied.stdout)
    );
}

/// A time-sliced type in host.toml on a GPU left in MIG mode: refused where the file asks,
/// before anything goes; with `mig = "disabled"` it is planned.
#[test]
fn a_time_sliced_type_on_a_gpu_left_in_mig_mode_is_refused_and_planned_with_mig_off() {
    let mig = Mig::new();
    let head =
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:18:00.0\"\n";
    let left = mig.file(
        "left.toml",
        &format!("{head}types = {{ \"H200X-141C\" = 1 }}\n"),
    );
    let off = mig.file(
        "off.toml",
        &format!("{head}mig = \"disabled\"\ntypes = {{ \"H200X-141C\" = 1 }}\n"),
    );

    let refused = json(&mig.vgpuctl(&["plan", "-f", &left, "--json"]));
    let planned = mig.vgpuctl(&["plan", "-f", &off]);

    assert_eq!(
        (
            &refused["gpus"][0]["refusals"][0]["reason"],
            &refused["gpus"][0]["refusals"][0]["at"],
            planned.status.code()
        ),
        (
            &serde_json::json!("mig-on-time-sliced"),
            &serde_json::json!({"line": 5, "column": 11}),
            Some(4)
        )
    );
}
