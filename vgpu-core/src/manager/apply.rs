//! Carrying out a [`Plan`]: every GPU with steps at once, each GPU's steps in order as one
//! operation of one session.
//!
//! Like [`provision`](super::provision), one thread per GPU, scoped to the call, runs under one
//! hold of the host lock; every step is audited; a GPU whose steps fail has its own steps
//! undone (vGPUs it stopped are made again, definitions it removed are written back, VF counts
//! and local-memory quotas put back) and the other GPUs go on. Before its first step, each GPU
//! is read again and compared with what it held when it was planned: a GPU that changed in
//! between is left alone ([`Error::PlanStale`]). A vGPU a process holds open is never stopped
//! (the session's release guard); one a libvirt domain references is refused by the planner,
//! which the caller told. A VF count is defined before it is set, and a VF's quota is recorded
//! in that SR-IOV definition before it is written, so that `restore` sets both after a reboot.

use crate::host::driver::GiveBack;
use crate::nvml::sched::SchedulerRequest;
use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::policy::{Schedulers, judge};
use super::session::{Operation, Session};
use super::start_defined;
use crate::backend::{Placement, Running};
use crate::discovery::discover_gpu;
use crate::error::{Error, ErrorKind, Object, Result};
use crate::manager::sched::{Asked, keeps_mixed_apart};
use crate::model::holder::{Holder, Tenant};
use crate::model::nvml::SchedulerPolicy;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::model::{Gpu, VgpuHandle};
use crate::nvml::NvmlCell;
use crate::plan::steps::{Before, GpuPlan, Plan, Step};
use crate::state::store::{SizeModeDefinition, SizeModeKind, SriovDefinition, Start};

/// What `apply` did, GPU by GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// The config applied.
    pub config: String,
    /// Every GPU of the plan, by address.
    pub gpus: Vec<GpuApply>,
}

impl ApplyReport {
    /// Whether every GPU now matches the config (none failed or was skipped).
    pub fn succeeded(&self) -> bool {
        self.gpus
            .iter()
            .all(|g| matches!(g.outcome, ApplyOutcome::Applied | ApplyOutcome::Unchanged))
    }
}

/// What happened to one GPU of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuApply {
    /// The GPU.
    pub gpu: PciAddress,
    /// How it went.
    pub outcome: ApplyOutcome,
    /// Steps the plan had for it.
    pub steps: usize,
    /// vGPUs created and kept.
    pub created: Vec<VgpuHandle>,
    /// vGPUs destroyed.
    pub destroyed: Vec<VgpuHandle>,
    /// Why it failed or was skipped.
    pub error: Option<String>,
    /// What a caller can do about that.
    pub kind: Option<ErrorKind>,
    /// How long its steps took, in milliseconds.
    pub elapsed_ms: u128,
}

/// How one GPU of a plan went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyOutcome {
    /// Every step was taken.
    Applied,
    /// It already matched: nothing to do.
    Unchanged,
    /// A guest holds a vGPU the plan would take away: left alone.
    Skipped,
    /// A step failed; its steps were undone.
    Failed,
}

/// What [`Manager::apply`](super::Manager::apply) reports while it works, for a progress
/// display. Told from the GPUs' threads, in order per GPU (see [`Progress`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyEvent {
    /// A GPU's steps begin.
    Started {
        /// The GPU.
        gpu: PciAddress,
        /// How many steps it has.
        steps: usize,
    },
    /// A step was taken.
    Stepped {
        /// The GPU.
        gpu: PciAddress,
        /// Which step (from 0).
        index: usize,
        /// The step.
        step: Step,
        /// The device it changed (the vGPU made or removed, or the GPU).
        device: String,
    },
    /// A GPU is done.
    Finished {
        /// The GPU.
        gpu: PciAddress,
        /// Why it failed (its steps were undone), if it did.
        error: Option<String>,
    },
}

/// A receiver of [`ApplyEvent`]s: a callback that [`Manager::apply`](super::Manager::apply)
/// borrows for the call, so it needs no runtime, no `'static` and no `Arc`.
///
/// It is called on the GPUs' threads (one per GPU with steps), concurrently for different
/// GPUs and in order for each: hence `Sync`. A GPU's next step waits until it returns, so it
/// should only hand the event on. To read the events on another thread, move a
/// [`std::sync::mpsc::Sender`] into it and run the apply on a scoped thread while the caller's
/// thread receives them, as `vgpuctl apply` does:
///
/// ```no_run
/// # fn example(manager: &vgpu_core::Manager, plan: &vgpu_core::plan::steps::Plan) -> vgpu_core::Result<()> {
/// use std::sync::mpsc;
///
/// let (sender, events) = mpsc::channel::<vgpu_core::manager::ApplyEvent>();
/// let report = std::thread::scope(|scope| {
///     let applying = scope.spawn(move || {
///         let tell = move |event: &vgpu_core::manager::ApplyEvent| {
///             // The receiver is there until the events end: the send does not fail.
///             let _sent = sender.send(event.clone());
///         };
///         manager.apply(plan, Some(&tell))
///     });
///     // Ends when the apply has returned and dropped the sender.
///     for event in events {
///         println!("{event:?}");
///     }
///     applying.join().expect("the apply thread does not panic")
/// })?;
/// # drop(report);
/// # Ok(())
/// # }
/// ```
pub type Progress<'a> = &'a (dyn Fn(&ApplyEvent) + Sync);

/// Checks that `plan` may be applied: nothing it refuses other than GPUs a guest holds.
pub(super) fn check(plan: &Plan) -> Result<()> {
    if !plan.blocked() {
        return Ok(());
    }
    let file = plan.file.display();
    let mut reasons: Vec<String> = plan
        .unmatched
        .iter()
        .filter(|u| u.blocking)
        .map(|u| format!("{file}:{}: {} is not on this host", u.at, u.selection))
        .collect();
    for gpu in &plan.gpus {
        for refused in gpu.refusals.iter().filter(|r| !r.refusal.is_held()) {
            reasons.push(match refused.at {
                Some(at) => format!("{file}:{at}: {}: {}", gpu.gpu, refused.message),
                None => format!("{}: {}", gpu.gpu, refused.message),
            });
        }
    }
    Err(Error::PlanRefused {
        config: plan.config.clone(),
        refused: reasons.len(),
        first: reasons.into_iter().next().unwrap_or_default(),
    })
}

/// What each entry's tenant (`tenant = "acme"`) would be given by `plan`: the vGPUs of the
/// GPUs it does not refuse, as (GPU, type id), per tenant.
fn planned_by_tenant(plan: &Plan) -> BTreeMap<&str, Vec<(PciAddress, String)>> {
    let mut by_tenant: BTreeMap<&str, Vec<(PciAddress, String)>> = BTreeMap::new();
    for gpu in plan.gpus.iter().filter(|g| g.refusals.is_empty()) {
        let Some(tenant) = gpu.tenant.as_deref() else {
            continue;
        };
        let made = gpu.steps.iter().filter_map(|step| match step {
            Step::Create {
                type_id: Some(type_id),
                ..
            } => Some((gpu.gpu, type_id.clone())),
            _ => None,
        });
        by_tenant.entry(tenant).or_default().extend(made);
    }
    by_tenant.retain(|_, planned| !planned.is_empty());
    by_tenant
}

/// The policy's name for what `plan` makes for `tenant`: no domain holds them yet.
fn plan_claim(plan: &Plan, tenant: &str) -> Holder {
    Holder {
        domain: format!("{} (apply)", plan.config),
        uuid: uuid::Uuid::nil(),
        tenant: Some(Tenant::label(tenant)),
    }
}

/// Refuses `plan` when an entry's tenant may not hold the vGPUs it makes, beside what domains
/// hold now: the hook's check (`policy::enforce`), under the same hold of the host lock. A
/// refusal applies nothing. Nothing is read without a policy file or a tenant in the plan.
pub(super) fn keep_policy(session: &Session, plan: &Plan) -> Result<()> {
    let set = schedulers_set(plan);
    for (tenant, planned) in planned_by_tenant(plan) {
        let claim = plan_claim(plan, tenant);
        session.run("apply-policy", tenant, |op| {
            let schedulers = Schedulers::new(op.nvml(), &set);
            let (paths, store) = (op.paths(), op.store());
            judge(paths, store, &claim, &[], &planned, None, schedulers).map(drop)
        })?;
    }
    Ok(())
}

/// [`keep_policy`] without the host lock, for `plan` and `assert`: the same question, asked of
/// the host as it is now.
pub(super) fn policy_verdict(manager: &super::Manager, plan: &Plan) -> Result<()> {
    let set = schedulers_set(plan);
    let nvml = NvmlCell::new(&manager.paths, manager.nvml.clone());
    for (tenant, planned) in planned_by_tenant(plan) {
        let claim = plan_claim(plan, tenant);
        let schedulers = Schedulers::new(&nvml, &set);
        judge(
            &manager.paths,
            &manager.store,
            &claim,
            &[],
            &planned,
            None,
            schedulers,
        )?;
    }
    Ok(())
}

/// The scheduler each GPU of `plan` is set to before its vGPUs are made: the QoS classes of
/// the vGPUs it makes are judged against it, not against the scheduler it replaces.
fn schedulers_set(plan: &Plan) -> BTreeMap<PciAddress, SchedulerPolicy> {
    let mut set = BTreeMap::new();
    for gpu in &plan.gpus {
        for step in &gpu.steps {
            if let Step::Scheduler { policy, .. } = step {
                set.insert(gpu.gpu, *policy);
            }
        }
    }
    set
}

/// Runs every GPU of `plan` that has steps as its own operation of `session`, all at once;
/// the reports are in the order of the GPUs' addresses.
pub(super) fn run(
    session: Option<&Session>,
    plan: &Plan,
    progress: Option<Progress<'_>>,
) -> Result<Vec<GpuApply>> {
    let mut reports = Vec::new();
    let mut busy = Vec::new();
    for gpu in &plan.gpus {
        let idle = |outcome, refused: Option<&crate::plan::steps::Refused>| GpuApply {
            gpu: gpu.gpu,
            outcome,
            steps: gpu.steps.len(),
            created: Vec::new(),
            destroyed: Vec::new(),
            error: refused.map(|r| r.message.clone()),
            kind: refused.map(|_| ErrorKind::Busy),
            elapsed_ms: 0,
        };
        if let Some(refused) = gpu.refusals.first() {
            reports.push(idle(ApplyOutcome::Skipped, Some(refused)));
            continue;
        }
        let Some(session) = session.filter(|_| !gpu.steps.is_empty()) else {
            reports.push(idle(ApplyOutcome::Unchanged, None));
            continue;
        };
        busy.push((session, gpu));
    }
    reports.extend(super::parallel::each_gpu(
        "apply",
        &busy,
        |(session, gpu)| run_one(session, gpu, progress),
    )?);
    reports.sort_by_key(|r| r.gpu);
    Ok(reports)
}

/// What one GPU's operation changed.
#[derive(Default)]
struct Done {
    created: Vec<VgpuHandle>,
    destroyed: Vec<VgpuHandle>,
}

fn run_one(session: &Session, plan: &GpuPlan, progress: Option<Progress<'_>>) -> GpuApply {
    let started = Instant::now();
    let tell = |event: ApplyEvent| {
        if let Some(progress) = progress {
            progress(&event);
        }
    };
    tell(ApplyEvent::Started {
        gpu: plan.gpu,
        steps: plan.steps.len(),
    });
    let device = plan.gpu.to_string();
    let result = session.run("apply", &device, |op| steps(op, plan, &tell));
    tell(ApplyEvent::Finished {
        gpu: plan.gpu,
        error: result.as_ref().err().map(Error::chain),
    });
    let (outcome, done, error) = match result {
        Ok(done) => (ApplyOutcome::Applied, done, None),
        Err(err) => (ApplyOutcome::Failed, Done::default(), Some(err)),
    };
    GpuApply {
        gpu: plan.gpu,
        outcome,
        steps: plan.steps.len(),
        created: done.created,
        destroyed: done.destroyed,
        kind: error.as_ref().map(Error::kind),
        error: error.as_ref().map(Error::chain),
        elapsed_ms: started.elapsed().as_millis(),
    }
}

/// One GPU's steps, in order, after checking it still holds what it held when planned.
fn steps(op: &mut Operation<'_>, plan: &GpuPlan, tell: &dyn Fn(ApplyEvent)) -> Result<Done> {
    let pf = plan.gpu;
    let (mut gpu, _warnings) = discover_gpu(op.paths(), pf)?;
    let now = Before::of(&gpu);
    if now != plan.before {
        let what = if now.num_vfs != plan.before.num_vfs {
            format!("{} VFs, planned with {}", now.num_vfs, plan.before.num_vfs)
        } else {
            format!(
                "{} vGPUs, planned with {}",
                now.vgpus.len(),
                plan.before.vgpus.len()
            )
        };
        return Err(Error::PlanStale { gpu: pf, what });
    }
    // vGPUs at placements need a GPU not defined in equal-size mode: said before anything
    // changes, not at the first of them.
    let mode = plan.steps.iter().find_map(|s| match s {
        Step::SizeMode { mode } => Some(*mode),
        _ => None,
    });
    let placed = plan.steps.iter().filter_map(|s| match s {
        Step::Create {
            type_name,
            type_id,
            placement: Some(at),
            ..
        } => {
            let label = type_name
                .as_deref()
                .or(type_id.as_deref())
                .unwrap_or("vGPU");
            Some(format!("{label} at {at}, planned"))
        }
        _ => None,
    });
    op.store()
        .check_size_mode_agrees(pf, mode, placed.collect())?;
    let mut done = Done::default();
    // Whether the host changed since `gpu` was read.
    let mut dirty = false;
    for (index, step) in plan.steps.iter().enumerate() {
        if dirty
            && matches!(
                step,
                Step::Define { .. }
                    | Step::Create { .. }
                    | Step::Scheduler { .. }
                    | Step::SizeMode { .. }
            )
        {
            gpu = discover_gpu(op.paths(), pf)?.0;
            dirty = false;
        }
        let device = match step {
            Step::Vfs { to, .. } => {
                // The driver gives every VF enabled an equal share: the quota steps that
                // follow record theirs.
                op.define_sriov(&SriovDefinition {
                    pf,
                    num_vfs: *to,
                    drivers_autoprobe: None,
                    lmem_quota_mib: BTreeMap::new(),
                })?;
                op.set_vf_count(pf, *to)?;
                dirty = true;
                pf.to_string()
            }
            Step::Quota { vf, to_mib, .. } => {
                op.define_lmem_quota(pf, *vf, *to_mib)?;
                let (address, _) = op.set_lmem_quota(pf, *vf, *to_mib)?;
                dirty = true;
                address.to_string()
            }
            Step::Destroy { id, type_id, .. } => {
                op.check_removable(*id)?;
                let defined = match id {
                    VgpuHandle::Vf(vf) => op.store().binding(*vf)?.map(|b| b.previous_driver),
                    VgpuHandle::Mdev(_) => None,
                };
                let fallback = defined
                    .as_ref()
                    .map_or(GiveBack::Probe, |d| GiveBack::To(d.as_deref()));
                op.stop_reversibly(*id, type_id, fallback)?;
                op.undefine_reversibly(*id)?;
                done.destroyed.push(*id);
                dirty = true;
                id.to_string()
            }
            Step::Undefine { id } => {
                op.check_removable(*id)?;
                op.undefine_reversibly(*id)?;
                dirty = true;
                id.to_string()
            }
            Step::Start { id } => {
                if !start_defined(op, *id)? {
                    return Err(Error::NotFound {
                        what: Object::Definition,
                        id: id.to_string(),
                        path: op.store().vgpu_dir().to_path_buf(),
                    });
                }
                dirty = true;
                id.to_string()
            }
            Step::Define { id, start } => {
                let placement = running_placement(op, &gpu, *id)?;
                op.adopt(&gpu, &placement, *id, *start)?;
                id.to_string()
            }
            Step::Scheduler {
                policy,
                timeslice_ms,
            } => {
                let running: Vec<String> = gpu.vgpus.iter().map(|v| v.id.to_string()).collect();
                let request = SchedulerRequest {
                    policy: *policy,
                    timeslice_ms: *timeslice_ms,
                };
                // The GPU's definitions must agree too: the plan saw only what runs.
                let asked = Asked {
                    policy: Some(*policy),
                    ..Asked::default()
                };
                keeps_mixed_apart(op, &gpu, asked, true)?;
                op.set_scheduler(pf, request, &running)?;
                pf.to_string()
            }
            Step::SizeMode { mode } => {
                let asked = Asked {
                    mode: Some(*mode),
                    ..Asked::default()
                };
                keeps_mixed_apart(op, &gpu, asked, true)?;
                let vgpus: Vec<String> = gpu.vgpus.iter().map(|v| v.id.to_string()).collect();
                op.set_size_mode(pf, *mode, &vgpus)?;
                // Kept, as the vGPUs it makes are: `restore` sets it before them.
                let def = SizeModeDefinition {
                    gpu: pf,
                    mode: *mode,
                };
                let (path, bytes) = op.store().own_file::<SizeModeKind>(&def)?;
                op.replace_file(&path, Some(&bytes))?;
                dirty = true;
                pf.to_string()
            }
            Step::DestroyGpuInstance { id, .. } => {
                op.destroy_gpu_instance(pf, *id)?;
                dirty = true;
                format!("{pf}/{id}")
            }
            Step::MigMode { on } => {
                // MIG mode takes equal-size mode, which the plan leaves: a definition that
                // says mixed is replaced, as apply records the mode it leaves.
                let mixed = |d: SizeModeDefinition| d.mode == SizeMode::Mixed;
                if *on && op.store().size_mode_of(pf)?.is_some_and(mixed) {
                    let def = SizeModeDefinition {
                        gpu: pf,
                        mode: SizeMode::Equal,
                    };
                    let (path, bytes) = op.store().own_file::<SizeModeKind>(&def)?;
                    op.replace_file(&path, Some(&bytes))?;
                }
                op.set_mig_mode(pf, *on)?;
                dirty = true;
                pf.to_string()
            }
            Step::CreateGpuInstance { profile, start, .. } => {
                let id = op.create_gpu_instance(pf, profile, *start)?;
                dirty = true;
                format!("{pf}/{id}")
            }
            Step::Create {
                start, placement, ..
            } => {
                let wanted = step.wanted_type().ok_or_else(|| {
                    Error::bad_name("", "a create step naming its type (by id or name)")
                })?;
                let id = create(op, &gpu, wanted, *start, *placement)?;
                done.created.push(id);
                // The next create counts this vGPU as running, not as a definition to hold
                // room for.
                dirty = true;
                id.to_string()
            }
        };
        tell(ApplyEvent::Stepped {
            gpu: pf,
            index,
            step: step.clone(),
            device,
        });
    }
    // The hook's records forget the vGPUs taken away, as `destroy` has them forget: a vGPU
    // made later under the same name is not held by an old claim.
    for id in &done.destroyed {
        op.forget_destroyed(*id)?;
    }
    Ok(done)
}

/// Creates and defines one vGPU of type `wanted` at the placement the plan gave it, or else
/// where `create` would put it.
fn create(
    op: &mut Operation<'_>,
    gpu: &Gpu,
    wanted: &str,
    start: Start,
    placement: Option<u32>,
) -> Result<VgpuHandle> {
    super::create::create(op, gpu, wanted, None, Some(start), placement).map(|created| created.id)
}

/// Where the running vGPU `id` of `gpu` is, as a definition records it.
fn running_placement(op: &Operation<'_>, gpu: &Gpu, id: VgpuHandle) -> Result<Placement> {
    let listed = gpu.vgpus.iter().find(|v| v.id == id);
    match (crate::backend::running(op.paths(), id)?, id, listed) {
        (Some(Running::Mdev { parent }), _, Some(vgpu)) => Ok(Placement::Mdev {
            parent,
            type_id: vgpu.type_id.clone(),
        }),
        (Some(Running::VendorVf { type_id }), VgpuHandle::Vf(vf), _) => {
            Ok(Placement::VendorVf { vf, type_id })
        }
        (Some(Running::PlainVf), VgpuHandle::Vf(vf), _) => Ok(Placement::PlainVf { vf }),
        _ => Err(Error::NotFound {
            what: Object::Vgpu,
            id: id.to_string(),
            path: op.paths().pci_device(&gpu.address),
        }),
    }
}
