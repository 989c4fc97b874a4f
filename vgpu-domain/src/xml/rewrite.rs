//! A domain XML with some of its hostdevs naming other devices, every other byte as it was: what
//! the libvirt hook prints for `migrate begin` and `restore begin`, which libvirt then uses
//! instead of the XML it gave (<https://libvirt.org/hooks.html>).

use roxmltree::Node;
use vgpu_model::VgpuHandle;

#[cfg(doc)]
use super::DomainXml;
#[cfg(doc)]
use super::hostdevs;
use super::{METADATA_NAMESPACE, Result, domain_hostdevs, metadata, parse};

/// `xml` with the `<source><address …/>` of each hostdev that assigns a device `moves` names
/// (from, to) replaced by one naming `to`. The `id` of a `<device>` that vgpu's metadata
/// element records for `from` becomes `to` as well, so that the type `attach` recorded still
/// names the device on the next host. A record that names a `to` and no `from` is of a device
/// the domain no longer holds, and is left out. Nothing else changes: not the hostdev's other
/// children, not white space, not the order.
///
/// # Errors
///
/// [`crate::Error::Xml`] as for [`hostdevs`].
pub fn rewrite_sources(xml: &str, moves: &[(VgpuHandle, VgpuHandle)]) -> Result<String> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let to = |device: VgpuHandle| moves.iter().find(|(from, _)| *from == device).map(|m| m.1);
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for element in domain_hostdevs(xml, root)? {
        if let Some(to) = to(element.device) {
            edits.push((element.source, crate::hostdev::source_address(to)));
        }
    }
    let recorded = metadata(root)
        .into_iter()
        .filter(|n| is_vgpu(*n, "vgpu"))
        .flat_map(|e| e.children())
        .filter(|n| is_device(*n));
    for device in recorded {
        let Some(id) = device
            .attributes()
            .find(|a| a.name() == "id" && a.namespace().is_none())
        else {
            continue;
        };
        let Ok(handle) = id.value().parse::<VgpuHandle>() else {
            continue;
        };
        if let Some(to) = to(handle) {
            edits.push((id.range_value(), to.to_string()));
        } else if moves.iter().any(|(_, to)| *to == handle) {
            // A record of a device the domain no longer has, whose name a move now gives to
            // another: it would stand for that one's type.
            edits.push((device.range(), String::new()));
        }
    }
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = String::with_capacity(xml.len());
    let mut at = 0;
    for (range, text) in edits {
        out.push_str(&xml[at..range.start]);
        out.push_str(&text);
        at = range.end;
    }
    out.push_str(&xml[at..]);
    Ok(out)
}

/// The `<vgpu>` element of namespace [`METADATA_NAMESPACE`] for the domain `xml` describes,
/// with `device` recorded as holding a vGPU of type `type_name`: its `type` and `tenant` kept,
/// and every other device it records. `attach` gives it to libvirt
/// (`virDomainSetMetadata`, key `vgpu`), so that the type travels with the domain to another
/// host, where the hook reads it back ([`DomainXml::device_types`]).
///
/// # Errors
///
/// [`crate::Error::Xml`] as for [`hostdevs`].
pub fn vgpu_metadata_with_device(xml: &str, device: VgpuHandle, type_name: &str) -> Result<String> {
    let doc = parse(xml)?;
    let element = metadata(doc.root_element())
        .into_iter()
        .find(|n| is_vgpu(*n, "vgpu"));
    let mut out = String::from("<vgpu");
    for name in ["type", "tenant"] {
        if let Some(value) = element.and_then(|e| e.attribute(name)) {
            out.push_str(&format!(" {name}='{}'", escape(value)));
        }
    }
    out.push('>');
    let recorded = element
        .into_iter()
        .flat_map(|e| e.children())
        .filter(|n| is_device(*n));
    for child in recorded {
        let (Some(id), Some(kind)) = (child.attribute("id"), child.attribute("type")) else {
            continue;
        };
        if id.parse::<VgpuHandle>().is_ok_and(|id| id == device) {
            continue;
        }
        out.push_str(&format!(
            "<device id='{}' type='{}'/>",
            escape(id),
            escape(kind)
        ));
    }
    out.push_str(&format!(
        "<device id='{device}' type='{}'/></vgpu>",
        escape(type_name)
    ));
    Ok(out)
}

/// The devices and types the `<vgpu>` element of `metadata` records.
pub(super) fn device_types(metadata: &[Node<'_, '_>]) -> Vec<(VgpuHandle, String)> {
    metadata
        .iter()
        .filter(|n| is_vgpu(**n, "vgpu"))
        .flat_map(|e| e.children())
        .filter(|n| is_device(*n))
        .filter_map(|n| {
            let id = n.attribute("id")?.parse().ok()?;
            Some((id, n.attribute("type")?.to_owned()))
        })
        .collect()
}

/// Whether `node` is the element `name` of [`METADATA_NAMESPACE`].
fn is_vgpu(node: Node<'_, '_>, name: &str) -> bool {
    node.is_element()
        && node.tag_name().name() == name
        && node.tag_name().namespace() == Some(METADATA_NAMESPACE)
}

/// Whether `node` is a `<device>` child of the `<vgpu>` element. libvirt puts only the root
/// of a metadata element in its namespace, so a child is read in no namespace too.
fn is_device(node: Node<'_, '_>) -> bool {
    node.is_element()
        && node.tag_name().name() == "device"
        && matches!(node.tag_name().namespace(), None | Some(METADATA_NAMESPACE))
}

/// `value` for an attribute in single quotes.
fn escape(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}
