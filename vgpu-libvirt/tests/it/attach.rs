//! Attaching and detaching each kind of vGPU hostdev, against libvirt's real QEMU driver
//! (`qemu:///embed`, no daemon). This host has no VFIO, so devices are attached to persistent
//! definitions, and live attaches meet libvirt's real refusal.
//!
//! All tests of this binary share one embedded driver, so each uses its own domains and
//! devices.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common;

use crate::common::{TestDomain, addr, connect, domain_xml, inventory, mdev};
use vgpu_core::{ErrorKind, model::VgpuHandle};
use vgpu_domain::{Attached, Domain, Hostdev, HostdevKind, Scope};
use vgpu_libvirt::Error;

const BINARY: &str = "attach";
const CONFIG: Scope = Scope {
    live: false,
    config: true,
};
const BOTH: Scope = Scope {
    live: true,
    config: true,
};

fn hostdev(id: VgpuHandle) -> Hostdev {
    let inventory = inventory(
        &[1, 2, 3, 4, 5, 6, 7, 8, 9],
        &["0000:41:00.4", "0000:41:00.5"],
        &["0001:03:00.1"],
    );
    Hostdev::for_vgpu(&inventory, id).unwrap()
}

/// The `<hostdev …>` start tags of a domain's XML, in order.
fn hostdev_tags(xml: &str) -> Vec<String> {
    xml.match_indices("<hostdev ")
        .map(|(at, _)| xml[at..].split_once('>').unwrap().0.to_owned() + ">")
        .collect()
}

#[test]
fn define_reports_a_defined_only_domain() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "define-1", "");
    let domain = conn.domain(&vm.name).unwrap();
    assert_eq!((domain.name.as_str(), domain.running), ("define-1", false));
}

#[test]
fn domain_absent_is_no_such_domain() {
    let conn = connect(BINARY);
    let err = conn.domain("absent-1").unwrap_err();
    assert!(
        matches!(&err, Error::NoSuchDomain { name } if name == "absent-1"),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn domains_lists_running_and_defined_by_name() {
    let conn = connect(BINARY);
    let b = TestDomain::define(&conn, "list-b", "");
    let _a = TestDomain::define(&conn, "list-a", "");
    conn.start(&b.name).unwrap();
    let listed: Vec<(String, bool)> = conn
        .domains()
        .unwrap()
        .into_iter()
        .filter(|d| d.name.starts_with("list-"))
        .map(|d| (d.name, d.running))
        .collect();
    assert_eq!(
        listed,
        vec![("list-a".to_owned(), false), ("list-b".to_owned(), true)]
    );
}

#[test]
fn attach_mdev_to_config_is_read_back() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "mdev-1", "");
    let id = VgpuHandle::Mdev(mdev(1));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    assert_eq!(
        conn.hostdevs(&vm.name).unwrap(),
        vec![Attached {
            device: id,
            kind: HostdevKind::Mdev,
            live: false,
            config: true
        }]
    );
    let xml = domain_xml(BINARY, &vm.name, true);
    assert_eq!(
        (
            hostdev_tags(&xml),
            xml.contains("<address uuid='c0ffee00-0000-4000-8000-000000000001'/>")
        ),
        (
            vec!["<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>".to_owned()],
            true
        )
    );
}

#[test]
fn attach_vendor_vf_to_config_is_unmanaged_pci() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "vendor-vf-1", "");
    let id = VgpuHandle::Vf(addr("0000:41:00.4"));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    let xml = domain_xml(BINARY, &vm.name, true);
    assert_eq!(
        (
            conn.hostdevs(&vm.name).unwrap(),
            hostdev_tags(&xml),
            xml.contains("<address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/>")
        ),
        (
            vec![Attached {
                device: id,
                kind: HostdevKind::VendorVf,
                live: false,
                config: true
            }],
            vec!["<hostdev mode='subsystem' type='pci' managed='no'>".to_owned()],
            true
        )
    );
}

#[test]
fn attach_plain_vf_to_config_is_managed_pci() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "plain-vf-1", "");
    let id = VgpuHandle::Vf(addr("0001:03:00.1"));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    let xml = domain_xml(BINARY, &vm.name, true);
    assert_eq!(
        (
            conn.hostdevs(&vm.name).unwrap(),
            hostdev_tags(&xml),
            xml.contains("<address domain='0x0001' bus='0x03' slot='0x00' function='0x1'/>")
        ),
        (
            vec![Attached {
                device: id,
                kind: HostdevKind::PlainVf,
                live: false,
                config: true
            }],
            vec!["<hostdev mode='subsystem' type='pci' managed='yes'>".to_owned()],
            true
        )
    );
}

#[test]
fn detach_then_attach_again_holds_the_device_once() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "reattach-1", "");
    let id = VgpuHandle::Mdev(mdev(2));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    conn.detach(&vm.name, id, CONFIG).unwrap();
    let after_detach = conn.hostdevs(&vm.name).unwrap();
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    assert_eq!(
        (
            after_detach,
            conn.hostdevs(&vm.name).unwrap().len(),
            hostdev_tags(&domain_xml(BINARY, &vm.name, true)).len()
        ),
        (Vec::new(), 1, 1)
    );
}

#[test]
fn detach_vendor_vf_leaves_no_hostdev() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "detach-vf-1", "");
    let id = VgpuHandle::Vf(addr("0000:41:00.5"));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    conn.detach(&vm.name, id, CONFIG).unwrap();
    assert_eq!(
        hostdev_tags(&domain_xml(BINARY, &vm.name, true)),
        Vec::<String>::new()
    );
}

#[test]
fn attach_twice_is_attached_once() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "twice-1", "");
    let id = VgpuHandle::Mdev(mdev(3));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    assert_eq!(hostdev_tags(&domain_xml(BINARY, &vm.name, true)).len(), 1);
}

#[test]
fn attach_held_by_another_domain_is_refused_naming_it() {
    let conn = connect(BINARY);
    let holder = TestDomain::define(&conn, "held-holder", "");
    let vm = TestDomain::define(&conn, "held-wanter", "");
    let id = VgpuHandle::Mdev(mdev(4));
    conn.attach(&holder.name, &hostdev(id), CONFIG).unwrap();
    let err = conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap_err();
    assert!(
        matches!(&err, Error::HeldElsewhere { device, domain }
            if device == "c0ffee00-0000-4000-8000-000000000004" && domain == "held-holder"),
        "{err:?}"
    );
    assert_eq!(
        (err.kind(), conn.hostdevs(&vm.name).unwrap()),
        (ErrorKind::Conflict, Vec::new())
    );
}

#[test]
fn attach_held_by_a_running_domains_config_is_refused() {
    let conn = connect(BINARY);
    let holder = TestDomain::define(&conn, "held-running", "");
    let vm = TestDomain::define(&conn, "held-wanter-2", "");
    let id = VgpuHandle::Mdev(mdev(5));
    conn.start(&holder.name).unwrap();
    conn.attach(&holder.name, &hostdev(id), CONFIG).unwrap();
    let err = conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap_err();
    assert!(
        matches!(&err, Error::HeldElsewhere { domain, .. } if domain == "held-running"),
        "{err:?}"
    );
}

#[test]
fn detach_of_a_device_not_held_is_not_attached() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "not-held-1", "");
    let err = conn
        .detach(&vm.name, VgpuHandle::Mdev(mdev(6)), CONFIG)
        .unwrap_err();
    assert!(
        matches!(&err, Error::NotAttached { device, domain }
            if device == "c0ffee00-0000-4000-8000-000000000006" && domain == "not-held-1"),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn detach_live_of_a_device_held_only_in_config_is_not_attached() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "not-held-live", "");
    let id = VgpuHandle::Mdev(mdev(7));
    conn.attach(&vm.name, &hostdev(id), CONFIG).unwrap();
    let err = conn
        .detach(
            &vm.name,
            id,
            Scope {
                live: true,
                config: false,
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::NotAttached { .. }), "{err:?}");
    assert_eq!(conn.hostdevs(&vm.name).unwrap().len(), 1);
}

#[test]
fn attach_live_to_running_domain_is_libvirts_refusal_and_leaves_nothing() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "live-1", "");
    conn.start(&vm.name).unwrap();
    let id = VgpuHandle::Mdev(mdev(8));
    let err = conn.attach(&vm.name, &hostdev(id), BOTH).unwrap_err();
    let Error::Libvirt {
        operation,
        domain,
        device,
        code,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            *operation,
            domain.as_deref(),
            device.as_deref(),
            *code,
            message.as_str(),
            err.kind()
        ),
        (
            "attach",
            Some("live-1"),
            Some("c0ffee00-0000-4000-8000-000000000008"),
            67, // VIR_ERR_CONFIG_UNSUPPORTED
            "unsupported configuration: Mediated host device assignment requires VFIO support",
            ErrorKind::HostFault
        )
    );
    assert_eq!(
        (
            conn.hostdevs(&vm.name).unwrap(),
            hostdev_tags(&domain_xml(BINARY, &vm.name, false)),
            hostdev_tags(&domain_xml(BINARY, &vm.name, true))
        ),
        (Vec::new(), Vec::<String>::new(), Vec::<String>::new())
    );
}

#[test]
fn attach_live_vendor_vf_to_running_domain_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "live-vf-1", "");
    conn.start(&vm.name).unwrap();
    let id = VgpuHandle::Vf(addr("0000:41:00.4"));
    let err = conn.attach(&vm.name, &hostdev(id), BOTH).unwrap_err();
    assert!(
        matches!(&err, Error::Libvirt { code: 67, message, .. }
            if message == "unsupported configuration: host doesn't support passthrough of host PCI devices"),
        "{err:?}"
    );
    assert_eq!(conn.hostdevs(&vm.name).unwrap(), Vec::new());
}

#[test]
fn attach_live_to_stopped_domain_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(&conn, "live-stopped-1", "");
    let id = VgpuHandle::Mdev(mdev(9));
    let err = conn.attach(&vm.name, &hostdev(id), BOTH).unwrap_err();
    assert!(
        matches!(&err, Error::Libvirt { operation: "attach", code: 55, message, .. }
            if message == "Requested operation is not valid: domain is not running"),
        "{err:?}"
    );
    assert_eq!(
        (err.kind(), conn.hostdevs(&vm.name).unwrap()),
        (ErrorKind::Conflict, Vec::new())
    );
}

#[test]
fn start_with_a_mdev_hostdev_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(
        &conn,
        "start-mdev-1",
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-0000000000aa'/></source></hostdev>",
    );
    let err = conn.start(&vm.name).unwrap_err();
    assert!(
        matches!(&err, Error::Libvirt { operation: "start", code: 67, message, .. }
            if message == "unsupported configuration: Mediated host device assignment requires VFIO support"),
        "{err:?}"
    );
    assert!(!conn.domain(&vm.name).unwrap().running);
}

#[test]
fn start_with_a_pci_hostdev_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let vm = TestDomain::define(
        &conn,
        "start-pci-1",
        "<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x01' function='0x0'/></source></hostdev>",
    );
    let err = conn.start(&vm.name).unwrap_err();
    assert!(
        matches!(&err, Error::Libvirt { operation: "start", code: 67, message, .. }
            if message == "unsupported configuration: host doesn't support passthrough of host PCI devices"),
        "{err:?}"
    );
    assert!(!conn.domain(&vm.name).unwrap().running);
}

#[test]
fn hostdev_written_by_another_tool_is_read_kept_and_detachable() {
    let conn = connect(BINARY);
    let foreign = "<hostdev mode='subsystem' type='pci' managed='yes'>\
        <driver name='vfio'/>\
        <source><address domain='0x0000' bus='0x41' slot='0x00' function='0x6'/></source>\
        <alias name='ua-gpu0'/>\
        <rom bar='off'/>\
        <address type='pci' domain='0x0000' bus='0x00' slot='0x07' function='0x0'/>\
        </hostdev>";
    let vm = TestDomain::define(&conn, "foreign-1", foreign);
    let id = VgpuHandle::Vf(addr("0000:41:00.6"));
    let read = conn.hostdevs(&vm.name).unwrap();
    let kept = domain_xml(BINARY, &vm.name, true);
    conn.detach(&vm.name, id, CONFIG).unwrap();
    assert_eq!(
        (
            read,
            [
                "<driver name='vfio'/>",
                "<alias name='ua-gpu0'/>",
                "<rom bar='off'/>",
                "slot='0x07'"
            ]
            .map(|s| kept.contains(s)),
            hostdev_tags(&domain_xml(BINARY, &vm.name, true))
        ),
        (
            vec![Attached {
                device: id,
                kind: HostdevKind::PlainVf,
                live: false,
                config: true
            }],
            [true; 4],
            Vec::<String>::new()
        )
    );
}

#[test]
fn hostdevs_of_absent_domain_is_no_such_domain() {
    let conn = connect(BINARY);
    let err = conn.hostdevs("absent-2").unwrap_err();
    assert!(matches!(err, Error::NoSuchDomain { .. }), "{err:?}");
}

#[test]
fn define_of_malformed_xml_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let err = conn.define("<domain type='qemu'><name>broken").unwrap_err();
    let Error::Libvirt {
        operation,
        code,
        message,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*operation, *code, message.as_str(), err.kind()),
        (
            "define",
            35, // VIR_ERR_XML_DETAIL
            "(domain_definition):1: Premature end of data in tag name line 1\n\
             <domain type='qemu'><name>broken\n\
             --------------------------------^",
            ErrorKind::BadInput
        )
    );
}

#[test]
fn stop_then_undefine_removes_the_domain() {
    let conn = connect(BINARY);
    let defined: Domain = conn
        .define(&common::minimal_domain("undefine-1", ""))
        .unwrap();
    conn.start(&defined.name).unwrap();
    conn.stop(&defined.name).unwrap();
    conn.undefine(&defined.name).unwrap();
    assert!(matches!(
        conn.domain("undefine-1"),
        Err(Error::NoSuchDomain { .. })
    ));
}
