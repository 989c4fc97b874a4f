//! The planner: one test per rule (the refusals are in `refusals`).

mod refusals;

use std::collections::BTreeMap;

use crate::desired::Location;
use crate::model::PLAIN_VF_TYPE;
use crate::model::definition::{MdevDefinition, SriovDefinition, Start, VfVgpuDefinition};
use crate::model::{Backend, VgpuHandle};
use crate::planner::plan;
use crate::steps::{Step, Unmatched, Want};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::addr;
use crate::testing::unit::{
    FLEX, GVTG, L40S, L40S_BY_MODEL, T4, gpu, host, t4_holding, toml, uuid, vf, yaml,
};

fn l40s_12q(count: u32) -> Vec<Step> {
    vec![
        Step::Create {
            type_id: Some("1153".to_owned()),
            type_name: Some("NVIDIA L40S-12Q".to_owned()),
            start: Start::Auto,
            placement: None,
        };
        count as usize
    ]
}

fn create(type_id: &str, name: &str) -> Step {
    Step::Create {
        type_id: Some(type_id.to_owned()),
        type_name: Some(name.to_owned()),
        start: Start::Auto,
        placement: None,
    }
}

/// An L40S holding `count` L40S-12Q on its first VFs, each defined to start at boot.
fn l40s_holding_12q(count: u32) -> crate::HostState {
    let mut state = host(vec![gpu(Model::L40s, L40S)]);
    fleet::record_vgpus(&mut state.inventory, addr(L40S), "1153", 12288, 0, count);
    for i in 0..count {
        state.definitions.vf_vgpus.push(VfVgpuDefinition {
            placement: None,
            vf: vf(L40S, i),
            gpu: addr(L40S),
            type_id: 1153,
            type_name: None,
            start: Start::Auto,
        });
    }
    state
}

fn mdev_definition(n: u128, type_id: &str, start: Start) -> MdevDefinition {
    MdevDefinition {
        uuid: uuid(n),
        parent: T4.to_owned(),
        mdev_type: type_id.to_owned(),
        start,
        attrs: Vec::new(),
    }
}

#[test]
fn plan_size_maps_to_type_of_that_framebuffer_in_series_q() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"4x12GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].want,
        vec![Want {
            type_id: Some("1153".to_owned()),
            type_name: Some("NVIDIA L40S-12Q".to_owned()),
            framebuffer_mib: Some(12288),
            count: 4,
        }]
    );
    assert_eq!(plan.gpus[0].steps, l40s_12q(4));
}

#[test]
fn plan_size_in_series_c_maps_to_c_type() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let desired = toml(
        "version = 1\n[configs.c]\nseries = \"C\"\n[[configs.c.gpu]]\nall = true\nsizes = \"1x4GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![create("nvidia-319", "GRID T4-4C")]);
}

#[test]
fn plan_size_with_round_up_takes_next_larger_type() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!(
        "{L40S_BY_MODEL}sizes = \"2x5GiB\"\nround_up = true\n"
    ));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            create("1151", "NVIDIA L40S-6Q"),
            create("1151", "NVIDIA L40S-6Q")
        ]
    );
}

#[test]
fn plan_size_without_count_fills_the_gpu() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"12GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, l40s_12q(4));
}

#[test]
fn plan_type_without_vendor_prefix_resolves() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-8Q\" = 2 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            create("nvidia-233", "GRID T4-8Q"),
            create("nvidia-233", "GRID T4-8Q")
        ]
    );
}

#[test]
fn plan_gpu_that_matches_has_no_steps() {
    let state = l40s_holding_12q(4);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"4x12GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        (
            plan.gpus[0].steps.clone(),
            plan.gpus[0].keep.len(),
            plan.matches()
        ),
        (Vec::new(), 4, true)
    );
}

#[test]
fn plan_other_type_is_destroyed_before_creating() {
    let state = t4_holding("nvidia-233", 2);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"1x4GiB\"\n",
    );

    let plan = plan(&state, &desired);

    let destroy = |n| Step::Destroy {
        id: VgpuHandle::Mdev(uuid(n)),
        type_id: "nvidia-233".to_owned(),
        type_name: Some("GRID T4-8Q".to_owned()),
    };
    assert_eq!(
        plan.gpus[0].steps,
        vec![destroy(1), destroy(2), create("nvidia-232", "GRID T4-4Q")]
    );
}

#[test]
fn plan_defined_stopped_vgpu_of_wanted_type_is_started() {
    let mut state = host(vec![gpu(Model::T4, T4)]);
    state
        .definitions
        .mdevs
        .push(mdev_definition(7, "nvidia-231", Start::Auto));
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-2Q\" = 2 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Start {
                id: VgpuHandle::Mdev(uuid(7))
            },
            create("nvidia-231", "GRID T4-2Q")
        ]
    );
}

#[test]
fn plan_running_vgpu_without_definition_is_defined() {
    let state = t4_holding("nvidia-231", 1);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-2Q\" = 1 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![Step::Define {
            id: VgpuHandle::Mdev(uuid(1)),
            start: Start::Auto
        }]
    );
}

#[test]
fn plan_definition_with_other_persistence_is_redefined() {
    let mut state = t4_holding("nvidia-231", 1);
    state
        .definitions
        .mdevs
        .push(mdev_definition(1, "nvidia-231", Start::Manual));
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-2Q\" = 1 }\npersistence = \"auto\"\n",
    );

    let plan = plan(&state, &desired);

    let id = VgpuHandle::Mdev(uuid(1));
    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Undefine { id },
            Step::Define {
                id,
                start: Start::Auto
            }
        ]
    );
}

#[test]
fn plan_unwanted_definition_is_undefined() {
    let mut state = host(vec![gpu(Model::T4, T4)]);
    state
        .definitions
        .mdevs
        .push(mdev_definition(9, "nvidia-233", Start::Auto));
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"T4-2Q\" = 1 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Undefine {
                id: VgpuHandle::Mdev(uuid(9))
            },
            create("nvidia-231", "GRID T4-2Q")
        ]
    );
}

#[test]
fn plan_sizes_on_plain_sriov_gpu_are_a_vf_count() {
    let state = host(vec![gpu(Model::Flex170, FLEX)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nvendor = \"intel\"\nsizes = \"8x2GiB\"\n",
    );

    let plan = plan(&state, &desired);

    let mut steps = vec![Step::Vfs { from: 0, to: 8 }];
    steps.extend(vec![
        Step::Create {
            type_id: Some(PLAIN_VF_TYPE.to_owned()),
            type_name: None,
            start: Start::Auto,
            placement: None,
        };
        8
    ]);
    assert_eq!(
        (plan.gpus[0].vfs, plan.gpus[0].steps.clone()),
        (Some(8), steps)
    );
}

#[test]
fn plan_vfs_with_default_driver_only_sets_the_count() {
    let state = host(vec![gpu(Model::Flex170, FLEX)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 8\nvf_driver = \"default\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![Step::Vfs { from: 0, to: 8 }]);
}

#[test]
fn plan_vf_count_change_releases_vfs_first() {
    let mut flex = gpu(Model::Flex170, FLEX);
    fleet::enable_vfs(&mut flex, 2);
    flex.vfs[0].driver = Some("vfio-pci".to_owned());
    let state = host(vec![flex]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 4\nvf_driver = \"default\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Destroy {
                id: VgpuHandle::Vf(vf(FLEX, 0)),
                type_id: PLAIN_VF_TYPE.to_owned(),
                type_name: None
            },
            Step::Vfs { from: 2, to: 4 }
        ]
    );
}

#[test]
fn plan_vf_count_that_matches_without_definition_defines_it() {
    let mut flex = gpu(Model::Flex170, FLEX);
    fleet::enable_vfs(&mut flex, 8);
    let mut state = host(vec![flex]);
    state.definitions.sriov.push(SriovDefinition {
        pf: addr(FLEX),
        num_vfs: 4,
        drivers_autoprobe: None,
        lmem_quota_mib: BTreeMap::new(),
    });
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 8\nvf_driver = \"default\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![Step::Vfs { from: 8, to: 8 }]);
}

#[test]
fn plan_nvidia_gpu_without_vfs_enables_them_first() {
    let state = host(vec![gpu(Model::L40sVfsOff, L40S)]);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"1x24GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Vfs { from: 0, to: 32 },
            Step::Create {
                type_id: None,
                type_name: Some("NVIDIA L40S-24Q".to_owned()),
                start: Start::Auto,
                placement: None
            }
        ]
    );
}

#[test]
fn plan_vendor_vfio_size_the_card_hides_is_refused_unconfirmed_without_nvml() {
    let state = l40s_holding_12q(4);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"2x24GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, Vec::<Step>::new());
    assert_eq!(
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| r.refusal.clone())
            .collect::<Vec<_>>(),
        vec![crate::steps::Refusal::Unconfirmed {
            type_name: "NVIDIA L40S-24Q".to_owned()
        }]
    );
}

#[test]
fn plan_vendor_vfio_size_the_card_hides_comes_from_nvml_with_its_id() {
    let mut state = l40s_holding_12q(4);
    state.supported_types.insert(
        addr(L40S),
        vec![
            crate::capacity::KnownType {
                id: "1153".to_owned(),
                name: "NVIDIA L40S-12Q".to_owned(),
                framebuffer_mib: None,
                max_instances: None,
                source: crate::model::NameSource::Nvml,
            },
            crate::capacity::KnownType {
                id: "1155".to_owned(),
                name: "NVIDIA L40S-24Q".to_owned(),
                framebuffer_mib: None,
                max_instances: None,
                source: crate::model::NameSource::Nvml,
            },
        ],
    );
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"2x24GiB\"\n"));

    let plan = plan(&state, &desired);

    let destroy = |i| Step::Destroy {
        id: VgpuHandle::Vf(vf(L40S, i)),
        type_id: "1153".to_owned(),
        type_name: Some("NVIDIA L40S-12Q".to_owned()),
    };
    let create_24q = Step::Create {
        type_id: Some("1155".to_owned()),
        type_name: Some("NVIDIA L40S-24Q".to_owned()),
        start: Start::Auto,
        placement: None,
    };
    assert_eq!(
        plan.gpus[0].steps,
        vec![
            destroy(0),
            destroy(1),
            destroy(2),
            destroy(3),
            create_24q.clone(),
            create_24q
        ]
    );
}

#[test]
fn plan_vendor_vfio_type_nvml_does_not_list_is_unknown() {
    let mut state = l40s_holding_12q(1);
    state.supported_types.insert(
        addr(L40S),
        vec![crate::capacity::KnownType {
            id: "1153".to_owned(),
            name: "NVIDIA L40S-12Q".to_owned(),
            framebuffer_mib: None,
            max_instances: None,
            source: crate::model::NameSource::Nvml,
        }],
    );
    let desired = toml(&format!("{L40S_BY_MODEL}types = {{ \"L40S-24Q\" = 1 }}\n"));

    let plan = plan(&state, &desired);

    assert!(
        matches!(
            &plan.gpus[0].refusals[0].refusal,
            crate::steps::Refusal::UnknownType { wanted, .. } if wanted == "L40S-24Q"
        ),
        "{:?}",
        plan.gpus[0].refusals
    );
}

#[test]
fn plan_gvtg_types_mix_within_the_gpu() {
    let state = host(vec![gpu(Model::Gvtg, GVTG)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"GVTg_V5_4\" = 2, \"GVTg_V5_8\" = 3 }\n",
    );

    let plan = plan(&state, &desired);

    let v54 = create("i915-GVTg_V5_4", "GVTg_V5_4");
    let v58 = create("i915-GVTg_V5_8", "GVTg_V5_8");
    assert_eq!(
        plan.gpus[0].steps,
        vec![v54.clone(), v54, v58.clone(), v58.clone(), v58]
    );
}

#[test]
fn plan_model_matches_the_last_words_of_the_name() {
    let state = host(vec![gpu(Model::T4, T4), gpu(Model::L40s, L40S)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"t4\"\nsizes = \"1x1GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(),
        vec![addr(T4)]
    );
}

#[test]
fn plan_numa_selects_that_node_only() {
    let state = host(vec![
        fleet::gpu(Model::T4, addr(T4), Some(0)),
        fleet::gpu(Model::T4, addr("0000:d8:00.0"), Some(1)),
    ]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nnuma = 1\nsizes = \"1x1GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(),
        vec![addr("0000:d8:00.0")]
    );
}

#[test]
fn plan_all_leaves_out_gpus_without_vgpus() {
    let mut passthrough = gpu(Model::T4, "0000:af:00.0");
    passthrough.backend = Backend::None;
    passthrough.types.clear();
    let state = host(vec![gpu(Model::T4, T4), passthrough]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"1x1GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(),
        vec![addr(T4)]
    );
}

#[test]
fn plan_device_manager_indices_count_nvidia_gpus_in_address_order() {
    let state = host(vec![
        gpu(Model::Gvtg, GVTG),
        gpu(Model::T4, T4),
        gpu(Model::T4, "0000:d8:00.0"),
    ]);
    let desired = yaml(
        "version: v1\nvgpu-configs:\n  second:\n  - devices: [1]\n    vgpu-devices:\n      T4-1Q: 16\n",
        "second",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(),
        vec![addr("0000:d8:00.0")]
    );
}

#[test]
fn plan_device_manager_filter_matches_device_ids() {
    let state = host(vec![gpu(Model::T4, T4), gpu(Model::A40, "0000:41:00.0")]);
    let desired = yaml(
        "version: v1\nvgpu-configs:\n  t4:\n  - devices: all\n    device-filter: \"0x1EB810DE\"\n    vgpu-devices:\n      T4-1Q: 16\n",
        "t4",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus.iter().map(|g| g.gpu).collect::<Vec<_>>(),
        vec![addr(T4)]
    );
}

#[test]
fn plan_selection_matching_no_gpu_blocks_unless_optional() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let text = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"A100\"\nsizes = \"1x5GiB\"\n";
    let optional = text.replace("sizes", "optional = true\nsizes");

    let typo = plan(&state, &toml(text));
    let allowed = plan(&state, &toml(&optional));

    let unmatched = |blocking| Unmatched {
        selection: "model \"A100\"".to_owned(),
        at: Location { line: 3, column: 1 },
        blocking,
    };
    assert_eq!(
        (
            typo.unmatched.clone(),
            typo.matches(),
            allowed.unmatched.clone(),
            allowed.matches()
        ),
        (vec![unmatched(true)], false, vec![unmatched(false)], true)
    );
}

#[test]
fn plan_address_not_on_host_blocks() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:99:00.0\"\nsizes = \"1x1GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        (plan.unmatched.clone(), plan.blocked()),
        (
            vec![Unmatched {
                selection: "address 0000:99:00.0".to_owned(),
                at: Location { line: 3, column: 1 },
                blocking: true
            }],
            true
        )
    );
}
