//! The planner: from what the host has and holds to what a desired config asks, per GPU, an
//! ordered list of steps, or the reasons it cannot be done.
//!
//! [`plan`] is a pure function of its inputs, returning a [`Plan`]: it reads nothing and
//! changes nothing, so the same host and config give the same plan, and `vgpuctl plan`,
//! `assert` and `apply` agree.
//!
//! The rules, per GPU:
//!
//! - A size maps to the type of exactly that frame buffer in the entry's series (`Q` unless it
//!   says otherwise), or with `round_up` the smallest above it; `"12GiB"` without a count asks
//!   for as many as the type allows (and the GPU has VFs for).
//! - NVIDIA GPUs hold one type at a time (equal-size mode); Intel GVT-g GPUs mix types as long
//!   as their shares (`GVTg_V5_4` is a quarter) add up to at most the whole GPU; a plain SR-IOV
//!   GPU holds whole VFs, each an equal share of its local memory, so `"8x2GiB"` on a 16 GiB
//!   Flex 170 is 8 VFs; other sizes set each VF's local-memory quota where the driver takes
//!   one ([`vfs`]).
//! - vGPUs of the wanted types are kept (running ones first); the others are destroyed, or
//!   undefined when only their definition exists. A vGPU a process holds open or a libvirt
//!   domain references ([`HostState::holds`]) is never destroyed or undefined: the GPU is
//!   refused instead.
//! - Every vGPU kept or made is defined with the entry's persistence; a VF count the plan sets
//!   is defined too, so `restore` brings the host back to the plan after a reboot.
//! - An entry in mixed-size mode (`size_mode = "mixed"`, or several time-sliced types) must
//!   fit the GPU's empty placement region; each create step carries its placement
//!   (`size_mode`). A mode change empties the GPU first.
//! - Steps run in this order: destroy and undefine, the VF count, VF quotas, the scheduler
//!   and the size mode, start what is defined, fix definitions, create.

mod scheduler;
mod size_mode;
pub mod vfs;

use std::collections::BTreeMap;

use crate::desired::{Desired, Entry, Location, Partition, Selection};
use crate::geometry::UnderVgpus;
use crate::offers::{GpuView, Offer, Rule, model_matches};
use crate::steps::{Before, GpuPlan, Plan, Refusal, Refused, Step, Unmatched, Want};

use crate::model::PLAIN_VF_TYPE;
use crate::model::definition::Start;
use crate::model::is_passthrough_driver;
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, VgpuHandle};
use crate::{DefinitionSet, HostState};

/// Plans `desired` on the host `host` describes. Pure: reads and changes nothing.
pub fn plan(host: &HostState, desired: &Desired) -> Plan {
    let inventory = &host.inventory;
    let nvidia_order: Vec<PciAddress> = {
        let mut list: Vec<PciAddress> = inventory
            .gpus
            .iter()
            .filter(|g| g.vendor_id == Some(NVIDIA_VENDOR_ID))
            .map(|g| g.address)
            .collect();
        list.sort();
        list
    };
    let mut chosen: BTreeMap<PciAddress, Vec<&Entry>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    for entry in &desired.entries {
        let matched: Vec<&Gpu> = inventory
            .gpus
            .iter()
            .filter(|g| selects(&entry.selection, g, &nvidia_order))
            .collect();
        if matched.is_empty() {
            unmatched.push(Unmatched {
                selection: entry.selection.to_string(),
                at: entry.at,
                // A typo in a model or vendor must not pass as "nothing to do".
                blocking: !entry.selection.optional && has_criteria(&entry.selection),
            });
        }
        for gpu in matched {
            chosen.entry(gpu.address).or_default().push(entry);
        }
    }
    let gpus = chosen
        .into_iter()
        .filter_map(|(address, entries)| {
            let gpu = inventory.gpus.iter().find(|g| g.address == address)?;
            Some(plan_gpu(host, gpu, &entries, &desired.name))
        })
        .collect();
    Plan {
        config: desired.name.clone(),
        file: desired.file.clone(),
        gpus,
        unmatched,
    }
}

/// Whether `selection` has criteria beyond `all` (an address, a model, a vendor, a NUMA node,
/// device ids, NVIDIA indices): one that matches nothing then says something is wrong.
fn has_criteria(selection: &Selection) -> bool {
    let bare = Selection {
        all: false,
        optional: false,
        ..selection.clone()
    };
    bare != Selection::default()
}

/// Whether `selection` chooses `gpu`.
fn selects(selection: &Selection, gpu: &Gpu, nvidia_order: &[PciAddress]) -> bool {
    if let Some(address) = selection.address {
        if gpu.address != address {
            return false;
        }
    } else if gpu.backend == Backend::None {
        return false;
    }
    if let Some(model) = &selection.model {
        if !gpu
            .model
            .as_deref()
            .is_some_and(|m| model_matches(m, model))
        {
            return false;
        }
    }
    if selection.vendor.is_some() && gpu.vendor_id != selection.vendor {
        return false;
    }
    if selection.numa_node.is_some() && gpu.numa_node != selection.numa_node {
        return false;
    }
    if !selection.device_ids.is_empty()
        && !selection
            .device_ids
            .iter()
            .any(|(v, d)| gpu.vendor_id == Some(*v) && gpu.device_id == Some(*d))
    {
        return false;
    }
    if let Some(indices) = &selection.nvidia_indices {
        let position = nvidia_order.iter().position(|a| *a == gpu.address);
        if !position.is_some_and(|p| indices.contains(&(p as u32))) {
            return false;
        }
    }
    true
}

/// A vGPU on the GPU now: running, defined, or both.
#[derive(Debug, Clone)]
struct Current {
    id: VgpuHandle,
    type_id: String,
    name: Option<String>,
    running: bool,
    defined: Option<Start>,
    held: Option<crate::capacity::Hold>,
}

fn plan_gpu(host: &HostState, gpu: &Gpu, entries: &[&Entry], config: &str) -> GpuPlan {
    let view = GpuView::new(host, gpu);
    let entry = entries[0];
    let currents = current(host, &view);
    let mut out = GpuPlan {
        gpu: gpu.address,
        model: gpu.model.clone(),
        backend: gpu.backend,
        selection: entry.selection.to_string(),
        at: entry.at,
        want: Vec::new(),
        vfs: None,
        vf_memory_mib: Vec::new(),
        keep: Vec::new(),
        steps: Vec::new(),
        refusals: Vec::new(),
        tenant: entry.tenant.clone(),
        before: Before {
            vgpus: currents
                .iter()
                .filter(|c| c.running)
                .map(|c| c.id)
                .collect(),
            num_vfs: gpu.sriov.as_ref().map_or(0, |s| s.num_vfs),
        },
    };
    if entries.len() > 1 {
        let refusal = Refusal::Overlap {
            selections: entries.iter().map(|e| e.at).collect(),
        };
        out.refusals
            .push(Refused::new(refusal, Some(entries[1].at)));
        return out;
    }
    // The geometry the entry asks for: its steps go before the vGPUs', and the vGPUs are
    // counted against the GPU instances the GPU will have.
    let under = match entry.partition {
        Partition::Unchanged => UnderVgpus::Stay { config },
        _ => UnderVgpus::MayGo,
    };
    // Time-sliced types imply MIG mode off, which a GPU not in MIG mode has already.
    let mig_on = host.mig.get(&gpu.address).is_some_and(|f| f.mig_on);
    let request = entry
        .mig
        .as_ref()
        .filter(|r| !(r.implied && r.geometry == crate::desired::MigGeometry::Disabled && !mig_on));
    let (geometry_steps, adjusted, used_gone) = match request {
        None => (Vec::new(), None, Vec::new()),
        Some(request) => match crate::geometry::plan(host, gpu, request, under) {
            Ok(geometry) => {
                let mut after = host.clone();
                after.mig.insert(gpu.address, geometry.after);
                (geometry.steps, Some(after), geometry.used_gone)
            }
            Err(refusals) => {
                out.refusals = refusals;
                return out;
            }
        },
    };
    let host = adjusted.as_ref().unwrap_or(host);
    if matches!(entry.partition, Partition::Unchanged) {
        // The GPU keeps its size mode: MIG mode must go with it.
        size_mode::excludes(host, gpu, entry, None, &mut out);
        if !out.refusals.is_empty() {
            return out;
        }
        // A mig-parted entry: the vGPUs stay as they are.
        out.keep = currents
            .iter()
            .filter(|c| c.running)
            .map(|c| c.id)
            .collect();
        out.steps = geometry_steps;
        return out;
    }
    let wanted = match view.rule {
        Rule::None => Err(vec![Refused::new(
            Refusal::NotVirtualizable {
                backend: gpu.backend,
            },
            Some(entry.at),
        )]),
        Rule::Vfs => vfs::want_vfs(host, &view, entry),
        Rule::OneType | Rule::Shares => want_vgpus(host, &view, entry),
    };
    let mut wanted = match wanted {
        Ok(wanted) => wanted,
        Err(refusals) => {
            out.refusals = refusals;
            return out;
        }
    };
    out.want = wanted
        .types
        .iter()
        .map(|(offer, count)| Want {
            type_id: offer.id.clone(),
            type_name: offer.name.clone(),
            framebuffer_mib: offer.framebuffer_mib,
            count: *count,
        })
        .collect();
    out.vfs = wanted.vfs;
    out.vf_memory_mib = wanted.vf_memory_mib.clone();
    let sizing = match entry.size_mode {
        Some(request) => match size_mode::check(host, &view, request, &wanted.types) {
            Ok(sizing) => Some(sizing),
            Err(refused) => {
                out.refusals.push(*refused);
                return out;
            }
        },
        None => None,
    };
    // NVML sets a size mode only while the GPU has no vGPU.
    wanted.fresh = sizing.as_ref().is_some_and(|s| s.switch);
    let before = out.clone();
    diff(host, &view, entry, &wanted, currents.clone(), &mut out);
    if let Some(sizing) = &sizing {
        if size_mode::steps(host, &view, sizing, &wanted.types, &mut out).is_err() {
            // What is kept leaves no room for the rest: make every vGPU anew.
            out = before;
            wanted.fresh = true;
            diff(host, &view, entry, &wanted, currents, &mut out);
            if size_mode::steps(host, &view, sizing, &wanted.types, &mut out).is_err() {
                // Not even an empty GPU takes them in some order: say so rather than plan
                // nothing without a word.
                out.steps.clear();
                out.refusals.push(Refused::new(
                    Refusal::SizeModeNotHere {
                        why: "its vGPUs cannot be placed even on the GPU emptied".to_owned(),
                    },
                    Some(entry.at),
                ));
            }
        }
    }
    // An instance that goes with a vGPU on it: the plan must destroy a vGPU of its profile.
    for (profile, gone) in count_by_profile(&used_gone) {
        let destroyed = out
            .steps
            .iter()
            .filter(|s| match s {
                Step::Destroy { type_name, .. } => type_name
                    .as_deref()
                    .and_then(crate::parse::mig_backing)
                    .is_some_and(|b| b.gpu_instance_profile == profile),
                _ => false,
            })
            .count();
        if destroyed < gone {
            if let Some((id, _)) = used_gone.iter().find(|(_, p)| *p == profile) {
                let refusal = Refusal::MigInUse {
                    instance: *id,
                    profile: profile.clone(),
                };
                out.refusals
                    .push(Refused::new(refusal, entry.mig.as_ref().map(|m| m.at)));
            }
        }
    }
    // GPU instances go after the vGPUs taken away, before those made or started. MIG mode
    // and mixed-size mode exclude each other: the geometry goes after a step to equal-size
    // mode, and before one to mixed-size mode (MIG mode goes off first).
    let at = out
        .steps
        .iter()
        .position(|s| match s {
            Step::Create { .. } | Step::Start { .. } => true,
            Step::SizeMode { mode } => *mode == crate::model::sizes::SizeMode::Mixed,
            _ => false,
        })
        .unwrap_or(out.steps.len());
    out.steps.splice(at..at, geometry_steps);
    let takes_away = out
        .steps
        .iter()
        .any(|s| matches!(s, Step::Destroy { .. } | Step::Undefine { .. }));
    if takes_away {
        // Apply would take vGPUs away before the driver could say whether it offers the type.
        for (offer, _) in wanted.types.iter().filter(|(o, _)| !o.confirmed) {
            out.refusals.push(Refused::new(
                Refusal::Unconfirmed {
                    type_name: offer.label(),
                },
                Some(entry.at),
            ));
        }
    }
    scheduler::plan(host, gpu, entry, &mut out);
    size_mode::excludes(host, gpu, entry, sizing.as_ref(), &mut out);
    if !out.refusals.is_empty() {
        out.steps.clear();
        out.keep.clear();
    }
    out
}

/// How many of `instances` each profile has.
fn count_by_profile(instances: &[(u32, String)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, profile) in instances {
        *counts.entry(profile.clone()).or_insert(0) += 1;
    }
    counts
}

/// What one GPU should hold: types with counts, and for plain SR-IOV (or NVIDIA GPUs whose VFs
/// are off) the VF count.
pub(super) struct Wanted {
    pub(super) types: Vec<(Offer, u32)>,
    pub(super) vfs: Option<u32>,
    /// For plain SR-IOV sizes, each VF's local memory in MiB, in VF order.
    pub(super) vf_memory_mib: Vec<u64>,
    /// For plain SR-IOV, the local memory the driver gives each of the VFs when it enables
    /// them, in MiB, where the GPU's memory is known.
    pub(super) share_mib: Option<u64>,
    /// Whether every vGPU is made anew, none kept: a size-mode change needs an empty GPU.
    pub(super) fresh: bool,
}

/// Resolves a partition on a GPU that holds vGPU types.
fn want_vgpus(host: &HostState, view: &GpuView<'_>, entry: &Entry) -> Result<Wanted, Vec<Refused>> {
    let gpu = view.gpu;
    let mut refusals = Vec::new();
    let mut types: Vec<(Offer, u32, Location)> = Vec::new();
    let mut add = |offer: &Offer, count: u32, at: Location| match types
        .iter_mut()
        .find(|(o, _, _)| o == offer)
    {
        Some((_, n, _)) => *n = n.saturating_add(count),
        None => types.push((offer.clone(), count, at)),
    };
    match &entry.partition {
        Partition::Sizes(items) => {
            for item in items {
                match view.by_size(item.framebuffer_mib, entry.series, entry.round_up) {
                    Ok(offer) => match item.count.or_else(|| as_many_as_fit(view, offer)) {
                        Some(count) => add(offer, count, item.at),
                        None => refusals.push(Refused::new(
                            Refusal::UnknownCapacity {
                                type_name: offer.label(),
                            },
                            Some(item.at),
                        )),
                    },
                    Err(refusal) => refusals.push(Refused::new(refusal, Some(item.at))),
                }
            }
        }
        Partition::Types(items) => {
            for item in items {
                match view.by_name(&item.name) {
                    Ok(offer) => add(offer, item.count, item.at),
                    Err(refusal) => refusals.push(Refused::new(refusal, Some(item.at))),
                }
            }
        }
        Partition::Vfs { at, .. } => {
            refusals.push(Refused::new(
                Refusal::NotSriov {
                    backend: gpu.backend,
                },
                Some(*at),
            ));
        }
        // Planned before the vGPUs (`plan_gpu`): nothing to want here.
        Partition::Unchanged => {}
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    // NVIDIA's mixing rule: MIG-backed types of any profiles together, time-sliced ones alone
    // or, in the mixed-size mode the entry asks, together (the rule `capacity::room` counts by).
    let mixes = types.iter().enumerate().all(|(i, (a, _, _))| {
        types[i + 1..]
            .iter()
            .all(|(b, _, _)| crate::capacity::share_gpu(a.mig, b.mig, size_mode::mixed(entry)))
    });
    if view.rule == Rule::OneType && !mixes {
        let wanted = types.iter().map(|(o, _, _)| o.label()).collect();
        return Err(vec![Refused::new(
            Refusal::OneTypeOnly { wanted },
            Some(types[1].2),
        )]);
    }
    for (offer, count, at) in &types {
        if let Some(max) = type_max(view, offer).filter(|max| count > max) {
            refusals.push(Refused::new(
                Refusal::TooMany {
                    type_name: offer.label(),
                    asked: *count,
                    max,
                },
                Some(*at),
            ));
        }
    }
    refusals.extend(gpu_instances(host, gpu, &types));
    // A time-sliced type needs MIG mode off, which the entry does not ask for.
    if host.mig.get(&gpu.address).is_some_and(|f| f.mig_on) {
        for (offer, _, at) in types
            .iter()
            .filter(|(o, _, _)| !o.mig && o.series.is_some())
        {
            refusals.push(Refused::new(
                Refusal::MigOnTimeSliced {
                    type_name: offer.label(),
                },
                Some(*at),
            ));
        }
    }
    let total: u32 = types.iter().map(|(_, n, _)| *n).sum();
    if let (Some(slots), Rule::OneType) = (view.vf_slots, view.rule) {
        if total > slots && refusals.is_empty() {
            refusals.push(Refused::new(
                Refusal::NotEnoughVfs {
                    asked: total,
                    vfs: slots,
                },
                types.first().map(|t| t.2),
            ));
        }
    }
    if view.rule == Rule::Shares && refusals.is_empty() && types.len() > 1 {
        // Each type is a fraction of the GPU: the counts over the capacities add up to at most 1.
        let caps: Vec<u64> = types
            .iter()
            .map(|(o, _, _)| u64::from(type_max(view, o).unwrap_or(1).max(1)))
            .collect();
        let common: u64 = caps.iter().product();
        let used: u64 = types
            .iter()
            .zip(&caps)
            .map(|((_, n, _), cap)| u64::from(*n) * (common / cap))
            .sum();
        if used > common {
            let wanted = types
                .iter()
                .map(|(o, n, _)| format!("{n} x {}", o.label()))
                .collect();
            refusals.push(Refused::new(
                Refusal::Oversubscribed { wanted },
                types.get(1).map(|t| t.2),
            ));
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let nvidia_vfs_off = gpu.backend == Backend::Sriov && total > 0;
    Ok(Wanted {
        types: types.into_iter().map(|(o, n, _)| (o, n)).collect(),
        vfs: nvidia_vfs_off.then(|| view.vf_slots.unwrap_or(0)),
        vf_memory_mib: Vec::new(),
        share_mib: None,
        fresh: false,
    })
}

/// The refusals of MIG-backed types asked for on `gpu`: more vGPUs of one GPU-instance profile
/// than it has instances of, or instances not known (no NVML) or not there (MIG mode off).
fn gpu_instances(host: &HostState, gpu: &Gpu, types: &[(Offer, u32, Location)]) -> Vec<Refused> {
    let mut by_profile: BTreeMap<String, (u32, Location)> = BTreeMap::new();
    for (offer, count, at) in types {
        let Some(backing) = offer.name.as_deref().and_then(crate::parse::mig_backing) else {
            continue;
        };
        let entry = by_profile
            .entry(backing.gpu_instance_profile)
            .or_insert((0, *at));
        entry.0 = entry.0.saturating_add(*count);
    }
    let facts = host.mig.get(&gpu.address);
    by_profile
        .into_iter()
        .filter_map(|(profile, (asked, at))| {
            let refusal = match facts {
                None => Refusal::GpuInstancesUnknown {
                    profile,
                    why: "NVML is not loaded to list them".to_owned(),
                },
                Some(facts) if !facts.mig_on => Refusal::GpuInstancesUnknown {
                    profile,
                    why: "MIG mode is off".to_owned(),
                },
                Some(facts) => {
                    let instances = facts
                        .instances
                        .iter()
                        .filter(|(_, p)| *p == profile)
                        .count();
                    let instances = u32::try_from(instances).unwrap_or(u32::MAX);
                    if asked <= instances {
                        return None;
                    }
                    Refusal::GpuInstances {
                        profile,
                        asked,
                        instances,
                    }
                }
            };
            Some(Refused::new(refusal, Some(at)))
        })
        .collect()
}

/// How many vGPUs of `offer` the GPU holds: its per-GPU maximum. A GVT-g GPU with no vGPUs
/// says itself how many fit (its fences may allow fewer than the type's nominal count).
fn type_max(view: &GpuView<'_>, offer: &Offer) -> Option<u32> {
    let mut max = offer.max_instances?;
    if view.rule == Rule::Shares && view.gpu.vgpus.is_empty() {
        if let Some(listed) = view
            .gpu
            .types
            .iter()
            .find(|t| Some(&t.id) == offer.id.as_ref())
        {
            max = max.min(listed.available);
        }
    }
    Some(max)
}

/// "As many as fit": the type's maximum, and no more than the VFs vGPUs sit on.
fn as_many_as_fit(view: &GpuView<'_>, offer: &Offer) -> Option<u32> {
    let max = type_max(view, offer)?;
    Some(match (view.rule, view.vf_slots) {
        (Rule::OneType, Some(slots)) => max.min(slots),
        _ => max,
    })
}

/// Every vGPU on the GPU: running ones, and those only a definition describes.
fn current(host: &HostState, view: &GpuView<'_>) -> Vec<Current> {
    let gpu = view.gpu;
    let defs = &host.definitions;
    let vf_addresses = vf_addresses(gpu);
    let on_gpu = |a: PciAddress| a == gpu.address || vf_addresses.contains(&a);
    let mut found: BTreeMap<VgpuHandle, Current> = BTreeMap::new();
    let mut add = |id: VgpuHandle, type_id: String, running: bool, defined: Option<Start>| {
        let entry = found.entry(id).or_insert_with(|| Current {
            id,
            name: view.name_of(&type_id),
            type_id,
            running: false,
            defined: None,
            held: host.holds.get(&id).cloned(),
        });
        entry.running |= running;
        if defined.is_some() {
            entry.defined = defined;
        }
    };
    if view.rule == Rule::Vfs {
        for vf in &gpu.vfs {
            if vf.driver.as_deref().is_some_and(is_passthrough_driver) {
                add(
                    VgpuHandle::Vf(vf.address),
                    PLAIN_VF_TYPE.to_owned(),
                    true,
                    None,
                );
            }
        }
        for def in &defs.bindings {
            if def.address != gpu.address && on_gpu(def.address) {
                add(
                    VgpuHandle::Vf(def.address),
                    PLAIN_VF_TYPE.to_owned(),
                    false,
                    Some(def.start),
                );
            }
        }
    } else {
        for vgpu in &gpu.vgpus {
            add(vgpu.id, vgpu.type_id.clone(), true, None);
        }
        for def in &defs.mdevs {
            if def.parent.parse::<PciAddress>().is_ok_and(on_gpu) {
                add(
                    VgpuHandle::Mdev(def.uuid),
                    def.mdev_type.clone(),
                    false,
                    Some(def.start),
                );
            }
        }
        for def in &defs.vf_vgpus {
            if def.gpu == gpu.address || on_gpu(def.vf) {
                add(
                    VgpuHandle::Vf(def.vf),
                    def.type_id.to_string(),
                    false,
                    Some(def.start),
                );
            }
        }
    }
    let mut list: Vec<Current> = found.into_values().collect();
    // Running vGPUs are kept before ones only defined; then by handle, for a stable plan.
    list.sort_by_key(|c| (!c.running, c.id));
    list
}

/// The addresses the GPU's VFs have or would have: the enabled ones, and those the SR-IOV
/// capability's offset and stride give for every VF it supports.
fn vf_addresses(gpu: &Gpu) -> Vec<PciAddress> {
    let mut out: Vec<PciAddress> = gpu.vfs.iter().map(|v| v.address).collect();
    if let Some(sriov) = &gpu.sriov {
        out.extend((0..sriov.total_vfs).filter_map(|i| vfs::nth_vf(gpu, i)));
    }
    out.sort();
    out.dedup();
    out
}

/// The steps from `currents` to `wanted`.
fn diff(
    host: &HostState,
    view: &GpuView<'_>,
    entry: &Entry,
    wanted: &Wanted,
    currents: Vec<Current>,
    out: &mut GpuPlan,
) {
    let gpu = view.gpu;
    let start = entry.persistence;
    let num_vfs = gpu.sriov.as_ref().map_or(0, |s| s.num_vfs);
    // A plain SR-IOV GPU whose VF count changes loses every VF, and so every vGPU on one.
    let recount = view.rule == Rule::Vfs && wanted.vfs.is_some_and(|n| n != num_vfs);
    let mut kept = vec![0u32; wanted.types.len()];
    let mut keep = Vec::new();
    let mut remove = Vec::new();
    for current in currents {
        let slot = (!recount && !wanted.fresh)
            .then(|| {
                wanted
                    .types
                    .iter()
                    .enumerate()
                    .position(|(i, (offer, count))| {
                        kept[i] < *count && offer.is(&current.type_id, current.name.as_deref())
                    })
            })
            .flatten();
        match slot {
            Some(i) => {
                kept[i] += 1;
                keep.push(current);
            }
            None => remove.push(current),
        }
    }
    for current in &remove {
        if let Some(hold) = &current.held {
            out.refusals.push(Refused::new(
                Refusal::Held {
                    id: current.id,
                    by: hold.by.clone(),
                    frees: hold.frees.clone(),
                },
                Some(entry.at),
            ));
            continue;
        }
        out.steps.push(if current.running {
            Step::Destroy {
                id: current.id,
                type_id: current.type_id.clone(),
                type_name: current.name.clone(),
            }
        } else {
            Step::Undefine { id: current.id }
        });
    }
    if let Some(to) = wanted.vfs {
        let defined = sriov_defined(&host.definitions, gpu.address);
        if to != num_vfs || (view.rule == Rule::Vfs && defined != Some(to)) {
            out.steps.push(Step::Vfs { from: num_vfs, to });
        }
    }
    if view.rule == Rule::Vfs {
        vfs::quota_steps(host, view, entry, wanted, recount, out);
    }
    for current in &keep {
        if !current.running {
            out.steps.push(Step::Start { id: current.id });
        }
    }
    for current in &keep {
        match current.defined {
            Some(now) if now == start => {}
            Some(_) => {
                out.steps.push(Step::Undefine { id: current.id });
                out.steps.push(Step::Define {
                    id: current.id,
                    start,
                });
            }
            None => out.steps.push(Step::Define {
                id: current.id,
                start,
            }),
        }
    }
    for (i, (offer, count)) in wanted.types.iter().enumerate() {
        for _ in kept[i]..*count {
            out.steps.push(Step::Create {
                type_id: offer.id.clone(),
                type_name: offer.name.clone(),
                start,
                placement: None,
            });
        }
    }
    out.keep = keep.iter().map(|c| c.id).collect();
}

fn sriov_defined(definitions: &DefinitionSet, pf: PciAddress) -> Option<u32> {
    definitions
        .sriov
        .iter()
        .find(|d| d.pf == pf)
        .map(|d| d.num_vfs)
}

#[cfg(test)]
mod tests;
