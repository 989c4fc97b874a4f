//! Provisioning many GPUs at once: VFs first, then every vGPU, in parallel across GPUs and
//! in order within each one.
//!
//! The kernel serialises work per device (a GPU's VFs come up together; its vGPUs are carved
//! from one frame buffer one at a time) but not across devices, so the time to fill a host is
//! its slowest GPU's own sequence, not the sum of all of them. One thread per GPU, scoped to
//! the call (the `parallel` module), runs its sequence as one operation of the session: the
//! host lock is held once for the whole run, every change is audited, definitions keep their
//! room, and a GPU whose sequence fails has its own steps undone. A place another tool takes
//! meanwhile (the kernel refuses it as full: see [`create`](super::create)) is skipped for
//! the next one.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use super::policy::{enforce, read_policy};
use super::session::{Operation, Session};
use crate::backend;
use crate::discovery::discover_gpu;
use crate::error::{Error, ErrorKind, Result};
use crate::host::pci_device::PciDevice;
use crate::host::sriov::SriovChange;
use crate::model::VgpuHandle;
use crate::model::holder::Holder;
use crate::model::pci::PciAddress;
use crate::state::store::Start;

/// What to make on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The physical GPU.
    pub gpu: PciAddress,
    /// VFs to enable first, if any.
    pub vfs: Option<u32>,
    /// The vGPU type (id or name, as for `create`).
    pub type_name: String,
    /// How many vGPUs; `None` fills the GPU (leaving definitions their room).
    pub count: Option<u32>,
    /// Define each vGPU first, to start as this says (`create --define`); `None` makes them
    /// without definitions.
    pub define: Option<Start>,
}

/// What happened on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    /// The physical GPU.
    pub gpu: PciAddress,
    /// The VF change, if one was asked for and kept.
    pub sriov: Option<SriovChange>,
    /// The vGPUs created and kept, in order (none when the sequence failed: it was undone).
    pub created: Vec<VgpuHandle>,
    /// Why the GPU's sequence stopped, if it did.
    pub error: Option<String>,
    /// The error's kind, if it stopped.
    pub kind: Option<ErrorKind>,
    /// How long the GPU's own sequence took, in milliseconds.
    pub elapsed_ms: u128,
}

/// Runs every target as its own operation of `session`, all GPUs at once; the reports are in
/// the order of `targets`.
pub(super) fn run(session: &Session, targets: &[Target]) -> Result<Vec<GpuReport>> {
    let mut seen = BTreeSet::new();
    if let Some(twice) = targets.iter().find(|t| !seen.insert(t.gpu)) {
        return Err(Error::DuplicateTarget { gpu: twice.gpu });
    }
    super::parallel::each_gpu("provisioning", targets, |target| run_one(session, target))
}

/// Refuses `claim` the vGPUs `targets` would make when holding them breaks the tenant
/// policy (`policy::enforce`, the hook's check): each target's count, or the room its GPU has.
/// Nothing is read without a policy file.
pub(super) fn keep_policy(op: &Operation<'_>, claim: &Holder, targets: &[Target]) -> Result<()> {
    if read_policy(op.paths())?.is_none() {
        return Ok(());
    }
    let mut planned = Vec::new();
    for target in targets {
        let (gpu, _warnings) = discover_gpu(op.paths(), target.gpu)?;
        let found = op.room_for(&gpu, &target.type_name)?;
        let count = target.count.unwrap_or(found.room.available);
        planned.extend((0..count).map(|_| (target.gpu, found.type_id.clone())));
    }
    enforce(op, claim, &[], &planned, None).map(drop)
}

fn run_one(session: &Session, target: &Target) -> GpuReport {
    let started = Instant::now();
    let device = target.gpu.to_string();
    let result = session.run("provision", &device, |op| fill(op, target));
    let (sriov, created, error) = match result {
        Ok((sriov, created)) => (sriov, created, None),
        Err(err) => (None, Vec::new(), Some(err)),
    };
    GpuReport {
        gpu: target.gpu,
        sriov,
        created,
        kind: error.as_ref().map(Error::kind),
        error: error.as_ref().map(Error::chain),
        elapsed_ms: started.elapsed().as_millis(),
    }
}

/// One GPU's sequence: the VF count, then vGPUs up to the count asked (or the room left).
#[tracing::instrument(level = "trace", skip_all)]
fn fill(op: &mut Operation<'_>, target: &Target) -> Result<(Option<SriovChange>, Vec<VgpuHandle>)> {
    let sriov = match target.vfs {
        Some(vfs) => Some(op.set_vf_count(target.gpu, vfs)?),
        None => None,
    };
    // One read of the GPU, while the type still shows its name (a full vendor-VFIO card lists
    // none); then each place in order, as `create` would choose them. A GPU that lost its
    // defined size mode gets it back first, and is read again.
    let (mut gpu, _warnings) = discover_gpu(op.paths(), target.gpu)?;
    if op.mode_as_defined(&gpu)? {
        gpu = discover_gpu(op.paths(), target.gpu)?.0;
    }
    let found = op.room_for(&gpu, &target.type_name)?;
    let room = found.room.available;
    let no_room = |asked, available| found.refusal(asked, available);
    if let Some(count) = target.count {
        if count > room {
            return Err(no_room(count, room));
        }
    }
    let gpu = found.gpu();
    let type_id = &found.type_id;
    let reserved = crate::capacity::reservations(&found.state.definitions, gpu);
    let limit = target.count.unwrap_or(room);
    let mut created = Vec::new();
    // Held open for the whole sequence: its VFs are reached beside it.
    let pf = PciDevice::existing(op.paths(), gpu.address)?;
    for placement in backend::candidates(gpu, type_id, &reserved)? {
        // Only a parent that is the PF itself takes more than one vGPU.
        let many = placement.device() == gpu.address;
        while (created.len() as u32) < limit && backend::fits_beside(op.paths(), &pf, &placement)? {
            match make(op, gpu, &placement, target.define) {
                Ok((id, _)) => created.push(id),
                // Another tool took this place meanwhile: the next one may have room.
                Err(err) if backend::taken(op.paths(), &placement, &err)? => {
                    op.note("skip", &placement.device().to_string(), &err.chain());
                    break;
                }
                Err(err) => return Err(err),
            }
            if !many {
                break;
            }
        }
        if created.len() as u32 >= limit {
            break;
        }
    }
    let made = created.len() as u32;
    match target.count {
        Some(count) if made < count => Err(no_room(count, made)),
        _ => Ok((sriov, created)),
    }
}

/// Makes one vGPU at `placement` (at the placement id that takes the least room from larger
/// types in mixed-size mode), defined first when `define` says when it starts; a failure
/// undoes the definition written for it, so that the next place can be tried.
fn make(
    op: &mut Operation<'_>,
    gpu: &crate::model::Gpu,
    placement: &crate::backend::Placement,
    define: Option<Start>,
) -> Result<(VgpuHandle, Option<String>)> {
    let at = op.placement_id(gpu, placement, None)?;
    let Some(start) = define else {
        return op.create_at(placement, None, at);
    };
    let vgpu = placement.vgpu(None)?;
    let id = vgpu.handle();
    let savepoint = op.savepoint();
    let result = op
        .define_at(gpu, placement, id, start, at)
        .and_then(|()| op.realize_at(&vgpu, at));
    match result {
        Ok(previous) => Ok((id, previous)),
        Err(err) => {
            op.rollback_to(savepoint);
            Err(err)
        }
    }
}
