//! The `size_mode` of a selection: whether its vGPUs fit the GPU in mixed-size mode, where
//! each goes, and the step that sets the mode.
//!
//! Feasibility is [`placement::fit`] on the empty region: NVML sets the mode only while the
//! GPU has no vGPU, so a plan that changes it empties the GPU first. A GPU already in
//! mixed-size mode keeps the vGPUs it may; the others are placed beside them, or the GPU is
//! emptied when they do not fit there.

use crate::HostState;
use crate::capacity;
use crate::desired::{Entry, SizeModeRequest};
use crate::model::nvml::{Fact, SchedulerPolicy};
use crate::model::sizes::{SizeMode, placement_size};
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID};
use crate::offers::{GpuView, Offer};
use crate::placement::{self, Placed, SlotMap};
use crate::steps::{GpuPlan, Refusal, Refused, Step};

/// What an entry's size mode means for one GPU.
pub(super) struct Sizing {
    /// The mode asked.
    mode: SizeMode,
    /// Whether the GPU is in another mode now (or its mode is not known).
    pub(super) switch: bool,
    /// The GPU's placement region in GiB.
    region: u32,
}

impl Sizing {
    /// Whether the plan leaves the GPU in mixed-size mode.
    pub(super) fn mixed(&self) -> bool {
        self.mode == SizeMode::Mixed
    }
}

/// Whether `entry` asks for mixed-size mode.
pub(super) fn mixed(entry: &Entry) -> bool {
    entry.size_mode.is_some_and(|r| r.mode == SizeMode::Mixed)
}

/// Checks the size mode `request` on the GPU for the vGPUs `types` asks: a mixed set must
/// fit the empty region ([`placement::fit`]); the refusal says the most of it that does.
pub(super) fn check(
    host: &HostState,
    view: &GpuView<'_>,
    request: SizeModeRequest,
    types: &[(Offer, u32)],
) -> Result<Sizing, Box<Refused>> {
    let gpu = view.gpu;
    let refuse = |refusal| Box::new(Refused::new(refusal, Some(request.at)));
    if !has_size_mode(gpu) {
        return Err(refuse(Refusal::SizeModeNotHere {
            why: format!("{} is not an NVIDIA GPU with SR-IOV", gpu.address),
        }));
    }
    let facts = host.sizes.get(&gpu.address);
    let region = facts.and_then(|f| f.region).or_else(|| largest_size(view));
    let Some(region) = region else {
        return Err(refuse(Refusal::SizeModeNotHere {
            why: "its placement region is not known (NVML does not say, and it lists no \
                  time-sliced type)"
                .to_owned(),
        }));
    };
    let switch = facts.is_none_or(|f| f.mode != request.mode);
    let sizing = Sizing {
        mode: request.mode,
        switch,
        region,
    };
    if request.mode == SizeMode::Equal {
        return Ok(sizing);
    }
    let asked: u64 = types.iter().map(|(_, count)| u64::from(*count)).sum();
    if asked > placement::MAX_VGPUS_PER_GPU as u64 {
        return Err(refuse(Refusal::SizeModeNotHere {
            why: format!(
                "{asked} vGPUs are asked, and at most {} share a GPU in mixed-size mode",
                placement::MAX_VGPUS_PER_GPU
            ),
        }));
    }
    let mut sizes = Vec::new();
    for (offer, count) in types {
        let size = offer_size(offer).ok_or_else(|| {
            refuse(Refusal::SizeModeNotHere {
                why: format!("the frame buffer of {} is not known", offer.label()),
            })
        })?;
        sizes.extend(std::iter::repeat_n(size, *count as usize));
    }
    let found = SlotMap::new(region)
        .and_then(|map| placement::fit(&map, &sizes))
        .map_err(|err| {
            refuse(Refusal::SizeModeNotHere {
                why: err.to_string(),
            })
        })?;
    if found.fits() {
        return Ok(sizing);
    }
    let by_type = |placed: &[u32]| {
        types
            .iter()
            .filter_map(|(offer, _)| {
                let size = offer_size(offer)?;
                let n = placed.iter().filter(|s| **s == size).count();
                (n > 0).then(|| format!("{n} x {}", offer.label()))
            })
            .collect::<Vec<_>>()
    };
    let fitting: Vec<u32> = found.placed.iter().map(|p| p.size).collect();
    Err(refuse(Refusal::PlacementsNoFit {
        wanted: by_type(&sizes),
        asked_gib: sizes.iter().fold(0u32, |sum, s| sum.saturating_add(*s)),
        region,
        fits: by_type(&fitting),
    }))
}

/// Whether `gpu` has a size mode: an NVIDIA GPU with SR-IOV (vGPU 17 and later).
fn has_size_mode(gpu: &Gpu) -> bool {
    gpu.vendor_id == Some(NVIDIA_VENDOR_ID)
        && matches!(
            gpu.backend,
            Backend::VfMdev | Backend::NvidiaVfio | Backend::Sriov
        )
}

/// The placement size of the largest time-sliced type the GPU offers: its region.
fn largest_size(view: &GpuView<'_>) -> Option<u32> {
    view.offers
        .iter()
        .filter(|o| !o.mig && o.series.is_some())
        .filter_map(offer_size)
        .max()
}

fn offer_size(offer: &Offer) -> Option<u32> {
    offer.framebuffer_mib.and_then(placement_size)
}

/// Adds the mode step to `out`, after the steps that take vGPUs away, and gives each create
/// step its placement beside the vGPUs kept. `Err(())` when the creates do not fit beside
/// them: the caller plans the GPU emptied instead.
pub(super) fn steps(
    host: &HostState,
    view: &GpuView<'_>,
    sizing: &Sizing,
    types: &[(Offer, u32)],
    out: &mut GpuPlan,
) -> Result<(), ()> {
    let creates = out.steps.iter().any(|s| matches!(s, Step::Create { .. }));
    // Nothing to place: the vGPUs kept stay where they are, wherever that is.
    if sizing.mode == SizeMode::Mixed && creates {
        let facts = host.sizes.get(&view.gpu.address);
        // Where each kept vGPU is, as `list` and `create` know it.
        let at =
            |id: &crate::model::VgpuHandle| capacity::placement_of(host, view.gpu.address, *id);
        let known = out.keep.iter().all(|id| at(id).is_some());
        let destroys = out.steps.iter().any(|s| matches!(s, Step::Destroy { .. }));
        let mut map = match (known, facts) {
            (true, _) => SlotMap::new(sizing.region).map_err(drop)?,
            // No placement is known for a kept vGPU (not from NVML, a VF's `vgpu_params` nor
            // a definition), and nothing goes: the driver's creatable placements say which
            // slots are held.
            (false, Some(facts)) if !destroys => capacity::occupancy(host, view.gpu, facts)
                .ok()
                .flatten()
                .ok_or(())?,
            (false, _) => return Err(()),
        };
        for id in out.keep.iter().filter(|_| known) {
            let at = at(id).ok_or(())?;
            let type_id = view
                .gpu
                .vgpus
                .iter()
                .find(|v| v.id == *id)
                .map(|v| &v.type_id);
            let size = type_id
                .and_then(|t| view.name_of(t).map(|name| (t.clone(), name)))
                .and_then(|(t, name)| types.iter().find(|(o, _)| o.is(&t, Some(&name))))
                .and_then(|(o, _)| offer_size(o))
                .ok_or(())?;
            map.place(at, size).map_err(drop)?;
        }
        let size_of = |step: &Step| match step {
            Step::Create {
                type_id, type_name, ..
            } => types
                .iter()
                .find(|(o, _)| o.id == *type_id && o.name == *type_name)
                .and_then(|(o, _)| offer_size(o)),
            _ => None,
        };
        let sizes: Vec<u32> = out.steps.iter().filter_map(size_of).collect();
        // Where `create` would put them, one by one in the steps' order; where that leaves
        // one out, the exact search's assignment.
        let in_turn = capacity::chooser(view.gpu).place_in_turn(&map, &sizes);
        let mut free: Vec<Placed> = match in_turn {
            Ok(Some(placed)) => placed,
            // A size the chooser's rule does not cover leaves it to the exact search too.
            Ok(None) | Err(_) => {
                let found = placement::fit(&map, &sizes).map_err(drop)?;
                if !found.fits() {
                    return Err(());
                }
                found.placed
            }
        };
        for step in &mut out.steps {
            let Some(size) = size_of(step) else {
                continue;
            };
            let taken = free.iter().position(|p| p.size == size).ok_or(())?;
            if let Step::Create { placement, .. } = step {
                *placement = Some(free.remove(taken).id);
            }
        }
    }
    if sizing.switch {
        let at = out
            .steps
            .iter()
            .position(|s| matches!(s, Step::Start { .. } | Step::Create { .. }))
            .unwrap_or(out.steps.len());
        out.steps.insert(at, Step::SizeMode { mode: sizing.mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// Refuses what a GPU the plan leaves in mixed-size mode does not take: MIG mode (`host` is
/// the host as the plan's MIG geometry leaves it) and the fixed-share scheduler (the policy
/// the entry asks, else the one the GPU runs). `sizing` is the entry's size mode; without
/// one the GPU keeps the mode it runs.
pub(super) fn excludes(
    host: &HostState,
    gpu: &Gpu,
    entry: &Entry,
    sizing: Option<&Sizing>,
    out: &mut GpuPlan,
) {
    let ends_mixed = match sizing {
        Some(sizing) => sizing.mixed(),
        None => host.sizes.get(&gpu.address).is_some_and(|f| f.mixed()),
    };
    if !ends_mixed {
        return;
    }
    if host.mig.get(&gpu.address).is_some_and(|f| f.mig_on) {
        out.refusals
            .push(Refused::new(Refusal::MixedMig, Some(entry.at)));
    }
    let running = host.schedulers.get(&gpu.address).and_then(Fact::value);
    let fixed = match entry.scheduler {
        Some(request) => request.policy == SchedulerPolicy::FixedShare,
        None => running.and_then(|s| s.policy) == Some(SchedulerPolicy::FixedShare),
    };
    if fixed {
        out.refusals
            .push(Refused::new(Refusal::MixedFixedShare, Some(entry.at)));
    }
}
