//! An NVIDIA GPU's own settings through the manager, set under the host lock and audited: the
//! vGPU scheduler (with a definition, recorded first for `restore`) and the size mode.

use super::Manager;
use super::session::Operation;
use crate::discovery::discover;
use crate::error::{NvmlError, Result};
use crate::model::nvml::SchedulerPolicy;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::model::{Gpu, NVIDIA_VENDOR_ID};
use crate::nvml::sched::{SchedulerChange, SchedulerRequest};
use crate::nvml::sizes::SizeModeChange;
use crate::state::store::{OwnKind, Sched, SchedDefinition, SizeModeDefinition, SizeModeKind};

/// The NVIDIA GPU at `gpu` and its vGPUs by handle, read now; `what` names the setting a GPU
/// of another vendor does not have.
fn nvidia_gpu(op: &Operation<'_>, gpu: PciAddress, what: &str) -> Result<Gpu> {
    let inventory = discover(op.paths())?;
    let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
        return Err(NvmlError::NotNvidia {
            gpu: gpu.address,
            what: what.to_owned(),
        }
        .into());
    }
    Ok(gpu.clone())
}

/// The GPU's vGPUs, by handle.
fn vgpus(gpu: &Gpu) -> Vec<String> {
    gpu.vgpus.iter().map(|v| v.id.to_string()).collect()
}

/// What a change asks that mixed-size mode does not go with, or mixed-size mode itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Asked {
    /// The size mode asked for.
    pub(crate) mode: Option<SizeMode>,
    /// The scheduler policy asked for.
    pub(crate) policy: Option<SchedulerPolicy>,
    /// Whether MIG mode is to be turned on.
    pub(crate) mig: bool,
}

/// Refuses a change that would put mixed-size mode beside what it does not go with (NVIDIA
/// vGPU user guide, "Mixed-Size Mode": time-sliced vGPUs only, and no fixed share): `asked`
/// is what the change asks for, `define` whether it is to be defined too, so that the GPU's
/// definitions must agree as well. What NVML cannot say is left to NVML's own answer.
pub(crate) fn keeps_mixed_apart(
    op: &Operation<'_>,
    found: &Gpu,
    asked: Asked,
    define: bool,
) -> Result<()> {
    let gpu = found.address;
    let nvml = op.nvml().get();
    let refuse = |what: &str, remedy: String| {
        Err(NvmlError::MixedSizeExcludes {
            gpu,
            what: what.to_owned(),
            remedy,
        }
        .into())
    };
    if asked.mode == Some(SizeMode::Mixed) {
        if crate::nvml::mig::facts(op.paths(), nvml, gpu).is_some_and(|f| f.mig_on) {
            return refuse(
                "MIG mode, which is on",
                "turn MIG mode off first".to_owned(),
            );
        }
        let state = nvml.scheduler_state(gpu);
        if state.value().and_then(|s| s.policy) == Some(SchedulerPolicy::FixedShare) {
            return refuse(
                "the fixed-share scheduler, which it runs",
                format!("set another policy first (vgpuctl sched {gpu} --policy equal-share)"),
            );
        }
        if define && op.store().mig_of(gpu)?.is_some_and(|d| d.enabled) {
            return refuse(
                "MIG mode, which its MIG definition turns on",
                "define it off first (a plan with mig = \"disabled\")".to_owned(),
            );
        }
        let fixed = |d: SchedDefinition| d.request.policy == SchedulerPolicy::FixedShare;
        if define && op.store().sched_of(gpu)?.is_some_and(fixed) {
            return refuse(
                "the fixed-share scheduler, which its scheduler definition sets",
                format!(
                    "define another policy first (vgpuctl sched {gpu} --policy equal-share --define)"
                ),
            );
        }
    }
    // What the change brings, and the command that puts the GPU's size mode first.
    let brings = match (asked.policy, asked.mig) {
        (Some(SchedulerPolicy::FixedShare), _) => "the fixed-share scheduler",
        (_, true) => "MIG mode",
        _ => return Ok(()),
    };
    if nvml.size_mode(gpu).value() == Some(&SizeMode::Mixed) {
        return refuse(
            brings,
            format!("set equal-size mode first (vgpuctl size-mode {gpu} equal)"),
        );
    }
    if !define {
        return Ok(());
    }
    let mixed = |d: SizeModeDefinition| d.mode == SizeMode::Mixed;
    if op.store().size_mode_of(gpu)?.is_some_and(mixed) {
        return refuse(
            &format!("{brings}, as its size-mode definition says mixed"),
            format!("define equal-size mode first (vgpuctl size-mode {gpu} equal --define)"),
        );
    }
    let placed = op.store().placed_on(gpu, &possible_vfs(found))?;
    if !placed.is_empty() {
        return refuse(
            &format!(
                "{brings}, as vGPUs are defined at placements ({})",
                placed.join(", ")
            ),
            "undefine them first".to_owned(),
        );
    }
    Ok(())
}

/// The VFs `found` has now, and those it may have once its VF count is restored: mediated
/// devices may be defined on VFs not enabled yet.
pub(crate) fn possible_vfs(found: &Gpu) -> Vec<PciAddress> {
    let mut vfs: Vec<PciAddress> = found.vfs.iter().map(|vf| vf.address).collect();
    vfs.extend(
        found
            .sriov
            .iter()
            .flat_map(|s| s.vf_addresses(found.address)),
    );
    vfs.sort_unstable();
    vfs.dedup();
    vfs
}

impl Manager {
    /// Sets the vGPU scheduler of NVIDIA GPU `gpu` to `request` through NVML, as one audited
    /// operation under the host lock. Refused before NVML is asked when the GPU is not
    /// NVIDIA's, when vGPUs run on it (sysfs or NVML shows them), when its scheduler does not
    /// offer the policy, or the time slice is not one it takes; NVML's own refusal is passed
    /// on ([`NvmlError::Call`]). Nothing changes when the GPU is already so.
    pub fn set_scheduler(
        &self,
        gpu: PciAddress,
        request: SchedulerRequest,
    ) -> Result<SchedulerChange> {
        self.scheduler(gpu, request, false)
    }

    /// [`Manager::set_scheduler`], recorded as `gpu`'s scheduler definition first, so that
    /// `restore` sets it again before it makes the GPU's vGPUs (the driver forgets it when it
    /// unloads). A refused change leaves the definition as it was.
    pub fn set_scheduler_defined(
        &self,
        gpu: PciAddress,
        request: SchedulerRequest,
    ) -> Result<SchedulerChange> {
        self.scheduler(gpu, request, true)
    }

    fn scheduler(
        &self,
        gpu: PciAddress,
        request: SchedulerRequest,
        define: bool,
    ) -> Result<SchedulerChange> {
        self.mutate("sched", &gpu.to_string(), |op| {
            let found = nvidia_gpu(op, gpu, "the vGPU scheduler")?;
            keeps_mixed_apart(
                op,
                &found,
                Asked {
                    policy: Some(request.policy),
                    ..Asked::default()
                },
                define,
            )?;
            let running = vgpus(&found);
            let def = define.then_some(SchedDefinition { gpu, request });
            defined::<Sched, _>(op, def.as_ref(), |op| {
                op.set_scheduler(gpu, request, &running)
            })
        })
    }

    /// Puts the NVIDIA GPU `gpu` in size mode `mode` through NVML (audited, under the host
    /// lock). Refused while the GPU holds vGPUs, naming them; without NVML, an error naming
    /// NVML. Nothing changes when the GPU is already so.
    pub fn set_size_mode(&self, gpu: PciAddress, mode: SizeMode) -> Result<SizeModeChange> {
        self.size_mode(gpu, mode, false)
    }

    /// [`Manager::set_size_mode`], recorded as `gpu`'s size-mode definition first, so that
    /// `restore` sets it again before it makes the GPU's vGPUs (the driver forgets it at each
    /// reboot). A refused change leaves the definition as it was. Equal-size mode is refused
    /// while vGPUs on the GPU are defined at placements ([`StateError::SizeModeDisagrees`]).
    ///
    /// [`StateError::SizeModeDisagrees`]: crate::error::StateError::SizeModeDisagrees
    pub fn set_size_mode_defined(&self, gpu: PciAddress, mode: SizeMode) -> Result<SizeModeChange> {
        self.size_mode(gpu, mode, true)
    }

    fn size_mode(&self, gpu: PciAddress, mode: SizeMode, define: bool) -> Result<SizeModeChange> {
        self.mutate("size-mode", &gpu.to_string(), |op| {
            let found = nvidia_gpu(op, gpu, "a size mode")?;
            keeps_mixed_apart(
                op,
                &found,
                Asked {
                    mode: Some(mode),
                    ..Asked::default()
                },
                define,
            )?;
            let def = define.then_some(SizeModeDefinition { gpu, mode });
            if define && mode == SizeMode::Equal {
                let placed = op.store().placed_on(gpu, &possible_vfs(&found))?;
                op.store().check_size_mode_agrees(gpu, Some(mode), placed)?;
            }
            let vgpus = vgpus(&found);
            defined::<SizeModeKind, _>(op, def.as_ref(), |op| op.set_size_mode(gpu, mode, &vgpus))
        })
    }
}

/// `change`, with `def` (when there is one) recorded as its GPU's definition of kind `K`
/// first, as a step of the operation: a refused change undoes it with the rest.
fn defined<K: OwnKind, T>(
    op: &mut Operation<'_>,
    def: Option<&K::Def>,
    change: impl FnOnce(&mut Operation<'_>) -> Result<T>,
) -> Result<T> {
    if let Some(def) = def {
        let (path, bytes) = op.store().own_file::<K>(def)?;
        op.replace_file(&path, Some(&bytes))?;
    }
    change(op)
}
