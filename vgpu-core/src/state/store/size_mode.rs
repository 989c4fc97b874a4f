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
use crate::model::sizes::{SizeMode, placement_of_attrs};
use crate::state::format::{FORMAT_VERSION, decode_own, encode_own};
use crate::state::store::{MdevDefinition, VfVgpuDefinition};

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

/// The vGPUs of `mdevs` and `vf_vgpus` defined at a placement on `gpu` or one of its VFs
/// `vfs`: mediated devices whose attributes name one, and VF vGPUs with one. Each needs the
/// GPU in mixed-size mode.
pub(crate) fn placed_among(
    gpu: PciAddress,
    vfs: &[PciAddress],
    mdevs: &[MdevDefinition],
    vf_vgpus: &[VfVgpuDefinition],
) -> Vec<String> {
    let on_gpu = |parent: &str| {
        parent
            .parse::<PciAddress>()
            .is_ok_and(|p| p == gpu || vfs.contains(&p))
    };
    let mdevs = mdevs
        .iter()
        .filter(|d| on_gpu(&d.parent) && placement_of_attrs(&d.attrs).is_some());
    let vf_vgpus = vf_vgpus
        .iter()
        .filter(|d| d.gpu == gpu && d.placement.is_some());
    mdevs
        .map(|d| d.uuid.to_string())
        .chain(vf_vgpus.map(|d| d.vf.to_string()))
        .collect()
}

impl super::Store {
    /// The size-mode definition of `gpu`; `None` when there is none.
    pub fn size_mode_of(&self, gpu: PciAddress) -> Result<Option<SizeModeDefinition>> {
        self.own_of::<SizeModeKind>(gpu)
    }

    /// The vGPUs defined at a placement on `gpu` or one of its VFs `vfs`: mediated devices whose
    /// attributes name one, and VF vGPUs with one. Each needs the GPU in mixed-size mode.
    /// Fails on a definition that cannot be read.
    pub fn placed_on(&self, gpu: PciAddress, vfs: &[PciAddress]) -> Result<Vec<String>> {
        Ok(placed_among(gpu, vfs, &self.mdevs()?, &self.vf_vgpus()?))
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

impl super::AllDefinitions {
    /// The GPUs whose setting definitions disagree, each with why and what to do: mixed-size
    /// mode beside the fixed-share scheduler or MIG mode on, and equal-size mode beside vGPUs
    /// defined at placements on the GPU or its VFs. Each command now refuses to define such a
    /// pair; files written before, or by hand, can still hold one, and `restore` then sets
    /// the first setting and refuses the second.
    /// `vfs_of` gives a GPU's VFs, now and once its VF count is restored.
    pub(crate) fn disagreements(
        &self,
        vfs_of: impl Fn(PciAddress) -> Vec<PciAddress>,
    ) -> Vec<(PciAddress, String)> {
        let mut found = Vec::new();
        for def in &self.size_modes {
            let gpu = def.gpu;
            let disagree = |what: &str, remedy: String| {
                (
                    gpu,
                    format!("the definitions of GPU {gpu} disagree: {what}; {remedy}"),
                )
            };
            if def.mode == SizeMode::Mixed {
                let fixed = self.scheds.iter().any(|s| {
                    s.gpu == gpu
                        && s.request.policy == crate::model::nvml::SchedulerPolicy::FixedShare
                });
                if fixed {
                    found.push(disagree(
                        "mixed-size mode and the fixed-share scheduler, which it does not take",
                        format!(
                            "define another policy (vgpuctl sched {gpu} --policy equal-share \
                             --define) or equal-size mode (vgpuctl size-mode {gpu} equal --define)"
                        ),
                    ));
                }
                if self.migs.iter().any(|m| m.gpu == gpu && m.enabled) {
                    found.push(disagree(
                        "mixed-size mode and MIG mode, which it does not go with",
                        format!("define equal-size mode (vgpuctl size-mode {gpu} equal --define)"),
                    ));
                }
                continue;
            }
            let placed = placed_among(gpu, &vfs_of(gpu), &self.mdevs, &self.vf_vgpus);
            if !placed.is_empty() {
                found.push(disagree(
                    &format!(
                        "equal-size mode and vGPUs at placements ({}), which need mixed-size mode",
                        placed.join(", ")
                    ),
                    "undefine one or the other".to_owned(),
                ));
            }
        }
        found
    }
}
