use super::*;
use vgpu_plan::testing::fleet::{Model, gpu};

#[test]
fn custom_name_strips_vendor_and_upper_cases() {
    assert_eq!(custom_name("NVIDIA L40S-12Q"), "CUSTOM_VGPU_L40S_12Q");
}

#[test]
fn alias_name_is_the_class_in_lower_case_with_dashes() {
    assert_eq!(alias_name("CUSTOM_VGPU_FLEX170_M2"), "vgpu-flex170-m2");
}

/// A mixed-size L40S whose VFs 0 and 1 hold an L40S-24Q and an L40S-12Q.
fn mixed_l40s_with_two_sizes() -> Inventory {
    let mut l40s = gpu(Model::L40s, "0000:41:00.0".parse().unwrap(), Some(0));
    l40s.size_mode = Some(SizeMode::Mixed);
    for (i, ty) in [(0, "1155"), (1, "1153")] {
        let vf = l40s.vfs[i].address;
        l40s.vfs[i].vgpu_type = Some(ty.to_owned());
        l40s.vgpus.push(crate::model::Vgpu {
            id: VgpuHandle::Vf(vf),
            type_id: ty.to_owned(),
            parent: l40s.address,
            placement: None,
        });
    }
    Inventory {
        gpus: vec![l40s],
        warnings: Vec::new(),
    }
}

#[test]
fn a_mixed_size_gpu_with_several_sizes_is_left_out_saying_why() {
    let nova = build(
        NovaRelease::Epoxy,
        &mixed_l40s_with_two_sizes(),
        &[],
        &[],
        &[],
        &BTreeMap::new(),
    );

    assert!(nova.device_spec.is_empty());
    assert_eq!(nova.unusable.len(), 1);
    assert_eq!(
        nova.unusable[0].reason,
        "it runs mixed-size mode with vGPUs of several sizes (NVIDIA L40S-12Q, NVIDIA L40S-24Q): \
         Nova counts one type per GPU, so it is left out"
    );
}

#[test]
fn a_mixed_size_gpu_with_one_size_is_counted() {
    let mut inventory = mixed_l40s_with_two_sizes();
    let l40s = &mut inventory.gpus[0];
    l40s.vgpus.truncate(1);
    l40s.vfs[1].vgpu_type = None;

    let nova = build(
        NovaRelease::Epoxy,
        &inventory,
        &[],
        &[],
        &[],
        &BTreeMap::new(),
    );

    assert!(nova.unusable.is_empty(), "{:?}", nova.unusable);
}
