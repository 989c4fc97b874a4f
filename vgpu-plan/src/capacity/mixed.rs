//! The placement of a new vGPU on a GPU in mixed-size mode: the one asked for, when the driver
//! can create the type there, else the one that takes the least room from larger types
//! ([`Chooser::keep_room`]). `create`, `provision`, the hook and `apply` all take it here.
//!
//! The GPU's occupancy comes from the driver's own answer: a slot that no creatable placement
//! of any type covers is held by a vGPU, or of no use until one goes. The vGPUs NVML reports a
//! placement for are recorded on it, as how many vGPUs hold a larger placement weighs in the
//! choice; a run of held slots no reported vGPU accounts for counts as one vGPU.

use crate::model::pci::PciAddress;
use crate::model::sizes::{placement_of_attrs, placement_size};
use crate::model::{Gpu, VgpuHandle, VgpuType};
use crate::placement::{Chooser, Loss, PlacementError, PlacementRefusal, SlotMap};

use super::{HostState, SizeFacts};

/// The placement for a new vGPU of `type_id` on `gpu`: `asked` when the driver can create the
/// type there, else the choice that takes the least room from larger types. `None` on a GPU
/// not in mixed-size mode (nothing to choose), or when no placement is free (the room says
/// why).
/// Refused where NVML did not list the type's creatable placements.
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
    let ty = gpu.types.iter().find(|t| t.id == type_id);
    let type_label = || {
        let name = ty.and_then(|t| t.name.as_deref());
        crate::model::type_label(type_id, name).to_owned()
    };
    let creatable = match facts.creatable.get(type_id) {
        Some(ids) => ids.clone(),
        // Capacity gives a time-sliced type NVML lists nothing for no room
        // (`Limit::PlacementsUnknown`): nor is it made here.
        None if ty.and_then(size_of).is_some() => {
            return Err(PlacementRefusal::Unknown {
                gpu: gpu.address,
                type_label: type_label(),
            });
        }
        None => Vec::new(),
    };
    if let Some(id) = asked {
        if creatable.contains(&id) {
            return Ok(Some(id));
        }
        return Err(PlacementRefusal::NotCreatable {
            gpu: gpu.address,
            type_label: type_label(),
            id,
            creatable,
        });
    }
    let lowest = creatable.first().copied();
    let chosen = ty
        .and_then(|ty| Ranker::new(host, gpu, ty))
        .and_then(|ranker| ranker.rank().map(|(id, _)| *id));
    // The driver's list is the truth: a choice it does not list gives way to its lowest.
    Ok(chosen.filter(|id| creatable.contains(id)).or(lowest))
}

/// Where new vGPUs of one type go on a GPU in mixed-size mode, and what each takes away:
/// the GPU's occupancy, the type's placement size, and the chooser [`new_placement`] uses.
/// `place` ranks mixed-size GPUs by it.
#[derive(Debug, Clone)]
pub(crate) struct Ranker {
    map: SlotMap,
    size: u32,
    chooser: Chooser,
    /// The next vGPU's placement and what it takes away, worked out once per change.
    next: Option<(u32, Loss)>,
}

impl Ranker {
    /// The ranker of `ty` on `gpu`; `None` on a GPU not in mixed-size mode, for a type
    /// without a placement size, or where the driver's answer gives no occupancy.
    pub(crate) fn new(host: &HostState, gpu: &Gpu, ty: &VgpuType) -> Option<Self> {
        let facts = host.sizes.get(&gpu.address).filter(|f| f.mixed())?;
        let map = occupancy(host, gpu, facts).ok()??;
        let size = size_of(ty)?;
        let chooser = chooser(gpu);
        let next = chooser.rank(&map, size).ok().flatten();
        Some(Self {
            map,
            size,
            chooser,
            next,
        })
    }

    /// The placement the next vGPU takes, and what it takes away; `None` when none is free.
    pub(crate) fn rank(&self) -> Option<&(u32, Loss)> {
        self.next.as_ref()
    }

    /// Places the next vGPU where [`Ranker::rank`] says, so the next rank sees it; returns
    /// its placement, `None` when none is free.
    pub(crate) fn take(&mut self) -> Option<u32> {
        let (id, _) = self.next.take()?;
        self.map.place(id, self.size).ok()?;
        self.next = self.chooser.rank(&self.map, self.size).ok().flatten();
        Some(id)
    }
}

/// Where vGPU `id` on `gpu` is placed in mixed-size mode, as far as it is known: the size
/// facts' (NVML's, or a VF's `nvidia/vgpu_params`), else the placement its definition made it
/// at. `None` off mixed-size mode, or where neither says. `list`, `list
/// --json` and an undo that makes a vGPU again all take it here.
pub fn placement_of(host: &HostState, gpu: PciAddress, id: VgpuHandle) -> Option<u32> {
    let facts = host.sizes.get(&gpu).filter(|f| f.mixed())?;
    if let Some(&at) = facts.placements.get(&id) {
        return Some(at);
    }
    let defs = &host.definitions;
    match id {
        VgpuHandle::Vf(vf) => defs.vf_vgpus.iter().find(|d| d.vf == vf)?.placement,
        VgpuHandle::Mdev(uuid) => {
            placement_of_attrs(&defs.mdevs.iter().find(|d| d.uuid == uuid)?.attrs)
        }
    }
}

/// A time-sliced type's placement size.
fn size_of(ty: &VgpuType) -> Option<u32> {
    ty.mig
        .is_none()
        .then_some(ty.framebuffer_mib)
        .flatten()
        .and_then(placement_size)
}

/// How a new vGPU's placement is chosen on `gpu`: the id that takes the least room from the
/// larger placement sizes of the GPU's time-sliced types.
pub(crate) fn chooser(gpu: &Gpu) -> Chooser {
    let sizes: Vec<u32> = gpu.types.iter().filter_map(size_of).collect();
    Chooser::keep_room(&sizes)
}

/// The GPU's occupancy as the driver's creatable placements show it, with each vGPU whose
/// placement is known ([`placement_of`]) recorded on it: `None` without a region.
pub(crate) fn occupancy(
    host: &HostState,
    gpu: &Gpu,
    facts: &SizeFacts,
) -> Result<Option<SlotMap>, PlacementError> {
    let Some(region) = facts.region else {
        return Ok(None);
    };
    let free: Vec<(u32, u32)> = gpu
        .types
        .iter()
        .filter_map(|t| Some((facts.creatable.get(&t.id)?, size_of(t)?)))
        .flat_map(|(ids, size)| ids.iter().map(move |id| (*id, size)))
        .collect();
    let mut map = SlotMap::with_free(region, &free)?;
    // How many vGPUs hold a larger placement weighs in the choice (`Chooser::rank`).
    let mut unrecorded = 0;
    for vgpu in &gpu.vgpus {
        let size = gpu
            .types
            .iter()
            .find(|t| t.id == vgpu.type_id)
            .and_then(size_of);
        let at = placement_of(host, gpu.address, vgpu.id);
        let recorded = match (at, size) {
            // A placement the driver's answer does not show held (the vGPU went since, or a
            // definition names one it was not made at), or one the rule or another vGPU's
            // placement refuses, leaves the vGPU not recorded: the driver's answer is the
            // truth, and its slots count as held by vGPUs not recorded.
            (Some(at), Some(size)) => map.hold(at, size).is_ok(),
            _ => false,
        };
        unrecorded += u32::from(!recorded);
    }
    map.set_unrecorded(unrecorded);
    Ok(Some(map))
}
