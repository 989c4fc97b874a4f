//! mdev and NVIDIA semantics through plain `std::fs`: creating and removing mediated devices
//! (capacity per physical GPU, GVT-g resources), NVIDIA's vendor-specific VFIO interface and
//! its `unbindLock`.

use crate::common::{
    IGPU, L40S, L40S_VF0, T4, UUID_A, UUID_B, cat, driver_file, drivers_probe, echo, host, link,
    ls, mdev_type, pci, unbind_lock,
};

// ----- mdev -----

#[test]
fn mdev_type_nvidia_description_matches_driver_format() {
    let h = host("mixed");
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-231", "description")),
        Ok("num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=7680x4320, max_instance=8\n"
            .into())
    );
}

#[test]
fn mdev_type_nvidia_name_reads_grid_name() {
    let h = host("mixed");
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-231", "name")),
        Ok("GRID T4-2Q\n".into())
    );
}

#[test]
fn mdev_create_makes_device_under_parent_and_bus() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        link(&h.root().join("sys/bus/mdev/devices").join(UUID_A)),
        Ok(format!(
            "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/{UUID_A}"
        ))
    );
}

#[test]
fn mdev_create_sets_mdev_type_link() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        link(&pci(&h, T4, &format!("{UUID_A}/mdev_type"))),
        Ok("../mdev_supported_types/nvidia-231".into())
    );
}

#[test]
fn mdev_create_links_its_own_iommu_group() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        (
            link(&pci(&h, T4, &format!("{UUID_A}/iommu_group"))),
            ls(&h.root().join("sys/kernel/iommu_groups/174/devices"))
        ),
        (
            Ok("../../../../../kernel/iommu_groups/174".into()),
            Ok(vec![UUID_A.to_owned()])
        )
    );
}

#[test]
fn mdev_create_lists_device_under_type() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        ls(&mdev_type(&h, T4, "nvidia-231", "devices")),
        Ok(vec![UUID_A.to_owned()])
    );
}

#[test]
fn mdev_create_lowers_available_instances() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-231", "available_instances")),
        Ok("7\n".into())
    );
}

#[test]
fn mdev_create_drops_other_nvidia_types_to_zero() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        cat(&mdev_type(&h, T4, "nvidia-222", "available_instances")),
        Ok("0\n".into())
    );
}

#[test]
fn mdev_create_bad_uuid_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-231", "create"), "not-a-uuid"),
        Err(libc::EINVAL)
    );
}

#[test]
fn mdev_create_duplicate_is_eexist() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A),
        Err(libc::EEXIST)
    );
}

#[test]
fn mdev_create_beyond_capacity_is_eusers() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-234", "create"), UUID_A).expect("T4-16Q: one fits");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-234", "create"), UUID_B),
        Err(libc::EUSERS)
    );
}

#[test]
fn mdev_create_other_type_while_one_in_use_is_eusers() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-230", "create"), UUID_B),
        Err(libc::EUSERS)
    );
}

#[test]
fn mdev_remove_destroys_device() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    echo(&pci(&h, T4, &format!("{UUID_A}/remove")), "1").expect("remove");
    assert_eq!(ls(&h.root().join("sys/bus/mdev/devices")), Ok(vec![]));
}

#[test]
fn mdev_remove_number_above_u64_is_einval() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        echo(
            &pci(&h, T4, &format!("{UUID_A}/remove")),
            "99999999999999999999999"
        ),
        Err(libc::EINVAL)
    );
}

#[test]
fn mdev_on_vf_parent_offers_one_instance() {
    let h = host("a40-vf-mdev");
    assert_eq!(
        cat(&mdev_type(
            &h,
            "0000:41:00.4",
            "nvidia-558",
            "available_instances"
        )),
        Ok("1\n".into())
    );
}

#[test]
fn mdev_on_vf_capacity_counts_per_physical_gpu() {
    let h = host("a40-vf-mdev");
    echo(
        &mdev_type(&h, "0000:41:00.4", "nvidia-566", "create"),
        UUID_A,
    )
    .expect("A40-48Q on VF0");
    assert_eq!(
        cat(&mdev_type(
            &h,
            "0000:41:00.5",
            "nvidia-566",
            "available_instances"
        )),
        Ok("0\n".into())
    );
}

#[test]
fn mdev_gvtg_description_is_multiline() {
    let h = host("gvtg");
    assert_eq!(
        cat(&mdev_type(&h, IGPU, "i915-GVTg_V5_4", "description")),
        Ok(
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n"
                .into()
        )
    );
}

#[test]
fn mdev_parent_unbound_disappears_from_mdev_bus() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind");
    assert_eq!(
        ls(&h.root().join("sys/class/mdev_bus")),
        Ok(vec![IGPU.to_owned()])
    );
}

// ----- NVIDIA vendor-specific VFIO -----

fn vf_nv(h: &vgpu_sim::SimHost, vf: &str, file: &str) -> std::path::PathBuf {
    pci(h, vf, &format!("nvidia/{file}"))
}

#[test]
fn vendor_vfio_creatable_starts_with_header_and_padded_ids() {
    let h = host("mixed");
    let text = cat(&vf_nv(&h, L40S_VF0, "creatable_vgpu_types")).expect("read");
    assert_eq!(
        text.lines().take(3).collect::<Vec<_>>(),
        vec![
            "ID    : vGPU Name",
            "1147  : NVIDIA L40S-1Q",
            "1148  : NVIDIA L40S-2Q"
        ]
    );
}

#[test]
fn vendor_vfio_current_type_reads_zero_when_unset() {
    let h = host("mixed");
    assert_eq!(
        cat(&vf_nv(&h, L40S_VF0, "current_vgpu_type")),
        Ok("0\n".into())
    );
}

#[test]
fn vendor_vfio_current_type_write_creates_vgpu() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    assert_eq!(
        cat(&vf_nv(&h, L40S_VF0, "current_vgpu_type")),
        Ok("1145\n".into())
    );
}

#[test]
fn vendor_vfio_used_vf_lists_only_header() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    assert_eq!(
        cat(&vf_nv(&h, L40S_VF0, "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n".into())
    );
}

#[test]
fn vendor_vfio_other_vf_lists_only_type_in_use() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    assert_eq!(
        cat(&vf_nv(&h, "0000:5e:00.5", "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n".into())
    );
}

#[test]
fn vendor_vfio_full_card_lists_only_header() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1156").expect("L40S-48Q fills it");
    assert_eq!(
        cat(&vf_nv(&h, "0000:5e:00.5", "creatable_vgpu_types")),
        Ok("ID    : vGPU Name\n".into())
    );
}

#[test]
fn vendor_vfio_set_while_set_is_eperm() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    assert_eq!(
        echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145"),
        Err(libc::EPERM)
    );
}

#[test]
fn vendor_vfio_clear_when_unset_is_eperm() {
    let h = host("mixed");
    assert_eq!(
        echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "0"),
        Err(libc::EPERM)
    );
}

#[test]
fn vendor_vfio_not_creatable_type_is_einval() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    assert_eq!(
        echo(&vf_nv(&h, "0000:5e:00.5", "current_vgpu_type"), "1147"),
        Err(libc::EINVAL)
    );
}

#[test]
fn vendor_vfio_clear_destroys_vgpu() {
    let h = host("mixed");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "0").expect("destroy");
    assert_eq!(
        cat(&vf_nv(&h, L40S_VF0, "current_vgpu_type")),
        Ok("0\n".into())
    );
}

#[test]
fn nvidia_unbind_pf_with_unbind_lock_unbinds() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind");
    assert_eq!(link(&pci(&h, T4, "driver")), Err(libc::ENOENT));
}

#[test]
fn nvidia_mdev_create_while_unbind_lock_held_is_ebusy() {
    let h = host("mixed");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    assert_eq!(
        echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A),
        Err(libc::EBUSY)
    );
}

#[test]
fn nvidia_current_vgpu_type_while_unbind_lock_held_is_ebusy() {
    let h = host("mixed");
    echo(&unbind_lock(&h, L40S), "1").expect("take unbindLock");
    assert_eq!(
        echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145"),
        Err(libc::EBUSY)
    );
}

#[test]
fn nvidia_sriov_numvfs_partial_count_on_pf_stub_is_einval() {
    let h = host("mixed");
    echo(&unbind_lock(&h, L40S), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind nvidia");
    echo(&pci(&h, L40S, "driver_override"), "pci-pf-stub").expect("override");
    echo(&drivers_probe(&h), L40S).expect("probe pf-stub");
    echo(&pci(&h, L40S, "sriov_numvfs"), "0").expect("disable");
    assert_eq!(echo(&pci(&h, L40S, "sriov_numvfs"), "4"), Err(libc::EINVAL));
}

#[test]
fn nvidia_unbind_lock_on_busy_gpu_reads_back_zero() {
    let h = host("mixed");
    let lock = h
        .root()
        .join("proc/driver/nvidia/gpus")
        .join(L40S)
        .join("unbindLock");
    echo(&vf_nv(&h, L40S_VF0, "current_vgpu_type"), "1145").expect("create");
    echo(&lock, "1").expect("write");
    assert_eq!(cat(&lock), Ok("0\n".into()));
}
