//! What an NVIDIA GPU's vGPUs are scheduled and cleared by: the vGPU scheduler's policy and
//! time slice (NVML), the size mode, and whether the driver clears a vGPU's frame buffer when
//! it is freed (`RMDisableScrubOnFree` in `/proc/driver/nvidia/params`). NVIDIA's vGPU user
//! guide documents the key's effect, not a guarantee that freed frame buffer is zeroed, and
//! NVML has no field for it.

use serde::Serialize;

use crate::model::driver_params::{SCRUB_KEY, Scope};
use crate::model::sizes::SizeMode;
use crate::model::{Gpu, NVIDIA_VENDOR_ID};

use super::{Fact, NvmlHostFacts, Source, Status};

/// Whether a freed vGPU's frame buffer is cleared before the next vGPU gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scrub {
    /// `not-provided` when scrubbing is off, `partial` at the driver's default, `unknown`
    /// when the driver's parameters could not be read.
    pub status: Status,
    /// The `scrub-on-free` fact (`on`, `off`) and where it was set.
    pub fact: Fact,
    /// What remains, in words.
    pub residual_risk: String,
}

/// The scheduling and clearing of one NVIDIA GPU's vGPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvidiaReport {
    /// `vgpu-scheduler`, `vgpu-timeslice` (NVML) and `size-mode` (`equal`, `mixed`).
    pub facts: Vec<Fact>,
    /// Frame-buffer scrubbing on free.
    pub scrub: Scrub,
}

fn fact(name: &'static str, value: Result<String, String>, source: Source) -> Fact {
    match value {
        Ok(value) => Fact {
            name,
            value: Some(value),
            source,
            detail: None,
        },
        Err(why) => Fact {
            name,
            value: None,
            source,
            detail: Some(why),
        },
    }
}

/// The report of `gpu` when it is NVIDIA's, from NVML's facts and the driver's parameters
/// that `nvml` carries.
pub(super) fn report(gpu: &Gpu, nvml: &NvmlHostFacts) -> Option<NvidiaReport> {
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
        return None;
    }
    let nvml_facts = nvml.gpus.get(&gpu.address);
    let missing = || Err(nvml.missing.clone());
    let scheduler = nvml_facts.map_or_else(missing, |f| f.scheduler.clone());
    let timeslice = nvml_facts.map_or_else(missing, |f| f.timeslice.clone());
    // NVML's mode where it reports one; one size per GPU elsewhere.
    let (size_mode, size_source) = match gpu.size_mode {
        Some(SizeMode::Mixed) => (
            "mixed: vGPUs of several sizes share the GPU's time slices; fixed share is not \
             available",
            Source::Nvml,
        ),
        Some(SizeMode::Equal) => ("equal", Source::Nvml),
        None => ("equal", Source::Discovery),
    };
    Some(NvidiaReport {
        facts: vec![
            fact("vgpu-scheduler", scheduler, Source::Nvml),
            fact("vgpu-timeslice", timeslice, Source::Nvml),
            fact("size-mode", Ok(size_mode.to_owned()), size_source),
        ],
        scrub: scrub(gpu, nvml),
    })
}

fn scrub(gpu: &Gpu, nvml: &NvmlHostFacts) -> Scrub {
    let Some(registry) = &nvml.driver_params else {
        return Scrub {
            status: Status::Unknown,
            fact: fact(
                "scrub-on-free",
                Err("the NVIDIA driver's parameters could not be read".to_owned()),
                Source::Procfs,
            ),
            residual_risk: "Whether the driver clears a freed vGPU's frame buffer could not be \
                            read."
                .to_owned(),
        };
    };
    let (disabled, scope) = registry.scrub_disabled(gpu.address);
    let detail = match scope {
        None => format!("{SCRUB_KEY} is not set"),
        Some(Scope::Global) => format!("{SCRUB_KEY} in RegistryDwords"),
        Some(Scope::Device) => format!("{SCRUB_KEY} in RegistryDwordsPerDevice"),
    };
    let (status, value, risk) = match disabled {
        true => (
            Status::NotProvided,
            "off",
            "frame buffer is not cleared when a vGPU is freed",
        ),
        false => (
            Status::Partial,
            "on",
            "scrub on free (driver default); NVIDIA does not document a guarantee",
        ),
    };
    Scrub {
        status,
        fact: Fact {
            name: "scrub-on-free",
            value: Some(value.to_owned()),
            source: Source::Procfs,
            detail: Some(detail),
        },
        residual_risk: risk.to_owned(),
    }
}
