//! Size-mode definitions: `etc/vgpu/size-mode/<gpu>.json`, the size mode an NVIDIA GPU is to
//! have. The driver forgets the mode at each reboot and driver reload, and takes a new one
//! only while the GPU holds no vGPU (vGPU user guide, "Mixed-Size Mode"), so `restore` sets
//! it again before it makes the GPU's vGPUs.
//!
//! ```json
//! {"version": 1, "mode": "mixed"}
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::state::format::{FORMAT_VERSION, decode_own, encode_own};

const SIZE_MODE_DIR: &str = "size-mode";

/// The size mode an NVIDIA GPU is to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeModeDefinition {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its mode.
    pub mode: SizeMode,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeModeFile {
    version: u32,
    mode: SizeMode,
}

fn encode(path: &Path, d: &SizeModeDefinition) -> Result<Vec<u8>> {
    let file = SizeModeFile {
        version: FORMAT_VERSION,
        mode: d.mode,
    };
    encode_own(path, &file)
}

fn decode(path: &Path, gpu: PciAddress, text: &str) -> Result<SizeModeDefinition> {
    let file: SizeModeFile = decode_own(path, text)?;
    Ok(SizeModeDefinition {
        gpu,
        mode: file.mode,
    })
}

super::own_kind!(
    /// An NVIDIA GPU's size mode.
    SizeModeKind, SIZE_MODE_DIR, SizeModeDefinition, gpu, decode, encode
);

pub(crate) use crate::model::sizes::PLACEMENT_ATTR;

impl super::Store {
    /// The size-mode definition of `gpu`; `None` when there is none.
    pub fn size_mode_of(&self, gpu: PciAddress) -> Result<Option<SizeModeDefinition>> {
        self.own_of::<SizeModeKind>(gpu)
    }

    /// The vGPUs defined at a placement on `gpu` or one of its VFs `vfs`: mediated devices
    /// with a placement attribute, and VF vGPUs with a placement. Each needs the GPU in
    /// mixed-size mode. Fails on a definition that cannot be read.
    pub fn placed_on(&self, gpu: PciAddress, vfs: &[PciAddress]) -> Result<Vec<String>> {
        let on_gpu = |parent: &str| {
            parent
                .parse::<PciAddress>()
                .is_ok_and(|p| p == gpu || vfs.contains(&p))
        };
        let mdevs = self.mdevs()?.into_iter().filter(|d| {
            on_gpu(&d.parent) && d.attrs.iter().any(|(name, _)| name == PLACEMENT_ATTR)
        });
        let vf_vgpus = self
            .vf_vgpus()?
            .into_iter()
            .filter(|d| d.gpu == gpu && d.placement.is_some());
        Ok(mdevs
            .map(|d| d.uuid.to_string())
            .chain(vf_vgpus.map(|d| d.vf.to_string()))
            .collect())
    }

    /// Fails with [`StateError::SizeModeDisagrees`] when `gpu` would be defined in equal-size
    /// mode and vGPUs on it at placements: `mode` is its size-mode definition to be (`None`:
    /// the one it has), `placed` the vGPUs defined at a placement with those to be defined.
    pub fn check_size_mode_agrees(
        &self,
        gpu: PciAddress,
        mode: Option<SizeMode>,
        placed: Vec<String>,
    ) -> Result<()> {
        let mode = match mode {
            Some(mode) => Some(mode),
            None => self.size_mode_of(gpu)?.map(|d| d.mode),
        };
        if mode != Some(SizeMode::Equal) || placed.is_empty() {
            return Ok(());
        }
        Err(StateError::SizeModeDisagrees {
            gpu,
            path: self.own_path(SIZE_MODE_DIR, gpu),
            placed,
        }
        .into())
    }
}
