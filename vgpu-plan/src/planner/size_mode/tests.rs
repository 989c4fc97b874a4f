//! Mixed-size mode in plans: exact feasibility, the mode step, placements on create steps.

use crate::desired::{Location, Partition, SizeModeRequest};
use crate::model::definition::Start;
use crate::model::sizes::SizeMode;
use crate::planner::plan;
use crate::steps::Step;
use crate::testing::fleet::Model;
use crate::testing::unit::{L40S, L40S_BY_MODEL, gpu, host, toml, yaml};

fn create(type_id: &str, name: &str, placement: u32) -> Step {
    Step::Create {
        type_id: Some(type_id.to_owned()),
        type_name: Some(name.to_owned()),
        start: Start::Auto,
        placement: Some(placement),
    }
}

#[test]
fn plan_mixed_l40s_two_16q_and_12q_is_refused_with_what_fits() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let config = toml(&format!(
        "{L40S_BY_MODEL}types = {{ \"L40S-16Q\" = 2, \"L40S-12Q\" = 1 }}\n"
    ));

    let plan = plan(&state, &config);

    let refusals: Vec<String> = plan.gpus[0]
        .refusals
        .iter()
        .map(|r| r.refusal.to_string())
        .collect();
    assert_eq!(
        refusals,
        vec![
            "1 x NVIDIA L40S-12Q + 2 x NVIDIA L40S-16Q (44 of 48 GiB) cannot be placed in \
             mixed-size mode: at most 2 x NVIDIA L40S-16Q fit"
                .to_owned()
        ]
    );
    assert!(plan.blocked());
    assert!(plan.gpus[0].steps.is_empty());
}

#[test]
fn plan_mixed_l40s_24q_and_two_12q_sets_the_mode_then_creates_at_placements() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let config = toml(&format!(
        "{L40S_BY_MODEL}types = {{ \"L40S-24Q\" = 1, \"L40S-12Q\" = 2 }}\n"
    ));

    let plan = plan(&state, &config);

    assert_eq!(plan.gpus[0].refusals, Vec::new());
    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::SizeMode {
                mode: SizeMode::Mixed
            },
            // Where `create` puts each, in this order: the 24Q fits in the half left.
            create("1153", "NVIDIA L40S-12Q", 0),
            create("1153", "NVIDIA L40S-12Q", 12),
            create("1155", "NVIDIA L40S-24Q", 24),
        ]
    );
}

#[test]
fn plan_equal_size_mode_with_two_types_is_refused_one_type_only() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let config = toml(&format!(
        "{L40S_BY_MODEL}size_mode = \"equal\"\ntypes = {{ \"L40S-24Q\" = 1, \"L40S-12Q\" = 2 }}\n"
    ));

    let plan = plan(&state, &config);

    let refusals: Vec<String> = plan.gpus[0]
        .refusals
        .iter()
        .map(|r| r.refusal.to_string())
        .collect();
    assert_eq!(
        refusals,
        vec![
            "it holds one type (one size) at a time, not NVIDIA L40S-12Q and NVIDIA L40S-24Q"
                .to_owned()
        ]
    );
}

#[test]
fn device_manager_two_sizes_on_one_gpu_imply_mixed() {
    let config = yaml(
        "version: v1\nvgpu-configs:\n  mixed:\n    - devices: all\n      vgpu-devices:\n        \
         \"L40S-24Q\": 1\n        \"L40S-12Q\": 2\n",
        "mixed",
    );

    let entry = &config.entries[0];

    assert_eq!(
        entry.size_mode,
        Some(SizeModeRequest {
            mode: SizeMode::Mixed,
            at: Location { line: 6, column: 9 },
            implied: true,
        })
    );
    assert!(matches!(&entry.partition, Partition::Types(items) if items.len() == 2));
}

#[test]
fn device_manager_one_type_implies_no_size_mode() {
    let config = yaml(
        "version: v1\nvgpu-configs:\n  one:\n    - devices: all\n      vgpu-devices:\n        \
         \"L40S-12Q\": 4\n",
        "one",
    );

    assert_eq!(config.entries[0].size_mode, None);
}

#[test]
fn host_toml_size_mode_of_another_word_is_an_error_at_its_value() {
    let text = format!("{L40S_BY_MODEL}size_mode = \"hetero\"\ntypes = {{ \"L40S-12Q\" = 4 }}\n");

    let err =
        crate::desired::DesiredFile::parse("host.toml", crate::desired::Format::HostToml, &text)
            .unwrap_err();

    assert_eq!(
        err.to_string(),
        "host.toml:5:13: size mode \"hetero\" is neither \"equal\" nor \"mixed\""
    );
}

#[test]
fn plan_adding_a_1q_beside_a_24q_nvml_gives_no_placement_of_keeps_the_24q() {
    use std::collections::BTreeMap;

    use crate::testing::fleet;
    use crate::testing::unit::addr;

    // A mixed L40S running a 24Q on a VF, at 0: NVML gives VF vGPUs no placement, so only
    // the driver's creatable placements say which slots it holds.
    let mut state = host(vec![gpu(Model::L40s, L40S)]);
    fleet::record_vgpus(&mut state.inventory, addr(L40S), "1155", 24 * 1024, 0, 1);
    crate::testing::unit::mixed_l40s_holding(&mut state, L40S, &[(0, 24)], BTreeMap::new());
    let l40s = &state.inventory.gpus[0];
    let one_q = l40s
        .types
        .iter()
        .find(|t| t.name.as_deref() == Some("NVIDIA L40S-1Q"));
    let one_q = one_q.unwrap().id.clone();
    let config = toml(&format!(
        "{L40S_BY_MODEL}types = {{ \"L40S-24Q\" = 1, \"L40S-1Q\" = 1 }}\n"
    ));

    let plan = plan(&state, &config);

    // The 24Q stays (defined, not made again); the 1Q goes beside it, at a placement the
    // driver can create it at. Without the creatable placements the plan would empty the GPU.
    assert_eq!(plan.gpus[0].refusals, Vec::new());
    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Define {
                id: crate::model::VgpuHandle::Vf(crate::testing::unit::vf(L40S, 0)),
                start: Start::Auto
            },
            // Where `create` puts it: 29 keeps the 16 GiB placement at 32 and the 4 GiB one
            // at 24 free.
            create(&one_q, "NVIDIA L40S-1Q", 29)
        ]
    );
}

#[test]
fn plan_mig_beside_mixed_size_mode_is_refused() {
    use crate::capacity::MigFacts;
    use crate::desired::{DesiredFile, Format};
    use crate::steps::Refusal;

    // The L40S stands in for a GPU that has both modes: in mixed-size mode now, MIG off.
    let mut state = host(vec![gpu(Model::L40s, L40S)]);
    crate::testing::unit::mixed_l40s_holding(&mut state, L40S, &[], Default::default());
    let mig_off = MigFacts {
        mig_on: false,
        reset_pending: false,
        instances: Vec::new(),
        placements: Default::default(),
        profiles: Default::default(),
        used: Default::default(),
    };
    state.mig.insert(crate::testing::unit::addr(L40S), mig_off);
    let with = |lines: &str| {
        toml(&format!(
            "{L40S_BY_MODEL}mig = {{ \"1g.18gb\" = 1 }}\n{lines}"
        ))
    };
    let parted = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    \
                  mig-devices:\n      \"1g.18gb\": 1\n";
    let parted = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, parted).unwrap();

    let refusals = |config: &crate::desired::Desired| -> Vec<Refusal> {
        let plan = plan(&state, config);
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| r.refusal.clone())
            .collect()
    };

    assert_eq!(refusals(&with("types = {}\n")), [Refusal::MixedMig]);
    assert_eq!(refusals(&parted.configs[0]), [Refusal::MixedMig]);
    assert_eq!(refusals(&with("size_mode = \"equal\"\ntypes = {}\n")), []);
    assert_eq!(
        Refusal::MixedMig.to_string(),
        "it would run mixed-size mode beside MIG mode, which it does not take: ask size_mode = \
         \"equal\" with MIG, or mig = \"disabled\" with mixed sizes"
    );
}

#[test]
fn plan_from_mig_to_mixed_sizes_turns_mig_off_before_it_sets_mixed_size_mode() {
    use crate::capacity::MigFacts;

    // The L40S stands in for a GPU that has both modes: MIG on now, no GPU instance.
    let mut state = host(vec![gpu(Model::L40s, L40S)]);
    let mig_on = MigFacts {
        mig_on: true,
        reset_pending: false,
        instances: Vec::new(),
        placements: Default::default(),
        profiles: Default::default(),
        used: Default::default(),
    };
    state.mig.insert(crate::testing::unit::addr(L40S), mig_on);
    let config = toml(&format!(
        "{L40S_BY_MODEL}mig = \"disabled\"\ntypes = {{ \"L40S-24Q\" = 1, \"L40S-12Q\" = 2 }}\n"
    ));

    let plan = plan(&state, &config);

    let gpu = &plan.gpus[0];
    assert_eq!(gpu.refusals, []);
    let order: Vec<&str> = gpu
        .steps
        .iter()
        .map(|s| match s {
            Step::MigMode { .. } => "mig-mode",
            Step::SizeMode { .. } => "size-mode",
            Step::Create { .. } => "create",
            _ => "other",
        })
        .collect();
    assert_eq!(
        order,
        ["mig-mode", "size-mode", "create", "create", "create"]
    );
    assert_eq!(gpu.steps[0], Step::MigMode { on: false });
}
