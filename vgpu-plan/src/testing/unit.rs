//! What this crate's unit tests share: hosts of [`fleet`] GPUs, configs written inline, and
//! the GPUs' addresses.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::fleet::{self, Model};
use crate::desired::{Desired, DesiredFile, Format};
use crate::model::holder::{Holder, Tenant};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, Inventory};
use crate::place::{Pick, PlaceRequest, PlaceWant};
use crate::tenants::Holding;
use crate::{DefinitionSet, HostState};

/// The PCI address `text`; a test's own text, so a bad one is the test's mistake.
pub(crate) fn addr(text: &str) -> PciAddress {
    match text.parse() {
        Ok(address) => address,
        Err(err) => panic!("fixture address {text:?}: {err}"),
    }
}

/// A host with these GPUs, no definitions and nothing held.
pub(crate) fn host(gpus: Vec<Gpu>) -> HostState {
    HostState {
        inventory: Inventory {
            gpus,
            warnings: Vec::new(),
        },
        definitions: DefinitionSet::default(),
        holds: BTreeMap::new(),
        local_memory_mib: BTreeMap::new(),
        ..HostState::default()
    }
}

/// The only config of a `host.toml` text.
pub(crate) fn toml(text: &str) -> Desired {
    let mut file = DesiredFile::parse("host.toml", Format::HostToml, text).unwrap();
    file.configs.remove(0)
}

/// The config `name` of a vgpu-device-manager text.
pub(crate) fn yaml(text: &str, name: &str) -> Desired {
    let file = DesiredFile::parse("config.yaml", Format::DeviceManagerYaml, text).unwrap();
    file.config(Some(name)).unwrap().clone()
}

pub(crate) fn gpu(model: Model, address: &str) -> Gpu {
    fleet::gpu(model, addr(address), Some(0))
}

pub(crate) fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

pub(crate) fn vf(pf: &str, index: u32) -> PciAddress {
    fleet::vf_address(addr(pf), index).unwrap()
}

pub(crate) const L40S: &str = "0000:41:00.0";
pub(crate) const T4: &str = "0000:3b:00.0";
pub(crate) const FLEX: &str = "0000:4d:00.0";
pub(crate) const GVTG: &str = "0000:00:02.0";

pub(crate) const L40S_BY_MODEL: &str =
    "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"L40S\"\n";

/// A T4 holding `count` vGPUs of `type_id` (mdev UUIDs 1, 2, ...), not defined.
pub(crate) fn t4_holding(type_id: &str, count: u32) -> HostState {
    let mut state = host(vec![gpu(Model::T4, T4)]);
    for _ in 0..count {
        let pick = Pick {
            gpu: addr(T4),
            type_id: type_id.to_owned(),
            type_name: None,
            framebuffer_mib: None,
            vf: None,
            needs_scheduler: None,
            placement_id: None,
        };
        fleet::record(&mut state.inventory, &pick);
    }
    state
}

/// `count` vGPUs of `gib` GiB, Q series, exact size.
pub(crate) fn by_size(count: u32, gib: u64) -> PlaceRequest {
    PlaceRequest {
        count,
        want: PlaceWant::Framebuffer {
            mib: gib * 1024,
            series: 'Q',
            round_up: false,
        },
        numa_node: None,
    }
}

/// The GPUs of `picks`, in order.
pub(crate) fn gpus(picks: &[Pick]) -> Vec<PciAddress> {
    picks.iter().map(|p| p.gpu).collect()
}

/// What `domain` of `tenant` (`""`: none) holds on `gpu`: `framebuffer_mib` of a vGPU
/// partitioned in hardware or not, on a GPU whose service is the default.
pub(crate) fn holding(
    tenant: &str,
    domain: &str,
    gpu: &str,
    framebuffer_mib: u64,
    hardware: bool,
) -> Holding {
    Holding {
        holder: Holder {
            domain: domain.to_owned(),
            uuid: Uuid::nil(),
            tenant: Some(tenant).filter(|t| !t.is_empty()).map(Tenant::label),
        },
        gpu: addr(gpu),
        framebuffer_mib,
        hardware,
        service: crate::tenants::Service::default(),
    }
}

/// Puts the L40S at `address` of `state`, with its vGPUs recorded, in mixed-size mode, its
/// vGPUs holding the slots of `held` (id, GiB): it lists every time-sliced type, as NVIDIA's
/// driver does in that mode, each creatable at the free placements of its size. `reported` is
/// the placement NVML gives each vGPU it matches (none for a VF's vGPU).
pub(crate) fn mixed_l40s_holding(
    state: &mut HostState,
    address: &str,
    held: &[(u32, u32)],
    reported: BTreeMap<crate::model::VgpuHandle, u32>,
) {
    let mut map = crate::placement::SlotMap::new(48).unwrap();
    for &(id, gib) in held {
        map.place(id, gib).unwrap();
    }
    let gpu = state
        .inventory
        .gpus
        .iter_mut()
        .find(|g| g.address == addr(address));
    let gpu = gpu.unwrap();
    gpu.types = fleet::gpu(Model::L40s, gpu.address, Some(0)).types;
    for t in &mut gpu.types {
        let in_use = gpu.vgpus.iter().filter(|v| v.type_id == t.id).count();
        t.in_use = u32::try_from(in_use).unwrap();
        t.offered = 31;
        t.recount();
    }
    let creatable = gpu
        .types
        .iter()
        .filter_map(|t| {
            let gib = u32::try_from(t.framebuffer_mib? / 1024).ok()?;
            Some((t.id.clone(), map.free_placements(gib).ok()?))
        })
        .collect();
    let facts = crate::model::sizes::SizeFacts {
        mode: crate::model::sizes::SizeMode::Mixed,
        region: Some(48),
        creatable,
        placements: reported,
    };
    state.sizes.insert(addr(address), facts);
}
