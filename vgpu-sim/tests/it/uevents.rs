//! The uevent log `.vgpu-sim/uevents`: per operation, the events the kernel sends, in its
//! order (VFs and mdevs `add`/`bind`/`unbind`/`remove`, a parent's `change` with
//! `MDEV_STATE`, VFIO nodes), and synthetic events written to a device's `uevent`.

use crate::common;

use crate::common::{
    T4, UUID_A, cat, driver_file, echo, eventually, host, mdev_dir, mdev_type, pci, unbind_lock,
};
use vgpu_sim::SimHost;

/// `flex-sriov`: the Flex PF and its VFs once enabled.
const FLEX_PF: &str = "0000:4d:00.0";
/// `l40s-vendor-vfio`: the first L40S VF.
const L40S_VF0: &str = "0000:41:00.4";
/// `a40-vf-mdev` (kernel 5.15): the A40's first VF.
const A40_VF0: &str = "0000:41:00.4";

/// The log, each event shortened to `<action> <last devpath component> <subsystem>` and its
/// `DRIVER`, `MDEV_STATE` and `SYNTH_UUID`, if any.
fn events(h: &SimHost) -> Vec<String> {
    let text = cat(&h.root().join(".vgpu-sim/uevents")).expect("uevents");
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let name = words[2].rsplit('/').next().unwrap_or_default();
            let mut short = format!("{} {name} {}", words[1], words[3]);
            for w in &words[4..] {
                if w.starts_with("DRIVER=")
                    || w.starts_with("MDEV_STATE=")
                    || w.starts_with("SYNTH_UUID=")
                {
                    short.push(' ');
                    short.push_str(w);
                }
            }
            short
        })
        .collect()
}

fn clear(h: &SimHost) {
    h.control("uevents-clear").expect("clear");
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn uevents_log_is_empty_after_boot() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(events(&h), Vec::<String>::new());
}

#[test]
fn uevents_vf_enable_sends_add_then_bind_for_each_vf() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(
        events(&h),
        strings(&[
            "add 0000:4d:00.1 pci",
            "bind 0000:4d:00.1 pci DRIVER=i915",
            "add 0000:4d:00.2 pci",
            "bind 0000:4d:00.2 pci DRIVER=i915",
        ])
    );
}

#[test]
fn uevents_vf_disable_sends_unbind_then_remove_for_each_vf() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    clear(&h);
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "0").expect("disable");
    assert_eq!(
        events(&h),
        strings(&[
            "unbind 0000:4d:00.1 pci",
            "remove 0000:4d:00.1 pci",
            "unbind 0000:4d:00.2 pci",
            "remove 0000:4d:00.2 pci",
        ])
    );
}

#[test]
fn uevents_async_probe_sends_bind_after_the_write() {
    let h = host("flex-sriov");
    h.control("latency async-probe 200").expect("control");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "1").expect("enable");
    let at_once = events(&h);
    assert!(eventually(|| events(&h).len() == 2));
    assert_eq!(
        (at_once, events(&h)),
        (
            strings(&["add 0000:4d:00.1 pci"]),
            strings(&["add 0000:4d:00.1 pci", "bind 0000:4d:00.1 pci DRIVER=i915"])
        )
    );
}

#[test]
fn uevents_mdev_create_sends_add_vfio_nodes_then_bind() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    let group = common::link_name(&mdev_dir(&h, UUID_A).join("iommu_group")).expect("group");
    assert_eq!(
        events(&h),
        vec![
            format!("add {UUID_A} mdev"),
            format!("add {group} vfio"),
            "add vfio0 vfio-dev".to_owned(),
            format!("bind {UUID_A} mdev DRIVER=nvidia-vgpu-vfio"),
        ]
    );
}

#[test]
fn uevents_mdev_remove_sends_vfio_removals_then_unbind_and_remove() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    let group = common::link_name(&mdev_dir(&h, UUID_A).join("iommu_group")).expect("group");
    clear(&h);
    echo(&mdev_dir(&h, UUID_A).join("remove"), "1").expect("remove");
    assert_eq!(
        events(&h),
        vec![
            "remove vfio0 vfio-dev".to_owned(),
            format!("remove {group} vfio"),
            format!("unbind {UUID_A} mdev"),
            format!("remove {UUID_A} mdev"),
        ]
    );
}

#[test]
fn uevents_mdev_on_kernel_5_15_binds_vfio_mdev() {
    let h = host("a40-vf-mdev");
    echo(&mdev_type(&h, A40_VF0, "nvidia-558", "create"), UUID_A).expect("create");
    assert_eq!(
        events(&h).last(),
        Some(&format!("bind {UUID_A} mdev DRIVER=vfio_mdev"))
    );
}

#[test]
fn uevents_parent_unbind_unregisters_before_unbind() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    echo(&mdev_dir(&h, UUID_A).join("remove"), "1").expect("remove");
    echo(&unbind_lock(&h, T4), "1").expect("lock");
    clear(&h);
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind");
    assert_eq!(
        events(&h),
        strings(&[
            "change 0000:3b:00.0 pci DRIVER=nvidia MDEV_STATE=unregistered",
            "unbind 0000:3b:00.0 pci",
        ])
    );
}

#[test]
fn uevents_parent_bind_registers_before_bind() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("lock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind");
    clear(&h);
    echo(&driver_file(&h, "nvidia", "bind"), T4).expect("bind");
    assert_eq!(
        events(&h),
        strings(&[
            "change 0000:3b:00.0 pci DRIVER=nvidia MDEV_STATE=registered",
            "bind 0000:3b:00.0 pci DRIVER=nvidia",
        ])
    );
}

#[test]
fn uevents_vendor_vf_type_registers_its_vfio_nodes() {
    let h = host("l40s-vendor-vfio");
    echo(&pci(&h, L40S_VF0, "nvidia/current_vgpu_type"), "1145").expect("create");
    let group = common::link_name(&pci(&h, L40S_VF0, "iommu_group")).expect("group");
    assert_eq!(
        events(&h),
        vec![format!("add {group} vfio"), "add vfio0 vfio-dev".to_owned()]
    );
}

#[test]
fn uevents_line_carries_pci_variables() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "1").expect("enable");
    let text = cat(&h.root().join(".vgpu-sim/uevents")).expect("uevents");
    assert_eq!(
        text.lines().next(),
        Some(
            "1 add /devices/pci0000:4c/0000:4c:00.0/0000:4d:00.1 pci PCI_CLASS=38000 \
             PCI_ID=8086:56C0 PCI_SUBSYS_ID=8086:4905 PCI_SLOT_NAME=0000:4d:00.1 \
             MODALIAS=pci:v00008086d000056C0sv00008086sd00004905bc03sc80i00"
        )
    );
}

#[test]
fn uevents_written_action_is_sent_as_synthetic_event() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "uevent"), "change\n").expect("write");
    assert_eq!(
        events(&h),
        strings(&["change 0000:4d:00.0 pci DRIVER=i915 SYNTH_UUID=0"])
    );
}

#[test]
fn uevents_written_unknown_action_is_einval() {
    let h = host("flex-sriov");
    assert_eq!(
        echo(&pci(&h, FLEX_PF, "uevent"), "poke\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn uevents_clear_empties_the_log_and_numbering_goes_on() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "uevent"), "change").expect("first");
    clear(&h);
    echo(&pci(&h, FLEX_PF, "uevent"), "change").expect("second");
    let text = cat(&h.root().join(".vgpu-sim/uevents")).expect("uevents");
    assert_eq!(
        text.lines().map(|l| &l[..9]).collect::<Vec<_>>(),
        vec!["2 change "]
    );
}

#[test]
fn uevents_api_renders_as_the_file() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    let rendered: String = h.uevents().iter().map(|e| format!("{e}\n")).collect();
    assert_eq!(Ok(rendered), cat(&h.root().join(".vgpu-sim/uevents")));
}
