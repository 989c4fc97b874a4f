//! What NVML adds to a [`HostState`]: type names and facts sysfs lacks, each NVIDIA GPU's
//! scheduler, and for vendor-VFIO GPUs their GPU instances and supported types. The state
//! itself, and every count made from it, are `vgpu-plan`'s; reading NVML is this crate's.

use std::collections::BTreeMap;

use crate::capacity::{HostState, KnownType, SizeFacts};
use crate::host::paths::HostPaths;
use crate::model::nvml::NvmlGpu;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID};
use crate::nvml::Nvml;

/// Reads the vGPU scheduler of every NVIDIA GPU of the inventory from `nvml` (each with the
/// reason when it cannot be read).
fn read_schedulers(state: &mut HostState, nvml: &Nvml) {
    for gpu in &state.inventory.gpus {
        if gpu.vendor_id == Some(NVIDIA_VENDOR_ID) {
            state
                .schedulers
                .insert(gpu.address, nvml.scheduler_state(gpu.address));
        }
    }
}

/// Adds what NVML says: type names and facts sysfs lacks ([`Nvml::enrich`]), each NVIDIA
/// GPU's scheduler, and for NVIDIA vendor-VFIO GPUs their GPU instances and supported
/// types; then [`HostState::settle`]s the state. NVML not loaded adds nothing, and MIG-backed
/// types keep no room.
pub fn add_nvml_facts(state: &mut HostState, paths: &HostPaths, nvml: &Nvml) {
    for gpu in &mut state.inventory.gpus {
        let warnings = nvml.enrich(gpu);
        state.inventory.warnings.extend(warnings);
    }
    read_schedulers(state, nvml);
    for gpu in &state.inventory.gpus {
        if !may_mix(gpu) {
            continue;
        }
        let read = nvml.read_gpu(gpu.address).into_value();
        if let Some(facts) = read.as_ref().and_then(|g| size_facts(gpu, g)) {
            state.sizes.insert(gpu.address, facts);
        }
        if gpu.backend != Backend::NvidiaVfio {
            continue;
        }
        if let Some(facts) = super::mig::facts(paths, nvml, gpu.address) {
            state.mig.insert(gpu.address, facts);
        }
        let supported = read.and_then(|g| g.supported_types.into_value());
        if let Some(types) = supported {
            let known = types
                .into_iter()
                .filter_map(|t| {
                    Some(KnownType {
                        id: t.id.to_string(),
                        name: t.name.into_value()?,
                        framebuffer_mib: t.framebuffer_mib.into_value(),
                        max_instances: t.max_instances.into_value(),
                        source: crate::model::NameSource::Nvml,
                    })
                })
                .collect();
            state.supported_types.insert(gpu.address, known);
        }
    }
    state.settle();
}

/// Whether `gpu` may run in mixed-size mode: an NVIDIA GPU with SR-IOV VFs (vendor VFIO, or
/// mdevs on VFs). NVML says whether it does.
pub(crate) fn may_mix(gpu: &Gpu) -> bool {
    gpu.vendor_id == Some(NVIDIA_VENDOR_ID)
        && matches!(gpu.backend, Backend::NvidiaVfio | Backend::VfMdev)
}

/// NVML's size facts of `gpu`, for a GPU that [`may_mix`]: `None` when NVML does not report a
/// size mode for it.
pub(crate) fn read_size_facts(nvml: &Nvml, gpu: &Gpu) -> Option<SizeFacts> {
    if !may_mix(gpu) {
        return None;
    }
    size_facts(gpu, nvml.read_gpu(gpu.address).value()?)
}

/// What NVML's read of `gpu` says of its size mode: `None` for a GPU without mixed-size mode.
/// The region is the largest time-sliced type's placement size; the creatable placements are
/// keyed by the type ids the inventory uses; each running vGPU's placement is matched to the
/// host's vGPU by its mdev UUID (`model::nvml::matching`).
fn size_facts(gpu: &Gpu, read: &NvmlGpu) -> Option<SizeFacts> {
    let mode = *read.size_mode.value()?;
    let types = read.supported_types.value().map_or(&[][..], Vec::as_slice);
    let sliced = || {
        types.iter().filter(|t| {
            t.gpu_instance_profile_id
                .value()
                .is_some_and(Option::is_none)
        })
    };
    let region = sliced()
        .filter_map(|t| match t.placements.value() {
            Some(p) => Some(p.size),
            None => t
                .framebuffer_mib
                .value()
                .and_then(|fb| crate::model::sizes::placement_size(*fb)),
        })
        .max();
    let creatable = sliced()
        .filter_map(|t| {
            let ids = t.creatable_placements.value()?.ids.clone();
            let id = gpu
                .types
                .iter()
                .find(|own| crate::model::nvml_type_id(&own.id) == Some(t.id))
                .map_or_else(|| t.id.to_string(), |own| own.id.clone());
            Some((id, ids))
        })
        .collect();
    let running = read.vgpus.value().map_or(&[][..], Vec::as_slice);
    let placements = crate::model::nvml::matching::matches(gpu, running, &BTreeMap::new())
        .into_iter()
        .filter_map(|(id, vgpu, _)| Some((id, *vgpu.placement_id.value()?)))
        .collect();
    Some(SizeFacts {
        mode,
        region,
        creatable,
        placements,
    })
}
