//! Who a domain belongs to, as its `<metadata>` says: the `tenant` of `vgpu`'s own element, or
//! the project of OpenStack Nova's instance metadata.
//!
//! libvirt keeps at most one element per namespace in a domain's `<metadata>`, and
//! `virDomainSetMetadata` replaces that element whole
//! (<https://libvirt.org/formatdomain.html#general-metadata>,
//! <https://libvirt.org/html/libvirt-libvirt-domain.html#virDomainSetMetadata>), so the tenant
//! is an attribute of the one `<vgpu:vgpu>` element, beside the hook's `type`:
//!
//! ```xml
//! <metadata>
//!   <vgpu:vgpu xmlns:vgpu="https://example.invalid/vgpu/1" tenant="acme" type="L40S-12Q"/>
//! </metadata>
//! ```
//!
//! Nova writes the instance's owner in its own namespace (`nova/virt/libvirt/config.py`,
//! `LibvirtConfigGuestMetaNovaOwner`), the user and the project each with their Keystone id
//! and name:
//!
//! ```xml
//! <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
//!   <nova:owner>
//!     <nova:user uuid="85bd45c0d6a84e7d9e6b5c2b0d213684">joe</nova:user>
//!     <nova:project uuid="d33b8c0e1f2a4b3c9d8e7f6a5b342d69">acmecorp</nova:project>
//!   </nova:owner>
//! </nova:instance>
//! ```

use roxmltree::Node;

pub use vgpu_model::holder::{Tenant, TenantSource};

use super::{METADATA_NAMESPACE, is_nova};

/// The tenant named by the top-level elements of a domain's `<metadata>`: `vgpu`'s own label
/// first, then Nova's project. Surrounding white space is trimmed; an empty name names no
/// tenant.
pub(super) fn from_metadata(metadata: &[Node<'_, '_>]) -> Option<Tenant> {
    let label = metadata
        .iter()
        .find(|n| {
            n.tag_name().namespace() == Some(METADATA_NAMESPACE) && n.tag_name().name() == "vgpu"
        })
        .and_then(|n| n.attribute("tenant"))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if let Some(label) = label {
        return Some(Tenant {
            name: label.to_owned(),
            source: TenantSource::Vgpu,
            project_id: None,
        });
    }
    let project = metadata
        .iter()
        .find(|n| is_nova(**n, "instance"))
        .and_then(|instance| instance.children().find(|n| is_nova(*n, "owner")))
        .and_then(|owner| owner.children().find(|n| is_nova(*n, "project")))?;
    let id = project
        .attribute("uuid")
        .map(str::trim)
        .filter(|id| !id.is_empty());
    let name = project
        .text()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .or(id)?;
    Some(Tenant {
        name: name.to_owned(),
        source: TenantSource::Nova,
        project_id: id.map(str::to_owned),
    })
}
