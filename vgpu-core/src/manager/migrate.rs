//! The libvirt hook's `migrate begin` and `restore begin` on the destination
//! (<https://libvirt.org/hooks.html>): the incoming domain XML names its vGPUs as the source
//! host had them. This module makes a vGPU of the same type for each on this host, and says
//! what each became, so that the hook can rewrite the XML.
//!
//! For each device of the XML (a mediated device, or a VF of NVIDIA's vendor-specific VFIO):
//!
//! 1. The type is the domain's: its metadata's `type`, or the type `hook.toml` maps its Nova
//!    flavor to, as for `prepare`. Else the type `attach` recorded for that device in the
//!    domain's metadata. Else the device is refused.
//! 2. A device an earlier run for the same domain made is reused: libvirt may run the hook
//!    again.
//! 3. A VF: the same address when it is a free VF with room for the type here; else the first
//!    free VF with room on the first GPU that has some, its own GPU first. The room is
//!    [`capacity::room`](crate::plan::capacity::room)'s, as for every command that makes vGPUs.
//! 4. A mediated device: the same UUID unless a device or a definition here has it; else a new
//!    one. Its parent is the first with room, as `create` chooses.
//! 5. The tenant policy checks the whole set, as for `prepare`.
//!
//! The domain's record (`run/vgpu/hook/<domain-uuid>`) names what is about to be made, and
//! what each device of the XML became, before anything is made. The `prepare` that follows sees
//! the devices as the domain's own; a failed migration's `release` takes them back. A refusal
//! makes nothing. With `dry_run` (`vgpuctl can-host`) the same choices are made and nothing is
//! written.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use uuid::Uuid;

use super::hook::{HookDomain, domain_type, in_context};
use super::policy::enforce;
use super::session::Operation;
use crate::backend::{self, NewVgpu, Placement};
use crate::discovery::discover;
use crate::error::{Error, Result};
use crate::model::migration::Arrival;
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, Inventory, PLAIN_VF_TYPE, VgpuHandle};
use crate::state::hook::{HookConfig, Made, Moved, Record, read_record, record_path};

/// vGPUs of each type this run chose per GPU, so that room is counted once.
type Planned = BTreeMap<(PciAddress, String), u32>;

/// A vGPU the incoming XML names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingDevice {
    /// As the source named it: a mediated device's UUID, or a vendor-VFIO VF's address.
    pub id: VgpuHandle,
    /// The type `attach` recorded for it in the domain's metadata, by name.
    pub type_name: Option<String>,
}

/// What was, or would be, made for an incoming domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Incoming {
    /// One per device of the XML that is the hook's, in document order.
    pub arrivals: Vec<Arrival>,
}

/// Makes (or, with `dry_run`, chooses) a vGPU here for each of `devices` (see the module
/// documentation).
pub(super) fn incoming(
    op: &mut Operation<'_>,
    domain: &HookDomain,
    devices: &[IncomingDevice],
    config: &HookConfig,
    dry_run: bool,
) -> Result<Incoming> {
    let paths = op.paths().clone();
    let path = record_path(&paths, domain.holder.uuid);
    let mut record =
        read_record(&path)?.unwrap_or_else(|| Record::new(&domain.holder.domain, Vec::new()));
    record.domain.clone_from(&domain.holder.domain);
    let inventory = discover(&paths)?;
    let mut incoming = Incoming::default();
    let mut plans: Vec<NewVgpu> = Vec::new();
    let mut taken: Vec<PciAddress> = Vec::new();
    let mut uuids: BTreeSet<Uuid> = BTreeSet::new();
    let mut planned = Planned::new();
    let mut seen = Vec::new();
    for device in devices {
        if seen.contains(&device.id) {
            continue;
        }
        seen.push(device.id);
        if let Some(arrival) = reuse(&inventory, &record, device) {
            incoming.arrivals.push(arrival);
            continue;
        }
        let (wanted, type_from) = wanted_type(domain, config, device, &paths)?;
        let ctx = |source: Error| in_context(domain, device.id, Some(type_from.clone()), source);
        let (placement, gpu) = match device.id {
            VgpuHandle::Vf(from) => {
                let candidates = ordered(&inventory.gpus, Backend::NvidiaVfio, Some(from));
                choose(op, &candidates, &wanted, &taken, Some(from), &mut planned).map_err(ctx)?
            }
            VgpuHandle::Mdev(_) => {
                let candidates = ordered(&inventory.gpus, Backend::Mdev, None);
                choose(op, &candidates, &wanted, &taken, None, &mut planned).map_err(ctx)?
            }
        };
        // A VF (or a VF that is an mdev parent) takes one vGPU: not chosen twice.
        if placement.device() != gpu.address {
            taken.push(placement.device());
        }
        let (plan, type_id) = match (placement, device.id) {
            (Placement::VendorVf { vf, type_id }, _) => {
                (NewVgpu::VendorVf { vf, type_id }, type_id.to_string())
            }
            (Placement::Mdev { parent, type_id }, VgpuHandle::Mdev(from)) => {
                let uuid = free_uuid(op, from, &uuids)?;
                uuids.insert(uuid);
                (
                    NewVgpu::Mdev {
                        parent,
                        type_id: type_id.clone(),
                        uuid,
                    },
                    type_id,
                )
            }
            (other, _) => {
                return Err(ctx(Error::UnknownType {
                    gpu: gpu.address,
                    wanted: wanted.clone(),
                    offered: vec![other.device().to_string()],
                }));
            }
        };
        incoming.arrivals.push(Arrival {
            from: device.id,
            to: plan.handle(),
            gpu: gpu.address,
            type_name: inventory
                .type_name(gpu.address, &type_id)
                .map(str::to_owned),
            type_id,
            type_from,
            reused: false,
        });
        plans.push(plan);
    }
    if plans.is_empty() {
        return Ok(incoming);
    }
    let existing: Vec<VgpuHandle> = record.made.iter().map(Made::handle).collect();
    let planned: Vec<(PciAddress, String)> = plans
        .iter()
        .map(|p| match p {
            NewVgpu::Mdev {
                parent, type_id, ..
            } => (*parent, type_id.clone()),
            NewVgpu::VendorVf { vf, type_id } => (*vf, type_id.to_string()),
            NewVgpu::PlainVf { vf } => (*vf, PLAIN_VF_TYPE.to_owned()),
        })
        .collect();
    enforce(op, &domain.holder, &existing, &planned, None)?;
    if dry_run {
        return Ok(incoming);
    }
    record.tenant.clone_from(&domain.holder.tenant);
    record.made.extend(plans.iter().map(made_of));
    record.moved.extend(
        incoming
            .arrivals
            .iter()
            .filter(|a| !a.reused)
            .map(|a| Moved {
                from: a.from,
                to: a.to,
            }),
    );
    // Recorded first: a hook killed half-way leaves a record naming what it may have made.
    op.replace_file(&path, Some(&record.encode(&path)?))?;
    for plan in &plans {
        op.realize_placed(plan)
            .map_err(|source| in_context(domain, plan.handle(), None, source))?;
    }
    Ok(incoming)
}

/// What an earlier run for the same domain made for `device`, when it is still there.
fn reuse(inventory: &Inventory, record: &Record, device: &IncomingDevice) -> Option<Arrival> {
    let moved = record.moved.iter().find(|m| m.from == device.id)?;
    if !record.made.iter().any(|m| m.handle() == moved.to) {
        return None;
    }
    let (gpu, vgpu) = inventory
        .gpus
        .iter()
        .find_map(|g| g.vgpus.iter().find(|v| v.id == moved.to).map(|v| (g, v)))?;
    Some(Arrival {
        from: device.id,
        to: moved.to,
        gpu: gpu.address,
        type_name: inventory
            .type_name(gpu.address, &vgpu.type_id)
            .map(str::to_owned),
        type_id: vgpu.type_id.clone(),
        type_from: "made by an earlier run for this domain".to_owned(),
        reused: true,
    })
}

/// The type the domain needs for `device`, and where that came from.
fn wanted_type(
    domain: &HookDomain,
    config: &HookConfig,
    device: &IncomingDevice,
    paths: &crate::HostPaths,
) -> Result<(String, String)> {
    let refused = |source: Error| in_context(domain, device.id, None, source);
    let path = paths.hook_toml();
    if let Some((wanted, from)) = domain_type(domain, config, &path).map_err(refused)? {
        return Ok((wanted.to_owned(), from));
    }
    match &device.type_name {
        Some(name) => Ok((
            name.clone(),
            format!("type {name:?} that attach recorded in the domain's metadata"),
        )),
        None => Err(refused(Error::MigrationTypeUnknown {
            device: device.id.to_string(),
        })),
    }
}

/// The GPUs of `backend` (for mediated devices: on the PF or on VFs), the one holding
/// `first` first, then by address.
fn ordered(gpus: &[Gpu], backend: Backend, first: Option<PciAddress>) -> Vec<&Gpu> {
    let fits = |g: &&Gpu| match backend {
        Backend::Mdev => matches!(g.backend, Backend::Mdev | Backend::VfMdev),
        other => g.backend == other,
    };
    let holds = |g: &Gpu| first.is_some_and(|a| g.vfs.iter().any(|v| v.address == a));
    let mut found: Vec<&Gpu> = gpus.iter().filter(fits).collect();
    found.sort_by_key(|g| (!holds(g), g.address));
    found
}

/// Where a vGPU of `wanted` goes: the first of `gpus` with room after what this run chose
/// (`planned`, per GPU and type), on a place not `taken`, `prefer` where it is free. When none
/// has room, the refusal names every full GPU's reason ([`Error::NoRoomHere`], or the one
/// GPU's own error); a GPU that does not offer the type is said only when no GPU does.
fn choose<'g>(
    op: &Operation<'_>,
    gpus: &[&'g Gpu],
    wanted: &str,
    taken: &[PciAddress],
    prefer: Option<PciAddress>,
    planned: &mut Planned,
) -> Result<(Placement, &'g Gpu)> {
    let mut full: Vec<Error> = Vec::new();
    let mut offered = Vec::new();
    for gpu in gpus {
        let found = match op.room_for(gpu, wanted) {
            Ok(found) => found,
            Err(Error::UnknownType { offered: o, .. }) => {
                offered.extend(o);
                continue;
            }
            Err(Error::NoVfs { .. }) => continue,
            Err(err) => return Err(err),
        };
        let chosen = planned
            .get(&(gpu.address, found.type_id.clone()))
            .copied()
            .unwrap_or(0);
        if found.room.available <= chosen {
            full.push(found.refusal(chosen + 1, found.room.available));
            continue;
        }
        match op.place_preferring(gpu, wanted, taken, prefer) {
            Ok(placement) => {
                *planned.entry((gpu.address, found.type_id)).or_default() += 1;
                return Ok((placement, gpu));
            }
            Err(err) if err.kind() == crate::ErrorKind::NoCapacity => full.push(err),
            Err(err) => return Err(err),
        }
    }
    if full.len() > 1 {
        return Err(Error::NoRoomHere {
            wanted: wanted.to_owned(),
            refusals: full.iter().map(Error::chain).collect(),
        });
    }
    if let Some(full) = full.pop() {
        return Err(full);
    }
    offered.sort();
    offered.dedup();
    Err(Error::Plan(crate::plan::Error::TypeNotOffered {
        wanted: wanted.to_owned(),
        offered,
    }))
}

/// `from` when no mediated device or definition here has it and this run did not take it;
/// else a new UUID.
fn free_uuid(op: &Operation<'_>, from: Uuid, taken: &BTreeSet<Uuid>) -> Result<Uuid> {
    let used = taken.contains(&from)
        || backend::running(op.paths(), VgpuHandle::Mdev(from))?.is_some()
        || op.store().mdev(from)?.is_some();
    Ok(if used { Uuid::new_v4() } else { from })
}

/// What the record names for a vGPU made from `plan`.
fn made_of(plan: &NewVgpu) -> Made {
    match plan {
        NewVgpu::Mdev { uuid, .. } => Made::Mdev { uuid: *uuid },
        NewVgpu::VendorVf { vf, type_id } => Made::VendorType {
            vf: *vf,
            type_id: *type_id,
        },
        NewVgpu::PlainVf { vf } => Made::Binding {
            address: *vf,
            driver: "vfio-pci".to_owned(),
        },
    }
}
