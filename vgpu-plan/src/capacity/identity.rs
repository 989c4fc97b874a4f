//! One identity per vGPU type: the same id, name, frame buffer and series at every fill level.
//!
//! Sysfs names a vendor-VFIO type only while a free VF lists it, so a full GPU's type would
//! lose its name. The name comes from the most trusted source that states it
//! ([`NameSource`]): the GPU's own offer, what `vgpu` recorded when it set the type, NVML,
//! the built-in catalog. Discovery applies the first and the last; NVML's enrichment and
//! [`complete`] the others.

use super::HostState;
use crate::model::NameSource;
use crate::model::catalog::set_name;

/// Names the types of every GPU of `host` that sysfs leaves unnamed, or that only the catalog
/// names, from the definitions and from NVML's supported types.
pub(crate) fn complete(host: &mut HostState) {
    for gpu in &mut host.inventory.gpus {
        let defined = super::reservations::defined_names(&host.definitions, gpu);
        let supported = host.supported_types.get(&gpu.address);
        for ty in &mut gpu.types {
            if let Some(name) = defined.get(&ty.id) {
                set_name(ty, name.clone(), NameSource::Definition);
            }
            if let Some(known) = supported.and_then(|list| list.iter().find(|k| k.id == ty.id)) {
                set_name(ty, known.name.clone(), NameSource::Nvml);
            }
        }
    }
}
