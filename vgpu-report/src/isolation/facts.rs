//! The facts about one GPU that its isolation rests on, read once from the check report,
//! discovery's inventory and NVML's facts.

use crate::model::checks::{DeviceIsolation, Report as CheckReport, Status as CheckStatus};
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID};

use super::{Fact, NvmlFacts, NvmlHostFacts, Source};

/// A fact and the value the rules read from it (`None` when unknown).
#[derive(Debug, Clone)]
pub(super) struct Known<T> {
    pub(super) fact: Fact,
    pub(super) value: Option<T>,
}

/// How a set of GPU functions sits in its IOMMU groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Groups {
    /// Every function is alone in its group but for bridges and passthrough drivers.
    Isolated,
    /// A function shares its group with a device a host driver holds, or has no group.
    Shared,
}

/// Everything the rules read about one GPU.
#[derive(Debug, Clone)]
pub(super) struct GpuFacts {
    pub(super) backend: Backend,
    pub(super) iommu_enabled: Known<CheckStatus>,
    pub(super) interrupt_remapping: Known<CheckStatus>,
    pub(super) vfio: Known<CheckStatus>,
    pub(super) pf_group: Known<Groups>,
    pub(super) vf_groups: Known<Groups>,
    pub(super) backend_fact: Fact,
    pub(super) host_driver: Known<String>,
    pub(super) vgpus_in_use: Known<usize>,
    pub(super) vfs_enabled: Known<usize>,
    pub(super) time_sliced_framebuffer: Known<()>,
    pub(super) mig_framebuffer: Known<()>,
    pub(super) vf_memory_quota: Known<u64>,
    pub(super) mig_mode: Known<bool>,
    pub(super) scheduler: Known<String>,
    pub(super) ecc: Known<bool>,
    pub(super) confidential_computing: Known<bool>,
}

fn fact(name: &'static str, value: Option<String>, source: Source, detail: Option<String>) -> Fact {
    Fact {
        name,
        value,
        source,
        detail,
    }
}

fn check(report: &CheckReport, id: &'static str) -> Known<CheckStatus> {
    match report.checks.iter().find(|c| c.id == id) {
        Some(c) => Known {
            fact: fact(
                id,
                Some(c.status.to_string()),
                Source::Check,
                Some(c.summary.clone()),
            ),
            value: Some(c.status),
        },
        None => Known {
            fact: fact(
                id,
                None,
                Source::Check,
                Some("the check was not run".to_owned()),
            ),
            value: None,
        },
    }
}

fn member(m: &crate::model::checks::GroupMember) -> String {
    match &m.driver {
        Some(driver) => format!("{} ({driver})", m.address),
        None => m.address.to_string(),
    }
}

/// The group state of `devices` as one fact named `name`.
fn groups(name: &'static str, devices: &[&DeviceIsolation]) -> Known<Groups> {
    if devices.is_empty() {
        return Known {
            fact: fact(
                name,
                None,
                Source::Check,
                Some("no function to check".to_owned()),
            ),
            value: None,
        };
    }
    let problems: Vec<String> = devices.iter().flat_map(|d| d.problems.clone()).collect();
    let ungrouped: Vec<String> = devices
        .iter()
        .filter(|d| d.iommu_group.is_none() && d.problems.is_empty())
        .map(|d| d.address.to_string())
        .collect();
    let shared: Vec<String> = devices
        .iter()
        .filter(|d| !d.blockers.is_empty())
        .map(|d| {
            let with: Vec<String> = d.blockers.iter().map(member).collect();
            let group = d.iommu_group.map(|g| g.to_string()).unwrap_or_default();
            format!(
                "{} shares group {group} with {}",
                d.address,
                with.join(", ")
            )
        })
        .collect();
    let numbers: Vec<u32> = devices.iter().filter_map(|d| d.iommu_group).collect();
    let companions: Vec<String> = devices
        .iter()
        .flat_map(|d| d.companions.iter().map(member))
        .collect();
    let with_companions = |text: String| {
        if companions.is_empty() {
            text
        } else {
            format!("{text}; assign {} with it", companions.join(", "))
        }
    };
    let (value, state, detail) = if !shared.is_empty() {
        ("shared".to_owned(), Groups::Shared, shared.join("; "))
    } else if !ungrouped.is_empty() {
        (
            "none".to_owned(),
            Groups::Shared,
            format!("no IOMMU group: {}", ungrouped.join(", ")),
        )
    } else if !problems.is_empty() {
        return Known {
            fact: fact(name, None, Source::Check, Some(problems.join("; "))),
            value: None,
        };
    } else if let [only] = devices {
        let group = only.iommu_group.map(|g| g.to_string()).unwrap_or_default();
        (
            "isolated".to_owned(),
            Groups::Isolated,
            with_companions(format!("group {group}")),
        )
    } else {
        (
            "isolated".to_owned(),
            Groups::Isolated,
            with_companions(format!(
                "{} VFs, groups {}",
                devices.len(),
                ranges(&numbers)
            )),
        )
    };
    Known {
        fact: fact(name, Some(value), Source::Check, Some(detail)),
        value: Some(state),
    }
}

/// Group numbers as runs: `142-173`, `3, 5-6`.
pub(super) fn ranges(numbers: &[u32]) -> String {
    let mut sorted = numbers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for n in sorted {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(n) => *end = n,
            _ => runs.push((n, n)),
        }
    }
    runs.iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the frame buffer of each of `gpu`'s types (MIG-backed ones or time-sliced ones) is
/// known: it is fixed per type.
fn framebuffer(gpu: &Gpu, mig: bool) -> Known<()> {
    let types: Vec<_> = gpu
        .types
        .iter()
        .filter(|t| t.mig.is_some() == mig)
        .collect();
    let sizes: Vec<u64> = types.iter().filter_map(|t| t.framebuffer_mib).collect();
    let unknown: Vec<&str> = types
        .iter()
        .filter(|t| t.framebuffer_mib.is_none())
        .map(|t| t.id.as_str())
        .collect();
    match (sizes.iter().min(), sizes.iter().max()) {
        (Some(min), Some(max)) if unknown.is_empty() => Known {
            fact: fact(
                "type-framebuffer",
                Some(if min == max {
                    format!("{min} MiB")
                } else {
                    format!("{min}-{max} MiB")
                }),
                Source::Discovery,
                Some(format!("fixed per type, {} type(s)", types.len())),
            ),
            value: Some(()),
        },
        _ => Known {
            fact: fact(
                "type-framebuffer",
                None,
                Source::Discovery,
                Some(if types.is_empty() {
                    "no types".to_owned()
                } else {
                    format!("types without a known frame buffer: {}", unknown.join(", "))
                }),
            ),
            value: None,
        },
    }
}

fn count(name: &'static str, n: usize) -> Known<usize> {
    Known {
        fact: fact(name, Some(n.to_string()), Source::Discovery, None),
        value: Some(n),
    }
}

fn nvml<T: Clone>(
    name: &'static str,
    value: &Result<T, String>,
    shown: impl Fn(&T) -> String,
) -> Known<T> {
    match value {
        Ok(v) => Known {
            fact: fact(name, Some(shown(v)), Source::Nvml, None),
            value: Some(v.clone()),
        },
        Err(reason) => Known {
            fact: fact(name, None, Source::Nvml, Some(reason.clone())),
            value: None,
        },
    }
}

fn on_off(on: &bool) -> String {
    if *on { "on" } else { "off" }.to_owned()
}

impl GpuFacts {
    pub(super) fn new(gpu: &Gpu, report: &CheckReport, host: &NvmlHostFacts) -> GpuFacts {
        let device = |address| report.devices.iter().find(|d| d.address == address);
        let pf: Vec<&DeviceIsolation> = device(gpu.address).into_iter().collect();
        let vfs: Vec<&DeviceIsolation> = gpu.vfs.iter().filter_map(|v| device(v.address)).collect();
        let in_use = gpu.vgpus.len();
        let quotas: Vec<Option<u64>> = gpu.vfs.iter().map(|v| v.memory_mib).collect();
        let vf_memory_quota = match quotas.iter().copied().collect::<Option<Vec<u64>>>() {
            Some(known) if !known.is_empty() => {
                let min = known.iter().copied().min().unwrap_or_default();
                Known {
                    fact: fact(
                        "vf-memory-quota",
                        Some(format!("{min} MiB")),
                        Source::Discovery,
                        Some(format!("the smallest of {} VF quota(s)", known.len())),
                    ),
                    value: Some(min),
                }
            }
            _ => Known {
                fact: fact(
                    "vf-memory-quota",
                    None,
                    Source::Discovery,
                    Some("the PF's driver states no local-memory quota per VF".to_owned()),
                ),
                value: None,
            },
        };
        let nvml_facts = if gpu.vendor_id == Some(NVIDIA_VENDOR_ID) {
            host.gpus
                .get(&gpu.address)
                .cloned()
                .unwrap_or_else(|| NvmlFacts::unknown(&host.missing))
        } else {
            NvmlFacts::unknown("not an NVIDIA GPU: NVML does not report it")
        };
        GpuFacts {
            backend: gpu.backend,
            iommu_enabled: check(report, "iommu-enabled"),
            interrupt_remapping: check(report, "interrupt-remapping"),
            vfio: check(report, "vfio"),
            pf_group: groups("iommu-group", &pf),
            vf_groups: groups("vf-iommu-groups", &vfs),
            backend_fact: fact(
                "backend",
                Some(gpu.backend.to_string()),
                Source::Discovery,
                None,
            ),
            host_driver: Known {
                fact: fact(
                    "host-driver",
                    gpu.driver.clone(),
                    Source::Discovery,
                    gpu.driver
                        .is_none()
                        .then(|| "no driver is bound to the GPU".to_owned()),
                ),
                value: gpu.driver.clone(),
            },
            vgpus_in_use: count("vgpus-in-use", in_use),
            vfs_enabled: count("vfs-enabled", gpu.vfs.len()),
            time_sliced_framebuffer: framebuffer(gpu, false),
            mig_framebuffer: framebuffer(gpu, true),
            vf_memory_quota,
            mig_mode: nvml("mig-mode", &nvml_facts.mig_enabled, on_off),
            scheduler: nvml("vgpu-scheduler", &nvml_facts.scheduler, String::clone),
            ecc: nvml("ecc", &nvml_facts.ecc_enabled, on_off),
            confidential_computing: nvml(
                "confidential-computing",
                &nvml_facts.confidential_computing,
                on_off,
            ),
        }
    }
}
