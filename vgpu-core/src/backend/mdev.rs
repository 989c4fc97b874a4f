//! Mediated devices, on the PF or on a VF: a UUID written to a type's `create` makes one,
//! `1` written to its `remove` ends it (`Documentation/driver-api/vfio-mediated-device.rst`,
//! `Documentation/ABI/testing/sysfs-bus-vfio-mdev`).

use std::time::Duration;

use uuid::Uuid;

use super::Placement;
use crate::error::{Error, HostError, Object, Result};
use crate::host::mdev::MdevParent;
use crate::host::paths::HostPaths;
use crate::host::sysfs::{self, write_attr, write_attr_within};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu};

/// The parents a mediated device of `type_id` could go on: the PF for mdev on the PF,
/// otherwise each VF in `virtfnN` order.
pub(super) fn candidates(gpu: &Gpu, type_id: &str) -> Vec<Placement> {
    let on = |parent: PciAddress| Placement::Mdev {
        parent,
        type_id: type_id.to_owned(),
    };
    match gpu.backend {
        Backend::Mdev => vec![on(gpu.address)],
        _ => gpu.vfs.iter().map(|vf| on(vf.address)).collect(),
    }
}

/// Whether the type has an instance available on that parent.
pub(super) fn fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    let Placement::Mdev { parent, type_id } = placement else {
        return Ok(false);
    };
    let parent = MdevParent::new(paths.pci_device(parent));
    match parent.types()?.into_iter().find(|t| t.id() == type_id) {
        Some(t) => Ok(t.available_instances()?.unwrap_or(0) > 0),
        None => Ok(false),
    }
}

/// Creates mediated device `uuid` of `type_id` on `parent`, after checking the type exists
/// there and has an instance available, and verifies that the device appeared.
pub(crate) fn create(
    paths: &HostPaths,
    parent: PciAddress,
    type_id: &str,
    uuid: Uuid,
) -> Result<()> {
    super::validate_type(type_id)?;
    let parent_dir = paths.pci_device(&parent);
    let mdev_parent = MdevParent::new(&parent_dir);
    if !mdev_parent.is_parent() {
        return Err(Error::NotFound {
            what: Object::MdevParent,
            id: parent.to_string(),
            path: parent_dir.join("mdev_supported_types"),
        });
    }
    let types = mdev_parent.types()?;
    let Some(mdev_type) = types.iter().find(|t| t.id() == type_id) else {
        return Err(Error::UnknownType {
            gpu: parent,
            wanted: type_id.to_owned(),
            // Named as human output names types; a name that cannot be read leaves the id.
            offered: types
                .iter()
                .map(|t| {
                    let name = t.name().ok().flatten();
                    crate::model::type_label(t.id(), name.as_deref()).to_owned()
                })
                .collect(),
        });
    };
    if sysfs::exists(&paths.mdev_devices().join(uuid.to_string())) {
        return Err(Error::AlreadyExists {
            what: Object::Mdev,
            id: uuid.to_string(),
        });
    }
    if mdev_type.available_instances()?.unwrap_or(0) == 0 {
        return Err(Error::NoCapacity {
            gpu: parent,
            type_id: type_id.to_owned(),
            asked: 1,
            available: 0,
            reserved: 0,
            limit: None,
            path: mdev_type.path().join("available_instances"),
        });
    }
    write_attr(&mdev_type.path().join("create"), &uuid.to_string())?;
    let created = parent_dir.join(uuid.to_string());
    if !sysfs::is_dir(&created) {
        return Err(HostError::Missing { path: created }.into());
    }
    Ok(())
}

/// The parent of mediated device `uuid`; `None` when it does not exist.
pub(crate) fn parent_of(paths: &HostPaths, uuid: Uuid) -> Result<Option<PciAddress>> {
    let link = paths.mdev_devices().join(uuid.to_string());
    let target = match std::fs::canonicalize(&link) {
        Ok(target) => target,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HostError::Read { path: link, source }.into()),
    };
    let parent = target
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    match parent.as_deref().map(str::parse::<PciAddress>) {
        Some(Ok(address)) => Ok(Some(address)),
        _ => Err(sysfs::parse_error(
            &link,
            &target.to_string_lossy(),
            "a mediated device under a PCI parent",
        )),
    }
}

/// Removes mediated device `uuid` and verifies it is gone; returns its parent. The kernel holds
/// the removal while a process has the device open: after `within`, [`HostError::Timeout`](crate::host::HostError::Timeout).
pub(crate) fn remove(paths: &HostPaths, uuid: Uuid, within: Duration) -> Result<PciAddress> {
    let Some(parent) = parent_of(paths, uuid)? else {
        return Err(Error::NotFound {
            what: Object::Mdev,
            id: uuid.to_string(),
            path: paths.mdev_devices(),
        });
    };
    let dir = paths.pci_device(&parent).join(uuid.to_string());
    write_attr_within(
        &dir.join("remove"),
        "1",
        within,
        &format!("the release of mediated device {uuid} by the processes holding it open"),
    )?;
    if sysfs::exists(&dir) {
        return Err(Error::NotApplied {
            path: dir,
            expected: "no device after remove".to_owned(),
            found: "the device still present".to_owned(),
        });
    }
    Ok(parent)
}

/// The mediated device a VF holds, in words.
pub(super) fn vf_holder(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    let parent = MdevParent::new(paths.pci_device(&vf));
    Ok(parent
        .devices()?
        .first()
        .map(|mdev| format!("it holds mediated device {}", mdev.uuid)))
}
