//! The `scheduler` key of a selection: parsed from `host.toml`, planned as a step before the
//! vGPUs are made, and refused where it cannot be.

use crate::Error;
use crate::HostState;
use crate::desired::{DesiredFile, Format};
use crate::model::VgpuHandle;
use crate::model::nvml::SchedulerRequest;
use crate::model::nvml::{ArrMode, Cause, Fact, SchedulerPolicy, SchedulerState};
use crate::place::Pick;
use crate::planner::plan;
use crate::steps::{Refusal, Step};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::addr;
use crate::testing::unit::{FLEX, L40S, gpu, host, toml};

const EQUAL_SHARE_2MS: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n\
    model = \"L40S\"\ntypes = { \"L40S-12Q\" = 1 }\n\
    scheduler = { policy = \"equal-share\", timeslice_ms = 2 }\n";

/// NVML's number for `policy` (`NVML_VGPU_SCHEDULER_POLICY_*`).
fn policy_code(policy: SchedulerPolicy) -> u32 {
    match policy {
        SchedulerPolicy::BestEffort => 1,
        SchedulerPolicy::EqualShare => 2,
        SchedulerPolicy::FixedShare => 3,
    }
}

fn state(policy: SchedulerPolicy, timeslice_ns: u32) -> Fact<SchedulerState> {
    Fact::Value(SchedulerState {
        policy: Some(policy),
        raw_policy: policy_code(policy),
        arr_mode: ArrMode::Default,
        timeslice_ns: Fact::Value(timeslice_ns),
    })
}

/// An L40S whose scheduler is `scheduler`.
fn l40s(scheduler: Fact<SchedulerState>) -> HostState {
    let mut host = host(vec![gpu(Model::L40s, L40S)]);
    host.schedulers.insert(addr(L40S), scheduler);
    host
}

fn sched_step(timeslice_ms: Option<u32>) -> Step {
    Step::Scheduler {
        policy: SchedulerPolicy::EqualShare,
        timeslice_ms,
    }
}

#[test]
fn host_toml_scheduler_is_read_per_selection() {
    assert_eq!(
        toml(EQUAL_SHARE_2MS).entries[0].scheduler,
        Some(SchedulerRequest {
            policy: SchedulerPolicy::EqualShare,
            timeslice_ms: Some(2),
        })
    );
}

#[test]
fn host_toml_unknown_policy_names_line_and_choices() {
    let text = EQUAL_SHARE_2MS.replace("equal-share", "round-robin");
    let err = DesiredFile::parse("host.toml", Format::HostToml, &text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "host.toml:6:24: scheduler policy \"round-robin\" is not one of \"best-effort\", \
         \"equal-share\", \"fixed-share\""
    );
}

#[test]
fn host_toml_best_effort_with_timeslice_is_refused_at_the_value() {
    let text = EQUAL_SHARE_2MS.replace("equal-share", "best-effort");
    let err = DesiredFile::parse("host.toml", Format::HostToml, &text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "host.toml:6:54: best-effort takes no time slice (equal-share and fixed-share do)"
    );
}

#[test]
fn host_toml_scheduler_unknown_key_is_an_error() {
    let text = EQUAL_SHARE_2MS.replace("timeslice_ms", "slice");
    assert!(matches!(
        DesiredFile::parse("host.toml", Format::HostToml, &text),
        Err(Error::Desired { .. })
    ));
}

#[test]
fn plan_scheduler_change_comes_before_the_creates() {
    let plan = plan(
        &l40s(state(SchedulerPolicy::BestEffort, 0)),
        &toml(EQUAL_SHARE_2MS),
    );
    assert_eq!(plan.gpus[0].steps.first(), Some(&sched_step(Some(2))));
}

#[test]
fn plan_scheduler_already_set_takes_no_step() {
    let plan = plan(
        &l40s(state(SchedulerPolicy::EqualShare, 2_000_000)),
        &toml(EQUAL_SHARE_2MS),
    );
    assert!(
        !plan.gpus[0]
            .steps
            .iter()
            .any(|s| matches!(s, Step::Scheduler { .. })),
        "{:?}",
        plan.gpus[0].steps
    );
}

#[test]
fn plan_scheduler_other_timeslice_is_a_change() {
    let plan = plan(
        &l40s(state(SchedulerPolicy::EqualShare, 5_000_000)),
        &toml(EQUAL_SHARE_2MS),
    );
    assert_eq!(plan.gpus[0].steps.first(), Some(&sched_step(Some(2))));
}

#[test]
fn plan_scheduler_unknown_state_is_refused_with_nvml_reason() {
    let unknown = Fact::unknown(Cause::NotLoaded, "NVML is not loaded: no driver");
    let plan = plan(&l40s(unknown), &toml(EQUAL_SHARE_2MS));
    assert_eq!(
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| r.refusal.clone())
            .collect::<Vec<_>>(),
        vec![Refusal::SchedulerUnknown {
            why: "NVML is not loaded: no driver".to_owned()
        }]
    );
}

#[test]
fn plan_scheduler_not_read_is_refused() {
    let plan = plan(&host(vec![gpu(Model::L40s, L40S)]), &toml(EQUAL_SHARE_2MS));
    assert_eq!(
        plan.gpus[0].refusals[0].message,
        "its vGPU scheduler cannot be read: it was not read from NVML"
    );
}

#[test]
fn plan_scheduler_with_kept_running_vgpu_is_refused() {
    let mut host = l40s(state(SchedulerPolicy::BestEffort, 0));
    let vf = fleet::vf_address(addr(L40S), 0).unwrap();
    fleet::record(
        &mut host.inventory,
        &Pick {
            gpu: addr(L40S),
            type_id: "1153".to_owned(),
            type_name: None,
            framebuffer_mib: Some(12288),
            vf: Some(vf),
            needs_scheduler: None,
            placement_id: None,
        },
    );
    let plan = plan(&host, &toml(EQUAL_SHARE_2MS));
    assert_eq!(
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| r.refusal.clone())
            .collect::<Vec<_>>(),
        vec![Refusal::SchedulerBusy {
            running: vec![VgpuHandle::Vf(vf)]
        }]
    );
}

#[test]
fn plan_scheduler_on_intel_gpu_is_refused() {
    let text = "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:4d:00.0\"\n\
                vfs = 2\nscheduler = { policy = \"fixed-share\" }\n";
    let plan = plan(&host(vec![gpu(Model::Flex170, FLEX)]), &toml(text));
    assert_eq!(
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| r.refusal.clone())
            .collect::<Vec<_>>(),
        vec![Refusal::SchedulerNotNvidia]
    );
}

#[test]
fn plan_fixed_share_beside_mixed_size_mode_is_refused() {
    let host = l40s(state(SchedulerPolicy::BestEffort, 0));
    let mixed_fixed = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n\
        model = \"L40S\"\ntypes = { \"L40S-24Q\" = 1, \"L40S-12Q\" = 2 }\n\
        scheduler = { policy = \"fixed-share\" }\n";
    let equal_fixed = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n\
        model = \"L40S\"\ntypes = { \"L40S-12Q\" = 2 }\n\
        scheduler = { policy = \"fixed-share\" }\n";

    let mixed_only = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n\
        model = \"L40S\"\ntypes = { \"L40S-24Q\" = 1, \"L40S-12Q\" = 2 }\n";
    let runs_fixed = l40s(state(SchedulerPolicy::FixedShare, 0));

    let refused = plan(&host, &toml(mixed_fixed));
    let planned = plan(&host, &toml(equal_fixed));
    // No scheduler asked: the fixed share the GPU runs counts.
    let refused_live = plan(&runs_fixed, &toml(mixed_only));

    let reasons: Vec<String> = refused.gpus[0]
        .refusals
        .iter()
        .map(|r| r.refusal.to_string())
        .collect();
    assert_eq!(
        reasons,
        ["it would run mixed-size mode, which does not take the fixed-share scheduler"]
    );
    assert!(refused.gpus[0].steps.is_empty());
    assert_eq!(planned.gpus[0].refusals, Vec::new());
    assert_eq!(
        refused_live.gpus[0].refusals[0].refusal,
        Refusal::MixedFixedShare
    );
}
