//! Reading the `<hostdev>` elements of a domain's XML, within bounds.
//!
//! Domain XML comes from libvirt, but what libvirt stores was written by whoever defined the
//! domain, so it is read as untrusted input. A document is refused (with [`Error::Xml`] and a
//! one-line reason) when it is larger than [`MAX_BYTES`], is not UTF-8, has a DTD (no entity is
//! ever expanded), has an element with more than [`MAX_ATTRIBUTES`] attributes, has more than
//! [`MAX_NAMESPACES`] namespace declarations, nests elements deeper than [`MAX_DEPTH`], or has
//! more than [`MAX_NODES`] nodes. One linear scan checks all but the last before the document
//! is parsed, and the parser stops at the last, so reading takes time linear in the input,
//! and nothing here panics.
//!
//! The elements read are those of libvirt's "host device assignment"
//! (<https://libvirt.org/formatdomain.html#host-device-assignment>) under
//! `/domain/devices`, in `mode='subsystem'` (the default):
//!
//! - `type='mdev'`: a mediated device, named by `<source><address uuid='…'/></source>`;
//! - `type='pci'`: a PCI function, named by
//!   `<source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source>`
//!   (numbers in C notation, as libvirt reads them: `0x` hex, leading `0` octal, or decimal;
//!   a missing one is 0). `managed='yes'` makes it a [`HostdevKind::PlainVf`] (libvirt binds
//!   it to `vfio-pci` itself), anything else a [`HostdevKind::VendorVf`].
//!
//! Every other hostdev (USB, SCSI, `mode='capabilities'`) and `<interface type='hostdev'>` is
//! not a vGPU and is skipped.

use roxmltree::{Document, Node, ParsingOptions};
use uuid::Uuid;
use vgpu_core::{PciAddress, VgpuHandle};

use crate::error::{Error, Result};
use crate::hostdev::HostdevKind;

/// The largest document read, in bytes (4 MiB; a domain with hundreds of devices is well
/// under 1 MiB).
pub const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The deepest element nesting read. libvirt's own elements nest fewer than 10 levels, but a
/// domain's `<metadata>` holds whatever its author wrote, up to the depth libxml2 lets libvirt
/// parse (257 levels with the root); this bound is above that, so every domain libvirt holds is
/// read.
pub const MAX_DEPTH: usize = 512;
/// The most nodes (elements, text, comments) in a document.
pub const MAX_NODES: u32 = 500_000;
/// The most attributes on one element (libvirt's elements have fewer than 20).
pub const MAX_ATTRIBUTES: usize = 64;
/// The most namespace declarations in a document (libvirt writes one for each application's
/// `<metadata>` and one for `qemu:commandline`). Resolving names costs up to the number of
/// namespaces in scope, so this bound keeps reading linear.
pub const MAX_NAMESPACES: usize = 64;

/// One `<hostdev>` of a kind this crate assigns, as a domain's XML has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostdevElement {
    /// The device it assigns: the mdev's UUID or the PCI source address.
    pub device: VgpuHandle,
    /// Its kind, as the XML states it (see the module documentation).
    pub kind: HostdevKind,
    /// The element exactly as the document has it, from `<hostdev` to `</hostdev>`, with
    /// every child and attribute another tool may have added (`<alias>`, `<rom>`, a guest
    /// `<address>`): what detaching it gives back to libvirt.
    pub text: String,
}

/// The hostdevs of a domain's XML that assign a mediated device or a PCI function, in
/// document order.
///
/// # Errors
///
/// [`Error::Xml`] when the document breaks a bound (see the module documentation), is not
/// well-formed, its root is not `<domain>`, or a mdev or PCI hostdev has no readable source
/// (a UUID that is not one, a PCI address out of range).
pub fn hostdevs(xml: &str) -> Result<Vec<HostdevElement>> {
    check_bounds(xml).map_err(refused)?;
    let options = ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
        ..ParsingOptions::default()
    };
    let doc = Document::parse_with_options(xml, options).map_err(|err| match err {
        roxmltree::Error::NodesLimitReached => refused(format!("more than {MAX_NODES} nodes")),
        roxmltree::Error::DtdDetected => refused(DTD_REFUSED.to_owned()),
        other => refused(format!("not well-formed: {other}")),
    })?;
    let root = doc.root_element();
    if !is_named(root, "domain") {
        return Err(refused(format!(
            "the root element is <{}>, not <domain>",
            root.tag_name().name()
        )));
    }
    root.children()
        .filter(|n| is_named(*n, "devices"))
        .flat_map(|devices| devices.children().filter(|n| is_named(*n, "hostdev")))
        .filter_map(|node| hostdev(xml, node).transpose())
        .collect()
}

/// [`hostdevs`] of a document given as bytes, refused unless it is UTF-8.
///
/// # Errors
///
/// [`Error::Xml`] as for [`hostdevs`], and when the bytes are not UTF-8.
pub fn hostdevs_in_bytes(xml: &[u8]) -> Result<Vec<HostdevElement>> {
    if xml.len() > MAX_BYTES {
        return Err(refused(too_large(xml.len())));
    }
    let text = std::str::from_utf8(xml).map_err(|err| {
        refused(format!(
            "not UTF-8 (invalid byte at offset {})",
            err.valid_up_to()
        ))
    })?;
    hostdevs(text)
}

const DTD_REFUSED: &str = "has a DTD or markup declaration (<!DOCTYPE, <!ENTITY), which is refused";

fn refused(reason: String) -> Error {
    Error::Xml {
        domain: None,
        reason,
    }
}

fn too_large(len: usize) -> String {
    format!("{len} bytes, more than the {MAX_BYTES} read")
}

fn is_named(node: Node<'_, '_>, name: &str) -> bool {
    node.is_element() && node.tag_name().name() == name && node.tag_name().namespace().is_none()
}

fn child<'a, 'input>(node: Node<'a, 'input>, name: &str) -> Option<Node<'a, 'input>> {
    node.children().find(|n| is_named(*n, name))
}

/// The hostdev `node` assigns, `None` for kinds that are not vGPUs.
fn hostdev(xml: &str, node: Node<'_, '_>) -> Result<Option<HostdevElement>> {
    if node.attribute("mode").unwrap_or("subsystem") != "subsystem" {
        return Ok(None);
    }
    let Some(kind_attr @ ("mdev" | "pci")) = node.attribute("type") else {
        return Ok(None);
    };
    let address = child(node, "source")
        .and_then(|source| child(source, "address"))
        .ok_or_else(|| {
            refused(format!(
                "a <hostdev type='{kind_attr}'> has no <source><address>"
            ))
        })?;
    let (device, kind) = if kind_attr == "mdev" {
        let text = address.attribute("uuid").unwrap_or("");
        let uuid = Uuid::try_parse(text).map_err(|_| {
            refused(format!(
                "a mdev <hostdev> source uuid {:?} is not a UUID",
                cut(text)
            ))
        })?;
        (VgpuHandle::Mdev(uuid), HostdevKind::Mdev)
    } else {
        let kind = if node.attribute("managed") == Some("yes") {
            HostdevKind::PlainVf
        } else {
            HostdevKind::VendorVf
        };
        (VgpuHandle::Vf(pci_source(address)?), kind)
    };
    let text = xml.get(node.range()).unwrap_or_default().to_owned();
    Ok(Some(HostdevElement { device, kind, text }))
}

fn pci_source(address: Node<'_, '_>) -> Result<PciAddress> {
    let field = |name: &str| -> Result<u64> {
        match address.attribute(name) {
            None => Ok(0),
            Some(text) => c_number(text).ok_or_else(|| {
                refused(format!(
                    "a PCI <hostdev> source {name} {:?} is not a number",
                    cut(text)
                ))
            }),
        }
    };
    let (domain, bus, slot, function) = (
        field("domain")?,
        field("bus")?,
        field("slot")?,
        field("function")?,
    );
    let out_of_range = || {
        refused(format!(
            "a PCI <hostdev> source address {domain:#x}:{bus:#x}:{slot:#x}.{function:#x} is out of range"
        ))
    };
    let domain = u32::try_from(domain).map_err(|_| out_of_range())?;
    let bus = u8::try_from(bus).map_err(|_| out_of_range())?;
    let slot = u8::try_from(slot).map_err(|_| out_of_range())?;
    let function = u8::try_from(function).map_err(|_| out_of_range())?;
    PciAddress::new(domain, bus, slot, function).ok_or_else(out_of_range)
}

/// A number as C's `strtoul(text, NULL, 0)` reads it, as libvirt does for PCI addresses.
fn c_number(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, radix) =
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (hex, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            (&text[1..], 8)
        } else {
            (text, 10)
        };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

fn cut(text: &str) -> String {
    text.chars().take(64).collect()
}

/// Checks the bounds a parser does not: size, declarations, attributes per element and depth,
/// in one pass over the bytes. Malformed markup is left for the parser to name.
fn check_bounds(xml: &str) -> std::result::Result<(), String> {
    let bytes = xml.as_bytes();
    if bytes.len() > MAX_BYTES {
        return Err(too_large(bytes.len()));
    }
    let mut depth = 0usize;
    let mut namespaces = 0usize;
    let mut at = 0usize;
    while let Some(offset) = bytes[at..].iter().position(|b| *b == b'<') {
        let start = at + offset;
        let rest = &bytes[start..];
        let skip_to = |close: &[u8], from: usize| {
            find(&bytes[start + from..], close).map(|end| start + from + end + close.len())
        };
        let next = if rest.starts_with(b"<!--") {
            skip_to(b"-->", 4)
        } else if rest.starts_with(b"<![CDATA[") {
            skip_to(b"]]>", 9)
        } else if rest.starts_with(b"<!") {
            return Err(DTD_REFUSED.to_owned());
        } else if rest.starts_with(b"<?") {
            skip_to(b"?>", 2)
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            skip_to(b">", 2)
        } else {
            let tag = start_tag(&bytes[start..])?;
            namespaces += tag.namespaces;
            if namespaces > MAX_NAMESPACES {
                return Err(format!("more than {MAX_NAMESPACES} namespace declarations"));
            }
            if !tag.self_closing {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!("elements nested deeper than {MAX_DEPTH}"));
                }
            }
            tag.len.map(|len| start + len)
        };
        match next {
            Some(next) => at = next,
            // Unterminated markup: the parser says where.
            None => break,
        }
    }
    Ok(())
}

struct StartTag {
    /// Its length up to and including `>`; `None` when it is not closed.
    len: Option<usize>,
    self_closing: bool,
    /// Its namespace declarations (`xmlns=`, `xmlns:p=`).
    namespaces: usize,
}

/// The start tag at the beginning of `bytes`, its attributes counted by their `=` outside
/// quotes, its namespace declarations by the attribute names `xmlns` and `xmlns:…`.
fn start_tag(bytes: &[u8]) -> std::result::Result<StartTag, String> {
    let mut quote: Option<u8> = None;
    let mut attributes = 0usize;
    let mut namespaces = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'=' => {
                    attributes += 1;
                    if attributes > MAX_ATTRIBUTES {
                        return Err(format!(
                            "an element has more than {MAX_ATTRIBUTES} attributes"
                        ));
                    }
                }
                b'>' => {
                    return Ok(StartTag {
                        len: Some(i + 1),
                        self_closing: bytes[i - 1] == b'/',
                        namespaces,
                    });
                }
                b'x' if bytes[i - 1].is_ascii_whitespace() && is_xmlns(&bytes[i..]) => {
                    namespaces += 1;
                }
                _ => {}
            },
        }
    }
    Ok(StartTag {
        len: None,
        self_closing: false,
        namespaces,
    })
}

/// Whether an attribute name starting here is `xmlns` or `xmlns:…`.
fn is_xmlns(bytes: &[u8]) -> bool {
    bytes.strip_prefix(b"xmlns").is_some_and(|rest| {
        rest.first()
            .is_some_and(|b| *b == b':' || *b == b'=' || b.is_ascii_whitespace())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
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
        let found = hostdevs(&domain(&element)).ok();
        assert_eq!(
            found,
            Some(vec![HostdevElement {
                device: VgpuHandle::Mdev(Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000001)),
                kind: HostdevKind::Mdev,
                text: element,
            }])
        );
    }

    #[test]
    fn hostdevs_managed_pci_is_plain_vf() {
        let xml = domain(
            "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev>",
        );
        let found =
            hostdevs(&xml).map(|v| v.iter().map(|h| (h.device, h.kind)).collect::<Vec<_>>());
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
        let found =
            hostdevs(&xml).map(|v| v.iter().map(|h| (h.device, h.kind)).collect::<Vec<_>>());
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
}
