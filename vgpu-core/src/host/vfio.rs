//! Who holds a VFIO device open.
//!
//! A guest's VFIO device is opened through its IOMMU group's node `/dev/vfio/<group>` or, with
//! iommufd, its character device `/dev/vfio/devices/vfio<N>`, listed in sysfs as
//! `<device>/vfio-dev/vfio<N>/` (`Documentation/driver-api/vfio.rst`). A process that has one
//! open shows it as a `proc/<pid>/fd/<n>` link to that path (`proc(5)`). Removing the device
//! under such a process (QEMU, most often) pulls it out of a running guest, so the manager
//! refuses to unless forced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use uuid::Uuid;

use crate::error::Result;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs;
use crate::model::pci::PciAddress;

/// A process holding a VFIO device open, or one that may: its open files cannot be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// Its process id.
    pub(crate) pid: u32,
    /// Its command name (`proc/<pid>/comm`), `?` when it could not be read.
    pub(crate) command: String,
    /// The node it holds open (`/dev/vfio/42`, `/dev/vfio/devices/vfio3`), or, when its files
    /// cannot be listed, that and why.
    pub(crate) node: String,
    /// False when its open files cannot be listed (a confining security module, another user
    /// when not root): it may hold any of the nodes asked about.
    pub(crate) listed: bool,
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
/// is skipped; one whose descriptors cannot be listed is counted as a holder (`listed` false).
pub(crate) fn holders(paths: &HostPaths, nodes: &BTreeSet<String>) -> Result<Vec<Holder>> {
    let mut found = Vec::new();
    scan(paths, nodes, |holder| {
        found.push(holder);
        false
    })?;
    Ok(found)
}

/// For each of `nodes` that a process holds open, the first such process (by pid): one pass
/// over the processes for any number of devices. A process whose descriptors cannot be listed
/// may hold any of them: it is the holder of each node no listed process holds.
pub(crate) fn holders_by_node(
    paths: &HostPaths,
    nodes: &BTreeSet<String>,
) -> Result<BTreeMap<String, Holder>> {
    let mut found: BTreeMap<String, Holder> = BTreeMap::new();
    scan(paths, nodes, |holder| {
        if holder.listed {
            match found.get(&holder.node) {
                Some(first) if first.listed => {}
                _ => {
                    found.insert(holder.node.clone(), holder);
                }
            }
        } else {
            for node in nodes {
                found.entry(node.clone()).or_insert_with(|| holder.clone());
            }
        }
        true
    })?;
    Ok(found)
}

/// Calls `found` for each open descriptor of one of `nodes`, in pid order, and once for each
/// process whose descriptors cannot be listed (other than because it ended); after the first
/// descriptor of a process, the rest of that process's are read only while `found` returns
/// true.
fn scan(
    paths: &HostPaths,
    nodes: &BTreeSet<String>,
    mut found: impl FnMut(Holder) -> bool,
) -> Result<()> {
    if nodes.is_empty() {
        return Ok(());
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
                found(Holder {
                    pid,
                    command: command_of(&proc, pid),
                    node: format!("files that cannot be listed ({}: {err})", fd_dir.display()),
                    listed: false,
                });
                continue;
            }
        };
        for entry in fds {
            // A descriptor closed while it is read is gone; one that cannot be read may be the
            // device, and is reported as a possible holder like an unlistable process.
            let target = entry.and_then(|entry| std::fs::read_link(entry.path()));
            let target = match target {
                Ok(target) => target,
                Err(err) if sysfs::is_absent(&err) => continue,
                Err(err) => {
                    let more = found(Holder {
                        pid,
                        command: command_of(&proc, pid),
                        node: format!(
                            "a descriptor that cannot be read ({}: {err})",
                            fd_dir.display()
                        ),
                        listed: false,
                    });
                    if !more {
                        break;
                    }
                    continue;
                }
            };
            let target = target.to_string_lossy();
            if nodes.contains(target.as_ref()) {
                let more = found(Holder {
                    pid,
                    command: command_of(&proc, pid),
                    node: target.into_owned(),
                    listed: true,
                });
                if !more {
                    break;
                }
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `proc` with process 10 holding `/dev/vfio/7` open, and process 20 whose `fd`
    /// directory cannot be listed (a symlink loop: `ELOOP`, not absence).
    fn procs() -> (tempfile::TempDir, HostPaths) {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        std::fs::create_dir_all(proc.join("10/fd")).unwrap();
        std::fs::write(proc.join("10/comm"), "qemu\n").unwrap();
        std::os::unix::fs::symlink("/dev/vfio/7", proc.join("10/fd/3")).unwrap();
        std::fs::create_dir_all(proc.join("20")).unwrap();
        std::fs::write(proc.join("20/comm"), "confined\n").unwrap();
        std::os::unix::fs::symlink("fd", proc.join("20/fd")).unwrap();
        let paths = HostPaths::new(dir.path());
        (dir, paths)
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn holders_counts_a_process_whose_files_cannot_be_listed() {
        let (_dir, paths) = procs();

        let found = holders(&paths, &nodes(&["/dev/vfio/9"])).unwrap();

        assert_eq!(found.len(), 1);
        assert_eq!((found[0].pid, found[0].listed), (20, false));
        assert_eq!(found[0].command, "confined");
        assert!(found[0].node.starts_with("files that cannot be listed"));
    }

    #[test]
    fn holders_by_node_prefers_a_listed_holder_and_fails_closed_for_the_rest() {
        let (_dir, paths) = procs();

        let found = holders_by_node(&paths, &nodes(&["/dev/vfio/7", "/dev/vfio/9"])).unwrap();

        let held = |node: &str| found.get(node).map(|h| (h.pid, h.listed));
        assert_eq!(held("/dev/vfio/7"), Some((10, true)));
        assert_eq!(held("/dev/vfio/9"), Some((20, false)));
    }

    #[test]
    fn a_process_that_vanished_is_not_a_holder() {
        let (dir, paths) = procs();
        std::fs::remove_file(dir.path().join("proc/20/fd")).unwrap();

        let found = holders_by_node(&paths, &nodes(&["/dev/vfio/9"])).unwrap();

        assert!(found.is_empty());
    }
}
