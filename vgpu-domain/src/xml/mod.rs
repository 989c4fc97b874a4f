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
use vgpu_model::VgpuHandle;
use vgpu_model::holder::Holder;
use vgpu_model::pci::PciAddress;

use crate::error::{Error, Result};
use crate::hostdev::HostdevKind;

mod rewrite;
mod tenant;

pub use rewrite::{rewrite_sources, vgpu_metadata_with_device};
pub use tenant::{Tenant, TenantSource};

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
    /// Where its `<source><address …/>` is in the document, in bytes.
    pub source: std::ops::Range<usize>,
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
    let doc = parse(xml)?;
    domain_hostdevs(xml, doc.root_element())
}

/// Parses `xml` within the bounds, checking its root is `<domain>`.
fn parse(xml: &str) -> Result<Document<'_>> {
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
    Ok(doc)
}

fn domain_hostdevs(xml: &str, root: Node<'_, '_>) -> Result<Vec<HostdevElement>> {
    root.children()
        .filter(|n| is_named(*n, "devices"))
        .flat_map(|devices| devices.children().filter(|n| is_named(*n, "hostdev")))
        .filter_map(|node| hostdev(xml, node).transpose())
        .collect()
}

/// The namespace of `vgpu`'s element in a domain's `<metadata>`:
///
/// ```xml
/// <metadata>
///   <vgpu:vgpu xmlns:vgpu="https://example.invalid/vgpu/1" type="L40S-12Q"/>
/// </metadata>
/// ```
///
/// `type` (a type name or id, as `vgpuctl create --type` takes) is the vGPU type the libvirt
/// hook sets on the domain's NVIDIA vendor-VFIO VFs that have no definition of their own;
/// `tenant` names who the domain's usage is summed under ([`Tenant`]). Both are optional.
/// `virsh metadata DOMAIN --uri https://example.invalid/vgpu/1 --key vgpu --set
/// '<vgpu type="L40S-12Q" tenant="acme"/>' --config` writes it.
pub const METADATA_NAMESPACE: &str = "https://example.invalid/vgpu/1";

/// The namespaces Nova writes its `<nova:instance>` metadata in, up to the version number.
pub const NOVA_NAMESPACE_PREFIX: &str = "http://openstack.org/xmlns/libvirt/nova/";

/// What the libvirt hook reads from a domain's XML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainXml {
    /// `<name>`.
    pub name: String,
    /// `<uuid>`.
    pub uuid: Uuid,
    /// The hostdevs that assign a mediated device or a PCI function (see [`hostdevs`]).
    pub hostdevs: Vec<HostdevElement>,
    /// The `type` of `<vgpu:vgpu>` in `<metadata>` (namespace [`METADATA_NAMESPACE`]).
    pub vgpu_type: Option<String>,
    /// The `name` of `<nova:flavor>` in Nova's `<nova:instance>` metadata.
    pub nova_flavor: Option<String>,
    /// The tenant the metadata names ([`Tenant`]).
    pub tenant: Option<Tenant>,
    /// Whether Nova manages the domain: its metadata has `<nova:instance>`.
    pub nova: bool,
    /// The vGPU type `attach` recorded for each device, by name: `<vgpu:device id="…"
    /// type="…"/>` in the `<vgpu:vgpu>` element ([`vgpu_metadata_with_device`]).
    pub device_types: Vec<(VgpuHandle, String)>,
}

impl DomainXml {
    /// The domain as the holder of its devices: its name, UUID and tenant.
    pub fn holder(&self) -> Holder {
        Holder {
            domain: self.name.clone(),
            uuid: self.uuid,
            tenant: self.tenant.clone(),
        }
    }
}

/// Reads a domain's name, UUID, hostdevs and `vgpu` and Nova metadata, within the bounds of
/// [`hostdevs`].
///
/// # Errors
///
/// [`Error::Xml`] as for [`hostdevs`], and when `<name>` or `<uuid>` is missing or the UUID is
/// not one.
pub fn domain(xml: &str) -> Result<DomainXml> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let name = child(root, "name")
        .and_then(|n| n.text())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| refused("the domain has no <name>".to_owned()))?;
    let uuid_text = child(root, "uuid").and_then(|n| n.text()).unwrap_or("");
    let uuid = Uuid::try_parse(uuid_text.trim()).map_err(|_| {
        refused(format!(
            "the domain's <uuid> {:?} is not a UUID",
            cut(uuid_text)
        ))
    })?;
    let metadata = metadata(root);
    let vgpu_type = metadata
        .iter()
        .find(|n| {
            n.tag_name().namespace() == Some(METADATA_NAMESPACE) && n.tag_name().name() == "vgpu"
        })
        .and_then(|n| n.attribute("type"))
        .map(str::to_owned);
    let nova_flavor = metadata
        .iter()
        .find(|n| is_nova(**n, "instance"))
        .and_then(|instance| instance.children().find(|n| is_nova(*n, "flavor")))
        .and_then(|flavor| flavor.attribute("name"))
        .map(str::to_owned);
    Ok(DomainXml {
        name: name.to_owned(),
        uuid,
        hostdevs: domain_hostdevs(xml, root)?,
        vgpu_type,
        nova_flavor,
        tenant: tenant::from_metadata(&metadata),
        nova: metadata.iter().any(|n| is_nova(*n, "instance")),
        device_types: rewrite::device_types(&metadata),
    })
}

/// The top-level elements of a domain's `<metadata>`.
fn metadata<'a, 'input>(root: Node<'a, 'input>) -> Vec<Node<'a, 'input>> {
    child(root, "metadata")
        .map(|m| m.children().filter(Node::is_element).collect())
        .unwrap_or_default()
}

/// The tenant a domain's metadata names (see [`Tenant`]), within the bounds of [`hostdevs`].
///
/// # Errors
///
/// [`Error::Xml`] when the document breaks a bound, is not well-formed or its root is not
/// `<domain>`.
pub fn tenant(xml: &str) -> Result<Option<Tenant>> {
    let doc = parse(xml)?;
    Ok(tenant::from_metadata(&metadata(doc.root_element())))
}

/// Who a domain's metadata says it belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Belonging {
    /// The tenant it names ([`tenant`]).
    pub tenant: Option<Tenant>,
    /// Whether Nova manages the domain: its metadata has Nova's `<nova:instance>`.
    pub nova: bool,
}

/// [`hostdevs`], and the tenant and Nova's claim of one document, parsed once.
///
/// # Errors
///
/// [`Error::Xml`] as for [`hostdevs`].
pub fn hostdevs_and_belonging(xml: &str) -> Result<(Vec<HostdevElement>, Belonging)> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let metadata = metadata(root);
    Ok((
        domain_hostdevs(xml, root)?,
        Belonging {
            tenant: tenant::from_metadata(&metadata),
            nova: metadata.iter().any(|n| is_nova(*n, "instance")),
        },
    ))
}

/// [`domain`] of a document given as bytes, refused unless it is UTF-8.
///
/// # Errors
///
/// [`Error::Xml`] as for [`domain`], and when the bytes are not UTF-8.
pub fn domain_in_bytes(xml: &[u8]) -> Result<DomainXml> {
    domain(text_of(xml)?)
}

fn is_nova(node: Node<'_, '_>, name: &str) -> bool {
    node.is_element()
        && node.tag_name().name() == name
        && node
            .tag_name()
            .namespace()
            .is_some_and(|ns| ns.starts_with(NOVA_NAMESPACE_PREFIX))
}

fn text_of(xml: &[u8]) -> Result<&str> {
    if xml.len() > MAX_BYTES {
        return Err(refused(too_large(xml.len())));
    }
    std::str::from_utf8(xml).map_err(|err| {
        refused(format!(
            "not UTF-8 (invalid byte at offset {})",
            err.valid_up_to()
        ))
    })
}

/// [`hostdevs`] of a document given as bytes, refused unless it is UTF-8.
///
/// # Errors
///
/// [`Error::Xml`] as for [`hostdevs`], and when the bytes are not UTF-8.
pub fn hostdevs_in_bytes(xml: &[u8]) -> Result<Vec<HostdevElement>> {
    hostdevs(text_of(xml)?)
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
    Ok(Some(HostdevElement {
        device,
        kind,
        text,
        source: address.range(),
    }))
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
mod tests;
