//! NVIDIA's vGPU scheduler per GPU (the `vgpu-scheduler` control line, published in
//! `.vgpu-sim/nvidia/<addr>.json`) and the registry lines of `proc/driver/nvidia/params`
//! (`nvidia-registry`).

use crate::common;

use crate::common::{cat, echo, host, pci};

const L40S: &str = "0000:41:00.0";
const VF0: &str = "0000:41:00.4";

fn control(h: &common::SimHost) -> std::path::PathBuf {
    h.root().join(".vgpu-sim/control")
}

/// `(policy, timeslice_ns)` as the GPU's state file publishes them.
fn scheduler(h: &common::SimHost, gpu: &str) -> (String, u64) {
    let text = cat(&h.root().join(format!(".vgpu-sim/nvidia/{gpu}.json"))).expect("state file");
    let s: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    (
        s["scheduler"]["policy"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        s["scheduler"]["timeslice_ns"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The `name` line of `proc/driver/nvidia/params`.
fn params_line(h: &common::SimHost, name: &str) -> Option<String> {
    let text = cat(&h.root().join("proc/driver/nvidia/params")).expect("params");
    text.lines()
        .find(|l| l.split_once(':').is_some_and(|(k, _)| k == name))
        .map(str::to_owned)
}

#[test]
fn scheduler_at_boot_is_best_effort_default_slice() {
    let h = host("l40s-vendor-vfio");

    assert_eq!(scheduler(&h, L40S), ("best-effort".to_owned(), 0));
}

#[test]
fn scheduler_control_line_sets_policy_and_slice() {
    let h = host("l40s-vendor-vfio");

    echo(
        &control(&h),
        &format!("vgpu-scheduler {L40S} equal-share 2000000\n"),
    )
    .expect("idle");

    assert_eq!(scheduler(&h, L40S), ("equal-share".to_owned(), 2_000_000));
}

#[test]
fn scheduler_while_vgpu_exists_is_ebusy() {
    let h = host("l40s-vendor-vfio");
    echo(&pci(&h, VF0, "nvidia/current_vgpu_type"), "1155").expect("24Q");

    assert_eq!(
        echo(
            &control(&h),
            &format!("vgpu-scheduler {L40S} fixed-share 0")
        ),
        Err(libc::EBUSY)
    );
}

#[test]
fn scheduler_fixed_share_in_mixed_mode_is_einval() {
    let h = host("l40s-vendor-vfio");
    h.control(&format!("size-mode {L40S} mixed"))
        .expect("mixed");

    assert_eq!(
        echo(
            &control(&h),
            &format!("vgpu-scheduler {L40S} fixed-share 0")
        ),
        Err(libc::EINVAL)
    );
}

#[test]
fn scheduler_on_vf_is_enodev() {
    let h = host("l40s-vendor-vfio");

    assert_eq!(
        echo(&control(&h), &format!("vgpu-scheduler {VF0} equal-share 0")),
        Err(libc::ENODEV)
    );
}

#[test]
fn scheduler_is_lost_when_the_gpu_leaves_nvidia() {
    let h = host("l40s-vendor-vfio");
    h.control(&format!("vgpu-scheduler {L40S} fixed-share 0"))
        .expect("fixed share");
    echo(&common::unbind_lock(&h, L40S), "1").expect("lock");
    echo(&common::driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&common::driver_file(&h, "nvidia", "bind"), L40S).expect("bind");

    assert_eq!(scheduler(&h, L40S), ("best-effort".to_owned(), 0));
}

#[test]
fn scheduler_is_lost_at_a_new_boot() {
    let first = host("l40s-vendor-vfio");
    first
        .control(&format!("vgpu-scheduler {L40S} fixed-share 0"))
        .expect("fixed share");
    drop(first);

    let second = host("l40s-vendor-vfio");

    assert_eq!(scheduler(&second, L40S), ("best-effort".to_owned(), 0));
}

#[test]
fn params_registry_lines_at_boot_are_empty() {
    let h = host("l40s-vendor-vfio");

    assert_eq!(
        (
            params_line(&h, "RegistryDwords"),
            params_line(&h, "RegistryDwordsPerDevice")
        ),
        (
            Some("RegistryDwords: \"\"".to_owned()),
            Some("RegistryDwordsPerDevice: \"\"".to_owned())
        )
    );
}

#[test]
fn params_registry_line_set_then_emptied() {
    let h = host("l40s-vendor-vfio");
    h.control(&format!(
        "nvidia-registry RegistryDwordsPerDevice pci={L40S};RMDisableScrubOnFree=1"
    ))
    .expect("set");
    let set = params_line(&h, "RegistryDwordsPerDevice");

    h.control("nvidia-registry RegistryDwordsPerDevice")
        .expect("empty");

    assert_eq!(
        (set, params_line(&h, "RegistryDwordsPerDevice")),
        (
            Some(format!(
                "RegistryDwordsPerDevice: \"pci={L40S};RMDisableScrubOnFree=1\""
            )),
            Some("RegistryDwordsPerDevice: \"\"".to_owned())
        )
    );
}

#[test]
fn params_registry_without_nvidia_driver_is_enodev() {
    let h = host("gvtg");

    assert_eq!(
        echo(
            &control(&h),
            "nvidia-registry RegistryDwords RMDisableScrubOnFree=1"
        ),
        Err(libc::ENODEV)
    );
}
