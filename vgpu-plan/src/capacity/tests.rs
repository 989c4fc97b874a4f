use std::collections::{BTreeMap, BTreeSet};

use crate::capacity::*;
use crate::model::definition::Start;
use crate::model::definition::{BindingDefinition, VfVgpuDefinition};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, Inventory, MigBacking, Vgpu, VgpuHandle, VgpuType};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::addr;

const L40S: &str = "0000:41:00.0";
const H200: &str = "0000:18:00.0";

fn host(gpus: Vec<Gpu>) -> HostState {
    HostState {
        inventory: Inventory {
            gpus,
            warnings: Vec::new(),
        },
        ..HostState::default()
    }
}

fn vf(pf: &str, i: u32) -> PciAddress {
    fleet::vf_address(addr(pf), i).unwrap()
}

fn defined(state: &mut HostState, pf: &str, i: u32, type_id: u32, name: Option<&str>) {
    state.definitions.vf_vgpus.push(VfVgpuDefinition {
        placement: None,
        vf: vf(pf, i),
        gpu: addr(pf),
        type_id,
        type_name: name.map(str::to_owned),
        start: Start::Manual,
    });
}

/// An H200 on NVIDIA vendor VFIO with 16 free VFs offering two MIG-backed types and one
/// time-sliced type, as its VFs list them while MIG mode is on.
fn h200() -> Gpu {
    let mut gpu = fleet::gpu(Model::L40s, addr(H200), Some(0));
    gpu.model = Some("GH100 [H200 SXM 141GB]".to_owned());
    gpu.vfs.truncate(16);
    let ty = |id: &str, name: &str, fb: u64, max: u32| VgpuType {
        placements: None,
        placement_size: None,
        id: id.to_owned(),
        name: Some(name.to_owned()),
        name_source: Some(crate::model::NameSource::Sysfs),
        framebuffer_mib: Some(fb),
        max_instances: Some(max),
        available: 0,
        limit: None,
        in_use: 0,
        device_api: None,
        description: None,
        mig: crate::parse::mig_backing(name),
        offered: 16,
    };
    gpu.types = vec![
        ty("1200", "NVIDIA H200X-1-18C", 18432, 7),
        ty("1201", "NVIDIA H200X-2-35C", 35840, 3),
        ty("1210", "NVIDIA H200X-18C", 18432, 7),
    ];
    gpu
}

fn mig_facts(instances: &[(u32, &str)], used: &[u32]) -> MigFacts {
    MigFacts {
        mig_on: true,
        instances: instances
            .iter()
            .map(|(i, p)| (*i, (*p).to_owned()))
            .collect(),
        used: used.iter().copied().collect::<BTreeSet<u32>>(),
        ..MigFacts::default()
    }
}

/// Gives `gpu` a running vGPU of `type_id` on VF `i`.
fn run_on(gpu: &mut Gpu, i: u32, type_id: &str) {
    let address = gpu.vfs[i as usize].address;
    gpu.vfs[i as usize].vgpu_type = Some(type_id.to_owned());
    gpu.vgpus.push(Vgpu {
        placement: None,
        id: VgpuHandle::Vf(address),
        type_id: type_id.to_owned(),
        parent: gpu.address,
    });
    for t in &mut gpu.types {
        t.offered = t.offered.saturating_sub(1);
        if t.id == type_id {
            t.in_use += 1;
        }
    }
}

#[test]
fn room_of_an_idle_l40s_is_the_type_maximum() {
    let state = host(vec![fleet::gpu(Model::L40s, addr(L40S), Some(0))]);
    let gpu = &state.inventory.gpus[0];

    let room = room(&state, gpu, "1153");

    assert_eq!(
        room,
        Room {
            available: 4,
            limit: Limit::Max { max: 4 },
            held: 0
        }
    );
}

#[test]
fn room_leaves_defined_vgpus_their_place() {
    let mut state = host(vec![fleet::gpu(Model::L40s, addr(L40S), Some(0))]);
    defined(&mut state, L40S, 0, 1155, Some("NVIDIA L40S-24Q"));
    defined(&mut state, L40S, 1, 1155, Some("NVIDIA L40S-24Q"));
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1155"),
        Room {
            available: 0,
            limit: Limit::Definitions { held: 2 },
            held: 2
        }
    );
    assert_eq!(
        room(&state, &gpu, "1153"),
        Room {
            available: 0,
            limit: Limit::Mixing {
                with: "NVIDIA L40S-24Q".to_owned()
            },
            held: 0
        }
    );
}

#[test]
fn room_counts_free_gpu_instances_of_the_profile() {
    let mut state = host(vec![h200()]);
    state.mig.insert(
        addr(H200),
        mig_facts(&[(9, "1g.18gb"), (10, "1g.18gb"), (3, "2g.35gb")], &[]),
    );
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1200").available,
        2,
        "two free 1g.18gb, not the type's 7"
    );
    assert_eq!(
        room(&state, &gpu, "1200").limit,
        Limit::GpuInstances {
            profile: "1g.18gb".to_owned(),
            free: 2
        }
    );
    assert_eq!(room(&state, &gpu, "1201").available, 1);
}

#[test]
fn room_of_mig_types_of_other_profiles_is_shared_time_sliced_is_not() {
    let mut gpu = h200();
    run_on(&mut gpu, 0, "1200");
    run_on(&mut gpu, 1, "1200");
    let mut state = host(vec![gpu]);
    state.mig.insert(
        addr(H200),
        mig_facts(&[(9, "1g.18gb"), (10, "1g.18gb"), (3, "2g.35gb")], &[9, 10]),
    );
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1201").available,
        1,
        "2g.35gb beside 1g.18gb"
    );
    assert_eq!(room(&state, &gpu, "1200").available, 0);
    assert_eq!(
        room(&state, &gpu, "1210"),
        Room {
            available: 0,
            limit: Limit::Mixing {
                with: "NVIDIA H200X-1-18C".to_owned()
            },
            held: 0
        }
    );
}

#[test]
fn room_of_a_mig_type_without_nvml_is_none() {
    let state = host(vec![h200()]);
    let gpu = &state.inventory.gpus[0];

    assert_eq!(
        room(&state, gpu, "1200"),
        Room {
            available: 0,
            limit: Limit::MigUnknown {
                profile: "1g.18gb".to_owned()
            },
            held: 0
        }
    );
}

#[test]
fn room_of_a_mig_type_counts_defined_vgpus_on_its_profile() {
    let mut state = host(vec![h200()]);
    state.mig.insert(
        addr(H200),
        mig_facts(&[(9, "1g.18gb"), (10, "1g.18gb")], &[]),
    );
    defined(&mut state, H200, 3, 1200, None);
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1200"),
        Room {
            available: 1,
            limit: Limit::GpuInstances {
                profile: "1g.18gb".to_owned(),
                free: 1
            },
            held: 1
        }
    );
}

#[test]
fn room_of_plain_vfs_leaves_out_given_and_defined_ones() {
    let mut gpu = fleet::gpu(Model::Flex170, addr("0000:4d:00.0"), Some(0));
    fleet::enable_vfs(&mut gpu, 4);
    gpu.vfs[0].driver = Some("vfio-pci".to_owned());
    let second = gpu.vfs[1].address;
    let mut state = host(vec![gpu]);
    state.definitions.bindings.push(BindingDefinition {
        address: second,
        driver: "vfio-pci".to_owned(),
        previous_driver: Some("i915".to_owned()),
        start: Start::Auto,
    });
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, crate::model::PLAIN_VF_TYPE),
        Room {
            available: 2,
            limit: Limit::Definitions { held: 1 },
            held: 1
        }
    );
}

#[test]
fn settle_names_a_full_gpu_type_from_its_definition() {
    let mut gpu = fleet::gpu(Model::L40s, addr(L40S), Some(0));
    let mut full = gpu.types.iter().find(|t| t.id == "1153").cloned().unwrap();
    full.name = None;
    full.name_source = None;
    full.in_use = 4;
    gpu.types = vec![full];
    let mut state = host(vec![gpu]);
    defined(&mut state, L40S, 0, 1153, Some("NVIDIA L40S-12Q"));

    state.settle();

    let types = &state.inventory.gpus[0].types;
    let ty = types.iter().find(|t| t.id == "1153").unwrap();
    assert_eq!(ty.name.as_deref(), Some("NVIDIA L40S-12Q"));
    assert_eq!(ty.name_source, Some(crate::model::NameSource::Definition));
    assert_eq!(ty.available, 0);
    assert_eq!(ty.limit, Some(Limit::Max { max: 4 }));
}

#[test]
fn settle_prefers_nvml_to_the_catalog() {
    let mut gpu = fleet::gpu(Model::L40s, addr(L40S), Some(0));
    gpu.types.retain(|t| t.id == "1153");
    gpu.types[0].name_source = Some(crate::model::NameSource::Catalog);
    let mut state = host(vec![gpu]);
    state.supported_types = BTreeMap::from([(
        addr(L40S),
        vec![KnownType {
            id: "1153".to_owned(),
            name: "NVIDIA L40S-12Q".to_owned(),
            framebuffer_mib: None,
            max_instances: None,
            source: crate::model::NameSource::Nvml,
        }],
    )]);

    state.settle();

    assert_eq!(
        state.inventory.gpus[0].types[0].name_source,
        Some(crate::model::NameSource::Nvml)
    );
}

#[test]
fn mig_backing_of_the_test_types() {
    assert_eq!(
        h200().types[1].mig,
        Some(MigBacking {
            slices: 2,
            gpu_instance_profile: "2g.35gb".to_owned()
        })
    );
}

mod agreement {
    //! For random states of one GPU, `room`, `place` and `plan` give one count.

    use proptest::prelude::*;

    use super::*;
    use crate::desired::{DesiredFile, Format};
    use crate::place::{PlaceRequest, PlaceWant, Policy, place};

    /// An L40S with `running` 12Q vGPUs and `defined` stopped 12Q definitions on the VFs
    /// after them, and a stopped 24Q definition when `other`.
    fn l40s(running: u32, stopped: u32, other: bool) -> HostState {
        let mut state = host(vec![fleet::gpu(Model::L40s, addr(L40S), Some(0))]);
        fleet::record_vgpus(&mut state.inventory, addr(L40S), "1153", 12288, 0, running);
        for i in running..running + stopped {
            defined_12q(&mut state, i);
        }
        if other {
            defined(&mut state, L40S, 20, 1155, Some("NVIDIA L40S-24Q"));
        }
        state
    }

    fn defined_12q(state: &mut HostState, i: u32) {
        defined(state, L40S, i, 1153, Some("NVIDIA L40S-12Q"));
    }

    fn place_max(state: &HostState, name: &str) -> u32 {
        (1..=8)
            .take_while(|n| {
                let request = PlaceRequest {
                    count: *n,
                    want: PlaceWant::Type(name.to_owned()),
                    numa_node: None,
                };
                place(state, &request, Policy::Pack).is_ok()
            })
            .last()
            .unwrap_or(0)
    }

    fn plan_accepts(state: &HostState, total: u32) -> bool {
        let text = format!(
            "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"{L40S}\"\ntypes = {{ \"L40S-12Q\" = {total} }}\n"
        );
        let file = DesiredFile::parse("host.toml", Format::HostToml, &text).unwrap();
        let plan = crate::planner::plan(state, &file.configs[0]);
        plan.gpus[0].refusals.is_empty()
    }

    proptest! {
        #[test]
        fn room_place_and_plan_agree(running in 0u32..=4, stopped in 0u32..=4, other in any::<bool>()) {
            prop_assume!(running + stopped <= 4);
            let state = l40s(running, stopped, other);
            let gpu = state.inventory.gpus[0].clone();
            let room = room(&state, &gpu, "1153").available;

            prop_assert_eq!(room, if other { 0 } else { 4 - running - stopped });
            prop_assert_eq!(place_max(&state, "L40S-12Q"), room);
            if !other {
                // The plan keeps what runs and what is defined, and adds the room.
                prop_assert!(plan_accepts(&state, running + stopped + room));
                prop_assert!(!plan_accepts(&state, running + stopped + room + 1));
            }
        }
    }
}

/// An L40S in mixed-size mode with a 24Q vGPU at placement 0 on VF 0 and a 12Q at 24 on VF 1,
/// where the driver says a 12Q can go at 36 and nothing else fits a 24Q.
fn mixed_l40s() -> HostState {
    let mut gpu = fleet::gpu(Model::L40s, addr(L40S), Some(0));
    run_on(&mut gpu, 0, "1155");
    run_on(&mut gpu, 1, "1153");
    let mut state = host(vec![gpu]);
    let gpu = &state.inventory.gpus[0];
    let placements = [(gpu.vgpus[0].id, 0), (gpu.vgpus[1].id, 24)];
    state.sizes.insert(
        addr(L40S),
        SizeFacts {
            mode: crate::model::sizes::SizeMode::Mixed,
            region: Some(48),
            creatable: [("1153", vec![36]), ("1155", vec![])]
                .into_iter()
                .map(|(t, ids)| (t.to_owned(), ids))
                .collect(),
            placements: placements.into_iter().collect(),
        },
    );
    state
}

#[test]
fn room_in_mixed_size_mode_is_the_creatable_placements_beside_other_sizes() {
    let state = mixed_l40s();
    let gpu = &state.inventory.gpus[0];

    assert_eq!(
        room(&state, gpu, "1153"),
        Room {
            available: 1,
            limit: Limit::Placements { free: 1 },
            held: 0
        }
    );
    assert_eq!(
        room(&state, gpu, "1155"),
        Room {
            available: 0,
            limit: Limit::Placements { free: 0 },
            held: 0
        }
    );
    // A type NVML gave no placements for has no room: never assumed.
    assert_eq!(
        room(&state, gpu, "1154"),
        Room {
            available: 0,
            limit: Limit::PlacementsUnknown,
            held: 0
        }
    );
}

#[test]
fn room_in_equal_size_mode_keeps_one_type_per_gpu() {
    let mut state = mixed_l40s();
    state.sizes.get_mut(&addr(L40S)).unwrap().mode = crate::model::sizes::SizeMode::Equal;
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1153").limit,
        Limit::Mixing {
            with: "NVIDIA L40S-24Q".to_owned()
        }
    );
}

#[test]
fn room_in_mixed_size_mode_stops_at_32_vgpus_per_gpu() {
    let mut state = mixed_l40s();
    let gpu = &mut state.inventory.gpus[0];
    for i in 2..32 {
        run_on(gpu, i, "1147");
    }
    state
        .sizes
        .get_mut(&addr(L40S))
        .unwrap()
        .creatable
        .insert("1147".to_owned(), vec![41, 42, 47]);
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(
        room(&state, &gpu, "1147"),
        Room {
            available: 0,
            limit: Limit::VgpusPerGpu { max: 32 },
            held: 0
        }
    );
}

#[test]
fn settle_shows_the_size_mode_placement_sizes_and_placements() {
    let mut state = mixed_l40s();
    state.settle();
    let gpu = &state.inventory.gpus[0];
    let ty = |id: &str| gpu.types.iter().find(|t| t.id == id).unwrap();

    assert_eq!(gpu.size_mode, Some(crate::model::sizes::SizeMode::Mixed));
    assert_eq!(ty("1153").placement_size, Some(12));
    assert_eq!(ty("1153").placements, Some(vec![36]));
    assert_eq!(ty("1153").available, 1);
    assert_eq!(ty("1154").placements, None);
    assert_eq!(
        gpu.vgpus.iter().map(|v| v.placement).collect::<Vec<_>>(),
        vec![Some(0), Some(24)]
    );
}

/// An empty L40S in mixed-size mode, where the driver can create every type at each of its
/// supported placements.
fn empty_mixed_l40s() -> HostState {
    let mut state = host(vec![fleet::gpu(Model::L40s, addr(L40S), Some(0))]);
    let creatable = state.inventory.gpus[0]
        .types
        .iter()
        .filter_map(|t| {
            let size = crate::model::sizes::placement_size(t.framebuffer_mib?)?;
            Some((
                t.id.clone(),
                crate::placement::supported_placements(48, size).ok()?,
            ))
        })
        .collect();
    state.sizes.insert(
        addr(L40S),
        SizeFacts {
            mode: crate::model::sizes::SizeMode::Mixed,
            region: Some(48),
            creatable,
            placements: BTreeMap::new(),
        },
    );
    state
}

#[test]
fn new_placement_of_1gib_keeps_both_16gib_placements_free() {
    let state = empty_mixed_l40s();
    let gpu = &state.inventory.gpus[0];

    // The driver's default would be 0, where a 16 GiB vGPU starts; ours is between 16 and 31.
    let chosen = new_placement(&state, gpu, "1147", None).unwrap().unwrap();

    assert!((16..31).contains(&chosen), "{chosen}");
    assert_eq!(chosen, 17);
}

#[test]
fn new_placement_goes_to_the_half_nvml_shows_more_vgpus_in() {
    // Four 1Qs hold slots 17, 18, 41 and 42. NVML reports the placements of two of them;
    // a held run it reports no vGPU for counts as one vGPU.
    let with_reported = |reported: [u32; 2]| {
        let mut state = host(vec![fleet::gpu(Model::L40s, addr(L40S), Some(0))]);
        fleet::record_vgpus(&mut state.inventory, addr(L40S), "1147", 1024, 0, 4);
        let ids: Vec<VgpuHandle> = state.inventory.gpus[0].vgpus.iter().map(|v| v.id).collect();
        let held = [(17, 1), (18, 1), (41, 1), (42, 1)];
        let by_slot = |at: u32| ids[held.iter().position(|&(id, _)| id == at).unwrap()];
        let reported = reported.iter().map(|&at| (by_slot(at), at)).collect();
        crate::testing::unit::mixed_l40s_holding(&mut state, L40S, &held, reported);
        state
    };
    let chosen = |state: &HostState| new_placement(state, &state.inventory.gpus[0], "1147", None);

    assert_eq!(chosen(&with_reported([17, 18])), Ok(Some(23)));
    assert_eq!(chosen(&with_reported([41, 42])), Ok(Some(36)));
}

#[test]
fn placement_of_is_nvml_s_else_the_definition_s_and_none_off_mixed_size_mode() {
    let mut state = empty_mixed_l40s();
    fleet::record_vgpus(&mut state.inventory, addr(L40S), "1147", 1024, 0, 2);
    let ids: Vec<VgpuHandle> = state.inventory.gpus[0].vgpus.iter().map(|v| v.id).collect();
    let VgpuHandle::Vf(defined) = ids[1] else {
        panic!("an L40S of the fleet holds VF vGPUs: {ids:?}");
    };
    state.definitions.vf_vgpus.push(VfVgpuDefinition {
        placement: Some(5),
        vf: defined,
        gpu: addr(L40S),
        type_id: 1147,
        type_name: None,
        start: Start::Manual,
    });
    let facts = state.sizes.get_mut(&addr(L40S)).unwrap();
    facts.placements.insert(ids[0], 17);
    facts.placements.insert(ids[1], 29);

    let at = |state: &HostState, id| placement_of(state, addr(L40S), id);

    assert_eq!(
        (at(&state, ids[0]), at(&state, ids[1])),
        (Some(17), Some(29))
    );
    state.sizes.get_mut(&addr(L40S)).unwrap().placements.clear();
    assert_eq!((at(&state, ids[0]), at(&state, ids[1])), (None, Some(5)));
    state.sizes.get_mut(&addr(L40S)).unwrap().mode = crate::model::sizes::SizeMode::Equal;
    assert_eq!(at(&state, ids[1]), None);
}

#[test]
fn new_placement_takes_the_one_asked_when_creatable_and_names_the_others_when_not() {
    let mut state = empty_mixed_l40s();
    let creatable = &mut state.sizes.get_mut(&addr(L40S)).unwrap().creatable;
    creatable.insert("1154".to_owned(), vec![32]);
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(new_placement(&state, &gpu, "1154", Some(32)), Ok(Some(32)));
    let refused = new_placement(&state, &gpu, "1154", Some(0)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "NVIDIA L40S-16Q cannot be created at placement 0 on 0000:41:00.0 now (it can at: 32)"
    );
}

#[test]
fn new_placement_of_a_type_nvml_lists_no_placements_for_is_refused_as_room_is() {
    let mut state = empty_mixed_l40s();
    state
        .sizes
        .get_mut(&addr(L40S))
        .unwrap()
        .creatable
        .remove("1147");
    let gpu = state.inventory.gpus[0].clone();

    let refusal = |asked| new_placement(&state, &gpu, "1147", asked).map_err(|e| e.to_string());

    let refused = "NVIDIA L40S-1Q is not created on 0000:41:00.0: NVML does not say where the \
                   type can be placed in mixed-size mode";
    assert_eq!(refusal(None), Err(refused.to_owned()));
    assert_eq!(refusal(Some(17)), Err(refused.to_owned()));
    assert_eq!(room(&state, &gpu, "1147").limit, Limit::PlacementsUnknown);
    // A VF without a vGPU type has no placement to choose.
    assert_eq!(new_placement(&state, &gpu, "vf", None), Ok(None));
}

#[test]
fn new_placement_on_an_equal_size_gpu_is_none_and_refuses_one_asked() {
    let mut state = empty_mixed_l40s();
    state.sizes.get_mut(&addr(L40S)).unwrap().mode = crate::model::sizes::SizeMode::Equal;
    let gpu = state.inventory.gpus[0].clone();

    assert_eq!(new_placement(&state, &gpu, "1147", None), Ok(None));
    assert_eq!(
        new_placement(&state, &gpu, "1147", Some(0))
            .unwrap_err()
            .to_string(),
        "0000:41:00.0 is not in mixed-size mode (equal-size mode): a placement applies in \
         mixed-size mode only"
    );
    state.sizes.clear();
    assert!(matches!(
        new_placement(&state, &gpu, "1147", Some(0)),
        Err(crate::placement::PlacementRefusal::NotMixed { now, .. }) if now == "NVML does not report a size mode for it"
    ));
}
