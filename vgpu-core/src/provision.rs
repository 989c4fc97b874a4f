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
    let wanted = lifecycle::placement_type(&gpu, &target.type_name)?;
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
        let result = lifecycle::realize(paths, placement, None).map(|(id, _)| id);
        let audited = result.as_ref().map(|_| ()).map_err(clone_error);
        record(audit, options, "create", &target.gpu.to_string(), &audited);
        report.created.push(result?);
        Ok(())
    };
    for placement in lifecycle::candidates(&gpu, &wanted)? {
        if report.created.len() >= limit {
            break;
        }
        while report.created.len() < limit && lifecycle::fits(paths, &placement)? {
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
