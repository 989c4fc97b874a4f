//! The size mode of an NVIDIA GPU's time-sliced vGPUs, read and set through NVML
//! (`nvmlDeviceGetVgpuHeterogeneousMode`, `nvmlDeviceSetVgpuHeterogeneousMode`; NVIDIA Virtual
//! GPU Software User Guide, "Mixed-Size Mode for Time-Sliced vGPUs"). NVML takes a new mode
//! only while the GPU holds no vGPU: a change is refused before NVML is asked when vGPUs
//! exist, and NVML's own refusal is passed on otherwise. The driver forgets the mode at each
//! reload and reboot.

#[cfg(feature = "nvml")]
use std::collections::BTreeMap;

use serde::Serialize;

use crate::capacity::SizeFacts;
use crate::error::NvmlError;
use crate::model::Gpu;
use crate::model::nvml::Fact;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;

/// What `size-mode` changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeModeChange {
    /// The GPU.
    pub gpu: PciAddress,
    /// The mode before.
    pub before: SizeMode,
    /// The mode after, read back.
    pub after: SizeMode,
    /// Whether NVML was asked to change anything (false when it was already so).
    pub changed: bool,
}

impl crate::nvml::Nvml {
    /// What NVML says of `gpu`'s size mode, for a GPU that may run mixed-size mode
    /// (`host_state::may_mix`): the mode, and in mixed-size mode the region, each time-sliced
    /// type's creatable placements (keyed by the inventory's type ids), and each mediated
    /// device's placement. `None` without NVML or a mode (`NOT_SUPPORTED`). Only these calls
    /// are made: a full read of the GPU asks NVML much more.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn size_facts(&self, gpu: &Gpu) -> Option<SizeFacts> {
        if !super::host_state::may_mix(gpu) {
            return None;
        }
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return read_facts(nvml, gpu);
        }
        None
    }

    /// The size mode of the GPU at `gpu`: unavailable for a GPU without mixed-size mode
    /// (`NOT_SUPPORTED`), an older driver, or NVML not loaded.
    pub fn size_mode(&self, gpu: PciAddress) -> Fact<SizeMode> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            let device = match super::read::device_at(nvml, gpu) {
                Ok(device) => device,
                Err(why) => return Fact::Unavailable(why),
            };
            return super::read::fact(
                "nvmlDeviceGetVgpuHeterogeneousMode",
                vgpu_nvml_ext::vgpu_heterogeneous_mode(&device),
            )
            .map(size_mode_of);
        }
        #[cfg(not(feature = "nvml"))]
        let _ = gpu;
        self.not_loaded()
    }

    /// Sets the size mode of `gpu` to `mode`, refused while `vgpus` (the vGPUs on it, by
    /// handle) is not empty, then reads it back. Nothing is asked of NVML when the GPU is
    /// already so. Callers go through [`Manager::set_size_mode`](crate::Manager::set_size_mode).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn set_size_mode(
        &self,
        gpu: PciAddress,
        mode: SizeMode,
        vgpus: &[String],
    ) -> Result<SizeModeChange, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            let call = |why| NvmlError::Call { gpu, why };
            let before = self
                .size_mode(gpu)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            if before == mode {
                return Ok(SizeModeChange {
                    gpu,
                    before,
                    after: before,
                    changed: false,
                });
            }
            if !vgpus.is_empty() {
                return Err(NvmlError::SizeModeInUse {
                    gpu,
                    vgpus: vgpus.to_vec(),
                });
            }
            let device = crate::nvml::read::device_at(nvml, gpu).map_err(call)?;
            vgpu_nvml_ext::set_vgpu_heterogeneous_mode(&device, mode == SizeMode::Mixed).map_err(
                |err| {
                    call(crate::nvml::read::unavailable(
                        "nvmlDeviceSetVgpuHeterogeneousMode",
                        &err,
                    ))
                },
            )?;
            let after = self
                .size_mode(gpu)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            return Ok(SizeModeChange {
                gpu,
                before,
                after,
                changed: true,
            });
        }
        Err(self.needed_for(format!("set the size mode of {gpu}")))
    }
}

/// [`Nvml::size_facts`](crate::nvml::Nvml::size_facts) from a loaded NVML.
#[cfg(feature = "nvml")]
fn read_facts(nvml: &nvml_wrapper::Nvml, gpu: &Gpu) -> Option<SizeFacts> {
    use super::read::INVALID_GPU_INSTANCE_PROFILE_ID;
    let device = super::read::device_at(nvml, gpu.address).ok()?;
    let mode = size_mode_of(vgpu_nvml_ext::vgpu_heterogeneous_mode(&device).ok()?);
    let mut facts = SizeFacts {
        mode,
        region: None,
        creatable: BTreeMap::new(),
        placements: BTreeMap::new(),
    };
    if mode == SizeMode::Equal {
        return Some(facts);
    }
    // A failed call leaves what it would have said out, and is logged: capacity gives a type
    // with no creatable placements no room, and nothing is made of it.
    let unread = |call: &str, err: &dyn std::fmt::Display| {
        tracing::warn!(gpu = %gpu.address, "{call}: {err}");
    };
    let types = device.vgpu_supported_types().unwrap_or_else(|err| {
        unread("nvmlDeviceGetSupportedVgpus", &err);
        Vec::new()
    });
    for ty in types {
        match ty.instance_profile_id() {
            Ok(id) if id == INVALID_GPU_INSTANCE_PROFILE_ID => {}
            // MIG-backed: no placements.
            Ok(_) => continue,
            Err(err) => {
                unread("nvmlVgpuTypeGetGpuInstanceProfileId", &err);
                continue;
            }
        }
        let list = match vgpu_nvml_ext::vgpu_type_creatable_placements(&device, ty.id()) {
            Ok(list) => list,
            Err(err) => {
                unread("nvmlDeviceGetVgpuTypeCreatablePlacements", &err);
                continue;
            }
        };
        facts.region = facts.region.max(Some(list.size));
        let id = gpu
            .types
            .iter()
            .find(|own| crate::model::nvml_type_id(&own.id) == Some(ty.id()))
            .map_or_else(|| ty.id().to_string(), |own| own.id.clone());
        facts.creatable.insert(id, list.ids);
    }
    let instances = vgpu_nvml_ext::active_vgpu_instances(&device).unwrap_or_else(|err| {
        unread("nvmlDeviceGetActiveVgpus", &err);
        Vec::new()
    });
    for instance in instances {
        let vgpu = nvml_wrapper::vgpu::VgpuInstance::new(instance, &device);
        let Some(uuid) = vgpu
            .mdev_uuid()
            .ok()
            .and_then(|text| uuid::Uuid::try_parse(text.trim()).ok())
        else {
            continue;
        };
        let handle = crate::model::VgpuHandle::Mdev(uuid);
        if !gpu.vgpus.iter().any(|v| v.id == handle) {
            continue;
        }
        match vgpu_nvml_ext::vgpu_instance_placement_id(nvml, instance) {
            Ok(id) => {
                facts.placements.insert(handle, id);
            }
            Err(err) => unread("nvmlVgpuInstanceGetPlacementId", &err),
        }
    }
    Some(facts)
}

/// The model's size mode for the binding's.
#[cfg(feature = "nvml")]
pub(crate) fn size_mode_of(mode: vgpu_nvml_ext::VgpuSizeMode) -> SizeMode {
    match mode {
        vgpu_nvml_ext::VgpuSizeMode::Equal => SizeMode::Equal,
        vgpu_nvml_ext::VgpuSizeMode::Mixed => SizeMode::Mixed,
    }
}
