//! The placement of a new vGPU on a GPU in mixed-size mode: the one asked for, when the driver
//! can create the type there, else the one that keeps the most room for the largest types
//! ([`Chooser::keep_room`]). `create`, `provision`, the hook and `apply` all take it here.
//!
//! The GPU's occupancy comes from the driver's own answer: a slot that no creatable placement
//! of any type covers is held by a vGPU, or of no use until one goes. So the choice needs no
//! vGPU's placement, which NVML reports only for vGPUs it matches.

use crate::model::sizes::placement_size;
use crate::model::{Gpu, VgpuType};
use crate::placement::{Chooser, PlacementError, PlacementRefusal, SlotMap};

use super::{HostState, SizeFacts};

/// The placement for a new vGPU of `type_id` on `gpu`: `asked` when the driver can create the
/// type there, else the choice that keeps the most room. `None` on a GPU that is not in
/// mixed-size mode (nothing to choose), or when no placement is free (the room says why).
pub fn new_placement(
    host: &HostState,
    gpu: &Gpu,
    type_id: &str,
    asked: Option<u32>,
) -> Result<Option<u32>, PlacementRefusal> {
    let facts = host.sizes.get(&gpu.address);
    let Some(facts) = facts.filter(|f| f.mixed()) else {
        return match asked {
            None => Ok(None),
            Some(_) => Err(PlacementRefusal::NotMixed {
                gpu: gpu.address,
                now: match facts {
                    Some(_) => "equal-size mode".to_owned(),
                    None => "NVML does not report a size mode for it".to_owned(),
                },
            }),
        };
    };
    let creatable = facts.creatable.get(type_id).cloned().unwrap_or_default();
    if let Some(id) = asked {
        if creatable.contains(&id) {
            return Ok(Some(id));
        }
        let ty = gpu.types.iter().find(|t| t.id == type_id);
        return Err(PlacementRefusal::NotCreatable {
            gpu: gpu.address,
            type_label: ty
                .and_then(|t| t.name.clone())
                .unwrap_or_else(|| type_id.to_owned()),
            id,
            creatable,
        });
    }
    let lowest = creatable.first().copied();
    let size = gpu.types.iter().find(|t| t.id == type_id).and_then(size_of);
    let chosen = match (size, occupancy(gpu, facts)) {
        (Some(size), Ok(Some(map))) => Chooser::keep_room(&sizes(gpu))
            .choose(&map, size)
            .ok()
            .flatten(),
        _ => None,
    };
    // The driver's list is the truth: a choice it does not list gives way to its lowest.
    Ok(chosen.filter(|id| creatable.contains(id)).or(lowest))
}

/// A time-sliced type's placement size.
fn size_of(ty: &VgpuType) -> Option<u32> {
    ty.mig
        .is_none()
        .then_some(ty.framebuffer_mib)
        .flatten()
        .and_then(placement_size)
}

/// The placement sizes of the GPU's time-sliced types.
fn sizes(gpu: &Gpu) -> Vec<u32> {
    gpu.types.iter().filter_map(size_of).collect()
}

/// The GPU's occupancy as the driver's creatable placements show it: `None` without a region.
fn occupancy(gpu: &Gpu, facts: &SizeFacts) -> Result<Option<SlotMap>, PlacementError> {
    let Some(region) = facts.region else {
        return Ok(None);
    };
    let free: Vec<(u32, u32)> = gpu
        .types
        .iter()
        .filter_map(|t| Some((facts.creatable.get(&t.id)?, size_of(t)?)))
        .flat_map(|(ids, size)| ids.iter().map(move |id| (*id, size)))
        .collect();
    SlotMap::with_free(region, &free).map(Some)
}
