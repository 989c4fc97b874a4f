//! Every vGPU type a GPU supports, whatever it holds now.
//!
//! Sysfs shows what can be created *now*. An NVIDIA vendor-VFIO VF lists in
//! `nvidia/creatable_vgpu_types` only the types that still fit beside the vGPUs present, and
//! in MIG mode only those whose GPU instance is free. A GPU's *supported* types come, in this
//! order, from:
//!
//! | source | what it gives |
//! |---|---|
//! | NVML (`nvmlDeviceGetSupportedVgpus`) | every type, with id, name, frame buffer and maximum |
//! | the offer `vgpu` recorded under the same driver version | every type sysfs listed then |
//! | sysfs now | the types creatable now |
//! | the built-in catalog | the GPU family's types with a known id; marked, since ids change between drivers |
//!
//! The catalog is read only where NVML gave no list. [`missing`] gives the types of those
//! sources that the GPU's own list lacks. [`HostState::settle`] adds them to the inventory,
//! so that `types`, `create`, the hook and the planner see one set at every fill level; the
//! capacity model ([`room`](super::room)) then says why each has no room.

use super::{HostState, KnownType};
use crate::model::catalog::{self, CatalogType};
use crate::model::parse::{mig_backing, name_matches, parse_nvidia_type_name};
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, NameSource, VgpuType};

/// The types `gpu` supports that its type list lacks (by id and by name), from NVML's or the
/// recorded list in `host`, else from the catalog. Empty for a GPU that is not an NVIDIA
/// vendor-VFIO GPU: the other interfaces list every type at every fill level.
pub(crate) fn missing(host: &HostState, gpu: &Gpu) -> Vec<VgpuType> {
    if !vendor_vfio(gpu) {
        return Vec::new();
    }
    let present = |id: &str, name: &str| {
        gpu.types
            .iter()
            .any(|t| t.id == id || t.name.as_deref().is_some_and(|n| name_matches(n, name)))
    };
    let known = host.supported_types.get(&gpu.address);
    let mut out: Vec<VgpuType> = Vec::new();
    for k in known.into_iter().flatten() {
        if !present(&k.id, &k.name) && !out.iter().any(|t| t.id == k.id) {
            out.push(from_known(k));
        }
    }
    let from_nvml = known.is_some_and(|list| list.iter().any(|k| k.source == NameSource::Nvml));
    if !from_nvml {
        for row in catalog_rows(gpu) {
            let Some(id) = row.type_id.as_deref() else {
                continue;
            };
            let taken = out.iter().any(|t| {
                t.id == id
                    || t.name
                        .as_deref()
                        .is_some_and(|n| name_matches(n, &row.name))
            });
            if !present(id, &row.name) && !taken {
                out.push(from_catalog(id, row));
            }
        }
    }
    out
}

/// A type of `gpu`'s family on its interface, from the catalog.
fn catalog_rows(gpu: &Gpu) -> impl Iterator<Item = &'static CatalogType> {
    let family = catalog::family_of(gpu);
    catalog::all().iter().filter(move |row| {
        row.interface == "vendor-vfio"
            && family.as_deref().is_some_and(|f| {
                parse_nvidia_type_name(&row.name).is_some_and(|p| p.gpu.eq_ignore_ascii_case(f))
            })
    })
}

fn empty(id: &str, name: String, source: NameSource) -> VgpuType {
    VgpuType {
        placements: None,
        placement_size: None,
        id: id.to_owned(),
        mig: mig_backing(&name),
        name: Some(name),
        name_source: Some(source),
        framebuffer_mib: None,
        max_instances: None,
        available: 0,
        limit: None,
        in_use: 0,
        device_api: None,
        description: None,
        offered: 0,
    }
}

fn from_known(k: &KnownType) -> VgpuType {
    let mut ty = empty(&k.id, k.name.clone(), k.source);
    ty.framebuffer_mib = k
        .framebuffer_mib
        .or_else(|| parse_nvidia_type_name(&k.name).map(|p| p.framebuffer_mib))
        .or_else(|| catalog::by_name(&k.name).map(|row| row.framebuffer_mib));
    ty.max_instances = k
        .max_instances
        .or_else(|| catalog::by_name(&k.name).map(|row| row.max_instances));
    ty
}

fn from_catalog(id: &str, row: &CatalogType) -> VgpuType {
    // Vendor-VFIO drivers spell every name with the vendor prefix (`NVIDIA L40S-12Q`).
    let name = match row.name.starts_with("NVIDIA ") {
        true => row.name.clone(),
        false => format!("NVIDIA {}", row.name),
    };
    let mut ty = empty(id, name, NameSource::Catalog);
    ty.framebuffer_mib = Some(row.framebuffer_mib);
    ty.max_instances = Some(row.max_instances);
    ty
}

/// Whether `ty`, of a vendor-VFIO GPU, is one [`extend`] added: named only by a record or the
/// catalog, with nothing offered or running (discovery names such a type from the catalog
/// only while it runs).
fn added(ty: &VgpuType) -> bool {
    ty.offered == 0
        && ty.in_use == 0
        && matches!(
            ty.name_source,
            Some(NameSource::Recorded | NameSource::Catalog)
        )
}

/// Drops the types an earlier [`extend`] added, so that a state settled again (with NVML's
/// list added since) has the sources of now.
pub(crate) fn forget(host: &mut HostState) {
    for gpu in host.inventory.gpus.iter_mut().filter(|g| vendor_vfio(g)) {
        gpu.types.retain(|t| !added(t));
    }
}

/// Whether `gpu` offers NVIDIA's vendor-VFIO interface: the one whose sysfs hides types.
fn vendor_vfio(gpu: &Gpu) -> bool {
    gpu.vendor_id == Some(NVIDIA_VENDOR_ID) && gpu.backend == Backend::NvidiaVfio
}

/// Adds [`missing`] types to every GPU of `host`, in the order discovery sorts types.
pub(crate) fn extend(host: &mut HostState) {
    let additions: Vec<Vec<VgpuType>> = host
        .inventory
        .gpus
        .iter()
        .map(|gpu| missing(host, gpu))
        .collect();
    for (gpu, more) in host.inventory.gpus.iter_mut().zip(additions) {
        if more.is_empty() {
            continue;
        }
        gpu.types.extend(more);
        gpu.types
            .sort_by_cached_key(|t| crate::model::type_order(&t.id));
    }
}
