//! Mediated devices (`drivers/vfio/mdev`) and NVIDIA's vendor-VFIO interface and `unbindLock`.

use uuid::Uuid;

use super::{KResult, Kernel, Mdev, parse_params, store_ul, sysfs_str};
use crate::profile::{PciAddr, VgpuMode};
use crate::uevent::devpath;

impl Kernel {
    /// The mdev bus driver an mdev of `parent` binds to: `vfio_mdev` before 5.16, then the
    /// vendor's own `mdev_driver` (`intel_vgpu_mdev` for GVT-g; `nvidia-vgpu-vfio` for
    /// NVIDIA, a best guess: NVIDIA does not document it).
    pub(crate) fn mdev_driver(&self, parent: PciAddr) -> &'static str {
        if !self.kernel_at_least(5, 16) {
            return "vfio_mdev";
        }
        match self.devs.get(&parent).and_then(|p| p.vgpu) {
            Some(VgpuMode::Gvtg) => "intel_vgpu_mdev",
            _ => "nvidia-vgpu-vfio",
        }
    }

    /// `DEVPATH` of an mdev.
    fn mdev_devpath(&self, parent: PciAddr, uuid: Uuid) -> Option<String> {
        let p = self.devs.get(&parent)?;
        Some(devpath(&format!("{}/{uuid}", p.path())))
    }

    /// `create_store` + `mdev_device_create` (drivers/vfio/mdev): `EINVAL` for a bad UUID,
    /// `EEXIST` for a duplicate, `EBUSY` while the GPU's `unbindLock` is held (NVIDIA),
    /// `EUSERS` (NVIDIA) / `ENOSPC` (GVT-g) without capacity. Sends `add`, then registers its
    /// VFIO device and sends `bind`.
    pub(crate) fn mdev_create(
        &mut self,
        parent: PciAddr,
        type_id: &str,
        data: &[u8],
    ) -> KResult<()> {
        if data.len() < 36 || data.len() > 37 {
            return Err(libc::EINVAL);
        }
        let text = std::str::from_utf8(&data[..36]).map_err(|_| libc::EINVAL)?;
        let uuid = Uuid::try_parse(text).map_err(|_| libc::EINVAL)?;
        if self.mdevs.contains_key(&uuid) {
            return Err(libc::EEXIST);
        }
        let p = self.devs.get(&parent).ok_or(libc::ENODEV)?;
        if !p.is_mdev_parent() {
            return Err(libc::ENODEV);
        }
        let t = self.type_of(p, type_id).ok_or(libc::ENODEV)?;
        if self.unbind_locked(p.gpu) {
            return Err(libc::EBUSY);
        }
        if self.available(p, t) == 0 {
            return Err(if p.vgpu == Some(VgpuMode::Gvtg) {
                libc::ENOSPC
            } else {
                libc::EUSERS
            });
        }
        // The lowest free placement of its type; `vgpu_params` may move it before a VM
        // starts it.
        let placement = self
            .choose_placement(p.gpu, t, None, None)
            .map_err(|_| libc::EUSERS)?;
        let group = self.alloc_group();
        self.mdevs.insert(
            uuid,
            Mdev {
                parent,
                type_id: type_id.to_owned(),
                group,
                placement,
                params: String::new(),
            },
        );
        if let Some(path) = self.mdev_devpath(parent, uuid) {
            self.uevents.push("add", path.clone(), "mdev", Vec::new());
            self.sync_vfio();
            let driver = self.mdev_driver(parent).to_owned();
            self.uevents
                .push("bind", path, "mdev", vec![("DRIVER".to_owned(), driver)]);
        }
        Ok(())
    }

    /// `remove_store` of an mdev: `0` does nothing, non-numbers are `EINVAL`.
    pub(crate) fn mdev_remove(&mut self, uuid: Uuid, data: &[u8]) -> KResult<()> {
        if store_ul(data, u64::MAX)? == 0 {
            return Ok(());
        }
        if !self.mdevs.contains_key(&uuid) {
            return Err(libc::ENODEV);
        }
        self.remove_mdev(uuid);
        Ok(())
    }

    /// Deletes an mdev (`mdev_device_remove`): its VFIO device unregisters, then `unbind` and
    /// `remove`.
    pub(super) fn remove_mdev(&mut self, uuid: Uuid) {
        let Some(parent) = self.mdevs.get(&uuid).map(|m| m.parent) else {
            return;
        };
        let path = self.mdev_devpath(parent, uuid);
        self.mdevs.remove(&uuid);
        self.sync_vfio();
        if let Some(path) = path {
            self.uevents
                .push("unbind", path.clone(), "mdev", Vec::new());
            self.uevents.push("remove", path, "mdev", Vec::new());
        }
    }

    /// `current_vgpu_type` store: an id creates, `0` destroys; `EPERM` when one is already set
    /// or when clearing an unset VF; `EINVAL` for an id not in `creatable_vgpu_types`, or for
    /// a MIG-backed type unless `gpu_instance_id` names a GPU instance of its profile first
    /// (`EBUSY` when another vGPU runs on that instance); `EBUSY` while the GPU's
    /// `unbindLock` is held. On a GPU with NVIDIA's mixed-size mode the vGPU takes the
    /// `vgpu-placement-id` of `vgpu_params` (`EINVAL` when its type does not support it in the
    /// GPU's mode, `ENOSPC` when its slots are another vGPU's), else the lowest free supported
    /// id (`ENOSPC` when none is free). Destroying forgets the VF's GPU instance and
    /// placements. NVIDIA's driver registers (and unregisters) the VF as a VFIO device.
    pub(crate) fn set_vgpu_type(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let id = u32::try_from(store_ul(data, u64::from(u32::MAX))?).map_err(|_| libc::EINVAL)?;
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        if self.unbind_locked(d.gpu) {
            return Err(libc::EBUSY);
        }
        let mut placed = None;
        if id == 0 {
            if d.nv.current == 0 {
                return Err(libc::EPERM);
            }
        } else {
            if d.nv.current != 0 {
                return Err(libc::EPERM);
            }
            let key = id.to_string();
            let Some(t) = self.creatable(d).into_iter().find(|t| t.id == key) else {
                return Err(libc::EINVAL);
            };
            if let Some(profile) = &t.gpu_instance_profile {
                self.check_gpu_instance(d, profile)?;
            }
            placed = self.choose_placement(d.gpu, t, parse_params(&d.nv.params)?, None)?;
        }
        if let Some(d) = self.devs.get_mut(&addr) {
            d.nv.current = id;
            d.nv.placed = placed;
            if id == 0 {
                d.nv.gpu_instance = None;
                d.nv.placement = None;
            }
        }
        Ok(())
    }

    /// `vgpu_params` store: refused (`EBUSY`) while a vGPU exists on the VF, `EINVAL` for text
    /// that is not `key=value` pairs or a `vgpu-placement-id` that is not a number. The
    /// placement id is checked when `current_vgpu_type` creates the vGPU.
    pub(crate) fn set_vgpu_params(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let s = sysfs_str(data)?.to_owned();
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        if d.nv.current != 0 {
            return Err(libc::EBUSY);
        }
        parse_params(&s)?;
        d.nv.params = s;
        Ok(())
    }

    /// `/proc/driver/nvidia/gpus/<bdf>/unbindLock`: taking it (1) succeeds only on an idle
    /// GPU; read it back to know.
    pub(crate) fn set_unbind_lock(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let v = store_ul(data, u64::MAX)?;
        let busy = self.gpu_busy(addr);
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        d.unbind_lock = v != 0 && !busy;
        Ok(())
    }
}
