//! Provisioning many GPUs at once: VFs first, then every vGPU, in parallel across GPUs and
//! in order within each one.
//!
//! The kernel serialises work per device (a GPU's VFs come up together; its vGPUs are carved
//! from one frame buffer one at a time) but not across devices, so the time to fill a host is
//! its slowest GPU's own sequence, not the sum of all of them. One task per GPU runs on a
//! blocking thread; the host lock is held once for the whole run, and every change is audited.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::audit::{AuditEntry, AuditLog};
use crate::driver;
use crate::error::{Error, Result};
use crate::inventory::{Backend, VgpuHandle, discover_gpu, error_chain};
use crate::lifecycle;
use crate::lifecycle::Placement;
use crate::lock::HostLock;
use crate::nvidia::NvidiaVf;
use crate::paths::HostPaths;
use crate::pci::PciAddress;
use crate::sriov::{self, SriovChange, SriovOptions};

/// What to make on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The physical GPU.
    pub gpu: PciAddress,
    /// VFs to enable first, if any.
    pub vfs: Option<u32>,
    /// The vGPU type (id or name, as for `create`).
    pub type_name: String,
    /// How many vGPUs; `None` fills the GPU.
    pub count: Option<u32>,
}

/// What happened on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    /// The physical GPU.
    pub gpu: PciAddress,
    /// The VF change, if one was asked for.
    pub sriov: Option<SriovChange>,
    /// The vGPUs created, in order.
    pub created: Vec<VgpuHandle>,
    /// Why the GPU's sequence stopped early, if it did.
    pub error: Option<String>,
    /// How long the GPU's own sequence took, in milliseconds.
    pub elapsed_ms: u128,
}

/// Options for [`provision`].
#[derive(Debug, Clone)]
pub struct ProvisionOptions {
    /// The command line, for the audit log.
    pub command: String,
    /// How long to wait for the host lock.
    pub lock_timeout: Duration,
    /// SR-IOV options.
    pub sriov: SriovOptions,
}

impl Default for ProvisionOptions {
    fn default() -> Self {
        Self {
            command: String::new(),
            lock_timeout: Duration::from_secs(60),
            sriov: SriovOptions::default(),
        }
    }
}

/// Carries out `targets`, one task per GPU, all GPUs at once. A GPU whose sequence fails
/// undoes what it made (its vGPUs, then its VF change) and reports the error; the others go
/// on. Fails as a whole only when the lock or the audit log cannot be had.
pub async fn provision(
    paths: &HostPaths,
    targets: Vec<Target>,
    options: ProvisionOptions,
) -> Result<Vec<GpuReport>> {
    let lock = HostLock::acquire(paths, options.lock_timeout)?;
    let audit = std::sync::Arc::new(AuditLog::open(paths)?);
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = targets.iter().find(|t| !seen.insert(t.gpu)) {
        return Err(Error::Invalid {
            message: format!(
                "GPU {} is named twice: each GPU's steps must run in order",
                twice.gpu
            ),
        });
    }
    let mut tasks = Vec::new();
    for target in targets {
        let paths = paths.clone();
        let audit = audit.clone();
        let options = options.clone();
        tasks.push(tokio::task::spawn_blocking(move || {
            run_one(&paths, &target, &options, &audit)
        }));
    }
    // Every task is awaited before the lock goes, even when one of them died.
    let mut reports = Vec::new();
    let mut lost = Vec::new();
    for task in tasks {
        match task.await {
            Ok(report) => reports.push(report),
            Err(join) => lost.push(join.to_string()),
        }
    }
    drop(lock);
    if !lost.is_empty() {
        return Err(Error::Invalid {
            message: format!("provisioning task(s) did not finish: {}", lost.join("; ")),
        });
    }
    Ok(reports)
}

fn record(
    audit: &AuditLog,
    options: &ProvisionOptions,
    action: &str,
    device: &str,
    result: &Result<()>,
) {
    let outcome = match result {
        Ok(()) => "ok".to_owned(),
        Err(err) => error_chain(err),
    };
    if let Err(err) = audit.record(&AuditEntry::now(&options.command, action, device, outcome)) {
        tracing::error!(
            action,
            device,
            "cannot write the audit log: {}",
            error_chain(&err)
        );
    }
}

fn run_one(
    paths: &HostPaths,
    target: &Target,
    options: &ProvisionOptions,
    audit: &AuditLog,
) -> GpuReport {
    let started = Instant::now();
    let mut report = GpuReport {
        gpu: target.gpu,
        sriov: None,
        created: Vec::new(),
        error: None,
        elapsed_ms: 0,
    };
    if let Err(err) = fill(paths, target, options, audit, &mut report) {
        report.error = Some(error_chain(&err));
        rollback(paths, options, audit, &mut report);
    }
    report.elapsed_ms = started.elapsed().as_millis();
    report
}

fn fill(
    paths: &HostPaths,
    target: &Target,
    options: &ProvisionOptions,
    audit: &AuditLog,
    report: &mut GpuReport,
) -> Result<()> {
    if let Some(vfs) = target.vfs {
        let change = sriov::set_vf_count(paths, target.gpu, vfs, options.sriov);
        let result = change.as_ref().map(|_| ()).map_err(clone_error);
        record(audit, options, "sriov", &target.gpu.to_string(), &result);
        report.sriov = Some(change?);
    }
    // One read of the GPU, while the type still shows its name (a full vendor-VFIO card lists
    // none); then each parent in order, as `lifecycle::place` would choose them.
    let (gpu, _warnings) = discover_gpu(paths, target.gpu)?;
    let wanted = if gpu.backend == Backend::Sriov {
        // Whole VFs: only when asked for by name, and never raw NVIDIA VFs.
        lifecycle::place(paths, &gpu, &target.type_name)?;
        lifecycle::PLAIN_VF_TYPE.to_owned()
    } else {
        lifecycle::resolve_type(&gpu, &target.type_name)?.id.clone()
    };
    if let Some(count) = target.count {
        let available = if gpu.backend == Backend::Sriov {
            gpu.vfs
                .iter()
                .filter(|vf| {
                    !vf.driver
                        .as_deref()
                        .is_some_and(driver::is_passthrough_driver)
                })
                .count() as u32
        } else {
            lifecycle::resolve_type(&gpu, &wanted)?.available
        };
        if count > available {
            return Err(Error::Invalid {
                message: format!(
                    "GPU {} has room for {available} more {wanted}, not {count}",
                    target.gpu
                ),
            });
        }
    }
    let limit = target.count.map_or(usize::MAX, |c| c as usize);
    let create = |placement: &Placement, report: &mut GpuReport| -> Result<()> {
        let result = match placement {
            Placement::Mdev { parent, type_id } => {
                let uuid = uuid::Uuid::new_v4();
                lifecycle::create_mdev(paths, *parent, type_id, uuid)
                    .map(|()| VgpuHandle::Mdev(uuid))
            }
            Placement::VendorVf { vf, type_id } => {
                lifecycle::set_vf_type(paths, *vf, *type_id).map(|()| VgpuHandle::Vf(*vf))
            }
            Placement::PlainVf { vf } => {
                lifecycle::bind_plain_vf(paths, *vf).map(|_| VgpuHandle::Vf(*vf))
            }
        };
        let audited = result.as_ref().map(|_| ()).map_err(clone_error);
        record(audit, options, "create", &target.gpu.to_string(), &audited);
        report.created.push(result?);
        Ok(())
    };
    for placement in candidates(&gpu, &wanted)? {
        if report.created.len() >= limit {
            break;
        }
        while report.created.len() < limit && still_fits(paths, &placement)? {
            create(&placement, report)?;
            if !matches!(placement, Placement::Mdev { parent, .. } if parent == gpu.address) {
                break;
            }
        }
    }
    let made = report.created.len();
    match target.count {
        Some(count) if made < count as usize => Err(Error::Invalid {
            message: format!(
                "GPU {} ran out of {wanted} after {made} of {count}",
                target.gpu
            ),
        }),
        _ => Ok(()),
    }
}

/// Every place a vGPU of `type_id` could go on `gpu`, in the order `lifecycle::place` tries.
fn candidates(gpu: &crate::inventory::Gpu, type_id: &str) -> Result<Vec<Placement>> {
    Ok(match gpu.backend {
        Backend::Mdev => vec![Placement::Mdev {
            parent: gpu.address,
            type_id: type_id.to_owned(),
        }],
        Backend::VfMdev => gpu
            .vfs
            .iter()
            .map(|vf| Placement::Mdev {
                parent: vf.address,
                type_id: type_id.to_owned(),
            })
            .collect(),
        Backend::NvidiaVfio => {
            let id = type_id.parse::<u32>().map_err(|_| Error::Invalid {
                message: format!("{type_id:?} is not an NVIDIA vendor-VFIO type id"),
            })?;
            gpu.vfs
                .iter()
                .map(|vf| Placement::VendorVf {
                    vf: vf.address,
                    type_id: id,
                })
                .collect()
        }
        Backend::Sriov => gpu
            .vfs
            .iter()
            .map(|vf| Placement::PlainVf { vf: vf.address })
            .collect(),
        Backend::None => Vec::new(),
    })
}

/// Whether `placement` can take one more vGPU now, as the kernel shows it.
fn still_fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    match placement {
        Placement::Mdev { parent, type_id } => {
            let parent = crate::mdev::MdevParent::new(paths.pci_device(parent));
            match parent.types()?.into_iter().find(|t| t.id() == type_id) {
                Some(t) => Ok(t.available_instances()?.unwrap_or(0) > 0),
                None => Ok(false),
            }
        }
        Placement::VendorVf { vf, type_id } => match NvidiaVf::of(&paths.pci_device(vf)) {
            Some(nvidia) => Ok(nvidia.current_type()?.is_none()
                && nvidia.creatable_types()?.iter().any(|c| c.id == *type_id)),
            None => Ok(false),
        },
        Placement::PlainVf { vf } => Ok(!crate::pci_device::PciDevice::new(paths, *vf)
            .driver()?
            .as_deref()
            .is_some_and(driver::is_passthrough_driver)),
    }
}

/// Undoes what a failed GPU sequence made: its vGPUs, newest first, then its VF change.
fn rollback(
    paths: &HostPaths,
    options: &ProvisionOptions,
    audit: &AuditLog,
    report: &mut GpuReport,
) {
    while let Some(id) = report.created.pop() {
        let result = lifecycle::destroy(paths, id).map(|_| ());
        record(audit, options, "rollback-destroy", &id.to_string(), &result);
        if let Err(err) = result {
            report.created.push(id);
            tracing::error!(%id, "cannot undo: {}", error_chain(&err));
            return;
        }
    }
    if let Some(change) = report.sriov.take() {
        if change.before != change.enabled {
            let result =
                sriov::set_vf_count(paths, change.pf, change.before, options.sriov).map(|_| ());
            record(
                audit,
                options,
                "rollback-sriov",
                &change.pf.to_string(),
                &result,
            );
            if let Err(err) = result {
                tracing::error!(pf = %change.pf, "cannot undo the VF change: {}", error_chain(&err));
                report.sriov = Some(change);
            }
        }
    }
}

/// A copy of an error for the audit record (the original goes to the caller).
fn clone_error(err: &Error) -> Error {
    Error::Invalid {
        message: error_chain(err),
    }
}
