//! `vgpuctl plan`, `apply`, `assert` and `place` as processes on a simulated host: exit codes
//! (0 matches, 4 changes pending, 1 refused or different), renderings, idempotence, bad files.
//!
//! The plan renderings are pinned in golden files; `VGPU_REGENERATE=1` rewrites them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vgpu_sim::SimHost;

use crate::common;

struct Host {
    sim: SimHost,
    state: tempfile::TempDir,
}

fn host(profile: &str) -> Host {
    Host {
        sim: SimHost::mount_for_test(profile),
        state: tempfile::tempdir().unwrap(),
    }
}

/// `vgpuctl` on `host`, with none of its settings from the environment.
fn base(host: &Host) -> Command {
    let mut command = Command::new(common::vgpuctl_exe());
    command
        .arg("--root")
        .arg(host.sim.root())
        .arg("--state-root")
        .arg(host.state.path())
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT")
        .env_remove("VGPU_CONNECT");
    command
}

fn vgpuctl(host: &Host, args: &[&str]) -> Output {
    base(host)
        // An embedded libvirt with no domains: nothing holds a vGPU.
        .arg("--connect")
        .arg(format!(
            "qemu:///embed?root={}/libvirt",
            host.state.path().display()
        ))
        .args(args)
        .output()
        .unwrap()
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).replace(&example(""), "<examples>/")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// The golden file `name`, rewritten from `actual` first with `VGPU_REGENERATE` set.
fn expected(name: &str, actual: &str) -> String {
    let path = golden(name);
    if std::env::var_os("VGPU_REGENERATE").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (run with VGPU_REGENERATE=1)", path.display()))
}

fn write(host: &Host, name: &str, text: &str) -> String {
    let path = host.state.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn plan_on_fresh_mixed_host_exits_4_listing_changes() {
    let host = host("mixed");

    let out = vgpuctl(&host, &["plan", "-f", &example("host.toml")]);

    let text = stdout(&out);
    assert_eq!(
        (out.status.code(), text.clone()),
        (Some(4), expected("plan-mixed.txt", &text))
    );
}

#[test]
fn plan_json_on_fresh_mixed_host_is_pinned() {
    let host = host("mixed");

    let out = vgpuctl(&host, &["--json", "plan", "-f", &example("host.toml")]);

    let text = stdout(&out);
    assert_eq!(
        (out.status.code(), text.clone()),
        (Some(4), expected("plan-mixed.json", &text))
    );
}

#[test]
fn plan_desktops_on_mixed_host_sets_flex_quotas() {
    let host = host("mixed");

    let out = vgpuctl(
        &host,
        &["plan", "-f", &example("host.toml"), "-c", "desktops"],
    );

    let text = stdout(&out);
    assert_eq!(
        (out.status.code(), text.clone()),
        (Some(4), expected("plan-mixed-desktops.txt", &text))
    );
}

#[test]
fn plan_json_quota_steps_name_vf_and_sizes() {
    let host = host("mixed");

    let out = vgpuctl(
        &host,
        &[
            "--json",
            "plan",
            "-f",
            &example("host.toml"),
            "-c",
            "desktops",
        ],
    );

    let plan = json(&out);
    let flex = &plan["gpus"][2];
    assert_eq!(
        (
            flex["gpu"].clone(),
            flex["vf_memory_mib"].clone(),
            flex["steps"][1].clone()
        ),
        (
            serde_json::json!("0001:03:00.0"),
            serde_json::json!([8192, 2048, 2048, 2048, 2048]),
            serde_json::json!({"action": "quota", "vf": 2, "address": "0001:03:00.2",
                "from_mib": null, "to_mib": 2048})
        )
    );
}

#[test]
fn assert_names_a_wrong_quota_by_vf_wanted_and_found() {
    let host = host("flex-sriov");
    let entry = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"default\"\n";
    let applied = write(
        &host,
        "applied.toml",
        &format!("{entry}sizes = \"4x2GiB\"\n"),
    );
    let asked = write(
        &host,
        "asked.toml",
        &format!("{entry}sizes = [\"2GiB\", \"4GiB\", \"2GiB\", \"2GiB\"]\n"),
    );
    assert_eq!(
        vgpuctl(&host, &["apply", "-f", &applied]).status.code(),
        Some(0)
    );

    let out = vgpuctl(&host, &["assert", "-f", &asked]);

    assert_eq!(
        (out.status.code(), stdout(&out)),
        (
            Some(1),
            "0000:4d:00.0: VF 2 (0000:4d:00.2) has 2 GiB of local memory, not 4 GiB\n".to_owned()
        )
    );
}

#[test]
fn apply_then_plan_exits_0_and_assert_matches() {
    let host = host("mixed");
    let file = example("host.toml");
    let applied = vgpuctl(&host, &["apply", "-f", &file]);

    let plan = vgpuctl(&host, &["plan", "-f", &file]);
    let assert = vgpuctl(&host, &["assert", "-f", &file]);

    assert_eq!(
        (
            applied.status.code(),
            plan.status.code(),
            assert.status.code(),
            stdout(&assert)
        ),
        (
            Some(0),
            Some(0),
            Some(0),
            "the host matches config \"default\"\n".to_owned()
        )
    );
}

#[test]
fn apply_progress_lines_name_each_step_without_a_terminal() {
    let host = host("t4-legacy");
    let file = write(
        &host,
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:d8:00.0\"\nsizes = \"1x16GiB\"\n",
    );

    let out = vgpuctl(&host, &["apply", "-f", &file]);

    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        (
            out.status.code(),
            lines[0].starts_with("0000:d8:00.0: create   GRID T4-16Q (auto) ("),
            &lines[1..]
        ),
        (
            Some(0),
            true,
            &[
                "0000:d8:00.0: done",
                "config \"default\": 1 GPU(s) changed, 0 unchanged, 0 skipped, 0 failed"
            ][..]
        )
    );

    // A vGPU destroyed is named once, by its id.
    let made = lines[0]
        .rsplit_once('(')
        .map(|(_, id)| id.trim_end_matches(')').to_owned())
        .unwrap();
    let smaller = write(
        &host,
        "smaller.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:d8:00.0\"\nsizes = \"1x8GiB\"\n",
    );
    let again = vgpuctl(&host, &["apply", "-f", &smaller]);
    assert_eq!(
        stdout(&again).lines().next(),
        Some(format!("0000:d8:00.0: destroy  {made} (GRID T4-16Q)").as_str()),
        "{}",
        stdout(&again)
    );
}

#[test]
fn apply_twice_reports_every_gpu_unchanged() {
    let host = host("mixed");
    let file = example("host.toml");
    vgpuctl(&host, &["apply", "-f", &file]);

    let out = vgpuctl(&host, &["--json", "apply", "-f", &file]);

    let outcomes: Vec<String> = json(&out)["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        (out.status.code(), outcomes),
        (Some(0), vec!["unchanged".to_owned(); 4])
    );
}

#[test]
fn apply_dry_run_changes_nothing() {
    let host = host("t4-legacy");

    let out = vgpuctl(
        &host,
        &[
            "apply",
            "--dry-run",
            "-f",
            &example("vgpu-device-manager.yaml"),
        ],
    );

    let after = vgpuctl(&host, &["plan", "-f", &example("vgpu-device-manager.yaml")]);
    // `apply --dry-run` answers as `plan` does: changes are pending, and still are.
    assert_eq!((out.status.code(), after.status.code()), (Some(4), Some(4)));
}

/// A type no GPU offers is a type error, with what the GPUs offer, not a full host.
#[test]
fn place_of_a_type_no_gpu_offers_names_the_offered_types() {
    let host = host("t4-legacy");
    let out = vgpuctl(
        &host,
        &["--json", "place", "--count", "1", "--type", "T4-9Q"],
    );
    let error = json(&out)["error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        (
            out.status.code(),
            json(&out)["kind"].clone(),
            error.starts_with("cannot place 1 vGPU(s): no GPU offers T4-9Q; they offer: "),
            error.contains("GRID T4-2Q"),
        ),
        (Some(1), serde_json::json!("not-found"), true, true),
        "{error}"
    );
}

#[test]
fn place_of_no_vgpus_or_an_unknown_series_is_bad_input() {
    let host = host("t4-legacy");

    let none = vgpuctl(
        &host,
        &["--json", "place", "--count", "0", "--type", "T4-2Q"],
    );
    let series = vgpuctl(
        &host,
        &[
            "--json",
            "place",
            "--count",
            "1",
            "--framebuffer",
            "2GiB",
            "--series",
            "X",
        ],
    );

    assert_eq!(
        (
            none.status.code(),
            json(&none)["kind"].clone(),
            series.status.code(),
            json(&series)["error"].clone()
        ),
        (
            Some(1),
            serde_json::json!("bad-input"),
            Some(1),
            serde_json::json!("\"X\" is not an NVIDIA series: A, B, C or Q")
        )
    );
}

#[test]
fn assert_names_each_difference_and_exits_1() {
    let host = host("t4-legacy");

    let out = vgpuctl(
        &host,
        &[
            "assert",
            "-f",
            &example("vgpu-device-manager.yaml"),
            "-c",
            "split",
        ],
    );

    assert_eq!(
        (out.status.code(), stdout(&out)),
        (
            Some(1),
            "0000:3b:00.0: lacks 4 x GRID T4-4Q\n0000:d8:00.0: lacks 2 x GRID T4-8Q\n".to_owned()
        )
    );
}

#[test]
fn device_manager_config_applied_then_asserted() {
    let host = host("t4-legacy");
    let file = example("vgpu-device-manager.yaml");
    let applied = vgpuctl(&host, &["apply", "-f", &file, "-c", "split"]);

    let assert = vgpuctl(&host, &["assert", "-f", &file, "-c", "split"]);

    assert_eq!(
        (applied.status.code(), assert.status.code()),
        (Some(0), Some(0))
    );
}

#[test]
fn plan_bad_file_names_file_line_and_column() {
    let host = host("t4-legacy");
    let file = write(
        &host,
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"4x12GB\"\n",
    );

    let out = vgpuctl(&host, &["plan", "-f", &file]);

    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            format!(
                "vgpuctl: error: {file}:5:9: \"12GB\" has no unit GiB or MiB: expected a size such as \"12GiB\", \"512MiB\" or \"4x12GiB\" (count x size)\n"
            )
        )
    );
}

#[test]
fn apply_unknown_type_exits_1_naming_its_place_and_changes_nothing() {
    let host = host("t4-legacy");
    let file = write(
        &host,
        "host.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-3Q\" = 1 }\n",
    );

    let out = vgpuctl(&host, &["apply", "-f", &file]);

    let plan = vgpuctl(&host, &["--json", "plan", "-f", &file]);
    assert_eq!(
        (
            out.status.code(),
            stderr(&out).starts_with(&format!(
                "vgpuctl: error: cannot apply config \"default\": the plan of config \"default\" cannot be applied: {file}:5:11: 0000:3b:00.0: no vGPU type \"T4-3Q\""
            )),
            json(&plan)["changes"].clone()
        ),
        (Some(1), true, serde_json::json!(0))
    );
}

#[test]
fn plan_unknown_config_exits_1_with_hint() {
    let host = host("t4-legacy");

    let out = vgpuctl(
        &host,
        &[
            "plan",
            "-f",
            &example("vgpu-device-manager.yaml"),
            "-c",
            "huge",
        ],
    );

    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            format!(
                "vgpuctl: error: {} has no config \"huge\"; it has: T4-1Q, default, none, split\nhint: choose a config with -c NAME\n",
                example("vgpu-device-manager.yaml")
            )
        )
    );
}

#[test]
fn place_pack_json_names_gpus_and_vfs() {
    let host = host("l40s-vendor-vfio");

    let out = vgpuctl(
        &host,
        &["--json", "place", "--count", "2", "--framebuffer", "24GiB"],
    );

    assert_eq!(
        (out.status.code(), json(&out)),
        (
            Some(0),
            serde_json::json!({"picks": [
                {"gpu": "0000:41:00.0", "type_id": "1155", "type_name": "NVIDIA L40S-24Q",
                 "framebuffer_mib": 24576, "vf": "0000:41:00.4", "needs_scheduler": null,
                 "placement_id": null},
                {"gpu": "0000:41:00.0", "type_id": "1155", "type_name": "NVIDIA L40S-24Q",
                 "framebuffer_mib": 24576, "vf": "0000:41:00.5", "needs_scheduler": null,
                 "placement_id": null}
            ]})
        )
    );
}

#[test]
fn place_spread_on_numa_node_and_apply_creates() {
    let host = host("l40s-vendor-vfio");

    let out = vgpuctl(
        &host,
        &[
            "place", "--count", "2", "--type", "L40S-12Q", "--numa", "1", "--policy", "spread",
            "--apply",
        ],
    );

    let rest = vgpuctl(
        &host,
        &[
            "--json", "place", "--count", "2", "--type", "L40S-12Q", "--numa", "1",
        ],
    );
    let vfs: Vec<String> = json(&rest)["picks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["vf"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        (out.status.code(), vfs),
        (
            Some(0),
            vec!["0000:c1:00.6".to_owned(), "0000:c1:00.7".to_owned()]
        )
    );
}

#[test]
fn place_more_than_fit_exits_1() {
    let host = host("t4-legacy");

    let out = vgpuctl(&host, &["place", "--count", "3", "--framebuffer", "16GiB"]);

    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            "vgpuctl: error: cannot place 3 vGPU(s): 3 vGPU(s) asked, the GPUs can take 2: \
             0000:3b:00.0 takes 1 (the type's maximum is 1 per GPU); 0000:d8:00.0 takes 1 (the \
             type's maximum is 1 per GPU)\nhint: `vgpuctl types GPU` shows what each GPU can \
             still take\n"
                .to_owned()
        )
    );
}

/// A selection that matches no GPU is a typo until marked optional: `model = "H200"` on a
/// host without one fails `plan` and `assert`; with `optional = true` it is a warning.
#[test]
fn selection_matching_no_gpu_fails_unless_optional() {
    let host = host("t4-legacy");
    let typo = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"H200\"\ntypes = { \"H200X-1-18C\" = 1 }\n";
    let optional = typo.replace("model = \"H200\"\n", "model = \"H200\"\noptional = true\n");
    let typo_file = write(&host, "typo.toml", typo);
    let optional_file = write(&host, "optional.toml", &optional);

    let plan = vgpuctl(&host, &["plan", "-f", &typo_file]);
    let assert = vgpuctl(&host, &["assert", "-f", &typo_file]);
    let warned = vgpuctl(&host, &["plan", "-f", &optional_file]);

    assert_eq!(
        (
            plan.status.code(),
            stdout(&plan).contains(
                "typo.toml:3:1: model \"H200\" matches no GPU (assert and apply fail; optional = true allows it)\n"
            ),
            assert.status.code(),
            warned.status.code(),
            stdout(&warned).contains("optional.toml:3:1: warning: model \"H200\" matches no GPU\n"),
        ),
        (Some(1), true, Some(1), Some(0), true),
        "{}{}",
        stdout(&plan),
        stdout(&warned)
    );
}

/// `assert --json` gives each difference as an object: the step that would fix it, and how
/// many times, beside the words.
#[test]
fn assert_json_lists_differences_as_objects() {
    let host = host("t4-legacy");
    let file = write(
        &host,
        "t4.toml",
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:3b:00.0\"\ntypes = { \"T4-2Q\" = 3 }\n",
    );

    let out = vgpuctl(&host, &["--json", "assert", "-f", &file]);
    let value = json(&out);

    assert_eq!(
        (
            out.status.code(),
            value["matches"].clone(),
            value["differences"][0]["step"]["action"].clone(),
            value["differences"][0]["step"]["type_name"].clone(),
            value["differences"][0]["count"].clone(),
            value["differences"][0]["difference"].clone(),
        ),
        (
            Some(1),
            serde_json::json!(false),
            serde_json::json!("create"),
            serde_json::json!("GRID T4-2Q"),
            serde_json::json!(3),
            serde_json::json!("lacks 3 x GRID T4-2Q"),
        ),
        "{value}"
    );
}

const L40S: &str = "0000:41:00.0";

/// Every type the first L40S supports, as `types` names them (without `NVIDIA `), with its
/// maximum per GPU.
fn l40s_types(host: &Host) -> Vec<(String, u32)> {
    let types = json(&vgpuctl(host, &["types", L40S, "--json"]));
    types["gpus"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().trim_start_matches("NVIDIA ");
            let max = u32::try_from(t["max_instances"].as_u64().unwrap()).unwrap();
            (name.to_owned(), max)
        })
        .collect()
}

/// vgpu-device-manager configs, each `count` vGPUs of one type on the first GPU.
fn device_manager_yaml(configs: &[(&str, &str, u32)]) -> String {
    let mut yaml = String::from("version: v1\nvgpu-configs:\n");
    for (config, type_name, count) in configs {
        yaml.push_str(&format!(
            "  {config}:\n  - devices: [0]\n    vgpu-devices:\n      \"{type_name}\": {count}\n"
        ));
    }
    yaml
}

/// `vgpuctl` without libvirt: no domain holds anything, and no helper runs for each command.
fn local(host: &Host, args: &[&str]) -> Output {
    base(host).args(args).output().unwrap()
}

/// The vGPUs on `gpu`: (id, type id), in the order `list` gives them.
fn partition(host: &Host, gpu: &str) -> Vec<(String, String)> {
    let list = json(&local(host, &["list", "--json"]));
    common::vgpu_types(common::gpu(&list, gpu))
}

/// Without NVML, every type change on a vendor-VFIO GPU is reached in one apply: the types
/// sysfs hides once the GPU holds vGPUs come from the offer recorded while it was empty.
#[test]
fn device_manager_l40s_configs_in_sequence_each_reach_their_config_in_one_apply() {
    let host = host("l40s-vendor-vfio");
    // Every other type, in the order `types` lists them: each class (B, Q, A, C) and both
    // directions of size, at half the time of all 30.
    let types: Vec<(String, u32)> = l40s_types(&host).into_iter().step_by(2).collect();
    let configs: Vec<(&str, &str, u32)> = types
        .iter()
        .map(|(name, max)| (name.as_str(), name.as_str(), *max))
        .collect();
    let file = write(&host, "l40s.yaml", &device_manager_yaml(&configs));

    let mut reached = Vec::new();
    for (name, _) in &types {
        let applied = local(&host, &["apply", "-f", &file, "-c", name]);
        let asserted = local(&host, &["assert", "-f", &file, "-c", name]);
        reached.push((name.clone(), applied.status.code(), asserted.status.code()));
    }

    let all_reached: Vec<(String, Option<i32>, Option<i32>)> = types
        .iter()
        .map(|(n, _)| (n.clone(), Some(0), Some(0)))
        .collect();
    assert_eq!((types.len(), reached), (15, all_reached));
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 6,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Random pairs of single-type partitions of an L40S, with the test NVML as a view of the
    /// simulator or without NVML, some asking for more than the type holds, with a fault at a
    /// random VF or none: `plan` accepts exactly what `apply` reaches, in one run; a fault
    /// that fires leaves the old partition intact.
    #[test]
    fn l40s_partition_change_is_planned_exactly_when_apply_reaches_it(
        from in 0usize..30,
        from_pick in 0u32..1000,
        to in 0usize..30,
        to_pick in 0u32..1000,
        fault in proptest::option::of(0usize..32),
        nvml in proptest::bool::ANY,
    ) {
        let host = host("l40s-vendor-vfio");
        let fake = nvml.then(|| {
            vgpu_testing::fake_nvml::FakeNvml::on_sim("", host.sim.root()).unwrap()
        });
        let run = |args: &[&str]| {
            let mut command = base(&host);
            if let Some(fake) = &fake {
                command.arg("--nvml-library").arg(fake.library());
            }
            command.args(args).output().unwrap()
        };
        let types = l40s_types(&host);
        let (from_name, from_max) = &types[from];
        let (to_name, to_max) = &types[to];
        let from_count = 1 + from_pick % from_max;
        // One more than the type holds is in range: a plan that must be refused.
        let to_count = 1 + to_pick % (to_max + 1);
        let yaml = device_manager_yaml(&[
            ("from", from_name, from_count),
            ("to", to_name, to_count),
        ]);
        let file = write(&host, "pair.yaml", &yaml);
        proptest::prop_assert_eq!(
            run(&["apply", "-f", &file, "-c", "from"]).status.code(),
            Some(0)
        );
        let before = partition(&host, L40S);
        let list = json(&local(&host, &["list", "--json"]));
        let vfs = list["gpus"][0]["vfs"].as_array().unwrap().clone();
        if let Some(i) = fault {
            let vf = vfs[i % vfs.len()]["address"].as_str().unwrap();
            host.sim
                .control(&format!("fail-next 1 EIO */{vf}/nvidia/current_vgpu_type"))
                .unwrap();
        }

        let planned = run(&["plan", "-f", &file, "-c", "to"]).status.code();
        let applied = run(&["apply", "-f", &file, "-c", "to"]).status.code();
        let asserted = run(&["assert", "-f", &file, "-c", "to"]).status.code();
        let after = partition(&host, L40S);
        let control = std::fs::read_to_string(host.sim.root().join(".vgpu-sim/control")).unwrap();
        let fired = fault.is_some() && !control.contains("fail-next");

        let accepted = planned != Some(1);
        proptest::prop_assert_eq!(accepted, to_count <= *to_max);
        match (accepted, fired) {
            (true, false) => proptest::prop_assert_eq!((applied, asserted), (Some(0), Some(0))),
            _ => proptest::prop_assert_eq!((applied, &after), (Some(1), &before)),
        }
    }
}
