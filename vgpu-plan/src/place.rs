//! Placement for orchestrators: which GPUs (and VFs) `count` new vGPUs of one size or type
//! should go on, under each GPU's rules. It only chooses; creating is the manager's job.
//!
//! A GPU can take a vGPU when it offers the type (for a size: the type of exactly that frame
//! buffer in the series, or the next larger with `round_up`), holds no vGPU of another type
//! where it holds one type at a time, has an instance available after what definitions hold
//! for vGPUs that are not running, and, for VF-based interfaces, has a free VF no definition
//! names. Among those:
//!
//! - [`Policy::Pack`] fills partly used GPUs first, then empty ones, the smallest first: whole
//!   GPUs stay free for large vGPUs. Among partly used GPUs, a GPU in mixed-size mode ranks by
//!   what the pick takes from larger sizes ([`crate::placement::Loss`]). An equal-size GPU
//!   takes nothing, so a partly used one comes before a mixed-size GPU: a mixed-size pick
//!   nearly always falls in a larger placement. Then the one left with the least room (best fit); then the
//!   one holding the most vGPUs, as one holding few is the likeliest to empty;
//! - [`Policy::Spread`] takes the GPU with the most room left (fewest vGPUs on a tie): load is
//!   balanced.
//!
//! Ties go to the lower address, so the same host and request give the same answer.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::capacity::{self, Ranker};
use crate::desired::Location;
use crate::error::{Error, Result};
use crate::model::PLAIN_VF_TYPE;
use crate::model::definition::Start;
use crate::model::holder::{Holder, Tenant};
use crate::model::is_passthrough_driver;
use crate::model::kind::DeviceKind;
use crate::model::nvml::{Fact, SchedulerPolicy};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, VgpuType};
use crate::offers::{Rule, sriov_memory_mib};
use crate::parse::strip_vendor_prefix;
use crate::placement::Loss;
use crate::steps::{Before, GpuPlan, Plan, Step, Want};
use crate::tenants::{self, Holding, Violation};
use crate::{DefinitionSet, HostState};

/// How to choose among GPUs that can take a vGPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Fill partly used GPUs first (best fit).
    #[default]
    Pack,
    /// Balance vGPUs across GPUs.
    Spread,
}

/// What vGPUs to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceRequest {
    /// How many.
    pub count: u32,
    /// Of which size or type.
    pub want: PlaceWant,
    /// Only on GPUs of this NUMA node.
    pub numa_node: Option<u32>,
}

/// The size or type of the vGPUs to place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PlaceWant {
    /// A frame buffer size, mapped on each GPU as a plan maps it.
    Framebuffer {
        /// MiB.
        mib: u64,
        /// The NVIDIA series (`Q` usually).
        series: char,
        /// Take the smallest larger type when no type has exactly this frame buffer.
        round_up: bool,
    },
    /// A type: an id, a name, or a name without its vendor prefix; `vf` for a whole plain VF.
    Type(String),
}

/// Where one new vGPU goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Pick {
    /// The physical GPU.
    pub gpu: PciAddress,
    /// The type's id on that GPU.
    pub type_id: String,
    /// The type's name, when the GPU states it.
    pub type_name: Option<String>,
    /// Frame buffer of the vGPU, in MiB, when known.
    pub framebuffer_mib: Option<u64>,
    /// The VF it goes on, for VF-based interfaces.
    pub vf: Option<PciAddress>,
    /// The scheduler its GPU must be set to first, for a tenant's QoS class: the GPU's
    /// scheduler does not serve the class now, but the GPU holds no vGPU, so a plan can set
    /// it. `None`: the GPU serves the pick as it is.
    pub needs_scheduler: Option<SchedulerPolicy>,
    /// On a GPU in mixed-size mode, the placement id `create` takes for it after the picks
    /// before it on the same GPU; `None` in equal-size mode.
    pub placement_id: Option<u32>,
}

/// One GPU that can take vGPUs of the request, and how many.
struct Slot<'a> {
    gpu: &'a Gpu,
    ty: Option<&'a VgpuType>,
    room: u32,
    in_use: u32,
    /// Whether its vGPUs go on VFs (chosen when picked: most slots are never picked).
    on_vfs: bool,
    free_vfs: Option<Vec<PciAddress>>,
    framebuffer_mib: Option<u64>,
    taken: u32,
    /// On a GPU in mixed-size mode: where its next vGPU goes and what that takes away.
    mixed: Option<Ranker>,
}

/// Whose new vGPUs are placed, under which tenant policy, beside what the host holds: only
/// GPUs where each new vGPU keeps the policy are chosen ([`tenants::check`]). GPUs that keep
/// it as they are come first. Then come NVIDIA GPUs that hold no vGPU and keep it once their
/// scheduler is set ([`Pick::needs_scheduler`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    /// The tenant the vGPUs are for.
    pub tenant: Tenant,
    /// The host's tenant policy.
    pub policy: tenants::Policy,
    /// What every domain holds now.
    pub held: Vec<Holding>,
}

/// Chooses GPUs (and VFs) for `request.count` new vGPUs on the host `host` describes, under
/// `policy`. Fails with [`Error::NoPlacement`] when fewer fit (saying how many), choosing
/// nothing. Pure: reads and changes nothing.
pub fn place(host: &HostState, request: &PlaceRequest, policy: Policy) -> Result<Vec<Pick>> {
    place_with(host, request, policy, None)
}

/// [`place`] for a tenant: each pick keeps the tenant policy beside what is held and what the
/// earlier picks take ([`tenants::check`], as the hook and `attach` ask). A GPU whose
/// scheduler must be set first comes after every GPU that keeps the policy as it is, and its
/// pick names the scheduler ([`Pick::needs_scheduler`]). Fails with
/// [`Error::PolicyPlacement`] naming the first rule that keeps a GPU with room from it when
/// fewer fit.
pub fn place_for_tenant(
    host: &HostState,
    request: &PlaceRequest,
    policy: Policy,
    tenancy: &Tenancy,
) -> Result<Vec<Pick>> {
    place_with(host, request, policy, Some(tenancy))
}

/// What a pick from `slot` would be for `tenancy`'s tenant, with what its GPU gives it now
/// (its scheduler as `host` read it).
fn holding(host: &HostState, tenancy: &Tenancy, slot: &Slot<'_>) -> Holding {
    // As the isolation report's kinds say: a whole plain VF or a MIG-backed type.
    let kind = DeviceKind::of_type(slot.ty);
    let scheduler = host.schedulers.get(&slot.gpu.address);
    Holding {
        // The domain is not made yet: the policy counts only its tenant.
        holder: Holder {
            domain: String::new(),
            uuid: Uuid::nil(),
            tenant: Some(tenancy.tenant.clone()),
        },
        gpu: slot.gpu.address,
        framebuffer_mib: slot.framebuffer_mib.unwrap_or(0),
        hardware: kind.partitioned_in_hardware(),
        service: tenants::service(slot.gpu, kind, slot.ty, scheduler),
    }
}

/// Whether a pick from `slot` keeps `tenancy`'s policy beside `held`: `Ok(None)` with the GPU
/// as it is, `Ok(Some(policy))` once its scheduler is `policy` (the lowest that does), else
/// the first rule it breaks as it is. Only an NVIDIA GPU whose scheduler NVML read and that
/// holds no vGPU may have its scheduler set: NVML sets it only then.
fn keeps(
    host: &HostState,
    tenancy: &Tenancy,
    held: &[Holding],
    slot: &Slot<'_>,
) -> std::result::Result<Option<SchedulerPolicy>, Violation> {
    let now = holding(host, tenancy, slot);
    let Some(violation) = tenants::check(&tenancy.policy, held, std::slice::from_ref(&now))
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let settable = matches!(violation, Violation::Qos { .. })
        && slot.gpu.vendor_id == Some(NVIDIA_VENDOR_ID)
        && matches!(host.schedulers.get(&slot.gpu.address), Some(Fact::Value(_)))
        && slot.in_use == 0
        && slot.gpu.vgpus.is_empty();
    if !settable {
        return Err(violation);
    }
    SchedulerPolicy::ALL
        .into_iter()
        .find(|policy| {
            let set = with_scheduler(now.clone(), Some(*policy));
            tenants::check(&tenancy.policy, held, &[set]).is_empty()
        })
        .map(Some)
        .ok_or(violation)
}

/// `holding` on a GPU whose scheduler is set to `policy` first (`None`: as it is).
fn with_scheduler(mut holding: Holding, policy: Option<SchedulerPolicy>) -> Holding {
    if policy.is_some() {
        holding.service.scheduler = policy;
    }
    holding
}

fn place_with(
    host: &HostState,
    request: &PlaceRequest,
    policy: Policy,
    tenancy: Option<&Tenancy>,
) -> Result<Vec<Pick>> {
    let candidates: Vec<&Gpu> = host
        .inventory
        .gpus
        .iter()
        .filter(|g| is_candidate(g, request.numa_node))
        .collect();
    if let PlaceWant::Type(wanted) = &request.want {
        not_offered(&candidates, wanted)?;
    }
    let slots: Vec<Slot<'_>> = candidates
        .iter()
        .filter_map(|g| slot(host, g, &request.want))
        .collect();
    choose(host, slots, request, policy, tenancy).map_err(|err| with_reasons(host, request, err))
}

/// `err`, when it is [`Error::NoPlacement`], with each candidate GPU's reason, not only the
/// sum: which GPU to free, or why none will do. [`place`] and [`Placer`] say the same.
fn with_reasons(host: &HostState, request: &PlaceRequest, err: Error) -> Error {
    match err {
        Error::NoPlacement { asked, fits, .. } => Error::NoPlacement {
            asked,
            fits,
            gpus: host
                .inventory
                .gpus
                .iter()
                .filter(|g| is_candidate(g, request.numa_node))
                .map(|g| room_text(host, g, &request.want))
                .collect(),
        },
        other => other,
    }
}

/// What `gpu` takes of `want`, with what bounds it: `0000:3b:00.0 takes 0 (max 16)`.
fn room_text(host: &HostState, gpu: &Gpu, want: &PlaceWant) -> String {
    let address = gpu.address;
    let type_id = match gpu.backend {
        Backend::Sriov if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) => PLAIN_VF_TYPE.to_owned(),
        _ => match choose_type(gpu, want) {
            Some(ty) => ty.id.clone(),
            None => return format!("{address} offers no type of that size or name"),
        },
    };
    let room = capacity::room(host, gpu, &type_id);
    match slot(host, gpu, want) {
        Some(_) => format!("{address} takes {} ({})", room.available, room.limit),
        None if room.available > 0 => format!("{address}: its VFs' share is too small"),
        None => format!("{address} takes 0 ({})", room.limit),
    }
}

/// Whether `gpu` may take a request's vGPUs: it offers some, on `numa_node` when one is asked.
fn is_candidate(gpu: &Gpu, numa_node: Option<u32>) -> bool {
    gpu.backend != Backend::None && (numa_node.is_none() || gpu.numa_node == numa_node)
}

/// The picks for `request` among `slots` (see the module documentation): the one choice
/// [`place`] and [`Placer::place`] make.
fn choose(
    host: &HostState,
    mut slots: Vec<Slot<'_>>,
    request: &PlaceRequest,
    policy: Policy,
    tenancy: Option<&Tenancy>,
) -> Result<Vec<Pick>> {
    let capacity: u32 = slots.iter().map(|s| s.room).sum();
    if capacity < request.count {
        return Err(Error::NoPlacement {
            asked: request.count,
            fits: capacity,
            gpus: Vec::new(),
        });
    }
    let mut picks = Vec::with_capacity(request.count as usize);
    let mut held = tenancy.map(|t| t.held.clone()).unwrap_or_default();
    // The first rule that kept a GPU with room from the tenant, for the error.
    let mut refusal: Option<Violation> = None;
    for _ in 0..request.count {
        let best = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.taken < s.room)
            .filter_map(|(i, s)| match tenancy {
                None => Some((i, s, None)),
                Some(tenancy) => match keeps(host, tenancy, &held, s) {
                    Ok(needs) => Some((i, s, needs)),
                    Err(violation) => {
                        refusal.get_or_insert(violation);
                        None
                    }
                },
            })
            .min_by_key(|(_, s, needs)| {
                let left = s.room - s.taken - 1;
                let load = s.in_use + s.taken;
                // On a mixed-size GPU: what the pick takes away from the larger sizes. An
                // equal-size GPU takes only its one type, so it loses no other size.
                let mixed = s.mixed.as_ref().and_then(Ranker::rank);
                let loss = mixed.map(|(_, loss)| loss.clone()).unwrap_or_default();
                match policy {
                    // An empty GPU last, of either mode. Then the least loss; then, on an
                    // equal-size GPU, the fewest left. Then the GPU holding the most vGPUs:
                    // one holding few is the likeliest to empty, and an empty GPU is what the
                    // largest types need.
                    Policy::Pack => (
                        needs.is_some(),
                        load == 0,
                        loss,
                        if mixed.is_some() { 0 } else { left },
                        u32::MAX - load,
                        s.gpu.address,
                    ),
                    Policy::Spread => (
                        needs.is_some(),
                        false,
                        Loss::default(),
                        u32::MAX - left,
                        load,
                        s.gpu.address,
                    ),
                }
            })
            .map(|(i, _, needs)| (i, needs));
        let Some((i, needs_scheduler)) = best else {
            let (Some(tenancy), Some(violation)) = (tenancy, refusal) else {
                break;
            };
            return Err(Error::PolicyPlacement {
                tenant: tenancy.tenant.name.clone(),
                asked: request.count,
                fits: picks.len() as u32,
                violation: Box::new(violation),
            });
        };
        if let Some(tenancy) = tenancy {
            held.push(with_scheduler(
                holding(host, tenancy, &slots[i]),
                needs_scheduler,
            ));
        }
        let slot = &mut slots[i];
        let vf = match slot.on_vfs {
            true => {
                let free = slot
                    .free_vfs
                    .get_or_insert_with(|| free_vfs(slot.gpu, &host.definitions));
                (!free.is_empty()).then(|| free.remove(0))
            }
            false => None,
        };
        slot.taken += 1;
        let placement_id = slot.mixed.as_mut().and_then(Ranker::take);
        picks.push(Pick {
            gpu: slot.gpu.address,
            type_id: slot
                .ty
                .map_or_else(|| PLAIN_VF_TYPE.to_owned(), |t| t.id.clone()),
            type_name: slot.ty.and_then(|t| t.name.clone()),
            framebuffer_mib: slot.framebuffer_mib,
            vf,
            needs_scheduler,
            placement_id,
        });
    }
    Ok(picks)
}

/// A plan that creates the vGPUs `picks` name (defined with `start`), GPU by GPU, for
/// `vgpu-core`'s `Manager::apply`: each GPU's vGPUs are made as one operation, and
/// undone together if one fails. A GPU whose picks need a scheduler has it set first
/// ([`Pick::needs_scheduler`]). The manager puts each where `create` would (the first free
/// VF no definition names), which is where [`place`] chose on a host that has not changed.
pub fn plan_picks(host: &HostState, picks: &[Pick], start: Start) -> Plan {
    let mut by_gpu: BTreeMap<PciAddress, Vec<&Pick>> = BTreeMap::new();
    for pick in picks {
        by_gpu.entry(pick.gpu).or_default().push(pick);
    }
    let gpus = by_gpu
        .into_iter()
        .filter_map(|(address, picks)| {
            let gpu = host.inventory.gpus.iter().find(|g| g.address == address)?;
            let first = picks.first()?;
            Some(GpuPlan {
                gpu: address,
                model: gpu.model.clone(),
                backend: gpu.backend,
                selection: "placement".to_owned(),
                at: Location::default(),
                want: vec![Want {
                    type_id: Some(first.type_id.clone()),
                    type_name: first.type_name.clone(),
                    framebuffer_mib: first.framebuffer_mib,
                    count: picks.len() as u32,
                }],
                vfs: None,
                vf_memory_mib: Vec::new(),
                keep: Vec::new(),
                steps: picks
                    .iter()
                    .find_map(|p| p.needs_scheduler)
                    .map(|policy| Step::Scheduler {
                        policy,
                        timeslice_ms: None,
                    })
                    .into_iter()
                    .chain(picks.iter().map(|p| Step::Create {
                        type_id: Some(p.type_id.clone()),
                        type_name: p.type_name.clone(),
                        start,
                        placement: None,
                    }))
                    .collect(),
                refusals: Vec::new(),
                tenant: None,
                before: Before::of(gpu),
            })
        })
        .collect();
    Plan {
        config: "placement".to_owned(),
        file: PathBuf::new(),
        gpus,
        unmatched: Vec::new(),
    }
}

/// Refuses a type no GPU of `candidates` offers, naming what they offer, so that a typo does
/// not read as a full host.
fn not_offered(candidates: &[&Gpu], wanted: &str) -> Result<()> {
    let want = PlaceWant::Type(wanted.to_owned());
    if candidates.iter().any(|g| offers(g, &want)) {
        return Ok(());
    }
    let mut offered: Vec<String> = candidates
        .iter()
        .flat_map(|g| g.types.iter())
        .map(|t| t.label().to_owned())
        .collect();
    offered.sort();
    offered.dedup();
    Err(Error::TypeNotOffered {
        wanted: wanted.to_owned(),
        offered,
    })
}

/// Whether `gpu` offers the type `want` names (a size is not checked here: always).
fn offers(gpu: &Gpu, want: &PlaceWant) -> bool {
    match want {
        PlaceWant::Type(wanted) => {
            choose_type(gpu, want).is_some()
                || (wanted == PLAIN_VF_TYPE && gpu.backend == Backend::Sriov)
        }
        PlaceWant::Framebuffer { .. } => true,
    }
}

/// The slot `gpu` offers for `want`, if it can take any: its room is [`capacity::room`]'s.
fn slot<'a>(host: &HostState, gpu: &'a Gpu, want: &PlaceWant) -> Option<Slot<'a>> {
    let rule = match gpu.backend {
        Backend::Sriov if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) => Rule::Vfs,
        Backend::Sriov | Backend::None => return None,
        Backend::Mdev if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) => Rule::Shares,
        _ => Rule::OneType,
    };
    let in_use: u32 = gpu.types.iter().map(|t| t.in_use).sum();
    if rule == Rule::Vfs {
        let share = sriov_memory_mib(gpu)
            .zip(u64::try_from(gpu.vfs.len()).ok().filter(|n| *n > 0))
            .map(|(memory, n)| memory / n);
        let fits = match want {
            PlaceWant::Type(name) => name == PLAIN_VF_TYPE,
            PlaceWant::Framebuffer { mib, .. } => share.is_some_and(|s| s >= *mib),
        };
        if !fits {
            return None;
        }
        let room = capacity::room(host, gpu, PLAIN_VF_TYPE).available;
        return (room > 0).then_some(Slot {
            gpu,
            ty: None,
            room,
            in_use,
            on_vfs: true,
            free_vfs: None,
            framebuffer_mib: share,
            taken: 0,
            mixed: None,
        });
    }
    let ty = choose_type(gpu, want)?;
    let room = capacity::room(host, gpu, &ty.id).available;
    (room > 0).then_some(Slot {
        gpu,
        ty: Some(ty),
        room,
        in_use,
        on_vfs: gpu.backend != Backend::Mdev,
        free_vfs: None,
        framebuffer_mib: ty.framebuffer_mib,
        taken: 0,
        mixed: Ranker::new(host, gpu, ty),
    })
}

/// Whether a vGPU can go on `vf`: it holds none, no passthrough driver has it, and no
/// definition names it.
fn is_free(vf: &crate::model::Vf, held: &[PciAddress]) -> bool {
    vf.vgpu_type.is_none()
        && !vf.driver.as_deref().is_some_and(is_passthrough_driver)
        && !held.contains(&vf.address)
}

/// The VFs of `gpu` a vGPU can go on, in `virtfnN` order.
fn free_vfs(gpu: &Gpu, defs: &DefinitionSet) -> Vec<PciAddress> {
    let held = capacity::reservations(defs, gpu).vfs;
    gpu.vfs
        .iter()
        .filter(|vf| is_free(vf, &held))
        .map(|vf| vf.address)
        .collect()
}

/// The type of `gpu` that `want` names.
fn choose_type<'a>(gpu: &'a Gpu, want: &PlaceWant) -> Option<&'a VgpuType> {
    match want {
        PlaceWant::Type(name) => {
            let bare = strip_vendor_prefix(name);
            gpu.types.iter().find(|t| t.id == *name).or_else(|| {
                gpu.types.iter().find(|t| {
                    t.name.as_deref().is_some_and(|n| {
                        n == name || strip_vendor_prefix(n).eq_ignore_ascii_case(bare)
                    })
                })
            })
        }
        PlaceWant::Framebuffer {
            mib,
            series,
            round_up,
        } => {
            // The frame buffer is compared first: it rules out most types without reading a name.
            let in_series = |t: &VgpuType| {
                t.name
                    .as_deref()
                    .and_then(series_of)
                    .is_none_or(|s| s == *series)
            };
            let exact = gpu
                .types
                .iter()
                .filter(|t| t.framebuffer_mib == Some(*mib) && in_series(t))
                .min_by_key(|t| &t.id);
            match (exact, round_up) {
                (Some(t), _) => Some(t),
                (None, true) => gpu
                    .types
                    .iter()
                    .filter(|t| t.framebuffer_mib.is_some_and(|fb| fb > *mib) && in_series(t))
                    .min_by_key(|t| (t.framebuffer_mib, &t.id)),
                (None, false) => None,
            }
        }
    }
}

/// The series letter of a time-sliced NVIDIA type name (`Q` of `NVIDIA L40S-12Q`); `None` for
/// other names and MIG-backed types (which need GPU instances and are never placed by size).
fn series_of(name: &str) -> Option<char> {
    let (head, size) = name.rsplit_once('-')?;
    // MIG-backed names have a slice count before the size: `A100-1-5C`.
    if head
        .rsplit_once('-')
        .is_some_and(|(_, s)| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some('-');
    }
    let digits = size.bytes().take_while(u8::is_ascii_digit).count();
    size[digits..]
        .chars()
        .next()
        .filter(|c| digits > 0 && matches!(c, 'A' | 'B' | 'C' | 'Q'))
}

mod placer;
pub use placer::Placer;

#[cfg(test)]
mod tenant_tests;
#[cfg(test)]
pub(crate) mod tests;
