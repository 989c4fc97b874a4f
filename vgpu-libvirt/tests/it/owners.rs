//! Who holds which vGPU, read from libvirt's real QEMU driver (`qemu:///embed`): a running
//! domain, a defined-only one, one defined with a vGPU another already holds, an orphaned
//! vGPU, and references to devices the host does not have; and the tenant each domain's
//! metadata names (`vgpu`'s label, Nova's project).
//!
//! This host has no VFIO, so no guest can run with a hostdev: the running domain holds its
//! vGPUs in its persistent definition, attached after it started.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{TestDomain, addr, connect, inventory, mdev};
use vgpu_core::model::VgpuHandle;
use vgpu_domain::xml::{METADATA_NAMESPACE, Tenant, TenantSource};
use vgpu_domain::{Hold, Holder, Hostdev, Owned, Owners, Reference, Scope};

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

    let alpha = TestDomain::define_with_metadata(
        &conn,
        "alpha",
        &format!("<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' tenant='acme'/>"),
        "",
    );
    conn.start(&alpha.name).unwrap();
    conn.attach(&alpha.name, &hostdev(VgpuHandle::Mdev(mdev(1))), CONFIG)
        .unwrap();
    conn.attach(
        &alpha.name,
        &hostdev(VgpuHandle::Vf(addr("0000:41:00.4"))),
        CONFIG,
    )
    .unwrap();

    // Defined with its hostdevs in its XML, as another tool would (Nova): one of them is
    // alpha's.
    let beta = TestDomain::define_with_metadata(
        &conn,
        "beta",
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>\
         <nova:name>server-1</nova:name>\
         <nova:owner><nova:user uuid='85bd45c0d6a84e7d9e6b5c2b0d213684'>joe</nova:user>\
         <nova:project uuid='d33b8c0e1f2a4b3c9d8e7f6a5b342d69'>globex</nova:project></nova:owner>\
         </nova:instance>",
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-000000000002'/></source></hostdev>\
         <hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0001' bus='0x03' slot='0x00' function='0x1'/></source></hostdev>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-00000000dead'/></source></hostdev>\
         <hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x99' slot='0x00' function='0x0'/></source></hostdev>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-000000000001'/></source></hostdev>",
    );

    let alpha_uuid = conn.domain(&alpha.name).unwrap().uuid;
    let beta_uuid = conn.domain(&beta.name).unwrap().uuid;
    let acme = Tenant {
        name: "acme".to_owned(),
        source: TenantSource::Vgpu,
        project_id: None,
    };
    let globex = Tenant {
        name: "globex".to_owned(),
        source: TenantSource::Nova,
        project_id: Some("d33b8c0e1f2a4b3c9d8e7f6a5b342d69".to_owned()),
    };
    let holder = |domain: &str, uuid, running, tenant: &Tenant| Hold {
        holder: Holder {
            domain: domain.to_owned(),
            uuid,
            tenant: Some(tenant.clone()),
        },
        running,
        live: false,
        config: true,
        // Nova's project is read from Nova's <nova:instance>: the domain is Nova's.
        nova: tenant.source == TenantSource::Nova,
    };
    assert_eq!(
        conn.owners(&inventory).unwrap(),
        Owners {
            vgpus: vec![
                Owned {
                    id: VgpuHandle::Mdev(mdev(1)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    type_name: None,
                    holders: vec![
                        holder("alpha", alpha_uuid, true, &acme),
                        holder("beta", beta_uuid, false, &globex)
                    ],
                },
                Owned {
                    id: VgpuHandle::Mdev(mdev(2)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    type_name: None,
                    holders: vec![holder("beta", beta_uuid, false, &globex)],
                },
                Owned {
                    id: VgpuHandle::Mdev(mdev(3)),
                    gpu: addr("0000:3b:00.0"),
                    type_id: "nvidia-222".to_owned(),
                    type_name: None,
                    holders: Vec::new(),
                },
                Owned {
                    id: VgpuHandle::Vf(addr("0000:41:00.4")),
                    gpu: addr("0000:41:00.0"),
                    type_id: "1145".to_owned(),
                    type_name: None,
                    holders: vec![holder("alpha", alpha_uuid, true, &acme)],
                },
                Owned {
                    id: VgpuHandle::Vf(addr("0001:03:00.1")),
                    gpu: addr("0001:03:00.0"),
                    type_id: "vf".to_owned(),
                    type_name: None,
                    holders: vec![holder("beta", beta_uuid, false, &globex)],
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
