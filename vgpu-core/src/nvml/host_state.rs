//! What NVML adds to a [`HostState`]: type names and facts sysfs lacks, each NVIDIA GPU's
//! scheduler, and for vendor-VFIO GPUs their GPU instances and supported types. The state
//! itself, and every count made from it, are `vgpu-plan`'s; reading NVML is this crate's.

use crate::capacity::{HostState, KnownType};
use crate::host::paths::HostPaths;
use crate::model::sizes::SizeFacts;
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

/// NVML's size facts of `gpu`, with the placement of each VF's vGPU NVML does not report, as
/// the VF's `nvidia/vgpu_params` names it ([`vf_placements`](crate::host::nvidia::vf_placements)).
pub(crate) fn size_facts(paths: &HostPaths, nvml: &Nvml, gpu: &Gpu) -> Option<SizeFacts> {
    let mut facts = nvml.size_facts(gpu)?;
    if facts.mixed() {
        for (id, at) in crate::host::nvidia::vf_placements(paths, gpu) {
            facts.placements.entry(id).or_insert(at);
        }
    }
    Some(facts)
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
        if let Some(facts) = size_facts(paths, nvml, gpu) {
            state.sizes.insert(gpu.address, facts);
        }
        if gpu.backend != Backend::NvidiaVfio {
            continue;
        }
        if let Some(facts) = super::mig::facts(paths, nvml, gpu.address) {
            state.mig.insert(gpu.address, facts);
        }
        let supported = nvml
            .read_gpu(gpu.address)
            .into_value()
            .and_then(|g| g.supported_types.into_value());
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
