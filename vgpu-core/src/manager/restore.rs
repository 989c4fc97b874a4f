//! Bringing the host back to its definitions after a reboot or a crash.

use serde::Serialize;

mod quota;

pub use quota::RestoreQuota;

use super::session::{Operation, Session};
use crate::backend::{self, Placement, Running};
use crate::error::{Error, ErrorKind, Result};
use crate::host::pci_device::PciDevice;
use crate::model::VgpuHandle;
use crate::state::store::{AllDefinitions, SriovDefinition, Start};

/// How one step of [`Manager::restore`](super::Manager::restore) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RestoreOutcome {
    /// The step changed the host.
    Created,
    /// What the definition asks for was already in place.
    Unchanged,
    /// The step failed; what it did was undone.
    Failed,
}

impl std::fmt::Display for RestoreOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestoreOutcome::Created => "created",
            RestoreOutcome::Unchanged => "unchanged",
            RestoreOutcome::Failed => "failed",
        })
    }
}

/// One step of [`Manager::restore`](super::Manager::restore).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreStep {
    /// What the step does: `sriov`, `quota`, `bind`, `mdev`, `vf-vgpu`.
    pub action: &'static str,
    /// The device (`definition` for a definition file that could not be read).
    pub device: String,
    /// For a `quota` step, the VF and its quota (flattened into the step in JSON).
    #[serde(flatten)]
    pub quota: Option<RestoreQuota>,
    /// How it ended.
    pub outcome: RestoreOutcome,
    /// The error chain, when it failed.
    pub error: Option<String>,
    /// The error's kind, when it failed.
    pub kind: Option<ErrorKind>,
}

/// What [`Manager::restore`](super::Manager::restore) did, step by step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// Every step, in order.
    pub steps: Vec<RestoreStep>,
}

impl RestoreReport {
    /// How many steps failed.
    pub fn failed(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.outcome == RestoreOutcome::Failed)
            .count()
    }

    /// Records one step's result; returns the step.
    fn push(
        &mut self,
        session: &Session,
        action: &'static str,
        device: String,
        result: Result<bool>,
    ) -> &mut RestoreStep {
        let (outcome, error) = match result {
            Ok(true) => (RestoreOutcome::Created, None),
            Ok(false) => (RestoreOutcome::Unchanged, None),
            Err(err) => (RestoreOutcome::Failed, Some(err)),
        };
        if outcome != RestoreOutcome::Unchanged {
            let text = error.as_ref().map_or_else(|| "ok".to_owned(), Error::chain);
            session.record(action, &device, &text);
        }
        self.steps.push(RestoreStep {
            action,
            device,
            quota: None,
            outcome,
            kind: error.as_ref().map(Error::kind),
            error: error.as_ref().map(Error::chain),
        });
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }
}

/// Restores every definition in order, each step its own operation: VF counts (each followed
/// by its VFs' local-memory quotas), bindings, mediated devices, NVIDIA VF types.
pub(super) fn run(session: &Session) -> Result<RestoreReport> {
    session.record("restore", "host", "started");
    let mut report = RestoreReport::default();
    let AllDefinitions {
        sriov,
        bindings,
        mdevs,
        vf_vgpus,
        errors,
    } = session.store().all_lenient();
    let mut errors = errors;
    let mut unreadable = |report: &mut RestoreReport, kind: &'static str| {
        let (these, rest): (Vec<_>, Vec<_>) = errors.drain(..).partition(|(k, _)| *k == kind);
        errors = rest;
        for (action, err) in these {
            report.push(session, action, "definition".to_owned(), Err(err));
        }
    };
    unreadable(&mut report, "sriov");
    for def in &sriov {
        let result = session.attempt(|op| restore_sriov(op, def));
        let counted = result.is_ok();
        report.push(session, "sriov", def.pf.to_string(), result);
        if counted {
            quota::restore(session, &mut report, def);
        }
    }
    unreadable(&mut report, "bind");
    for def in bindings.iter().filter(|d| d.start == Start::Auto) {
        let result = session.attempt(|op| {
            quota::check_restored(op, &sriov, def.address)?;
            let previous = op.bind(def.address, &def.driver)?;
            Ok(previous.as_deref() != Some(def.driver.as_str()))
        });
        report.push(session, "bind", def.address.to_string(), result);
    }
    unreadable(&mut report, "mdev");
    for def in mdevs.iter().filter(|d| d.start == Start::Auto) {
        let id = VgpuHandle::Mdev(def.uuid);
        let result = session.attempt(|op| match backend::running(op.paths(), id)? {
            None => {
                op.start_mdev(def)?;
                Ok(true)
            }
            Some(Running::Mdev { parent }) => {
                let found = crate::host::mdev::MdevParent::new(op.paths().pci_device(&parent))
                    .devices()?
                    .into_iter()
                    .find(|m| m.uuid == def.uuid)
                    .map(|m| m.type_id);
                if parent.to_string() == def.parent
                    && found.as_deref() == Some(def.mdev_type.as_str())
                {
                    Ok(false)
                } else {
                    Err(Error::DefinitionMismatch {
                        id: id.to_string(),
                        defined: format!("type {} on {}", def.mdev_type, def.parent),
                        found: format!(
                            "type {} on {parent}",
                            found.as_deref().unwrap_or("unknown")
                        ),
                    })
                }
            }
            Some(other) => Err(Error::DefinitionMismatch {
                id: id.to_string(),
                defined: format!("type {} on {}", def.mdev_type, def.parent),
                found: format!("{other:?}"),
            }),
        });
        report.push(
            session,
            "mdev",
            format!("{}/{}", def.parent, def.uuid),
            result,
        );
    }
    unreadable(&mut report, "vf-vgpu");
    for def in vf_vgpus.iter().filter(|d| d.start == Start::Auto) {
        let id = VgpuHandle::Vf(def.vf);
        let result = session.attempt(|op| match backend::running(op.paths(), id)? {
            Some(Running::VendorVf { type_id }) if type_id == def.type_id => Ok(false),
            Some(other) => Err(Error::DefinitionMismatch {
                id: id.to_string(),
                defined: format!("NVIDIA vGPU type {}", def.type_id),
                found: match other {
                    Running::VendorVf { type_id } => format!("NVIDIA vGPU type {type_id}"),
                    Running::Mdev { parent } => format!("a mediated device on {parent}"),
                    Running::PlainVf => "a VF bound to vfio-pci".to_owned(),
                },
            }),
            None => {
                let placement = Placement::VendorVf {
                    vf: def.vf,
                    type_id: def.type_id,
                };
                op.realize(&placement, id).map(|_| true)
            }
        });
        report.push(session, "vf-vgpu", def.vf.to_string(), result);
    }
    let failed = report.failed();
    let outcome: Result<()> = if failed > 0 {
        Err(Error::RestoreFailed { failed })
    } else {
        Ok(())
    };
    session.record_result("restore", "host", &outcome);
    Ok(report)
}

fn restore_sriov(op: &mut Operation<'_>, def: &SriovDefinition) -> Result<bool> {
    let device = PciDevice::new(op.paths(), def.pf);
    let current = device.sriov()?.map(|s| s.num_vfs);
    // An NVIDIA PF left on pci-pf-stub by an interrupted sequence needs finishing even when
    // its count is already right.
    let stubbed = device.driver()?.as_deref() == Some("pci-pf-stub");
    if current == Some(def.num_vfs) && !stubbed {
        return Ok(false);
    }
    if let Some(on) = def.drivers_autoprobe {
        op.set_autoprobe(def.pf, on)?;
    }
    op.set_vf_count(def.pf, def.num_vfs)?;
    Ok(true)
}
