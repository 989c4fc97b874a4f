//! Bringing the host back to its definitions after a reboot or a crash, or, for one device,
//! when udev says its driver bound, it registered as a mediated-device parent, or it appeared
//! as a VF (`contrib/udev/60-vgpu.rules` runs `vgpuctl restore --device %k`).
//!
//! A device-scoped restore runs the same steps over the definitions that concern the device:
//! for a physical function its VF count and its VFs' local-memory quotas, and the bindings,
//! mediated devices and NVIDIA VF types on it and on its VFs (those present once its VF count
//! is restored); for a VF or any other function, those on it. A definition whose device is not ready yet (a parent its
//! driver has not registered, a VF without its driver's interface, a function not there) is
//! reported as [`RestoreOutcome::Waiting`] rather than failed: the event that makes it ready
//! runs the restore again.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

mod drivers;
mod mig;
mod quota;
mod sched;

pub use quota::RestoreQuota;

use super::session::{Operation, Session};
use crate::backend::{self, Running};
use crate::error::{Error, ErrorKind, HostError, Result, StateError};
use crate::host::mdev::MdevParent;
use crate::host::nvidia::NvidiaVf;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;
use crate::model::sizes::placement_of_attrs;
use crate::state::store::{
    AllDefinitions, MdevDefinition, SriovDefinition, Start, VfVgpuDefinition,
};

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
    /// (Device-scoped restore only.) The device the definition needs is not ready yet;
    /// `reason` says what is missing. Nothing was changed.
    Waiting,
}

impl std::fmt::Display for RestoreOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestoreOutcome::Created => "created",
            RestoreOutcome::Unchanged => "unchanged",
            RestoreOutcome::Failed => "failed",
            RestoreOutcome::Waiting => "waiting",
        })
    }
}

/// One step of [`Manager::restore`](super::Manager::restore).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreStep {
    /// What the step does: `driver`, `sriov`, `quota`, `bind`, `mig-mode`, `gpu-instance`,
    /// `scheduler`, `mdev`, `vf-vgpu`.
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
    /// What the device lacks, when the step is waiting.
    pub reason: Option<String>,
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
            reason: None,
        });
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }

    /// Records a step left for later because its device is not ready.
    fn push_waiting(
        &mut self,
        session: &Session,
        action: &'static str,
        device: String,
        reason: String,
    ) {
        session.record(action, &device, &format!("waiting: {reason}"));
        self.steps.push(RestoreStep {
            action,
            device,
            quota: None,
            outcome: RestoreOutcome::Waiting,
            error: None,
            kind: None,
            reason: Some(reason),
        });
    }
}

/// The devices a device-scoped restore concerns: the device and, for a physical function,
/// its VFs present now.
#[derive(Debug)]
struct Scope {
    device: PciAddress,
    /// A VF's physical function.
    physfn: Option<PciAddress>,
    /// The GPU whose scheduler and size mode the scope restores: the device itself, or a
    /// VF's physical function when the VF has a vGPU to make ([`Scope::include_gpu_of`]).
    gpu: Option<PciAddress>,
    family: BTreeSet<PciAddress>,
}

impl Scope {
    /// The scope of `device`, which must exist.
    fn of(paths: &HostPaths, device: PciAddress) -> Result<Self> {
        let physfn = PciDevice::existing(paths, device)?.physfn()?;
        let mut scope = Self {
            device,
            physfn,
            gpu: physfn.is_none().then_some(device),
            family: BTreeSet::new(),
        };
        scope.refresh(paths)?;
        Ok(scope)
    }

    /// Reads the device's VFs again (after its VF count was restored).
    fn refresh(&mut self, paths: &HostPaths) -> Result<()> {
        let device = PciDevice::existing(paths, self.device)?;
        self.family = BTreeSet::from([self.device]);
        if device.physfn()?.is_none() {
            self.family.extend(device.virtfns()?);
        }
        Ok(())
    }

    /// Takes in the scheduler and size mode of a VF's GPU when the VF has a vGPU to make
    /// (an mdev on it, or its own NVIDIA type, started at boot): that vGPU needs them, and
    /// the driver takes them only before the GPU holds vGPUs. A VF without one leaves its
    /// GPU's settings alone: udev runs this for every VF that appears.
    fn include_gpu_of(&mut self, mdevs: &[MdevDefinition], vf_vgpus: &[VfVgpuDefinition]) {
        let on_device = |parent: &str| parent.parse::<PciAddress>() == Ok(self.device);
        let has_vgpu = mdevs
            .iter()
            .any(|d| d.start == Start::Auto && on_device(&d.parent))
            || vf_vgpus
                .iter()
                .any(|d| d.start == Start::Auto && d.vf == self.device);
        if has_vgpu {
            self.gpu = self.gpu.or(self.physfn);
        }
    }

    /// Whether the scheduler and size mode of `gpu` are restored under `scope`: all with
    /// `None`, else those of the scope's GPU ([`Scope::gpu`]).
    fn covers_gpu(scope: Option<&Self>, gpu: PciAddress) -> bool {
        scope.is_none_or(|s| s.gpu == Some(gpu))
    }

    /// Whether the MIG geometry of `gpu` is restored under `scope`: all with `None`, else
    /// only the GPU's own scope's. It may destroy GPU instances, which a VF's restore does not.
    fn is_gpu(scope: Option<&Self>, gpu: PciAddress) -> bool {
        scope.is_none_or(|s| s.device == gpu)
    }

    fn concerns(&self, address: PciAddress) -> bool {
        self.family.contains(&address)
    }

    /// Whether a definition file that cannot be read may concern the scope: its path names a
    /// device of the scope (`etc/vgpu/<kind>/<address>`, `etc/mdevctl.d/<parent>/<uuid>`), or
    /// names no device at all (a store directory that cannot be listed).
    fn concerns_file(&self, err: &Error) -> bool {
        let Some(path) = definition_file(err) else {
            return true;
        };
        let named: Vec<PciAddress> = path
            .components()
            .filter_map(|c| c.as_os_str().to_str()?.parse().ok())
            .collect();
        named.is_empty() || named.iter().any(|a| self.concerns(*a))
    }
}

/// The file an error reading a definition names.
fn definition_file(err: &Error) -> Option<&Path> {
    match err {
        Error::State(
            StateError::Definition { path, .. } | StateError::DefinitionJson { path, .. },
        )
        | Error::Host(
            HostError::Read { path, .. }
            | HostError::TooLarge { path, .. }
            | HostError::NotUtf8 { path, .. }
            | HostError::Parse { path, .. },
        ) => Some(path),
        _ => None,
    }
}

/// For a device-scoped restore: why the definition of `action` on `device` cannot be carried
/// out yet, if it cannot.
fn not_ready(paths: &HostPaths, action: &str, device: PciAddress) -> Option<String> {
    let dir = paths.pci_device(&device);
    if !PciDevice::new(paths, device).exists() {
        return Some(format!("{device} is not there"));
    }
    match action {
        "mdev" if !MdevParent::new(&dir).is_parent() => Some(format!(
            "{device} is not a mediated-device parent yet (its driver has not registered it)"
        )),
        "vf-vgpu" => match NvidiaVf::of(&dir) {
            Ok(Some(_)) => None,
            Ok(None) => Some(format!(
                "{device} has no NVIDIA vendor-VFIO interface yet (nvidia has not bound it)"
            )),
            Err(err) => Some(err.chain()),
        },
        _ => None,
    }
}

/// Restores every definition in order, each step its own operation: devices a killed command
/// left without a driver, VF counts (each followed by its VFs' local-memory quotas),
/// bindings, MIG geometry (mode, then GPU instances), schedulers, size modes, mediated
/// devices, NVIDIA VF types (of these two, those defined at a placement first). With
/// `device`, only the definitions that concern it (see the module documentation).
pub(super) fn run(session: &Session, device: Option<PciAddress>) -> Result<RestoreReport> {
    let target = device.map_or_else(|| "host".to_owned(), |d| d.to_string());
    session.record("restore", &target, "started");
    let result = run_steps(session, device);
    match &result {
        Ok(report) if report.failed() > 0 => {
            let failed: Result<()> = Err(Error::RestoreFailed {
                failed: report.failed(),
            });
            session.record_result("restore", &target, &failed);
        }
        other => session.record_result("restore", &target, other),
    }
    result
}

fn run_steps(session: &Session, device: Option<PciAddress>) -> Result<RestoreReport> {
    let paths = session.paths();
    let mut scope = device.map(|d| Scope::of(paths, d)).transpose()?;
    let mut report = RestoreReport::default();
    let AllDefinitions {
        sriov,
        bindings,
        migs,
        scheds,
        size_modes,
        mdevs,
        vf_vgpus,
        errors,
    } = session.store().all_lenient();
    if let Some(scope) = &mut scope {
        scope.include_gpu_of(&mdevs, &vf_vgpus);
    }
    let mut errors = errors;
    let mut unreadable = |report: &mut RestoreReport, kind: &'static str, scope: &Option<Scope>| {
        let (these, rest): (Vec<_>, Vec<_>) = errors.drain(..).partition(|(k, _)| *k == kind);
        errors = rest;
        for (action, err) in these {
            if scope.as_ref().is_none_or(|s| s.concerns_file(&err)) {
                report.push(session, action, "definition".to_owned(), Err(err));
            }
        }
    };
    // For a device-scoped restore, whether the device a definition of this scope needs is
    // ready for it; when it is not, the step is reported as waiting.
    let ready =
        |report: &mut RestoreReport, action: &'static str, device, shown: &str| match not_ready(
            paths, action, device,
        ) {
            Some(reason) => {
                report.push_waiting(session, action, shown.to_owned(), reason);
                false
            }
            None => true,
        };
    drivers::restore(session, &mut report, scope.as_ref());
    unreadable(&mut report, "sriov", &scope);
    for def in sriov
        .iter()
        .filter(|d| scope.as_ref().is_none_or(|s| s.device == d.pf))
    {
        let result = session.attempt(|op| restore_sriov(op, def));
        let counted = result.is_ok();
        report.push(session, "sriov", def.pf.to_string(), result);
        if counted {
            quota::restore(session, &mut report, def);
        }
    }
    if let Some(scope) = &mut scope {
        scope.refresh(paths)?;
    }
    unreadable(&mut report, "bind", &scope);
    for def in bindings.iter().filter(|d| d.start == Start::Auto) {
        let shown = def.address.to_string();
        if let Some(scope) = &scope {
            if !scope.concerns(def.address) || !ready(&mut report, "bind", def.address, &shown) {
                continue;
            }
        }
        let result = session.attempt(|op| {
            quota::check_restored(op, &sriov, def.address)?;
            let previous = op.bind(def.address, &def.driver)?;
            Ok(previous.as_deref() != Some(def.driver.as_str()))
        });
        report.push(session, "bind", shown, result);
    }
    unreadable(&mut report, "mig-mode", &scope);
    mig::restore(session, &mut report, &migs, scope.as_ref());
    unreadable(&mut report, "scheduler", &scope);
    sched::restore(session, &mut report, &scheds, scope.as_ref());
    unreadable(&mut report, "size-mode", &scope);
    sched::restore_size_modes(session, &mut report, &size_modes, scope.as_ref());
    unreadable(&mut report, "mdev", &scope);
    // vGPUs defined at a placement first: one the placer puts after them cannot take their
    // slots (a vGPU `apply` kept is defined without one).
    let placed_first = |placed: bool| !placed;
    let mut mdevs: Vec<&MdevDefinition> = mdevs.iter().filter(|d| d.start == Start::Auto).collect();
    mdevs.sort_by_key(|d| placed_first(placement_of_attrs(&d.attrs).is_some()));
    for def in mdevs {
        let shown = format!("{}/{}", def.parent, def.uuid);
        if let Some(scope) = &scope {
            // A parent that is not a PCI address is no device's: a host-wide restore reports it.
            let Ok(parent) = def.parent.parse::<PciAddress>() else {
                continue;
            };
            if !scope.concerns(parent) || !ready(&mut report, "mdev", parent, &shown) {
                continue;
            }
        }
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
        report.push(session, "mdev", shown, result);
    }
    unreadable(&mut report, "vf-vgpu", &scope);
    let mut vf_vgpus: Vec<&VfVgpuDefinition> =
        vf_vgpus.iter().filter(|d| d.start == Start::Auto).collect();
    vf_vgpus.sort_by_key(|d| placed_first(d.placement.is_some()));
    for def in vf_vgpus {
        let shown = def.vf.to_string();
        if let Some(scope) = &scope {
            // The definition names its GPU: it is the GPU's even while its VF is not there.
            let concerns = scope.concerns(def.vf) || scope.device == def.gpu;
            if !concerns || !ready(&mut report, "vf-vgpu", def.vf, &shown) {
                continue;
            }
        }
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
            None => op.start_vf_vgpu(def).map(|()| true),
        });
        report.push(session, "vf-vgpu", shown, result);
    }
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
