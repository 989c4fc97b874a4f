//! What a store waits for before the kernel carries it out. The kernel does not refuse to take
//! a device from under a process that has it open: the driver's remove calls
//! `vfio_unregister_group_dev`, which waits until the last user lets go (asking it through
//! the driver's `request` callback every 10 s); NVIDIA's `nv_pci_remove` waits until nothing
//! uses the GPU. These are the kernel's answers; which store does what is the tree's
//! ([`Kernel::blockers`]), and the FUSE layer holds such a write until nothing blocks it.

use super::pci::is_nvidia_vgpu_pf;
use super::{Dev, Kernel, store_ul, sysfs_str};
use crate::profile::PciAddr;
use crate::vfio::cdev_name;

impl Kernel {
    /// Whether NVIDIA's vGPU manager still uses a function bound to `nvidia`: a vGPU PF
    /// whose `unbindLock` is not held, or whose GPU has a vGPU.
    fn nvidia_in_use(&self, d: &Dev) -> bool {
        d.driver.as_deref() == Some("nvidia")
            && is_nvidia_vgpu_pf(d)
            && (!d.unbind_lock || self.gpu_busy(d.addr))
    }

    /// The NVIDIA vGPU PF in use (see above) that a store of `data` to `nvidia`'s `unbind`
    /// would take from the driver.
    pub(crate) fn nvidia_unbind_waits_for(&self, data: &[u8]) -> Vec<PciAddr> {
        sysfs_str(data)
            .ok()
            .and_then(|name| self.dev_by_name(name))
            .filter(|d| self.nvidia_in_use(d))
            .map(|d| vec![d.addr])
            .unwrap_or_default()
    }

    /// The NVIDIA vGPU PFs in use (see above) that a store of `data` to the `remove` of
    /// function `a` would take away: `a` and the functions below it.
    pub(crate) fn nvidia_remove_waits_for(&self, a: PciAddr, data: &[u8]) -> Vec<PciAddr> {
        if !store_ul(data, u64::MAX).is_ok_and(|v| v != 0) {
            return Vec::new();
        }
        let Some(top) = self.devs.get(&a) else {
            return Vec::new();
        };
        let prefix = format!("{}/", top.dir);
        self.devs
            .values()
            .filter(|d| d.addr == a || d.dir.starts_with(&prefix))
            .filter(|d| self.nvidia_in_use(d))
            .map(|d| d.addr)
            .collect()
    }

    /// The simulated processes holding a VFIO device registered here but not in `after` (the
    /// same kernel after a store), in words: each holds the device's cdev
    /// (`/dev/vfio/devices/vfio<N>`) or its IOMMU group's node (`/dev/vfio/<group>`; holding a
    /// group counts as holding every VFIO device in it).
    pub(crate) fn holders_of_unregistered(&self, after: &Kernel) -> Vec<String> {
        let mut why = Vec::new();
        for (key, dev) in self.vfio.iter() {
            if after.vfio.get(key) == Some(dev) {
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
