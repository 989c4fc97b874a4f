//! Who holds which vGPU, read from libvirt's real QEMU driver (`qemu:///embed`): a running
//! domain, a defined-only one, one defined with a vGPU another already holds, an orphaned
//! vGPU, and references to devices the host does not have.
//!
//! This host has no VFIO, so no guest can run with a hostdev: the running domain holds its
//! vGPUs in its persistent definition, attached after it started.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod common;

use common::{TestDomain, addr, connect, inventory, mdev};
use vgpu_core::VgpuHandle;
use vgpu_libvirt::{Holder, Hostdev, Owned, Owners, Reference, Scope};

const BINARY: &str = "owners";
const CONFIG: Scope = Scope {
    live: false,
    config: true,
};

#[test]
fn owners_maps_running_defined_orphaned_and_missing() {
    let conn = connect(BINARY);
    let inventory = inventory(&[1, 2, 3], &["0000:41:00.4"], &["0001:03:00.1"]);
    let hostdev = |id| Hostdev::for_vgpu(&inventory, id).unwrap();

    let alpha = TestDomain::define(&conn, "alpha", "");
    conn.start(&alpha.name).unwrap();
    conn.attach(&alpha.name, &hostdev(VgpuHandle::Mdev(mdev(1))), CONFIG)
        .unwrap();
    conn.attach(
        &alpha.name,
        &hostdev(VgpuHandle::Vf(addr("0000:41:00.4"))),
        CONFIG,
    )
    .unwrap();

    // Defined with its hostdevs in its XML, as another tool would: one of them is alpha's.
    let beta = TestDomain::define(
        &conn,
        "beta",
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-000000000002'/></source></hostdev>\
         <hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0001' bus='0x03' slot='0x00' function='0x1'/></source></hostdev>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-00000000dead'/></source></hostdev>\
         <hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x99' slot='0x00' function='0x0'/></source></hostdev>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-000000000001'/></source></hostdev>",
    );

    let alpha_uuid = conn.domain(&alpha.name).unwrap().uuid;
    let beta_uuid = conn.domain(&beta.name).unwrap().uuid;
    let holder = |domain: &str, uuid, running| Holder {
        domain: domain.to_owned(),
        uuid,
        running,
        live: false,
        config: true,
    };
    assert_eq!(
        conn.owners(&inventory).unwrap(),
        Owners {
            vgpus: vec![
                Owned {
                    id: VgpuHandle::Mdev(mdev(1)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    holders: vec![
                        holder("alpha", alpha_uuid, true),
                        holder("beta", beta_uuid, false)
                    ],
                },
                Owned {
                    id: VgpuHandle::Mdev(mdev(2)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    holders: vec![holder("beta", beta_uuid, false)],
                },
                Owned {
                    id: VgpuHandle::Mdev(mdev(3)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    holders: Vec::new(),
                },
                Owned {
                    id: VgpuHandle::Vf(addr("0000:41:00.4")),
                    gpu: addr("0000:41:00.0"),
                    type_id: "1145".to_owned(),
                    holders: vec![holder("alpha", alpha_uuid, true)],
                },
                Owned {
                    id: VgpuHandle::Vf(addr("0001:03:00.1")),
                    gpu: addr("0001:03:00.0"),
                    type_id: "vf".to_owned(),
                    holders: vec![holder("beta", beta_uuid, false)],
                },
            ],
            missing: vec![
                Reference {
                    domain: "beta".to_owned(),
                    device: VgpuHandle::Mdev(mdev(0xdead)),
                    live: false,
                    config: true,
                },
                Reference {
                    domain: "beta".to_owned(),
                    device: VgpuHandle::Vf(addr("0000:99:00.0")),
                    live: false,
                    config: true,
                },
            ],
        }
    );
}
