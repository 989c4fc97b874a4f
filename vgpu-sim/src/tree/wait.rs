//! Which stores wait before the kernel carries them out, by the file they write: the kernel's
//! rules (`kernel/wait.rs`) applied to the files of this tree. The FUSE layer holds such a
//! write until [`Kernel::blockers`] is empty.

use super::{DrvAttr, FileRef, PciAttr};
use crate::kernel::Kernel;

/// Whether a store may unregister a VFIO device: an unbind, a removal (of an mdev or a
/// function), a VF count, NVIDIA's `current_vgpu_type`.
fn may_unregister(f: &FileRef) -> bool {
    matches!(
        f,
        FileRef::Driver(_, DrvAttr::Unbind)
            | FileRef::MdevRemove(_)
            | FileRef::Pci(_, PciAttr::SriovNum | PciAttr::Remove | PciAttr::NvCurrent)
    )
}

impl Kernel {
    /// Why a store of `data` to `f` cannot go ahead yet, in words; empty when it can.
    ///
    /// * It would unregister a VFIO device (unbind its function from `vfio-pci`, remove an
    ///   mdev, its parent's driver, the VF, the function, or clear a vendor VF's vGPU type)
    ///   while a simulated process holds the device's cdev (`/dev/vfio/devices/vfio<N>`) or
    ///   its IOMMU group's node (`/dev/vfio/<group>`; holding a group counts as holding every
    ///   VFIO device in it).
    /// * It would take an NVIDIA vGPU PF from `nvidia` (unbind, remove) while its
    ///   `unbindLock` is not held: NVIDIA's vGPU manager uses the GPU until the lock is taken,
    ///   which needs an idle GPU.
    pub(crate) fn blockers(&self, f: &FileRef, data: &[u8]) -> Vec<String> {
        let taken = match f {
            FileRef::Driver(drv, DrvAttr::Unbind) if drv == "nvidia" => {
                self.nvidia_unbind_waits_for(data)
            }
            FileRef::Pci(a, PciAttr::Remove) => self.nvidia_remove_waits_for(*a, data),
            _ => Vec::new(),
        };
        let mut why: Vec<String> = taken
            .into_iter()
            .map(|a| format!("NVIDIA's vGPU manager uses GPU {a} (its unbindLock is not held)"))
            .collect();
        if !self.procs.is_empty() && may_unregister(f) {
            why.extend(self.held_devices(f, data));
        }
        why
    }

    /// The holders of the VFIO devices the store would unregister: the store is tried on a
    /// copy of the kernel, and the registrations before and after compared.
    fn held_devices(&self, f: &FileRef, data: &[u8]) -> Vec<String> {
        let mut trial = self.clone();
        trial.uevents.on = false;
        if trial.store(f, data).is_err() {
            // It fails without waiting; the real store says how.
            return Vec::new();
        }
        trial.sync_vfio();
        self.holders_of_unregistered(&trial)
    }
}
