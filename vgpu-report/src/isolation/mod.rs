//! What isolation each kind of device this host can give a VM provides, dimension by
//! dimension, from facts discovered on this host, and the risk that remains.
//!
//! For each GPU, the kinds it can give now ([`DeviceKind`]: the whole GPU, a MIG-backed vGPU,
//! a time-sliced vGPU, a plain VF) are assessed on eight dimensions ([`Dimension`]). Each
//! [`Assessment`] names the [`Fact`]s it rests on, with their values and where they were read
//! (a host check of `vgpu_core::checks::check_host`, discovery, NVML), and says the residual
//! risk in words. No dimension is [`Status::Provided`] without a fact behind it; a fact that
//! could not be read makes its dimension [`Status::Unknown`], never provided.
//!
//! The IOMMU facts are those of `vgpu_core::checks::check_host` and
//! `vgpu_core::checks::isolation` (passed in as their [`Report`](crate::model::checks::Report));
//! NVML's facts come in as [`NvmlFacts`]. [`isolation_report`] is pure.

mod facts;
mod nvidia;
mod rules;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::model::checks::Report as CheckReport;
use crate::model::driver_params::Registry;
pub use crate::model::kind::DeviceKind;
use crate::model::nvml::{Fact as NvmlFact, NvmlGpu, NvmlHost};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Inventory};
pub use nvidia::{NvidiaReport, Scrub};

/// A dimension of isolation between tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dimension {
    /// A guest reaches only its own memory: DMA confined, device memory partitioned.
    Memory,
    /// A guest's compute is its own, not taken from a shared pool.
    Compute,
    /// Other tenants' load does not slow a guest down.
    Performance,
    /// A fault, hang or reset caused by one tenant stays with that tenant.
    Fault,
    /// A tenant cannot configure what other tenants use.
    Administrative,
    /// The host's administrator cannot read a guest's data in use.
    Cryptographic,
    /// What a tenant uses can be attributed to it (showback).
    Economic,
    /// Maintenance of one tenant's device leaves the others running.
    Operational,
}

impl Dimension {
    /// Every dimension, in report order.
    pub const ALL: [Dimension; 8] = [
        Dimension::Memory,
        Dimension::Compute,
        Dimension::Performance,
        Dimension::Fault,
        Dimension::Administrative,
        Dimension::Cryptographic,
        Dimension::Economic,
        Dimension::Operational,
    ];
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::Memory => "memory",
            Dimension::Compute => "compute",
            Dimension::Performance => "performance",
            Dimension::Fault => "fault",
            Dimension::Administrative => "administrative",
            Dimension::Cryptographic => "cryptographic",
            Dimension::Economic => "economic",
            Dimension::Operational => "operational",
        })
    }
}

/// How far a dimension is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Provided, on the facts named.
    Provided,
    /// Provided in part; the residual risk says what is not.
    Partial,
    /// Not provided.
    NotProvided,
    /// A fact it rests on could not be read.
    Unknown,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Provided => "provided",
            Status::Partial => "partial",
            Status::NotProvided => "not-provided",
            Status::Unknown => "unknown",
        })
    }
}

/// Where a fact was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A host check or an IOMMU-group check (`vgpuctl check`).
    Check,
    /// Discovery: sysfs, with NVIDIA's type-name grammar and the built-in catalog for what
    /// sysfs does not state.
    Discovery,
    /// NVIDIA's management library.
    Nvml,
    /// The NVIDIA driver's parameters (`/proc/driver/nvidia/params`).
    Procfs,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Check => "check",
            Source::Discovery => "discovery",
            Source::Nvml => "nvml",
            Source::Procfs => "procfs",
        })
    }
}

/// A fact an assessment rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact {
    /// Its stable name: `iommu-enabled`, `interrupt-remapping`, `vfio` (host checks),
    /// `iommu-group`, `vf-iommu-groups` (group isolation), `backend`, `host-driver`,
    /// `vgpus-in-use`, `vfs-enabled`, `type-framebuffer`, `vf-memory-quota` (discovery),
    /// `mig-mode`, `vgpu-scheduler`, `vgpu-timeslice`, `ecc`, `confidential-computing` (NVML),
    /// `size-mode` (discovery), `scrub-on-free` (procfs).
    pub name: &'static str,
    /// Its value; `None` when it could not be read.
    pub value: Option<String>,
    /// Where it was read.
    pub source: Source,
    /// What was found, or why it is not known.
    pub detail: Option<String>,
}

/// One dimension of one kind of device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assessment {
    /// The dimension.
    pub dimension: Dimension,
    /// How far this host provides it.
    pub status: Status,
    /// The facts the status rests on.
    pub facts: Vec<Fact>,
    /// What remains, in words.
    pub residual_risk: String,
}

/// One kind of device a GPU can give, on every dimension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindReport {
    /// The kind.
    pub kind: DeviceKind,
    /// The eight dimensions, in [`Dimension::ALL`] order.
    pub dimensions: Vec<Assessment>,
}

/// The kinds of device one GPU can give now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its model, from the PCI ID database.
    pub model: Option<String>,
    /// How it offers vGPUs.
    pub backend: Backend,
    /// The kinds it can give now, in [`DeviceKind`] order; empty when it can give none (its
    /// VFs are off, or its vGPUs and VFs hold it).
    pub kinds: Vec<KindReport>,
    /// An NVIDIA GPU's scheduler, size mode and frame-buffer scrubbing; absent for others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia: Option<NvidiaReport>,
}

/// The isolation report of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IsolationReport {
    /// Every GPU, by address.
    pub gpus: Vec<GpuReport>,
}

/// What NVML reports about one GPU that isolation rests on; `Err` holds why a fact is not
/// known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlFacts {
    /// Whether MIG mode is on now.
    pub mig_enabled: Result<bool, String>,
    /// The vGPU scheduler's policy (`best-effort`, `equal-share`, `fixed-share`).
    pub scheduler: Result<String, String>,
    /// The scheduler's time slice (`2 ms`, or `default`).
    pub timeslice: Result<String, String>,
    /// Whether ECC is on now.
    pub ecc_enabled: Result<bool, String>,
    /// Whether confidential computing is on.
    pub confidential_computing: Result<bool, String>,
}

impl NvmlFacts {
    /// Every fact unknown, for `reason`.
    pub fn unknown(reason: &str) -> Self {
        NvmlFacts {
            mig_enabled: Err(reason.to_owned()),
            scheduler: Err(reason.to_owned()),
            timeslice: Err(reason.to_owned()),
            ecc_enabled: Err(reason.to_owned()),
            confidential_computing: Err(reason.to_owned()),
        }
    }
}

impl NvmlFacts {
    /// The facts of one GPU as NVML reports them.
    pub fn of(gpu: &NvmlGpu) -> Self {
        fn known<T, U>(fact: &NvmlFact<T>, f: impl FnOnce(&T) -> U) -> Result<U, String> {
            fact.as_result().map(f).map_err(|why| why.reason.clone())
        }
        NvmlFacts {
            mig_enabled: known(&gpu.mig_mode, |m| m.current),
            scheduler: known(&gpu.scheduler, |s| match s.policy {
                Some(policy) => policy.name().to_owned(),
                None => format!("policy {}", s.raw_policy),
            }),
            timeslice: match &gpu.scheduler {
                NvmlFact::Value(s) => known(&s.timeslice_ns, |ns| match ns {
                    0 => "default".to_owned(),
                    ns => format!("{} ms", crate::model::nvml::ns_as_ms(u64::from(*ns))),
                }),
                NvmlFact::Unavailable(why) => Err(why.reason.clone()),
            },
            ecc_enabled: known(&gpu.ecc_mode, |e| e.current),
            confidential_computing: known(&gpu.confidential_computing, |on| *on),
        }
    }
}

impl NvmlHostFacts {
    /// The facts of every GPU NVML reports on `host`.
    pub fn of(host: &NvmlHost) -> Self {
        let missing = if host.status.loaded {
            "NVML does not list this GPU".to_owned()
        } else {
            format!(
                "NVML is not loaded: {}",
                host.status.reason.as_deref().unwrap_or("not initialised")
            )
        };
        NvmlHostFacts {
            gpus: host
                .gpus
                .iter()
                .map(|g| (g.address, NvmlFacts::of(g)))
                .collect(),
            missing,
            driver_params: None,
        }
    }
}

/// NVML's facts about the host's GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvmlHostFacts {
    /// The facts of each GPU NVML manages.
    pub gpus: BTreeMap<PciAddress, NvmlFacts>,
    /// Why an NVIDIA GPU that is not in `gpus` has no facts (NVML is not loaded, and why).
    pub missing: String,
    /// The NVIDIA driver's registry settings (`/proc/driver/nvidia/params`, not NVML);
    /// `None` when they were not read.
    pub driver_params: Option<Registry>,
}

/// The isolation each GPU of `inventory` provides for each kind of device it can give now,
/// from the host and IOMMU-group checks of `checks` and NVML's `nvml` facts.
pub fn isolation_report(
    inventory: &Inventory,
    checks: &CheckReport,
    nvml: &NvmlHostFacts,
) -> IsolationReport {
    let mut gpus: Vec<GpuReport> = inventory
        .gpus
        .iter()
        .map(|gpu| {
            let facts = facts::GpuFacts::new(gpu, checks, nvml);
            GpuReport {
                gpu: gpu.address,
                model: gpu.model.clone(),
                backend: gpu.backend,
                kinds: rules::kinds(gpu)
                    .into_iter()
                    .map(|kind| KindReport {
                        kind,
                        dimensions: Dimension::ALL
                            .iter()
                            .map(|d| rules::assess(kind, *d, &facts))
                            .collect(),
                    })
                    .collect(),
                nvidia: nvidia::report(gpu, nvml),
            }
        })
        .collect();
    gpus.sort_by_key(|g| g.gpu);
    IsolationReport { gpus }
}
