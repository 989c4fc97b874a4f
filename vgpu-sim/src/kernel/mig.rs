//! MIG on NVIDIA's vendor-specific VFIO interface, owned by the simulated driver as NVIDIA's
//! is: MIG mode, and GPU instances with their id, profile and placement.
//!
//! A VF's `nvidia/gpu_instance_id` names the GPU instance its vGPU runs on, written before
//! `current_vgpu_type` (NVIDIA Virtual GPU Software User Guide, "MIG-Backed NVIDIA vGPU").
//! The GPU instances start as the profile has them (`[device.mig]`). The control file's MIG
//! lines change them, as NVML does through the driver (`control`). A new instance gets the
//! lowest id from 1 that the GPU does not use; the placement rules are `profile::place`'s.

use std::collections::BTreeMap;

use super::{Dev, KResult, Kernel, store_ul};
use crate::profile::{GpuInstanceProfileSpec, PciAddr, PlacedInstance, Profile, place};

/// MIG state of one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MigState {
    /// Whether MIG mode is on.
    pub(crate) enabled: bool,
    /// The GPU instances, in the order they were made.
    pub(crate) instances: Vec<PlacedInstance>,
}

/// The MIG state of every MIG-capable GPU of `profile` at boot.
pub(super) fn boot_mig(profile: &Profile) -> BTreeMap<PciAddr, MigState> {
    profile
        .devices
        .iter()
        .filter_map(|d| {
            let mig = d.mig.as_ref()?;
            let instances = mig
                .gpu_instances
                .iter()
                .filter_map(|gi| {
                    let size = profile
                        .gpu_instance_profiles
                        .iter()
                        .find(|p| Some(&p.catalog) == d.catalog.as_ref() && p.name == gi.profile)?
                        .placement_size;
                    Some(PlacedInstance {
                        id: gi.id,
                        profile: gi.profile.clone(),
                        start: gi.start?,
                        size,
                    })
                })
                .collect();
            Some((
                d.addr,
                MigState {
                    enabled: mig.enabled,
                    instances,
                },
            ))
        })
        .collect()
}

impl Kernel {
    /// The GPU-instance profiles of physical GPU `gpu`.
    pub(crate) fn gi_profiles(&self, gpu: PciAddr) -> Vec<&GpuInstanceProfileSpec> {
        let catalog = self
            .devs
            .get(&gpu)
            .and_then(|d| d.catalog.clone())
            .unwrap_or_default();
        self.profile
            .gpu_instance_profiles
            .iter()
            .filter(|p| p.catalog == catalog)
            .collect()
    }

    /// Turns MIG mode of `gpu` on or off: `ENODEV` for a GPU without MIG, `EBUSY` for a change
    /// while the GPU has GPU instances or vGPUs. Asking for the mode it has changes nothing.
    pub(crate) fn set_mig_mode(&mut self, gpu: PciAddr, on: bool) -> KResult<()> {
        let busy = self.gpu_busy(gpu);
        let mig = self.mig.get_mut(&gpu).ok_or(libc::ENODEV)?;
        if mig.enabled == on {
            return Ok(());
        }
        if !mig.instances.is_empty() || busy {
            return Err(libc::EBUSY);
        }
        mig.enabled = on;
        Ok(())
    }

    /// Makes a GPU instance of `profile` on `gpu` at memory slice `start` and returns its id:
    /// `ENODEV` without MIG, `EOPNOTSUPP` with MIG mode off, `EINVAL` for a profile the GPU
    /// lacks or a start that is not one of its placements, `ENOSPC` when it overlaps an
    /// instance or the profile has its instance count.
    pub(crate) fn add_gpu_instance(
        &mut self,
        gpu: PciAddr,
        profile: &str,
        start: u32,
    ) -> KResult<u32> {
        let profiles: Vec<GpuInstanceProfileSpec> =
            self.gi_profiles(gpu).into_iter().cloned().collect();
        let mig = self.mig.get_mut(&gpu).ok_or(libc::ENODEV)?;
        if !mig.enabled {
            return Err(libc::EOPNOTSUPP);
        }
        let refs: Vec<&GpuInstanceProfileSpec> = profiles.iter().collect();
        let placed = place(&refs, &mig.instances, profile, Some(start)).map_err(|e| e.errno())?;
        let id = (1..64)
            .find(|id| !mig.instances.iter().any(|gi| gi.id == *id))
            .ok_or(libc::ENOSPC)?;
        mig.instances.push(PlacedInstance { id, ..placed });
        Ok(id)
    }

    /// Removes GPU instance `id` of `gpu`: `ENODEV` without MIG, `EINVAL` for an unknown id,
    /// `EBUSY` while a vGPU runs on it.
    pub(crate) fn remove_gpu_instance(&mut self, gpu: PciAddr, id: u32) -> KResult<()> {
        if self.gpu_instance_used(gpu, id) {
            return Err(libc::EBUSY);
        }
        let mig = self.mig.get_mut(&gpu).ok_or(libc::ENODEV)?;
        let before = mig.instances.len();
        mig.instances.retain(|gi| gi.id != id);
        if mig.instances.len() == before {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// Whether physical GPU `gpu` is in MIG mode.
    pub(crate) fn mig_on(&self, gpu: PciAddr) -> bool {
        self.mig.get(&gpu).is_some_and(|m| m.enabled)
    }

    fn gpu_instance(&self, gpu: PciAddr, id: u32) -> Option<&PlacedInstance> {
        self.mig
            .get(&gpu)
            .filter(|m| m.enabled)?
            .instances
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
        self.mig.get(&gpu).is_some_and(|m| {
            m.instances
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
