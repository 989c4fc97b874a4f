//! The tenants report: each tenant's policy and what it holds, and every rule of the tenant
//! policy broken now. The caller reads the policy and the holdings (`vgpu-core`'s
//! `read_policy` and `Manager::holdings`); the rules are `vgpu-plan`'s
//! ([`check`](vgpu_plan::tenants::check), [`audit`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vgpu_plan::HostState;
use vgpu_plan::tenants::{Holding, Policy, TenantPolicy, Violation, audit, named, serving};

use crate::model::pci::PciAddress;

/// One tenant in [`TenantsReport`]: its policy and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantUse {
    /// The tenant (`""`: domains without one).
    pub tenant: String,
    /// Its policy (the default for a tenant the file does not name).
    pub policy: TenantPolicy,
    /// How many vGPUs it holds.
    pub vgpus: u64,
    /// Their frame buffer, in bytes.
    pub framebuffer_bytes: u64,
    /// The physical GPUs they are on.
    pub gpus: Vec<PciAddress>,
    /// Its domains holding them.
    pub domains: Vec<String>,
    /// The GPUs that give its QoS class (`policy.qos`) now, as the policy check judges a new
    /// vGPU there ([`serving`]).
    pub qos_gpus: Vec<PciAddress>,
}

/// Every tenant the policy names or a record holds for, and every rule broken on the host
/// now (a policy made stricter after the fact, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantsReport {
    /// The policy file, when there is one.
    pub policy: Option<PathBuf>,
    /// The tenants, by name.
    pub tenants: Vec<TenantUse>,
    /// The rules broken now, as [`check`](vgpu_plan::tenants::check) says with everything held as new.
    pub violations: Vec<Violation>,
}

/// The tenants report of `holdings` under `policy` (read from `path`), on the host `host`
/// describes (its GPUs and the schedulers NVML read).
pub fn report(
    policy: &Policy,
    path: Option<&Path>,
    holdings: &[Holding],
    host: &HostState,
) -> TenantsReport {
    let mut names: BTreeSet<Option<&str>> = policy.named_tenants().collect();
    names.extend(holdings.iter().map(|h| h.holder.tenant_name()));
    let tenants = names
        .into_iter()
        .map(|name| {
            let mine: Vec<&Holding> = holdings
                .iter()
                .filter(|h| h.holder.tenant_name() == name)
                .collect();
            let mut gpus: Vec<_> = mine.iter().map(|h| h.gpu).collect();
            gpus.sort();
            gpus.dedup();
            let mut domains: Vec<String> = mine.iter().map(|h| h.holder.domain.clone()).collect();
            domains.sort();
            domains.dedup();
            let policy = policy.of(name);
            TenantUse {
                tenant: named(name),
                qos_gpus: serving(host, policy.qos),
                policy,
                vgpus: mine.len() as u64,
                framebuffer_bytes: mine.iter().map(|h| h.framebuffer_mib << 20).sum(),
                gpus,
                domains,
            }
        })
        .collect();
    TenantsReport {
        policy: path.map(Path::to_path_buf),
        tenants,
        violations: audit(policy, holdings),
    }
}
