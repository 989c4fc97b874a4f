//! Where a new vGPU goes on one GPU: the room [`capacity::room`] gives, then the first place
//! that takes it.

use super::session::Operation;
use crate::backend::{self, NewVgpu, Placement};
use crate::capacity::{self, DefinitionSet, HostState, Limit, Room};
use crate::error::{Error, Result};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, Inventory, NVIDIA_VENDOR_ID};
use crate::nvml::{host_state, mig};
use crate::state::store::{add_recorded_offers, record_offers};

/// One GPU's room for one type, as [`Operation::room_for`] finds it.
pub(crate) struct GpuRoom {
    /// The host state it was counted from: the GPU, settled, and every definition.
    pub(crate) state: HostState,
    /// The type's id on the GPU.
    pub(crate) type_id: String,
    /// The room.
    pub(crate) room: Room,
    /// The GPU's device directory, for errors.
    path: std::path::PathBuf,
}

impl GpuRoom {
    /// The GPU, with its types' identities completed.
    pub(crate) fn gpu(&self) -> &Gpu {
        &self.state.inventory.gpus[0]
    }

    /// [`Error::NoCapacity`] for `asked` vGPUs where `available` fit.
    pub(crate) fn refusal(&self, asked: u32, available: u32) -> Error {
        let gpu = self.gpu();
        Error::NoCapacity {
            gpu: gpu.address,
            type_id: self.type_id.clone(),
            asked,
            available,
            reserved: self.room.held,
            limit: Some(self.room.limit.clone()),
            path: self.path.clone(),
        }
    }
}

/// Every definition in the operation's store.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn definitions_of(op: &Operation<'_>) -> Result<DefinitionSet> {
    let store = op.store();
    Ok(DefinitionSet {
        mdevs: store.mdevs()?,
        vf_vgpus: store.vf_vgpus()?,
        bindings: store.bindings()?,
        sriov: store.sriov()?,
    })
}

/// Whether counting `gpu`'s room needs NVML: an NVIDIA vendor-VFIO GPU with a MIG-backed type.
pub(crate) fn needs_mig_facts(gpu: &Gpu) -> bool {
    gpu.vendor_id == Some(NVIDIA_VENDOR_ID)
        && gpu.backend == Backend::NvidiaVfio
        && gpu.types.iter().any(|t| t.mig.is_some())
}

impl Operation<'_> {
    /// The GPU of `device` (the GPU itself, or one of its VFs, or a VF's mediated-device
    /// parent), read now.
    pub(crate) fn gpu_of(&self, device: PciAddress) -> Result<Gpu> {
        let pf = crate::host::pci_device::PciDevice::new(self.paths(), device)
            .physfn()?
            .unwrap_or(device);
        Ok(crate::discovery::discover_gpu(self.paths(), pf)?.0)
    }

    /// The host state [`capacity::room`] counts `gpu` from: the GPU, every definition, the
    /// offer recorded for it, and, where it has MIG-backed types, its GPU instances from NVML
    /// (loaded then only). Settled: types named from definitions, the types it supports but
    /// does not list now added, rooms counted. Records what the GPU offers now first.
    #[tracing::instrument(level = "trace", skip_all)]
    pub(crate) fn state_of(&self, gpu: &Gpu) -> Result<HostState> {
        // What the GPU offers now is what it supports under this driver, whatever comes next.
        if let Err(err) = record_offers(self.paths(), self.store(), std::slice::from_ref(gpu)) {
            tracing::warn!(gpu = %gpu.address, "cannot record the GPU's offer: {}", err.chain());
        }
        let mut state = HostState {
            inventory: Inventory {
                gpus: vec![gpu.clone()],
                warnings: Vec::new(),
            },
            definitions: definitions_of(self)?,
            ..HostState::default()
        };
        add_recorded_offers(&mut state, self.paths(), self.store());
        if needs_mig_facts(gpu) {
            if let Some(facts) = mig::facts(self.paths(), self.nvml().get(), gpu.address) {
                state.mig.insert(gpu.address, facts);
            }
        }
        if host_state::may_mix(gpu) {
            if let Some(facts) = host_state::size_facts(self.paths(), self.nvml().get(), gpu) {
                state.sizes.insert(gpu.address, facts);
            }
        }
        state.settle();
        Ok(state)
    }

    /// [`Operation::placement_id`] for the new vGPU `vgpu`, whose GPU (its parent or VF's
    /// physical function) is read now: the choice of the hook and `migrate begin`, which are
    /// told the device and not the GPU. The GPU is put back in its defined size mode first
    /// ([`Operation::mode_as_defined`]). `None` for a plain VF, or on a GPU that cannot mix.
    pub(crate) fn placed(&mut self, vgpu: &NewVgpu) -> Result<Option<u32>> {
        let (device, placement) = match vgpu {
            NewVgpu::VendorVf { vf, type_id } => (
                *vf,
                Placement::VendorVf {
                    vf: *vf,
                    type_id: *type_id,
                },
            ),
            NewVgpu::Mdev {
                parent, type_id, ..
            } => (
                *parent,
                Placement::Mdev {
                    parent: *parent,
                    type_id: type_id.clone(),
                },
            ),
            NewVgpu::PlainVf { .. } => return Ok(None),
        };
        let mut gpu = self.gpu_of(device)?;
        if !host_state::may_mix(&gpu) {
            return Ok(None);
        }
        if self.mode_as_defined(&gpu)? {
            // The mode changes what the GPU lists: read it again.
            gpu = self.gpu_of(device)?;
        }
        self.placement_id(&gpu, &placement, None)
    }

    /// The placement id for a new vGPU at `placement` on `gpu` in mixed-size mode: `asked`
    /// when the driver can create the type there, else the one that takes the least room
    /// from larger types (`capacity::new_placement`); `None` on a GPU not in mixed-size mode.
    pub(crate) fn placement_id(
        &self,
        gpu: &Gpu,
        placement: &Placement,
        asked: Option<u32>,
    ) -> Result<Option<u32>> {
        // Nothing to choose on a GPU not in mixed-size mode: NVML is asked its mode only.
        let mixed = host_state::may_mix(gpu)
            && self
                .nvml()
                .get()
                .size_mode(gpu.address)
                .value()
                .is_some_and(|m| *m == crate::model::sizes::SizeMode::Mixed);
        if !mixed && asked.is_none() {
            return Ok(None);
        }
        let type_id = match placement {
            Placement::Mdev { type_id, .. } => type_id.clone(),
            Placement::VendorVf { type_id, .. } => type_id.to_string(),
            Placement::PlainVf { .. } => crate::model::PLAIN_VF_TYPE.to_owned(),
        };
        let state = self.state_of(gpu)?;
        let settled = &state.inventory.gpus[0];
        Ok(capacity::new_placement(&state, settled, &type_id, asked)
            .map_err(crate::plan::Error::from)?)
    }

    /// The room `gpu` has for the type `wanted` names (an id, a name, `vf`), the one count
    /// every command that makes vGPUs reads.
    pub(crate) fn room_for(&self, gpu: &Gpu, wanted: &str) -> Result<GpuRoom> {
        let state = self.state_of(gpu)?;
        let settled = &state.inventory.gpus[0];
        // A MIG-backed type is not offered while MIG mode is off or no GPU instance of its
        // profile is free: say which rather than that it is unknown.
        let type_id = match backend::placement_type(settled, wanted) {
            Err(err @ Error::UnknownType { .. }) => {
                return Err(
                    mig::refusal(self.paths(), self.nvml().get(), settled, wanted).unwrap_or(err),
                );
            }
            other => other?,
        };
        let room = capacity::room(&state, settled, &type_id);
        Ok(GpuRoom {
            path: self.paths().pci_device(&settled.address),
            state,
            type_id,
            room,
        })
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
        self.place_preferring(gpu, wanted, avoid, None)
    }

    /// [`Operation::place_avoiding`], on `prefer` when it is one of the places that fit.
    pub(crate) fn place_preferring(
        &self,
        gpu: &Gpu,
        wanted: &str,
        avoid: &[PciAddress],
        prefer: Option<PciAddress>,
    ) -> Result<Placement> {
        let found = self.room_for(gpu, wanted)?;
        let settled = found.gpu();
        // A MIG-backed type bound by its GPU instances: NVML's reason, naming the instances
        // (or why NVML is not there to list them).
        let full = |err: Error| {
            let by_instances = matches!(
                found.room.limit,
                Limit::GpuInstances { .. } | Limit::MigOff { .. } | Limit::MigUnknown { .. }
            );
            let name = settled
                .types
                .iter()
                .find(|t| t.id == found.type_id)
                .and_then(|t| t.name.clone());
            match name.filter(|_| by_instances) {
                Some(name) => {
                    mig::refusal(self.paths(), self.nvml().get(), settled, &name).unwrap_or(err)
                }
                None => err,
            }
        };
        if found.room.available == 0 {
            return Err(full(found.refusal(1, 0)));
        }
        let reserved = capacity::reservations(&found.state.definitions, settled);
        let mut candidates = backend::candidates(settled, &found.type_id, &reserved)?;
        // A stable sort: the preferred place first, the others in their order.
        candidates.sort_by_key(|p| Some(p.device()) != prefer);
        for placement in candidates {
            if !avoid.contains(&placement.device()) && backend::fits(self.paths(), &placement)? {
                return Ok(placement);
            }
        }
        Err(full(found.refusal(1, 0)))
    }
}
