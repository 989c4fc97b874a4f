//! The one policy check: the hook's `prepare`, `attach`, `place --tenant`, `provision
//! --tenant`, `plan`, `apply`, `migrate begin` and `vgpuctl tenants` all ask [`check`], so
//! they cannot disagree. It holds the QoS classes too: each new device's GPU must give its
//! tenant's class ([`Service::serves`](crate::model::policy::Service::serves)).

use std::collections::{BTreeMap, BTreeSet};

use super::{Isolation, NO_TENANT, Policy};
use crate::model::pci::PciAddress;
pub use crate::model::policy::{Holding, Violation};

/// A holding, and whether it is about to be handed out.
type Marked<'a> = (&'a Holding, bool);

/// A tenant's name; `None` for domains without one.
type Tenant<'a> = Option<&'a str>;

/// `tenant` as violations and reports name it: `""` for domains without one, as the policy
/// file's `[tenant.""]` does.
pub fn named(tenant: Option<&str>) -> String {
    tenant.unwrap_or(NO_TENANT).to_owned()
}

/// The rules `held` and `new` together break, each involving at least one of `new`. With
/// nothing held and everything as `new`, every violation present: what `vgpuctl tenants`
/// lists. With what the host holds as `held` and a domain's devices as `new`, whether the
/// domain may have them: what the hook, `attach` and `place` ask.
///
/// Violations come in a stable order: per GPU (by address) the GPU rules (the QoS class
/// first), then per tenant the quotas.
pub fn check(policy: &Policy, held: &[Holding], new: &[Holding]) -> Vec<Violation> {
    // Per GPU, per tenant: its holdings there, each with whether it is new.
    let mut gpus: BTreeMap<PciAddress, BTreeMap<Tenant<'_>, Vec<Marked<'_>>>> = BTreeMap::new();
    let all = held
        .iter()
        .map(|h| (h, false))
        .chain(new.iter().map(|h| (h, true)));
    for (holding, is_new) in all.clone() {
        gpus.entry(holding.gpu)
            .or_default()
            .entry(holding.holder.tenant_name())
            .or_default()
            .push((holding, is_new));
    }
    let any_new = |items: &[Marked<'_>]| items.iter().any(|(_, is_new)| *is_new);

    let mut violations = Vec::new();
    for (gpu, tenants) in &gpus {
        for (tenant, mine) in tenants {
            let policy_of = policy.of(*tenant);
            let unserved = mine
                .iter()
                .find(|(h, is_new)| *is_new && !h.service.serves(policy_of.qos));
            if let Some((holding, _)) = unserved {
                violations.push(Violation::Qos {
                    tenant: named(*tenant),
                    class: policy_of.qos,
                    gpu: *gpu,
                    scheduler: holding.service.scheduler,
                    equal_size: holding.service.equal_size,
                });
            }
            if policy_of.spread && mine.len() > 1 && any_new(mine) {
                violations.push(Violation::Spread {
                    tenant: named(*tenant),
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
                let pair = || (named(*tenant), named(*other));
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
                let names_other = policy_of.apart_from.contains(named(*other).as_str());
                let named_by_other = policy.of(*other).apart_from.contains(&named(*tenant));
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

    let mut totals: BTreeMap<Tenant<'_>, (u64, u64, bool)> = BTreeMap::new();
    for (holding, is_new) in all {
        let total = totals.entry(holding.holder.tenant_name()).or_default();
        total.0 += 1;
        total.1 += holding.framebuffer_mib;
        total.2 |= is_new;
    }
    let tenants_with_new: BTreeSet<Tenant<'_>> = totals
        .iter()
        .filter(|(_, total)| total.2)
        .map(|(tenant, _)| *tenant)
        .collect();
    for tenant in tenants_with_new {
        let (count, framebuffer_mib, _) = totals[&tenant];
        let policy_of = policy.of(tenant);
        if let Some(limit) = policy_of.max_vgpus.map(u64::from).filter(|l| count > *l) {
            violations.push(Violation::MaxVgpus {
                tenant: named(tenant),
                held: count,
                limit,
                asked: true,
            });
        }
        let framebuffer_limit = policy_of.max_framebuffer_mib;
        if let Some(limit_mib) = framebuffer_limit.filter(|l| framebuffer_mib > *l) {
            violations.push(Violation::MaxFramebuffer {
                tenant: named(tenant),
                held_mib: framebuffer_mib,
                limit_mib,
                asked: true,
            });
        }
    }
    violations
}

/// What breaks `policy` in `holdings` as they are now, nothing being handed out: every rule
/// [`check`] applies, each said of what is held (`tenants`).
pub fn audit(policy: &Policy, holdings: &[Holding]) -> Vec<Violation> {
    check(policy, &[], holdings)
        .into_iter()
        .map(Violation::as_held)
        .collect()
}
