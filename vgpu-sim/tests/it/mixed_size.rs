//! NVIDIA's mixed-size mode on vendor-VFIO GPUs: the `size-mode` control line, placements
//! taken at `current_vgpu_type` (the lowest free supported id, or `vgpu_params`'s
//! `vgpu-placement-id`), and what `.vgpu-sim/nvidia/<addr>.json` publishes. L40S type ids:
//! 1147 1Q, 1152 8Q, 1154 16Q, 1155 24Q, 1156 48Q. On an A10's mediated devices the
//! placement moves with the mdev's own `nvidia/vgpu_params` until the device is opened.

use crate::common;

use crate::common::{UUID_A, cat, echo, host, mdev_type, pci};

const L40S: &str = "0000:41:00.0";
const VF0: &str = "0000:41:00.4";
const VF1: &str = "0000:41:00.5";
const VF2: &str = "0000:41:00.6";

fn nv(h: &common::SimHost, vf: &str, file: &str) -> std::path::PathBuf {
    pci(h, vf, &format!("nvidia/{file}"))
}

fn control(h: &common::SimHost) -> std::path::PathBuf {
    h.root().join(".vgpu-sim/control")
}

fn state(h: &common::SimHost, gpu: &str) -> serde_json::Value {
    let text = cat(&h.root().join(format!(".vgpu-sim/nvidia/{gpu}.json"))).expect("state file");
    serde_json::from_str(&text).expect("JSON")
}

/// `(vf, type_id, placement_id)` of each published vGPU.
fn placements(h: &common::SimHost, gpu: &str) -> Vec<(String, String, u64)> {
    state(h, gpu)["vgpus"]
        .as_array()
        .expect("vgpus")
        .iter()
        .map(|v| {
            (
                v["vf"].as_str().unwrap_or_default().to_owned(),
                v["type_id"].as_str().unwrap_or_default().to_owned(),
                v["placement_id"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// `(placement_size, ids)` in `mode` (`placement_ids_mixed` ...) of every type whose name
/// ends with `suffix`, largest first as the catalog lists them.
fn table(h: &common::SimHost, gpu: &str, field: &str, suffix: &str) -> Vec<(u64, Vec<u64>)> {
    let mut rows: Vec<(u64, Vec<u64>)> = state(h, gpu)["supported_vgpu_types"]
        .as_array()
        .expect("types")
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.ends_with(suffix)))
        .map(|t| {
            let ids = t[field]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
                .unwrap_or_default();
            (t["placement_size"].as_u64().unwrap_or(0), ids)
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows
}

fn mixed(h: &common::SimHost) {
    h.control(&format!("size-mode {L40S} mixed"))
        .expect("an idle L40S takes mixed mode");
}

fn ids(list: &[u64]) -> Vec<u64> {
    list.to_vec()
}

#[test]
fn size_mode_at_boot_is_equal_with_region_48() {
    let h = host("l40s-vendor-vfio");
    let s = state(&h, L40S);
    assert_eq!(
        (s["size_mode"].as_str(), s["placement_region"].as_u64()),
        (Some("equal"), Some(48))
    );
}

#[test]
fn size_mode_control_line_sets_mixed() {
    let h = host("l40s-vendor-vfio");
    echo(&control(&h), &format!("size-mode {L40S} mixed\n")).expect("idle GPU");
    assert_eq!(state(&h, L40S)["size_mode"].as_str(), Some("mixed"));
}

#[test]
fn size_mode_while_vgpu_exists_is_ebusy() {
    let h = host("l40s-vendor-vfio");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1155").expect("24Q");
    let refused = echo(&control(&h), &format!("size-mode {L40S} mixed"));
    assert_eq!(
        (refused, state(&h, L40S)["size_mode"].as_str()),
        (Err(libc::EBUSY), Some("equal"))
    );
}

#[test]
fn size_mode_on_unsupported_gpu_is_enodev() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&control(&h), "size-mode 0000:18:00.0 mixed"),
        Err(libc::ENODEV)
    );
}

#[test]
fn size_mode_on_vf_is_enodev() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&control(&h), &format!("size-mode {VF0} mixed")),
        Err(libc::ENODEV)
    );
}

#[test]
fn size_mode_unsupported_gpu_publishes_no_placements() {
    let h = host("h200-mig");
    let s = state(&h, "0000:18:00.0");
    assert_eq!(
        (
            s.get("size_mode").is_none(),
            s.get("placement_region").is_none(),
            s["supported_vgpu_types"][0].get("placement_size").is_none()
        ),
        (true, true, true)
    );
}

#[test]
fn size_mode_is_lost_at_a_new_boot() {
    let first = host("l40s-vendor-vfio");
    mixed(&first);
    drop(first);
    let second = host("l40s-vendor-vfio");
    assert_eq!(state(&second, L40S)["size_mode"].as_str(), Some("equal"));
}

#[test]
fn size_mode_is_lost_when_the_gpu_leaves_nvidia() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&common::unbind_lock(&h, L40S), "1").expect("lock");
    echo(&common::driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&common::driver_file(&h, "nvidia", "bind"), L40S).expect("bind");
    assert_eq!(state(&h, L40S)["size_mode"].as_str(), Some("equal"));
}

#[test]
fn mixed_first_vgpu_takes_lowest_id() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1147").expect("1Q");
    assert_eq!(placements(&h, L40S), vec![(VF0.into(), "1147".into(), 0)]);
}

#[test]
fn mixed_8q_after_1q_at_0_takes_16() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1147").expect("1Q at 0");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1152").expect("8Q");
    assert_eq!(
        placements(&h, L40S),
        vec![
            (VF0.into(), "1147".into(), 0),
            (VF1.into(), "1152".into(), 16)
        ]
    );
}

#[test]
fn mixed_16q_after_1q_at_0_takes_32() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1147").expect("1Q at 0");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1154").expect("16Q");
    assert_eq!(placements(&h, L40S)[1], (VF1.into(), "1154".into(), 32));
}

#[test]
fn mixed_placement_id_in_vgpu_params_is_honoured() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "vgpu_params"), "vgpu-placement-id=24\n").expect("params");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1152").expect("8Q at 24");
    assert_eq!(placements(&h, L40S), vec![(VF0.into(), "1152".into(), 24)]);
}

#[test]
fn mixed_unsupported_placement_id_is_einval() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "vgpu_params"), "vgpu-placement-id=8").expect("params");
    assert_eq!(
        echo(&nv(&h, VF0, "current_vgpu_type"), "1152"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mixed_overlapping_placement_id_is_enospc() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1154").expect("16Q at 0");
    echo(&nv(&h, VF1, "vgpu_params"), "vgpu-placement-id=5").expect("params");
    assert_eq!(
        echo(&nv(&h, VF1, "current_vgpu_type"), "1147"),
        Err(libc::ENOSPC)
    );
}

#[test]
fn mixed_refused_placement_leaves_the_vf_without_vgpu() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "vgpu_params"), "vgpu-placement-id=8").expect("params");
    let _refused = echo(&nv(&h, VF0, "current_vgpu_type"), "1152");
    assert_eq!(cat(&nv(&h, VF0, "current_vgpu_type")), Ok("0\n".into()));
}

#[test]
fn vgpu_params_word_without_value_is_einval() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&nv(&h, VF0, "vgpu_params"), "vgpu-placement-id"),
        Err(libc::EINVAL)
    );
}

#[test]
fn vgpu_params_placement_id_not_a_number_is_einval() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&nv(&h, VF0, "vgpu_params"), "vgpu-placement-id=0x10"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mixed_two_sizes_share_the_gpu() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1155").expect("24Q at 0");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1147").expect("1Q beside it");
    assert_eq!(
        placements(&h, L40S),
        vec![
            (VF0.into(), "1155".into(), 0),
            (VF1.into(), "1147".into(), 24)
        ]
    );
}

#[test]
fn mixed_full_gpu_lists_no_creatable_type() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1156").expect("48Q");
    assert_eq!(
        cat(&nv(&h, VF1, "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n".into())
    );
}

#[test]
fn mixed_creatable_placements_skip_taken_slots() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1147").expect("1Q at 0");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1152").expect("8Q at 16");
    assert_eq!(
        table(&h, L40S, "creatable_placement_ids", "-8Q"),
        vec![(8, ids(&[24, 40]))]
    );
}

#[test]
fn mixed_third_vgpu_creatable_on_another_vf() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    echo(&nv(&h, VF0, "current_vgpu_type"), "1155").expect("24Q at 0");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1154").expect("16Q at 32");
    assert_eq!(
        echo(&nv(&h, VF2, "current_vgpu_type"), "1154"),
        Err(libc::EINVAL)
    );
}

#[test]
fn equal_vgpus_take_k_times_size() {
    let h = host("l40s-vendor-vfio");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1152").expect("8Q");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1152").expect("8Q");
    assert_eq!(
        placements(&h, L40S),
        vec![
            (VF0.into(), "1152".into(), 0),
            (VF1.into(), "1152".into(), 8)
        ]
    );
}

#[test]
fn equal_other_type_stays_refused() {
    let h = host("l40s-vendor-vfio");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1155").expect("24Q");
    assert_eq!(
        echo(&nv(&h, VF1, "current_vgpu_type"), "1147"),
        Err(libc::EINVAL)
    );
}

#[test]
fn equal_supported_ids_of_8q_are_multiples_of_8() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        table(&h, L40S, "placement_ids_equal", "-8Q"),
        vec![(8, ids(&[0, 8, 16, 24, 32, 40]))]
    );
}

#[test]
fn table_l40s_published_ids_are_appendix_b() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        table(&h, L40S, "placement_ids_mixed", "Q"),
        vec![
            (48, ids(&[0])),
            (24, ids(&[0, 24])),
            (16, ids(&[0, 32])),
            (12, ids(&[0, 12, 24, 36])),
            (8, ids(&[0, 16, 24, 40])),
            (6, ids(&[0, 6, 12, 18, 24, 30, 36, 42])),
            (4, ids(&[0, 8, 12, 20, 24, 32, 36, 44])),
            (
                3,
                ids(&[0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45])
            ),
            (
                2,
                ids(&[0, 4, 6, 10, 12, 16, 18, 22, 24, 28, 30, 34, 36, 40, 42, 46])
            ),
            (
                1,
                ids(&[0, 5, 6, 11, 12, 17, 18, 23, 24, 29, 30, 35, 36, 41, 42, 47])
            ),
        ]
    );
}

#[test]
fn table_l4_published_ids_are_appendix_b() {
    let h = host("mixed-size");
    assert_eq!(
        table(&h, "0000:41:00.0", "placement_ids_mixed", "Q"),
        vec![
            (24, ids(&[0])),
            (12, ids(&[0, 12])),
            (8, ids(&[0, 16])),
            (6, ids(&[0, 6, 12, 18])),
            (4, ids(&[0, 8, 12, 20])),
            (3, ids(&[0, 3, 6, 9, 12, 15, 18, 21])),
            (2, ids(&[0, 4, 6, 10, 12, 16, 18, 22])),
            (
                1,
                ids(&[0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23])
            ),
        ]
    );
}

#[test]
fn table_h100_published_ids_are_appendix_b() {
    let h = host("mixed-size");
    assert_eq!(
        table(&h, "0000:c1:00.0", "placement_ids_mixed", "C"),
        vec![
            (80, ids(&[0])),
            (40, ids(&[0, 40])),
            (20, ids(&[0, 20, 40, 60])),
            (16, ids(&[0, 24, 40, 64])),
            (10, ids(&[0, 10, 20, 30, 40, 50, 60, 70])),
            (8, ids(&[0, 12, 20, 32, 40, 52, 60, 72])),
            (
                5,
                ids(&[0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75])
            ),
            (
                4,
                ids(&[0, 6, 10, 16, 20, 26, 30, 36, 40, 46, 50, 56, 60, 66, 70, 76])
            ),
        ]
    );
}

#[test]
fn a_gpu_reset_loses_mixed_size_mode() {
    let h = host("l40s-vendor-vfio");
    mixed(&h);
    let reset = h.root().join(format!("sys/bus/pci/devices/{L40S}/reset"));

    echo(&reset, "1").expect("the L40S has a reset method");

    assert_eq!(state(&h, L40S)["size_mode"].as_str(), Some("equal"));
}

#[test]
fn mixed_mdev_on_a10_vf_moves_to_the_placement_its_vgpu_params_name() {
    const A10: &str = "0000:81:00.0";
    let h = host("mixed-size");
    h.control(&format!("size-mode {A10} mixed"))
        .expect("an idle A10 takes mixed mode");
    let mdev = |uuid: &str| -> Vec<(serde_json::Value, serde_json::Value)> {
        let vgpus = state(&h, A10)["vgpus"].clone();
        let vgpus = vgpus.as_array().unwrap().clone();
        vgpus
            .iter()
            .filter(|v| v["mdev"] == uuid)
            .map(|v| (v["type_id"].clone(), v["placement_id"].clone()))
            .collect()
    };

    echo(
        &mdev_type(&h, "0000:81:00.4", "nvidia-9201", "create"),
        UUID_A,
    )
    .expect("A10-1Q");
    let made = mdev(UUID_A);
    let params = h
        .root()
        .join(format!("sys/bus/mdev/devices/{UUID_A}/nvidia/vgpu_params"));
    echo(&params, "vgpu-placement-id=5").expect("a free supported id");
    let moved = mdev(UUID_A);
    // 4 is not a supported id of a 1 GiB type on a 24 GiB region.
    let unsupported = echo(&params, "vgpu-placement-id=4");

    let one_q = state(&h, A10)["supported_vgpu_types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == 9201)
        .map(|t| (t["name"].clone(), t["placement_ids_mixed"].clone()));
    assert_eq!(
        one_q,
        Some((
            "NVIDIA A10-1Q".into(),
            serde_json::json!([0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23])
        ))
    );
    assert_eq!(made, vec![("nvidia-9201".into(), 0.into())]);
    assert_eq!(moved, vec![("nvidia-9201".into(), 5.into())]);
    assert_eq!((unsupported, mdev(UUID_A)), (Err(libc::EINVAL), moved));
}
