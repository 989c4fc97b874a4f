//! The tenant policy on the host: `etc/vgpu/tenants.toml` read, and what each tenant holds,
//! from the hook's records. The rules themselves are one pure function,
//! [`check`](crate::plan::tenants::check): the hook, `attach`, `place` and `tenants` all
//! ask it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::{Backend, Gpu, Inventory, VgpuHandle};
use crate::plan::capacity::HostState;
use crate::plan::tenants::{Holding, Policy, TenantPolicy, Violation, check};
use crate::state::hook::{Record, other_records};
use crate::state::store::{Store, add_recorded_offers};

use super::Manager;

/// The largest policy file read.
const FILE_LIMIT: usize = 256 * 1024;

/// `etc/vgpu/tenants.toml`.
pub fn policy_path(paths: &HostPaths) -> PathBuf {
    paths.etc().join("vgpu/tenants.toml")
}

/// The host's tenant policy; `None` when there is no file (then nothing is enforced). A file
/// that cannot be read or parsed is an error naming it, so that a caller fails closed.
pub fn read_policy(paths: &HostPaths) -> Result<Option<Policy>> {
    let path = policy_path(paths);
    match read_bounded(&path, FILE_LIMIT)? {
        Some(text) => Ok(Some(Policy::parse(&path, &text)?)),
        None => Ok(None),
    }
}

/// The host's inventory, each GPU's types completed as capacity completes them
/// ([`HostState::settle`](crate::plan::capacity::HostState::settle)): a type in use that the GPU
/// no longer lists keeps its frame buffer and its MIG backing.
pub(crate) fn settled_inventory(paths: &HostPaths, store: &Store) -> Result<Inventory> {
    let mut state = HostState {
        inventory: crate::discovery::discover(paths)?,
        ..HostState::default()
    };
    add_recorded_offers(&mut state, paths, store);
    state.settle();
    Ok(state.inventory)
}

/// What the device `id` of `tenant`'s `domain` is on this host, as the policy counts it: its
/// physical GPU, its frame buffer and whether it is partitioned in hardware. `None` for a
/// device of no GPU in `inventory`.
pub(crate) fn holding_of(
    inventory: &Inventory,
    tenant: &str,
    domain: &str,
    id: VgpuHandle,
) -> Option<Holding> {
    let holding = |gpu: &Gpu, framebuffer_mib: Option<u64>, hardware: bool| Holding {
        tenant: tenant.to_owned(),
        domain: domain.to_owned(),
        gpu: gpu.address,
        framebuffer_mib: framebuffer_mib.unwrap_or(0),
        hardware,
    };
    for gpu in &inventory.gpus {
        if let Some(vgpu) = gpu.vgpus.iter().find(|v| v.id == id) {
            return Some(typed(gpu, &vgpu.type_id, holding));
        }
        let VgpuHandle::Vf(address) = id else {
            continue;
        };
        let plain_vf = (gpu.backend == Backend::Sriov)
            .then(|| gpu.vfs.iter().find(|vf| vf.address == address))
            .flatten();
        if let Some(vf) = plain_vf {
            return Some(holding(gpu, vf.memory_mib, true));
        }
    }
    None
}

/// The holding of a vGPU of type `type_id` on `gpu`: a MIG-backed type is partitioned in
/// hardware, any other vGPU type shares the GPU's engines in turns.
fn typed(
    gpu: &Gpu,
    type_id: &str,
    holding: impl Fn(&Gpu, Option<u64>, bool) -> Holding,
) -> Holding {
    let found = gpu.types.iter().find(|t| t.id == type_id);
    holding(
        gpu,
        found.and_then(|t| t.framebuffer_mib),
        found.is_some_and(|t| t.mig.is_some()),
    )
}

/// What a vGPU of type `type_id` about to be made on GPU `gpu` of `inventory` would be.
pub(crate) fn planned_holding(
    inventory: &Inventory,
    tenant: &str,
    domain: &str,
    gpu: crate::model::pci::PciAddress,
    type_id: &str,
) -> Option<Holding> {
    let gpu = inventory.gpus.iter().find(|g| g.address == gpu)?;
    Some(typed(gpu, type_id, |gpu, framebuffer_mib, hardware| {
        Holding {
            tenant: tenant.to_owned(),
            domain: domain.to_owned(),
            gpu: gpu.address,
            framebuffer_mib: framebuffer_mib.unwrap_or(0),
            hardware,
        }
    }))
}

/// What every record gives its domain's tenant: the devices made for it and those it holds.
pub(crate) fn held<'a>(
    inventory: &Inventory,
    records: impl IntoIterator<Item = &'a Record>,
) -> Vec<Holding> {
    records
        .into_iter()
        .flat_map(|record| {
            let made = record.made.iter().map(|m| m.handle());
            made.chain(record.holds.iter().copied())
                .filter_map(|id| holding_of(inventory, &record.tenant, &record.domain, id))
                .collect::<Vec<_>>()
        })
        .collect()
}

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
    pub gpus: Vec<crate::model::pci::PciAddress>,
    /// Its domains holding them.
    pub domains: Vec<String>,
}

/// `vgpuctl tenants`: every tenant the policy names or a record holds for, and every rule
/// broken on the host now (a policy made stricter after the fact, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantsReport {
    /// The policy file, when there is one.
    pub policy: Option<PathBuf>,
    /// The tenants, by name.
    pub tenants: Vec<TenantUse>,
    /// The rules broken now, as [`check`] says with everything held as new.
    pub violations: Vec<Violation>,
}

/// The tenants report of `holdings` under `policy` (read from `path`).
pub(crate) fn report(policy: &Policy, path: Option<&Path>, holdings: &[Holding]) -> TenantsReport {
    let mut names: std::collections::BTreeSet<&str> =
        policy.tenants.keys().map(String::as_str).collect();
    names.extend(holdings.iter().map(|h| h.tenant.as_str()));
    let tenants = names
        .into_iter()
        .map(|name| {
            let mine: Vec<&Holding> = holdings.iter().filter(|h| h.tenant == name).collect();
            let mut gpus: Vec<_> = mine.iter().map(|h| h.gpu).collect();
            gpus.sort();
            gpus.dedup();
            let mut domains: Vec<String> = mine.iter().map(|h| h.domain.clone()).collect();
            domains.sort();
            domains.dedup();
            TenantUse {
                tenant: name.to_owned(),
                policy: policy.of(name),
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
        violations: check(policy, &[], holdings),
    }
}

impl Manager {
    /// `vgpuctl tenants`: each tenant's policy and what the hook's records give it, and every
    /// rule broken on the host now. Reads only; without a policy file every tenant is shared
    /// and nothing is broken.
    pub fn tenants(&self) -> Result<TenantsReport> {
        let paths = &self.paths;
        let policy = read_policy(paths)?;
        let inventory = settled_inventory(paths, &Store::new(paths))?;
        let records = other_records(paths, uuid::Uuid::nil())?;
        let holdings = held(&inventory, records.iter().map(|(_, r)| r));
        let path = policy.as_ref().map(|_| policy_path(paths));
        Ok(report(
            &policy.unwrap_or_default(),
            path.as_deref(),
            &holdings,
        ))
    }
}
