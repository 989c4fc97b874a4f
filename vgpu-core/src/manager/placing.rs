//! Where a new vGPU goes on one GPU: the room definitions leave, then the first place that
//! takes it.

use super::session::Operation;
use crate::backend::{self, Placement, Reservations};
use crate::error::{Error, Result};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, VgpuHandle};
use crate::nvml::error::NvmlError;
use crate::nvml::mig;

impl Operation<'_> {
    /// What definitions hold on `gpu` for vGPUs that are not running now.
    pub(crate) fn reservations(&self, gpu: &Gpu) -> Result<Reservations> {
        let paths = self.paths();
        let store = self.store();
        let on_gpu = |a: PciAddress| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a);
        let mut held = Reservations::default();
        for def in store.mdevs()? {
            let Ok(parent) = def.parent.parse::<PciAddress>() else {
                continue;
            };
            if !on_gpu(parent) {
                continue;
            }
            if parent != gpu.address {
                held.vfs.push(parent);
            }
            if backend::running(paths, VgpuHandle::Mdev(def.uuid))?.is_none() {
                *held.pending.entry(def.mdev_type).or_default() += 1;
            }
        }
        for def in store.vf_vgpus()? {
            if !on_gpu(def.vf) {
                continue;
            }
            held.vfs.push(def.vf);
            if backend::running(paths, VgpuHandle::Vf(def.vf))?.is_none() {
                *held.pending.entry(def.type_id.to_string()).or_default() += 1;
            }
        }
        for def in store.bindings()? {
            if on_gpu(def.address) && def.address != gpu.address {
                held.vfs.push(def.address);
            }
        }
        held.vfs.sort();
        held.vfs.dedup();
        Ok(held)
    }

    /// Where the next vGPU of type `wanted` goes on `gpu`, leaving definitions their room.
    pub(crate) fn place(&self, gpu: &Gpu, wanted: &str) -> Result<Placement> {
        self.place_avoiding(gpu, wanted, &[])
    }

    /// [`Operation::place`], on none of the parents (or VFs) in `avoid`.
    pub(crate) fn place_avoiding(
        &self,
        gpu: &Gpu,
        wanted: &str,
        avoid: &[PciAddress],
    ) -> Result<Placement> {
        // A MIG-backed type is not offered, or has no room, while MIG mode is off or no GPU
        // instance of its profile is free: say which rather than that it is unknown or full.
        let mig_reason = |name: &str, otherwise: Error| {
            mig::refusal(self.paths(), self.nvml().get(), gpu, name).unwrap_or(otherwise)
        };
        let type_id = match backend::placement_type(gpu, wanted) {
            Err(err @ Error::UnknownType { .. }) => return Err(mig_reason(wanted, err)),
            other => other?,
        };
        let mig_name = gpu
            .types
            .iter()
            .find(|t| t.id == type_id && t.mig.is_some())
            .and_then(|t| t.name.clone());
        // Without NVML a full GPU is just full.
        let full = |err: Error| match &mig_name {
            Some(name) => match mig::refusal(self.paths(), self.nvml().get(), gpu, name) {
                Some(Error::Nvml(NvmlError::NotLoaded { .. })) | None => err,
                Some(reason) => reason,
            },
            None => err,
        };
        let reserved = self.reservations(gpu)?;
        let room = backend::room(self.paths(), gpu, &type_id, &reserved)?;
        let no_room = |available| Error::NoCapacity {
            gpu: gpu.address,
            type_id: type_id.clone(),
            asked: 1,
            available,
            reserved: reserved.holding_back(gpu, &type_id),
            path: self.paths().pci_device(&gpu.address),
        };
        if room == 0 {
            return Err(full(no_room(0)));
        }
        for placement in backend::candidates(gpu, &type_id, &reserved)? {
            if !avoid.contains(&placement.device()) && backend::fits(self.paths(), &placement)? {
                return Ok(placement);
            }
        }
        Err(full(no_room(0)))
    }
}
