//! What definitions hold on one GPU, from the definitions and the GPU alone.

use std::collections::BTreeMap;

use super::DefinitionSet;
use crate::model::pci::PciAddress;
use crate::model::{Gpu, VgpuHandle};

/// What `defs` hold on `gpu` for vGPUs that are not running now (those `gpu.vgpus` does not
/// list), and the VFs they name. Pure.
pub fn reservations(defs: &DefinitionSet, gpu: &Gpu) -> Reservations {
    let on_gpu = |a: PciAddress| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a);
    let running = |id: VgpuHandle| gpu.vgpus.iter().any(|v| v.id == id);
    let mut held = Reservations::default();
    for def in &defs.mdevs {
        let Ok(parent) = def.parent.parse::<PciAddress>() else {
            continue;
        };
        if !on_gpu(parent) {
            continue;
        }
        if parent != gpu.address {
            held.vfs.push(parent);
        }
        if !running(VgpuHandle::Mdev(def.uuid)) {
            *held.pending.entry(def.mdev_type.clone()).or_default() += 1;
        }
    }
    for def in &defs.vf_vgpus {
        if !(def.gpu == gpu.address || on_gpu(def.vf)) {
            continue;
        }
        held.vfs.push(def.vf);
        if !running(VgpuHandle::Vf(def.vf)) {
            *held.pending.entry(def.type_id.to_string()).or_default() += 1;
        }
    }
    for def in &defs.bindings {
        if on_gpu(def.address) && def.address != gpu.address {
            held.vfs.push(def.address);
        }
    }
    held.vfs.sort();
    held.vfs.dedup();
    held
}

/// The names definitions recorded for the vendor-VFIO types of `gpu`, by type id.
pub(crate) fn defined_names(defs: &DefinitionSet, gpu: &Gpu) -> BTreeMap<String, String> {
    defs.vf_vgpus
        .iter()
        .filter(|d| d.gpu == gpu.address)
        .filter_map(|d| Some((d.type_id.to_string(), d.type_name.clone()?)))
        .collect()
}

/// What definitions hold on one GPU for vGPUs that are not running now: new vGPUs must leave
/// them room, or `restore` could not bring the defined ones back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservations {
    /// VFs that definitions name: never placed on.
    pub vfs: Vec<PciAddress>,
    /// Defined vGPUs that are not running, by type id: capacity they are owed.
    pub pending: BTreeMap<String, u32>,
}

impl Reservations {
    /// How many instances of `type_id` definitions are owed.
    pub fn pending(&self, type_id: &str) -> u32 {
        self.pending.get(type_id).copied().unwrap_or(0)
    }
}
