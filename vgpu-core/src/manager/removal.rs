//! The one removal policy: whether a device may be taken away (destroyed, undefined, stopped,
//! unbound, its VF removed with a VF count).
//!
//! Every command that takes a device away asks [`Operation::check_removable`] first:
//! `destroy`, `undefine` (a vGPU without its definition is gone after the next boot), `stop`,
//! `bind` of a device to another driver, `unbind`, `sriov` (each VF it removes) and `apply`'s
//! destroy and undefine steps. It refuses, naming the holder, when:
//!
//! | holder | answer |
//! |---|---|
//! | the libvirt hook's record (`run/vgpu/hook/<domain>`) says a domain holds it or was given it | [`Error::InUse`] naming the domain and the record |
//! | a libvirt domain references the device (live or in its configuration) | [`Error::InUse`] naming the domains |
//! | libvirt is there but does not answer | [`Error::HoldersUnknown`]: which domains hold it is unknown |
//! | a process holds its VFIO device open (a guest's QEMU) | [`Error::HeldOpen`] naming the process |
//!
//! The rule for libvirt: a host without libvirt has no domains, so nothing but processes
//! holds a device ([`DomainReferences::NoLibvirt`]); a host whose libvirt does not answer
//! may have domains that hold it, so nothing is taken away until it answers or the command
//! is forced ([`DomainReferences::Unanswered`]). The core does not talk to libvirt: the caller
//! says what libvirt said ([`Manager::with_domain_references`](crate::Manager::with_domain_references)).
//! The hook's records are asked always, with libvirt or without: a domain the hook prepared
//! holds what it was given until its `release`. A forced session skips every check.

use std::collections::BTreeMap;
use std::path::PathBuf;

use uuid::Uuid;

use super::session::{DomainReferences, Operation};
use crate::backend;
use crate::error::{Error, Result};
use crate::host::paths::HostPaths;
use crate::model::VgpuHandle;
use crate::state::hook::other_records;

impl Operation<'_> {
    /// The one removal policy (see the module documentation): fails when the hook's record of
    /// a domain holds `id`, when a libvirt domain references it, when libvirt does not answer,
    /// or when a process holds its VFIO device (or that of a mediated device on it) open; a
    /// forced session skips the checks.
    pub(crate) fn check_removable(&self, id: VgpuHandle) -> Result<()> {
        self.check(id, Records::All)
    }

    /// [`Operation::check_removable`] for the hook taking back what it gave `domain`: the
    /// domain's own record does not hold it against its release; every other check stands.
    pub(crate) fn check_releasable(&self, id: VgpuHandle, domain: Uuid) -> Result<()> {
        self.check(id, Records::Except(domain))
    }

    /// [`Operation::check_removable`] without the hook's records: for the hook itself, which
    /// takes over another record's claim on a device that no guest holds open.
    pub(crate) fn check_unreferenced(&self, id: VgpuHandle) -> Result<()> {
        self.check(id, Records::None)
    }

    fn check(&self, id: VgpuHandle, records: Records) -> Result<()> {
        if self.forced() {
            return Ok(());
        }
        let holder = match records {
            Records::All => hook_holder(self.paths(), id, Uuid::nil())?,
            Records::Except(domain) => hook_holder(self.paths(), id, domain)?,
            Records::None => None,
        };
        if let Some((path, domain)) = holder {
            return Err(Error::InUse {
                device: id.to_string(),
                by: format!(
                    "the libvirt hook gave it to domain {domain:?} ({} says so until the \
                     domain's release)",
                    path.display()
                ),
            });
        }
        match self.domain_references() {
            DomainReferences::NoLibvirt => {}
            DomainReferences::Known(refs) => {
                if let Some(domains) = refs.get(&id).filter(|d| !d.is_empty()) {
                    return Err(Error::InUse {
                        device: id.to_string(),
                        by: format!("libvirt domain(s) {} reference it", domains.join(", ")),
                    });
                }
            }
            DomainReferences::Unanswered { uri, reason } => {
                return Err(Error::HoldersUnknown {
                    device: id.to_string(),
                    uri: uri.clone(),
                    reason: reason.clone(),
                });
            }
        }
        // The mediated devices on a PCI function go with it.
        if let VgpuHandle::Vf(address) = id {
            let parent = crate::host::mdev::MdevParent::new(self.paths().pci_device(&address));
            for mdev in parent.devices()? {
                self.check(VgpuHandle::Mdev(mdev.uuid), records)?;
            }
        }
        match backend::open_by(self.paths(), id)?.into_iter().next() {
            Some(holder) => Err(Error::HeldOpen {
                device: id.to_string(),
                pid: holder.pid,
                command: holder.command,
                node: holder.node,
            }),
            None => Ok(()),
        }
    }
}

impl Operation<'_> {
    /// Drops the destroyed device `id` from every hook record that lists it, as made for its
    /// domain or held by it. Only a forced destroy takes a device a record lists: then no
    /// domain holds what is gone, and a device made later under the same UUID or VF is not
    /// held by the old claim.
    /// Returns whether a record listed it.
    pub(crate) fn forget_destroyed(&mut self, id: VgpuHandle) -> Result<bool> {
        let mut forgot = false;
        for (path, mut record) in other_records(self.paths(), Uuid::nil())? {
            let listed = (record.devices().len(), record.moved.len());
            record.made.retain(|m| m.handle() != id);
            record.holds.retain(|held| *held != id);
            record.moved.retain(|moved| moved.to != id);
            if (record.devices().len(), record.moved.len()) != listed {
                let bytes = record.encode(&path)?;
                self.replace_file(&path, Some(&bytes))?;
                forgot = true;
            }
        }
        Ok(forgot)
    }
}

/// Whose records of the libvirt hook hold a device against its removal.
#[derive(Debug, Clone, Copy)]
enum Records {
    /// Every domain's.
    All,
    /// Every domain's but this one's.
    Except(Uuid),
    /// None.
    None,
}

/// The hook's record, other than `except`'s, that holds `id` (made for its domain, or held by
/// it), with its domain's name; `None` when no record does.
fn hook_holder(
    paths: &HostPaths,
    id: VgpuHandle,
    except: Uuid,
) -> Result<Option<(PathBuf, String)>> {
    Ok(hook_holds(paths, except)?.remove(&id))
}

/// Every device the hook's records, other than `except`'s, hold (made for their domain, or held
/// by it), each with its record and its domain's name: what the removal policy and the planner
/// (`Manager::host_state`) both count as held.
pub(crate) fn hook_holds(
    paths: &HostPaths,
    except: Uuid,
) -> Result<BTreeMap<VgpuHandle, (PathBuf, String)>> {
    let mut held = BTreeMap::new();
    for (path, record) in other_records(paths, except)? {
        for id in record.devices() {
            held.entry(id)
                .or_insert_with(|| (path.clone(), record.domain.clone()));
        }
    }
    Ok(held)
}
