//! Mediated devices (`Documentation/driver-api/vfio-mediated-device.rst`).
//!
//! A parent device (a PF, a VF, or a virtual device) lists the types it can create under
//! `mdev_supported_types/<type-id>/`; each mediated device is a child directory named by its
//! UUID, whose `mdev_type` link names its type.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use uuid::Uuid;

use crate::error::Result;
use crate::host::sysfs::{self, OpenDir, child};

/// A device that can host mediated devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MdevParent {
    path: PathBuf,
}

/// One entry of a parent's `mdev_supported_types`, read relative to that directory, which
/// the parent's types share open.
#[derive(Debug, Clone)]
pub(crate) struct MdevType {
    id: String,
    path: PathBuf,
    types_dir: Rc<OpenDir>,
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
        Self { path: path.into() }
    }

    /// Whether the device offers mediated devices at all.
    pub(crate) fn is_parent(&self) -> bool {
        sysfs::is_dir(&self.types_dir())
    }

    fn types_dir(&self) -> PathBuf {
        child(&self.path, "mdev_supported_types")
    }

    /// The types it offers, sorted by id.
    pub(crate) fn types(&self) -> Result<Vec<MdevType>> {
        let Some(mut dir) = OpenDir::open(&self.types_dir())? else {
            return Ok(Vec::new());
        };
        let ids = dir.names()?;
        let dir = Rc::new(dir);
        Ok(ids
            .into_iter()
            .map(|id| MdevType {
                path: dir.path().join(&id),
                id,
                types_dir: Rc::clone(&dir),
            })
            .collect())
    }

    /// The mediated devices that exist on it now: children named by a UUID with an
    /// `mdev_type` link.
    pub(crate) fn devices(&self) -> Result<Vec<Mdev>> {
        let mut devices = Vec::new();
        for name in sysfs::dir_names(&self.path)? {
            let Ok(uuid) = Uuid::try_parse(&name) else {
                continue;
            };
            if let Some(type_id) = sysfs::link_name(&self.path.join(&name).join("mdev_type"))? {
                devices.push(Mdev { uuid, type_id });
            }
        }
        Ok(devices)
    }
}

impl MdevType {
    /// The type id, `<driver>-<group>` (`nvidia-222`, `i915-GVTg_V5_4`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The type's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `<type-id>/<name>`, relative to the types directory.
    fn attr(&self, name: &str) -> String {
        format!("{}/{name}", self.id)
    }

    /// `name`, which some kernels (Intel GVT-g) do not provide.
    pub(crate) fn name(&self) -> Result<Option<String>> {
        Ok(self
            .types_dir
            .read_attr(&self.attr("name"))?
            .map(|n| n.trim().to_owned()))
    }

    /// `description`, free text in the vendor's format.
    pub(crate) fn description(&self) -> Result<Option<String>> {
        self.types_dir.read_attr(&self.attr("description"))
    }

    /// `device_api`, e.g. `vfio-pci`.
    pub(crate) fn device_api(&self) -> Result<Option<String>> {
        Ok(self
            .types_dir
            .read_attr(&self.attr("device_api"))?
            .map(|n| n.trim().to_owned()))
    }

    /// `available_instances`: how many more can be created on this parent now.
    pub(crate) fn available_instances(&self) -> Result<Option<u32>> {
        self.types_dir
            .read_parsed(&self.attr("available_instances"), "a count", |t| {
                t.parse().ok()
            })
    }
}
