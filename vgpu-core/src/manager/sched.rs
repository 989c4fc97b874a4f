//! An NVIDIA GPU's own settings through the manager, set under the host lock and audited: the
//! vGPU scheduler (with a definition, recorded first for `restore`) and the size mode.

use super::Manager;
use super::session::Operation;
use crate::discovery::discover;
use crate::error::{NvmlError, Result};
use crate::model::NVIDIA_VENDOR_ID;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::nvml::sched::{SchedulerChange, SchedulerRequest};
use crate::nvml::sizes::SizeModeChange;
use crate::state::store::SchedDefinition;

/// The NVIDIA GPU at `gpu` and its vGPUs by handle, read now; `what` names the setting a GPU
/// of another vendor does not have.
fn nvidia_gpu(op: &Operation<'_>, gpu: PciAddress, what: &str) -> Result<Vec<String>> {
    let inventory = discover(op.paths())?;
    let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
        return Err(NvmlError::NotNvidia {
            gpu: gpu.address,
            what: what.to_owned(),
        }
        .into());
    }
    Ok(gpu.vgpus.iter().map(|v| v.id.to_string()).collect())
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
        self.mutate("sched", &gpu.to_string(), |op| {
            let running = nvidia_gpu(op, gpu, "the vGPU scheduler")?;
            op.set_scheduler(gpu, request, &running)
        })
    }

    /// [`Manager::set_scheduler`], recorded as `gpu`'s scheduler definition first, so that
    /// `restore` sets it again before it makes the GPU's vGPUs (the driver forgets it when it
    /// unloads). A refused change leaves the definition as it was.
    pub fn set_scheduler_defined(
        &self,
        gpu: PciAddress,
        request: SchedulerRequest,
    ) -> Result<SchedulerChange> {
        self.mutate("sched", &gpu.to_string(), |op| {
            let running = nvidia_gpu(op, gpu, "the vGPU scheduler")?;
            let before = op.store().sched_of(gpu)?;
            op.store().define_sched(&SchedDefinition { gpu, request })?;
            let result = op.set_scheduler(gpu, request, &running);
            if result.is_err() {
                let back = match &before {
                    Some(def) => op.store().define_sched(def),
                    None => op.store().undefine_sched(gpu).map(|_| ()),
                };
                if let Err(err) = back {
                    tracing::warn!(gpu = %gpu, "scheduler definition not put back: {err}");
                }
            }
            result
        })
    }

    /// Puts the NVIDIA GPU `gpu` in size mode `mode` through NVML (audited, under the host
    /// lock). Refused while the GPU holds vGPUs, naming them; without NVML, an error naming
    /// NVML. Nothing changes when the GPU is already so.
    pub fn set_size_mode(&self, gpu: PciAddress, mode: SizeMode) -> Result<SizeModeChange> {
        self.mutate("size-mode", &gpu.to_string(), |op| {
            let vgpus = nvidia_gpu(op, gpu, "a size mode")?;
            op.set_size_mode(gpu, mode, &vgpus)
        })
    }
}
