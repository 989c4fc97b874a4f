//! MIG-backed vGPUs on the `h200-mig` host: GPU instances written to a VF's
//! `nvidia/gpu_instance_id` before `current_vgpu_type`.

use crate::common;

use crate::common::{cat, echo, host, pci};

const VF0: &str = "0000:18:00.4";
const VF1: &str = "0000:18:00.5";
const VF2: &str = "0000:18:00.6";

fn nv(h: &common::SimHost, vf: &str, file: &str) -> std::path::PathBuf {
    pci(h, vf, &format!("nvidia/{file}"))
}

#[test]
fn mig_creatable_lists_mig_backed_types_only() {
    let h = host("h200-mig");
    assert_eq!(
        cat(&nv(&h, VF0, "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n1415  : NVIDIA H200X-2-35C\n".into())
    );
}

#[test]
fn mig_gpu_instance_reads_enxio_until_written() {
    let h = host("h200-mig");
    assert_eq!(cat(&nv(&h, VF0, "gpu_instance_id")), Err(libc::ENXIO));
}

#[test]
fn mig_gpu_instance_write_reads_back() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("GPU instance 9 exists");
    assert_eq!(cat(&nv(&h, VF0, "gpu_instance_id")), Ok("9\n".into()));
}

#[test]
fn mig_unknown_gpu_instance_write_is_einval() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&nv(&h, VF0, "gpu_instance_id"), "4"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_type_without_gpu_instance_is_einval() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&nv(&h, VF0, "current_vgpu_type"), "1414"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_type_after_gpu_instance_creates_vgpu() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("MIG-backed vGPU");
    assert_eq!(cat(&nv(&h, VF0, "current_vgpu_type")), Ok("1414\n".into()));
}

#[test]
fn mig_type_on_instance_of_other_profile_is_einval() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "3").expect("2g.35gb instance");
    assert_eq!(
        echo(&nv(&h, VF0, "current_vgpu_type"), "1414"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_type_on_instance_in_use_is_ebusy() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("first vGPU");
    echo(&nv(&h, VF1, "gpu_instance_id"), "9").expect("the VF takes the id");
    assert_eq!(
        echo(&nv(&h, VF1, "current_vgpu_type"), "1414"),
        Err(libc::EBUSY)
    );
}

#[test]
fn mig_types_of_two_profiles_share_the_gpu() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("1g instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("1g vGPU");
    echo(&nv(&h, VF1, "gpu_instance_id"), "3").expect("2g instance");
    echo(&nv(&h, VF1, "current_vgpu_type"), "1415").expect("2g vGPU beside it");
    assert_eq!(cat(&nv(&h, VF1, "current_vgpu_type")), Ok("1415\n".into()));
}

#[test]
fn mig_profile_without_free_instance_leaves_creatable() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "3").expect("the only 2g instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1415").expect("2g vGPU");
    assert_eq!(
        cat(&nv(&h, VF2, "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n".into())
    );
}

#[test]
fn mig_gpu_instance_write_while_vgpu_is_ebusy() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("vGPU");
    assert_eq!(
        echo(&nv(&h, VF0, "gpu_instance_id"), "10"),
        Err(libc::EBUSY)
    );
}

#[test]
fn mig_clear_type_forgets_gpu_instance() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("vGPU");
    echo(&nv(&h, VF0, "current_vgpu_type"), "0").expect("destroy");
    assert_eq!(cat(&nv(&h, VF0, "gpu_instance_id")), Err(libc::ENXIO));
}

#[test]
fn mig_placement_id_write_reads_back() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "placement_id"), "4").expect("placement");
    assert_eq!(cat(&nv(&h, VF0, "placement_id")), Ok("4\n".into()));
}

// ----- GPU instances made and removed through the control file, as NVML does -----

#[test]
fn mig_gpu_instance_added_by_control_gets_lowest_free_id_and_is_usable() {
    let h = host("h200-mig");
    h.control("gpu-instance-add 0000:18:00.0 1g.18gb 2")
        .expect("slice 2 is free");
    echo(&nv(&h, VF0, "gpu_instance_id"), "1").expect("instance 1 exists now");
    assert_eq!(cat(&nv(&h, VF0, "gpu_instance_id")), Ok("1\n".into()));
}

#[test]
fn mig_gpu_instance_removed_by_control_is_einval_to_name() {
    let h = host("h200-mig");
    h.control("gpu-instance-remove 0000:18:00.0 3")
        .expect("instance 3 runs no vGPU");
    assert_eq!(
        echo(&nv(&h, VF0, "gpu_instance_id"), "3"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_gpu_instance_remove_under_a_vgpu_is_refused_and_keeps_it() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "9").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1414").expect("vGPU");
    let refused = h.control("gpu-instance-remove 0000:18:00.0 9");
    assert_eq!(
        (refused.is_err(), cat(&nv(&h, VF0, "gpu_instance_id"))),
        (true, Ok("9\n".into()))
    );
}

#[test]
fn mig_mode_off_is_refused_while_instances_exist_then_taken() {
    let h = host("h200-mig");
    let refused = h.control("mig-mode 0000:18:00.0 off").is_err();
    for id in [9, 10, 3] {
        h.control(&format!("gpu-instance-remove 0000:18:00.0 {id}"))
            .expect("no vGPU runs there");
    }
    h.control("mig-mode 0000:18:00.0 off")
        .expect("no instance left");
    assert_eq!(
        (
            refused,
            cat(&nv(&h, VF0, "creatable_vgpu_types")).map(|t| t.contains("H200X-1-18C"))
        ),
        (true, Ok(false))
    );
}

#[test]
fn mig_gpu_instance_add_overlapping_an_instance_is_enospc() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&control(&h), "gpu-instance-add 0000:18:00.0 1g.18gb 4"),
        Err(libc::ENOSPC)
    );
}

#[test]
fn mig_gpu_instance_add_past_instance_count_is_enospc() {
    let h = host("h200-mig");
    h.control("gpu-instance-add 0000:18:00.0 1g.18gb+me 6")
        .expect("the first 1g.18gb+me");
    assert_eq!(
        echo(&control(&h), "gpu-instance-add 0000:18:00.0 1g.18gb+me 1"),
        Err(libc::ENOSPC)
    );
}

#[test]
fn mig_gpu_instance_add_at_a_start_outside_the_placements_is_einval() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&control(&h), "gpu-instance-add 0000:18:00.0 2g.35gb 3"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_gpu_instance_add_of_a_profile_the_gpu_lacks_is_einval() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&control(&h), "gpu-instance-add 0000:18:00.0 2g.20gb 2"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mig_gpu_instance_add_with_mig_mode_off_is_eopnotsupp() {
    let h = host("h200-mig");
    for id in [9, 10, 3] {
        h.control(&format!("gpu-instance-remove 0000:18:00.0 {id}"))
            .expect("no vGPU runs there");
    }
    h.control("mig-mode 0000:18:00.0 off")
        .expect("no instance left");
    assert_eq!(
        echo(&control(&h), "gpu-instance-add 0000:18:00.0 1g.18gb 0"),
        Err(libc::EOPNOTSUPP)
    );
}

#[test]
fn mig_mode_on_while_a_time_sliced_vgpu_runs_is_ebusy() {
    let h = host("h200-mig");
    for id in [9, 10, 3] {
        h.control(&format!("gpu-instance-remove 0000:18:00.0 {id}"))
            .expect("no vGPU runs there");
    }
    h.control("mig-mode 0000:18:00.0 off")
        .expect("no instance left");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1428").expect("a time-sliced vGPU");
    assert_eq!(
        echo(&control(&h), "mig-mode 0000:18:00.0 on"),
        Err(libc::EBUSY)
    );
}

#[test]
fn mig_mode_on_a_gpu_without_mig_is_enodev() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&control(&h), "mig-mode 0000:41:00.0 on"),
        Err(libc::ENODEV)
    );
}

// ----- The driver state published for the test NVML -----

fn control(h: &common::SimHost) -> std::path::PathBuf {
    h.root().join(".vgpu-sim/control")
}

fn state(h: &common::SimHost, gpu: &str) -> serde_json::Value {
    let text = cat(&h.root().join(format!(".vgpu-sim/nvidia/{gpu}.json"))).expect("state file");
    serde_json::from_str(&text).expect("JSON")
}

fn instances(h: &common::SimHost) -> serde_json::Value {
    state(h, "0000:18:00.0")["mig"]["gpu_instances"].clone()
}

fn instance(id: u32, profile: &str, start: u32, size: u32) -> serde_json::Value {
    serde_json::json!({"id": id, "profile": profile, "start": start, "size": size})
}

#[test]
fn state_lists_the_boot_instances_with_their_placements_in_id_order() {
    let h = host("h200-mig");
    assert_eq!(
        instances(&h),
        serde_json::json!([
            instance(3, "2g.35gb", 0, 2),
            instance(9, "1g.18gb", 4, 1),
            instance(10, "1g.18gb", 5, 1)
        ])
    );
}

#[test]
fn state_after_gpu_instance_add_has_the_new_instance_with_the_lowest_free_id() {
    let h = host("h200-mig");
    echo(&control(&h), "gpu-instance-add 0000:18:00.0 1g.18gb 6").expect("slice 6 is free");
    assert_eq!(
        instances(&h),
        serde_json::json!([
            instance(1, "1g.18gb", 6, 1),
            instance(3, "2g.35gb", 0, 2),
            instance(9, "1g.18gb", 4, 1),
            instance(10, "1g.18gb", 5, 1)
        ])
    );
}

#[test]
fn state_after_gpu_instance_remove_lacks_the_instance() {
    let h = host("h200-mig");
    echo(&control(&h), "gpu-instance-remove 0000:18:00.0 9").expect("no vGPU on 9");
    assert_eq!(
        instances(&h),
        serde_json::json!([instance(3, "2g.35gb", 0, 2), instance(10, "1g.18gb", 5, 1)])
    );
}

#[test]
fn state_after_an_overlapping_add_is_unchanged() {
    let h = host("h200-mig");
    let before = instances(&h);
    let refused = echo(&control(&h), "gpu-instance-add 0000:18:00.0 2g.35gb 4");
    assert_eq!((refused, instances(&h)), (Err(libc::ENOSPC), before));
}

#[test]
fn state_after_removing_an_instance_in_use_is_ebusy_and_unchanged() {
    let h = host("h200-mig");
    echo(&nv(&h, VF0, "gpu_instance_id"), "3").expect("instance");
    echo(&nv(&h, VF0, "current_vgpu_type"), "1415").expect("vGPU on instance 3");
    let before = instances(&h);
    let refused = echo(&control(&h), "gpu-instance-remove 0000:18:00.0 3");
    assert_eq!((refused, instances(&h)), (Err(libc::EBUSY), before));
}

#[test]
fn state_of_h200_has_mig_mode_profiles_and_every_catalog_type() {
    let h = host("h200-mig");
    let s = state(&h, "0000:18:00.0");
    let profiles: Vec<(String, u64)> = s["mig"]["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["id"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        (
            &s["address"],
            &s["name"],
            &s["pci_device_id"],
            &s["mig"]["enabled"],
            profiles,
            &s["supported_vgpu_types"]
        ),
        (
            &serde_json::json!("0000:18:00.0"),
            &serde_json::json!("NVIDIA H200"),
            &serde_json::json!(0x2335_10de_u32),
            &serde_json::json!(true),
            vec![
                ("1g.18gb".to_owned(), 19),
                ("2g.35gb".to_owned(), 14),
                ("3g.71gb".to_owned(), 9),
                ("4g.71gb".to_owned(), 5),
                ("7g.141gb".to_owned(), 0),
                ("1g.18gb+me".to_owned(), 20),
                ("1g.35gb".to_owned(), 15),
            ],
            &serde_json::json!([
                {"id": 1414, "name": "NVIDIA H200X-1-18C", "framebuffer_mib": 18432,
                 "max_instances": 7, "gpu_instance_profile": "1g.18gb"},
                {"id": 1415, "name": "NVIDIA H200X-2-35C", "framebuffer_mib": 35840,
                 "max_instances": 3, "gpu_instance_profile": "2g.35gb"},
                {"id": 1428, "name": "NVIDIA H200X-141C", "framebuffer_mib": 144384,
                 "max_instances": 1, "gpu_instance_profile": null},
                {"id": 1416, "name": "NVIDIA H200X-1-35C", "framebuffer_mib": 35840,
                 "max_instances": 4, "gpu_instance_profile": "1g.35gb"},
                {"id": 1417, "name": "NVIDIA H200X-3-71C", "framebuffer_mib": 72704,
                 "max_instances": 2, "gpu_instance_profile": "3g.71gb"},
                {"id": 1418, "name": "NVIDIA H200X-4-71C", "framebuffer_mib": 72704,
                 "max_instances": 1, "gpu_instance_profile": "4g.71gb"},
                {"id": 1419, "name": "NVIDIA H200X-7-141C", "framebuffer_mib": 144384,
                 "max_instances": 1, "gpu_instance_profile": "7g.141gb"},
                {"id": 1420, "name": "NVIDIA H200X-1-18CME", "framebuffer_mib": 18432,
                 "max_instances": 1, "gpu_instance_profile": "1g.18gb+me"},
                {"id": 1421, "name": "NVIDIA H200X-4C", "framebuffer_mib": 4096,
                 "max_instances": 32, "gpu_instance_profile": null},
                {"id": 1422, "name": "NVIDIA H200X-7C", "framebuffer_mib": 7168,
                 "max_instances": 20, "gpu_instance_profile": null},
                {"id": 1423, "name": "NVIDIA H200X-8C", "framebuffer_mib": 8192,
                 "max_instances": 16, "gpu_instance_profile": null},
                {"id": 1424, "name": "NVIDIA H200X-14C", "framebuffer_mib": 14336,
                 "max_instances": 10, "gpu_instance_profile": null},
                {"id": 1425, "name": "NVIDIA H200X-17C", "framebuffer_mib": 17408,
                 "max_instances": 8, "gpu_instance_profile": null},
                {"id": 1426, "name": "NVIDIA H200X-28C", "framebuffer_mib": 28672,
                 "max_instances": 5, "gpu_instance_profile": null},
                {"id": 1427, "name": "NVIDIA H200X-35C", "framebuffer_mib": 35840,
                 "max_instances": 4, "gpu_instance_profile": null},
                {"id": 1429, "name": "NVIDIA H200X-70C", "framebuffer_mib": 71680,
                 "max_instances": 2, "gpu_instance_profile": null}
            ])
        )
    );
}

#[test]
fn state_profiles_say_how_many_more_fit() {
    let h = host("h200-mig");
    let remaining: Vec<(String, u64)> = state(&h, "0000:18:00.0")["mig"]["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["remaining"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        remaining,
        vec![
            ("1g.18gb".to_owned(), 3),
            ("2g.35gb".to_owned(), 1),
            ("3g.71gb".to_owned(), 0),
            ("4g.71gb".to_owned(), 0),
            ("7g.141gb".to_owned(), 0),
            ("1g.18gb+me".to_owned(), 1),
            ("1g.35gb".to_owned(), 2),
        ]
    );
}

#[test]
fn state_lists_the_enabled_vfs_in_order() {
    let h = host("h200-mig");
    let vfs = state(&h, "0000:18:00.0")["vfs"].clone();
    assert_eq!(
        (
            vfs[0].clone(),
            vfs[15].clone(),
            vfs.as_array().map(Vec::len)
        ),
        (
            serde_json::json!("0000:18:00.4"),
            serde_json::json!("0000:18:02.3"),
            Some(16)
        )
    );
}

#[test]
fn state_of_a_gpu_without_mig_has_null_mig() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(state(&h, "0000:41:00.0")["mig"], serde_json::Value::Null);
}

#[test]
fn state_of_l40s_lists_all_30_catalog_rows_as_supported() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        state(&h, "0000:41:00.0")["supported_vgpu_types"]
            .as_array()
            .map(Vec::len),
        Some(30)
    );
}

#[test]
fn state_directory_lists_one_file_per_vendor_vfio_gpu() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        common::ls(&h.root().join(".vgpu-sim/nvidia")),
        Ok(vec![
            "0000:41:00.0.json".to_owned(),
            "0000:c1:00.0.json".to_owned()
        ])
    );
}

#[test]
fn state_file_write_is_refused() {
    let h = host("h200-mig");
    assert_eq!(
        echo(&h.root().join(".vgpu-sim/nvidia/0000:18:00.0.json"), "{}"),
        Err(libc::EACCES)
    );
}
