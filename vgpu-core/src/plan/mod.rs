//! Partition plans: the desired state of a host's GPUs, declared in frame buffer, types or VF
//! counts; the planner that turns it into steps per GPU; and placement for orchestrators.
//!
//! - [`desired`]: the model ([`DesiredFile`], [`Desired`], [`Entry`], [`Partition`]), read from
//!   `host.toml` ([`host_toml`]) or NVIDIA vgpu-device-manager's v1 YAML ([`device_manager`]);
//! - [`planner`]: [`plan`], a pure function from a [`HostState`] and a config to a [`Plan`]
//!   ([`model`]: the plan, its steps and refusals);
//! - [`place`](mod@place): [`place()`], a pure function choosing GPUs for new vGPUs.
//!
//! Carrying a plan out is [`Manager::apply`](crate::Manager::apply)'s job: each GPU's steps are
//! one operation, under the host lock, audited, and undone if one fails.

pub(crate) mod desired;
pub(crate) mod device_manager;
pub(crate) mod host_toml;
pub(crate) mod model;
pub(crate) mod offers;
pub(crate) mod place;
pub(crate) mod planner;
pub(crate) mod scheduler;
#[cfg(test)]
mod tests;
pub(crate) mod vfs;

use std::collections::BTreeMap;

use crate::model::pci::PciAddress;
use crate::model::{Inventory, NVIDIA_VENDOR_ID, VgpuHandle};
use crate::nvml::Nvml;
use crate::nvml::model::{Fact, SchedulerState};
use crate::state::store::{BindingDefinition, MdevDefinition, SriovDefinition, VfVgpuDefinition};

/// What the planner and placement read about a host: what it has, what is defined, and what
/// guests hold. [`Manager::host_state`](crate::Manager::host_state) reads it from a host; tests
/// and benchmarks build one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostState {
    /// The GPUs, their VFs, types and vGPUs.
    pub inventory: Inventory,
    /// The persistent definitions.
    pub definitions: DefinitionSet,
    /// vGPUs a guest holds, with what holds them in words (`process 4242 (qemu-system-x86)`,
    /// `libvirt domain web-1`): never taken away by a plan.
    pub holds: BTreeMap<VgpuHandle, String>,
    /// Plain SR-IOV GPUs whose driver provisions each VF's local memory with a quota one can
    /// set (Intel's SR-IOV `i915` and `xe`: `drm/card<N>/iov/`), with the local memory it can
    /// give the VFs in MiB: their quotas and what is left
    /// (`iov/pf/gt/available/lmem_max_quota`). A GPU not here takes no quotas.
    pub local_memory_mib: BTreeMap<PciAddress, u64>,
    /// The vGPU scheduler of each NVIDIA GPU, for selections that set one
    /// ([`HostState::read_schedulers`] fills it from NVML); a GPU missing here has an unknown
    /// scheduler, and a selection that sets its scheduler is refused.
    pub schedulers: BTreeMap<PciAddress, Fact<SchedulerState>>,
}

impl HostState {
    /// Reads the vGPU scheduler of every NVIDIA GPU of the inventory from `nvml` (each with the
    /// reason when it cannot be read).
    pub fn read_schedulers(&mut self, nvml: &Nvml) {
        for gpu in &self.inventory.gpus {
            if gpu.vendor_id == Some(NVIDIA_VENDOR_ID) {
                self.schedulers
                    .insert(gpu.address, nvml.scheduler_state(gpu.address));
            }
        }
    }
}

/// Every persistent definition of a host, as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DefinitionSet {
    /// Mediated devices (mdevctl's store).
    pub mdevs: Vec<MdevDefinition>,
    /// NVIDIA vendor-VFIO vGPUs.
    pub vf_vgpus: Vec<VfVgpuDefinition>,
    /// Driver bindings (plain VFs given to guests).
    pub bindings: Vec<BindingDefinition>,
    /// VF counts.
    pub sriov: Vec<SriovDefinition>,
}
