//! Unit tests of the bounded domain XML reader.

use super::*;

const MDEV_UUID: &str = "c0ffee00-0000-4000-8000-000000000001";

fn domain(devices: &str) -> String {
    format!("<domain type='qemu'><name>vm</name><devices>{devices}</devices></domain>")
}

fn reason(result: Result<Vec<HostdevElement>>) -> String {
    match result {
        Err(Error::Xml { reason, .. }) => reason,
        other => format!("not an Xml error: {other:?}"),
    }
}

#[test]
fn hostdevs_mdev_is_read_with_its_text() {
    let element = format!(
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='off'><source><address uuid='{MDEV_UUID}'/></source></hostdev>"
    );
    let xml = domain(&element);
    let found = hostdevs(&xml).ok();
    let address = format!("<address uuid='{MDEV_UUID}'/>");
    let at = xml.find(&address).unwrap();
    assert_eq!(
        found,
        Some(vec![HostdevElement {
            device: VgpuHandle::Mdev(Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000001)),
            kind: HostdevKind::Mdev,
            text: element,
            source: at..at + address.len(),
        }])
    );
}

#[test]
fn hostdevs_managed_pci_is_plain_vf() {
    let xml = domain(
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev>",
    );
    let found = hostdevs(&xml).map(|v| v.iter().map(|h| (h.device, h.kind)).collect::<Vec<_>>());
    assert_eq!(
        found.ok(),
        Some(vec![(
            VgpuHandle::Vf(PciAddress::new(0, 0x41, 0, 4).expect("valid address")),
            HostdevKind::PlainVf
        )])
    );
}

#[test]
fn hostdevs_unmanaged_pci_is_vendor_vf() {
    let xml = domain(
        "<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0001' bus='0xc1' slot='0x01' function='0x7'/></source></hostdev>",
    );
    let found = hostdevs(&xml).map(|v| v.iter().map(|h| (h.device, h.kind)).collect::<Vec<_>>());
    assert_eq!(
        found.ok(),
        Some(vec![(
            VgpuHandle::Vf(PciAddress::new(1, 0xc1, 1, 7).expect("valid address")),
            HostdevKind::VendorVf
        )])
    );
}

#[test]
fn hostdevs_decimal_and_octal_numbers_read_as_libvirt_does() {
    let xml = domain(
        "<hostdev type='pci'><source><address bus='65' slot='010' function='4'/></source></hostdev>",
    );
    let found = hostdevs(&xml).map(|v| v.iter().map(|h| h.device).collect::<Vec<_>>());
    assert_eq!(
        found.ok(),
        Some(vec![VgpuHandle::Vf(
            PciAddress::new(0, 65, 8, 4).expect("valid address")
        )])
    );
}

#[test]
fn hostdevs_keeps_elements_another_tool_added() {
    let element = format!(
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='on' ramfb='on'>\n  <source>\n    <address uuid='{MDEV_UUID}'/>\n  </source>\n  <alias name='ua-gpu0'/>\n  <rom bar='off'/>\n  <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>\n</hostdev>"
    );
    let found =
        hostdevs(&domain(&element)).map(|v| v.into_iter().map(|h| h.text).collect::<Vec<_>>());
    assert_eq!(found.ok(), Some(vec![element]));
}

#[test]
fn hostdevs_skips_usb_capabilities_and_interfaces() {
    let xml = domain(
        "<hostdev mode='subsystem' type='usb'><source><vendor id='0x1'/><product id='0x2'/></source></hostdev>\
         <hostdev mode='capabilities' type='storage'><source><block>/dev/sdf1</block></source></hostdev>\
         <interface type='hostdev'><source><address type='pci' domain='0' bus='0x41' slot='0' function='4'/></source></interface>",
    );
    assert_eq!(hostdevs(&xml).ok(), Some(Vec::new()));
}

#[test]
fn hostdevs_outside_devices_are_ignored() {
    let xml = format!(
        "<domain><metadata><hostdev type='mdev'><source><address uuid='{MDEV_UUID}'/></source></hostdev></metadata></domain>"
    );
    assert_eq!(hostdevs(&xml).ok(), Some(Vec::new()));
}

#[test]
fn hostdevs_bad_uuid_is_refused() {
    let xml = domain("<hostdev type='mdev'><source><address uuid='nope'/></source></hostdev>");
    assert_eq!(
        reason(hostdevs(&xml)),
        "a mdev <hostdev> source uuid \"nope\" is not a UUID"
    );
}

#[test]
fn hostdevs_missing_source_is_refused() {
    let xml = domain("<hostdev type='pci' managed='yes'></hostdev>");
    assert_eq!(
        reason(hostdevs(&xml)),
        "a <hostdev type='pci'> has no <source><address>"
    );
}

#[test]
fn hostdevs_slot_out_of_range_is_refused() {
    let xml = domain(
        "<hostdev type='pci'><source><address bus='0x41' slot='0x20' function='0'/></source></hostdev>",
    );
    assert_eq!(
        reason(hostdevs(&xml)),
        "a PCI <hostdev> source address 0x0:0x41:0x20.0x0 is out of range"
    );
}

#[test]
fn hostdevs_bus_not_a_number_is_refused() {
    let xml = domain("<hostdev type='pci'><source><address bus='0xzz'/></source></hostdev>");
    assert_eq!(
        reason(hostdevs(&xml)),
        "a PCI <hostdev> source bus \"0xzz\" is not a number"
    );
}

#[test]
fn hostdevs_root_not_domain_is_refused() {
    assert_eq!(
        reason(hostdevs("<network/>")),
        "the root element is <network>, not <domain>"
    );
}

#[test]
fn hostdevs_malformed_is_refused() {
    assert_eq!(
        reason(hostdevs("<domain><devices></domain>")),
        "not well-formed: expected 'devices' tag, not 'domain' at 1:18"
    );
}

#[test]
fn hostdevs_doctype_is_refused() {
    let xml = "<!DOCTYPE domain [<!ENTITY a 'x'>]><domain>&a;</domain>";
    assert_eq!(reason(hostdevs(xml)), DTD_REFUSED);
}

#[test]
fn hostdevs_undeclared_entity_is_refused() {
    assert_eq!(
        reason(hostdevs("<domain>&lol9;</domain>")),
        "not well-formed: unknown entity reference 'lol9' at 1:9"
    );
}

#[test]
fn hostdevs_too_deep_is_refused() {
    let xml = format!(
        "{}{}",
        "<a>".repeat(MAX_DEPTH + 1),
        "</a>".repeat(MAX_DEPTH + 1)
    );
    assert_eq!(
        reason(hostdevs(&xml)),
        format!("elements nested deeper than {MAX_DEPTH}")
    );
}

#[test]
fn hostdevs_at_max_depth_is_read() {
    let xml = format!(
        "<domain>{}{}</domain>",
        "<a>".repeat(MAX_DEPTH - 1),
        "</a>".repeat(MAX_DEPTH - 1)
    );
    assert_eq!(hostdevs(&xml).ok(), Some(Vec::new()));
}

#[test]
fn hostdevs_self_closing_siblings_do_not_count_as_depth() {
    let xml = format!("<domain>{}</domain>", "<a/>".repeat(MAX_DEPTH * 4));
    assert_eq!(hostdevs(&xml).ok(), Some(Vec::new()));
}

#[test]
fn hostdevs_markup_in_comments_and_attributes_does_not_count() {
    let xml = format!(
        "<domain><!-- {} --><description a='{}'/><![CDATA[{}]]></domain>",
        "<a>".repeat(MAX_DEPTH + 1),
        "x=".repeat(MAX_ATTRIBUTES + 1),
        "<a>".repeat(MAX_DEPTH + 1)
    );
    assert_eq!(hostdevs(&xml).ok(), Some(Vec::new()));
}

#[test]
fn hostdevs_too_many_attributes_is_refused() {
    let attributes: String = (0..=MAX_ATTRIBUTES).map(|i| format!(" a{i}=''")).collect();
    let xml = format!("<domain{attributes}/>");
    assert_eq!(
        reason(hostdevs(&xml)),
        format!("an element has more than {MAX_ATTRIBUTES} attributes")
    );
}

#[test]
fn hostdevs_too_many_namespace_declarations_is_refused() {
    let children = "<x:a xmlns:x='urn:x'/>".repeat(MAX_NAMESPACES + 1);
    let xml = format!("<domain>{children}</domain>");
    assert_eq!(
        reason(hostdevs(&xml)),
        format!("more than {MAX_NAMESPACES} namespace declarations")
    );
}

#[test]
fn hostdevs_namespaced_metadata_is_read() {
    let xml = format!(
        "<domain xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'><metadata><app:x xmlns:app=\"urn:app\" xmlns='urn:d'/></metadata><devices><hostdev type='mdev'><source><address uuid='{MDEV_UUID}'/></source></hostdev></devices><qemu:commandline/></domain>"
    );
    assert_eq!(hostdevs(&xml).map(|v| v.len()).ok(), Some(1));
}

#[test]
fn is_xmlns_names_only_declarations() {
    assert_eq!(
        [
            is_xmlns(b"xmlns='u'"),
            is_xmlns(b"xmlns:q='u'"),
            is_xmlns(b"xmlns ='u'"),
            is_xmlns(b"xmlnsfoo='u'"),
            is_xmlns(b"xml:lang='en'")
        ],
        [true, true, true, false, false]
    );
}

#[test]
fn hostdevs_too_large_is_refused() {
    let xml = format!("<domain>{}</domain>", " ".repeat(MAX_BYTES));
    assert_eq!(
        reason(hostdevs(&xml)),
        format!("{} bytes, more than the {MAX_BYTES} read", MAX_BYTES + 17)
    );
}

#[test]
fn hostdevs_too_many_nodes_is_refused() {
    let xml = format!("<domain>{}</domain>", "<a/>".repeat(MAX_NODES as usize));
    assert_eq!(
        reason(hostdevs(&xml)),
        format!("more than {MAX_NODES} nodes")
    );
}

#[test]
fn hostdevs_in_bytes_not_utf8_is_refused() {
    assert_eq!(
        reason(hostdevs_in_bytes(b"<domain>\xff</domain>")),
        "not UTF-8 (invalid byte at offset 8)"
    );
}

#[test]
fn c_number_reads_hex_octal_and_decimal() {
    assert_eq!(
        (
            c_number("0x41"),
            c_number("010"),
            c_number("65"),
            c_number("0")
        ),
        (Some(0x41), Some(8), Some(65), Some(0))
    );
}

#[test]
fn c_number_rejects_empty_hex() {
    assert_eq!(c_number("0x"), None);
}

const DOMAIN_UUID: &str = "c08a5023-faee-4249-9aff-ae9ddf28150e";

fn with_metadata(metadata: &str) -> String {
    format!(
        "<domain type='kvm'><name>vm1</name><uuid>{DOMAIN_UUID}</uuid><metadata>{metadata}</metadata><devices/></domain>"
    )
}

fn domain_reason(result: Result<DomainXml>) -> String {
    match result {
        Err(Error::Xml { reason, .. }) => reason,
        other => format!("not an Xml error: {other:?}"),
    }
}

#[test]
fn domain_reads_name_uuid_and_hostdevs() {
    let xml = format!(
        "<domain><name> vm1 </name><uuid>{DOMAIN_UUID}</uuid><devices><hostdev type='mdev'><source><address uuid='{MDEV_UUID}'/></source></hostdev></devices></domain>"
    );
    let found = super::domain(&xml).map(|d| (d.name, d.uuid.to_string(), d.hostdevs.len()));
    assert_eq!(
        found.ok(),
        Some(("vm1".to_owned(), DOMAIN_UUID.to_owned(), 1))
    );
}

#[test]
fn domain_vgpu_metadata_names_the_type() {
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' type='L40S-12Q'/>"
    ));
    assert_eq!(
        super::domain(&xml).map(|d| d.vgpu_type).ok(),
        Some(Some("L40S-12Q".to_owned()))
    );
}

#[test]
fn domain_vgpu_element_of_another_namespace_is_not_ours() {
    let xml = with_metadata("<x:vgpu xmlns:x='urn:other' type='L40S-12Q'/>");
    assert_eq!(super::domain(&xml).map(|d| d.vgpu_type).ok(), Some(None));
}

#[test]
fn domain_nova_flavor_is_read_from_nova_instance() {
    let xml = with_metadata(
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>\
         <nova:name>server-1</nova:name>\
         <nova:flavor name='vgpu.l40s-12q'><nova:memory>4096</nova:memory></nova:flavor>\
         </nova:instance>",
    );
    assert_eq!(
        super::domain(&xml).map(|d| d.nova_flavor).ok(),
        Some(Some("vgpu.l40s-12q".to_owned()))
    );
}

#[test]
fn domain_without_uuid_is_refused() {
    assert_eq!(
        domain_reason(super::domain("<domain><name>vm1</name></domain>")),
        "the domain's <uuid> \"\" is not a UUID"
    );
}

#[test]
fn domain_without_name_is_refused() {
    let xml = format!("<domain><uuid>{DOMAIN_UUID}</uuid></domain>");
    assert_eq!(
        domain_reason(super::domain(&xml)),
        "the domain has no <name>"
    );
}

#[test]
fn domain_in_bytes_with_entity_declaration_is_refused() {
    let xml = b"<!DOCTYPE d [<!ENTITY a 'aaaa'><!ENTITY b '&a;&a;&a;'>]><domain>&b;</domain>";
    assert_eq!(domain_reason(domain_in_bytes(xml)), DTD_REFUSED);
}

/// Nova's instance metadata as `nova/virt/libvirt/config.py` writes it (namespace 1.1).
const NOVA_INSTANCE: &str = "<nova:instance xmlns:nova=\"http://openstack.org/xmlns/libvirt/nova/1.1\">\
     <nova:package version=\"29.0.1\"/>\
     <nova:name>server-1</nova:name>\
     <nova:creationTime>2024-05-02 09:14:27</nova:creationTime>\
     <nova:flavor name=\"vgpu.l40s-12q\"><nova:memory>16384</nova:memory><nova:disk>40</nova:disk>\
     <nova:swap>0</nova:swap><nova:ephemeral>0</nova:ephemeral><nova:vcpus>8</nova:vcpus></nova:flavor>\
     <nova:owner>\
       <nova:user uuid=\"85bd45c0d6a84e7d9e6b5c2b0d213684\">joe</nova:user>\
       <nova:project uuid=\"d33b8c0e1f2a4b3c9d8e7f6a5b342d69\">acmecorp</nova:project>\
     </nova:owner>\
     <nova:root type=\"image\" uuid=\"69f2991b-2b3e-4c4f-a1d2-7f0a2f29a8bc\"/>\
     </nova:instance>";

#[test]
fn tenant_vgpu_label_is_read_trimmed() {
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' tenant=' acme ' type='L40S-12Q'/>"
    ));
    assert_eq!(
        super::tenant(&xml).ok(),
        Some(Some(Tenant {
            name: "acme".to_owned(),
            source: TenantSource::Vgpu,
            project_id: None,
        }))
    );
}

#[test]
fn tenant_nova_project_is_read_with_its_id() {
    let xml = with_metadata(NOVA_INSTANCE);
    assert_eq!(
        super::domain(&xml).map(|d| (d.tenant, d.nova_flavor)).ok(),
        Some((
            Some(Tenant {
                name: "acmecorp".to_owned(),
                source: TenantSource::Nova,
                project_id: Some("d33b8c0e1f2a4b3c9d8e7f6a5b342d69".to_owned()),
            }),
            Some("vgpu.l40s-12q".to_owned())
        ))
    );
}

#[test]
fn tenant_vgpu_label_wins_over_nova_project() {
    let xml = with_metadata(&format!(
        "{NOVA_INSTANCE}<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' tenant='showback-7'/>"
    ));
    assert_eq!(
        super::tenant(&xml)
            .map(|t| t.map(|t| (t.name, t.source)))
            .ok(),
        Some(Some(("showback-7".to_owned(), TenantSource::Vgpu)))
    );
}

#[test]
fn tenant_empty_vgpu_label_falls_back_to_nova_project() {
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' tenant='  '/>{NOVA_INSTANCE}"
    ));
    assert_eq!(
        super::tenant(&xml).map(|t| t.map(|t| t.name)).ok(),
        Some(Some("acmecorp".to_owned()))
    );
}

#[test]
fn tenant_nova_project_without_name_is_named_by_its_id() {
    let xml = with_metadata(
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.0'><nova:owner>\
         <nova:project uuid='d33b8c0e1f2a4b3c9d8e7f6a5b342d69'></nova:project></nova:owner></nova:instance>",
    );
    assert_eq!(
        super::tenant(&xml).map(|t| t.map(|t| t.name)).ok(),
        Some(Some("d33b8c0e1f2a4b3c9d8e7f6a5b342d69".to_owned()))
    );
}

#[test]
fn tenant_nova_owner_without_project_is_none() {
    let xml = with_metadata(
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'><nova:owner>\
         <nova:user uuid='85bd45c0d6a84e7d9e6b5c2b0d213684'>joe</nova:user></nova:owner></nova:instance>",
    );
    assert_eq!(super::tenant(&xml).ok(), Some(None));
}

#[test]
fn tenant_project_outside_nova_namespace_is_not_read() {
    let xml = with_metadata(
        "<x:instance xmlns:x='urn:other'><x:owner><x:project uuid='1'>evil</x:project></x:owner></x:instance>",
    );
    assert_eq!(super::tenant(&xml).ok(), Some(None));
}

#[test]
fn tenant_of_document_with_dtd_is_refused() {
    let result = super::tenant("<!DOCTYPE domain><domain/>");
    assert!(
        matches!(&result, Err(Error::Xml { reason, .. }) if reason == DTD_REFUSED),
        "{result:?}"
    );
}

#[test]
fn belonging_says_nova_manages_a_domain_with_nova_instance() {
    let nova = hostdevs_and_belonging(&with_metadata(NOVA_INSTANCE))
        .unwrap()
        .1;
    let vgpu_only = hostdevs_and_belonging(&with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' tenant='acme'/>"
    )))
    .unwrap()
    .1;
    let other_namespace = hostdevs_and_belonging(&with_metadata(
        "<nova:instance xmlns:nova='http://example.com/not-nova'/>",
    ))
    .unwrap()
    .1;

    assert_eq!(
        (
            nova.nova,
            nova.tenant.map(|t| t.name),
            vgpu_only.nova,
            other_namespace.nova
        ),
        (true, Some("acmecorp".to_owned()), false, false)
    );
}

#[test]
fn rewrite_sources_changes_only_the_moved_sources() {
    let vf = "<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n    <address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/>\n  </source>\n  <alias name='hostdev0'/>\n</hostdev>";
    let kept = format!(
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{MDEV_UUID}'/></source></hostdev>"
    );
    let xml = format!("<domain>\n<!-- a comment -->\n<devices>\n{vf}\n{kept}\n</devices></domain>");
    let from = VgpuHandle::Vf("0000:41:00.4".parse().unwrap());
    let to = VgpuHandle::Vf("0000:c1:01.3".parse().unwrap());

    let rewritten = rewrite_sources(&xml, &[(from, to)]).unwrap();

    assert_eq!(
        rewritten,
        xml.replace(
            "<address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/>",
            "<address domain='0x0000' bus='0xc1' slot='0x01' function='0x3'/>"
        )
    );
    assert_eq!(rewrite_sources(&xml, &[]).unwrap(), xml);
}

#[test]
fn rewrite_sources_renames_the_device_vgpus_metadata_records_and_no_other() {
    let new = "6f2b1c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}'><device id='{MDEV_UUID}' type='GRID T4-2Q'/>\
         <device id='0000:41:00.4' type='NVIDIA L40S-12Q'/></vgpu:vgpu>\
         <other xmlns='https://example.com/other'><device id='{MDEV_UUID}'/></other>"
    ))
    .replace(
        "<devices/>",
        &format!(
            "<devices><hostdev mode='subsystem' type='mdev' model='vfio-pci'><source>\
             <address uuid='{MDEV_UUID}'/></source></hostdev></devices>"
        ),
    );
    let from = VgpuHandle::Mdev(MDEV_UUID.parse().unwrap());
    let to = VgpuHandle::Mdev(new.parse().unwrap());

    let rewritten = rewrite_sources(&xml, &[(from, to)]).unwrap();

    assert_eq!(
        rewritten,
        xml.replacen(
            &format!("<device id='{MDEV_UUID}' type"),
            &format!("<device id='{new}' type"),
            1
        )
        .replace(
            &format!("<address uuid='{MDEV_UUID}'/>"),
            &format!("<address uuid='{new}'/>")
        )
    );
    assert_eq!(
        super::domain(&rewritten).unwrap().device_types[0],
        (to, "GRID T4-2Q".to_owned())
    );
}

#[test]
fn rewrite_sources_leaves_out_a_stale_record_of_the_name_a_move_gives() {
    let (from, to) = ("0000:41:00.4", "0000:41:00.5");
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}'><device id='{to}' type='NVIDIA L40S-24Q'/>\
         <device id='{from}' type='NVIDIA L40S-12Q'/></vgpu:vgpu>"
    ))
    .replace(
        "<devices/>",
        "<devices><hostdev mode='subsystem' type='pci' managed='no'><source>\
         <address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev></devices>",
    );
    let moves = [(
        VgpuHandle::Vf(from.parse().unwrap()),
        VgpuHandle::Vf(to.parse().unwrap()),
    )];

    let rewritten = rewrite_sources(&xml, &moves).unwrap();

    assert_eq!(
        rewritten,
        xml.replace(&format!("<device id='{to}' type='NVIDIA L40S-24Q'/>"), "")
            .replace(
                &format!("<device id='{from}'"),
                &format!("<device id='{to}'")
            )
            .replace("function='0x4'", "function='0x5'")
    );
    assert_eq!(
        super::domain(&rewritten).unwrap().device_types,
        [(moves[0].1, "NVIDIA L40S-12Q".to_owned())]
    );
}

#[test]
fn rewrite_sources_swaps_two_devices_and_their_records() {
    let (a, b) = ("0000:41:00.4", "0000:41:00.5");
    let source = |f: &str| {
        format!(
            "<hostdev mode='subsystem' type='pci' managed='no'><source>\
             <address domain='0x0000' bus='0x41' slot='0x00' function='{f}'/></source></hostdev>"
        )
    };
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}'><device id='{a}' type='A'/>\
         <device id='{b}' type='B'/></vgpu:vgpu>"
    ))
    .replace(
        "<devices/>",
        &format!("<devices>{}{}</devices>", source("0x4"), source("0x5")),
    );
    let (va, vb) = (
        VgpuHandle::Vf(a.parse().unwrap()),
        VgpuHandle::Vf(b.parse().unwrap()),
    );

    let rewritten = rewrite_sources(&xml, &[(va, vb), (vb, va)]).unwrap();

    assert_eq!(
        rewritten,
        with_metadata(&format!(
            "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}'><device id='{b}' type='A'/>\
             <device id='{a}' type='B'/></vgpu:vgpu>"
        ))
        .replace(
            "<devices/>",
            &format!("<devices>{}{}</devices>", source("0x5"), source("0x4")),
        )
    );
}

#[test]
fn vgpu_metadata_with_device_keeps_the_rest_and_replaces_the_same_device() {
    let other = "0000:41:00.5";
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}' type='L40S-12Q' tenant='a&amp;b'>\
         <device id='{MDEV_UUID}' type='GRID T4-2Q'/><device id='{other}' type='NVIDIA L40S-12Q'/>\
         </vgpu:vgpu>"
    ));
    let device = VgpuHandle::Mdev(MDEV_UUID.parse().unwrap());

    let element = vgpu_metadata_with_device(&xml, device, "GRID T4-4Q").unwrap();
    let fresh = vgpu_metadata_with_device(&with_metadata(""), device, "it's").unwrap();

    assert_eq!(
        element,
        format!(
            "<vgpu type='L40S-12Q' tenant='a&amp;b'><device id='{other}' type='NVIDIA L40S-12Q'/>\
             <device id='{MDEV_UUID}' type='GRID T4-4Q'/></vgpu>"
        )
    );
    assert_eq!(
        fresh,
        format!("<vgpu><device id='{MDEV_UUID}' type='it&apos;s'/></vgpu>")
    );
}

#[test]
fn domain_reads_device_types_in_or_out_of_the_namespace() {
    let xml = with_metadata(&format!(
        "<vgpu:vgpu xmlns:vgpu='{METADATA_NAMESPACE}'><device id='{MDEV_UUID}' type='GRID T4-2Q'/>\
         <vgpu:device id='0000:41:00.4' type='NVIDIA L40S-12Q'/><device id='bad' type='x'/></vgpu:vgpu>"
    ));

    let read = super::domain(&xml).unwrap();

    assert_eq!(
        read.device_types,
        vec![
            (
                VgpuHandle::Mdev(MDEV_UUID.parse().unwrap()),
                "GRID T4-2Q".to_owned()
            ),
            (
                VgpuHandle::Vf("0000:41:00.4".parse().unwrap()),
                "NVIDIA L40S-12Q".to_owned()
            )
        ]
    );
}
