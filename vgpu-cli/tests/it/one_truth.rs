//! One truth per GPU: `types`, `place`, `plan` and `create` give the same count of what a GPU
//! can still take, a type keeps its name at every fill level, and plain VFs are vGPUs in every
//! command. Each case is a state a real client reaches, on the simulator.

use crate::common;

use std::process::Output;

use crate::common::{Host, command, host, json, stderr, vgpuctl};
use vgpu_testing::fake_nvml::FakeNvml;

const L40S: &str = "0000:41:00.0";
const L40S_B: &str = "0000:c1:00.0";
const H200: &str = "0000:18:00.0";
const FLEX: &str = "0001:03:00.0";
const H200_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");

/// `vgpuctl`, with the test NVML when one is given.
fn run(host: &Host, nvml: Option<&FakeNvml>, args: &[&str]) -> Output {
    let mut cmd = command(host, args);
    if let Some(fake) = nvml {
        cmd.arg("--nvml-library").arg(fake.library());
    }
    cmd.env_remove("VGPU_NVML_LIBRARY").output().unwrap()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap()
}

/// `types GPU --json`: `(name, available, in_use)` of every type, in order.
fn types(host: &Host, nvml: Option<&FakeNvml>, gpu: &str) -> Vec<(String, u64, u64)> {
    let out = json(&run(host, nvml, &["types", gpu, "--json"]));
    out["gpus"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"]
                    .as_str()
                    .unwrap_or(t["id"].as_str().unwrap())
                    .to_owned(),
                t["available"].as_u64().unwrap(),
                t["in_use"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// What `types` says one more vGPU of `name` can take on `gpu`.
fn avail(host: &Host, nvml: Option<&FakeNvml>, gpu: &str, name: &str) -> u64 {
    types(host, nvml, gpu)
        .into_iter()
        .find(|(n, _, _)| n.ends_with(name))
        .map_or(0, |(_, a, _)| a)
}

/// The most vGPUs of `name` that `place` accepts on this host (it fails past that).
fn place_max(host: &Host, nvml: Option<&FakeNvml>, name: &str, upto: u32) -> u32 {
    (1..=upto)
        .take_while(|n| {
            let count = n.to_string();
            code(&run(
                host,
                nvml,
                &["place", "--count", &count, "--type", name],
            )) == 0
        })
        .last()
        .unwrap_or(0)
}

/// Writes `text` as a desired-state file in the state root.
fn desired(host: &Host, text: &str) -> String {
    let path = host.state.path().join("host.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn plan_json(host: &Host, nvml: Option<&FakeNvml>, text: &str) -> (i32, serde_json::Value) {
    let file = desired(host, text);
    let out = run(host, nvml, &["plan", "-f", &file, "--json"]);
    (code(&out), json(&out))
}

/// The refusal reasons of the first GPU of a plan.
fn reasons(plan: &serde_json::Value) -> Vec<String> {
    plan["gpus"][0]["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap().to_owned())
        .collect()
}

/// Creates vGPUs of `name` on `gpu` until one fails; returns how many were made and the
/// failing command's JSON error.
fn create_all(
    host: &Host,
    nvml: Option<&FakeNvml>,
    gpu: &str,
    name: &str,
) -> (u32, serde_json::Value) {
    let mut made = 0;
    loop {
        let out = run(host, nvml, &["--json", "create", gpu, "--type", name]);
        if code(&out) != 0 {
            let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            return (made, error);
        }
        made += 1;
        assert!(made < 64, "create never stops");
    }
}

fn types_toml(gpu: &str, types: &str) -> String {
    format!(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"{gpu}\"\ntypes = {{ {types} }}\n"
    )
}

#[test]
fn types_counts_definitions_as_place_and_create_do() {
    let host = host("l40s-vendor-vfio");
    for _ in 0..2 {
        assert_eq!(
            code(&vgpuctl(&host, &["define", L40S, "--type", "L40S-24Q"])),
            0
        );
    }

    let seen = (
        avail(&host, None, L40S, "L40S-24Q"),
        avail(&host, None, L40S, "L40S-12Q"),
        place_max(&host, None, "L40S-24Q", 4),
        create_all(&host, None, L40S, "L40S-12Q"),
    );

    assert_eq!(
        (seen.0, seen.1, seen.2, seen.3.0, seen.3.1["kind"].clone()),
        // The other L40S takes two 24Q: place counts the host, types and create one GPU.
        (0, 0, 2, 0, serde_json::json!("no-capacity"))
    );
}

#[test]
fn commands_agree_on_room_at_every_fill_level() {
    let host = host("l40s-vendor-vfio");
    // 12Q: four per GPU. At each fill level, what types says is what place, plan and create do.
    for filled in 0..=4u32 {
        let before = avail(&host, None, L40S_B, "L40S-12Q");
        let plan_ok = |count: u64| {
            let text = types_toml(L40S_B, &format!("\"L40S-12Q\" = {count}"));
            plan_json(&host, None, &text).0 != 1
        };
        let total = u64::from(filled) + before;
        let agreed = (
            before,
            plan_ok(total),
            plan_ok(total + 1),
            // Place counts both GPUs: this one's room plus the idle one's four.
            place_max(&host, None, "L40S-12Q", 9),
        );
        assert_eq!(
            agreed,
            (4 - u64::from(filled), true, false, 8 - filled),
            "filled {filled}"
        );
        if filled < 4 {
            let out = vgpuctl(
                &host,
                &["create", L40S_B, "--type", "L40S-12Q", "--define", "--auto"],
            );
            assert_eq!(code(&out), 0, "{}", stderr(&out));
        }
    }
    let (made, error) = create_all(&host, None, L40S_B, "L40S-12Q");
    assert_eq!(
        (made, error["kind"].clone()),
        (0, serde_json::json!("no-capacity"))
    );
}

#[test]
fn a_full_vendor_vfio_gpu_keeps_its_type_name() {
    let host = host("l40s-vendor-vfio");
    let mut names = Vec::new();
    let mut nova = Vec::new();
    for _ in 0..4 {
        let out = vgpuctl(&host, &["create", L40S_B, "--type", "L40S-12Q"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        names.push(
            types(&host, None, L40S_B)
                .into_iter()
                .find(|(_, _, used)| *used > 0),
        );
        let config = run(&host, None, &["nova-config", "--json"]);
        nova.push(json(&config)["alias"].clone());
    }
    let full = run(
        &host,
        None,
        &["--json", "create", L40S_B, "--type", "L40S-12Q"],
    );
    let error: serde_json::Value = serde_json::from_slice(&full.stdout).unwrap();
    let metrics = String::from_utf8(run(&host, None, &["metrics"]).stdout).unwrap();
    let framebuffer_rows = metrics
        .lines()
        .filter(|l| {
            l.starts_with("vgpu_framebuffer_bytes{gpu=\"0000:c1:00.0\"")
                && l.contains("type=\"1153\",type_name=\"NVIDIA L40S-12Q\"")
                && l.ends_with(" 12884901888")
        })
        .count();

    assert_eq!(
        names,
        (1..=4)
            .map(|n| Some(("NVIDIA L40S-12Q".to_owned(), 4 - n, n)))
            .collect::<Vec<_>>()
    );
    assert_eq!(nova[2], nova[3], "nova-config at 3/4 and 4/4");
    assert_eq!(framebuffer_rows, 4, "metrics of a full GPU:\n{metrics}");
    assert_eq!(error["kind"], serde_json::json!("no-capacity"));
}

#[test]
fn mig_instances_bound_types_place_plan_and_create_alike() {
    let host = host("h200-mig");
    let fake = FakeNvml::on_sim(H200_DATA, host.sim.root()).unwrap();
    let nvml = Some(&fake);

    // Two free 1g.18gb instances and one 2g.35gb, whatever the types' maxima (7 and 3).
    let counted = (
        avail(&host, nvml, H200, "H200X-1-18C"),
        avail(&host, nvml, H200, "H200X-2-35C"),
        place_max(&host, nvml, "H200X-1-18C", 3),
        plan_json(&host, nvml, &types_toml(H200, "\"H200X-1-18C\" = 2")).0,
        reasons(&plan_json(&host, nvml, &types_toml(H200, "\"H200X-1-18C\" = 3")).1),
        plan_json(
            &host,
            nvml,
            &types_toml(H200, "\"H200X-1-18C\" = 2, \"H200X-2-35C\" = 1"),
        )
        .0,
    );
    assert_eq!(
        counted,
        (2, 1, 2, 4, vec!["gpu-instances".to_owned()], 4),
        "types, place and plan"
    );

    // Different profiles share the GPU: 2 x 1-18C and then a 2-35C beside them.
    let (made, error) = create_all(&host, nvml, H200, "H200X-1-18C");
    let beside = run(&host, nvml, &["create", H200, "--type", "H200X-2-35C"]);
    assert_eq!(
        (made, error["kind"].clone(), code(&beside)),
        (2, serde_json::json!("no-capacity"), 0)
    );
    assert_eq!(
        (
            avail(&host, nvml, H200, "H200X-1-18C"),
            avail(&host, nvml, H200, "H200X-2-35C")
        ),
        (0, 0)
    );
}

#[test]
fn mig_types_without_nvml_have_no_room_and_plan_says_why() {
    let host = host("h200-mig");

    let (plan_code, plan) = plan_json(&host, None, &types_toml(H200, "\"H200X-1-18C\" = 1"));

    assert_eq!(
        (
            avail(&host, None, H200, "H200X-1-18C"),
            plan_code,
            reasons(&plan)
        ),
        (0, 1, vec!["gpu-instances-unknown".to_owned()])
    );
}

#[test]
fn plan_refuses_a_type_only_the_catalog_names_before_destroying() {
    let host = host("l40s-vendor-vfio");
    assert_eq!(
        code(&vgpuctl(&host, &["create", L40S, "--type", "L40S-48Q"])),
        0
    );
    // The create recorded the empty GPU's offer, which confirms every type: without it, only
    // the catalog names the types the GPU hides now.
    std::fs::remove_dir_all(host.state.path().join("var/lib/vgpu/offers")).unwrap();

    let (plan_code, plan) = plan_json(&host, None, &types_toml(L40S, "\"L40S-4C\" = 2"));

    assert_eq!(
        (plan_code, reasons(&plan), plan["gpus"][0]["steps"].clone()),
        (1, vec!["unconfirmed".to_owned()], serde_json::json!([]))
    );
}

#[test]
fn plain_vfs_given_out_are_vgpus_in_list_types_and_plan() {
    let host = host("mixed");
    let enabled = vgpuctl(&host, &["sriov", FLEX, "--vfs", "4"]);
    assert_eq!(code(&enabled), 0, "{}", stderr(&enabled));
    let mut made = Vec::new();
    for _ in 0..2 {
        let out = vgpuctl(&host, &["create", FLEX, "--type", "vf"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        made.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    let list = json(&vgpuctl(&host, &["list", "--json"]));
    let gpu = common::gpu(&list, FLEX);
    let listed: Vec<String> = gpu["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    let vf_type = types(&host, None, FLEX);
    let total = gpu["vfs"].as_array().unwrap().len() as u64;

    assert_eq!(listed, made);
    assert_eq!(vf_type, vec![("vf".to_owned(), total - 2, 2)]);
}

#[test]
fn a_vf_is_named_by_its_short_address_as_a_gpu_is() {
    let host = host("l40s-vendor-vfio");
    let made = vgpuctl(&host, &["create", "41:00.0", "--type", "L40S-24Q"]);
    assert_eq!(code(&made), 0, "{}", stderr(&made));

    let stopped = vgpuctl(&host, &["destroy", "41:00.4"]);
    let restore = vgpuctl(&host, &["restore", "--device", "41:00.0"]);
    let bad = vgpuctl(&host, &["--json", "bind", "41:00.5"]);

    assert_eq!(
        (
            code(&stopped),
            String::from_utf8(stopped.stdout).unwrap(),
            code(&restore),
            code(&bad),
            stderr(&bad).contains("has no domain: give it in full, such as 0000:41:00.5"),
        ),
        (0, "0000:41:00.4: destroyed\n".to_owned(), 0, 2, true),
        "{}",
        stderr(&bad)
    );
}

/// `provision --define` persists each vGPU it makes, as `create --define` does.
#[test]
fn provision_define_persists_each_vgpu_it_makes() {
    let host = host("l40s-vendor-vfio");

    let out = vgpuctl(
        &host,
        &[
            "provision",
            L40S,
            "--type",
            "L40S-24Q",
            "--define",
            "--auto",
        ],
    );

    let dir = host.state.path().join("etc/vgpu/vf-vgpus");
    let mut defined: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    defined.sort();
    let starts: Vec<bool> = defined
        .iter()
        .map(|name| {
            std::fs::read_to_string(dir.join(name))
                .unwrap()
                .contains("\"start\": \"auto\"")
        })
        .collect();
    assert_eq!(
        (code(&out), defined, starts),
        (
            0,
            vec![
                "0000:41:00.4.json".to_owned(),
                "0000:41:00.5.json".to_owned()
            ],
            vec![true, true]
        ),
        "{}",
        stderr(&out)
    );
}

/// `list GPU` shows one GPU; `list --defined` every definition, with whether it runs.
#[test]
fn list_takes_a_gpu_and_lists_definitions() {
    let host = host("l40s-vendor-vfio");
    for args in [
        ["create", L40S, "--type", "L40S-24Q", "--define"].as_slice(),
        ["define", L40S, "--type", "L40S-24Q"].as_slice(),
    ] {
        let out = vgpuctl(&host, args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }

    let one = json(&vgpuctl(&host, &["list", "c1:00.0", "--json"]));
    let defined = json(&vgpuctl(&host, &["list", "--defined", "--json"]));

    let addresses: Vec<&str> = one["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["address"].as_str().unwrap())
        .collect();
    let rows: Vec<(String, bool)> = defined["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap().to_owned(),
                d["active"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(addresses, vec![L40S_B]);
    assert_eq!(
        rows,
        vec![
            ("0000:41:00.4".to_owned(), true),
            ("0000:41:00.5".to_owned(), false)
        ]
    );
}

/// Binding what is bound already changes nothing and says so; the driver it had is not
/// claimed to be none.
#[test]
fn bind_of_a_device_on_its_driver_already_is_a_no_op_that_says_so() {
    let host = host("mixed");

    let out = vgpuctl(&host, &["bind", "0000:af:00.0"]);
    let value = json(&vgpuctl(&host, &["--json", "bind", "0000:af:00.0"]));

    assert_eq!(
        (
            code(&out),
            String::from_utf8(out.stdout).unwrap(),
            value["changed"].clone(),
            value["previous_driver"].clone()
        ),
        (
            0,
            "0000:af:00.0: already bound to vfio-pci, nothing changed\n".to_owned(),
            serde_json::json!(false),
            serde_json::Value::Null
        )
    );
}
