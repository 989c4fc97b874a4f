//! Making one vGPU where it fits, when other tools make vGPUs on the same GPU at the same time.
//!
//! The host lock serialises `vgpu`'s own commands only: `mdevctl start`, libvirt's node-device
//! create (which runs mdevctl) or a vendor agent can take a parent's last instance between the
//! read that chose the parent and the write that makes the vGPU. The kernel arbitrates: the
//! mdev core counts instances under its own lock and refuses a `create` past the count with
//! `EUSERS` (`drivers/vfio/mdev/mdev_core.c`), GVT-g with `ENOSPC`. On that refusal (see
//! [`backend::taken`]) the attempt's own steps are undone (a definition written for it is
//! removed), the GPU is read again, and the vGPU goes to the next parent with room, once. When
//! the new read shows no room, the GPU is full ([`Error::NoCapacity`]); when it shows room only
//! on the parent the kernel refused, the kernel's refusal is the answer ([`HostError::NoSpace`](crate::host::HostError::NoSpace),
//! with its path and errno).

use uuid::Uuid;

use super::Created;
use super::session::Operation;
use crate::backend::{self, NewVgpu, Placement};
use crate::discovery::discover_gpu;
use crate::error::{Error, Result};
use crate::model::{Gpu, VgpuHandle};
use crate::state::store::Start;

/// Creates a vGPU of type `wanted` on `gpu` where [`Operation::place`] puts it, defining it
/// first when `define` says when it starts; `uuid` names a mediated device. A GPU that lost its
/// defined size mode gets it back first ([`Operation::mode_as_defined`]). In mixed-size mode
/// it takes placement `at`, else [`Operation::placement_id`]'s choice. A place another tool
/// takes meanwhile is given up for the next one, once (see the module documentation).
pub(super) fn create(
    op: &mut Operation<'_>,
    gpu: &Gpu,
    wanted: &str,
    uuid: Option<Uuid>,
    define: Option<Start>,
    at: Option<u32>,
) -> Result<Created> {
    let reread;
    let gpu = match op.mode_as_defined(gpu)? {
        // The mode changes what the GPU lists: read it again.
        true => {
            reread = discover_gpu(op.paths(), gpu.address)?.0;
            &reread
        }
        false => gpu,
    };
    let placement = op.place(gpu, wanted)?;
    let placement_id = op.placement_id(gpu, &placement, at)?;
    let vgpu = placement.vgpu(uuid)?;
    let id = vgpu.handle();
    let err = match attempt(op, gpu, &placement, (&vgpu, placement_id), define) {
        Ok(previous_driver) => {
            return Ok(Created {
                id,
                gpu: gpu.address,
                placement,
                previous_driver,
                placement_id,
            });
        }
        Err(err) => err,
    };
    if !backend::taken(op.paths(), &placement, &err)? {
        return Err(err);
    }
    let refused = placement.device();
    op.note(
        "retry",
        &refused.to_string(),
        &format!("taken meanwhile ({}): trying the next place", err.chain()),
    );
    let (gpu, _warnings) = discover_gpu(op.paths(), gpu.address)?;
    let placement = match op.place_avoiding(&gpu, wanted, &[refused]) {
        Ok(placement) => placement,
        // The new read shows room only where the kernel has just refused: its answer stands.
        Err(Error::NoCapacity { .. })
            if op
                .place(&gpu, wanted)
                .is_ok_and(|again| again.device() == refused) =>
        {
            return Err(err);
        }
        Err(full) => return Err(full),
    };
    // A mediated device keeps the UUID it was to have; a VF-based vGPU is named by its VF.
    let vgpu = placement.vgpu(match id {
        VgpuHandle::Mdev(uuid) => Some(uuid),
        VgpuHandle::Vf(_) => None,
    })?;
    let id = vgpu.handle();
    let placement_id = op.placement_id(&gpu, &placement, at)?;
    let previous_driver = attempt(op, &gpu, &placement, (&vgpu, placement_id), define)?;
    Ok(Created {
        id,
        gpu: gpu.address,
        placement,
        previous_driver,
        placement_id,
    })
}

/// Defines (when asked) and makes `vgpu` at `placement` (at its placement id in mixed-size
/// mode); when that fails, what it did is undone before the error is returned, so that
/// another place can be tried.
fn attempt(
    op: &mut Operation<'_>,
    gpu: &Gpu,
    placement: &Placement,
    (vgpu, placement_id): (&NewVgpu, Option<u32>),
    define: Option<Start>,
) -> Result<Option<String>> {
    let id = vgpu.handle();
    let savepoint = op.savepoint();
    let result = (|| {
        match define {
            Some(start) => op.define_at(gpu, placement, id, start, placement_id)?,
            None if matches!(id, VgpuHandle::Mdev(_)) => op.check_undefined(id)?,
            None => {}
        }
        op.realize_at(vgpu, placement_id)
    })();
    if result.is_err() {
        op.rollback_to(savepoint);
    }
    result
}
