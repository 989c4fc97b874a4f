//! MIG-backed vGPUs on the `h200-mig` host: GPU instances written to a VF's
//! `nvidia/gpu_instance_id` before `current_vgpu_type`.

mod common;

use common::{cat, echo, host, pci};

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
fn mig_gpu_instance_added_by_control_is_usable() {
    let h = host("h200-mig");
    h.control("gpu-instance-add 0000:18:00.0 11 1g.18gb")
        .expect("a new instance");
    echo(&nv(&h, VF0, "gpu_instance_id"), "11").expect("instance 11 exists now");
    assert_eq!(cat(&nv(&h, VF0, "gpu_instance_id")), Ok("11\n".into()));
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
fn mig_gpu_instance_add_with_a_used_id_is_refused() {
    let h = host("h200-mig");
    assert!(
        h.control("gpu-instance-add 0000:18:00.0 9 1g.18gb")
            .is_err()
    );
}
