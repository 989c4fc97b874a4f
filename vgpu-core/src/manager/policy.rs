//! The tenant policy on the host: `etc/vgpu/tenants.toml` read, and what each tenant holds,
//! from the hook's records. The rules themselves are one pure function,
//! [`check`](crate::plan::tenants::check): the hook, `attach`, `place` and `tenants` all
//! ask it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::holder::{Holder, Tenant};
use crate::model::kind::DeviceKind;
use crate::model::nvml::{Fact, SchedulerPolicy, SchedulerState};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, Inventory, PLAIN_VF_TYPE, VgpuHandle, VgpuType};
use crate::nvml::NvmlCell;
use crate::plan::capacity::HostState;
use crate::plan::place::Tenancy;
use crate::plan::tenants::{Holding, Policy, Qos, Service, check, named, service};
use crate::state::hook::{Record, other_records, read_record, record_path, record_uuid};
use crate::state::store::{Store, add_recorded_offers};

use super::Manager;
use super::session::Operation;

/// The largest policy file read.
const FILE_LIMIT: usize = 256 * 1024;

/// The host's tenant policy; `None` when there is no file (then nothing is enforced). A file
/// that cannot be read or parsed is an error naming it, so that a caller fails closed.
pub fn read_policy(paths: &HostPaths) -> Result<Option<Policy>> {
    let path = paths.tenants_toml();
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

/// What a device is on this host: its physical GPU, its type and its frame buffer, and the
/// kind of device it is. The tenant policy and the usage ledger both ask this.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identified<'a> {
    /// Its physical GPU.
    pub(crate) gpu: &'a Gpu,
    /// Its type's id: the vGPU's, or [`PLAIN_VF_TYPE`] for a plain VF.
    pub(crate) type_id: &'a str,
    /// The type, where the GPU describes it.
    pub(crate) ty: Option<&'a VgpuType>,
    /// Its frame buffer, where known.
    pub(crate) framebuffer_mib: Option<u64>,
    /// The isolation report's kind of device.
    pub(crate) kind: DeviceKind,
}

/// What the device `id` is on this host; `None` for a device of no GPU in `inventory`.
pub(crate) fn identify(inventory: &Inventory, id: VgpuHandle) -> Option<Identified<'_>> {
    for gpu in &inventory.gpus {
        if let Some(vgpu) = gpu.vgpus.iter().find(|v| v.id == id) {
            return Some(typed(gpu, &vgpu.type_id));
        }
        let VgpuHandle::Vf(address) = id else {
            continue;
        };
        let plain_vf = (gpu.backend == Backend::Sriov)
            .then(|| gpu.vfs.iter().find(|vf| vf.address == address))
            .flatten();
        if let Some(vf) = plain_vf {
            return Some(Identified {
                gpu,
                type_id: PLAIN_VF_TYPE,
                ty: None,
                framebuffer_mib: vf.memory_mib,
                kind: DeviceKind::of_type(None),
            });
        }
    }
    None
}

/// A vGPU of type `type_id` on `gpu`, of the kind its type is. A type the GPU does not
/// describe counts as sharing the engines, the weaker kind.
fn typed<'a>(gpu: &'a Gpu, type_id: &'a str) -> Identified<'a> {
    let ty = gpu.types.iter().find(|t| t.id == type_id);
    Identified {
        gpu,
        type_id,
        ty,
        framebuffer_mib: ty.and_then(|t| t.framebuffer_mib),
        kind: ty.map_or(DeviceKind::TimeSlicedVgpu, |t| DeviceKind::of_type(Some(t))),
    }
}

/// What the device `id` of `holder` is on this host, as the policy counts it: its physical
/// GPU, its frame buffer and whether it is partitioned in hardware. `None` for a device of no
/// GPU in `inventory`.
fn holding_of(inventory: &Inventory, holder: &Holder, id: VgpuHandle) -> Option<Holding> {
    identify(inventory, id).map(|found| holding(&found, holder))
}

fn holding(found: &Identified<'_>, holder: &Holder) -> Holding {
    Holding {
        holder: holder.clone(),
        gpu: found.gpu.address,
        framebuffer_mib: found.framebuffer_mib.unwrap_or(0),
        hardware: found.kind.partitioned_in_hardware(),
        service: Service::default(),
    }
}

/// What `found`'s GPU gives it, with the scheduler `scheduler` (NVML's answer, `None` when
/// not asked).
fn served(found: &Identified<'_>, scheduler: Option<&Fact<SchedulerState>>) -> Service {
    service(found.gpu, found.kind, found.ty, scheduler)
}

/// The schedulers the QoS class of a claim is judged against: NVML's answer for each NVIDIA
/// GPU asked, or what a plan sets before it makes vGPUs there (`set`). A GPU of another
/// vendor has none.
pub(crate) struct Schedulers<'a> {
    nvml: &'a NvmlCell,
    set: &'a BTreeMap<PciAddress, SchedulerPolicy>,
    read: BTreeMap<PciAddress, Fact<SchedulerState>>,
}

impl<'a> Schedulers<'a> {
    /// NVML's schedulers from `nvml` (loaded only when a class asks), with the plan's `set`
    /// over them.
    pub(crate) fn new(nvml: &'a NvmlCell, set: &'a BTreeMap<PciAddress, SchedulerPolicy>) -> Self {
        Self {
            nvml,
            set,
            read: BTreeMap::new(),
        }
    }

    fn of(&mut self, gpu: &Gpu) -> Option<&Fact<SchedulerState>> {
        if gpu.vendor_id != Some(crate::model::NVIDIA_VENDOR_ID) {
            return None;
        }
        let fact = match self.set.get(&gpu.address) {
            Some(policy) => Fact::Value(SchedulerState {
                policy: Some(*policy),
                raw_policy: crate::nvml::sched::policy_code(*policy),
                arr_mode: crate::model::nvml::ArrMode::Default,
                timeslice_ns: Fact::Value(0),
            }),
            None => self.nvml.get().scheduler_state(gpu.address),
        };
        Some(self.read.entry(gpu.address).or_insert(fact))
    }
}

/// The physical GPU of `inventory` that `address` is, or is a VF of.
fn physical_gpu(inventory: &Inventory, address: PciAddress) -> Option<PciAddress> {
    inventory
        .gpus
        .iter()
        .find(|g| g.address == address || g.vfs.iter().any(|vf| vf.address == address))
        .map(|g| g.address)
}

/// Refuses `claim` ([`Error::PolicyRefused`]) when it holding `existing` devices and new
/// vGPUs of `planned` (device, type id) breaks the tenant policy beside what other domains'
/// records hold (`others`, read when `None`). Returns the settled inventory it read, or
/// `None` without a policy file (then nothing is read). A policy file that cannot be read is
/// an error: the caller fails closed.
pub(crate) fn enforce(
    op: &Operation<'_>,
    claim: &Holder,
    existing: &[VgpuHandle],
    planned: &[(PciAddress, String)],
    others: Option<Vec<(PathBuf, Record)>>,
) -> Result<Option<Inventory>> {
    let none = BTreeMap::new();
    let schedulers = Schedulers::new(op.nvml(), &none);
    judge(
        op.paths(),
        op.store(),
        claim,
        existing,
        planned,
        others,
        schedulers,
    )
}

/// [`enforce`] of the host at `paths` with the definitions of `store`, for a caller that holds
/// no operation (`plan`, `assert`) or that sets schedulers first (`apply`): the one verdict of
/// the tenant policy. The claim's QoS class is judged against `schedulers`, asked only when
/// the tenant's class is above best effort.
pub(crate) fn judge(
    paths: &HostPaths,
    store: &Store,
    claim: &Holder,
    existing: &[VgpuHandle],
    planned: &[(PciAddress, String)],
    others: Option<Vec<(PathBuf, Record)>>,
    mut schedulers: Schedulers<'_>,
) -> Result<Option<Inventory>> {
    let Some(policy) = read_policy(paths)? else {
        return Ok(None);
    };
    let inventory = settled_inventory(paths, store)?;
    let others = match others {
        Some(others) => others,
        None => other_records(paths, claim.uuid)?,
    };
    let held = held(&inventory, &others);
    let mut seen = Vec::new();
    let mut new = Vec::new();
    let class = policy.of(claim.tenant_name()).qos;
    let mut judged = |found: Identified<'_>| {
        let mut holding = holding(&found, claim);
        if class > Qos::BestEffort {
            holding.service = served(&found, schedulers.of(found.gpu));
        }
        holding
    };
    for id in existing {
        if !seen.contains(id) {
            seen.push(*id);
            new.extend(identify(&inventory, *id).map(&mut judged));
        }
    }
    for (device, type_id) in planned {
        let found = physical_gpu(&inventory, *device)
            .and_then(|gpu| inventory.gpus.iter().find(|g| g.address == gpu))
            .map(|gpu| typed(gpu, type_id));
        new.extend(found.map(&mut judged));
    }
    if let Some(violation) = check(&policy, &held, &new).into_iter().next() {
        return Err(Error::PolicyRefused {
            domain: claim.domain.clone(),
            tenant: named(claim.tenant_name()),
            path: paths.tenants_toml(),
            violation: Box::new(violation),
        });
    }
    Ok(Some(inventory))
}

/// What every record (by its path, [`other_records`]) gives its domain's tenant: the devices
/// made for it and those it holds.
pub(crate) fn held(inventory: &Inventory, records: &[(PathBuf, Record)]) -> Vec<Holding> {
    held_devices(inventory, records)
        .map(|held| held.holding)
        .collect()
}

/// [`held`], each with its device.
fn held_devices<'a>(
    inventory: &'a Inventory,
    records: &'a [(PathBuf, Record)],
) -> impl Iterator<Item = Held> + 'a {
    records.iter().flat_map(move |(path, record)| {
        let holder = record_uuid(path).map(|uuid| record.holder(uuid));
        record
            .devices()
            .into_iter()
            .filter_map(move |id| {
                let holding = holding_of(inventory, holder.as_ref()?, id)?;
                Some(Held { id, holding })
            })
            .collect::<Vec<_>>()
    })
}

/// One device a domain's hook record holds ([`Manager::held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The device.
    pub id: VgpuHandle,
    /// Its domain and tenant, GPU and frame buffer, as the tenant policy counts it.
    pub holding: Holding,
}

impl Manager {
    /// What `place --tenant` places under: the policy (the default without a file) and what
    /// every domain's record holds now. Reads only.
    pub fn tenancy(&self, tenant: &str) -> Result<Tenancy> {
        Ok(Tenancy {
            tenant: Tenant::label(tenant),
            policy: read_policy(&self.paths)?.unwrap_or_default(),
            held: self.holdings()?,
        })
    }

    /// What every domain's hook record holds now, for its tenant. Reads only. `vgpuctl
    /// tenants` reports it under the policy (`vgpu-report`'s `tenants`).
    pub fn holdings(&self) -> Result<Vec<Holding>> {
        Ok(self.held()?.into_iter().map(|held| held.holding).collect())
    }

    /// [`Manager::holdings`], each with the device held: who holds a vGPU when libvirt
    /// cannot say (`vgpuctl metrics` names its domain and tenant from it). Reads only.
    pub fn held(&self) -> Result<Vec<Held>> {
        let paths = &self.paths;
        let inventory = settled_inventory(paths, &Store::new(paths))?;
        let records = other_records(paths, Uuid::nil())?;
        Ok(held_devices(&inventory, &records).collect())
    }
}

impl Manager {
    /// [`Manager::create`] of a vGPU for `domain`, the tenant policy asked first: refused
    /// ([`Error::PolicyRefused`], kind `policy`) before anything is made when the new vGPU,
    /// beside what the domain's record and other domains' records hold, breaks it. `attach`
    /// makes a domain's new vGPU so. Without a policy file it is [`Manager::create`].
    pub fn create_for(
        &self,
        domain: &Holder,
        gpu: PciAddress,
        wanted: &str,
        uuid: Option<Uuid>,
        define: Option<crate::state::store::Start>,
    ) -> Result<super::Created> {
        self.mutate("create", &gpu.to_string(), |op| {
            let inventory = crate::discovery::discover(op.paths())?;
            let found = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
            if read_policy(op.paths())?.is_some() {
                let type_id = op.room_for(found, wanted)?.type_id;
                let existing = match read_record(&record_path(op.paths(), domain.uuid))? {
                    Some(record) => record.devices(),
                    None => Vec::new(),
                };
                enforce(op, domain, &existing, &[(gpu, type_id)], None)?;
            }
            super::create::create(op, found, wanted, uuid, define, None)
        })
    }

    /// Under the host lock: refuses `domain` the devices `ids` when holding them, beside what
    /// its record and other domains' records hold, breaks the tenant policy
    /// ([`Error::PolicyRefused`], kind `policy`); otherwise records them for the domain, so
    /// that later checks count them. `attach` asks this before attaching. Without a policy
    /// file nothing is read or written.
    pub fn admit(&self, domain: &Holder, ids: &[VgpuHandle]) -> Result<()> {
        if read_policy(&self.paths)?.is_none() {
            return Ok(());
        }
        self.mutate("admit", &domain.domain, |op| {
            let path = record_path(op.paths(), domain.uuid);
            let mut record =
                read_record(&path)?.unwrap_or_else(|| Record::new(&domain.domain, Vec::new()));
            let mut existing = record.devices();
            existing.extend(ids.iter().copied());
            let Some(inventory) = enforce(op, domain, &existing, &[], None)? else {
                return Ok(());
            };
            record.tenant.clone_from(&domain.tenant);
            for id in ids {
                let made = record.made.iter().any(|m| m.handle() == *id);
                let gpu = identify(&inventory, *id).is_some();
                if !made && gpu && !record.holds.contains(id) {
                    record.holds.push(*id);
                }
            }
            op.replace_file(&path, Some(&record.encode(&path)?))
        })
    }

    /// Forgets that `domain` (by UUID) holds `ids`: after a detach, or an attach that failed
    /// after [`Manager::admit`]. What the hook made for it stays its own until `release`.
    pub fn unhold(&self, domain: Uuid, ids: &[VgpuHandle]) -> Result<()> {
        let path = record_path(&self.paths, domain);
        if !path.exists() {
            return Ok(());
        }
        self.mutate("unhold", &domain.to_string(), |op| {
            let Some(mut record) = read_record(&path)? else {
                return Ok(());
            };
            let before = record.holds.len();
            record.holds.retain(|id| !ids.contains(id));
            if record.holds.len() == before {
                return Ok(());
            }
            let bytes = match record.made.is_empty() && record.holds.is_empty() {
                true => None,
                false => Some(record.encode(&path)?),
            };
            op.replace_file(&path, bytes.as_deref())
        })
    }
}
