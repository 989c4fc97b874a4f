//! What a store waits for before the kernel carries it out. The kernel does not refuse to take
//! a device from under a process that has it open: the driver's remove calls
//! `vfio_unregister_group_dev`, which waits until the last user lets go (asking it through
//! the driver's `request` callback every 10 s); NVIDIA's `nv_pci_remove` waits until nothing
//! uses the GPU. The FUSE layer holds such a write until [`Kernel::blockers`] is empty.

use super::pci::is_nvidia_vgpu_pf;
use super::{Dev, Kernel, store_ul, sysfs_str};
use crate::profile::PciAddr;
use crate::tree::{DrvAttr, FileRef, PciAttr};
use crate::vfio::cdev_name;

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
        let mut why: Vec<String> = self
            .nvidia_pfs_taken(f, data)
            .into_iter()
            .map(|a| format!("NVIDIA's vGPU manager uses GPU {a} (its unbindLock is not held)"))
            .collect();
        if !self.procs.is_empty() && may_unregister(f) {
            why.extend(self.held_devices(f, data));
        }
        why
    }

    /// The NVIDIA vGPU PFs on `nvidia`, without their `unbindLock` (or busy), that the store
    /// would take from the driver.
    fn nvidia_pfs_taken(&self, f: &FileRef, data: &[u8]) -> Vec<PciAddr> {
        let in_use = |d: &Dev| {
            d.driver.as_deref() == Some("nvidia")
                && is_nvidia_vgpu_pf(d)
                && (!d.unbind_lock || self.gpu_busy(d.addr))
        };
        match f {
            FileRef::Driver(drv, DrvAttr::Unbind) if drv == "nvidia" => sysfs_str(data)
                .ok()
                .and_then(|name| self.dev_by_name(name))
                .filter(|d| in_use(d))
                .map(|d| vec![d.addr])
                .unwrap_or_default(),
            FileRef::Pci(a, PciAttr::Remove) if store_ul(data, u64::MAX).is_ok_and(|v| v != 0) => {
                let Some(top) = self.devs.get(a) else {
                    return Vec::new();
                };
                let prefix = format!("{}/", top.dir);
                self.devs
                    .values()
                    .filter(|d| d.addr == *a || d.dir.starts_with(&prefix))
                    .filter(|d| in_use(d))
                    .map(|d| d.addr)
                    .collect()
            }
            _ => Vec::new(),
        }
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
        let mut why = Vec::new();
        for (key, dev) in self.vfio.iter() {
            if trial.vfio.get(key) == Some(dev) {
                continue;
            }
            let nodes = [
                format!("/dev/vfio/devices/{}", cdev_name(dev.index)),
                format!("/dev/vfio/{}", dev.group),
            ];
            for (pid, comm, node) in self.procs.holding(&nodes) {
                let line = format!("process {pid} ({comm}) holds {node}");
                if !why.contains(&line) {
                    why.push(line);
                }
            }
        }
        why
    }
}
