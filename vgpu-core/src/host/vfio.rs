//! Who holds a VFIO device open.
//!
//! A guest's VFIO device is opened through its IOMMU group's node `/dev/vfio/<group>` or, with
//! iommufd, its character device `/dev/vfio/devices/vfio<N>`, listed in sysfs as
//! `<device>/vfio-dev/vfio<N>/` (`Documentation/driver-api/vfio.rst`). A process that has one
//! open shows it as a `proc/<pid>/fd/<n>` link to that path (`proc(5)`). Removing the device
//! under such a process (QEMU, most often) pulls it out of a running guest, so the manager
//! refuses to unless forced.

use std::collections::BTreeSet;
use std::path::Path;

use uuid::Uuid;

use crate::error::Result;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs;
use crate::model::pci::PciAddress;

/// A process holding a VFIO device open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// Its process id.
    pub(crate) pid: u32,
    /// Its command name (`proc/<pid>/comm`), `?` when it could not be read.
    pub(crate) command: String,
    /// The node it holds open (`/dev/vfio/42`, `/dev/vfio/devices/vfio3`).
    pub(crate) node: String,
}

/// The device nodes through which the VFIO device in sysfs directory `dir` is opened: its
/// group node (from the `iommu_group` link) and each `vfio-dev/vfio<N>` character device.
fn nodes_of(dir: &Path) -> Result<BTreeSet<String>> {
    let mut nodes = BTreeSet::new();
    if let Some(group) = sysfs::link_name(&dir.join("iommu_group"))? {
        nodes.insert(format!("/dev/vfio/{group}"));
    }
    for name in sysfs::dir_names(&dir.join("vfio-dev"))? {
        if name.starts_with("vfio") {
            nodes.insert(format!("/dev/vfio/devices/{name}"));
        }
    }
    Ok(nodes)
}

/// The VFIO nodes of PCI function `address`.
pub(crate) fn pci_nodes(paths: &HostPaths, address: PciAddress) -> Result<BTreeSet<String>> {
    nodes_of(PciDevice::new(paths, address).path())
}

/// The VFIO nodes of mediated device `uuid`.
pub(crate) fn mdev_nodes(paths: &HostPaths, uuid: Uuid) -> Result<BTreeSet<String>> {
    nodes_of(&paths.mdev_devices().join(uuid.to_string()))
}

/// Every process holding one of `nodes` open, by pid. A process that ends while it is read
/// is skipped; so is one whose descriptors cannot be listed (another user's, when not root).
pub(crate) fn holders(paths: &HostPaths, nodes: &BTreeSet<String>) -> Result<Vec<Holder>> {
    let mut found = Vec::new();
    if nodes.is_empty() {
        return Ok(found);
    }
    let proc = paths.proc();
    let mut pids: Vec<u32> = sysfs::dir_names(&proc)?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let fd_dir = proc.join(pid.to_string()).join("fd");
        let fds = match std::fs::read_dir(&fd_dir) {
            Ok(fds) => fds,
            // The process ended meanwhile.
            Err(err) if sysfs::is_absent(&err) => continue,
            // A process whose files cannot be seen (a confining security module, another user
            // when not root) may hold the device: say so rather than assume it does not.
            Err(err) => {
                found.push(Holder {
                    pid,
                    command: command_of(&proc, pid),
                    node: format!("files that cannot be listed ({}: {err})", fd_dir.display()),
                });
                continue;
            }
        };
        for entry in fds.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if nodes.contains(target.as_ref()) {
                found.push(Holder {
                    pid,
                    command: command_of(&proc, pid),
                    node: target.into_owned(),
                });
                break;
            }
        }
    }
    Ok(found)
}

/// The command name of process `pid`; `?` when it cannot be read (it may have just ended).
fn command_of(proc: &Path, pid: u32) -> String {
    match sysfs::read_attr(&proc.join(pid.to_string()).join("comm")) {
        Ok(Some(comm)) => comm.trim().to_owned(),
        Ok(None) => "?".to_owned(),
        Err(err) => {
            tracing::debug!(pid, "cannot read the command name: {}", err.chain());
            "?".to_owned()
        }
    }
}
