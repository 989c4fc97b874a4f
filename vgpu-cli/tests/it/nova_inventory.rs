//! What Nova's own inventory code counts under the `nova.conf` that `vgpuctl nova-config`
//! writes: `tests/nova/inventory.py` runs Nova's `LibvirtDriver._get_gpu_inventories`
//! (Debian's `python3-nova`, Nova 26 Zed, run by `/usr/bin/python3`) against the simulated
//! host's mdev parents and mdevs, active and only defined. The totals per physical GPU must be
//! what the GPU holds. Without python3-nova these tests skip, unless `CI` is set: then they fail.

#![allow(clippy::print_stderr)] // a skipped test says why

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use crate::common::{Host, host, stderr, vgpuctl};

use crate::common;

const PYTHON: &str = "/usr/bin/python3";
const A40: &str = "0000:41:00.0";
const A40_12Q: &str = "nvidia-563";
const T4_2Q: &str = "nvidia-231";

/// Whether Nova's libvirt driver imports; `false` (skip) only outside CI. Asked once per test
/// binary: the import takes seconds.
fn nova_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(probe_nova)
}

fn probe_nova() -> bool {
    let probe = Command::new(PYTHON)
        .args(["-c", "import nova.virt.libvirt.driver"])
        .output();
    if probe.as_ref().is_ok_and(|out| out.status.success()) {
        return true;
    }
    let why = match &probe {
        Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
        Err(err) => err.to_string(),
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "{PYTHON} cannot import Nova (scripts/install-deps.sh installs python3-nova): {why}"
    );
    eprintln!("skipped: {PYTHON} cannot import Nova (python3-nova): {why}");
    false
}

/// `nova-config ARGS` on `host`: its exit code and stdout.
fn nova_config(host: &Host, args: &[&str]) -> String {
    let mut all = vec!["nova-config"];
    all.extend_from_slice(args);
    let out = vgpuctl(host, &all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Nova's inventory under `conf` on `host`, as `inventory.py` prints it.
fn nova_inventory(host: &Host, conf: &str) -> serde_json::Value {
    let path = host.state.path().join("nova.conf");
    std::fs::write(&path, conf).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nova/inventory.py");
    let out = Command::new(PYTHON)
        .arg(&script)
        .arg(&path)
        .arg(host.sim.root())
        .arg(host.state.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Nova failed on\n{conf}\n{}",
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ok(host: &Host, args: &[&str]) {
    let out = vgpuctl(host, args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
}

/// An A40 with `created` A40-12Q vGPUs running.
fn a40_with(created: usize) -> Host {
    let host = host("a40-vf-mdev");
    for _ in 0..created {
        ok(&host, &["create", A40, "--type", "A40-12Q"]);
    }
    host
}

/// The harness itself: the configuration `nova-config` wrote before this fix (one type, its
/// four VFs) makes Nova 26 offer a VGPU on each of the A40's 32 VFs.
#[test]
fn nova_inventory_of_a_single_type_config_counts_every_vf() {
    if !nova_present() {
        return;
    }
    let host = a40_with(1);
    let conf = format!(
        "[devices]\nenabled_mdev_types = {A40_12Q}\n\n[mdev_{A40_12Q}]\n\
         device_addresses = 0000:41:00.4, 0000:41:00.5, 0000:41:00.6, 0000:41:00.7\n"
    );
    let inventory = nova_inventory(&host, &conf);
    assert_eq!(inventory["total_per_gpu"], serde_json::json!({ A40: 32 }));
}

#[test]
fn nova_inventory_of_an_a40_with_one_vgpu_is_four() {
    if !nova_present() {
        return;
    }
    let host = a40_with(1);
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    assert_eq!(
        (
            &inventory["supported_vgpu_types"],
            &inventory["total_per_gpu"]
        ),
        (
            &serde_json::json!([A40_12Q, "vgpuctl-placeholder"]),
            &serde_json::json!({ A40: 4 })
        )
    );
}

#[test]
fn nova_inventory_of_an_a40_with_three_vgpus_is_four() {
    if !nova_present() {
        return;
    }
    let host = a40_with(3);
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    assert_eq!(inventory["total_per_gpu"], serde_json::json!({ A40: 4 }));
}

/// Each listed VF holds one: four providers of total 1, none with 2.
#[test]
fn nova_inventory_of_an_a40_has_four_providers_of_one() {
    if !nova_present() {
        return;
    }
    let host = a40_with(2);
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    let totals: Vec<u64> = inventory["inventories"]
        .as_object()
        .unwrap()
        .values()
        .map(|i| i["total"].as_u64().unwrap())
        .collect();
    assert_eq!(totals, vec![1, 1, 1, 1]);
}

/// A running vGPU and a defined, stopped one: Nova 26 would count the stopped one twice, so
/// its VF is left out and its instance kept for it: 1 running + 2 creatable.
#[test]
fn nova_inventory_of_an_a40_with_a_stopped_definition_keeps_its_instance() {
    if !nova_present() {
        return;
    }
    let host = a40_with(1);
    ok(&host, &["define", A40, "--type", "A40-12Q"]);
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    assert_eq!(inventory["total_per_gpu"], serde_json::json!({ A40: 3 }));
}

#[test]
fn nova_config_of_an_a40_with_a_stopped_definition_warns() {
    let host = a40_with(1);
    ok(&host, &["define", A40, "--type", "A40-12Q"]);
    let out = vgpuctl(&host, &["nova-config", "--json"]);
    let value = common::json(&out);
    let warnings = value["warnings"].as_array().unwrap();
    assert_eq!(
        (
            warnings.len(),
            warnings[0].as_str().unwrap().contains("counts it twice")
        ),
        (1, true)
    );
}

/// The same host without the fix's rule: the stopped definition's VF listed with three others
/// counts 5 (its mdev and its available instance), one more than the A40 holds.
#[test]
fn nova_inventory_counts_a_stopped_definition_twice() {
    if !nova_present() {
        return;
    }
    let host = a40_with(0);
    ok(&host, &["define", A40, "--type", "A40-12Q"]);
    let conf = format!(
        "[devices]\nenabled_mdev_types = {A40_12Q}, vgpuctl-placeholder\n\n[mdev_{A40_12Q}]\n\
         device_addresses = 0000:41:00.4, 0000:41:00.5, 0000:41:00.6, 0000:41:00.7\n\n\
         [mdev_vgpuctl-placeholder]\ndevice_addresses = ffff:ff:1f.7\n"
    );
    let inventory = nova_inventory(&host, &conf);
    assert_eq!(inventory["total_per_gpu"], serde_json::json!({ A40: 5 }));
}

/// A T4 (its PF is the mdev parent) with one T4-2Q running: Nova counts it and the 7 left.
#[test]
fn nova_inventory_of_a_t4_with_one_vgpu_is_eight() {
    if !nova_present() {
        return;
    }
    let host = host("t4-legacy");
    ok(&host, &["create", common::T4, "--type", "T4-2Q"]);
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    assert_eq!(
        (
            &inventory["supported_vgpu_types"],
            &inventory["total_per_gpu"]
        ),
        (
            &serde_json::json!([T4_2Q, "vgpuctl-placeholder"]),
            &serde_json::json!({ common::T4: 8 })
        )
    );
}

/// A T4 whose only vGPU is defined, not started, is not offered: Nova would count 9.
#[test]
fn nova_inventory_of_a_t4_with_a_stopped_definition_is_empty() {
    if !nova_present() {
        return;
    }
    let host = host("t4-legacy");
    ok(&host, &["define", common::T4, "--type", "T4-2Q"]);
    let conf = nova_config(&host, &[]);
    let inventory = nova_inventory(&host, &conf);
    assert_eq!(
        (
            inventory["total_per_gpu"].clone(),
            conf.contains("defined but not started")
        ),
        (serde_json::json!({}), true)
    );
}

#[test]
fn nova_config_states_the_release_it_writes_for() {
    let host = a40_with(1);
    let zed = common::json(&vgpuctl(&host, &["nova-config", "--json"]));
    let caracal = common::json(&vgpuctl(
        &host,
        &["nova-config", "--json", "--nova-release", "2024.1"],
    ));
    assert_eq!(
        (
            &zed["nova_release"],
            &caracal["nova_release"],
            &caracal["enabled_mdev_types"],
            &caracal["mdev"][0]["max_instances"]
        ),
        (
            &serde_json::json!("zed"),
            &serde_json::json!("2024.1"),
            &serde_json::json!([A40_12Q]),
            &serde_json::json!(4)
        )
    );
}

#[test]
fn nova_config_refuses_an_unknown_release() {
    let host = a40_with(0);
    let out = vgpuctl(&host, &["nova-config", "--nova-release", "2019.1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The mixed host with a running vGPU on the T4 and the iGPU: two real types, so no
/// placeholder; T4-2Q is 8 per T4, GVTg_V5_4 4 per iGPU. The A4000, the L40S and the Flex
/// are no mdev parents.
#[test]
fn nova_inventory_of_the_mixed_host_counts_each_gpu_once() {
    if !nova_present() {
        return;
    }
    let host = host("mixed");
    ok(&host, &["create", common::T4, "--type", "T4-2Q"]);
    ok(
        &host,
        &["create", "0000:00:02.0", "--type", "i915-GVTg_V5_4"],
    );
    let inventory = nova_inventory(&host, &nova_config(&host, &[]));
    assert_eq!(
        inventory["total_per_gpu"],
        serde_json::json!({ common::T4: 8, "0000:00:02.0": 4 })
    );
}
