//! The steps on one vGPU that several operations share: stopping it under the removal
//! policy, starting it from its definition, removing its definitions; and the error of a
//! vGPU that is not there.

use super::session::Operation;
use crate::backend::Running;
use crate::error::{Error, Object, Result};
use crate::host::driver::GiveBack;
use crate::host::paths::HostPaths;
use crate::model::VgpuHandle;
use crate::state::store::Store;
pub(super) fn not_found(paths: &HostPaths, id: VgpuHandle) -> Error {
    Error::NotFound {
        what: Object::Vgpu,
        id: id.to_string(),
        path: match id {
            VgpuHandle::Mdev(_) => paths.mdev_devices(),
            VgpuHandle::Vf(_) => paths.pci_devices(),
        },
    }
}

/// Removes every definition of `id`; false when there was none. A definition brings the vGPU
/// back at boot, so removing it takes the vGPU away: the removal policy decides first.
pub(super) fn undefine(op: &mut Operation<'_>, id: VgpuHandle) -> Result<bool> {
    if !defined(op.store(), id) {
        return Ok(false);
    }
    op.check_removable(id)?;
    match id {
        VgpuHandle::Mdev(uuid) => op.undefine_mdev(uuid),
        VgpuHandle::Vf(vf) => {
            let vgpu = op.undefine_vf_vgpu(vf)?;
            let binding = op.undefine_binding(vf)?;
            Ok(vgpu || binding)
        }
    }
}

/// Whether a definition of `id` exists. One that cannot be read counts: removing it is still
/// a removal.
pub(super) fn defined(store: &Store, id: VgpuHandle) -> bool {
    match id {
        VgpuHandle::Mdev(uuid) => !matches!(store.mdev(uuid), Ok(None)),
        VgpuHandle::Vf(vf) => {
            !matches!(store.vf_vgpu(vf), Ok(None)) || !matches!(store.binding(vf), Ok(None))
        }
    }
}

/// Stops `id`, unless a process holds it open; a plain VF with no driver record goes back to
/// the one its definition names.
pub(super) fn stop(op: &mut Operation<'_>, id: VgpuHandle) -> Result<Running> {
    op.check_removable(id)?;
    stop_unchecked(op, id)
}

/// [`stop`] once the removal policy has allowed it.
pub(super) fn stop_unchecked(op: &mut Operation<'_>, id: VgpuHandle) -> Result<Running> {
    let defined = match id {
        VgpuHandle::Vf(vf) => op.store().binding(vf)?.map(|b| b.previous_driver),
        VgpuHandle::Mdev(_) => None,
    };
    let fallback = defined
        .as_ref()
        .map_or(GiveBack::Probe, |d| GiveBack::To(d.as_deref()));
    op.stop(id, fallback)
}

/// Starts the vGPU `id` from its definition; false when it has none.
pub(super) fn start_defined(op: &mut Operation<'_>, id: VgpuHandle) -> Result<bool> {
    match id {
        VgpuHandle::Mdev(uuid) => {
            let Some(def) = op.store().mdev(uuid)? else {
                return Ok(false);
            };
            op.start_mdev(&def)?;
            Ok(true)
        }
        VgpuHandle::Vf(vf) => {
            if let Some(def) = op.store().vf_vgpu(vf)? {
                op.start_vf_vgpu(&def)?;
                return Ok(true);
            }
            if let Some(def) = op.store().binding(vf)? {
                op.bind(vf, &def.driver)?;
                return Ok(true);
            }
            Ok(false)
        }
    }
}
