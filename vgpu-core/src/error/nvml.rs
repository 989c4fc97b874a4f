//! What can go wrong when a change needs NVML: it is not there, it refused, or the GPU's
//! state (MIG mode, GPU instances, placements, running vGPUs) does not allow the change.

use crate::error::ErrorKind;
use crate::model::nvml::{Cause, SchedulerPolicy, Unavailable};
use crate::model::pci::PciAddress;

/// A change that needs NVML cannot be made (part of [`Error::Nvml`](crate::Error::Nvml)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NvmlError {
    /// NVML is not loaded, so what the change needs cannot be known or done.
    #[error("NVML is needed to {needed_for}, but it is not loaded: {reason}")]
    NotLoaded {
        /// What NVML was needed for.
        needed_for: String,
        /// Why it is not loaded.
        reason: String,
    },
    /// An NVML call about a GPU failed; the reason names the function and NVML's answer.
    #[error("{gpu}: {}", why.reason)]
    Call {
        /// The GPU.
        gpu: PciAddress,
        /// What NVML answered.
        why: Unavailable,
    },
    /// A MIG-backed vGPU type needs MIG mode, which is off on the GPU.
    #[error(
        "vGPU type {type_name} is MIG-backed (GPU-instance profile {profile}), but MIG mode is \
         off on {gpu}"
    )]
    MigModeOff {
        /// The GPU.
        gpu: PciAddress,
        /// The type asked for.
        type_name: String,
        /// The GPU-instance profile it needs, e.g. `1g.18gb`.
        profile: String,
    },
    /// No GPU instance of the profile a MIG-backed type needs is free.
    #[error(
        "no free GPU instance of profile {profile} on {gpu} for vGPU type {type_name} \
         (instances of that profile: {}; in use: {})",
        list(existing),
        list(used)
    )]
    NoFreeGpuInstance {
        /// The GPU.
        gpu: PciAddress,
        /// The type asked for.
        type_name: String,
        /// The GPU-instance profile it needs.
        profile: String,
        /// The ids of the GPU instances of that profile.
        existing: Vec<u32>,
        /// Those of them a vGPU uses.
        used: Vec<u32>,
    },
    /// The GPU's scheduler does not offer the policy.
    #[error(
        "the vGPU scheduler of {gpu} does not support {policy} (it supports: {})",
        policies(supported)
    )]
    PolicyNotSupported {
        /// The GPU.
        gpu: PciAddress,
        /// The policy asked for.
        policy: SchedulerPolicy,
        /// The policies it supports.
        supported: Vec<SchedulerPolicy>,
    },
    /// The time slice cannot be used: the policy takes none, or it is out of the GPU's range.
    #[error("time slice {asked_ms} ms for {policy} on {gpu}: {reason}")]
    BadTimeslice {
        /// The GPU.
        gpu: PciAddress,
        /// The policy asked for.
        policy: SchedulerPolicy,
        /// The time slice asked for, in milliseconds.
        asked_ms: u32,
        /// Why it cannot be used.
        reason: String,
    },
    /// The scheduler is set only while no vGPU runs on the GPU (NVML API Reference,
    /// `nvmlDeviceSetVgpuSchedulerState`: "allowed to set only when no VM is running").
    #[error(
        "the vGPU scheduler of {gpu} cannot change while vGPUs run on it ({})",
        running.join(", ")
    )]
    VgpusRunning {
        /// The GPU.
        gpu: PciAddress,
        /// The vGPUs running, by handle or NVML's description.
        running: Vec<String>,
    },
    /// The size mode changes only while the GPU holds no vGPU (NVML API Reference,
    /// `nvmlDeviceSetVgpuHeterogeneousMode`).
    #[error(
        "the size mode of {gpu} cannot change while it holds vGPUs ({})",
        vgpus.join(", ")
    )]
    SizeModeInUse {
        /// The GPU.
        gpu: PciAddress,
        /// The vGPUs on it, by handle.
        vgpus: Vec<String>,
    },
    /// Mixed-size mode and what it does not go with on one GPU: MIG mode, or the fixed-share
    /// scheduler (NVIDIA Virtual GPU Software User Guide, "Mixed-Size Mode").
    #[error("mixed-size mode on {gpu} does not go with {what}: {remedy}")]
    MixedSizeExcludes {
        /// The GPU.
        gpu: PciAddress,
        /// What is there, or asked for, in words.
        what: String,
        /// What to do first.
        remedy: String,
    },
    /// No placement of the GPU-instance profile starts at the memory slice asked for.
    #[error(
        "GPU-instance profile {profile_id} on {gpu} has no placement at memory slice {start} \
         (its placements start at: {})",
        list(starts)
    )]
    NoSuchPlacement {
        /// The GPU.
        gpu: PciAddress,
        /// The profile's id.
        profile_id: u32,
        /// The memory slice asked for.
        start: u32,
        /// Where the profile's placements start.
        starts: Vec<u32>,
    },
    /// NVML runs no vGPU that is the one named, so it has no migration metadata for it.
    #[error("{vgpu} on {gpu}: NVML runs no vGPU that is it: {reason}")]
    NotRunning {
        /// The vGPU, as the domain XML names it.
        vgpu: String,
        /// Its GPU.
        gpu: PciAddress,
        /// Why NVML's vGPUs do not name it.
        reason: String,
    },
    /// Migration metadata does not go with the domain it is checked against.
    #[error("migration metadata: {reason}")]
    BadMetadata {
        /// What does not fit.
        reason: String,
    },
    /// What was asked applies to NVIDIA GPUs only.
    #[error("{gpu} is not an NVIDIA GPU: {what} applies to NVIDIA GPUs only")]
    NotNvidia {
        /// The GPU.
        gpu: PciAddress,
        /// What was asked.
        what: String,
    },
}

fn list(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn policies(list: &[SchedulerPolicy]) -> String {
    if list.is_empty() {
        return "none".to_owned();
    }
    list.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
}

impl NvmlError {
    /// The category a caller acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            NvmlError::NotLoaded { .. }
            | NvmlError::MigModeOff { .. }
            | NvmlError::MixedSizeExcludes { .. } => ErrorKind::Conflict,
            NvmlError::NoFreeGpuInstance { .. } => ErrorKind::NoCapacity,
            NvmlError::VgpusRunning { .. } | NvmlError::SizeModeInUse { .. } => ErrorKind::Busy,
            NvmlError::NotRunning { .. } => ErrorKind::NotFound,
            NvmlError::BadMetadata { .. } => ErrorKind::BadInput,
            NvmlError::PolicyNotSupported { .. }
            | NvmlError::BadTimeslice { .. }
            | NvmlError::NotNvidia { .. }
            | NvmlError::NoSuchPlacement { .. } => ErrorKind::BadInput,
            NvmlError::Call { why, .. } => match why.cause {
                Cause::NotSupported | Cause::FunctionNotFound => ErrorKind::BadInput,
                Cause::NoPermission => ErrorKind::Permission,
                Cause::NotFound => ErrorKind::NotFound,
                Cause::InUse => ErrorKind::Busy,
                Cause::InsufficientResources => ErrorKind::NoCapacity,
                Cause::NotLoaded => ErrorKind::Conflict,
                Cause::Uninitialized | Cause::Unexpected | Cause::Error => ErrorKind::HostFault,
            },
        }
    }
}
