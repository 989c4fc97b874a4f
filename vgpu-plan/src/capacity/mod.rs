//! What a GPU can still take: one answer per physical GPU and vGPU type.
//!
//! [`room`] is a pure function of a [`HostState`]: what runs, what is defined, the VFs and
//! their drivers, and the GPU instances NVML reports. Every command that counts asks it:
//! `types`, `place`, `plan`, `create`, `define`, `provision`, the libvirt hook, `nova-config`,
//! `top` and `metrics`. None keeps a count of its own.
//!
//! The rules, per GPU and type:
//!
//! | bound ([`Limit`]) | from |
//! |---|---|
//! | the per-GPU maximum | `max_instances` less the vGPUs of the type |
//! | mixing | NVIDIA: time-sliced vGPUs of one type at a time; MIG-backed vGPUs of any profiles together; never both |
//! | MIG mode | NVIDIA time-sliced: none while MIG mode is on |
//! | definitions | defined vGPUs that are not running keep their place and capacity |
//! | GPU instances | MIG-backed: the free instances of the type's profile, less those defined vGPUs of it will take |
//! | free VFs | VF-based interfaces: VFs that hold nothing, have no passthrough driver, and no definition names |
//! | the parents' offer | sysfs: `available_instances`, or the free VFs that list the type; none for a type the GPU supports but does not list now (`supported.rs`) |
//!
//! The room is the least of them; a tie is reported as the first in this table.
//!
//! The mixing rule is NVIDIA's (Virtual GPU Software User Guide, "Valid Virtual GPU
//! Configurations on a Single GPU"; NVIDIA vgpu-device-manager's `VGPUConfig.AssertValid`
//! holds the same). A MIG-backed type with no NVML to list GPU instances has no room: the
//! instance it needs cannot be chosen.

mod handout;
pub(crate) mod identity;
mod mig_fit;
mod mixed;
mod reservations;
pub(crate) mod supported;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::definition::{
    BindingDefinition, MdevDefinition, SriovDefinition, VfVgpuDefinition,
};
use crate::model::is_passthrough_driver;
use crate::model::nvml::{Fact, SchedulerState};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, Inventory, NVIDIA_VENDOR_ID, VgpuHandle};

pub use crate::model::limit::Limit;
pub use crate::model::nvml::MigFacts;
pub use crate::model::sizes::SizeFacts;
pub use handout::check_handout;
pub use mig_fit::{MigFitError, PlacedGpuInstance, fit_gpu_instances};
pub use mixed::new_placement;
pub use mixed::placement_of;
pub(crate) use mixed::{Ranker, chooser, occupancy};
pub use reservations::{Reservations, reservations};

/// What holds a vGPU against its removal, and what would free it, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The holder: `process 4242 (qemu-system-x86)`, `libvirt domain web-1 (shut off)`.
    pub by: String,
    /// What frees it: `stop the process`, or the command that detaches it.
    pub frees: String,
}

/// What the planner, placement and capacity read about a host: what it has, what is defined,
/// what guests hold, and what NVML says of GPU instances.
/// `vgpu-core`'s `Manager::host_state` reads it from a host; tests and
/// benchmarks build one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostState {
    /// The GPUs, their VFs, types and vGPUs.
    pub inventory: Inventory,
    /// The persistent definitions.
    pub definitions: DefinitionSet,
    /// vGPUs a guest holds, with what holds them and what frees them: never taken away by a
    /// plan.
    pub holds: BTreeMap<VgpuHandle, Hold>,
    /// Plain SR-IOV GPUs whose driver provisions each VF's local memory with a quota one can
    /// set (Intel's SR-IOV `i915` and `xe`: `drm/card<N>/iov/`), with the local memory it can
    /// give the VFs in MiB: their quotas and what is left
    /// (`iov/pf/gt/available/lmem_max_quota`). A GPU not here takes no quotas.
    pub local_memory_mib: BTreeMap<PciAddress, u64>,
    /// The vGPU scheduler of each NVIDIA GPU, for selections that set one
    /// (`vgpu-core`'s `add_nvml_facts` fills it from NVML); a GPU missing here has an unknown
    /// scheduler, and a selection that sets its scheduler is refused.
    pub schedulers: BTreeMap<PciAddress, Fact<SchedulerState>>,
    /// MIG mode and GPU instances of each NVIDIA GPU NVML was asked about; a GPU missing here
    /// has unknown instances, so its MIG-backed types have no room.
    pub mig: BTreeMap<PciAddress, MigFacts>,
    /// The vGPU types each NVIDIA GPU supports, whatever it holds now: NVML's list, else the
    /// offer recorded under the same driver version. What a plan may count on where sysfs
    /// lists only the types creatable beside the vGPUs present. A GPU missing here has an
    /// offer known only from sysfs and the catalog (`supported.rs`).
    pub supported_types: BTreeMap<PciAddress, Vec<KnownType>>,
    /// The size mode and placements of each NVIDIA GPU that supports mixed-size mode, as
    /// NVML reports them; a GPU missing here is counted by the equal-size rules.
    pub sizes: BTreeMap<PciAddress, SizeFacts>,
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

/// A vGPU type a GPU supports, whatever it holds now: from NVML's
/// `nvmlDeviceGetSupportedVgpus`, or from an offer of its sysfs that `vgpu` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownType {
    /// The id, as sysfs writes it (`1153`, or the number of `nvidia-1153`).
    pub id: String,
    /// The name.
    pub name: String,
    /// Frame buffer of each vGPU, in MiB, where the source says.
    pub framebuffer_mib: Option<u64>,
    /// vGPUs of the type per GPU, where the source says.
    pub max_instances: Option<u32>,
    /// Where the list comes from: [`Nvml`](crate::model::NameSource::Nvml) or
    /// [`Recorded`](crate::model::NameSource::Recorded).
    pub source: crate::model::NameSource,
}

/// How many more vGPUs of one type one GPU takes now, and what bounds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Room {
    /// How many more can be made.
    pub available: u32,
    /// The bound that set `available`; with several equal bounds, the first in the table of
    /// the module documentation.
    pub limit: Limit,
    /// Places definitions hold for vGPUs of this type that are not running (for plain VFs:
    /// VFs definitions name); other types' definitions bound it through the mixing rule.
    pub held: u32,
}

/// Whether vGPUs of the type are MIG-backed, and on which profile.
fn profile_of(gpu: &Gpu, type_id: &str, names: &BTreeMap<String, String>) -> Option<String> {
    if let Some(t) = gpu.types.iter().find(|t| t.id == type_id) {
        return t.mig.as_ref().map(|m| m.gpu_instance_profile.clone());
    }
    names
        .get(type_id)
        .and_then(|n| crate::parse::mig_backing(n))
        .map(|m| m.gpu_instance_profile)
}

/// How many more vGPUs of `type_id` (an id `gpu` lists, or [`PLAIN_VF_TYPE`](crate::model::PLAIN_VF_TYPE)) `gpu` takes now
/// on the host `host` describes. Pure.
pub fn room(host: &HostState, gpu: &Gpu, type_id: &str) -> Room {
    let reserved = reservations(&host.definitions, gpu);
    let plain = gpu.backend == Backend::Sriov && gpu.vendor_id != Some(NVIDIA_VENDOR_ID);
    if plain && type_id == crate::model::PLAIN_VF_TYPE {
        return plain_room(gpu, &reserved);
    }
    let Some(ty) = gpu.types.iter().find(|t| t.id == type_id) else {
        return Room {
            available: 0,
            limit: Limit::NotOffered,
            held: 0,
        };
    };
    let max = ty
        .max_instances
        .map(|max| (max.saturating_sub(ty.in_use), Limit::Max { max }));
    // What the parents and the per-GPU maximum leave, before definitions take their share.
    let base = max.as_ref().map_or(ty.offered, |(n, _)| ty.offered.min(*n));
    // In the order a tie is reported: the most telling bound first.
    let mut bounds: Vec<(u32, Limit)> = max.into_iter().collect();
    let nvidia = gpu.vendor_id == Some(NVIDIA_VENDOR_ID);
    let names = reservations::defined_names(&host.definitions, gpu);
    let mine = profile_of(gpu, type_id, &names);
    let mixed = nvidia && host.sizes.get(&gpu.address).is_some_and(SizeFacts::mixed);
    if mixed && mine.is_none() {
        bounds.extend(placement_bounds(host, gpu, type_id));
    }
    // Mixing: every type present, running or only defined, against this one.
    if nvidia {
        let present: BTreeSet<&str> = gpu
            .vgpus
            .iter()
            .map(|v| v.type_id.as_str())
            .chain(reserved.pending.keys().map(String::as_str))
            .filter(|t| *t != type_id)
            .collect();
        let clash = present.iter().find(|other| {
            !share_gpu(
                mine.is_some(),
                profile_of(gpu, other, &names).is_some(),
                mixed,
            )
        });
        if let Some(other) = clash {
            bounds.push((
                0,
                Limit::Mixing {
                    with: label(gpu, other, &names),
                },
            ));
        }
    }
    // A time-sliced type needs the whole GPU, which MIG mode divides.
    if nvidia && mine.is_none() && host.mig.get(&gpu.address).is_some_and(|f| f.mig_on) {
        bounds.push((0, Limit::MigOn));
    }
    let held = reserved.pending(type_id);
    if held > 0 {
        bounds.push((base.saturating_sub(held), Limit::Definitions { held }));
    }
    if let Some(profile) = &mine {
        bounds.push(instances_bound(host, gpu, profile, &reserved, &names));
    }
    if gpu.backend != Backend::Mdev {
        let free = gpu
            .vfs
            .iter()
            .filter(|vf| {
                vf.vgpu_type.is_none()
                    && !vf.driver.as_deref().is_some_and(is_passthrough_driver)
                    && !reserved.vfs.contains(&vf.address)
            })
            .count();
        bounds.push((u32::try_from(free).unwrap_or(u32::MAX), Limit::Vfs));
    }
    bounds.push((ty.offered, Limit::Offer));
    pick(bounds, held)
}

/// Whether vGPUs of two types, each MIG-backed or time-sliced as said, may be on one NVIDIA
/// GPU at once: MIG-backed ones of any profiles, one per GPU instance; time-sliced ones of
/// several types only in mixed-size mode; never a MIG-backed one beside a time-sliced one.
/// The one mixing rule: [`room`] counts by it, the planner plans by it.
pub(crate) fn share_gpu(a_mig_backed: bool, b_mig_backed: bool, mixed_size: bool) -> bool {
    match (a_mig_backed, b_mig_backed) {
        (true, true) => true,
        (false, false) => mixed_size,
        _ => false,
    }
}

/// The bounds of a time-sliced type on a GPU in mixed-size mode: the placements the driver
/// says are creatable now, and the most vGPUs on one GPU.
fn placement_bounds(host: &HostState, gpu: &Gpu, type_id: &str) -> Vec<(u32, Limit)> {
    let max = u32::try_from(crate::placement::MAX_VGPUS_PER_GPU).unwrap_or(u32::MAX);
    let count = u32::try_from(gpu.vgpus.len()).unwrap_or(u32::MAX);
    let creatable = host
        .sizes
        .get(&gpu.address)
        .and_then(|f| f.creatable.get(type_id));
    let placements = match creatable {
        Some(ids) => {
            let free = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            (free, Limit::Placements { free })
        }
        None => (0, Limit::PlacementsUnknown),
    };
    vec![
        placements,
        (max.saturating_sub(count), Limit::VgpusPerGpu { max }),
    ]
}

/// The bound with the least room; the first of equals.
fn pick(bounds: Vec<(u32, Limit)>, held: u32) -> Room {
    let mut best: Option<(u32, Limit)> = None;
    for (n, limit) in bounds {
        if best.as_ref().is_none_or(|(b, _)| n < *b) {
            best = Some((n, limit));
        }
    }
    let (available, limit) = best.unwrap_or((0, Limit::NotOffered));
    Room {
        available,
        limit,
        held,
    }
}

/// Free GPU instances of `profile` on `gpu`, less those defined vGPUs of that profile that are
/// not running will take.
fn instances_bound(
    host: &HostState,
    gpu: &Gpu,
    profile: &str,
    reserved: &Reservations,
    names: &BTreeMap<String, String>,
) -> (u32, Limit) {
    let Some(facts) = host.mig.get(&gpu.address) else {
        return (
            0,
            Limit::MigUnknown {
                profile: profile.to_owned(),
            },
        );
    };
    if !facts.mig_on {
        return (
            0,
            Limit::MigOff {
                profile: profile.to_owned(),
            },
        );
    }
    let free = facts
        .instances
        .iter()
        .filter(|(id, p)| p == profile && !facts.used.contains(id))
        .count();
    let pending: u32 = reserved
        .pending
        .iter()
        .filter(|(t, _)| profile_of(gpu, t, names).as_deref() == Some(profile))
        .map(|(_, n)| *n)
        .sum();
    let free = u32::try_from(free)
        .unwrap_or(u32::MAX)
        .saturating_sub(pending);
    (
        free,
        Limit::GpuInstances {
            profile: profile.to_owned(),
            free,
        },
    )
}

/// A plain SR-IOV GPU's room for whole VFs: each VF no passthrough driver holds and no
/// definition names.
fn plain_room(gpu: &Gpu, reserved: &Reservations) -> Room {
    let free = gpu
        .vfs
        .iter()
        .filter(|vf| {
            !vf.driver.as_deref().is_some_and(is_passthrough_driver)
                && !reserved.vfs.contains(&vf.address)
        })
        .count();
    let held = gpu
        .vfs
        .iter()
        .filter(|vf| {
            reserved.vfs.contains(&vf.address)
                && !vf.driver.as_deref().is_some_and(is_passthrough_driver)
        })
        .count();
    let held = u32::try_from(held).unwrap_or(u32::MAX);
    Room {
        available: u32::try_from(free).unwrap_or(u32::MAX),
        limit: match held {
            0 => Limit::Vfs,
            held => Limit::Definitions { held },
        },
        held,
    }
}

/// How a person calls type `type_id` of `gpu`: its name, or its id.
fn label(gpu: &Gpu, type_id: &str, names: &BTreeMap<String, String>) -> String {
    gpu.types
        .iter()
        .find(|t| t.id == type_id)
        .and_then(|t| t.name.clone())
        .or_else(|| names.get(type_id).cloned())
        .unwrap_or_else(|| type_id.to_owned())
}

/// Shows NVML's size facts on `gpu`: its mode, and in mixed-size mode each time-sliced
/// type's placement size and creatable placements; and each vGPU's placement, `placements`
/// ([`placement_of`]) in the order of its vGPUs.
fn show_sizes(gpu: &mut Gpu, facts: Option<&SizeFacts>, placements: Vec<Option<u32>>) {
    gpu.size_mode = facts.map(|f| f.mode);
    let mixed = facts.filter(|f| f.mixed());
    for ty in &mut gpu.types {
        let sliced = mixed.filter(|_| ty.mig.is_none());
        ty.placement_size = sliced
            .and(ty.framebuffer_mib)
            .and_then(crate::model::sizes::placement_size);
        ty.placements = sliced.and_then(|f| f.creatable.get(&ty.id).cloned());
    }
    for (vgpu, at) in gpu.vgpus.iter_mut().zip(placements) {
        vgpu.placement = at;
    }
}

impl HostState {
    /// Completes every type's identity (`identity.rs`), adds the types the GPU supports but
    /// sysfs does not list now (`supported.rs`), and sets every type's `available` and
    /// `limit` to [`room`]'s answer, so that what is rendered from the inventory is that
    /// answer. A plain SR-IOV GPU's `vf` type included.
    pub fn settle(&mut self) {
        supported::forget(self);
        identity::complete(self);
        supported::extend(self);
        let rooms: Vec<Vec<Room>> = self
            .inventory
            .gpus
            .iter()
            .map(|gpu| gpu.types.iter().map(|t| room(self, gpu, &t.id)).collect())
            .collect();
        let placements: Vec<Vec<Option<u32>>> = self
            .inventory
            .gpus
            .iter()
            .map(|gpu| {
                let of = |v: &crate::model::Vgpu| placement_of(self, gpu.address, v.id);
                gpu.vgpus.iter().map(of).collect()
            })
            .collect();
        let gpus = self
            .inventory
            .gpus
            .iter_mut()
            .zip(rooms.into_iter().zip(placements));
        for (gpu, (rooms, placements)) in gpus {
            for (ty, room) in gpu.types.iter_mut().zip(rooms) {
                ty.available = room.available;
                ty.limit = Some(room.limit);
            }
            show_sizes(gpu, self.sizes.get(&gpu.address), placements);
        }
    }

    /// The state of one GPU of the inventory, by address.
    pub fn gpu(&self, address: PciAddress) -> Option<&Gpu> {
        self.inventory.gpus.iter().find(|g| g.address == address)
    }
}

#[cfg(test)]
mod tests;
