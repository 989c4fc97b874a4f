//! Known vGPU types, for facts that sysfs does not state.
//!
//! NVIDIA's vendor-specific VFIO interface lists type ids and names but neither frame-buffer
//! size nor instances per GPU; this catalog (sourced, per row, from NVIDIA documentation and
//! captures of real hosts) fills those in by type name. Sysfs, when it says something, wins.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;

use crate::parse::{parse_nvidia_type_name, strip_vendor_prefix};
use crate::{Gpu, NameSource, VgpuType};

/// One catalogued vGPU type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CatalogType {
    /// The GPU model it belongs to, e.g. `NVIDIA L40S 48GB`.
    pub gpu: String,
    /// The type name as sysfs or NVIDIA's documentation spells it.
    pub name: String,
    /// Frame buffer in MiB.
    pub framebuffer_mib: u64,
    /// vGPUs of this type per physical GPU (equal-size mode).
    pub max_instances: u32,
    /// The interface the type is offered through (`mdev`, `mdev-on-vf`, `vendor-vfio`,
    /// `sriov-vf`).
    pub interface: String,
    /// The type id seen on one driver version; ids change between driver branches.
    #[serde(default)]
    pub type_id: Option<String>,
}

#[derive(Deserialize)]
struct CatalogFile {
    #[serde(rename = "type")]
    types: Vec<CatalogType>,
}

const CATALOG_TOML: &str = include_str!("../data/vgpu-types.toml");

static CATALOG: LazyLock<Vec<CatalogType>> = LazyLock::new(|| {
    // The file is part of this crate and checked by a unit test, so a parse failure here is a
    // build defect; degrade to an empty catalog rather than abort a production process.
    match toml::from_str::<CatalogFile>(CATALOG_TOML) {
        Ok(file) => file.types,
        Err(err) => {
            tracing::error!("the built-in vGPU type catalog does not parse: {err}");
            Vec::new()
        }
    }
});

static BY_NAME: LazyLock<HashMap<&'static str, &'static CatalogType>> = LazyLock::new(|| {
    let mut map = HashMap::new();
    for entry in CATALOG.iter() {
        map.entry(strip_vendor_prefix(&entry.name)).or_insert(entry);
    }
    map
});

/// Every catalogued type.
pub fn all() -> &'static [CatalogType] {
    &CATALOG
}

/// The catalogued type with this name, with or without its `NVIDIA `/`GRID ` prefix.
pub fn by_name(name: &str) -> Option<&'static CatalogType> {
    BY_NAME.get(strip_vendor_prefix(name)).copied()
}

/// The catalog's name for the interface of `backend`; `None` for interfaces without types.
pub fn interface_of(backend: crate::Backend) -> Option<&'static str> {
    use crate::Backend;
    match backend {
        Backend::Mdev => Some("mdev"),
        Backend::VfMdev => Some("mdev-on-vf"),
        Backend::NvidiaVfio => Some("vendor-vfio"),
        Backend::Sriov | Backend::None => None,
    }
}

/// The catalogued type with id `id` on `interface`: the row of the GPU family `model` names
/// (`AD102GL [L40S]`) when there is one, else the one name every row of that id agrees on.
pub fn by_id(id: &str, interface: &str, model: Option<&str>) -> Option<&'static CatalogType> {
    use crate::parse::parse_nvidia_type_name;
    let rows: Vec<&CatalogType> = CATALOG
        .iter()
        .filter(|row| row.interface == interface && row.type_id.as_deref() == Some(id))
        .collect();
    let family = model.map(bracketed);
    if let Some(row) = rows.iter().find(|row| {
        let gpu = parse_nvidia_type_name(&row.name).map(|p| p.gpu);
        family.is_some_and(|f| {
            gpu.as_deref()
                .is_some_and(|g| f.eq_ignore_ascii_case(g) || f.rsplit(' ').next() == Some(g))
        })
    }) {
        return Some(row);
    }
    match rows.as_slice() {
        [first, rest @ ..] if rest.iter().all(|r| r.name == first.name) => Some(first),
        _ => None,
    }
}

/// The NVIDIA type-name family of `gpu` (`L40S`, `T4`): from a type it lists (a time-sliced
/// one first), else from the
/// bracketed part of its model name (`AD102GL [L40S]`, `TU104GL [Tesla T4]`) when the catalog
/// knows that family.
pub fn family_of(gpu: &Gpu) -> Option<String> {
    // A time-sliced name first; in MIG mode a GPU lists only MIG-backed ones.
    let parsed: Vec<_> = gpu
        .types
        .iter()
        .filter_map(|t| t.name.as_deref().and_then(parse_nvidia_type_name))
        .collect();
    if let Some(family) = parsed
        .iter()
        .find(|p| p.mig_slices.is_none())
        .or_else(|| parsed.first())
        .map(|p| p.gpu.clone())
    {
        return Some(family);
    }
    let model = gpu.model.as_deref()?;
    let inner = bracketed(model);
    let candidates = [inner, inner.rsplit(' ').next().unwrap_or(inner)];
    candidates.into_iter().find_map(|candidate| {
        all()
            .iter()
            .filter_map(|row| parse_nvidia_type_name(&row.name))
            .find(|p| p.gpu.eq_ignore_ascii_case(candidate))
            .map(|p| p.gpu)
    })
}

/// The part of a PCI database model name in brackets (`L40S` in `AD102GL [L40S]`), or the
/// whole name.
#[inline]
pub fn bracketed(model: &str) -> &str {
    match (model.rfind('['), model.rfind(']')) {
        (Some(open), Some(close)) if open < close => model[open + 1..close].trim(),
        _ => model.trim(),
    }
}

/// Gives `ty` the name `name` from `source`, with what follows from a name where nothing more
/// trusted said it: the frame buffer and instances per GPU (type-name grammar, catalog) and
/// the MIG backing. A name from a more trusted source is kept.
pub fn set_name(ty: &mut VgpuType, name: String, source: NameSource) {
    if ty.name_source.is_some_and(|now| now <= source) {
        return;
    }
    let known = by_name(&name);
    if ty.framebuffer_mib.is_none() {
        ty.framebuffer_mib = parse_nvidia_type_name(&name)
            .map(|n| n.framebuffer_mib)
            .or_else(|| known.map(|k| k.framebuffer_mib));
    }
    if ty.max_instances.is_none() {
        ty.max_instances = known.map(|k| k.max_instances);
    }
    if ty.mig.is_none() {
        ty.mig = crate::parse::mig_backing(&name);
    }
    ty.name = Some(name);
    ty.name_source = Some(source);
    ty.recount();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_nvidia_type_name;

    #[test]
    fn catalog_parses_every_row() {
        assert_eq!(
            toml::from_str::<CatalogFile>(CATALOG_TOML)
                .map(|f| f.types.len())
                .ok(),
            Some(171)
        );
    }

    #[test]
    fn by_name_finds_l40s_without_prefix() {
        assert_eq!(
            by_name("NVIDIA L40S-1B").map(|t| (t.framebuffer_mib, t.max_instances)),
            Some((1024, 32))
        );
    }

    #[test]
    fn by_name_unknown_is_none() {
        assert_eq!(by_name("NVIDIA X1-1Q"), None);
    }

    #[test]
    fn type_name_grammar_agrees_with_catalog_framebuffer() {
        let disagreeing: Vec<(&str, u64, Option<u64>)> = all()
            .iter()
            .filter(|t| t.interface != "sriov-vf")
            .map(|t| {
                (
                    t.name.as_str(),
                    t.framebuffer_mib,
                    parse_nvidia_type_name(&t.name).map(|n| n.framebuffer_mib),
                )
            })
            .filter(|(_, fb, parsed)| Some(*fb) != *parsed)
            .collect();
        assert_eq!(disagreeing, Vec::new());
    }
}
