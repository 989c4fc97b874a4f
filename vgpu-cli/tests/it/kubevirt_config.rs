//! `vgpuctl kubevirt-config` on simulated hosts with vGPUs made: the CR patch and Harvester's
//! objects against golden files (`VGPU_REGENERATE=1` rewrites them), `allocatable` against
//! what `list` shows, the CR against KubeVirt's OpenAPI definitions (`tests/kubevirt/
//! validate.py`, Debian's `python3-jsonschema` and `python3-yaml`), merges and their refusals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{self, Host};

const PYTHON: &str = "/usr/bin/python3";

/// KubeVirt's OpenAPI definitions, beside the repository (`../shared`).
fn openapi() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kubevirt/openapi-subset.json")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `count` vGPUs of `kind` made on `gpu`.
fn create(host: &Host, gpu: &str, kind: &str, count: usize) {
    for _ in 0..count {
        let out = common::vgpuctl(host, &["create", gpu, "--type", kind]);
        assert!(out.status.success(), "{gpu} {kind}: {}", text(&out.stderr));
    }
}

/// The mixed host with two T4-2Q, one GVT-g vGPU and two L40S-12Q VFs; the RTX A4000 is on
/// vfio-pci as the profile has it.
fn mixed() -> Host {
    let host = common::host("mixed");
    create(&host, "0000:3b:00.0", "T4-2Q", 2);
    create(&host, "0000:00:02.0", "i915-GVTg_V5_4", 1);
    create(&host, "0000:5e:00.0", "L40S-12Q", 2);
    host
}

/// Two L40S: `first` on 41:00.0 twice, `second` on c1:00.0 once.
fn l40s(first: &str, second: &str) -> Host {
    let host = common::host("l40s-vendor-vfio");
    create(&host, "0000:41:00.0", first, 2);
    create(&host, "0000:c1:00.0", second, 1);
    host
}

/// The A40 with three A40-2Q on its VFs.
fn a40() -> Host {
    let host = common::host("a40-vf-mdev");
    create(&host, "0000:41:00.0", "A40-2Q", 3);
    host
}

/// Two T4: two T4-2Q and one T4-4Q.
fn t4() -> Host {
    let host = common::host("t4-legacy");
    create(&host, "0000:3b:00.0", "T4-2Q", 2);
    create(&host, "0000:d8:00.0", "T4-4Q", 1);
    host
}

fn kubevirt_config(host: &Host, node: &str, args: &[&str]) -> Output {
    let mut all = vec!["kubevirt-config", "--node", node];
    all.extend_from_slice(args);
    common::vgpuctl(host, &all)
}

/// `kubevirt-config --json` of `host` as node `node`, written to a file in its state root.
fn json_file(host: &Host, node: &str, args: &[&str]) -> PathBuf {
    let mut all = vec!["--json", "kubevirt-config", "--node", node];
    all.extend_from_slice(args);
    let out = common::vgpuctl(host, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = host.state.path().join(format!("{node}.json"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

fn assert_golden(name: &str, out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
    common::assert_golden(name, 0, (0, text(&out.stdout)));
}

/// What `list --json` shows that KubeVirt counts: each vGPU by its type's name, each GPU on
/// vfio-pci by its model, under the vendor's domain with whitespace as `_`.
fn counted_by_list(host: &Host) -> BTreeMap<String, u64> {
    let list = common::json(&common::vgpuctl(host, &["list", "--vgpus", "--json"]));
    let mut counted = BTreeMap::new();
    for gpu in list["gpus"].as_array().unwrap() {
        let domain = match gpu["vendor_id"].as_str().unwrap() {
            "10de" => "nvidia.com",
            "8086" => "intel.com",
            other => panic!("vendor {other}"),
        };
        for vgpu in gpu["vgpus"].as_array().unwrap() {
            let name = gpu["types"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["id"] == vgpu["type"])
                .and_then(|t| t["name"].as_str())
                .unwrap_or_else(|| vgpu["type"].as_str().unwrap());
            *counted
                .entry(format!("{domain}/{}", name.replace(' ', "_")))
                .or_insert(0) += 1;
        }
        if gpu["driver"] == "vfio-pci" {
            *counted.entry(format!("{domain}/passthrough")).or_insert(0) += 1;
        }
    }
    counted
}

/// `allocatable` of `kubevirt-config --json`, with each passthrough resource (named from
/// pci.ids, not a type) under `<domain>/passthrough`, as [`counted_by_list`] keys it.
fn allocatable(host: &Host, passthrough: &[&str]) -> BTreeMap<String, u64> {
    let value = common::json(&common::vgpuctl(
        host,
        &["--json", "kubevirt-config", "--node", "node-a"],
    ));
    let mut counted = BTreeMap::new();
    for (name, count) in value["allocatable"].as_object().unwrap() {
        let key = if passthrough.contains(&name.as_str()) {
            format!("{}/passthrough", name.split('/').next().unwrap())
        } else {
            name.clone()
        };
        *counted.entry(key).or_insert(0) += count.as_u64().unwrap();
    }
    counted
}

#[test]
fn kubevirt_config_of_the_mixed_host_with_vgpus() {
    let host = mixed();
    assert_golden(
        "kubevirt-config-mixed.yaml",
        &kubevirt_config(&host, "node-a", &[]),
    );
}

#[test]
fn kubevirt_config_json_for_kubevirt_1_7_uses_the_gate_and_leaves_vendor_vfio_out() {
    let host = mixed();
    assert_golden(
        "kubevirt-config-mixed-1.7.json",
        &common::vgpuctl(
            &host,
            &[
                "--json",
                "kubevirt-config",
                "--node",
                "node-a",
                "--kubevirt-version",
                "1.7",
            ],
        ),
    );
}

#[test]
fn kubevirt_config_allocatable_of_the_mixed_host_equals_list() {
    let host = mixed();
    let expected = BTreeMap::from([
        ("intel.com/GVTg_V5_4".to_owned(), 1),
        ("nvidia.com/GRID_T4-2Q".to_owned(), 2),
        ("nvidia.com/NVIDIA_L40S-12Q".to_owned(), 2),
        ("nvidia.com/passthrough".to_owned(), 1),
    ]);
    assert_eq!(
        (
            allocatable(&host, &["nvidia.com/GA104GL_RTX_A4000"]),
            counted_by_list(&host)
        ),
        (expected.clone(), expected)
    );
}

#[test]
fn kubevirt_config_allocatable_of_the_l40s_host_equals_list() {
    let host = l40s("L40S-12Q", "L40S-12Q");
    let expected = BTreeMap::from([("nvidia.com/NVIDIA_L40S-12Q".to_owned(), 3)]);
    assert_eq!(
        (allocatable(&host, &[]), counted_by_list(&host)),
        (expected.clone(), expected)
    );
}

#[test]
fn kubevirt_config_allocatable_of_the_a40_host_equals_list() {
    let host = a40();
    let expected = BTreeMap::from([("nvidia.com/NVIDIA_A40-2Q".to_owned(), 3)]);
    assert_eq!(
        (allocatable(&host, &[]), counted_by_list(&host)),
        (expected.clone(), expected)
    );
}

#[test]
fn kubevirt_config_allocatable_of_the_t4_host_equals_list() {
    let host = t4();
    let expected = BTreeMap::from([
        ("nvidia.com/GRID_T4-2Q".to_owned(), 2),
        ("nvidia.com/GRID_T4-4Q".to_owned(), 1),
    ]);
    assert_eq!(
        (allocatable(&host, &[]), counted_by_list(&host)),
        (expected.clone(), expected)
    );
}

#[test]
fn kubevirt_config_selectors_of_the_a40_and_t4_hosts() {
    let a40 = a40();
    let t4 = t4();
    let selectors = |host: &Host| {
        let value = common::json(&common::vgpuctl(
            host,
            &["--json", "kubevirt-config", "--node", "n"],
        ));
        value["kubevirt"]["spec"]["configuration"]["permittedHostDevices"]["mediatedDevices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["mdevNameSelector"].as_str().unwrap().to_owned(),
                    e["resourceName"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (selectors(&a40), selectors(&t4)),
        (
            vec![(
                "NVIDIA A40-2Q".to_owned(),
                "nvidia.com/NVIDIA_A40-2Q".to_owned()
            )],
            vec![
                ("GRID T4-2Q".to_owned(), "nvidia.com/GRID_T4-2Q".to_owned()),
                ("GRID T4-4Q".to_owned(), "nvidia.com/GRID_T4-4Q".to_owned())
            ]
        )
    );
}

/// The CR of each release's shape validates against KubeVirt's own definitions, made strict.
/// Fails (never skips) without Debian's `python3-jsonschema` and `python3-yaml`.
#[test]
fn kubevirt_config_cr_validates_against_kubevirt_openapi() {
    let host = mixed();
    let new = json_file(&host, "node-a", &[]);
    let old = json_file(&host, "node-b", &["--kubevirt-version", "1.7"]);
    let nvidia = json_file(&host, "node-c", &["--provider", "nvidia"]);
    let checked = validate(&[&new, &old, &nvidia]);
    assert_eq!(
        (checked.status.code(), text(&checked.stdout)),
        (
            Some(0),
            format!(
                "{}: 1 KubeVirt, 0 GPU, 0 HostDevice valid; 0 skipped\n\
                 {}: 1 KubeVirt, 0 GPU, 0 HostDevice valid; 0 skipped\n\
                 {}: 1 KubeVirt, 0 GPU, 0 HostDevice valid; 0 skipped\n",
                new.display(),
                old.display(),
                nvidia.display()
            )
        ),
        "{}",
        text(&checked.stderr)
    );
}

/// The validator refuses a key KubeVirt's definitions do not have: the check is strict.
#[test]
fn kubevirt_openapi_check_of_a_misspelt_selector_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nspec:\n  configuration:\n    \
         permittedHostDevices:\n      pciHostDevices:\n      - pciVendorSelecter: 10de:26b9\n        \
         resourceName: nvidia.com/NVIDIA_L40S-12Q\n",
    )
    .unwrap();
    assert_eq!(validate(&[&path]).status.code(), Some(1));
}

/// Every YAML file in contrib/ and every ```yaml block in docs/ that KubeVirt's definitions
/// cover validates.
#[test]
fn kubevirt_yaml_of_contrib_and_docs_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = [
        root.join("docs/kubevirt-and-harvester.md"),
        root.join("contrib/kubernetes/vgpu-daemonset.yaml"),
    ];
    let checked = validate(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    assert_eq!(
        (checked.status.code(), text(&checked.stdout)),
        (
            Some(0),
            format!(
                "{}: 1 KubeVirt, 1 GPU, 1 HostDevice valid; 0 skipped\n\
                 {}: 0 KubeVirt, 0 GPU, 0 HostDevice valid; 4 skipped\n",
                files[0].display(),
                files[1].display()
            )
        ),
        "{}",
        text(&checked.stderr)
    );
}

fn validate(files: &[&Path]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubevirt/validate.py");
    Command::new(PYTHON)
        .arg(script)
        .arg(openapi())
        .args(files)
        .output()
        .unwrap_or_else(|err| {
            panic!("{PYTHON}: {err} (scripts/install-deps.sh installs python3-jsonschema)")
        })
}

#[test]
fn kubevirt_config_merge_of_three_hosts_unions_their_entries() {
    let a40 = a40();
    let t4 = t4();
    let mixed = mixed();
    let b = json_file(&a40, "node-b", &[]);
    let c = json_file(&t4, "node-c", &[]);
    assert_golden(
        "kubevirt-config-merge.yaml",
        &kubevirt_config(
            &mixed,
            "node-a",
            &["--merge", b.to_str().unwrap(), c.to_str().unwrap()],
        ),
    );
}

#[test]
fn kubevirt_config_merge_of_two_profiles_on_one_pci_id_refuses() {
    let mixed = mixed();
    let other = l40s("L40S-24Q", "L40S-24Q");
    let b = json_file(&other, "node-b", &[]);
    let out = common::vgpuctl(
        &mixed,
        &[
            "kubevirt-config",
            "--node",
            "node-a",
            "--merge",
            b.to_str().unwrap(),
        ],
    );
    assert_eq!(
        (out.status.code(), text(&out.stdout), text(&out.stderr)),
        (
            Some(1),
            String::new(),
            "vgpuctl: error: PCI id 10de:26b9 would be two resources, \
             nvidia.com/NVIDIA_L40S-12Q (node-a) and nvidia.com/NVIDIA_L40S-24Q (node-b): \
             KubeVirt's own device plugin counts every function of one PCI id as one resource\n\
             hint: give the GPUs of one PCI id one profile across the cluster, or let NVIDIA's \
             or Harvester's device plugin serve one resource per profile (--provider nvidia or \
             --provider harvester)\n"
                .to_owned()
        )
    );
}

/// Another node passes its L40S through whole: the same PCI id as this node's VFs.
#[test]
fn kubevirt_config_merge_of_passthrough_and_vendor_vfio_of_one_id_refuses() {
    let mixed = mixed();
    let b = mixed.state.path().join("node-b.json");
    std::fs::write(
        &b,
        r#"{"node": "node-b", "provider": "kubevirt", "kubevirt": {"apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt", "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"mediatedDevicesConfiguration": {"enabled": false},
        "permittedHostDevices": {"mediatedDevices": [], "pciHostDevices": [
        {"pciVendorSelector": "10de:26b9", "resourceName": "nvidia.com/AD102GL_L40S"}]}}}},
        "allocatable": {"nvidia.com/AD102GL_L40S": 1}, "warnings": []}"#,
    )
    .unwrap();
    let out = common::vgpuctl(
        &mixed,
        &[
            "--json",
            "kubevirt-config",
            "--node",
            "node-a",
            "--merge",
            b.to_str().unwrap(),
        ],
    );
    assert_eq!(
        (out.status.code(), common::json(&out)),
        (
            Some(1),
            serde_json::json!({
                "error": "PCI id 10de:26b9 would be two resources, nvidia.com/NVIDIA_L40S-12Q \
                          (node-a) and nvidia.com/AD102GL_L40S (node-b): KubeVirt's own device \
                          plugin counts every function of one PCI id as one resource",
                "kind": "conflict"
            })
        )
    );
}

#[test]
fn kubevirt_config_of_two_profiles_on_one_node_refuses() {
    let host = l40s("L40S-12Q", "L40S-24Q");
    let out = common::vgpuctl(&host, &["--json", "kubevirt-config", "--node", "node-b"]);
    assert_eq!(
        (out.status.code(), common::json(&out)["kind"].clone()),
        (Some(1), serde_json::json!("conflict"))
    );
}

/// NVIDIA's device plugin serves one resource per profile: the same merge is taken.
#[test]
fn kubevirt_config_merge_of_two_profiles_with_the_nvidia_provider_is_taken() {
    let mixed = mixed();
    let other = l40s("L40S-24Q", "L40S-24Q");
    let b = json_file(&other, "node-b", &["--provider", "nvidia"]);
    assert_golden(
        "kubevirt-config-merge-nvidia.yaml",
        &kubevirt_config(
            &mixed,
            "node-a",
            &["--provider", "nvidia", "--merge", b.to_str().unwrap()],
        ),
    );
}

#[test]
fn kubevirt_config_harvester_objects_of_the_l40s_host() {
    let host = l40s("L40S-12Q", "L40S-24Q");
    assert_golden(
        "kubevirt-config-harvester-l40s.yaml",
        &kubevirt_config(&host, "node-b", &["--provider", "harvester"]),
    );
}

#[test]
fn kubevirt_config_harvester_json_of_the_mixed_host() {
    let host = mixed();
    assert_golden(
        "kubevirt-config-harvester-mixed.json",
        &common::vgpuctl(
            &host,
            &[
                "--json",
                "kubevirt-config",
                "--node",
                "node-a",
                "--provider",
                "harvester",
            ],
        ),
    );
}

/// The kind and message of a refused `kubevirt-config --json`, after `args`.
fn refusal(host: &Host, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = vec!["--json", "kubevirt-config"];
    all.extend_from_slice(args);
    let out = common::vgpuctl(host, &all);
    (out.status.code(), common::json(&out))
}

#[test]
fn kubevirt_config_of_an_unknown_kubevirt_version_is_bad_input() {
    let host = common::host("t4-legacy");
    assert_eq!(
        refusal(&host, &["--node", "n", "--kubevirt-version", "1.10"]),
        (
            Some(1),
            serde_json::json!({
                "error": "KubeVirt \"1.10\" is not a release known here (1.0 to 1.9)",
                "kind": "bad-input"
            })
        )
    );
}

#[test]
fn kubevirt_config_of_a_missing_merge_file_is_bad_input() {
    let host = common::host("t4-legacy");
    let missing = host.state.path().join("absent.json");
    assert_eq!(
        refusal(
            &host,
            &["--node", "n", "--merge", missing.to_str().unwrap()]
        ),
        (
            Some(1),
            serde_json::json!({
                "error": format!("cannot read {}: No such file or directory (os error 2)", missing.display()),
                "kind": "bad-input"
            })
        )
    );
}

#[test]
fn kubevirt_config_of_a_malformed_merge_file_is_bad_input() {
    let host = common::host("t4-legacy");
    let path = host.state.path().join("other.json");
    std::fs::write(&path, "{\"node\": \"b\", \"provider\": \"kubevirt\"").unwrap();
    assert_eq!(
        refusal(&host, &["--node", "n", "--merge", path.to_str().unwrap()]),
        (
            Some(1),
            serde_json::json!({
                "error": format!(
                    "{}: not the JSON of kubevirt-config --json: EOF while parsing an object at \
                     line 1 column 36",
                    path.display()
                ),
                "kind": "bad-input"
            })
        )
    );
}

#[test]
fn kubevirt_config_of_a_merge_file_with_a_bad_resource_name_is_bad_input() {
    let host = common::host("t4-legacy");
    let path = host.state.path().join("other.json");
    std::fs::write(
        &path,
        r#"{"node": "b", "provider": "kubevirt", "kubevirt": {"apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt", "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"permittedHostDevices": {"mediatedDevices": [
        {"mdevNameSelector": "GRID T4-2Q", "resourceName": "nvidia.com/GRID T4-2Q"}],
        "pciHostDevices": []}}}}, "warnings": []}"#,
    )
    .unwrap();
    assert_eq!(
        refusal(&host, &["--node", "n", "--merge", path.to_str().unwrap()]),
        (
            Some(1),
            serde_json::json!({
                "error": "resource name \"nvidia.com/GRID T4-2Q\" is not a Kubernetes extended \
                          resource name: its name holds ' '",
                "kind": "bad-input"
            })
        )
    );
}

#[test]
fn kubevirt_config_of_a_merge_file_of_another_provider_is_bad_input() {
    let host = t4();
    let b = json_file(&host, "node-b", &["--provider", "nvidia"]);
    assert_eq!(
        refusal(&host, &["--node", "n", "--merge", b.to_str().unwrap()]),
        (
            Some(1),
            serde_json::json!({
                "error": format!(
                    "{}: node node-b was written for provider nvidia, this node for kubevirt",
                    b.display()
                ),
                "kind": "bad-input"
            })
        )
    );
}

#[test]
fn kubevirt_config_without_a_node_name_on_the_host_is_bad_input() {
    let host = common::host("t4-legacy");
    let out = common::vgpuctl(&host, &["--json", "kubevirt-config"]);
    assert_eq!(
        (out.status.code(), common::json(&out)["kind"].clone()),
        (Some(1), serde_json::json!("bad-input"))
    );
}

#[test]
fn kubevirt_config_of_a_bad_node_name_is_bad_input() {
    let host = common::host("t4-legacy");
    assert_eq!(
        refusal(&host, &["--node", "Node_A"]),
        (
            Some(1),
            serde_json::json!({
                "error": "node name \"Node_A\" is not a DNS-1123 subdomain (\"Node_A\": each \
                          label starts and ends with a lower-case letter or digit)",
                "kind": "bad-input"
            })
        )
    );
}
