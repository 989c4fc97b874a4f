//! A plan's steps in words: what `plan` and `apply` say each does, and how `assert` says the
//! host differs. One table, [`words`], says both.

use vgpu_core::plan::steps::Step;

use crate::render::size_text;

/// Consecutive equal steps, counted.
pub(super) fn grouped(steps: &[Step]) -> Vec<(&Step, usize)> {
    let mut out: Vec<(&Step, usize)> = Vec::new();
    for step in steps {
        match out.last_mut() {
            Some((last, n)) if *last == step => *n += 1,
            _ => out.push((step, 1)),
        }
    }
    out
}

pub(super) fn type_text(type_id: Option<&str>, type_name: Option<&str>) -> String {
    match (type_name, type_id) {
        (_, Some(vgpu_core::model::PLAIN_VF_TYPE)) => "VF on vfio-pci".to_owned(),
        (Some(name), _) => name.to_owned(),
        (None, Some(id)) => id.to_owned(),
        (None, None) => "?".to_owned(),
    }
}

/// A step in words, as the plan and the progress lines show it.
pub(super) fn step_text(step: &Step) -> String {
    words(step, 1).0
}

/// The one table of a step's words: what the plan does (`create   NVIDIA L40S-12Q (auto)`),
/// and how `assert` says the host differs (`lacks 2 x NVIDIA L40S-12Q`) when the step is
/// needed `times` times over.
pub(super) fn words(step: &Step, times: usize) -> (String, String) {
    match step {
        Step::Vfs { from, to } if from == to => (
            format!("define   {to} VFs"),
            format!("{to} VFs are enabled but not defined"),
        ),
        Step::Vfs { from, to } => (
            format!("vfs      {from} -> {to}"),
            format!("has {from} VFs, not {to}"),
        ),
        Step::Destroy {
            id,
            type_id,
            type_name,
        } => {
            let ty = type_text(Some(type_id), type_name.as_deref());
            (
                format!("destroy  {id} ({ty})"),
                format!("{id} ({ty}) is not wanted"),
            )
        }
        Step::Undefine { id } => (
            format!("undefine {id}"),
            format!("{id} has a definition the config does not"),
        ),
        Step::Quota {
            from_mib, to_mib, ..
        } => {
            let (vf, to) = (vf_text(step), size_text(*to_mib));
            match from_mib {
                Some(from) => (
                    format!("quota    {vf} {} -> {to}", size_text(*from)),
                    format!("{vf} has {} of local memory, not {to}", size_text(*from)),
                ),
                None => (
                    format!("quota    {vf} -> {to}"),
                    format!("{vf} lacks a local-memory quota of {to}"),
                ),
            }
        }
        Step::Start { id } => (
            format!("start    {id}"),
            format!("{id} is defined but not running"),
        ),
        Step::Define { id, start } => (
            format!("define   {id} ({start})"),
            format!("{id} is not defined to start {start}"),
        ),
        Step::Create {
            type_id,
            type_name,
            start,
            placement,
        } => {
            let ty = type_text(type_id.as_deref(), type_name.as_deref());
            let at = placement.map_or_else(String::new, |p| format!(" at placement {p}"));
            (
                format!("create   {ty} ({start}){at}"),
                format!("lacks {times} x {ty}"),
            )
        }
        Step::SizeMode { mode } => (
            format!("size     {mode}"),
            format!("it is not in {mode}-size mode"),
        ),
        Step::Scheduler {
            policy,
            timeslice_ms,
        } => {
            let wanted = scheduler_text(*policy, *timeslice_ms);
            (
                format!("sched    {wanted}"),
                format!("its vGPU scheduler is not {wanted}"),
            )
        }
        Step::DestroyGpuInstance { id, profile, start } => (
            format!("destroy  GPU instance {id} ({profile} at slice {start})"),
            format!("GPU instance {id} ({profile}) is not wanted"),
        ),
        Step::MigMode { on } => (
            format!("mig      {}", if *on { "on" } else { "off" }),
            format!("MIG mode is {}", if *on { "off" } else { "on" }),
        ),
        Step::CreateGpuInstance { profile, start, .. } => (
            match start {
                Some(start) => format!("create   GPU instance {profile} at slice {start}"),
                None => format!("create   GPU instance {profile}"),
            },
            format!("lacks {times} x GPU instance {profile}"),
        ),
    }
}

/// A scheduler state asked for, in words: `equal-share, time slice 2 ms`.
pub(super) fn scheduler_text(
    policy: vgpu_core::model::nvml::SchedulerPolicy,
    timeslice_ms: Option<u32>,
) -> String {
    match timeslice_ms {
        Some(ms) => format!("{policy}, time slice {ms} ms"),
        None => policy.to_string(),
    }
}

/// The VF of a quota step: `VF 2 (0000:4d:00.2)`.
pub(super) fn vf_text(step: &Step) -> String {
    match step {
        Step::Quota {
            vf,
            address: Some(address),
            ..
        } => format!("VF {vf} ({address})"),
        Step::Quota { vf, .. } => format!("VF {vf}"),
        _ => String::new(),
    }
}
