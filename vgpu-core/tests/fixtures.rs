//! The fixtures themselves: generated hosts are laid out validly at any size they accept.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::collections::BTreeSet;
use std::io;

use vgpu_core::testing::scenarios::{self, LARGE_MAX_GPUS, LARGE_MAX_VFS, Large, vf_address};
use vgpu_core::testing::{FakeHost, addr};
use vgpu_core::{Inventory, PciAddress, discover};

fn inventory(host: &FakeHost) -> Inventory {
    discover(&host.paths()).expect("discovery")
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
