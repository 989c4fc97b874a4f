//! What the tenant policy counts and what it refuses, as data: a device a tenant holds, and a
//! rule broken. `vgpu-plan`'s `tenants` module reads the policy and checks hand-outs.

use std::fmt;

use serde::Serialize;

use crate::holder::Holder;
use crate::nvml::SchedulerPolicy;
use crate::pci::PciAddress;

/// One vGPU (or VF, or whole GPU) a tenant holds, or is about to be handed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// The domain that holds it, and its tenant.
    #[serde(flatten)]
    pub holder: Holder,
    /// The physical GPU it is on (every VF of a GPU counts as that GPU).
    pub gpu: PciAddress,
    /// Its frame buffer, in MiB.
    pub framebuffer_mib: u64,
    /// Whether its memory and compute are partitioned in hardware (a MIG-backed vGPU, a plain
    /// VF, a whole GPU) rather than shared in turns (a time-sliced vGPU).
    pub hardware: bool,
    /// What its GPU gives it, as the QoS classes ask: known only for a device about to be
    /// handed out.
    #[serde(skip)]
    pub service: Service,
}

/// A tenant's QoS class: what the physical GPU must be when one of its vGPUs is handed out.
/// NVIDIA's scheduler is per GPU and has no per-VM weight, so a class can only choose GPUs.
/// The classes are ordered: a GPU that serves one serves every lower one.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Qos {
    /// Any GPU, any scheduler.
    #[default]
    BestEffort,
    /// A GPU whose scheduler is equal share or fixed share.
    Bounded,
    /// A GPU whose scheduler is fixed share, in equal-size mode: each vGPU gets 1/max of its
    /// type, whoever else runs.
    Guaranteed,
    /// The device is the only one on its GPU: a whole GPU, a 1:1 type, or the one VF of a GPU.
    Dedicated,
}

impl Qos {
    /// Every class, lowest first.
    pub const ALL: [Qos; 4] = [
        Qos::BestEffort,
        Qos::Bounded,
        Qos::Guaranteed,
        Qos::Dedicated,
    ];

    /// The class's name in `tenants.toml` and in JSON (`best-effort`).
    pub fn name(self) -> &'static str {
        match self {
            Qos::BestEffort => "best-effort",
            Qos::Bounded => "bounded",
            Qos::Guaranteed => "guaranteed",
            Qos::Dedicated => "dedicated",
        }
    }

    /// What the class asks of a GPU, in words.
    pub fn needs(self) -> &'static str {
        match self {
            Qos::BestEffort => "any GPU",
            Qos::Bounded => "an equal-share or fixed-share scheduler",
            Qos::Guaranteed => "a fixed-share scheduler in equal-size mode",
            Qos::Dedicated => "the only device on its GPU",
        }
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Qos {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        Qos::ALL.into_iter().find(|q| q.name() == text).ok_or(())
    }
}

/// What a physical GPU gives a device handed out on it: the facts the QoS classes ask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Service {
    /// The GPU's vGPU scheduler policy; `None` when it cannot be read (no NVML, a policy NVML
    /// numbers that this library does not know, not an NVIDIA GPU).
    pub scheduler: Option<SchedulerPolicy>,
    /// Whether the GPU is in equal-size mode (every vGPU of one size).
    pub equal_size: bool,
    /// Whether the device is the only one its GPU can hold.
    pub sole: bool,
}

impl Service {
    /// The highest class the GPU gives the device. An unknown scheduler gives best effort:
    /// a class above it is refused, never assumed.
    pub fn class(self) -> Qos {
        match (self.sole, self.scheduler) {
            (true, _) => Qos::Dedicated,
            (false, Some(SchedulerPolicy::FixedShare)) if self.equal_size => Qos::Guaranteed,
            (false, Some(SchedulerPolicy::EqualShare | SchedulerPolicy::FixedShare)) => {
                Qos::Bounded
            }
            (false, _) => Qos::BestEffort,
        }
    }

    /// Whether the GPU gives the device `class`.
    pub fn serves(self, class: Qos) -> bool {
        self.class() >= class
    }
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
    /// `tenant`'s QoS class is `class`, and `gpu` does not give it to a vGPU handed out there.
    Qos {
        /// The tenant.
        tenant: String,
        /// Its class.
        class: Qos,
        /// The physical GPU.
        gpu: PciAddress,
        /// The GPU's scheduler policy; `None` when it cannot be read.
        scheduler: Option<SchedulerPolicy>,
        /// Whether the GPU is in equal-size mode.
        equal_size: bool,
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
            Violation::Qos { .. } => "qos",
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
            | Violation::Qos { tenant, .. }
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
            Violation::Qos {
                tenant,
                class,
                gpu,
                scheduler,
                equal_size,
            } => {
                write!(
                    f,
                    "qos: tenant {tenant:?} is {class}, which needs {}, and {gpu}",
                    class.needs()
                )?;
                let policy = scheduler.map_or("unknown", SchedulerPolicy::name);
                match (scheduler, class) {
                    (_, Qos::Dedicated) => {
                        write!(f, " (scheduler {policy}) may hold other devices beside it")
                    }
                    (None, _) => f.write_str("'s vGPU scheduler cannot be read"),
                    (Some(_), Qos::Guaranteed) if !equal_size => {
                        write!(f, " schedules {policy} in mixed-size mode")
                    }
                    (Some(_), _) => write!(f, " schedules {policy}"),
                }
            }
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
