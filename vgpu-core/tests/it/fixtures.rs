//! The fixtures themselves: every scenario's types agree with the built-in catalog, and
//! generated hosts are laid out validly at any size they accept.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::collections::BTreeSet;
use std::io;

use vgpu_core::{
    discover,
    model::{Backend, Inventory, pci::PciAddress},
};
use vgpu_testing::scenarios::{
    self, A40VfMdev, L40sVendorVfio, LARGE_MAX_GPUS, LARGE_MAX_VFS, Large, T4Legacy, vf_address,
};
use vgpu_testing::{FakeHost, addr};

fn inventory(host: &FakeHost) -> Inventory {
    discover(&host.paths()).expect("discovery")
}

/// How the types discovered on a host compare with the built-in catalog.
#[derive(Debug, PartialEq, Eq)]
struct AgainstCatalog<'a> {
    /// (type id, name) of the types whose name the catalog knows: their facts were compared.
    compared: BTreeSet<(&'a str, &'a str)>,
    /// (type id, name) of the types without a name or with one the catalog does not know:
    /// nothing to compare them with, so they cannot disagree.
    uncatalogued: BTreeSet<(&'a str, Option<&'a str>)>,
    /// (GPU, type id, fact, discovered, catalogued) for every compared fact that differs.
    disagreements: Vec<(PciAddress, &'a str, &'static str, String, String)>,
}

/// Compares every discovered type whose name the catalog knows: frame buffer and instances per
/// GPU, and for NVIDIA vendor-VFIO types the numeric id, which is what a VF is written.
fn against_catalog(inv: &Inventory) -> AgainstCatalog<'_> {
    let mut result = AgainstCatalog {
        compared: BTreeSet::new(),
        uncatalogued: BTreeSet::new(),
        disagreements: Vec::new(),
    };
    for gpu in &inv.gpus {
        for t in &gpu.types {
            let name = t.name.as_deref();
            let Some((name, entry)) =
                name.and_then(|n| vgpu_core::model::catalog::by_name(n).map(|e| (n, e)))
            else {
                result.uncatalogued.insert((t.id.as_str(), name));
                continue;
            };
            result.compared.insert((t.id.as_str(), name));
            let mut facts = vec![
                (
                    "framebuffer_mib",
                    format!("{:?}", t.framebuffer_mib),
                    format!("{:?}", Some(entry.framebuffer_mib)),
                ),
                (
                    "max_instances",
                    format!("{:?}", t.max_instances),
                    format!("{:?}", Some(entry.max_instances)),
                ),
            ];
            if gpu.backend == Backend::NvidiaVfio {
                facts.push((
                    "type_id",
                    format!("{:?}", Some(t.id.as_str())),
                    format!("{:?}", entry.type_id.as_deref()),
                ));
            }
            result.disagreements.extend(
                facts
                    .into_iter()
                    .filter(|(_, discovered, catalogued)| discovered != catalogued)
                    .map(|(fact, discovered, catalogued)| {
                        (gpu.address, t.id.as_str(), fact, discovered, catalogued)
                    }),
            );
        }
    }
    result
}

fn new_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    host
}

#[test]
fn t4_legacy_types_agree_with_catalog() {
    let host = new_host();
    let t4 = T4Legacy {
        address: addr("0000:3b:00.0"),
        group: 12,
        numa: 0,
        used: &[],
    };
    scenarios::t4_legacy(&host, &t4).unwrap();
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::from([
                ("nvidia-222", "GRID T4-1B"),
                ("nvidia-231", "GRID T4-2Q"),
                ("nvidia-232", "GRID T4-4Q"),
                ("nvidia-234", "GRID T4-16Q"),
            ]),
            uncatalogued: BTreeSet::new(),
            disagreements: Vec::new(),
        }
    );
}

#[test]
fn a40_vf_mdev_types_agree_with_catalog() {
    let host = new_host();
    let a40 = A40VfMdev {
        address: addr("0000:41:00.0"),
        vfs: 4,
        used: 0,
    };
    scenarios::a40_vf_mdev(&host, &a40).unwrap();
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::from([
                ("nvidia-558", "NVIDIA A40-2Q"),
                ("nvidia-566", "NVIDIA A40-48Q"),
            ]),
            uncatalogued: BTreeSet::new(),
            disagreements: Vec::new(),
        }
    );
}

#[test]
fn l40s_vendor_vfio_types_and_ids_agree_with_catalog() {
    let host = new_host();
    let l40s = L40sVendorVfio {
        address: addr("0000:81:00.0"),
        group: 60,
        vfs: 4,
        used: 0,
    };
    scenarios::l40s_vendor_vfio(&host, &l40s).unwrap();
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::from([
                ("1145", "NVIDIA L40S-1B"),
                ("1152", "NVIDIA L40S-8Q"),
                ("1156", "NVIDIA L40S-48Q"),
            ]),
            uncatalogued: BTreeSet::new(),
            disagreements: Vec::new(),
        }
    );
}

#[test]
fn gvtg_types_have_no_name_to_disagree_with_catalog() {
    let host = new_host();
    scenarios::gvtg(&host, 1).unwrap();
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::new(),
            uncatalogued: BTreeSet::from([
                ("i915-GVTg_V5_1", None),
                ("i915-GVTg_V5_2", None),
                ("i915-GVTg_V5_4", None),
                ("i915-GVTg_V5_8", None),
            ]),
            disagreements: Vec::new(),
        }
    );
}

#[test]
fn every_interface_types_agree_with_catalog() {
    let host = FakeHost::new().unwrap();
    scenarios::every_interface(&host).unwrap();
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::from([
                ("1152", "NVIDIA L40S-8Q"),
                ("nvidia-222", "GRID T4-1B"),
                ("nvidia-231", "GRID T4-2Q"),
                ("nvidia-232", "GRID T4-4Q"),
                ("nvidia-234", "GRID T4-16Q"),
                ("nvidia-558", "NVIDIA A40-2Q"),
                ("nvidia-566", "NVIDIA A40-48Q"),
            ]),
            uncatalogued: BTreeSet::from([
                ("i915-GVTg_V5_1", None),
                ("i915-GVTg_V5_2", None),
                ("i915-GVTg_V5_4", None),
                ("i915-GVTg_V5_8", None),
            ]),
            disagreements: Vec::new(),
        }
    );
}

/// `large` names its types `NVIDIA A40-<n>Q` for n = 1..=types: the real ones agree with the
/// catalog, the made-up sizes are not in it.
#[test]
fn large_types_agree_with_catalog_or_are_not_in_it() {
    let host = large_host(&Large {
        gpus: 2,
        vfs: 1,
        types: 20,
    });
    assert_eq!(
        against_catalog(&inventory(&host)),
        AgainstCatalog {
            compared: BTreeSet::from([
                ("nvidia-500", "NVIDIA A40-1Q"),
                ("nvidia-501", "NVIDIA A40-2Q"),
                ("nvidia-502", "NVIDIA A40-3Q"),
                ("nvidia-503", "NVIDIA A40-4Q"),
                ("nvidia-505", "NVIDIA A40-6Q"),
                ("nvidia-507", "NVIDIA A40-8Q"),
                ("nvidia-511", "NVIDIA A40-12Q"),
                ("nvidia-515", "NVIDIA A40-16Q"),
            ]),
            uncatalogued: BTreeSet::from([
                ("nvidia-504", Some("NVIDIA A40-5Q")),
                ("nvidia-506", Some("NVIDIA A40-7Q")),
                ("nvidia-508", Some("NVIDIA A40-9Q")),
                ("nvidia-509", Some("NVIDIA A40-10Q")),
                ("nvidia-510", Some("NVIDIA A40-11Q")),
                ("nvidia-512", Some("NVIDIA A40-13Q")),
                ("nvidia-513", Some("NVIDIA A40-14Q")),
                ("nvidia-514", Some("NVIDIA A40-15Q")),
                ("nvidia-516", Some("NVIDIA A40-17Q")),
                ("nvidia-517", Some("NVIDIA A40-18Q")),
                ("nvidia-518", Some("NVIDIA A40-19Q")),
                ("nvidia-519", Some("NVIDIA A40-20Q")),
            ]),
            disagreements: Vec::new(),
        }
    );
}

fn large_host(size: &Large) -> FakeHost {
    let host = FakeHost::new().unwrap();
    scenarios::large(&host, size).unwrap();
    host
}

#[test]
fn vf_address_first_vf_is_four_functions_after_pf() {
    assert_eq!(
        vf_address(addr("0000:41:00.0"), 0).unwrap(),
        addr("0000:41:00.4")
    );
}

#[test]
fn vf_address_past_last_function_of_bus_carries_to_next_bus() {
    assert_eq!(
        vf_address(addr("0000:10:00.0"), 252).unwrap(),
        addr("0000:11:00.0")
    );
}

#[test]
fn vf_address_past_bus_ff_is_invalid_input() {
    assert_eq!(
        vf_address(addr("0000:ff:00.0"), 252).map_err(|e| e.kind()),
        Err(io::ErrorKind::InvalidInput)
    );
}

#[test]
fn large_forty_gpus_are_discovered_as_forty_distinct_gpus() {
    let host = large_host(&Large {
        gpus: 40,
        vfs: 1,
        types: 1,
    });
    let inv = inventory(&host);
    let distinct: BTreeSet<PciAddress> = inv.gpus.iter().map(|g| g.address).collect();
    assert_eq!((inv.gpus.len(), distinct.len()), (40, 40));
}

#[test]
fn large_sixteenth_gpu_is_in_the_next_domain() {
    let host = large_host(&Large {
        gpus: 16,
        vfs: 1,
        types: 1,
    });
    let last = inventory(&host).gpus.last().map(|g| g.address);
    assert_eq!(last, Some(addr("0001:10:00.0")));
}

#[test]
fn large_iommu_groups_are_distinct_with_more_than_a_hundred_vfs() {
    let host = large_host(&Large {
        gpus: 2,
        vfs: 150,
        types: 1,
    });
    let inv = inventory(&host);
    let groups: BTreeSet<Option<u32>> = inv
        .gpus
        .iter()
        .flat_map(|g| std::iter::once(g.iommu_group).chain(g.vfs.iter().map(|v| v.iommu_group)))
        .collect();
    assert_eq!(groups.len(), 302);
}

#[test]
fn large_more_gpus_than_domains_hold_is_invalid_input() {
    let host = FakeHost::new().unwrap();
    let size = Large {
        gpus: LARGE_MAX_GPUS + 1,
        vfs: 1,
        types: 1,
    };
    assert_eq!(
        scenarios::large(&host, &size).map_err(|e| e.kind()),
        Err(io::ErrorKind::InvalidInput)
    );
}

#[test]
fn large_more_vfs_than_buses_hold_is_invalid_input() {
    let host = FakeHost::new().unwrap();
    let size = Large {
        gpus: 1,
        vfs: LARGE_MAX_VFS + 1,
        types: 1,
    };
    assert_eq!(
        scenarios::large(&host, &size).map_err(|e| e.kind()),
        Err(io::ErrorKind::InvalidInput)
    );
}

#[test]
fn large_refused_size_lays_nothing_out() {
    let host = FakeHost::new().unwrap();
    let size = Large {
        gpus: 1,
        vfs: LARGE_MAX_VFS + 1,
        types: 1,
    };
    let _refused = scenarios::large(&host, &size);
    let devices = std::fs::read_dir(host.root().join("sys/bus/pci/devices"))
        .unwrap()
        .count();
    assert_eq!(devices, 0);
}
