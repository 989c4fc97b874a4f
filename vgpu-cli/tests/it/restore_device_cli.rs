//! `vgpuctl restore --device`: what udev's rule runs for one device, on simulated hosts. It
//! restores only the definitions that concern the device, and leaves for later (`waiting`)
//! a definition whose device is not ready.

use serde_json::json;

use crate::common::*;

/// `mixed`: the Flex 170 (plain SR-IOV, no VFs enabled) and the T4 (mdev on the PF).
const MIXED_FLEX: &str = "0001:03:00.0";
/// `l40s-vendor-vfio`: the L40S and its first two VFs.
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
const L40S_VF1: &str = "0000:41:00.5";

/// `mixed` with 4 Flex VFs and a T4 vGPU defined (auto), neither made.
fn mixed_with_definitions() -> Host {
    let h = host("mixed");
    let defined = vgpuctl(&h, &["sriov", MIXED_FLEX, "--vfs", "4", "--define"]);
    assert_eq!(defined.status.code(), Some(0), "{}", stderr(&defined));
    let undone = vgpuctl(&h, &["sriov", MIXED_FLEX, "--vfs", "0"]);
    assert_eq!(undone.status.code(), Some(0), "{}", stderr(&undone));
    let out = vgpuctl(
        &h,
        &["define", T4, "--type", "T4-2Q", "--uuid", UUID, "--auto"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    h
}

fn step(action: &str, device: &str, outcome: &str) -> serde_json::Value {
    json!({"action": action, "device": device, "outcome": outcome, "error": null, "kind": null,
           "reason": null})
}

#[test]
fn restore_device_of_a_pf_sets_its_vf_count_and_leaves_other_gpus() {
    let h = mixed_with_definitions();
    let out = vgpuctl(&h, &["restore", "--device", MIXED_FLEX, "--json"]);
    let list = list(&h);
    assert_eq!(
        (
            out.status.code(),
            json(&out)["steps"].clone(),
            gpu(&list, MIXED_FLEX)["sriov"]["num_vfs"].clone(),
            gpu(&list, T4)["vgpus"].clone()
        ),
        (
            Some(0),
            json!([step("sriov", MIXED_FLEX, "created")]),
            json!(4),
            json!([])
        )
    );
}

#[test]
fn restore_device_of_a_mdev_parent_starts_its_vgpus_only() {
    let h = mixed_with_definitions();
    let out = vgpuctl(&h, &["restore", "--device", T4, "--json"]);
    let list = list(&h);
    assert_eq!(
        (
            out.status.code(),
            json(&out)["steps"].clone(),
            gpu(&list, MIXED_FLEX)["sriov"]["num_vfs"].clone(),
            vgpu_ids(&h, T4)
        ),
        (
            Some(0),
            json!([step("mdev", &format!("{T4}/{UUID}"), "created")]),
            json!(0),
            vec![UUID.to_owned()]
        )
    );
}

#[test]
fn restore_device_with_nothing_defined_has_no_steps_and_exits_0() {
    let h = host("mixed");
    let out = vgpuctl(&h, &["restore", "--device", T4, "--json"]);
    assert_eq!(
        (out.status.code(), json(&out)),
        (Some(0), json!({"steps": []}))
    );
}

#[test]
fn restore_device_not_on_the_host_is_not_found() {
    let h = host("mixed");
    let out = vgpuctl(&h, &["restore", "--device", "0000:99:00.0", "--json"]);
    assert_eq!(
        (out.status.code(), json(&out)["kind"].clone()),
        (Some(1), json!("not-found"))
    );
}

#[test]
fn restore_device_that_is_no_pci_name_is_bad_input() {
    let h = host("mixed");
    let out = vgpuctl(&h, &["restore", "--device", "card0", "--json"]);
    assert_eq!(
        (out.status.code(), json(&out)["kind"].clone()),
        (Some(1), json!("bad-input"))
    );
}

#[test]
fn restore_device_of_a_pf_makes_the_vgpus_of_its_vfs() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let out = vgpuctl(&h, &["restore", "--device", L40S, "--json"]);
    assert_eq!(
        (
            out.status.code(),
            json(&out)["steps"].clone(),
            vgpu_ids(&h, L40S)
        ),
        (
            Some(0),
            json!([step("vf-vgpu", L40S_VF0, "created")]),
            vec![L40S_VF0.to_owned()]
        )
    );
}

#[test]
fn restore_device_of_a_vf_makes_only_its_own_vgpu() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let out = vgpuctl(&h, &["restore", "--device", L40S_VF1, "--json"]);
    assert_eq!(
        (
            out.status.code(),
            json(&out)["steps"].clone(),
            vgpu_ids(&h, L40S)
        ),
        (
            Some(0),
            json!([step("vf-vgpu", L40S_VF1, "created")]),
            vec![L40S_VF1.to_owned()]
        )
    );
}

#[test]
fn restore_device_of_a_vf_nvidia_has_not_bound_is_waiting() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let unbind = h.sim.root().join("sys/bus/pci/drivers/nvidia/unbind");
    std::fs::write(unbind, L40S_VF0).unwrap();
    let out = vgpuctl(&h, &["restore", "--device", L40S_VF0, "--json"]);
    assert_eq!(
        (out.status.code(), json(&out)["steps"].clone()),
        (
            Some(0),
            json!([{
                "action": "vf-vgpu",
                "device": L40S_VF0,
                "outcome": "waiting",
                "error": null,
                "kind": null,
                "reason": format!(
                    "{L40S_VF0} has no NVIDIA vendor-VFIO interface yet (nvidia has not bound it)"
                )
            }])
        )
    );
}

#[test]
fn restore_device_table_shows_what_a_waiting_step_lacks() {
    let h = host("l40s-vendor-vfio");
    vgpuctl(&h, &["define", L40S, "--type", "L40S-24Q", "--auto"]);
    let unbind = h.sim.root().join("sys/bus/pci/drivers/nvidia/unbind");
    std::fs::write(unbind, L40S_VF0).unwrap();
    let out = vgpuctl(&h, &["restore", "--device", L40S_VF0]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .nth(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")),
        Some(format!(
            "vf-vgpu {L40S_VF0} waiting {L40S_VF0} has no NVIDIA vendor-VFIO interface yet \
             (nvidia has not bound it)"
        ))
    );
}
