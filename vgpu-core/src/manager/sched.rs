//! The vGPU scheduler through the manager: set under the host lock and audited, and, with a
//! definition, recorded first for `restore`.

use super::Manager;
use crate::discovery::discover;
use crate::error::{NvmlError, Result};
use crate::model::NVIDIA_VENDOR_ID;
use crate::model::pci::PciAddress;
use crate::nvml::sched::{SchedulerChange, SchedulerRequest};
use crate::state::store::SchedDefinition;

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
            let inventory = discover(op.paths())?;
            let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
            if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
                return Err(NvmlError::NotNvidia {
                    gpu: gpu.address,
                    what: "the vGPU scheduler".to_owned(),
                }
                .into());
            }
            let running: Vec<String> = gpu.vgpus.iter().map(|v| v.id.to_string()).collect();
            op.set_scheduler(gpu.address, request, &running)
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
            let inventory = discover(op.paths())?;
            let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
            if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
                return Err(NvmlError::NotNvidia {
                    gpu: gpu.address,
                    what: "the vGPU scheduler".to_owned(),
                }
                .into());
            }
            let before = op.store().sched_of(gpu.address)?;
            op.store().define_sched(&SchedDefinition {
                gpu: gpu.address,
                request,
            })?;
            let running: Vec<String> = gpu.vgpus.iter().map(|v| v.id.to_string()).collect();
            let result = op.set_scheduler(gpu.address, request, &running);
            if result.is_err() {
                let back = match &before {
                    Some(def) => op.store().define_sched(def),
                    None => op.store().undefine_sched(gpu.address).map(|_| ()),
                };
                if let Err(err) = back {
                    tracing::warn!(gpu = %gpu.address, "scheduler definition not put back: {err}");
                }
            }
            result
        })
    }
}
