//! The libvirt hook's work (`/etc/libvirt/hooks/qemu.d/*`, <https://libvirt.org/hooks.html>):
//! make a domain's vGPUs exist before libvirt prepares its devices, and take back what was made
//! for it once libvirt has released them.
//!
//! `prepare` looks at each device the domain's XML assigns and, under the host lock:
//!
//! - a device running already is left as it is. If another domain's record claims it (that
//!   domain stopped and its `release` has not run yet) and no process holds it open, the claim
//!   moves to this domain: the late `release` of the other one then leaves it alone;
//! - a defined mediated device (mdevctl's store) is started on its parent;
//! - a VF with a definition in `etc/vgpu/vf-vgpus` gets its type, one with a binding
//!   definition gets its driver;
//! - any other VF of an NVIDIA vendor-VFIO GPU gets the type the domain's metadata names, or
//!   else the type `etc/vgpu/hook.toml` maps its Nova flavor to, where the GPU has room for it
//!   after what definitions hold;
//! - anything else (a device of no GPU, a whole GPU, a plain VF libvirt binds itself) is not
//!   the hook's, and is left to libvirt.
//!
//! Under a tenant policy (`etc/vgpu/tenants.toml`), what the domain would then hold is checked
//! against what other domains' records hold ([`check`](crate::plan::tenants::check)) before
//! anything is made. A domain that breaks a rule is refused, naming it; a policy file that
//! cannot be read refuses every domain with GPU devices.
//!
//! What it is about to make is recorded first (`run/vgpu/hook/<domain-uuid>`), then made; if
//! one device cannot be made, everything this run made and recorded is undone.
//!
//! `release` takes back what the record names, unless it changed since (another type, another
//! driver, gone) or a process holds it open (a later owner): definitions stay, so the next
//! start makes the vGPUs again.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::path::{Path, PathBuf};

use serde::Serialize;
use uuid::Uuid;

use super::placing::GpuRoom;
use super::session::Operation;
use super::{is_gpu_function, stop_unchecked};
use crate::backend::{self, NewVgpu, Running};
use crate::capacity::check_handout;
use crate::discovery::discover_gpu;
use crate::error::{Error, Object, Result};
use crate::host::nvidia::NvidiaVf;
use crate::host::pci_device::PciDevice;
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;
use crate::state::hook::{HookConfig, Made, Record, other_records, read_record, record_path};

use super::policy::{enforce, identify};
use crate::model::holder::Holder;
use crate::state::store::MdevDefinition;

/// A domain as libvirt hands it to the hook: what its XML names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookDomain {
    /// Its name (`<name>`), its UUID (`<uuid>`, which names its record) and its tenant
    /// (`<vgpu:vgpu tenant="…">`, else Nova's project), whom the tenant policy
    /// (`etc/vgpu/tenants.toml`) counts its devices for.
    pub holder: Holder,
    /// The devices its hostdevs assign: mediated device UUIDs and PCI source addresses, in
    /// document order.
    pub devices: Vec<VgpuHandle>,
    /// The vGPU type its metadata names for VFs (`<vgpu:vgpu type="…"/>`).
    pub vgpu_type: Option<String>,
    /// Its Nova flavor's name (`<nova:flavor name="…">`).
    pub flavor: Option<String>,
}

/// What `prepare` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Prepared {
    /// What it made, in order.
    pub made: Vec<Made>,
    /// Running devices whose claim it took over from another domain's record.
    pub adopted: Vec<Made>,
    /// Devices running already, left as they are (its own earlier record keeps its claims).
    pub running: Vec<VgpuHandle>,
    /// Devices that are not the hook's (no GPU, a whole GPU, a VF libvirt binds itself).
    pub ignored: Vec<VgpuHandle>,
}

/// One thing `release` left as it is, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Left {
    /// What the record named.
    pub made: Made,
    /// Why it was left, in words.
    pub reason: String,
}

/// What `release` did.
#[derive(Debug, Default)]
pub struct Released {
    /// What it took back.
    pub stopped: Vec<Made>,
    /// What it left, and why: changed since, gone, or held open by a later owner.
    pub left: Vec<Left>,
    /// What it could not take back (still in the record, for a later `release`).
    pub failed: Vec<(Made, Error)>,
}

/// How one device that is not running will be made.
enum Plan {
    Mdev(MdevDefinition),
    VendorType { vf: PciAddress, type_id: u32 },
    Binding { address: PciAddress, driver: String },
}

impl Plan {
    fn made(&self) -> Made {
        match self {
            Plan::Mdev(def) => Made::Mdev { uuid: def.uuid },
            Plan::VendorType { vf, type_id } => Made::VendorType {
                vf: *vf,
                type_id: *type_id,
            },
            Plan::Binding { address, driver } => Made::Binding {
                address: *address,
                driver: driver.clone(),
            },
        }
    }
}

/// What one `prepare` run planned, and what it read of each GPU to plan it: the GPU is read,
/// and its room for a type counted, once per run, however many of its VFs the domain names.
/// Nothing changes the host between the reads and the last plan.
#[derive(Default)]
struct Planned {
    /// vGPUs of each type (by id) planned per GPU.
    counts: BTreeMap<(PciAddress, String), u32>,
    /// Each GPU's room for each type asked (by the name asked).
    rooms: BTreeMap<(PciAddress, String), GpuRoom>,
    /// Whether each physical function met is a GPU's.
    gpus: BTreeMap<PciAddress, bool>,
}

/// Makes `domain`'s devices exist (see the module documentation).
#[tracing::instrument(level = "trace", skip_all)]
pub(super) fn prepare(
    op: &mut Operation<'_>,
    domain: &HookDomain,
    config: &HookConfig,
) -> Result<Prepared> {
    let paths = op.paths().clone();
    let path = record_path(&paths, domain.holder.uuid);
    let mut record =
        read_record(&path)?.unwrap_or_else(|| Record::new(&domain.holder.domain, Vec::new()));
    record.domain.clone_from(&domain.holder.domain);
    let mut others: Option<Vec<(PathBuf, Record)>> = None;
    let mut prepared = Prepared::default();
    let mut plans = Vec::new();
    let mut planned = Planned::default();
    let mut seen = Vec::new();
    for &id in &domain.devices {
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        // A VF's directory is held open for both reads: the path down to it is looked up once.
        let device = match id {
            VgpuHandle::Vf(vf) => Some(PciDevice::new(&paths, vf).held_open()),
            VgpuHandle::Mdev(_) => None,
        };
        let running = match &device {
            Some(device) => backend::vf_running(device),
            None => backend::running(&paths, id),
        }
        .map_err(|e| in_context(domain, id, None, e))?;
        if let Some(now) = running {
            if let Running::VendorVf { type_id } = now {
                hand_out(op, domain, config, id, &type_id.to_string())?;
            }
            if record.made.iter().any(|m| m.handle() == id) {
                prepared.running.push(id);
                continue;
            }
            let others = match &mut others {
                Some(others) => others,
                None => others.insert(other_records(&paths, domain.holder.uuid)?),
            };
            match adopt(op, others, id)? {
                Some(made) => {
                    record.made.push(made.clone());
                    prepared.adopted.push(made);
                }
                None => prepared.running.push(id),
            }
            continue;
        }
        match plan(op, domain, config, id, device, &mut planned)? {
            Some(plan) => plans.push(plan),
            None => prepared.ignored.push(id),
        }
    }
    if plans.is_empty() && prepared.adopted.is_empty() && prepared.running.is_empty() {
        return Ok(prepared);
    }
    let holds_changed = keep_policy(op, domain, &mut record, &plans, &prepared, others)?;
    if plans.is_empty() && prepared.adopted.is_empty() && !holds_changed {
        return Ok(prepared);
    }
    // Recorded first: a hook killed half-way leaves a record naming what it may have made.
    record.made.extend(plans.iter().map(Plan::made));
    op.replace_file(&path, Some(&record.encode(&path)?))?;
    for plan in plans {
        let made = plan.made();
        let id = made.handle();
        let result = match plan {
            Plan::Mdev(def) => op.start_mdev(&def),
            Plan::VendorType { vf, type_id } => op
                .realize_placed(&NewVgpu::VendorVf { vf, type_id })
                .map(drop),
            Plan::Binding { address, driver } => op.bind(address, &driver).map(drop),
        };
        result.map_err(|source| in_context(domain, id, None, source))?;
        prepared.made.push(made);
    }
    Ok(prepared)
}

/// Refuses `domain` when what it would hold (its record's devices, what it found running, and
/// `plans`) breaks the tenant policy beside what other domains' records hold. Sets the record's
/// tenant, and its `holds` to the running devices not made for it; returns whether `holds`
/// changed. Without a policy file nothing is read.
#[tracing::instrument(level = "trace", skip_all)]
fn keep_policy(
    op: &Operation<'_>,
    domain: &HookDomain,
    record: &mut Record,
    plans: &[Plan],
    prepared: &Prepared,
    others: Option<Vec<(PathBuf, Record)>>,
) -> Result<bool> {
    record.tenant.clone_from(&domain.holder.tenant);
    let mut existing: Vec<VgpuHandle> = record.made.iter().map(Made::handle).collect();
    existing.extend(prepared.running.iter().copied());
    let mut planned = Vec::new();
    for plan in plans {
        match plan {
            Plan::Mdev(def) => {
                if let Ok(parent) = def.parent.parse::<PciAddress>() {
                    planned.push((parent, def.mdev_type.clone()));
                }
            }
            Plan::VendorType { vf, type_id } => planned.push((*vf, type_id.to_string())),
            // A plain VF exists already: only its driver changes.
            Plan::Binding { address, .. } => existing.push(VgpuHandle::Vf(*address)),
        }
    }
    let Some(inventory) = enforce(op, &domain.holder, &existing, &planned, others)? else {
        return Ok(false);
    };
    let holds: Vec<VgpuHandle> = prepared
        .running
        .iter()
        .copied()
        .filter(|id| !record.made.iter().any(|m| m.handle() == *id))
        .filter(|id| identify(&inventory, *id).is_some())
        .collect();
    let changed = record.holds != holds;
    record.holds = holds;
    Ok(changed)
}

/// Takes over another domain's claim on the running device `id`, unless a process holds it open
/// (the other domain is still using it). Returns what the claim named.
fn adopt(
    op: &mut Operation<'_>,
    others: &mut [(PathBuf, Record)],
    id: VgpuHandle,
) -> Result<Option<Made>> {
    for (path, record) in others.iter_mut() {
        let Some(index) = record.made.iter().position(|m| m.handle() == id) else {
            continue;
        };
        match op.check_unreferenced(id) {
            Ok(()) => {}
            // The other domain's guest still has it open: not ours to take.
            Err(Error::HeldOpen { .. }) => return Ok(None),
            Err(err) => return Err(err),
        }
        let made = record.made.remove(index);
        let bytes = if record.made.is_empty() {
            None
        } else {
            Some(record.encode(path)?)
        };
        op.replace_file(path, bytes.as_deref())?;
        return Ok(Some(made));
    }
    Ok(None)
}

/// [`Error::HookDevice`] for `id` of `domain`.
pub(super) fn in_context(
    domain: &HookDomain,
    id: VgpuHandle,
    from: Option<String>,
    source: Error,
) -> Error {
    Error::HookDevice {
        domain: domain.holder.domain.clone(),
        device: id.to_string(),
        from,
        source: Box::new(source),
    }
}

/// How the device `id`, not running, is to be made; `None` when it is not the hook's. A VF's
/// `device`, when given, is its directory, held open.
#[tracing::instrument(level = "trace", skip_all)]
fn plan(
    op: &Operation<'_>,
    domain: &HookDomain,
    config: &HookConfig,
    id: VgpuHandle,
    device: Option<PciDevice>,
    planned: &mut Planned,
) -> Result<Option<Plan>> {
    let ctx = |source: Error| in_context(domain, id, None, source);
    let paths = op.paths();
    let store = op.store();
    let address = match id {
        VgpuHandle::Mdev(uuid) => {
            let Some(def) = store.mdev(uuid).map_err(ctx)? else {
                return Err(ctx(Error::NotDefined {
                    id: uuid.to_string(),
                    path: store.mdevctl_dir().to_path_buf(),
                }));
            };
            let Ok(parent) = def.parent.parse::<PciAddress>() else {
                // A parent that is not a PCI function (a sample driver, a channel device).
                return Ok(None);
            };
            PciDevice::existing(paths, parent).map_err(ctx)?;
            return match is_gpu_function(paths, parent).map_err(ctx)? {
                true => Ok(Some(Plan::Mdev(def))),
                false => Ok(None),
            };
        }
        VgpuHandle::Vf(address) => address,
    };
    // Held open: the path down to the VF is looked up once for all its files.
    let device = device.unwrap_or_else(|| PciDevice::new(paths, address).held_open());
    if !device.exists() {
        return Ok(None);
    }
    let Some(pf) = device.physfn().map_err(ctx)? else {
        return Ok(None);
    };
    let is_gpu = match planned.gpus.entry(pf) {
        Entry::Occupied(known) => *known.get(),
        Entry::Vacant(unknown) => *unknown.insert(is_gpu_function(paths, pf).map_err(ctx)?),
    };
    if !is_gpu {
        return Ok(None);
    }
    if let Some(def) = store.vf_vgpu(address).map_err(ctx)? {
        hand_out(op, domain, config, id, &def.type_id.to_string())?;
        return Ok(Some(Plan::VendorType {
            vf: address,
            type_id: def.type_id,
        }));
    }
    if let Some(def) = store.binding(address).map_err(ctx)? {
        return Ok(Some(Plan::Binding {
            address,
            driver: def.driver,
        }));
    }
    if NvidiaVf::of_device(&device).map_err(ctx)?.is_none() {
        return Ok(None);
    }
    let (wanted, from) = vf_type(domain, config, address, paths.hook_toml()).map_err(ctx)?;
    let type_id = pick(op, pf, address, wanted, planned)
        .map_err(|source| in_context(domain, id, Some(from), source))?;
    Ok(Some(Plan::VendorType {
        vf: address,
        type_id,
    }))
}

/// Refuses to give `domain` the existing vGPU `id` (running, or defined) of type `type_id`
/// unless it is the type the domain asks for ([`check_handout`]); a domain that asks for no
/// type (no metadata, no mapped flavor) takes what is there.
#[tracing::instrument(level = "trace", skip_all)]
fn hand_out(
    op: &Operation<'_>,
    domain: &HookDomain,
    config: &HookConfig,
    id: VgpuHandle,
    type_id: &str,
) -> Result<()> {
    let VgpuHandle::Vf(vf) = id else {
        return Ok(());
    };
    let path = op.paths().hook_toml();
    let Ok((wanted, from)) = vf_type(domain, config, vf, path) else {
        return Ok(());
    };
    let ctx = |source: Error| in_context(domain, id, Some(from.clone()), source);
    let Some(pf) = PciDevice::new(op.paths(), vf).physfn().map_err(ctx)? else {
        return Ok(());
    };
    let (gpu, _warnings) = discover_gpu(op.paths(), pf).map_err(ctx)?;
    let state = op.state_of(&gpu).map_err(ctx)?;
    check_handout(&state.inventory.gpus[0], id, type_id, wanted).map_err(|e| ctx(e.into()))
}

/// The type a VF without a definition gets, and where it came from, in words: the domain's
/// metadata, else its Nova flavor's mapping ([`domain_type`]).
fn vf_type<'a>(
    domain: &'a HookDomain,
    config: &'a HookConfig,
    vf: PciAddress,
    path: PathBuf,
) -> Result<(&'a str, String)> {
    match domain_type(domain, config, &path)? {
        Some(found) => Ok(found),
        None => Err(Error::NoTypeForVf { vf, config: path }),
    }
}

/// The type the domain asks for, and where that came from, in words: its metadata's `type`,
/// else the type `hook.toml` (at `path`) maps its Nova flavor to; `None` when it names
/// neither.
pub(super) fn domain_type<'a>(
    domain: &'a HookDomain,
    config: &'a HookConfig,
    path: &Path,
) -> Result<Option<(&'a str, String)>> {
    if let Some(wanted) = &domain.vgpu_type {
        return Ok(Some((
            wanted,
            format!("type {wanted:?} from the domain's metadata"),
        )));
    }
    match &domain.flavor {
        Some(flavor) => match config.flavor_type(flavor) {
            Some(wanted) => Ok(Some((
                wanted,
                format!(
                    "type {wanted:?} for Nova flavor {flavor:?} in {}",
                    path.display()
                ),
            ))),
            None => Err(Error::FlavorNotMapped {
                flavor: flavor.clone(),
                path: path.to_path_buf(),
            }),
        },
        None => Ok(None),
    }
}

/// The id of type `wanted` on VF `vf` of GPU `pf`, when the GPU has room for it after what
/// definitions hold and what this run planned: [`capacity::room`](crate::plan::capacity::room), as for every
/// command that makes vGPUs.
fn pick(
    op: &Operation<'_>,
    pf: PciAddress,
    vf: PciAddress,
    wanted: &str,
    planned: &mut Planned,
) -> Result<u32> {
    backend::validate_type(wanted)?;
    pick_counted(op, pf, vf, wanted, planned)
}

/// [`pick`] from the whole GPU: the type it offers by that name, and its room after what
/// definitions hold and what this run planned. The GPU is read once per run and type.
fn pick_counted(
    op: &Operation<'_>,
    pf: PciAddress,
    vf: PciAddress,
    wanted: &str,
    planned: &mut Planned,
) -> Result<u32> {
    let paths = op.paths();
    let found = match planned.rooms.entry((pf, wanted.to_owned())) {
        Entry::Occupied(read) => read.into_mut(),
        Entry::Vacant(unread) => {
            let (gpu, _warnings) = discover_gpu(paths, pf)?;
            unread.insert(op.room_for(&gpu, wanted)?)
        }
    };
    let room = found.room.available;
    let type_id = found.type_id.clone();
    let taken = planned.counts.entry((pf, type_id.clone())).or_default();
    if room <= *taken {
        return Err(found.refusal(*taken + 1, room));
    }
    *taken += 1;
    type_id.parse::<u32>().map_err(|_| Error::NotFound {
        what: Object::VendorVf,
        id: vf.to_string(),
        path: paths.pci_device(&vf).join("nvidia"),
    })
}

/// Takes back what the record of domain `uuid` names (see the module documentation), and
/// rewrites the record with what could not be taken back (removed when nothing is left).
#[tracing::instrument(level = "trace", skip_all)]
pub(super) fn release(op: &mut Operation<'_>, uuid: Uuid, name: &str) -> Result<Released> {
    let paths = op.paths().clone();
    let path = record_path(&paths, uuid);
    let mut released = Released::default();
    let Some(record) = read_record(&path)? else {
        return Ok(released);
    };
    let tenant = record.tenant;
    let mut kept = Vec::new();
    for made in record.made {
        let id = made.handle();
        let now = match backend::running(&paths, id) {
            Ok(now) => now,
            Err(err) => {
                released.failed.push((made.clone(), err));
                kept.push(made);
                continue;
            }
        };
        let reason = match changed(op, &made, now.as_ref()) {
            Ok(reason) => reason,
            Err(err) => {
                released.failed.push((made.clone(), err));
                kept.push(made);
                continue;
            }
        };
        if let Some(reason) = reason {
            op.note("leave", &id.to_string(), &reason);
            released.left.push(Left { made, reason });
            continue;
        }
        match op
            .check_releasable(id, uuid)
            .and_then(|()| stop_unchecked(op, id))
        {
            Ok(_) => released.stopped.push(made),
            Err(Error::HeldOpen { pid, command, .. }) => {
                let reason = format!("process {pid} ({command}) holds it open");
                op.note("leave", &id.to_string(), &reason);
                released.left.push(Left { made, reason });
            }
            Err(err) => {
                released.failed.push((made.clone(), err));
                kept.push(made);
            }
        }
    }
    let bytes = match kept.is_empty() {
        true => None,
        false => {
            let mut rewritten = Record::new(name, kept);
            rewritten.tenant = tenant;
            Some(rewritten.encode(&path)?)
        }
    };
    op.replace_file(&path, bytes.as_deref())?;
    Ok(released)
}

/// Why `made` is no longer what the hook made, if it is not.
fn changed(op: &Operation<'_>, made: &Made, now: Option<&Running>) -> Result<Option<String>> {
    Ok(match (made, now) {
        (_, None) => Some("it is not running".to_owned()),
        (Made::Mdev { .. }, Some(Running::Mdev { .. })) => None,
        (Made::VendorType { type_id, .. }, Some(Running::VendorVf { type_id: now })) => {
            (type_id != now).then(|| format!("it holds type {now} now"))
        }
        (Made::Binding { address, driver }, Some(Running::PlainVf)) => {
            match PciDevice::new(op.paths(), *address).driver()? {
                Some(now) if now == *driver => None,
                now => Some(format!(
                    "it is bound to {} now",
                    now.as_deref().unwrap_or("no driver")
                )),
            }
        }
        (_, Some(_)) => Some("it holds another kind of vGPU now".to_owned()),
    })
}
