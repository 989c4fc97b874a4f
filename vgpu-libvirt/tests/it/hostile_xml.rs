//! Hostile domain XML: refused with `Error::Xml` in time linear in its size, never a panic;
//! and what libvirt itself lets a domain hold (its `<metadata>`, as deep as libxml2 allows) is
//! read.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a failed fixture step is a failed test

use std::time::{Duration, Instant};

use crate::common::{TestDomain, connect, inventory};
use vgpu_domain::xml::{
    MAX_ATTRIBUTES, MAX_BYTES, MAX_DEPTH, MAX_NAMESPACES, MAX_NODES, hostdevs, hostdevs_in_bytes,
};

const BINARY: &str = "hostile";

/// Far above what a linear pass over 4 MiB takes in a debug build, far below what a
/// quadratic one would.
const BOUND: Duration = Duration::from_secs(20);

/// The reason `xml` is refused, and how long that took.
fn refusal(xml: &[u8]) -> (String, Duration) {
    let started = Instant::now();
    let result = hostdevs_in_bytes(xml);
    let took = started.elapsed();
    println!("{} bytes: {took:?}", xml.len());
    match result {
        Err(vgpu_domain::Error::Xml {
            domain: None,
            reason,
        }) => (reason, took),
        other => panic!("not refused as XML: {other:?}"),
    }
}

#[test]
fn huge_document_is_refused() {
    let xml = format!("<domain>{}</domain>", "<a/>".repeat(MAX_BYTES / 4));
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(
        reason,
        format!("{} bytes, more than the 4194304 read", xml.len())
    );
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn deep_nesting_is_refused() {
    let xml = "<a>".repeat(1_000_000);
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(reason, format!("elements nested deeper than {MAX_DEPTH}"));
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn entity_expansion_is_refused() {
    let mut xml = String::from("<?xml version='1.0'?><!DOCTYPE domain [<!ENTITY lol0 'lol'>");
    for i in 1..10 {
        let refs = format!("&lol{};", i - 1).repeat(10);
        xml.push_str(&format!("<!ENTITY lol{i} '{refs}'>"));
    }
    xml.push_str("]><domain><name>&lol9;</name></domain>");
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(
        reason,
        "has a DTD or markup declaration (<!DOCTYPE, <!ENTITY), which is refused"
    );
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn entity_reference_without_declaration_is_refused() {
    let xml = format!("<domain><name>{}</name></domain>", "&lol9;".repeat(100_000));
    let (reason, _) = refusal(xml.as_bytes());
    assert_eq!(
        reason,
        "not well-formed: unknown entity reference 'lol9' at 1:15"
    );
}

#[test]
fn non_utf8_is_refused() {
    let mut xml = b"<domain><name>".to_vec();
    xml.extend_from_slice(&[0xc3, 0x28]);
    xml.extend_from_slice(b"</name></domain>");
    let (reason, _) = refusal(&xml);
    assert_eq!(reason, "not UTF-8 (invalid byte at offset 14)");
}

#[test]
fn many_attributes_on_one_element_are_refused() {
    let attributes: String = (0..300_000).map(|i| format!(" a{i}=''")).collect();
    let xml = format!("<domain{attributes}/>");
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(
        reason,
        format!("an element has more than {MAX_ATTRIBUTES} attributes")
    );
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn too_many_nodes_are_refused() {
    let xml = format!("<domain>{}</domain>", "<a/>".repeat(900_000));
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(reason, format!("more than {MAX_NODES} nodes"));
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn namespace_declarations_on_every_element_are_refused() {
    let declarations: String = (0..60).map(|i| format!(" xmlns:n{i}='u'")).collect();
    let children = "<b xmlns:c='u'/>".repeat(200_000);
    let xml = format!("<domain{declarations}><devices>{children}</devices></domain>");
    let (reason, took) = refusal(xml.as_bytes());
    assert_eq!(
        reason,
        format!("more than {MAX_NAMESPACES} namespace declarations")
    );
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn most_namespaces_with_prefixed_elements_are_read_in_bounded_time() {
    let declarations: String = (0..MAX_NAMESPACES)
        .map(|i| format!(" xmlns:n{i}='u{i}'"))
        .collect();
    let last = MAX_NAMESPACES - 1;
    let children = format!("<n{last}:b n{last}:a=''/>").repeat(150_000);
    let xml = format!("<domain{declarations}><metadata>{children}</metadata></domain>");
    let started = Instant::now();
    let result = hostdevs(&xml);
    let took = started.elapsed();
    println!("{} bytes: {took:?}", xml.len());
    assert_eq!(result.ok(), Some(Vec::new()));
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn most_attributes_on_every_element_are_read_in_bounded_time() {
    let attributes: String = (0..MAX_ATTRIBUTES).map(|i| format!(" a{i}=''")).collect();
    let children = format!("<b{attributes}/>").repeat(MAX_BYTES / (MAX_ATTRIBUTES * 7));
    let xml = format!("<domain><metadata>{children}</metadata></domain>");
    let started = Instant::now();
    let result = hostdevs(&xml);
    let took = started.elapsed();
    println!("{} bytes: {took:?}", xml.len());
    assert_eq!(result.ok(), Some(Vec::new()));
    assert!(took < BOUND, "{took:?}");
}

#[test]
fn truncated_document_is_refused() {
    let (reason, _) = refusal(b"<domain><devices><hostdev type='mdev'");
    assert_eq!(
        reason,
        "not well-formed: the root node was opened but never closed"
    );
}

/// `<metadata>` nesting `levels` elements below `<x:a>`.
fn deep_metadata(levels: usize) -> String {
    format!(
        "<metadata><x:a xmlns:x='urn:x'>{}{}</x:a></metadata>",
        "<x:a>".repeat(levels),
        "</x:a>".repeat(levels)
    )
}

fn minimal_with_metadata(name: &str, metadata: &str) -> String {
    format!(
        "<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os>{metadata}\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>\
         <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c0ffee00-0000-4000-8000-000000000001'/></source></hostdev>\
         </devices></domain>"
    )
}

#[test]
fn deepest_metadata_libvirt_accepts_is_read() {
    let conn = connect(BINARY);
    conn.define(&minimal_with_metadata("deep-254", &deep_metadata(254)))
        .unwrap();
    let _vm = TestDomain {
        conn: &conn,
        name: "deep-254".to_owned(),
    };
    let owners = conn.owners(&inventory(&[1], &[], &[])).unwrap();
    assert_eq!(
        owners.vgpus[0]
            .holders
            .iter()
            .map(|h| h.holder.domain.as_str())
            .collect::<Vec<_>>(),
        vec!["deep-254"]
    );
}

#[test]
fn metadata_deeper_than_libxml2_allows_is_libvirts_refusal() {
    let conn = connect(BINARY);
    let err = conn
        .define(&minimal_with_metadata("deep-255", &deep_metadata(255)))
        .unwrap_err();
    let vgpu_libvirt::Error::Libvirt { code, message, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*code, message.lines().next()),
        (
            35, // VIR_ERR_XML_DETAIL
            Some(
                "(domain_definition):1: Excessive depth in document: 256 use XML_PARSE_HUGE option"
            )
        )
    );
}
