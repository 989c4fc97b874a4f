//! Placement: pack, spread, the one-type rule, NUMA, reserved VFs, and refusing when short.

use crate::Error;
use crate::model::definition::{Start, VfVgpuDefinition};
use crate::place::{Pick, PlaceRequest, PlaceWant, Policy, place};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::addr;
use crate::testing::unit::{by_size, gpu, gpus, host, mixed_l40s_holding, vf};

const A: &str = "0000:41:00.0";
const B: &str = "0000:81:00.0";

/// Two idle L40S, `A` then `B`, with `held` 12Q vGPUs already on `B`.
fn two_l40s(held: u32) -> crate::HostState {
    let mut state = host(vec![gpu(Model::L40s, A), gpu(Model::L40s, B)]);
    fleet::record_vgpus(&mut state.inventory, addr(B), "1153", 12288, 0, held);
    state
}

#[test]
fn place_pack_fills_the_partly_used_gpu_first() {
    let state = two_l40s(1);

    let picks = place(&state, &by_size(2, 12), Policy::Pack).unwrap();

    assert_eq!(gpus(&picks), vec![addr(B), addr(B)]);
}

#[test]
fn place_pack_names_type_and_free_vfs() {
    let state = two_l40s(1);

    let picks = place(&state, &by_size(1, 12), Policy::Pack).unwrap();

    assert_eq!(
        picks,
        vec![Pick {
            gpu: addr(B),
            type_id: "1153".to_owned(),
            type_name: Some("NVIDIA L40S-12Q".to_owned()),
            framebuffer_mib: Some(12288),
            vf: Some(vf(B, 1)),
            needs_scheduler: None,
            placement_id: None,
        }]
    );
}

#[test]
fn place_spread_takes_the_gpu_with_most_room() {
    let state = two_l40s(1);

    let picks = place(&state, &by_size(3, 12), Policy::Spread).unwrap();

    assert_eq!(gpus(&picks), vec![addr(A), addr(A), addr(B)]);
}

#[test]
fn place_pack_best_fit_prefers_the_fuller_gpu() {
    let mut state = two_l40s(2);
    let pick = Pick {
        gpu: addr(A),
        type_id: "1153".to_owned(),
        type_name: None,
        framebuffer_mib: Some(12288),
        vf: Some(vf(A, 0)),
        needs_scheduler: None,
        placement_id: None,
    };
    fleet::record(&mut state.inventory, &pick);

    let picks = place(&state, &by_size(1, 12), Policy::Pack).unwrap();

    assert_eq!(gpus(&picks), vec![addr(B)]);
}

#[test]
fn place_one_type_gpu_holding_another_type_is_skipped() {
    let state = two_l40s(1);

    let picks = place(&state, &by_size(2, 24), Policy::Pack).unwrap();

    assert_eq!(gpus(&picks), vec![addr(A), addr(A)]);
}

#[test]
fn place_numa_node_limits_the_gpus() {
    let state = host(vec![
        fleet::gpu(Model::L40s, addr(A), Some(0)),
        fleet::gpu(Model::L40s, addr(B), Some(1)),
    ]);
    let request = PlaceRequest {
        numa_node: Some(1),
        ..by_size(1, 48)
    };

    let picks = place(&state, &request, Policy::Pack).unwrap();

    assert_eq!(gpus(&picks), vec![addr(B)]);
}

#[test]
fn place_vf_a_definition_holds_is_not_picked() {
    let mut state = host(vec![gpu(Model::L40s, A)]);
    state.definitions.vf_vgpus.push(VfVgpuDefinition {
        placement: None,
        vf: vf(A, 0),
        gpu: addr(A),
        type_id: 1153,
        type_name: None,
        start: Start::Manual,
    });

    let picks = place(&state, &by_size(1, 12), Policy::Pack).unwrap();

    assert_eq!(picks[0].vf, Some(vf(A, 1)));
}

#[test]
fn place_definition_of_stopped_vgpu_keeps_its_capacity() {
    let mut state = host(vec![gpu(Model::L40s, A)]);
    state.definitions.vf_vgpus.push(VfVgpuDefinition {
        placement: None,
        vf: vf(A, 0),
        gpu: addr(A),
        type_id: 1153,
        type_name: None,
        start: Start::Manual,
    });

    let err = place(&state, &by_size(4, 12), Policy::Pack).unwrap_err();

    assert!(matches!(
        err,
        Error::NoPlacement {
            asked: 4,
            fits: 3,
            ..
        }
    ));
}

#[test]
fn place_more_than_fit_chooses_nothing() {
    let state = two_l40s(0);

    let err = place(&state, &by_size(3, 48), Policy::Spread).unwrap_err();

    assert!(matches!(
        err,
        Error::NoPlacement {
            asked: 3,
            fits: 2,
            ..
        }
    ));
}

#[test]
fn place_type_by_name_on_legacy_mdev_has_no_vf() {
    let state = host(vec![gpu(Model::T4, "0000:3b:00.0")]);
    let request = PlaceRequest {
        count: 1,
        want: PlaceWant::Type("T4-2Q".to_owned()),
        numa_node: None,
    };

    let picks = place(&state, &request, Policy::Pack).unwrap();

    assert_eq!(
        picks,
        vec![Pick {
            gpu: addr("0000:3b:00.0"),
            type_id: "nvidia-231".to_owned(),
            type_name: Some("GRID T4-2Q".to_owned()),
            framebuffer_mib: Some(2048),
            vf: None,
            needs_scheduler: None,
            placement_id: None,
        }]
    );
}

#[test]
fn place_size_on_plain_sriov_gpu_takes_a_vf_with_that_share() {
    let mut flex = gpu(Model::Flex170, "0000:4d:00.0");
    fleet::enable_vfs(&mut flex, 8);
    let state = host(vec![flex]);

    let picks = place(&state, &by_size(1, 2), Policy::Pack).unwrap();

    assert_eq!(
        picks,
        vec![Pick {
            gpu: addr("0000:4d:00.0"),
            type_id: "vf".to_owned(),
            type_name: None,
            framebuffer_mib: Some(2048),
            vf: Some(vf("0000:4d:00.0", 0)),
            needs_scheduler: None,
            placement_id: None,
        }]
    );
}

#[test]
fn place_size_above_the_vf_share_does_not_fit() {
    let mut flex = gpu(Model::Flex170, "0000:4d:00.0");
    fleet::enable_vfs(&mut flex, 8);
    let state = host(vec![flex]);

    let err = place(&state, &by_size(1, 4), Policy::Pack).unwrap_err();

    assert!(matches!(
        err,
        Error::NoPlacement {
            asked: 1,
            fits: 0,
            ..
        }
    ));
}

#[test]
fn place_more_than_fit_names_every_gpus_room_and_bound() {
    let state = two_l40s(0);

    let err = place(&state, &by_size(3, 48), Policy::Spread).unwrap_err();

    assert_eq!(
        err.to_string(),
        "3 vGPU(s) asked, the GPUs can take 2: 0000:41:00.0 takes 1 (the type's maximum is 1 \
         per GPU); 0000:81:00.0 takes 1 (the type's maximum is 1 per GPU)"
    );
}

/// Two L40S in mixed-size mode, `A` then `B`: `A` holds a 16Q at placement 0, `B` a 1Q at 17.
/// The driver can create each type at its free supported ids.
fn two_mixed_l40s() -> crate::HostState {
    let mut state = two_l40s(0);
    for (address, gib, at) in [(A, 16u32, 0u32), (B, 1, 17)] {
        let gpu = state
            .inventory
            .gpus
            .iter()
            .find(|g| g.address == addr(address));
        let name = format!("NVIDIA L40S-{gib}Q");
        let ty = gpu
            .unwrap()
            .types
            .iter()
            .find(|t| t.name.as_deref() == Some(&name));
        let type_id = ty.unwrap().id.clone();
        let mib = u64::from(gib) * 1024;
        fleet::record_vgpus(&mut state.inventory, addr(address), &type_id, mib, 0, 1);
        let gpu = state
            .inventory
            .gpus
            .iter()
            .find(|g| g.address == addr(address));
        let reported = [(gpu.unwrap().vgpus[0].id, at)].into_iter().collect();
        mixed_l40s_holding(&mut state, address, &[(at, gib)], reported);
    }
    state
}

/// [`two_mixed_l40s`] with `A` in equal-size mode instead, holding `held` 12Qs.
fn equal_a_beside_mixed_b(held: u32) -> crate::HostState {
    use crate::model::sizes::{SizeFacts, SizeMode};

    let mut state = two_mixed_l40s();
    let a = state
        .inventory
        .gpus
        .iter_mut()
        .find(|g| g.address == addr(A));
    *a.unwrap() = gpu(Model::L40s, A);
    fleet::record_vgpus(&mut state.inventory, addr(A), "1153", 12288, 0, held);
    let facts = SizeFacts {
        mode: SizeMode::Equal,
        region: Some(48),
        creatable: std::collections::BTreeMap::new(),
        placements: std::collections::BTreeMap::new(),
    };
    state.sizes.insert(addr(A), facts);
    state
}

#[test]
fn place_pack_keeps_an_empty_gpu_of_either_mode_for_last() {
    // `A` is empty in equal-size mode; a 12Q on `B` takes its 24 GiB placement at 24 away.
    let empty_equal = equal_a_beside_mixed_b(0);
    // `A` holds a 12Q: another there loses no placement of another size.
    let used_equal = equal_a_beside_mixed_b(1);

    let onto_mixed = place(&empty_equal, &by_size(1, 12), Policy::Pack).unwrap();
    let onto_equal = place(&used_equal, &by_size(1, 12), Policy::Pack).unwrap();
    let spread = place(&empty_equal, &by_size(1, 12), Policy::Spread).unwrap();

    assert_eq!(gpus(&onto_mixed), vec![addr(B)]);
    assert_eq!(gpus(&onto_equal), vec![addr(A)]);
    assert_eq!(gpus(&spread), vec![addr(A)]);
}

#[test]
fn place_pack_in_mixed_size_mode_takes_the_gpu_that_keeps_its_24gib_placements() {
    // On `A` a 16Q can go only at 32, which takes its 24 GiB placement at 24. On `B` it goes
    // at 0, whose 24 GiB placement the 1Q at 17 holds already.
    let state = two_mixed_l40s();

    let picks = place(&state, &by_size(1, 16), Policy::Pack).unwrap();
    let mut placer = crate::place::Placer::new(state.clone());
    let again = placer.place(&by_size(1, 16), Policy::Pack).unwrap();
    let two = place(&state, &by_size(2, 16), Policy::Pack).unwrap();

    assert_eq!(gpus(&picks), vec![addr(B)]);
    assert_eq!(again, picks);
    // At 32, the second takes the same placements away on either GPU. `B` holds two vGPUs
    // by then and `A` one, so `B`'s whole-GPU placement counts for less: `B` wins.
    assert_eq!(gpus(&two), vec![addr(B), addr(B)]);
    let at: Vec<Option<u32>> = two.iter().map(|p| p.placement_id).collect();
    assert_eq!(at, [Some(0), Some(32)]);
}
