//! MIG-backed vGPUs on NVIDIA's vendor-specific VFIO interface: a VF's
//! `nvidia/gpu_instance_id` names the GPU instance its vGPU runs on, written before
//! `current_vgpu_type` (NVIDIA Virtual GPU Software User Guide, "MIG-Backed NVIDIA vGPU").
//! The GPU instances start as the profile has them (`[device.mig]`); the control file's MIG
//! lines change them, as NVML does through the driver (`control.rs`).

use super::{Dev, KResult, Kernel, store_ul};
use crate::profile::{GpuInstanceSpec, MigSpec, PciAddr};

impl Kernel {
    /// MIG mode and the GPU instances of physical GPU `gpu`.
    fn mig_of(&self, gpu: PciAddr) -> Option<&MigSpec> {
        self.profile
            .devices
            .iter()
            .find(|d| d.addr == gpu)
            .and_then(|d| d.mig.as_ref())
    }

    fn mig_of_mut(&mut self, gpu: PciAddr) -> Option<&mut MigSpec> {
        self.profile
            .devices
            .iter_mut()
            .find(|d| d.addr == gpu)
            .and_then(|d| d.mig.as_mut())
    }

    /// Turns MIG mode of `gpu` on or off: `ENODEV` for a GPU without MIG, `EBUSY` to turn it
    /// off while GPU instances exist.
    pub(crate) fn set_mig_mode(&mut self, gpu: PciAddr, on: bool) -> KResult<()> {
        let mig = self.mig_of_mut(gpu).ok_or(libc::ENODEV)?;
        if !on && !mig.gpu_instances.is_empty() {
            return Err(libc::EBUSY);
        }
        mig.enabled = on;
        Ok(())
    }

    /// Adds GPU instance `id` of `profile` to `gpu`: `ENODEV` without MIG, `EINVAL` with MIG
    /// mode off or an id in use.
    pub(crate) fn add_gpu_instance(&mut self, gpu: PciAddr, id: u32, profile: &str) -> KResult<()> {
        let mig = self.mig_of_mut(gpu).ok_or(libc::ENODEV)?;
        if !mig.enabled || mig.gpu_instances.iter().any(|gi| gi.id == id) {
            return Err(libc::EINVAL);
        }
        mig.gpu_instances.push(GpuInstanceSpec {
            id,
            profile: profile.to_owned(),
        });
        Ok(())
    }

    /// Removes GPU instance `id` of `gpu`: `ENODEV` without MIG, `EINVAL` for an unknown id,
    /// `EBUSY` while a vGPU runs on it.
    pub(crate) fn remove_gpu_instance(&mut self, gpu: PciAddr, id: u32) -> KResult<()> {
        if self.gpu_instance_used(gpu, id) {
            return Err(libc::EBUSY);
        }
        let mig = self.mig_of_mut(gpu).ok_or(libc::ENODEV)?;
        let before = mig.gpu_instances.len();
        mig.gpu_instances.retain(|gi| gi.id != id);
        if mig.gpu_instances.len() == before {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// Whether physical GPU `gpu` is in MIG mode.
    pub(crate) fn mig_on(&self, gpu: PciAddr) -> bool {
        self.mig_of(gpu).is_some_and(|m| m.enabled)
    }

    fn gpu_instance(&self, gpu: PciAddr, id: u32) -> Option<&GpuInstanceSpec> {
        self.mig_of(gpu)
            .filter(|m| m.enabled)?
            .gpu_instances
            .iter()
            .find(|gi| gi.id == id)
    }

    /// Whether a vGPU runs on GPU instance `id` of `gpu`.
    fn gpu_instance_used(&self, gpu: PciAddr, id: u32) -> bool {
        self.devs
            .values()
            .any(|d| d.gpu == gpu && d.nv.current != 0 && d.nv.gpu_instance == Some(id))
    }

    /// Whether a GPU instance of `profile` on `gpu` runs no vGPU.
    pub(crate) fn free_gpu_instance(&self, gpu: PciAddr, profile: &str) -> bool {
        self.mig_of(gpu).is_some_and(|m| {
            m.gpu_instances
                .iter()
                .any(|gi| gi.profile == profile && !self.gpu_instance_used(gpu, gi.id))
        })
    }

    /// Whether VF `vf` may take a MIG-backed type of `profile` now: `EINVAL` unless its
    /// `gpu_instance_id` names an instance of that profile, `EBUSY` when a vGPU runs there.
    pub(crate) fn check_gpu_instance(&self, vf: &Dev, profile: &str) -> KResult<()> {
        let id = vf.nv.gpu_instance.ok_or(libc::EINVAL)?;
        let gi = self.gpu_instance(vf.gpu, id).ok_or(libc::EINVAL)?;
        if gi.profile != profile {
            return Err(libc::EINVAL);
        }
        if self.gpu_instance_used(vf.gpu, id) {
            return Err(libc::EBUSY);
        }
        Ok(())
    }

    /// `gpu_instance_id` store: a GPU instance of the VF's GPU in MIG mode (`EINVAL` for
    /// another number or a GPU not in MIG mode); `EBUSY` while the VF holds a vGPU.
    pub(crate) fn set_gpu_instance(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let id = u32::try_from(store_ul(data, u64::from(u32::MAX))?).map_err(|_| libc::EINVAL)?;
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        if d.nv.current != 0 {
            return Err(libc::EBUSY);
        }
        self.gpu_instance(d.gpu, id).ok_or(libc::EINVAL)?;
        if let Some(d) = self.devs.get_mut(&addr) {
            d.nv.gpu_instance = Some(id);
        }
        Ok(())
    }

    /// `placement_id` store: any number; `EBUSY` while the VF holds a vGPU.
    pub(crate) fn set_placement(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let id = u32::try_from(store_ul(data, u64::from(u32::MAX))?).map_err(|_| libc::EINVAL)?;
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        if d.nv.current != 0 {
            return Err(libc::EBUSY);
        }
        d.nv.placement = Some(id);
        Ok(())
    }
}
