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
