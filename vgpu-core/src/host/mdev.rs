//! Mediated devices (`Documentation/driver-api/vfio-mediated-device.rst`).
//!
//! A parent device (a PF, a VF, or a virtual device) lists the types it can create under
//! `mdev_supported_types/<type-id>/`; each mediated device is a child directory named by its
//! UUID, whose `mdev_type` link names its type.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::error::Result;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::SysDir;

/// A device that can host mediated devices.
#[derive(Debug, Clone)]
pub(crate) struct MdevParent {
    dir: SysDir,
}

/// One entry of a parent's `mdev_supported_types`, read relative to that directory, held
/// open while its types are.
#[derive(Debug, Clone)]
pub(crate) struct MdevType {
    id: String,
    dir: SysDir,
}

/// An existing mediated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mdev {
    /// Its UUID (the directory name).
    pub uuid: Uuid,
    /// Its type id, from the `mdev_type` link.
    pub type_id: String,
}

impl MdevParent {
    /// The parent whose device directory is `path`.
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            dir: SysDir::new(path),
        }
    }

    /// The parent `device` is, read through its directory (held open, when it is).
    pub(crate) fn of(device: &PciDevice) -> Self {
        Self {
            dir: device.dir().clone(),
        }
    }

    /// Whether the device offers mediated devices at all.
    pub(crate) fn is_parent(&self) -> bool {
        self.dir.is_dir(TYPES)
    }

    /// The types it offers, sorted by id.
    pub(crate) fn types(&self) -> Result<Vec<MdevType>> {
        let types = self.dir.join(TYPES).held_open();
        Ok(types
            .names()?
            .into_iter()
            .map(|id| MdevType {
                dir: types.join(&id),
                id,
            })
            .collect())
    }

    /// The mediated devices that exist on it now: children named by a UUID with an
    /// `mdev_type` link.
    pub(crate) fn devices(&self) -> Result<Vec<Mdev>> {
        let mut devices = Vec::new();
        for name in self.dir.names()? {
            let Ok(uuid) = Uuid::try_parse(&name) else {
                continue;
            };
            if let Some(type_id) = self.dir.link_name(&format!("{name}/mdev_type"))? {
                devices.push(Mdev { uuid, type_id });
            }
        }
        Ok(devices)
    }
}

/// A parent's directory of types.
const TYPES: &str = "mdev_supported_types";

impl MdevType {
    /// The type id, `<driver>-<group>` (`nvidia-222`, `i915-GVTg_V5_4`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The type's directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `name`, which some kernels (Intel GVT-g) do not provide.
    pub(crate) fn name(&self) -> Result<Option<String>> {
        Ok(self.dir.read_attr("name")?.map(|n| n.trim().to_owned()))
    }

    /// `description`, free text in the vendor's format.
    pub(crate) fn description(&self) -> Result<Option<String>> {
        self.dir.read_attr("description")
    }

    /// `device_api`, e.g. `vfio-pci`.
    pub(crate) fn device_api(&self) -> Result<Option<String>> {
        Ok(self
            .dir
            .read_attr("device_api")?
            .map(|n| n.trim().to_owned()))
    }

    /// `available_instances`: how many more can be created on this parent now.
    pub(crate) fn available_instances(&self) -> Result<Option<u32>> {
        self.dir
            .read_parsed("available_instances", "a count", |t| t.parse().ok())
    }
}
