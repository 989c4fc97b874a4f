//! What NVML says about a host, as plain serialisable data.
//!
//! Every fact NVML may not give is a [`Fact`]: the value, or [`Unavailable`] with the reason
//! (an older driver without the function, a GPU that does not support it, a driver that is not
//! initialised). Field names follow NVIDIA's NVML API Reference Guide ("vGPU Management",
//! "Multi Instance GPU Management", "Device Queries"); units are in the field names.
//!
//! The JSON shape of a fact is `{"value": …}` or
//! `{"unavailable": {"cause": "not-supported", "reason": "…"}}`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::pci::PciAddress;

pub mod matching;

/// Whether NVML was used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlStatus {
    /// True when NVML was loaded and initialised.
    pub loaded: bool,
    /// The driver version NVML reports.
    pub driver_version: Option<String>,
    /// Why NVML is not used, when it is not.
    pub reason: Option<String>,
    /// The library that was loaded, or tried: a file name the dynamic loader looks up, or
    /// a path. `None` when none was tried.
    pub library: Option<String>,
}

/// A fact read from NVML: its value, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fact<T> {
    /// NVML answered.
    Value(T),
    /// NVML could not answer, and why.
    Unavailable(Unavailable),
}

/// Why a fact is not known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    /// The category of the reason, for programs.
    pub cause: Cause,
    /// The reason in words, naming the NVML function that failed.
    pub reason: String,
}

/// The category of an [`Unavailable`] fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// NVML is not loaded (no driver, another host root, built without NVML): see
    /// [`NvmlStatus::reason`].
    NotLoaded,
    /// This driver's NVML lacks the function: the library does not export it, or it answers
    /// `NVML_ERROR_FUNCTION_NOT_FOUND` (an older driver).
    FunctionNotFound,
    /// The GPU or its mode does not support it (`NVML_ERROR_NOT_SUPPORTED`).
    NotSupported,
    /// NVML is not initialised (`NVML_ERROR_UNINITIALIZED`).
    Uninitialized,
    /// Not permitted (`NVML_ERROR_NO_PERMISSION`): run as root.
    NoPermission,
    /// The object asked about is gone (`NVML_ERROR_NOT_FOUND`, `NVML_ERROR_GPU_IS_LOST`).
    NotFound,
    /// Something runs on what was to change (`NVML_ERROR_IN_USE`): a vGPU on a GPU instance,
    /// GPU instances on a GPU whose MIG mode was to change.
    InUse,
    /// What was asked does not fit in what is free (`NVML_ERROR_INSUFFICIENT_RESOURCES`): a
    /// GPU instance over another, or past its profile's count.
    InsufficientResources,
    /// NVML answered with something this library does not understand.
    Unexpected,
    /// Any other NVML error.
    Error,
}

impl<T> Fact<T> {
    /// The value, if NVML gave it.
    pub fn value(&self) -> Option<&T> {
        match self {
            Fact::Value(value) => Some(value),
            Fact::Unavailable(_) => None,
        }
    }

    /// The value, consuming the fact.
    pub fn into_value(self) -> Option<T> {
        match self {
            Fact::Value(value) => Some(value),
            Fact::Unavailable(_) => None,
        }
    }

    /// Why the fact is unavailable, if it is.
    pub fn unavailable(&self) -> Option<&Unavailable> {
        match self {
            Fact::Value(_) => None,
            Fact::Unavailable(why) => Some(why),
        }
    }

    /// The fact with `f` applied to its value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Fact<U> {
        match self {
            Fact::Value(value) => Fact::Value(f(value)),
            Fact::Unavailable(why) => Fact::Unavailable(why),
        }
    }

    /// The fact as a `Result`.
    pub fn as_result(&self) -> Result<&T, &Unavailable> {
        match self {
            Fact::Value(value) => Ok(value),
            Fact::Unavailable(why) => Err(why),
        }
    }

    /// An unavailable fact.
    pub fn unknown(cause: Cause, reason: impl Into<String>) -> Self {
        Fact::Unavailable(Unavailable {
            cause,
            reason: reason.into(),
        })
    }
}

/// What NVML says about the host: its status and every GPU it manages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlHost {
    /// Whether NVML was loaded, the driver version, and why not.
    pub status: NvmlStatus,
    /// The NVML library version (`nvmlSystemGetNVMLVersion`).
    pub nvml_version: Fact<String>,
    /// The GPUs NVML manages, in NVML's index order. Empty when NVML is not loaded; then
    /// `device_count` says why.
    pub gpus: Vec<NvmlGpu>,
    /// How many GPUs NVML counts (`nvmlDeviceGetCount_v2`).
    pub device_count: Fact<u32>,
    /// NVML devices that could not be read far enough to know their PCI address, with why.
    pub unreadable: Vec<Unavailable>,
}

/// One physical GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlGpu {
    /// Its PCI address (from NVML's PCI bus id, `nvmlDeviceGetPciInfo_v3`), the key that
    /// matches it to discovery's [`Gpu`](crate::Gpu).
    pub address: PciAddress,
    /// NVML's index of the device (`nvmlDeviceGetHandleByIndex_v2`).
    pub index: u32,
    /// The product name (`nvmlDeviceGetName`), e.g. `NVIDIA H200`.
    pub name: Fact<String>,
    /// The GPU's UUID (`nvmlDeviceGetUUID`), e.g. `GPU-5f1c…`.
    pub uuid: Fact<String>,
    /// How the driver virtualises the GPU (`nvmlDeviceGetVirtualizationMode`).
    pub virtualization_mode: Fact<VirtualizationMode>,
    /// Whether the host's vGPU manager runs the GPU through SR-IOV VFs
    /// (`nvmlDeviceGetHostVgpuMode`).
    pub host_vgpu_mode: Fact<HostVgpuMode>,
    /// MIG mode now and after the next GPU reset (`nvmlDeviceGetMigMode`).
    pub mig_mode: Fact<MigMode>,
    /// The GPU instances that exist (`nvmlDeviceGetGpuInstances` for every profile the GPU
    /// has); unavailable when MIG mode is off (`NOT_SUPPORTED`).
    pub gpu_instances: Fact<Vec<GpuInstance>>,
    /// ECC mode now and after the next reboot (`nvmlDeviceGetEccMode`).
    pub ecc_mode: Fact<EccMode>,
    /// Whether confidential computing is on. NVML reports it for the whole system
    /// (`nvmlSystemGetConfComputeSettings`), so every GPU of a host shows the same.
    pub confidential_computing: Fact<bool>,
    /// The vGPU scheduler's policy and parameters (`nvmlDeviceGetVgpuSchedulerState`,
    /// `nvmlDeviceGetVgpuSchedulerLog` for the time slice).
    pub scheduler: Fact<SchedulerState>,
    /// What the scheduler can be set to (`nvmlDeviceGetVgpuSchedulerCapabilities`).
    pub scheduler_capabilities: Fact<SchedulerCapabilities>,
    /// Every vGPU type the GPU supports (`nvmlDeviceGetSupportedVgpus`), by id.
    pub supported_types: Fact<Vec<NvmlVgpuType>>,
    /// The ids of the types that can be created now (`nvmlDeviceGetCreatableVgpus`).
    pub creatable_type_ids: Fact<Vec<u32>>,
    /// The vGPUs running on it (`nvmlDeviceGetActiveVgpus`).
    pub vgpus: Fact<Vec<NvmlVgpu>>,
    /// Its size mode for time-sliced vGPUs (`nvmlDeviceGetVgpuHeterogeneousMode`);
    /// `NOT_SUPPORTED` on a GPU without mixed-size mode.
    pub size_mode: Fact<crate::sizes::SizeMode>,
}

/// `nvmlGpuVirtualizationMode_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VirtualizationMode {
    /// Bare metal: no virtualisation.
    None,
    /// Passed through to a guest whole.
    Passthrough,
    /// A vGPU, seen from inside a guest.
    Vgpu,
    /// A host running NVIDIA's vGPU manager: the GPU hosts vGPUs.
    HostVgpu,
    /// A host in vSGA mode.
    HostVsga,
}

/// `nvmlHostVgpuMode_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostVgpuMode {
    /// vGPUs are made on the PF (mdev on the PF, up to Turing).
    NonSriov,
    /// vGPUs are made on SR-IOV VFs (Ampere and later).
    Sriov,
}

/// MIG mode (`nvmlDeviceGetMigMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct MigMode {
    /// Whether MIG mode is on now.
    pub current: bool,
    /// Whether it will be on after the next GPU reset.
    pub pending: bool,
}

/// ECC mode (`nvmlDeviceGetEccMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct EccMode {
    /// Whether ECC is on now.
    pub current: bool,
    /// Whether it will be on after the next reboot.
    pub pending: bool,
}

/// A GPU instance: a MIG partition a MIG-backed vGPU runs on (`nvmlGpuInstanceGetInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInstance {
    /// Its id, as `nvidia-smi mig -lgi` shows it and as a VF's `nvidia/gpu_instance_id`
    /// takes it.
    pub id: u32,
    /// Its profile's id (`nvmlGpuInstanceProfileInfo_t.id`, `nvidia-smi mig -lgip`'s `ID`).
    pub profile_id: u32,
    /// Its profile's name, e.g. `1g.18gb` (`nvmlGpuInstanceProfileInfo_v2_t.name`, without
    /// the `MIG ` prefix the driver puts in front).
    pub profile: Fact<String>,
    /// Compute slices of its profile.
    pub slices: Fact<u32>,
    /// Memory of its profile in MiB.
    pub memory_mib: Fact<u64>,
    /// First memory slice it occupies.
    pub placement_start: u32,
    /// Memory slices it occupies.
    pub placement_size: u32,
}

/// A vGPU type of one GPU, as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlVgpuType {
    /// The type id (`nvmlVgpuTypeId_t`): the number sysfs lists (`nvidia-<id>` for mdev
    /// types, the bare id in `creatable_vgpu_types`).
    pub id: u32,
    /// Its name (`nvmlVgpuTypeGetName`), e.g. `NVIDIA H200X-1-18C`.
    pub name: Fact<String>,
    /// Its class (`nvmlVgpuTypeGetClass`), e.g. `Compute`, `Quadro`, `NVS`.
    pub class: Fact<String>,
    /// Frame buffer of each vGPU of the type, in MiB (`nvmlVgpuTypeGetFramebufferSize`).
    pub framebuffer_mib: Fact<u64>,
    /// vGPUs of the type one GPU holds at most (`nvmlVgpuTypeGetMaxInstances`).
    pub max_instances: Fact<u32>,
    /// vGPUs of the type one VM may have (`nvmlVgpuTypeGetMaxInstancesPerVm`).
    pub max_instances_per_vm: Fact<u32>,
    /// For a MIG-backed type, the id of the GPU-instance profile it needs
    /// (`nvmlVgpuTypeGetGpuInstanceProfileId`); `None` for a time-sliced type.
    pub gpu_instance_profile_id: Fact<Option<u32>>,
    /// Where vGPUs of the type can be placed (`nvmlDeviceGetVgpuTypeSupportedPlacements`):
    /// unavailable on drivers and GPUs without placements (before vGPU 17, or not in
    /// mixed-size mode).
    pub placements: Fact<Placements>,
}

/// The placements of a vGPU type (`nvmlVgpuPlacementList_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placements {
    /// How many placement slots one vGPU of the type occupies.
    pub size: u32,
    /// The placement ids a vGPU of the type can start at.
    pub ids: Vec<u32>,
}

/// A vGPU that runs on a GPU (`nvmlVgpuInstance_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlVgpu {
    /// NVML's id of the vGPU instance.
    pub instance: u32,
    /// Its type id (`nvmlVgpuInstanceGetType`).
    pub type_id: Fact<u32>,
    /// Its UUID (`nvmlVgpuInstanceGetUUID`): NVML's own name for the vGPU, not the mediated
    /// device's.
    pub uuid: Fact<String>,
    /// The UUID of the mediated device it runs as (`nvmlVgpuInstanceGetMdevUUID`): the key
    /// that matches it exactly to discovery's [`Vgpu`](crate::Vgpu) of that UUID. NVML gives
    /// it only on KVM (`NVML_ERROR_NOT_SUPPORTED` on other hypervisors); a text that is not a
    /// UUID is [`Cause::Unexpected`].
    ///
    /// A vGPU on NVIDIA's vendor-specific VFIO interface has no mediated device, and no NVML
    /// function names the host VF it runs on (NVML API Reference Guide, "vGPU Management", up
    /// to the API version 13 of CUDA 13): `nvmlVgpuInstanceGetGpuPciId` is the PCI address the
    /// guest sees, `nvmlVgpuInstanceGetPlacementId` a placement on the GPU. Such a vGPU is
    /// matched by its VM and type only
    /// (`vgpu-core`'s `usage_from_nvml`).
    pub mdev_uuid: Fact<Uuid>,
    /// The VM it belongs to, as the driver reports it (`nvmlVgpuInstanceGetVmID`).
    pub vm_id: Fact<VmId>,
    /// Frame buffer in use by the guest, in MiB (`nvmlVgpuInstanceGetFbUsage`).
    pub framebuffer_used_mib: Fact<u64>,
    /// Frame buffer the vGPU was given, in MiB: its type's.
    pub framebuffer_mib: Fact<u64>,
    /// Its encoder sessions (`nvmlVgpuInstanceGetEncoderStats`).
    pub encoder: Fact<EncoderStats>,
    /// The GPU instance it runs on, for a MIG-backed vGPU (`nvmlVgpuInstanceGetGpuInstanceId`);
    /// `None` for a time-sliced one.
    pub gpu_instance_id: Fact<Option<u32>>,
    /// Its most recent utilisation sample (`nvmlDeviceGetVgpuUtilization`); `None` when the
    /// driver has taken none yet.
    pub utilization: Fact<Option<UtilizationSample>>,
}

/// The VM a vGPU belongs to (`nvmlVgpuVmIdType_t` and the id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "kebab-case")]
pub enum VmId {
    /// A domain id.
    Domain(String),
    /// A VM UUID (KVM: the libvirt domain's UUID).
    Uuid(String),
}

/// Encoder statistics of one vGPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EncoderStats {
    /// Active encoder sessions.
    pub sessions: u32,
    /// Trailing average frames per second over the sessions.
    pub average_fps: u32,
    /// Average encode latency, in microseconds.
    pub average_latency_us: u32,
}

/// One utilisation sample of one vGPU (`nvmlVgpuInstanceUtilizationSample_t`), in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UtilizationSample {
    /// NVML's id of the vGPU instance it is about.
    pub instance: u32,
    /// When it was taken, in microseconds since the epoch (CPU time).
    pub timestamp_us: u64,
    /// Streaming multiprocessor (3D/compute) utilisation.
    pub sm_percent: u32,
    /// Frame buffer memory controller utilisation.
    pub memory_percent: u32,
    /// Video encoder utilisation.
    pub encoder_percent: u32,
    /// Video decoder utilisation.
    pub decoder_percent: u32,
}

/// A vGPU scheduler policy (NVIDIA Virtual GPU Software User Guide, "Changing Scheduling
/// Behavior for Time-Sliced vGPUs").
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerPolicy {
    /// Round robin over the vGPUs with work (`NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT`).
    BestEffort,
    /// An equal share of the GPU to each running vGPU (`…_EQUAL_SHARE`).
    EqualShare,
    /// A fixed share to each vGPU, by the type's maximum instances (`…_FIXED_SHARE`).
    FixedShare,
}

/// Nanoseconds in a millisecond.
pub const NS_PER_MS: u64 = 1_000_000;

/// A duration in nanoseconds (NVML's time slices), in milliseconds as people write them
/// (`2`, `0.5`).
pub fn ns_as_ms(ns: u64) -> String {
    let whole = ns / NS_PER_MS;
    let frac = ns % NS_PER_MS;
    if frac == 0 {
        return whole.to_string();
    }
    let text = format!("{whole}.{frac:06}");
    text.trim_end_matches('0').to_owned()
}

impl SchedulerPolicy {
    /// Every policy, in NVML's numbering order.
    pub const ALL: [SchedulerPolicy; 3] = [
        SchedulerPolicy::BestEffort,
        SchedulerPolicy::EqualShare,
        SchedulerPolicy::FixedShare,
    ];

    /// The policy's name on the command line and in JSON (`best-effort`).
    pub fn name(self) -> &'static str {
        match self {
            SchedulerPolicy::BestEffort => "best-effort",
            SchedulerPolicy::EqualShare => "equal-share",
            SchedulerPolicy::FixedShare => "fixed-share",
        }
    }

    /// Whether the policy takes a time-slice length (equal and fixed share do; best effort
    /// takes a frequency only in adaptive round-robin mode).
    pub fn takes_timeslice(self) -> bool {
        matches!(
            self,
            SchedulerPolicy::EqualShare | SchedulerPolicy::FixedShare
        )
    }
}

impl std::fmt::Display for SchedulerPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The vGPU scheduler's state on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedulerState {
    /// The policy; `None` when NVML reports one this library does not know (`raw_policy`).
    pub policy: Option<SchedulerPolicy>,
    /// NVML's number for the policy (`NVML_VGPU_SCHEDULER_POLICY_*`).
    pub raw_policy: u32,
    /// Adaptive round-robin mode (`NVML_VGPU_SCHEDULER_ARR_*`).
    pub arr_mode: ArrMode,
    /// The time slice of each vGPU, in nanoseconds, as the scheduler log reports it
    /// (`nvmlVgpuSchedulerLog_t.schedulerParams`); `0` means the driver's default.
    pub timeslice_ns: Fact<u32>,
}

/// Adaptive round-robin mode of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrMode {
    /// The driver's default.
    Default,
    /// Off.
    Disabled,
    /// On.
    Enabled,
    /// A value this library does not know.
    Other(u32),
}

/// What the scheduler of one GPU can be set to (`nvmlVgpuSchedulerCapabilities_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchedulerCapabilities {
    /// The policies the GPU supports.
    pub policies: Vec<SchedulerPolicy>,
    /// Whether adaptive round-robin mode is supported.
    pub arr_supported: bool,
    /// The shortest time slice, in nanoseconds.
    pub min_timeslice_ns: u32,
    /// The longest time slice, in nanoseconds.
    pub max_timeslice_ns: u32,
}

impl NvmlHost {
    /// The GPU at `address`, if NVML manages it.
    pub fn gpu(&self, address: PciAddress) -> Option<&NvmlGpu> {
        self.gpus.iter().find(|g| g.address == address)
    }
}

/// MIG mode and GPU instances of one GPU, as NVML and sysfs report them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MigFacts {
    /// Whether MIG mode is on now.
    pub mig_on: bool,
    /// Whether a MIG-mode change waits for a GPU reset (NVML's pending mode is not the
    /// current one).
    pub reset_pending: bool,
    /// Every GPU instance: its id and profile name (`1g.18gb`).
    pub instances: Vec<(u32, String)>,
    /// Where each GPU instance sits, by id.
    pub placements: BTreeMap<u32, GpuInstancePlacement>,
    /// The GPU-instance profiles the GPU has, by name; NVML lists them while MIG mode is on.
    pub profiles: BTreeMap<String, MigProfile>,
    /// The GPU instances running vGPUs use.
    pub used: BTreeSet<u32>,
}

/// A GPU-instance profile of a GPU, as `nvidia-smi mig -lgip` and `-lgipp` show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MigProfile {
    /// Its id (`nvmlGpuInstanceProfileInfo_v2_t.id`).
    pub id: u32,
    /// Every placement an instance of it can take, taken or not.
    pub placements: Vec<GpuInstancePlacement>,
}

/// Where a GPU instance sits on its GPU, in memory slices (`nvmlGpuInstancePlacement_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct GpuInstancePlacement {
    /// Its first memory slice.
    pub start: u32,
    /// How many memory slices it spans.
    pub size: u32,
}

/// A scheduler state to set: a policy, and a time slice for the policies that take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerRequest {
    /// The policy.
    pub policy: SchedulerPolicy,
    /// The time slice of each vGPU in milliseconds (equal and fixed share only); `None`
    /// keeps the driver's default.
    #[serde(default)]
    pub timeslice_ms: Option<u32>,
}

/// Whether `state` already is what `request` asks.
pub fn already(state: &SchedulerState, request: SchedulerRequest) -> bool {
    if state.policy != Some(request.policy) {
        return false;
    }
    match request.timeslice_ms {
        None => true,
        Some(ms) => {
            state.timeslice_ns.value().copied().map(u64::from) == Some(u64::from(ms) * 1_000_000)
        }
    }
}

#[cfg(test)]
mod ns_tests {
    use super::ns_as_ms;

    #[test]
    fn ns_as_ms_half_millisecond_is_a_decimal() {
        assert_eq!(ns_as_ms(500_000), "0.5");
    }

    #[test]
    fn ns_as_ms_whole_milliseconds_have_no_point() {
        assert_eq!(ns_as_ms(2_000_000), "2");
    }
}
