//! What this crate's unit tests share: hosts of [`fleet`] GPUs, configs written inline, and
//! the GPUs' addresses.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::fleet::{self, Model};
use crate::desired::{Desired, DesiredFile, Format};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, Inventory};
use crate::place::Pick;
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
        };
        fleet::record(&mut state.inventory, &pick);
    }
    state
}
