//! The planner's refusals: one test per reason a GPU cannot be brought to the config.

use crate::desired::Location;
use crate::model::{Backend, VgpuHandle};
use crate::planner::plan;
use crate::steps::{Refusal, Refused};
use crate::testing::fleet::Model;
use crate::testing::unit::{
    FLEX, GVTG, L40S, L40S_BY_MODEL, T4, gpu, host, t4_holding, toml, uuid,
};

#[test]
fn plan_five_12gib_on_a_48gib_card_is_too_many() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"5x12GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals,
        vec![Refused {
            refusal: Refusal::TooMany {
                type_name: "NVIDIA L40S-12Q".to_owned(),
                asked: 5,
                max: 4
            },
            message: "5 x NVIDIA L40S-12Q asked, it holds at most 4".to_owned(),
            at: Some(Location { line: 5, column: 9 })
        }]
    );
}

#[test]
fn plan_two_sizes_on_an_nvidia_gpu_is_one_type_only() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!(
        "{L40S_BY_MODEL}sizes = [\"1x24GiB\", \"2x12GiB\"]\n"
    ));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::OneTypeOnly {
            wanted: vec!["NVIDIA L40S-24Q".to_owned(), "NVIDIA L40S-12Q".to_owned()]
        }
    );
}

#[test]
fn plan_size_with_no_type_of_it_is_no_such_size() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!("{L40S_BY_MODEL}sizes = \"5GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::NoSuchSize {
            framebuffer_mib: 5120,
            series: Some('Q'),
            offered_mib: vec![
                1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 49152
            ]
        }
    );
}

#[test]
fn plan_type_the_gpu_does_not_offer_is_unknown_type() {
    let state = host(vec![gpu(Model::Gvtg, GVTG)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"GVTg_V5_3\" = 1 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::UnknownType {
            wanted: "GVTg_V5_3".to_owned(),
            offered: vec![
                "GVTg_V5_1".to_owned(),
                "GVTg_V5_2".to_owned(),
                "GVTg_V5_4".to_owned(),
                "GVTg_V5_8".to_owned()
            ]
        }
    );
}

#[test]
fn plan_more_vgpus_than_vfs_is_not_enough_vfs() {
    let mut a40 = gpu(Model::A40, "0000:41:00.0");
    a40.vfs.truncate(4);
    let state = host(vec![a40]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"8x2GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::NotEnoughVfs { asked: 8, vfs: 4 }
    );
}

#[test]
fn plan_more_vfs_than_the_gpu_supports_is_not_enough_vfs() {
    let state = host(vec![gpu(Model::Flex170, FLEX)]);
    let desired =
        toml("version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 20\n");

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::NotEnoughVfs { asked: 20, vfs: 16 }
    );
}

#[test]
fn plan_plain_sriov_sizes_beyond_memory_are_too_many() {
    let state = host(vec![gpu(Model::Flex170, FLEX)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"2x12GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::TooMany {
            type_name: "12 GiB VF".to_owned(),
            asked: 2,
            max: 1
        }
    );
}

#[test]
fn plan_gvtg_mix_beyond_the_gpu_is_oversubscribed() {
    let state = host(vec![gpu(Model::Gvtg, GVTG)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"GVTg_V5_4\" = 3, \"GVTg_V5_2\" = 1 }\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::Oversubscribed {
            wanted: vec!["1 x GVTg_V5_2".to_owned(), "3 x GVTg_V5_4".to_owned()]
        }
    );
}

#[test]
fn plan_as_many_as_fit_of_type_without_maximum_is_unknown_capacity() {
    let mut t4 = gpu(Model::T4, T4);
    t4.types.iter_mut().for_each(|t| t.max_instances = None);
    let state = host(vec![t4]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"16GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::UnknownCapacity {
            type_name: "GRID T4-16Q".to_owned()
        }
    );
}

#[test]
fn plan_size_on_sriov_gpu_of_unknown_memory_is_refused() {
    let mut other = gpu(Model::Flex170, FLEX);
    other.device_id = Some(0x56ff);
    let state = host(vec![other]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"2GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].refusals[0].refusal, Refusal::UnknownMemory);
}

#[test]
fn plan_vf_count_on_vgpu_gpu_is_not_sriov() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let desired =
        toml("version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 4\n");

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::NotSriov {
            backend: Backend::Mdev
        }
    );
}

#[test]
fn plan_address_of_gpu_without_vgpus_is_not_virtualizable() {
    let mut passthrough = gpu(Model::T4, "0000:af:00.0");
    passthrough.backend = Backend::None;
    let state = host(vec![passthrough]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:af:00.0\"\nsizes = \"1x1GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::NotVirtualizable {
            backend: Backend::None
        }
    );
}

#[test]
fn plan_held_vgpu_is_never_destroyed() {
    let mut state = t4_holding("nvidia-233", 1);
    let id = VgpuHandle::Mdev(uuid(1));
    state.holds.insert(
        id,
        crate::capacity::Hold {
            by: "libvirt domain web-1 (shut off)".to_owned(),
            frees: "detach it from web-1".to_owned(),
        },
    );
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"1x4GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        (
            plan.gpus[0].steps.clone(),
            plan.gpus[0].refusals[0].refusal.clone(),
            plan.blocked()
        ),
        (
            Vec::new(),
            Refusal::Held {
                id,
                by: "libvirt domain web-1 (shut off)".to_owned(),
                frees: "detach it from web-1".to_owned()
            },
            false
        )
    );
}

#[test]
fn plan_gpu_two_entries_select_is_an_overlap() {
    let state = host(vec![gpu(Model::T4, T4)]);
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"1x1GiB\"\n[[configs.default.gpu]]\nmodel = \"T4\"\nsizes = \"1x2GiB\"\n",
    );

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::Overlap {
            selections: vec![
                Location { line: 3, column: 1 },
                Location { line: 6, column: 1 }
            ]
        }
    );
}
