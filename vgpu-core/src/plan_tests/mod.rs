//! Unit tests of the planner, placement and the file readers, on in-memory hosts
//! ([`crate::plan::testing::fleet`]) and files written inline.

#![allow(clippy::unwrap_used)]

mod capacity;
mod files;
mod geometry;
mod mig;
mod place;
mod planner;
mod quotas;
mod refusals;
mod scheduler;

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::model::pci::PciAddress;
use crate::model::{Gpu, Inventory};
use crate::plan::desired::{Desired, DesiredFile, Format};
use crate::plan::place::Pick;
use crate::plan::testing::fleet::{self, Model};
use crate::plan::{DefinitionSet, HostState};
use crate::testing::addr;

/// A host with these GPUs, no definitions and nothing held.
fn host(gpus: Vec<Gpu>) -> HostState {
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
fn toml(text: &str) -> Desired {
    let mut file = DesiredFile::parse("host.toml", Format::HostToml, text).unwrap();
    file.configs.remove(0)
}

/// The config `name` of a vgpu-device-manager text.
fn yaml(text: &str, name: &str) -> Desired {
    let file = DesiredFile::parse("config.yaml", Format::DeviceManagerYaml, text).unwrap();
    file.config(Some(name)).unwrap().clone()
}

fn gpu(model: Model, address: &str) -> Gpu {
    fleet::gpu(model, addr(address), Some(0))
}

fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn vf(pf: &str, index: u32) -> PciAddress {
    fleet::vf_address(addr(pf), index).unwrap()
}

const L40S: &str = "0000:41:00.0";
const T4: &str = "0000:3b:00.0";
const FLEX: &str = "0000:4d:00.0";
const GVTG: &str = "0000:00:02.0";

const L40S_BY_MODEL: &str =
    "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"L40S\"\n";

/// A T4 holding `count` vGPUs of `type_id` (mdev UUIDs 1, 2, ...), not defined.
fn t4_holding(type_id: &str, count: u32) -> crate::plan::HostState {
    let mut state = host(vec![gpu(Model::T4, T4)]);
    for _ in 0..count {
        let pick = Pick {
            gpu: addr(T4),
            type_id: type_id.to_owned(),
            type_name: None,
            framebuffer_mib: None,
            vf: None,
        };
        fleet::record(&mut state.inventory, &pick);
    }
    state
}
