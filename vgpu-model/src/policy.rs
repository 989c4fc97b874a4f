//! What the tenant policy counts and what it refuses, as data: a device a tenant holds, and a
//! rule broken. `vgpu-plan`'s `tenants` module reads the policy and checks hand-outs.

use std::fmt;

use serde::Serialize;

use crate::pci::PciAddress;

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
        /// Whether `held` counts vGPUs about to be handed out (`false`: it holds them now).
        #[serde(skip)]
        asked: bool,
    },
    /// `tenant` holds `held_mib` MiB of frame buffer, over its `max_framebuffer`.
    MaxFramebuffer {
        /// The tenant.
        tenant: String,
        /// How much it holds, with what is about to be handed out, in MiB.
        held_mib: u64,
        /// Its quota, in MiB.
        limit_mib: u64,
        /// Whether `held_mib` counts vGPUs about to be handed out (`false`: it holds them now).
        #[serde(skip)]
        asked: bool,
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

/// "would hold" for a count with vGPUs about to be handed out, "holds" for one held now.
fn holds(asked: bool) -> &'static str {
    if asked { "would hold" } else { "holds" }
}

impl Violation {
    /// The same violation of what is held now, nothing being asked: `tenants` reports these.
    #[must_use]
    pub fn as_held(self) -> Self {
        match self {
            Violation::MaxVgpus {
                tenant,
                held,
                limit,
                ..
            } => Violation::MaxVgpus {
                tenant,
                held,
                limit,
                asked: false,
            },
            Violation::MaxFramebuffer {
                tenant,
                held_mib,
                limit_mib,
                ..
            } => Violation::MaxFramebuffer {
                tenant,
                held_mib,
                limit_mib,
                asked: false,
            },
            other => other,
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
                asked,
            } => write!(
                f,
                "max_vgpus: tenant {tenant:?} may hold {limit} vGPUs, and {} {held}",
                holds(*asked)
            ),
            Violation::MaxFramebuffer {
                tenant,
                held_mib,
                limit_mib,
                asked,
            } => write!(
                f,
                "max_framebuffer: tenant {tenant:?} may hold {limit_mib} MiB of frame buffer, \
                 and {} {held_mib} MiB",
                holds(*asked)
            ),
        }
    }
}
