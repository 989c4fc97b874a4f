//! `vgpuctl` with NVML: `sched` (golden files for both renderings), `list` with NVML facts or
//! without NVML, and MIG-backed `create`, on simulated hosts with the test NVML library
//! (`vgpu-nvml-fake`) named by `--nvml-library`, reading each simulated host (`sim_root`).

use crate::common;

use std::process::Output;

use crate::common::{Host, assert_golden, command, host, json, stderr};
use vgpu_testing::fake_nvml::FakeNvml;

const L40S: &str = "0000:41:00.0";
const H200: &str = "0000:18:00.0";
const L40S_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/l40s-vendor-vfio.toml");
const H200_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");

/// `vgpuctl --nvml-library <fake> <args>`.
fn with_nvml(host: &Host, fake: &FakeNvml, args: &[&str]) -> Output {
    command(host, args)
        .arg("--nvml-library")
        .arg(fake.library())
        .env_remove("VGPU_NVML_LIBRARY")
        .output()
        .unwrap()
}

fn code_and_stdout(output: &Output) -> (u8, String) {
    (
        u8::try_from(output.status.code().unwrap()).unwrap(),
        String::from_utf8(output.stdout.clone()).unwrap(),
    )
}

/// The simulated `l40s-vendor-vfio` host and the test NVML reading it.
fn l40s() -> (Host, FakeNvml) {
    let host = host("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(L40S_DATA, host.sim.root()).unwrap();
    (host, fake)
}

/// The test NVML reading `host`, with `data` for what the simulator does not know.
fn nvml_on(host: &Host, data: &str) -> FakeNvml {
    FakeNvml::on_sim(data, host.sim.root()).unwrap()
}

#[test]
fn sched_table_l40s_matches_golden() {
    let (host, fake) = l40s();
    assert_golden(
        "sched-l40s.txt",
        0,
        code_and_stdout(&with_nvml(&host, &fake, &["sched", L40S])),
    );
}

#[test]
fn sched_json_l40s_matches_golden() {
    let (host, fake) = l40s();
    assert_golden(
        "sched-l40s.json",
        0,
        code_and_stdout(&with_nvml(&host, &fake, &["sched", L40S, "--json"])),
    );
}

#[test]
fn sched_set_equal_share_matches_golden() {
    let (host, fake) = l40s();
    assert_golden(
        "sched-set-equal-share.txt",
        0,
        code_and_stdout(&with_nvml(
            &host,
            &fake,
            &["sched", L40S, "--policy", "equal-share", "--timeslice", "2"],
        )),
    );
}

#[test]
fn sched_set_json_matches_golden() {
    let (host, fake) = l40s();
    assert_golden(
        "sched-set-equal-share.json",
        0,
        code_and_stdout(&with_nvml(
            &host,
            &fake,
            &[
                "sched",
                L40S,
                "--policy",
                "equal-share",
                "--timeslice",
                "2",
                "--json",
            ],
        )),
    );
}

#[test]
fn sched_set_fixed_share_asks_nvml_exactly() {
    let (host, fake) = l40s();
    with_nvml(
        &host,
        &fake,
        &["sched", "41:00.0", "--policy", "fixed-share"],
    );
    assert_eq!(
        fake.calls().unwrap(),
        "{\"function\":\"nvmlDeviceSetVgpuSchedulerState\",\"gpu\":\"0000:41:00.0\",\
         \"policy\":3,\"arr_mode\":0,\"timeslice_ns\":0}\n"
    );
}

#[test]
fn sched_after_set_shows_the_new_policy() {
    let (host, fake) = l40s();
    with_nvml(
        &host,
        &fake,
        &["sched", L40S, "--policy", "equal-share", "--timeslice", "5"],
    );
    let shown = json(&with_nvml(&host, &fake, &["sched", L40S, "--json"]));
    assert_eq!(
        (
            &shown["scheduler"]["policy"],
            &shown["scheduler"]["timeslice_ns"]
        ),
        (
            &serde_json::json!("equal-share"),
            &serde_json::json!({"value": 5_000_000})
        )
    );
}

#[test]
fn sched_set_with_vgpu_running_exits_1_naming_it() {
    let (host, fake) = l40s();
    let created = with_nvml(&host, &fake, &["create", L40S, "--type", "L40S-24Q"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let refused = with_nvml(&host, &fake, &["sched", L40S, "--policy", "equal-share"]);
    assert_eq!(
        (
            refused.status.code(),
            stderr(&refused),
            fake.calls().unwrap()
        ),
        (
            Some(1),
            "vgpuctl: error: cannot set the vGPU scheduler of 0000:41:00.0 to equal-share: \
             the vGPU scheduler of 0000:41:00.0 cannot change while vGPUs run on it \
             (0000:41:00.4, NVML vGPU instance 16644)\n\
             hint: shut down the VMs using the GPU's vGPUs and destroy them first\n"
                .to_owned(),
            String::new()
        )
    );
}

#[test]
fn sched_set_timeslice_with_best_effort_exits_1() {
    let (host, fake) = l40s();
    let refused = with_nvml(
        &host,
        &fake,
        &["sched", L40S, "--policy", "best-effort", "--timeslice", "2"],
    );
    assert_eq!(
        (refused.status.code(), stderr(&refused)),
        (
            Some(1),
            "vgpuctl: error: cannot set the vGPU scheduler of 0000:41:00.0 to best-effort: \
             time slice 2 ms for best-effort on 0000:41:00.0: best-effort takes no time \
             slice (equal-share and fixed-share do)\n"
                .to_owned()
        )
    );
}

#[test]
fn sched_timeslice_without_policy_is_usage_error() {
    let (host, fake) = l40s();
    let refused = with_nvml(&host, &fake, &["sched", L40S, "--timeslice", "2"]);
    assert_eq!(refused.status.code(), Some(2));
}

#[test]
fn sched_set_refused_by_nvml_exits_1_with_nvml_reason() {
    let host = host("l40s-vendor-vfio");
    let fake = nvml_on(
        &host,
        &format!("{L40S_DATA}\n[functions]\nnvmlDeviceSetVgpuSchedulerState = \"no-permission\"\n"),
    );
    let refused = with_nvml(&host, &fake, &["sched", L40S, "--policy", "equal-share"]);
    assert_eq!(
        (refused.status.code(), stderr(&refused)),
        (
            Some(1),
            "vgpuctl: error: cannot set the vGPU scheduler of 0000:41:00.0 to equal-share: \
             0000:41:00.0: nvmlDeviceSetVgpuSchedulerState: not permitted \
             (NVML_ERROR_NO_PERMISSION): run as root\n\
             hint: run as root\n"
                .to_owned()
        )
    );
}

#[test]
fn sched_without_nvml_exits_1_saying_why() {
    let host = host("l40s-vendor-vfio");
    let output = command(&host, &["sched", L40S])
        .env_remove("VGPU_NVML_LIBRARY")
        .output()
        .unwrap();
    let root = host.sim.root().display().to_string();
    assert_eq!(
        (
            output.status.code(),
            stderr(&output).replace(&root, "<root>")
        ),
        (
            Some(1),
            "vgpuctl: error: NVML is needed to read the vGPU scheduler of 0000:41:00.0, but \
             it is not loaded: the host root is <root>, not /: NVML describes only the local \
             driver\n\
             hint: is the NVIDIA vGPU manager installed? --nvml-library names another NVML\n"
                .to_owned()
        )
    );
}

#[test]
fn sched_state_not_supported_exits_1_with_nvml_reason() {
    let host = host("l40s-vendor-vfio");
    let fake = nvml_on(
        &host,
        &format!("{L40S_DATA}\n[functions]\nnvmlDeviceGetVgpuSchedulerState = \"not-supported\"\n"),
    );
    let output = with_nvml(&host, &fake, &["sched", L40S]);
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(1),
            "vgpuctl: error: cannot read the vGPU scheduler of 0000:41:00.0: 0000:41:00.0: \
             nvmlDeviceGetVgpuSchedulerState: not supported by this GPU or its mode \
             (NVML_ERROR_NOT_SUPPORTED)\n"
                .to_owned()
        )
    );
}

#[test]
fn list_json_with_fake_nvml_shows_nvml_facts_per_gpu() {
    let (host, fake) = l40s();
    let list = json(&with_nvml(&host, &fake, &["list", "--json"]));
    let gpu = common::gpu(&list, L40S);
    assert_eq!(
        (
            &list["nvml"]["loaded"],
            &gpu["nvml"]["name"],
            &gpu["nvml"]["scheduler"]["value"]["policy"],
            &gpu["nvml"]["supported_types"]["value"][2]["max_instances_per_vm"],
            &gpu["nvml"]["gpu_instances"]["unavailable"]["cause"],
        ),
        (
            &serde_json::json!(true),
            &serde_json::json!({"value": "NVIDIA L40S"}),
            &serde_json::json!("best-effort"),
            &serde_json::json!({"value": 1}),
            &serde_json::json!("not-supported"),
        )
    );
}

#[test]
fn list_with_nvml_init_failing_says_why_and_lists_from_sysfs() {
    let host = host("l40s-vendor-vfio");
    let fake = nvml_on(&host, &format!("init = \"driver-not-loaded\"\n{L40S_DATA}"));
    let output = with_nvml(&host, &fake, &["list"]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        (
            output.status.code(),
            text.lines().filter(|l| l.starts_with("0000:")).count(),
            text.lines().any(|l| l
                == "NVML not used (cannot load NVML: NVIDIA driver is not loaded); vGPU facts \
                    come from sysfs and the built-in catalog.")
        ),
        (Some(0), 2, true)
    );
}

#[test]
fn list_json_with_nvml_init_failing_has_null_nvml_facts() {
    let host = host("l40s-vendor-vfio");
    let fake = nvml_on(&host, &format!("init = \"driver-not-loaded\"\n{L40S_DATA}"));
    let list = json(&with_nvml(&host, &fake, &["list", "--json"]));
    assert_eq!(
        (&list["nvml"]["reason"], &common::gpu(&list, L40S)["nvml"]),
        (
            &serde_json::json!("cannot load NVML: NVIDIA driver is not loaded"),
            &serde_json::Value::Null
        )
    );
}

#[test]
fn types_json_h200_marks_mig_backed_types() {
    let host = host("h200-mig");
    let fake = nvml_on(&host, H200_DATA);
    let types = json(&with_nvml(&host, &fake, &["types", H200, "--json"]));
    assert_eq!(
        &types["gpus"][0]["types"][0]["mig"],
        &serde_json::json!({"slices": 1, "gpu_instance_profile": "1g.18gb"})
    );
}

#[test]
fn create_mig_type_writes_gpu_instance_and_prints_the_vf() {
    let host = host("h200-mig");
    let fake = nvml_on(&host, H200_DATA);
    let output = with_nvml(&host, &fake, &["create", H200, "--type", "H200X-1-18C"]);
    let instance = std::fs::read_to_string(
        host.sim
            .root()
            .join("sys/bus/pci/devices/0000:18:00.4/nvidia/gpu_instance_id"),
    )
    .unwrap();
    assert_eq!(
        (output.status.code(), code_and_stdout(&output).1, instance),
        (Some(0), "0000:18:00.4\n".to_owned(), "9\n".to_owned())
    );
}

#[test]
fn create_mig_type_with_mig_off_exits_1_with_hint() {
    let host = host("h200-mig");
    for id in [9, 10, 3] {
        host.sim
            .control(&format!("gpu-instance-remove {H200} {id}"))
            .unwrap();
    }
    host.sim.control(&format!("mig-mode {H200} off")).unwrap();
    let fake = nvml_on(&host, H200_DATA);
    let output = with_nvml(&host, &fake, &["create", H200, "--type", "H200X-1-18C"]);
    assert_eq!(
        (output.status.code(), stderr(&output)),
        (
            Some(1),
            "vgpuctl: error: cannot create a H200X-1-18C vGPU on 0000:18:00.0: vGPU type \
             NVIDIA H200X-1-18C is MIG-backed (GPU-instance profile 1g.18gb), but MIG mode is \
             off on 0000:18:00.0\n\
             hint: enable MIG mode (nvidia-smi -i GPU -mig 1, then reset the GPU) and make GPU \
             instances (nvidia-smi mig -cgi PROFILE)\n"
                .to_owned()
        )
    );
}

/// `nvml` of GPU `gpu` in `vgpuctl list --json`.
fn nvml_of(host: &Host, fake: &FakeNvml, gpu: &str) -> serde_json::Value {
    let list = json(&with_nvml(host, fake, &["list", "--json"]));
    common::gpu(&list, gpu)["nvml"].clone()
}

/// The type ids of an NVML fact's list: `supported_types` (objects) or `creatable_type_ids`.
fn ids(fact: &serde_json::Value) -> Vec<u64> {
    fact["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().or_else(|| t.as_u64()).unwrap())
        .collect()
}

/// The catalog's type ids for the `l40s-vendor-vfio` GPUs, sorted.
fn l40s_catalog_ids() -> Vec<u64> {
    let mut ids: Vec<u64> = vgpu_sim::Profile::builtin("l40s-vendor-vfio")
        .unwrap()
        .types
        .iter()
        .map(|t| t.id.parse().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn list_json_after_create_nvml_reports_the_vgpu_running_with_its_type() {
    let (host, fake) = l40s();
    let created = with_nvml(&host, &fake, &["create", L40S, "--type", "L40S-24Q"]);
    assert!(created.status.success(), "{}", stderr(&created));

    let nvml = nvml_of(&host, &fake, L40S);

    let vgpus: Vec<(u64, serde_json::Value, serde_json::Value)> = nvml["vgpus"]["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["instance"].as_u64().unwrap(),
                v["type_id"].clone(),
                v["gpu_instance_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        vgpus,
        vec![(
            0x4104,
            serde_json::json!({"value": 1155}),
            serde_json::json!({"value": null})
        )]
    );
}

#[test]
fn list_json_after_create_nvml_creatable_types_shrink_to_the_created_type() {
    let (host, fake) = l40s();
    let before = ids(&nvml_of(&host, &fake, L40S)["creatable_type_ids"]);
    let created = with_nvml(&host, &fake, &["create", L40S, "--type", "L40S-24Q"]);
    assert!(created.status.success(), "{}", stderr(&created));

    let after = ids(&nvml_of(&host, &fake, L40S)["creatable_type_ids"]);

    assert_eq!((before, after), (l40s_catalog_ids(), vec![1155]));
}

#[test]
fn list_json_after_create_nvml_supported_types_are_every_catalog_row() {
    let (host, fake) = l40s();
    let created = with_nvml(&host, &fake, &["create", L40S, "--type", "L40S-24Q"]);
    assert!(created.status.success(), "{}", stderr(&created));

    let mut supported = ids(&nvml_of(&host, &fake, L40S)["supported_types"]);
    supported.sort_unstable();

    assert_eq!(supported, l40s_catalog_ids());
}

#[test]
fn list_json_after_mig_create_nvml_reports_the_vgpu_on_its_gpu_instance() {
    let host = host("h200-mig");
    let fake = nvml_on(&host, H200_DATA);
    let created = with_nvml(&host, &fake, &["create", H200, "--type", "H200X-1-18C"]);
    assert!(created.status.success(), "{}", stderr(&created));

    let nvml = nvml_of(&host, &fake, H200);

    assert_eq!(
        (
            nvml["vgpus"]["value"][0]["type_id"].clone(),
            nvml["vgpus"]["value"][0]["gpu_instance_id"].clone(),
            ids(&nvml["creatable_type_ids"])
        ),
        (
            serde_json::json!({"value": 1414}),
            serde_json::json!({"value": 9}),
            vec![1414, 1415]
        )
    );
}

#[test]
fn list_json_with_only_the_sim_env_serves_every_gpu_with_defaults() {
    let host = host("l40s-vendor-vfio");
    let library =
        vgpu_testing::fake_nvml::built_library(vgpu_testing::fake_nvml::FakeBuild::Full).unwrap();
    let empty = host.state.path().join("no-data.toml");
    let output = command(&host, &["list", "--json"])
        .arg("--nvml-library")
        .arg(&library)
        .env_remove("VGPU_NVML_LIBRARY")
        .env("VGPU_FAKE_NVML_DATA", &empty)
        .env("VGPU_FAKE_NVML_SIM", host.sim.root())
        .output()
        .unwrap();
    let list = json(&output);
    let gpu = common::gpu(&list, "0000:c1:00.0");
    assert_eq!(
        (
            &gpu["nvml"]["name"],
            &gpu["nvml"]["uuid"],
            &gpu["nvml"]["scheduler"]["value"]["policy"],
            &gpu["nvml"]["ecc_mode"],
        ),
        (
            &serde_json::json!({"value": "NVIDIA L40S"}),
            &serde_json::json!({"value": "GPU-00000000-0000-4000-8000-000000c10000"}),
            &serde_json::json!("best-effort"),
            &serde_json::json!({"value": {"current": true, "pending": true}}),
        )
    );
}

const SCHEDULED: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n\
    address = \"0000:41:00.0\"\ntypes = { \"L40S-24Q\" = 2 }\n\
    scheduler = { policy = \"equal-share\", timeslice_ms = 2 }\n";

fn desired(host: &Host, text: &str) -> String {
    let path = host.state.path().join("host.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn plan_with_scheduler_lists_the_step_before_the_creates() {
    let (host, fake) = l40s();
    let file = desired(&host, SCHEDULED);
    let output = with_nvml(&host, &fake, &["plan", "-f", &file]);
    let text = String::from_utf8(output.stdout).unwrap();
    let steps: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("sched") || l.starts_with("create"))
        .collect();
    assert_eq!(
        (output.status.code(), steps),
        (
            Some(4),
            vec![
                "sched    equal-share, time slice 2 ms",
                "create   NVIDIA L40S-24Q (auto)  x2"
            ]
        )
    );
}

#[test]
fn apply_with_scheduler_sets_it_through_nvml_then_creates() {
    let (host, fake) = l40s();
    let file = desired(&host, SCHEDULED);
    let applied = with_nvml(&host, &fake, &["apply", "-f", &file]);
    let list = json(&with_nvml(&host, &fake, &["list", "--json"]));
    assert_eq!(
        (
            applied.status.code(),
            fake.calls().unwrap(),
            common::gpu(&list, L40S)["vgpus"].as_array().unwrap().len()
        ),
        (
            Some(0),
            "{\"function\":\"nvmlDeviceSetVgpuSchedulerState\",\"gpu\":\"0000:41:00.0\",\
             \"policy\":2,\"arr_mode\":0,\"timeslice_ns\":2000000}\n"
                .to_owned(),
            2
        )
    );
}

#[test]
fn plan_with_scheduler_after_apply_matches() {
    let (host, fake) = l40s();
    let file = desired(&host, SCHEDULED);
    with_nvml(&host, &fake, &["apply", "-f", &file]);
    let planned = with_nvml(&host, &fake, &["plan", "-f", &file]);
    assert_eq!(planned.status.code(), Some(0), "{}", stderr(&planned));
}

#[test]
fn plan_with_scheduler_without_nvml_is_refused() {
    let host = host("l40s-vendor-vfio");
    let file = desired(&host, SCHEDULED);
    let output = command(&host, &["plan", "-f", &file])
        .env_remove("VGPU_NVML_LIBRARY")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        (
            output.status.code(),
            text.contains(
                "its vGPU scheduler cannot be read: NVML is not loaded: the host root is "
            )
        ),
        (Some(1), true)
    );
}
