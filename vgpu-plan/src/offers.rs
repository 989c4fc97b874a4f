//! What one GPU offers a plan: its vGPU types (as discovery lists them, completed from the
//! catalog where sysfs hides some), the rule for mixing them, and its VF slots.
//!
//! Sysfs does not always list every type a GPU could hold: an NVIDIA vendor-VFIO GPU lists only
//! the types creatable now (once it holds a vGPU, only that type; nothing when full), and an
//! NVIDIA GPU whose VFs are not enabled lists none. For those the built-in catalog supplies the
//! GPU's other types by name (their ids are known once the VFs list them, at apply time).

use crate::model::catalog;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, NameSource};
use crate::parse::{parse_nvidia_type_name, strip_vendor_prefix};
use crate::steps::Refusal;

/// How a GPU's vGPUs may be mixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// One type at a time (NVIDIA's equal-size mode).
    OneType,
    /// Types share the GPU's resources in fractions of it (Intel GVT-g: `GVTg_V5_4` is a
    /// quarter).
    Shares,
    /// Plain SR-IOV: whole VFs, each an equal share of local memory.
    Vfs,
    /// No vGPUs at all.
    None,
}

/// One type a GPU offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offer {
    /// Its id on this host, when discovery lists it.
    pub(crate) id: Option<String>,
    /// Its name.
    pub(crate) name: Option<String>,
    /// Frame buffer of each vGPU, in MiB.
    pub(crate) framebuffer_mib: Option<u64>,
    /// vGPUs of it per GPU.
    pub(crate) max_instances: Option<u32>,
    /// The NVIDIA series letter.
    pub(crate) series: Option<char>,
    /// Whether it is MIG-backed (needs GPU instances; never chosen for a size).
    pub(crate) mig: bool,
    /// Whether the GPU itself (sysfs) or NVML offers it; `false` for a type only the
    /// catalog names.
    pub(crate) confirmed: bool,
}

impl Offer {
    /// How a person calls it: its name, or its id.
    pub(crate) fn label(&self) -> String {
        self.name
            .clone()
            .or_else(|| self.id.clone())
            .unwrap_or_default()
    }

    /// Whether `type_id` (with the name discovery or the catalog gives it) is this type.
    pub(crate) fn is(&self, type_id: &str, name: Option<&str>) -> bool {
        if self.id.as_deref() == Some(type_id) {
            return true;
        }
        match (&self.name, name) {
            (Some(mine), Some(theirs)) => same_name(mine, theirs),
            _ => false,
        }
    }
}

/// Whether two type names name the same type, with or without the vendor prefix.
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    a == b || strip_vendor_prefix(a).eq_ignore_ascii_case(strip_vendor_prefix(b))
}

/// One GPU as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct GpuView<'a> {
    /// The GPU.
    pub(crate) gpu: &'a Gpu,
    /// How its vGPUs mix.
    pub(crate) rule: Rule,
    /// Every type it offers.
    pub(crate) offers: Vec<Offer>,
    /// How many VFs vGPUs can sit on, for VF-based interfaces (enabled VFs, or all of them
    /// when they are to be enabled first).
    pub(crate) vf_slots: Option<u32>,
    family: Option<String>,
}

/// Local memory of plain SR-IOV GPUs, by PCI vendor and device id: the drivers give every VF an
/// equal share of it by default (Intel Data Center GPU Flex Series product specifications).
///
/// Nominal sizes, the last resort: where the driver says how much it can give the VFs (Intel's
/// SR-IOV drivers: the VFs' `lmem_quota` and the PF's `lmem_max_quota`, which leave out the
/// PF's spare and, with ECC on, more), that is used instead
/// ([`HostState::local_memory_mib`](crate::HostState::local_memory_mib)). The table serves
/// GPUs whose driver publishes no such total, and `place`, which gives each plain VF an equal
/// share of it.
const SRIOV_MEMORY_MIB: &[(u16, u16, u64)] = &[
    // Flex 170: 16 GB GDDR6.
    (0x8086, 0x56c0, 16 * 1024),
    // Flex 140: 12 GB over two GPUs, 6 GB each.
    (0x8086, 0x56c1, 6 * 1024),
];

/// The local memory of a plain SR-IOV GPU whose model is known, in MiB.
pub(crate) fn sriov_memory_mib(gpu: &Gpu) -> Option<u64> {
    SRIOV_MEMORY_MIB
        .iter()
        .find(|(v, d, _)| gpu.vendor_id == Some(*v) && gpu.device_id == Some(*d))
        .map(|(_, _, mib)| *mib)
}

impl<'a> GpuView<'a> {
    /// The view of `gpu` on `host`: the types it lists and those it supports but does not list
    /// now (`capacity::supported`).
    pub(crate) fn new(host: &crate::HostState, gpu: &'a Gpu) -> Self {
        let supported = host.supported_types.get(&gpu.address).map(Vec::as_slice);
        let nvidia = gpu.vendor_id == Some(NVIDIA_VENDOR_ID);
        let rule = match gpu.backend {
            Backend::None => Rule::None,
            Backend::Sriov if !nvidia => Rule::Vfs,
            Backend::Mdev if !nvidia => Rule::Shares,
            _ => Rule::OneType,
        };
        let vf_slots = match gpu.backend {
            Backend::VfMdev | Backend::NvidiaVfio => Some(gpu.vfs.len() as u32),
            Backend::Sriov => gpu.sriov.as_ref().map(|s| s.total_vfs),
            Backend::Mdev | Backend::None => None,
        };
        let missing = crate::capacity::supported::missing(host, gpu);
        let mut offers: Vec<Offer> = gpu
            .types
            .iter()
            .chain(&missing)
            .map(|t| {
                let parsed = t.name.as_deref().and_then(parse_nvidia_type_name);
                // A type only the catalog names is not confirmed, and its id may be another
                // driver's: it is made by name, once sysfs lists it.
                let confirmed = t.name_source != Some(NameSource::Catalog);
                Offer {
                    id: confirmed.then(|| t.id.clone()),
                    name: t.name.clone(),
                    framebuffer_mib: t.framebuffer_mib,
                    max_instances: t.max_instances,
                    series: parsed.as_ref().map(|p| p.series),
                    mig: parsed.as_ref().is_some_and(|p| p.mig_slices.is_some()),
                    confirmed,
                }
            })
            .collect();
        let family = nvidia.then(|| catalog::family_of(gpu)).flatten();
        let hidden = match gpu.backend {
            Backend::NvidiaVfio => !gpu.vgpus.is_empty() || gpu.types.is_empty(),
            Backend::Sriov => nvidia,
            _ => false,
        };
        if let (true, Some(family)) = (hidden, &family) {
            for row in catalog_rows(family, gpu.backend) {
                if offers
                    .iter()
                    .any(|o| o.name.as_deref().is_some_and(|n| same_name(n, &row.name)))
                {
                    continue;
                }
                let parsed = parse_nvidia_type_name(&row.name);
                // A type id the host lists without a name is this row when the catalog says so.
                if let Some(unnamed) = offers
                    .iter_mut()
                    .find(|o| o.name.is_none() && o.id.is_some() && o.id == row.type_id)
                {
                    unnamed.name = Some(row.name.clone());
                    unnamed.framebuffer_mib.get_or_insert(row.framebuffer_mib);
                    unnamed.max_instances.get_or_insert(row.max_instances);
                    unnamed.series = parsed.as_ref().map(|p| p.series);
                    continue;
                }
                // NVML's list of what the GPU supports, whatever it holds, is the truth where
                // it is known: a row it lacks is not offered, a row it has comes with its id.
                let nvml =
                    supported.map(|list| list.iter().find(|k| same_name(&k.name, &row.name)));
                if nvml.is_some_and(|k| k.is_none()) {
                    continue;
                }
                offers.push(Offer {
                    id: nvml.flatten().map(|k| k.id.clone()),
                    name: Some(row.name.clone()),
                    framebuffer_mib: Some(row.framebuffer_mib),
                    max_instances: Some(row.max_instances),
                    series: parsed.as_ref().map(|p| p.series),
                    mig: parsed.as_ref().is_some_and(|p| p.mig_slices.is_some()),
                    confirmed: nvml.is_some(),
                });
            }
        }
        GpuView {
            gpu,
            rule,
            offers,
            vf_slots,
            family,
        }
    }

    /// The name of type `type_id` on this GPU, when discovery or the catalog knows it.
    pub(crate) fn name_of(&self, type_id: &str) -> Option<String> {
        if let Some(name) = self
            .offers
            .iter()
            .find(|o| o.id.as_deref() == Some(type_id))
            .and_then(|o| o.name.clone())
        {
            return Some(name);
        }
        let family = self.family.as_deref()?;
        catalog_rows(family, self.gpu.backend)
            .find(|row| row.type_id.as_deref() == Some(type_id))
            .map(|row| row.name.clone())
    }

    /// The type `wanted` names: an id, a name, or a name without its vendor prefix.
    pub(crate) fn by_name(&self, wanted: &str) -> Result<&Offer, Refusal> {
        self.offers
            .iter()
            .find(|o| o.id.as_deref() == Some(wanted))
            .or_else(|| {
                self.offers
                    .iter()
                    .find(|o| o.name.as_deref().is_some_and(|n| same_name(n, wanted)))
            })
            .ok_or_else(|| Refusal::UnknownType {
                wanted: wanted.to_owned(),
                offered: self.offers.iter().map(Offer::label).collect(),
            })
    }

    /// The type of exactly `mib` MiB in `series` (types without a series, such as GVT-g's,
    /// are in every series), or with `round_up` the smallest above it.
    pub(crate) fn by_size(
        &self,
        mib: u64,
        series: char,
        round_up: bool,
    ) -> Result<&Offer, Refusal> {
        let eligible = || {
            self.offers.iter().filter(move |o| {
                !o.mig && o.framebuffer_mib.is_some() && o.series.is_none_or(|s| s == series)
            })
        };
        // Among equals, one the host lists (with its id) before one only the catalog knows.
        let best = |a: &&Offer| (a.framebuffer_mib, a.id.is_none(), a.label());
        let exact = eligible()
            .filter(|o| o.framebuffer_mib == Some(mib))
            .min_by_key(best);
        let found = match (exact, round_up) {
            (Some(offer), _) => Some(offer),
            (None, true) => eligible()
                .filter(|o| o.framebuffer_mib.is_some_and(|fb| fb > mib))
                .min_by_key(best),
            (None, false) => None,
        };
        found.ok_or_else(|| {
            let mut offered: Vec<u64> = eligible().filter_map(|o| o.framebuffer_mib).collect();
            offered.sort_unstable();
            offered.dedup();
            Refusal::NoSuchSize {
                framebuffer_mib: mib,
                series: self.has_series().then_some(series),
                offered_mib: offered,
            }
        })
    }

    fn has_series(&self) -> bool {
        self.offers.iter().any(|o| o.series.is_some())
    }
}

/// The catalog rows of an NVIDIA GPU family offered through `backend`'s interface.
fn catalog_rows(
    family: &str,
    backend: Backend,
) -> impl Iterator<Item = &'static catalog::CatalogType> {
    let family = family.to_owned();
    catalog::all().iter().filter(move |row| {
        let interface_fits = match backend {
            Backend::Mdev => row.interface == "mdev",
            Backend::VfMdev => row.interface == "mdev-on-vf",
            Backend::NvidiaVfio => row.interface == "vendor-vfio",
            Backend::Sriov => matches!(row.interface.as_str(), "mdev-on-vf" | "vendor-vfio"),
            Backend::None => false,
        };
        interface_fits
            && parse_nvidia_type_name(&row.name)
                .is_some_and(|p| p.gpu.eq_ignore_ascii_case(&family))
    })
}

pub(crate) use crate::model::catalog::bracketed;

/// Whether a GPU's model name matches `pattern`: the whole name, its bracketed part, or the
/// last words of that, case-insensitively (`T4` matches `TU104GL [Tesla T4]`; `A40` does not
/// match `GA104GL [RTX A4000]`).
pub(crate) fn model_matches(model: &str, pattern: &str) -> bool {
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return false;
    }
    if model.trim().eq_ignore_ascii_case(pattern) {
        return true;
    }
    let inner = bracketed(model);
    if inner.eq_ignore_ascii_case(pattern) {
        return true;
    }
    let (Some(tail_start), true) = (
        inner.len().checked_sub(pattern.len()),
        inner.len() > pattern.len(),
    ) else {
        return false;
    };
    inner.is_char_boundary(tail_start)
        && inner[tail_start..].eq_ignore_ascii_case(pattern)
        && inner[..tail_start].ends_with(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_matches_bracketed_name() {
        assert!(model_matches("AD102GL [L40S]", "l40s"));
    }

    #[test]
    fn model_matches_last_words() {
        assert!(model_matches(
            "ATS-M [Data Center GPU Flex 170]",
            "Flex 170"
        ));
    }

    #[test]
    fn model_matches_not_a_prefix_of_a_word() {
        assert!(!model_matches("GA104GL [RTX A4000]", "A40"));
    }

    #[test]
    fn model_matches_not_inside_a_word() {
        assert!(!model_matches("TU104GL [Tesla T4]", "a T4"));
    }
}
