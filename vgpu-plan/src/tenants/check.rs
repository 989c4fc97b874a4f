//! The one policy check: the hook's `prepare`, `attach`, `place --tenant` and `vgpuctl
//! tenants` all ask [`check`], so they cannot disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::{Isolation, Policy};
use crate::model::pci::PciAddress;

/// One vGPU (or VF, or whole GPU) a tenant holds, or is about to be handed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// The tenant: the domain's, `""` for a domain without one.
    pub tenant: String,
    /// The domain that holds it.
    pub domain: String,
    /// The physical GPU it is on (every VF of a GPU counts as that GPU).
    pub gpu: PciAddress,
    /// Its frame buffer, in MiB.
    pub framebuffer_mib: u64,
    /// Whether its memory and compute are partitioned in hardware (a MIG-backed vGPU, a plain
    /// VF, a whole GPU) rather than shared in turns (a time-sliced vGPU).
    pub hardware: bool,
}

/// A rule of the policy broken by what a host holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Violation {
    /// `tenant` is exclusive, and `other` holds a vGPU on `gpu` beside it.
    Exclusive {
        /// The exclusive tenant.
        tenant: String,
        /// The tenant beside it.
        other: String,
        /// The physical GPU.
        gpu: PciAddress,
    },
    /// `tenant` wants hardware isolation and holds a time-sliced vGPU on `gpu`, which `other`
    /// uses too.
    Hardware {
        /// The tenant with hardware isolation.
        tenant: String,
        /// The tenant beside it.
        other: String,
        /// The physical GPU.
        gpu: PciAddress,
    },
    /// `tenant` spreads its vGPUs, and holds `count` on `gpu`.
    Spread {
        /// The tenant.
        tenant: String,
        /// The physical GPU.
        gpu: PciAddress,
        /// How many of the tenant's vGPUs it holds.
        count: usize,
    },
    /// `tenant` is apart from `other` (its own `apart_from`, or `other`'s), and both hold
    /// vGPUs on `gpu`.
    ApartFrom {
        /// The tenant whose rule it is.
        tenant: String,
        /// The tenant it is kept apart from.
        other: String,
        /// The physical GPU.
        gpu: PciAddress,
    },
    /// `tenant` holds `held` vGPUs, over its `max_vgpus`.
    MaxVgpus {
        /// The tenant.
        tenant: String,
        /// How many it holds, with what is about to be handed out.
        held: u64,
        /// Its quota.
        limit: u64,
    },
    /// `tenant` holds `held_mib` MiB of frame buffer, over its `max_framebuffer`.
    MaxFramebuffer {
        /// The tenant.
        tenant: String,
        /// How much it holds, with what is about to be handed out, in MiB.
        held_mib: u64,
        /// Its quota, in MiB.
        limit_mib: u64,
    },
}

impl Violation {
    /// The rule's name, as the policy file spells it.
    pub fn rule(&self) -> &'static str {
        match self {
            Violation::Exclusive { .. } => "exclusive",
            Violation::Hardware { .. } => "hardware",
            Violation::Spread { .. } => "spread",
            Violation::ApartFrom { .. } => "apart_from",
            Violation::MaxVgpus { .. } => "max_vgpus",
            Violation::MaxFramebuffer { .. } => "max_framebuffer",
        }
    }

    /// The tenant whose rule it is.
    pub fn tenant(&self) -> &str {
        match self {
            Violation::Exclusive { tenant, .. }
            | Violation::Hardware { tenant, .. }
            | Violation::Spread { tenant, .. }
            | Violation::ApartFrom { tenant, .. }
            | Violation::MaxVgpus { tenant, .. }
            | Violation::MaxFramebuffer { tenant, .. } => tenant,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Exclusive { tenant, other, gpu } => write!(
                f,
                "exclusive: tenant {tenant:?} shares no GPU, and {gpu} holds vGPUs of {tenant:?} \
                 and {other:?}"
            ),
            Violation::Hardware { tenant, other, gpu } => write!(
                f,
                "hardware: tenant {tenant:?} takes only hardware partitions beside other \
                 tenants, and {gpu} holds a time-sliced vGPU of {tenant:?} beside {other:?}"
            ),
            Violation::Spread { tenant, gpu, count } => write!(
                f,
                "spread: tenant {tenant:?} has at most one vGPU per GPU, and {gpu} holds \
                 {count} of its vGPUs"
            ),
            Violation::ApartFrom { tenant, other, gpu } => write!(
                f,
                "apart_from: tenant {tenant:?} is kept apart from {other:?}, and {gpu} holds \
                 vGPUs of both"
            ),
            Violation::MaxVgpus {
                tenant,
                held,
                limit,
            } => write!(
                f,
                "max_vgpus: tenant {tenant:?} may hold {limit} vGPUs, and would hold {held}"
            ),
            Violation::MaxFramebuffer {
                tenant,
                held_mib,
                limit_mib,
            } => write!(
                f,
                "max_framebuffer: tenant {tenant:?} may hold {limit_mib} MiB of frame buffer, \
                 and would hold {held_mib} MiB"
            ),
        }
    }
}

/// A holding, and whether it is about to be handed out.
type Marked<'a> = (&'a Holding, bool);

/// The rules `held` and `new` together break, each involving at least one of `new`. With
/// nothing held and everything as `new`, every violation present: what `vgpuctl tenants`
/// lists. With what the host holds as `held` and a domain's devices as `new`, whether the
/// domain may have them: what the hook, `attach` and `place` ask.
///
/// Violations come in a stable order: per GPU (by address) the GPU rules, then per tenant the
/// quotas.
pub fn check(policy: &Policy, held: &[Holding], new: &[Holding]) -> Vec<Violation> {
    // Per GPU, per tenant: its holdings there, each with whether it is new.
    let mut gpus: BTreeMap<PciAddress, BTreeMap<&str, Vec<Marked<'_>>>> = BTreeMap::new();
    let all = held
        .iter()
        .map(|h| (h, false))
        .chain(new.iter().map(|h| (h, true)));
    for (holding, is_new) in all.clone() {
        gpus.entry(holding.gpu)
            .or_default()
            .entry(holding.tenant.as_str())
            .or_default()
            .push((holding, is_new));
    }
    let any_new = |items: &[Marked<'_>]| items.iter().any(|(_, is_new)| *is_new);

    let mut violations = Vec::new();
    for (gpu, tenants) in &gpus {
        for (tenant, mine) in tenants {
            let policy_of = policy.of(tenant);
            if policy_of.spread && mine.len() > 1 && any_new(mine) {
                violations.push(Violation::Spread {
                    tenant: (*tenant).to_owned(),
                    gpu: *gpu,
                    count: mine.len(),
                });
            }
            let time_sliced: Vec<Marked<'_>> =
                mine.iter().copied().filter(|(h, _)| !h.hardware).collect();
            for (other, theirs) in tenants {
                if other == tenant {
                    continue;
                }
                let involved = any_new(mine) || any_new(theirs);
                let pair = || ((*tenant).to_owned(), (*other).to_owned());
                if policy_of.isolation == Isolation::Exclusive && involved {
                    let (tenant, other) = pair();
                    violations.push(Violation::Exclusive {
                        tenant,
                        other,
                        gpu: *gpu,
                    });
                }
                if policy_of.isolation == Isolation::Hardware
                    && !time_sliced.is_empty()
                    && (any_new(&time_sliced) || any_new(theirs))
                {
                    let (tenant, other) = pair();
                    violations.push(Violation::Hardware {
                        tenant,
                        other,
                        gpu: *gpu,
                    });
                }
                // Both ways, said once: by the tenant whose rule it is, or by the first in
                // order when both name the other.
                let names_other = policy_of.apart_from.contains(*other);
                let named_by_other = policy.of(other).apart_from.contains(*tenant);
                if involved && names_other && (!named_by_other || tenant < other) {
                    let (tenant, other) = pair();
                    violations.push(Violation::ApartFrom {
                        tenant,
                        other,
                        gpu: *gpu,
                    });
                }
            }
        }
    }

    let mut totals: BTreeMap<&str, (u64, u64, bool)> = BTreeMap::new();
    for (holding, is_new) in all {
        let total = totals.entry(holding.tenant.as_str()).or_default();
        total.0 += 1;
        total.1 += holding.framebuffer_mib;
        total.2 |= is_new;
    }
    let tenants_with_new: BTreeSet<&str> = totals
        .iter()
        .filter(|(_, total)| total.2)
        .map(|(tenant, _)| *tenant)
        .collect();
    for tenant in tenants_with_new {
        let (count, framebuffer_mib, _) = totals[tenant];
        let policy_of = policy.of(tenant);
        if let Some(limit) = policy_of.max_vgpus.map(u64::from).filter(|l| count > *l) {
            violations.push(Violation::MaxVgpus {
                tenant: tenant.to_owned(),
                held: count,
                limit,
            });
        }
        let framebuffer_limit = policy_of.max_framebuffer_mib;
        if let Some(limit_mib) = framebuffer_limit.filter(|l| framebuffer_mib > *l) {
            violations.push(Violation::MaxFramebuffer {
                tenant: tenant.to_owned(),
                held_mib: framebuffer_mib,
                limit_mib,
            });
        }
    }
    violations
}
