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

use crate::error::Result;
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
