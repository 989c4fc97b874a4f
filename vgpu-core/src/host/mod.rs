//! The kernel's interfaces as files under one root: paths, bounded sysfs reads and single
//! writes, and the typed handles of the sysfs objects `vgpu` drives (PCI functions, mdev
//! parents and types, NVIDIA's vendor VFIO attributes), with driver binding and SR-IOV, and the
//! uevents that say when they change; and the durable updates of `vgpu`'s own files under the
//! same root (`durable`). Public here: [`HostPaths`], the SR-IOV options and the uevents.

pub(crate) mod driver;
pub(crate) mod durable;
pub(crate) mod mdev;
pub(crate) mod nvidia;
pub(crate) mod paths;
pub(crate) mod pci_device;
pub(crate) mod sriov;
pub(crate) mod sysfs;
pub(crate) mod uevent;
pub(crate) mod vfio;

pub use crate::error::HostError;
pub use paths::HostPaths;
pub use sriov::{SriovChange, SriovOptions};
/// The host's name (`proc/sys/kernel/hostname`, without its newline); `None` when the file does
/// not exist.
pub fn hostname(paths: &HostPaths) -> crate::Result<Option<String>> {
    Ok(sysfs::read_attr(&paths.hostname())?.map(|name| name.trim().to_owned()))
}

pub use uevent::{Uevent, UeventAction, UeventOrigin, UeventParseError, UeventSource};
