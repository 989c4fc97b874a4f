//! What a plan is: per GPU, the steps to take or the reasons they cannot be taken. Plain data,
//! serialisable (`vgpuctl plan --json`); [`crate::planner`] makes it, the manager carries it out.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::desired::Location;
use crate::model::definition::Start;
use crate::model::is_passthrough_driver;
use crate::model::nvml::SchedulerPolicy;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, VgpuHandle};

/// What a config asks of the host, GPU by GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The config's name.
    pub config: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Every GPU a selection matched, by address.
    pub gpus: Vec<GpuPlan>,
    /// Selections that matched no GPU.
    pub unmatched: Vec<Unmatched>,
}

/// What the plan does on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuPlan {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its model, from the PCI database.
    pub model: Option<String>,
    /// Its interface.
    pub backend: Backend,
    /// The selection that chose it, in words.
    pub selection: String,
    /// Where that selection is in the file.
    pub at: Location,
    /// The vGPUs it should hold.
    pub want: Vec<Want>,
    /// For a plain SR-IOV GPU, the VFs it should have.
    pub vfs: Option<u32>,
    /// For a plain SR-IOV GPU asked for sizes, the local memory each VF should have, in MiB,
    /// in VF order (`vf1` first); empty when only a count is asked for.
    pub vf_memory_mib: Vec<u64>,
    /// vGPUs that stay as they are (or only get their definition fixed).
    pub keep: Vec<VgpuHandle>,
    /// The changes, in order; none when the GPU matches or is refused.
    pub steps: Vec<Step>,
    /// Why the GPU cannot be brought to the config; empty when it can.
    pub refusals: Vec<Refused>,
    /// The tenant the entry's vGPUs are for; `apply` asks the tenant policy before it makes
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// What the GPU held when planned, checked again before its steps run.
    #[serde(skip)]
    pub before: Before,
}

/// The state a GPU's steps were planned from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Before {
    /// Its running vGPUs.
    pub vgpus: BTreeSet<VgpuHandle>,
    /// Its enabled VFs.
    pub num_vfs: u32,
}

impl Before {
    /// What `gpu` holds now.
    pub fn of(gpu: &Gpu) -> Before {
        let plain = gpu.backend == Backend::Sriov && gpu.vendor_id != Some(NVIDIA_VENDOR_ID);
        let vgpus = if plain {
            gpu.vfs
                .iter()
                .filter(|vf| vf.driver.as_deref().is_some_and(is_passthrough_driver))
                .map(|vf| VgpuHandle::Vf(vf.address))
                .collect()
        } else {
            gpu.vgpus.iter().map(|v| v.id).collect()
        };
        Before {
            vgpus,
            num_vfs: gpu.sriov.as_ref().map_or(0, |s| s.num_vfs),
        }
    }
}

/// vGPUs of one type a GPU should hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Want {
    /// The type's id, when the host lists it now.
    pub type_id: Option<String>,
    /// The type's name.
    pub type_name: Option<String>,
    /// Frame buffer of each, in MiB.
    pub framebuffer_mib: Option<u64>,
    /// How many.
    pub count: u32,
}

/// One change to one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Step {
    /// Set the VF count (enable, disable or change), and define it; `from == to` only defines it.
    Vfs {
        /// The count now.
        from: u32,
        /// The count wanted.
        to: u32,
    },
    /// Stop a vGPU and remove its definitions.
    Destroy {
        /// The vGPU.
        id: VgpuHandle,
        /// Its type id.
        type_id: String,
        /// Its type name, when known.
        type_name: Option<String>,
    },
    /// Remove the definitions of a vGPU (it is not running, or gets a new definition next).
    Undefine {
        /// The vGPU.
        id: VgpuHandle,
    },
    /// Start a defined vGPU that is not running.
    Start {
        /// The vGPU.
        id: VgpuHandle,
    },
    /// Define a running vGPU.
    Define {
        /// The vGPU.
        id: VgpuHandle,
        /// When it starts.
        start: Start,
    },
    /// Set the local-memory quota of one VF of a plain SR-IOV GPU (Intel's SR-IOV drivers:
    /// `drm/card<N>/iov/vf<M>/gt*/lmem_quota`), after the VF count and before any VF is given
    /// to a guest. The VF is taken from its host driver for the write and given back after.
    Quota {
        /// The VF's number, `M` in `vf<M>` (from 1, in `virtfn` order).
        vf: u32,
        /// Its address, where the SR-IOV capability gives it.
        address: Option<PciAddress>,
        /// Its quota now, in MiB; `None` for a VF this plan enables (the driver gives it an
        /// equal share of local memory).
        from_mib: Option<u64>,
        /// The quota wanted, in MiB.
        to_mib: u64,
    },
    /// Create and define one vGPU.
    Create {
        /// The type's id, when the host lists it now.
        type_id: Option<String>,
        /// The type's name, when known.
        type_name: Option<String>,
        /// When it starts.
        start: Start,
        /// Its placement id on a GPU in mixed-size mode, as the plan placed the GPU's vGPUs
        /// ([`crate::placement::fit()`]); `None` in equal-size mode.
        #[serde(skip_serializing_if = "Option::is_none")]
        placement: Option<u32>,
    },
    /// Destroy a GPU instance that no vGPU uses (through NVML), after the vGPUs on it.
    DestroyGpuInstance {
        /// Its id.
        id: u32,
        /// Its profile (`1g.18gb`).
        profile: String,
        /// Its first memory slice.
        start: u32,
    },
    /// Turn MIG mode on or off (through NVML), while the GPU has no GPU instance.
    MigMode {
        /// On or off.
        on: bool,
    },
    /// Make a GPU instance (through NVML) at a start slice, and define it, before the
    /// MIG-backed vGPUs that need it.
    CreateGpuInstance {
        /// Its profile (`1g.18gb`).
        profile: String,
        /// The profile's id, when NVML lists the GPU's profiles now (MIG mode on).
        profile_id: Option<u32>,
        /// Its first memory slice, chosen so that the whole geometry fits; `None` while MIG
        /// mode is off (NVML gives placements only then): `apply` chooses it once MIG is on.
        start: Option<u32>,
    },
    /// Set the GPU's vGPU scheduler (through NVML, while no vGPU runs on it).
    Scheduler {
        /// The policy.
        policy: SchedulerPolicy,
        /// The time slice in milliseconds; `None` for the driver's default.
        timeslice_ms: Option<u32>,
    },
    /// Set an NVIDIA GPU's size mode (through NVML), after the steps that take its vGPUs away
    /// and before those that make them: NVML sets the mode only while the GPU has none.
    SizeMode {
        /// The mode.
        mode: SizeMode,
    },
}

impl Step {
    /// The type to create, as `create` takes it: the id when known, else the name.
    pub fn wanted_type(&self) -> Option<&str> {
        match self {
            Step::Create {
                type_id, type_name, ..
            } => type_id.as_deref().or(type_name.as_deref()),
            _ => None,
        }
    }
}

/// A reason a GPU cannot be brought to the config, with where in the file it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The reason.
    #[serde(flatten)]
    pub refusal: Refusal,
    /// The reason in words.
    pub message: String,
    /// The part of the file that asks for what cannot be done, if one does.
    pub at: Option<Location>,
}

impl Refused {
    pub(crate) fn new(refusal: Refusal, at: Option<Location>) -> Self {
        Refused {
            message: refusal.to_string(),
            refusal,
            at,
        }
    }
}

/// Why a GPU cannot be brought to the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Refusal {
    /// No type of that frame buffer in that series (and `round_up` is off, or none is larger).
    NoSuchSize {
        /// The size asked for, in MiB.
        framebuffer_mib: u64,
        /// The series, where the GPU's types have one.
        series: Option<char>,
        /// The sizes it offers in that series, in MiB.
        offered_mib: Vec<u64>,
    },
    /// The GPU offers no type by that name.
    UnknownType {
        /// The name asked for.
        wanted: String,
        /// What it offers.
        offered: Vec<String>,
    },
    /// Several types or sizes on a GPU that holds one time-sliced type at a time, or
    /// time-sliced and MIG-backed types together (NVIDIA's mixing rule).
    OneTypeOnly {
        /// The types asked for.
        wanted: Vec<String>,
    },
    /// More MIG-backed vGPUs of one GPU-instance profile than the GPU has instances of it.
    GpuInstances {
        /// The profile (`1g.18gb`).
        profile: String,
        /// vGPUs of types on that profile asked for.
        asked: u32,
        /// GPU instances of that profile on the GPU.
        instances: u32,
    },
    /// A time-sliced type on a GPU that stays in MIG mode.
    MigOnTimeSliced {
        /// The type.
        type_name: String,
    },
    /// MIG-backed vGPUs on a GPU whose GPU instances are not known (no NVML), or whose MIG
    /// mode is off.
    GpuInstancesUnknown {
        /// The profile (`1g.18gb`).
        profile: String,
        /// Why they are not known, or not there.
        why: String,
    },
    /// A type the GPU may not offer: sysfs hides the types it cannot hold beside its vGPUs,
    /// the built-in catalog names it, and neither NVML nor a recorded offer confirms it. The
    /// plan would take vGPUs away before the driver could say.
    Unconfirmed {
        /// The type.
        type_name: String,
    },
    /// More vGPUs of a type than the GPU holds.
    TooMany {
        /// The type.
        type_name: String,
        /// How many were asked for.
        asked: u32,
        /// How many it holds at most.
        max: u32,
    },
    /// Types whose shares of the GPU add up to more than the whole.
    Oversubscribed {
        /// The types and counts asked for.
        wanted: Vec<String>,
    },
    /// More VFs than the GPU has.
    NotEnoughVfs {
        /// How many were needed.
        asked: u32,
        /// How many it has.
        vfs: u32,
    },
    /// "As many as fit" of a type whose per-GPU maximum is unknown.
    UnknownCapacity {
        /// The type.
        type_name: String,
    },
    /// A size on a plain SR-IOV GPU whose local memory is unknown (give a VF count instead).
    UnknownMemory,
    /// VF sizes that add up to more local memory than a plain SR-IOV GPU has.
    NotEnoughMemory {
        /// The sizes asked for, added up, in MiB.
        asked_mib: u64,
        /// The local memory it can give its VFs, in MiB.
        memory_mib: u64,
    },
    /// VF sizes other than the equal share on a plain SR-IOV GPU whose driver sets no per-VF
    /// local-memory quotas.
    NoQuotas {
        /// The VFs asked for.
        vfs: u32,
        /// The share of local memory each gets, in MiB.
        share_mib: u64,
    },
    /// A VF whose local-memory quota the plan would change is bound to a guest's driver or
    /// held open.
    QuotaInUse {
        /// The VF.
        vf: PciAddress,
        /// What holds it: its driver (`vfio-pci`), a process, a libvirt domain.
        by: String,
        /// Its quota now, in MiB.
        found_mib: u64,
        /// The quota wanted, in MiB.
        wanted_mib: u64,
    },
    /// A VF count for a GPU that does not offer plain SR-IOV VFs.
    NotSriov {
        /// Its interface.
        backend: Backend,
    },
    /// The GPU offers no vGPUs.
    NotVirtualizable {
        /// Its interface.
        backend: Backend,
    },
    /// A vGPU the plan would take away is held by a guest.
    Held {
        /// The vGPU.
        id: VgpuHandle,
        /// What holds it (a process, a libvirt domain and its state).
        by: String,
        /// What frees it, in words.
        frees: String,
    },
    /// Several selections of the config match the GPU.
    Overlap {
        /// Where they are.
        selections: Vec<Location>,
    },
    /// MIG geometry for a GPU whose MIG state NVML does not give (not loaded, or no MIG).
    MigUnknown {
        /// Why not.
        why: String,
    },
    /// A MIG-mode change the driver holds until the GPU is reset: `vgpuctl` never resets a
    /// GPU.
    MigResetPending,
    /// A GPU-instance profile the GPU does not have.
    MigProfileUnknown {
        /// The profile asked for.
        profile: String,
        /// The profiles it has.
        offered: Vec<String>,
    },
    /// A geometry whose instances do not fit the GPU's placements, in any order.
    MigNoFit {
        /// Why, in words.
        why: String,
    },
    /// A GPU instance the geometry removes while a vGPU the plan keeps runs on it.
    MigInUse {
        /// The instance's id.
        instance: u32,
        /// Its profile.
        profile: String,
    },
    /// A config that changes only MIG geometry (mig-parted's) would remove GPU instances
    /// that vGPUs run on.
    MigUnderVgpus {
        /// The config.
        config: String,
        /// The instances, by id, and their profile.
        instances: Vec<(u32, String)>,
        /// The vGPUs on instances of those profiles.
        vgpus: Vec<VgpuHandle>,
    },
    /// A scheduler for a GPU that is not NVIDIA's.
    SchedulerNotNvidia,
    /// A scheduler for a GPU whose scheduler state is not known (NVML not loaded, or not
    /// answering for it).
    SchedulerUnknown {
        /// Why it is not known.
        why: String,
    },
    /// A scheduler change on a GPU where the plan keeps vGPUs running: NVML changes the
    /// scheduler only while none runs.
    SchedulerBusy {
        /// The vGPUs that keep running.
        running: Vec<VgpuHandle>,
    },
    /// The fixed-share scheduler on a GPU the plan leaves in mixed-size mode, which does not
    /// take it (NVIDIA vGPU user guide, "Mixed-Size Mode").
    MixedFixedShare,
    /// MIG mode on a GPU the plan leaves in mixed-size mode: mixed-size mode takes
    /// time-sliced vGPUs only (NVIDIA vGPU user guide, "Mixed-Size Mode").
    MixedMig,
    /// A size mode asked of a GPU that has none to set: not an NVIDIA GPU with SR-IOV, or its
    /// placement region is not known.
    SizeModeNotHere {
        /// Why.
        why: String,
    },
    /// vGPUs asked in mixed-size mode that cannot all be placed on the empty GPU
    /// ([`crate::placement::fit()`]).
    PlacementsNoFit {
        /// The vGPUs asked: `2 x NVIDIA L40S-16Q`, by type.
        wanted: Vec<String>,
        /// Their frame buffer in GiB.
        asked_gib: u32,
        /// The GPU's placement region in GiB.
        region: u32,
        /// The most of them that fits, by type.
        fits: Vec<String>,
    },
}

impl Refusal {
    /// Whether this refusal comes from the host's state (a guest holds a vGPU) rather than from
    /// the file: `apply` leaves such a GPU alone and carries out the others.
    pub fn is_held(&self) -> bool {
        matches!(self, Refusal::Held { .. } | Refusal::QuotaInUse { .. })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoSuchSize {
                framebuffer_mib,
                series,
                offered_mib,
            } => {
                let sizes: Vec<String> = offered_mib.iter().map(|m| mib_text(*m)).collect();
                write!(
                    f,
                    "no type of {}{}; it offers {} (round_up = true takes the next larger)",
                    mib_text(*framebuffer_mib),
                    series
                        .map(|s| format!(" in series {s}"))
                        .unwrap_or_default(),
                    if sizes.is_empty() {
                        "none".to_owned()
                    } else {
                        sizes.join(", ")
                    }
                )
            }
            Refusal::UnknownType { wanted, offered } => write!(
                f,
                "no vGPU type {wanted:?}; it offers {}",
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
            Refusal::OneTypeOnly { wanted } => write!(
                f,
                "it holds one type (one size) at a time, not {}",
                wanted.join(" and ")
            ),
            Refusal::GpuInstances {
                profile,
                asked,
                instances,
            } => write!(
                f,
                "{asked} MIG-backed vGPU(s) on profile {profile} asked, it has {instances} GPU \
                 instance(s) of it"
            ),
            Refusal::MigOnTimeSliced { type_name } => write!(
                f,
                "{type_name} is time-sliced and takes the whole GPU, which stays in MIG mode: \
                 ask for MIG mode off too (mig = \"disabled\")"
            ),
            Refusal::GpuInstancesUnknown { profile, why } => write!(
                f,
                "the MIG-backed vGPUs need {profile} GPU instances, and {why}"
            ),
            Refusal::Unconfirmed { type_name } => write!(
                f,
                "{type_name} is named by the built-in catalog only: the GPU lists no other type \
                 while it holds vGPUs, and neither NVML nor an offer recorded under this driver \
                 confirms it"
            ),
            Refusal::TooMany {
                type_name,
                asked,
                max,
            } => write!(f, "{asked} x {type_name} asked, it holds at most {max}"),
            Refusal::Oversubscribed { wanted } => {
                write!(f, "{} take more than the whole GPU", wanted.join(" + "))
            }
            Refusal::NotEnoughVfs { asked, vfs } => {
                write!(f, "{asked} VFs needed, it has {vfs}")
            }
            Refusal::UnknownCapacity { type_name } => write!(
                f,
                "how many {type_name} fit is unknown: give a count (\"4x...\")"
            ),
            Refusal::UnknownMemory => f.write_str(
                "its local memory is unknown, so a size cannot become a VF count: give vfs = N",
            ),
            Refusal::NotEnoughMemory {
                asked_mib,
                memory_mib,
            } => write!(
                f,
                "the VFs asked for take {} of local memory, it has {}",
                mib_text(*asked_mib),
                mib_text(*memory_mib)
            ),
            Refusal::NoQuotas { vfs, share_mib } => write!(
                f,
                "its driver sets no per-VF local-memory quotas (no drm/card*/iov), so each of \
                 {vfs} VFs gets an equal share, {}: ask for {vfs}x{} or give vfs = {vfs}",
                mib_text(*share_mib),
                mib_size(*share_mib)
            ),
            Refusal::QuotaInUse {
                vf,
                by,
                found_mib,
                wanted_mib,
            } => write!(
                f,
                "VF {vf} has {} of local memory, not {}, but {by} holds it: a quota changes \
                 only while no guest has the VF",
                mib_text(*found_mib),
                mib_text(*wanted_mib)
            ),
            Refusal::NotSriov { backend } => write!(
                f,
                "a VF count applies to plain SR-IOV GPUs; this one offers vGPUs through {backend}"
            ),
            Refusal::NotVirtualizable { backend } => {
                write!(f, "it offers no vGPUs (backend {backend})")
            }
            Refusal::Held { id, by, frees } => write!(
                f,
                "{id} would be taken away, but {by} holds it: this GPU is left as it is \
                 ({frees})"
            ),
            Refusal::Overlap { selections } => {
                let at: Vec<String> = selections.iter().map(Location::to_string).collect();
                write!(f, "selected by several entries (at {})", at.join(", "))
            }
            Refusal::MigUnknown { why } => {
                write!(f, "its MIG mode and GPU instances cannot be read: {why}")
            }
            Refusal::MigResetPending => f.write_str(
                "a MIG-mode change waits for a GPU reset, which vgpu does not do: reset the \
                 GPU (nvidia-smi -r) or reboot, then plan again",
            ),
            Refusal::MigProfileUnknown { profile, offered } => write!(
                f,
                "the GPU has no GPU-instance profile {profile} (it has {})",
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
            Refusal::MigNoFit { why } => write!(f, "the MIG geometry does not fit: {why}"),
            Refusal::MigInUse { instance, profile } => write!(
                f,
                "GPU instance {instance} ({profile}) would go, but a vGPU the config keeps runs \
                 on it"
            ),
            Refusal::MigUnderVgpus {
                config,
                instances,
                vgpus,
            } => {
                let instances: Vec<String> = instances
                    .iter()
                    .map(|(id, profile)| format!("{id} ({profile})"))
                    .collect();
                let vgpus: Vec<String> = vgpus.iter().map(VgpuHandle::to_string).collect();
                write!(
                    f,
                    "config {config:?} changes only MIG geometry, and would remove GPU \
                     instance(s) {} under vGPU(s) {}: remove those vGPUs first, or use a \
                     config that names both the geometry and the vGPUs",
                    instances.join(", "),
                    vgpus.join(", ")
                )
            }
            Refusal::SchedulerNotNvidia => {
                f.write_str("a vGPU scheduler applies to NVIDIA GPUs only")
            }
            Refusal::SchedulerUnknown { why } => {
                write!(f, "its vGPU scheduler cannot be read: {why}")
            }
            Refusal::SchedulerBusy { running } => {
                let ids: Vec<String> = running.iter().map(VgpuHandle::to_string).collect();
                write!(
                    f,
                    "its vGPU scheduler changes only while no vGPU runs, and the plan keeps {} \
                     running",
                    ids.join(", ")
                )
            }
            Refusal::SizeModeNotHere { why } => write!(f, "it has no size mode to set: {why}"),
            Refusal::MixedFixedShare => write!(
                f,
                "it would run mixed-size mode, which does not take the fixed-share scheduler"
            ),
            Refusal::MixedMig => write!(
                f,
                "it would run mixed-size mode beside MIG mode, which it does not take: ask \
                 size_mode = \"equal\" with MIG, or mig = \"disabled\" with mixed sizes"
            ),
            Refusal::PlacementsNoFit {
                wanted,
                asked_gib,
                region,
                fits,
            } => write!(
                f,
                "{} ({asked_gib} of {region} GiB) cannot be placed in mixed-size mode: at most {} \
                 fit",
                wanted.join(" + "),
                if fits.is_empty() {
                    "none".to_owned()
                } else {
                    fits.join(" + ")
                }
            ),
        }
    }
}

/// A selection that matched no GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    /// The selection, in words.
    pub selection: String,
    /// Where it is in the file.
    pub at: Location,
    /// Whether it fails `assert` and `apply`: it has criteria (an address, a model, a vendor,
    /// a NUMA node) and is not marked `optional`, so a typo is not taken for "nothing to do".
    pub blocking: bool,
}

impl Plan {
    /// How many steps the plan takes, on GPUs that are not refused.
    pub fn changes(&self) -> usize {
        self.gpus
            .iter()
            .filter(|g| g.refusals.is_empty())
            .map(|g| g.steps.len())
            .sum()
    }

    /// Whether the host already is as the config asks: nothing to do and nothing refused.
    pub fn matches(&self) -> bool {
        self.changes() == 0
            && self.gpus.iter().all(|g| g.refusals.is_empty())
            && self.unmatched.iter().all(|u| !u.blocking)
    }

    /// Whether the file asks for something this host cannot do (a refusal other than a held
    /// vGPU, or a GPU address that is not here): then nothing is applied.
    pub fn blocked(&self) -> bool {
        self.unmatched.iter().any(|u| u.blocking)
            || self
                .gpus
                .iter()
                .flat_map(|g| &g.refusals)
                .any(|r| !r.refusal.is_held())
    }
}

/// A size as a desired-state file writes it: `12GiB`, `512MiB`.
fn mib_size(mib: u64) -> String {
    mib_text(mib).replace(' ', "")
}

/// A size in words: `12 GiB`, `512 MiB`.
pub fn mib_text(mib: u64) -> String {
    if mib % 1024 == 0 {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}
