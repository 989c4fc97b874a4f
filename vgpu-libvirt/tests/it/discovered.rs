//! vGPUs made by `vgpu-core` on the simulated `mixed` host (a FUSE filesystem that behaves like
//! sysfs), discovered, turned into hostdevs, attached to a domain of libvirt's real QEMU driver
//! (`qemu:///embed`) and found again by `owners`.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{TestDomain, addr, connect};
use vgpu_core::{HostPaths, Manager, discover, model::VgpuHandle};
use vgpu_domain::{Hostdev, HostdevKind, Scope};
use vgpu_sim::SimHost;

const BINARY: &str = "discovered";
const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const FLEX: &str = "0001:03:00.0";

#[test]
fn each_kind_of_discovered_vgpu_is_attached_and_owned() {
    let sim = SimHost::mount_for_test("mixed");
    let state = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(sim.root()).with_state_root(state.path());
    let manager = Manager::new(&paths, "vgpu-libvirt test");
    let mdev = manager.create(addr(T4), "T4-2Q", None, None).unwrap().id;
    let vendor_vf = manager
        .create(addr(L40S), "L40S-24Q", None, None)
        .unwrap()
        .id;
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    let plain_vf = manager.create(addr(FLEX), "vf", None, None).unwrap().id;
    let inventory = discover(&paths).unwrap();

    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "discovered-1", "");
    let mut kinds = Vec::new();
    for id in [mdev, vendor_vf, plain_vf] {
        let hostdev = Hostdev::for_vgpu(&inventory, id).unwrap();
        kinds.push(hostdev.kind);
        conn.attach(
            &vm.name,
            &hostdev,
            Scope {
                live: false,
                config: true,
            },
        )
        .unwrap();
    }
    let owned: Vec<(VgpuHandle, String, Vec<String>)> = conn
        .owners(&inventory)
        .unwrap()
        .vgpus
        .into_iter()
        .map(|o| {
            (
                o.id,
                o.gpu.to_string(),
                o.holders.into_iter().map(|h| h.holder.domain).collect(),
            )
        })
        .collect();

    assert_eq!(
        (kinds, plain_vf),
        (
            vec![
                HostdevKind::Mdev,
                HostdevKind::VendorVf,
                HostdevKind::PlainVf
            ],
            VgpuHandle::Vf(addr("0001:03:00.1"))
        )
    );
    assert_eq!(
        owned,
        vec![
            (mdev, T4.to_owned(), vec!["discovered-1".to_owned()]),
            (vendor_vf, L40S.to_owned(), vec!["discovered-1".to_owned()]),
            (plain_vf, FLEX.to_owned(), vec!["discovered-1".to_owned()]),
        ]
    );
}
