//! Local-memory quotas in `restore`: each VF's quota that its PF's SR-IOV definition records is
//! set again once the VFs are enabled, and a VF left without it is not bound for a guest.

use serde::Serialize;

use super::RestoreReport;
use crate::discovery::discover_gpu;
use crate::error::{Error, Result};
use crate::host::pci_device::PciDevice;
use crate::manager::session::{Operation, Session};
use crate::model::pci::PciAddress;
use crate::plan::planner::vfs::{lowered_first, nth_vf, quota_matches};
use crate::plan::steps::{Step, mib_text};
use crate::state::store::{MIB, SriovDefinition};

/// The VF and quota of a `quota` step of [`Manager::restore`](crate::Manager::restore).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoreQuota {
    /// The VF's number, `M` in `vf<M>` (from 1, in `virtfn` order).
    pub vf: u32,
    /// Its quota before the step, in MiB; `None` when it could not be read.
    pub from_mib: Option<u64>,
    /// The quota its definition records, in MiB.
    pub to_mib: u64,
}

/// Sets each VF's quota that `def` records, lowered quotas first as the planner orders them,
/// each its own operation and step of `report`: a VF whose quota already matches is
/// unchanged, and one that a process holds open or a passthrough driver has is refused (its
/// step fails and the rest go on).
pub(super) fn restore(session: &Session, report: &mut RestoreReport, def: &SriovDefinition) {
    if def.lmem_quota_mib.is_empty() {
        return;
    }
    let gpu = match discover_gpu(session.paths(), def.pf) {
        Ok((gpu, _warnings)) => gpu,
        Err(err) => {
            report.push(session, "quota", def.pf.to_string(), Err(err));
            return;
        }
    };
    let mut steps: Vec<Step> = def
        .lmem_quota_mib
        .iter()
        .map(|(&vf, &to_mib)| {
            let index = vf.saturating_sub(1);
            let enabled = gpu.vfs.get(index as usize);
            Step::Quota {
                vf,
                address: enabled.map(|v| v.address).or_else(|| nth_vf(&gpu, index)),
                from_mib: enabled.and_then(|v| v.memory_mib),
                to_mib,
            }
        })
        .collect();
    lowered_first(&mut steps, None);
    for step in steps {
        if let Step::Quota {
            vf,
            address,
            from_mib,
            to_mib,
        } = step
        {
            let result = session.attempt(|op| {
                op.set_lmem_quota(def.pf, vf, to_mib)
                    .map(|(_, changed)| changed)
            });
            let device = address.map_or_else(|| def.pf.to_string(), |a| a.to_string());
            report.push(session, "quota", device, result).quota = Some(RestoreQuota {
                vf,
                from_mib,
                to_mib,
            });
        }
    }
}

/// Fails with [`Error::DefinitionMismatch`] when `address` is a VF whose PF's definition (one
/// of `sriov`) records a quota the VF does not have: bound for a guest, it would be handed the
/// wrong memory, and its quota could not change until the guest lets it go.
pub(super) fn check_restored(
    op: &Operation<'_>,
    sriov: &[SriovDefinition],
    address: PciAddress,
) -> Result<()> {
    for def in sriov.iter().filter(|d| !d.lmem_quota_mib.is_empty()) {
        let pf = PciDevice::new(op.paths(), def.pf);
        let Some(index) = pf.virtfns()?.iter().position(|vf| *vf == address) else {
            continue;
        };
        let m = index + 1;
        let Some(&wanted) = u32::try_from(m)
            .ok()
            .and_then(|m| def.lmem_quota_mib.get(&m))
        else {
            return Ok(());
        };
        let found = pf.lmem_quota(m)?.map(|bytes| bytes / MIB);
        if found.is_some_and(|found| quota_matches(found, wanted)) {
            return Ok(());
        }
        return Err(Error::DefinitionMismatch {
            id: address.to_string(),
            defined: format!("VF {m} with {} of local memory", mib_text(wanted)),
            found: found.map_or_else(|| "no quota".to_owned(), mib_text),
        });
    }
    Ok(())
}
