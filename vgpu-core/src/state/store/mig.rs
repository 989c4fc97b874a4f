//! MIG geometry definitions: `etc/vgpu/mig/<gpu>.json`, the MIG mode and GPU instances a GPU
//! is to have. GPU instances do not survive a reboot or a driver reload (NVIDIA's MIG user
//! guide, "Persistence"), so `restore` makes them again at the same placements, before the
//! MIG-backed vGPUs that need them. Each instance is written here before NVML makes it.
//!
//! ```json
//! {"version": 1, "enabled": true, "instances": [{"profile": "1g.18gb", "start": 0}]}
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::{Error, Result};
use crate::model::pci::PciAddress;
use crate::state::format::{FORMAT_VERSION, decode_own, definition, encode_own};

const MIG_DIR: &str = "mig";

/// The MIG mode and GPU instances a GPU is to have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigDefinition {
    /// The GPU.
    pub gpu: PciAddress,
    /// Whether MIG mode is on.
    pub enabled: bool,
    /// The GPU instances, each at its placement.
    pub instances: Vec<MigInstanceDefinition>,
}

/// One GPU instance of a [`MigDefinition`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstanceDefinition {
    /// Its profile (`1g.18gb`).
    pub profile: String,
    /// Its first memory slice.
    pub start: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigFile {
    version: u32,
    enabled: bool,
    #[serde(default)]
    instances: Vec<MigInstanceDefinition>,
}

fn encode(path: &Path, d: &MigDefinition) -> Result<Vec<u8>> {
    check(path, d.enabled, &d.instances)?;
    let mut instances = d.instances.clone();
    instances.sort();
    encode_own(
        path,
        &MigFile {
            version: FORMAT_VERSION,
            enabled: d.enabled,
            instances,
        },
    )
}

fn decode(path: &Path, gpu: PciAddress, text: &str) -> Result<MigDefinition> {
    let file: MigFile = decode_own(path, text)?;
    check(path, file.enabled, &file.instances)?;
    Ok(MigDefinition {
        gpu,
        enabled: file.enabled,
        instances: file.instances,
    })
}

/// Instances need MIG mode on, and two may not start at the same slice.
fn check(path: &Path, enabled: bool, instances: &[MigInstanceDefinition]) -> Result<()> {
    if !enabled && !instances.is_empty() {
        return Err(definition(
            path,
            "GPU instances are defined with MIG mode off".to_owned(),
        ));
    }
    for (i, a) in instances.iter().enumerate() {
        if instances[i + 1..].iter().any(|b| b.start == a.start) {
            return Err(definition(
                path,
                format!("two GPU instances start at slice {}", a.start),
            ));
        }
    }
    Ok(())
}

super::own_kind!(
    /// A GPU's MIG mode and GPU instances.
    Mig, MIG_DIR, MigDefinition, gpu, decode, encode
);

impl Store {
    /// Every MIG definition that can be read, sorted by GPU, and an error for each file that
    /// cannot.
    pub fn migs_lenient(&self) -> (Vec<MigDefinition>, Vec<Error>) {
        self.own_lenient::<Mig>()
    }

    /// The MIG definition of `gpu`; `None` when there is none.
    pub fn mig_of(&self, gpu: PciAddress) -> Result<Option<MigDefinition>> {
        self.own_of::<Mig>(gpu)
    }

    /// Writes the MIG definition of `d.gpu`, replacing any.
    pub(crate) fn define_mig(&self, d: &MigDefinition) -> Result<()> {
        self.define_own::<Mig>(d)
    }

    /// Removes the MIG definition of `gpu`; `false` when there was none.
    pub(crate) fn undefine_mig(&self, gpu: PciAddress) -> Result<bool> {
        self.undefine_own::<Mig>(gpu)
    }
}
