//! NVIDIA's size modes of time-sliced vGPUs: one size per GPU (`equal`), or several sizes at
//! placements in a region of 1-GiB slots (`mixed`, vGPU 17 and later). NVIDIA Virtual GPU
//! Software User Guide, "Mixed-Size Mode for Time-Sliced vGPUs" and "vGPU Placements".

use std::fmt;
use std::str::FromStr;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::VgpuHandle;

const MIB_PER_GIB: u64 = 1024;

/// The file NVIDIA's driver takes a vGPU's placement in, under a mediated device or a
/// vendor-VFIO VF: `nvidia/vgpu_params`, written before the vGPU starts. A mediated device's
/// definition keeps it among its attributes.
pub const PLACEMENT_ATTR: &str = "nvidia/vgpu_params";

/// The line `nvidia/vgpu_params` takes for a vGPU's placement in mixed-size mode
/// (NVIDIA Virtual GPU Software User Guide, "vGPU Placements").
pub fn placement_param(id: u32) -> String {
    format!("vgpu-placement-id={id}")
}

/// The placement id a `vgpu_params` line names (`vgpu-placement-id=N`, among other
/// `key=value` words); `None` when it names none.
pub fn placement_of_param(line: &str) -> Option<u32> {
    line.split([',', ' ', '\n'])
        .find_map(|word| word.trim().strip_prefix("vgpu-placement-id="))
        .and_then(|id| id.parse().ok())
}

/// The placement a mediated device's defined attributes name ([`PLACEMENT_ATTR`]).
pub fn placement_of_attrs(attrs: &[(String, String)]) -> Option<u32> {
    let (_, value) = attrs.iter().find(|(name, _)| name == PLACEMENT_ATTR)?;
    placement_of_param(value)
}

/// How a GPU sizes its time-sliced vGPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizeMode {
    /// Equal-size mode: every vGPU on the GPU is of one type (the driver's default).
    Equal,
    /// Mixed-size mode: types of several sizes share the GPU, each vGPU at a placement.
    Mixed,
}

impl SizeMode {
    /// Both modes, equal first.
    pub const ALL: [SizeMode; 2] = [SizeMode::Equal, SizeMode::Mixed];

    /// The word `vgpuctl` and host.toml use: `equal` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            SizeMode::Equal => "equal",
            SizeMode::Mixed => "mixed",
        }
    }
}

impl fmt::Display for SizeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SizeMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        SizeMode::ALL
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| format!("size mode {text:?} is neither \"equal\" nor \"mixed\""))
    }
}

/// A type's placement size: its frame buffer in whole GiB, rounded up (a 1-GiB slot holds at
/// most 1 GiB). `None` for no frame buffer.
pub fn placement_size(framebuffer_mib: u64) -> Option<u32> {
    if framebuffer_mib == 0 {
        return None;
    }
    u32::try_from(framebuffer_mib.div_ceil(MIB_PER_GIB)).ok()
}

/// What NVML says of a GPU's size mode and placements (`nvmlDeviceGetVgpuHeterogeneousMode`,
/// `nvmlDeviceGetVgpuTypeCreatablePlacements`, `nvmlVgpuInstanceGetPlacementId`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeFacts {
    /// The mode now.
    pub mode: SizeMode,
    /// The GPU's placement region in 1-GiB slots: its largest time-sliced type's placement
    /// size (48 on an L40S).
    pub region: Option<u32>,
    /// The placement ids at which a vGPU of each type can be created now, by type id: the
    /// driver's own answer in mixed-size mode.
    pub creatable: BTreeMap<String, Vec<u32>>,
    /// Each vGPU's placement id, where NVML reports it, or, for a VF's vGPU NVML does not
    /// match, where the VF's `nvidia/vgpu_params` names it.
    pub placements: BTreeMap<VgpuHandle, u32>,
}

impl SizeFacts {
    /// Whether the GPU runs in mixed-size mode now.
    pub fn mixed(&self) -> bool {
        self.mode == SizeMode::Mixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_of_param_reads_what_placement_param_writes_among_other_words() {
        assert_eq!(placement_of_param(&placement_param(17)), Some(17));
        assert_eq!(
            placement_of_param("frame_rate_limiter=0, vgpu-placement-id=24\n"),
            Some(24)
        );
        assert_eq!(placement_of_param("frame_rate_limiter=0"), None);
        assert_eq!(placement_of_param("vgpu-placement-id=x"), None);
        let attrs = |name: &str| vec![(name.to_owned(), placement_param(5))];
        assert_eq!(placement_of_attrs(&attrs(PLACEMENT_ATTR)), Some(5));
        assert_eq!(placement_of_attrs(&attrs("nvidia/other")), None);
    }

    #[test]
    fn size_mode_names_parse_back_and_others_are_refused() {
        for mode in SizeMode::ALL {
            assert_eq!(mode.name().parse::<SizeMode>(), Ok(mode));
        }
        assert_eq!(
            "heterogeneous".parse::<SizeMode>(),
            Err("size mode \"heterogeneous\" is neither \"equal\" nor \"mixed\"".to_owned())
        );
    }

    #[test]
    fn placement_size_rounds_up_to_whole_gib() {
        assert_eq!(placement_size(49_152), Some(48));
        assert_eq!(placement_size(1_024), Some(1));
        assert_eq!(placement_size(1_000), Some(1));
        assert_eq!(placement_size(12_289), Some(13));
        assert_eq!(placement_size(0), None);
    }
}
