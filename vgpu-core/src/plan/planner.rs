//! The planner: from what the host has and holds to what a desired config asks, per GPU, an
//! ordered list of steps, or the reasons it cannot be done.
//!
//! [`plan`] is a pure function of its inputs: it reads nothing and changes nothing, so the same
//! host and config give the same plan, and `vgpuctl plan`, `assert` and `apply` agree.
//!
//! The rules, per GPU:
//!
//! - A size maps to the type of exactly that frame buffer in the entry's series (`Q` unless it
//!   says otherwise), or with `round_up` the smallest above it; `"12GiB"` without a count asks
//!   for as many as the type allows (and the GPU has VFs for).
//! - NVIDIA GPUs hold one type at a time (equal-size mode); Intel GVT-g GPUs mix types as long
//!   as their shares (`GVTg_V5_4` is a quarter) add up to at most the whole GPU; a plain SR-IOV
//!   GPU holds whole VFs, each an equal share of its local memory, so `"8x2GiB"` on a 16 GiB
//!   Flex 170 is 8 VFs.
//! - vGPUs of the wanted types are kept (running ones first); the others are destroyed, or
//!   undefined when only their definition exists. A vGPU a process holds open or a libvirt
//!   domain references ([`HostState::holds`]) is never destroyed or undefined: the GPU is
//!   refused instead.
//! - Every vGPU kept or made is defined with the entry's persistence; a VF count the plan sets
//!   is defined too, so `restore` brings the host back to the plan after a reboot.
//! - Steps run in this order: destroy and undefine, the VF count, start what is defined, fix
//!   definitions, create.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::desired::{Desired, Entry, Location, Partition, Selection, VfDriver};
use super::offers::{GpuView, Offer, Rule, model_matches};
use super::{DefinitionSet, HostState};
use crate::backend::PLAIN_VF_TYPE;
use crate::host::driver::is_passthrough_driver;
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, VgpuHandle};
use crate::state::store::Start;

/// What a config asks of the host, GPU by GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The config's name.
    pub config: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Every GPU a selection matched, by address.
    pub gpus: Vec<GpuPlan>,
    /// Selections that matched no GPU.
    pub unmatched: Vec<Unmatched>,
}

/// What the plan does on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuPlan {
    /// The GPU.
    pub gpu: PciAddress,
    /// Its model, from the PCI database.
    pub model: Option<String>,
    /// Its interface.
    pub backend: Backend,
    /// The selection that chose it, in words.
    pub selection: String,
    /// Where that selection is in the file.
    pub at: Location,
    /// The vGPUs it should hold.
    pub want: Vec<Want>,
    /// For a plain SR-IOV GPU, the VFs it should have.
    pub vfs: Option<u32>,
    /// vGPUs that stay as they are (or only get their definition fixed).
    pub keep: Vec<VgpuHandle>,
    /// The changes, in order; none when the GPU matches or is refused.
    pub steps: Vec<Step>,
    /// Why the GPU cannot be brought to the config; empty when it can.
    pub refusals: Vec<Refused>,
    /// What the GPU held when planned, checked again before its steps run.
    #[serde(skip)]
    pub(crate) before: Before,
}

/// The state a GPU's steps were planned from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Before {
    /// Its running vGPUs.
    pub(crate) vgpus: BTreeSet<VgpuHandle>,
    /// Its enabled VFs.
    pub(crate) num_vfs: u32,
}

impl Before {
    /// What `gpu` holds now.
    pub(crate) fn of(gpu: &Gpu) -> Before {
        let plain = gpu.backend == Backend::Sriov && gpu.vendor_id != Some(NVIDIA_VENDOR_ID);
        let vgpus = if plain {
            gpu.vfs
                .iter()
                .filter(|vf| vf.driver.as_deref().is_some_and(is_passthrough_driver))
                .map(|vf| VgpuHandle::Vf(vf.address))
                .collect()
        } else {
            gpu.vgpus.iter().map(|v| v.id).collect()
        };
        Before {
            vgpus,
            num_vfs: gpu.sriov.as_ref().map_or(0, |s| s.num_vfs),
        }
    }
}

/// vGPUs of one type a GPU should hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Want {
    /// The type's id, when the host lists it now.
    pub type_id: Option<String>,
    /// The type's name.
    pub type_name: Option<String>,
    /// Frame buffer of each, in MiB.
    pub framebuffer_mib: Option<u64>,
    /// How many.
    pub count: u32,
}

/// One change to one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Step {
    /// Set the VF count (enable, disable or change), and define it; `from == to` only defines it.
    Vfs {
        /// The count now.
        from: u32,
        /// The count wanted.
        to: u32,
    },
    /// Stop a vGPU and remove its definitions.
    Destroy {
        /// The vGPU.
        id: VgpuHandle,
        /// Its type id.
        type_id: String,
        /// Its type name, when known.
        type_name: Option<String>,
    },
    /// Remove the definitions of a vGPU (it is not running, or gets a new definition next).
    Undefine {
        /// The vGPU.
        id: VgpuHandle,
    },
    /// Start a defined vGPU that is not running.
    Start {
        /// The vGPU.
        id: VgpuHandle,
    },
    /// Define a running vGPU.
    Define {
        /// The vGPU.
        id: VgpuHandle,
        /// When it starts.
        start: Start,
    },
    /// Create and define one vGPU.
    Create {
        /// The type's id, when the host lists it now.
        type_id: Option<String>,
        /// The type's name, when known.
        type_name: Option<String>,
        /// When it starts.
        start: Start,
    },
}

impl Step {
    /// The type to create, as `create` takes it: the id when known, else the name.
    pub(crate) fn wanted_type(&self) -> Option<&str> {
        match self {
            Step::Create {
                type_id, type_name, ..
            } => type_id.as_deref().or(type_name.as_deref()),
            _ => None,
        }
    }
}

/// A reason a GPU cannot be brought to the config, with where in the file it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The reason.
    #[serde(flatten)]
    pub refusal: Refusal,
    /// The reason in words.
    pub message: String,
    /// The part of the file that asks for what cannot be done, if one does.
    pub at: Option<Location>,
}

impl Refused {
    fn new(refusal: Refusal, at: Option<Location>) -> Self {
        Refused {
            message: refusal.to_string(),
            refusal,
            at,
        }
    }
}

/// Why a GPU cannot be brought to the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Refusal {
    /// No type of that frame buffer in that series (and `round_up` is off, or none is larger).
    NoSuchSize {
        /// The size asked for, in MiB.
        framebuffer_mib: u64,
        /// The series, where the GPU's types have one.
        series: Option<char>,
        /// The sizes it offers in that series, in MiB.
        offered_mib: Vec<u64>,
    },
    /// The GPU offers no type by that name.
    UnknownType {
        /// The name asked for.
        wanted: String,
        /// What it offers.
        offered: Vec<String>,
    },
    /// Several types or sizes on a GPU that holds one at a time.
    OneTypeOnly {
        /// The types asked for.
        wanted: Vec<String>,
    },
    /// More vGPUs of a type than the GPU holds.
    TooMany {
        /// The type.
        type_name: String,
        /// How many were asked for.
        asked: u32,
        /// How many it holds at most.
        max: u32,
    },
    /// Types whose shares of the GPU add up to more than the whole.
    Oversubscribed {
        /// The types and counts asked for.
        wanted: Vec<String>,
    },
    /// More VFs than the GPU has.
    NotEnoughVfs {
        /// How many were needed.
        asked: u32,
        /// How many it has.
        vfs: u32,
    },
    /// "As many as fit" of a type whose per-GPU maximum is unknown.
    UnknownCapacity {
        /// The type.
        type_name: String,
    },
    /// A size on a plain SR-IOV GPU whose local memory is unknown (give a VF count instead).
    UnknownMemory,
    /// A VF count for a GPU that does not offer plain SR-IOV VFs.
    NotSriov {
        /// Its interface.
        backend: Backend,
    },
    /// The GPU offers no vGPUs.
    NotVirtualizable {
        /// Its interface.
        backend: Backend,
    },
    /// A vGPU the plan would take away is held by a guest.
    Held {
        /// The vGPU.
        id: VgpuHandle,
        /// What holds it (a process, a libvirt domain).
        by: String,
    },
    /// Several selections of the config match the GPU.
    Overlap {
        /// Where they are.
        selections: Vec<Location>,
    },
}

impl Refusal {
    /// Whether this refusal comes from the host's state (a guest holds a vGPU) rather than from
    /// the file: `apply` leaves such a GPU alone and carries out the others.
    pub fn is_held(&self) -> bool {
        matches!(self, Refusal::Held { .. })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoSuchSize {
                framebuffer_mib,
                series,
                offered_mib,
            } => {
                let sizes: Vec<String> = offered_mib.iter().map(|m| mib_text(*m)).collect();
                write!(
                    f,
                    "no type of {}{}; it offers {} (round_up = true takes the next larger)",
                    mib_text(*framebuffer_mib),
                    series
                        .map(|s| format!(" in series {s}"))
                        .unwrap_or_default(),
                    if sizes.is_empty() {
                        "none".to_owned()
                    } else {
                        sizes.join(", ")
                    }
                )
            }
            Refusal::UnknownType { wanted, offered } => write!(
                f,
                "no vGPU type {wanted:?}; it offers {}",
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
            Refusal::OneTypeOnly { wanted } => write!(
                f,
                "it holds one type (one size) at a time, not {}",
                wanted.join(" and ")
            ),
            Refusal::TooMany {
                type_name,
                asked,
                max,
            } => write!(f, "{asked} x {type_name} asked, it holds at most {max}"),
            Refusal::Oversubscribed { wanted } => {
                write!(f, "{} take more than the whole GPU", wanted.join(" + "))
            }
            Refusal::NotEnoughVfs { asked, vfs } => {
                write!(f, "{asked} VFs needed, it has {vfs}")
            }
            Refusal::UnknownCapacity { type_name } => write!(
                f,
                "how many {type_name} fit is unknown: give a count (\"4x...\")"
            ),
            Refusal::UnknownMemory => f.write_str(
                "its local memory is unknown, so a size cannot become a VF count: give vfs = N",
            ),
            Refusal::NotSriov { backend } => write!(
                f,
                "a VF count applies to plain SR-IOV GPUs; this one offers vGPUs through {backend}"
            ),
            Refusal::NotVirtualizable { backend } => {
                write!(f, "it offers no vGPUs (backend {backend})")
            }
            Refusal::Held { id, by } => write!(
                f,
                "{id} would be taken away, but {by} holds it: cannot proceed on this GPU"
            ),
            Refusal::Overlap { selections } => {
                let at: Vec<String> = selections.iter().map(Location::to_string).collect();
                write!(f, "selected by several entries (at {})", at.join(", "))
            }
        }
    }
}

/// A selection that matched no GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    /// The selection, in words.
    pub selection: String,
    /// Where it is in the file.
    pub at: Location,
    /// Whether it names a GPU by address (an error: that GPU is not on this host) rather than
    /// by criteria another host may meet.
    pub blocking: bool,
}

impl Plan {
    /// How many steps the plan takes, on GPUs that are not refused.
    pub fn changes(&self) -> usize {
        self.gpus
            .iter()
            .filter(|g| g.refusals.is_empty())
            .map(|g| g.steps.len())
            .sum()
    }

    /// Whether the host already is as the config asks: nothing to do and nothing refused.
    pub fn matches(&self) -> bool {
        self.changes() == 0
            && self.gpus.iter().all(|g| g.refusals.is_empty())
            && self.unmatched.iter().all(|u| !u.blocking)
    }

    /// Whether the file asks for something this host cannot do (a refusal other than a held
    /// vGPU, or a GPU address that is not here): then nothing is applied.
    pub fn blocked(&self) -> bool {
        self.unmatched.iter().any(|u| u.blocking)
            || self
                .gpus
                .iter()
                .flat_map(|g| &g.refusals)
                .any(|r| !r.refusal.is_held())
    }
}

/// Plans `desired` on the host `host` describes. Pure: reads and changes nothing.
pub fn plan(host: &HostState, desired: &Desired) -> Plan {
    let inventory = &host.inventory;
    let nvidia_order: Vec<PciAddress> = {
        let mut list: Vec<PciAddress> = inventory
            .gpus
            .iter()
            .filter(|g| g.vendor_id == Some(NVIDIA_VENDOR_ID))
            .map(|g| g.address)
            .collect();
        list.sort();
        list
    };
    let mut chosen: BTreeMap<PciAddress, Vec<&Entry>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    for entry in &desired.entries {
        let matched: Vec<&Gpu> = inventory
            .gpus
            .iter()
            .filter(|g| selects(&entry.selection, g, &nvidia_order))
            .collect();
        if matched.is_empty() {
            unmatched.push(Unmatched {
                selection: entry.selection.to_string(),
                at: entry.at,
                blocking: entry.selection.address.is_some(),
            });
        }
        for gpu in matched {
            chosen.entry(gpu.address).or_default().push(entry);
        }
    }
    let gpus = chosen
        .into_iter()
        .filter_map(|(address, entries)| {
            let gpu = inventory.gpus.iter().find(|g| g.address == address)?;
            Some(plan_gpu(host, gpu, &entries))
        })
        .collect();
    Plan {
        config: desired.name.clone(),
        file: desired.file.clone(),
        gpus,
        unmatched,
    }
}

/// Whether `selection` chooses `gpu`.
fn selects(selection: &Selection, gpu: &Gpu, nvidia_order: &[PciAddress]) -> bool {
    if let Some(address) = selection.address {
        if gpu.address != address {
            return false;
        }
    } else if gpu.backend == Backend::None {
        return false;
    }
    if let Some(model) = &selection.model {
        if !gpu
            .model
            .as_deref()
            .is_some_and(|m| model_matches(m, model))
        {
            return false;
        }
    }
    if selection.vendor.is_some() && gpu.vendor_id != selection.vendor {
        return false;
    }
    if selection.numa_node.is_some() && gpu.numa_node != selection.numa_node {
        return false;
    }
    if !selection.device_ids.is_empty()
        && !selection
            .device_ids
            .iter()
            .any(|(v, d)| gpu.vendor_id == Some(*v) && gpu.device_id == Some(*d))
    {
        return false;
    }
    if let Some(indices) = &selection.nvidia_indices {
        let position = nvidia_order.iter().position(|a| *a == gpu.address);
        if !position.is_some_and(|p| indices.contains(&(p as u32))) {
            return false;
        }
    }
    true
}

/// A vGPU on the GPU now: running, defined, or both.
#[derive(Debug, Clone)]
struct Current {
    id: VgpuHandle,
    type_id: String,
    name: Option<String>,
    running: bool,
    defined: Option<Start>,
    held: Option<String>,
}

fn plan_gpu(host: &HostState, gpu: &Gpu, entries: &[&Entry]) -> GpuPlan {
    let view = GpuView::new(gpu);
    let entry = entries[0];
    let currents = current(host, &view);
    let mut out = GpuPlan {
        gpu: gpu.address,
        model: gpu.model.clone(),
        backend: gpu.backend,
        selection: entry.selection.to_string(),
        at: entry.at,
        want: Vec::new(),
        vfs: None,
        keep: Vec::new(),
        steps: Vec::new(),
        refusals: Vec::new(),
        before: Before {
            vgpus: currents
                .iter()
                .filter(|c| c.running)
                .map(|c| c.id)
                .collect(),
            num_vfs: gpu.sriov.as_ref().map_or(0, |s| s.num_vfs),
        },
    };
    if entries.len() > 1 {
        let refusal = Refusal::Overlap {
            selections: entries.iter().map(|e| e.at).collect(),
        };
        out.refusals
            .push(Refused::new(refusal, Some(entries[1].at)));
        return out;
    }
    let wanted = match view.rule {
        Rule::None => Err(vec![Refused::new(
            Refusal::NotVirtualizable {
                backend: gpu.backend,
            },
            Some(entry.at),
        )]),
        Rule::Vfs => want_vfs(&view, entry),
        Rule::OneType | Rule::Shares => want_vgpus(&view, entry),
    };
    let wanted = match wanted {
        Ok(wanted) => wanted,
        Err(refusals) => {
            out.refusals = refusals;
            return out;
        }
    };
    out.want = wanted
        .types
        .iter()
        .map(|(offer, count)| Want {
            type_id: offer.id.clone(),
            type_name: offer.name.clone(),
            framebuffer_mib: offer.framebuffer_mib,
            count: *count,
        })
        .collect();
    out.vfs = wanted.vfs;
    diff(host, &view, entry, &wanted, currents, &mut out);
    if !out.refusals.is_empty() {
        out.steps.clear();
        out.keep.clear();
    }
    out
}

/// What one GPU should hold: types with counts, and for plain SR-IOV (or NVIDIA GPUs whose VFs
/// are off) the VF count.
struct Wanted {
    types: Vec<(Offer, u32)>,
    vfs: Option<u32>,
}

/// Resolves a partition on a GPU that holds vGPU types.
fn want_vgpus(view: &GpuView<'_>, entry: &Entry) -> Result<Wanted, Vec<Refused>> {
    let gpu = view.gpu;
    let mut refusals = Vec::new();
    let mut types: Vec<(Offer, u32, Location)> = Vec::new();
    let mut add = |offer: &Offer, count: u32, at: Location| match types
        .iter_mut()
        .find(|(o, _, _)| o == offer)
    {
        Some((_, n, _)) => *n = n.saturating_add(count),
        None => types.push((offer.clone(), count, at)),
    };
    match &entry.partition {
        Partition::Sizes(items) => {
            for item in items {
                match view.by_size(item.framebuffer_mib, entry.series, entry.round_up) {
                    Ok(offer) => match item.count.or_else(|| as_many_as_fit(view, offer)) {
                        Some(count) => add(offer, count, item.at),
                        None => refusals.push(Refused::new(
                            Refusal::UnknownCapacity {
                                type_name: offer.label(),
                            },
                            Some(item.at),
                        )),
                    },
                    Err(refusal) => refusals.push(Refused::new(refusal, Some(item.at))),
                }
            }
        }
        Partition::Types(items) => {
            for item in items {
                match view.by_name(&item.name) {
                    Ok(offer) => add(offer, item.count, item.at),
                    Err(refusal) => refusals.push(Refused::new(refusal, Some(item.at))),
                }
            }
        }
        Partition::Vfs { at, .. } => {
            refusals.push(Refused::new(
                Refusal::NotSriov {
                    backend: gpu.backend,
                },
                Some(*at),
            ));
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    if view.rule == Rule::OneType && types.len() > 1 {
        let wanted = types.iter().map(|(o, _, _)| o.label()).collect();
        return Err(vec![Refused::new(
            Refusal::OneTypeOnly { wanted },
            Some(types[1].2),
        )]);
    }
    for (offer, count, at) in &types {
        if let Some(max) = type_max(view, offer).filter(|max| count > max) {
            refusals.push(Refused::new(
                Refusal::TooMany {
                    type_name: offer.label(),
                    asked: *count,
                    max,
                },
                Some(*at),
            ));
        }
    }
    let total: u32 = types.iter().map(|(_, n, _)| *n).sum();
    if let (Some(slots), Rule::OneType) = (view.vf_slots, view.rule) {
        if total > slots && refusals.is_empty() {
            refusals.push(Refused::new(
                Refusal::NotEnoughVfs {
                    asked: total,
                    vfs: slots,
                },
                types.first().map(|t| t.2),
            ));
        }
    }
    if view.rule == Rule::Shares && refusals.is_empty() && types.len() > 1 {
        // Each type is a fraction of the GPU: the counts over the capacities add up to at most 1.
        let caps: Vec<u64> = types
            .iter()
            .map(|(o, _, _)| u64::from(type_max(view, o).unwrap_or(1).max(1)))
            .collect();
        let common: u64 = caps.iter().product();
        let used: u64 = types
            .iter()
            .zip(&caps)
            .map(|((_, n, _), cap)| u64::from(*n) * (common / cap))
            .sum();
        if used > common {
            let wanted = types
                .iter()
                .map(|(o, n, _)| format!("{n} x {}", o.label()))
                .collect();
            refusals.push(Refused::new(
                Refusal::Oversubscribed { wanted },
                types.get(1).map(|t| t.2),
            ));
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let nvidia_vfs_off = gpu.backend == Backend::Sriov && total > 0;
    Ok(Wanted {
        types: types.into_iter().map(|(o, n, _)| (o, n)).collect(),
        vfs: nvidia_vfs_off.then(|| view.vf_slots.unwrap_or(0)),
    })
}

/// How many vGPUs of `offer` the GPU holds: its per-GPU maximum. A GVT-g GPU with no vGPUs
/// says itself how many fit (its fences may allow fewer than the type's nominal count).
fn type_max(view: &GpuView<'_>, offer: &Offer) -> Option<u32> {
    let mut max = offer.max_instances?;
    if view.rule == Rule::Shares && view.gpu.vgpus.is_empty() {
        if let Some(listed) = view
            .gpu
            .types
            .iter()
            .find(|t| Some(&t.id) == offer.id.as_ref())
        {
            max = max.min(listed.available);
        }
    }
    Some(max)
}

/// "As many as fit": the type's maximum, and no more than the VFs vGPUs sit on.
fn as_many_as_fit(view: &GpuView<'_>, offer: &Offer) -> Option<u32> {
    let max = type_max(view, offer)?;
    Some(match (view.rule, view.vf_slots) {
        (Rule::OneType, Some(slots)) => max.min(slots),
        _ => max,
    })
}

/// Resolves a partition on a plain SR-IOV GPU into a VF count.
fn want_vfs(view: &GpuView<'_>, entry: &Entry) -> Result<Wanted, Vec<Refused>> {
    let total = view.vf_slots.unwrap_or(0);
    let refuse = |refusal: Refusal, at: Location| Err(vec![Refused::new(refusal, Some(at))]);
    let (count, at, share) = match &entry.partition {
        Partition::Vfs { count, at } => (*count, *at, None),
        Partition::Types(items) => match items.as_slice() {
            [] => (0, entry.at, None),
            [item] if item.name == PLAIN_VF_TYPE => (item.count, item.at, None),
            [item] => {
                return refuse(
                    Refusal::UnknownType {
                        wanted: item.name.clone(),
                        offered: vec![PLAIN_VF_TYPE.to_owned()],
                    },
                    item.at,
                );
            }
            [_, second, ..] => {
                let wanted = items.iter().map(|i| i.name.clone()).collect();
                return refuse(Refusal::OneTypeOnly { wanted }, second.at);
            }
        },
        Partition::Sizes(items) => {
            let [item] = items.as_slice() else {
                let wanted = items.iter().map(|i| mib_text(i.framebuffer_mib)).collect();
                return refuse(
                    Refusal::OneTypeOnly { wanted },
                    items.get(1).map_or(entry.at, |i| i.at),
                );
            };
            let Some(memory) = view.memory_mib else {
                return refuse(Refusal::UnknownMemory, item.at);
            };
            let fit = u32::try_from(memory / item.framebuffer_mib).unwrap_or(u32::MAX);
            let count = item.count.unwrap_or(fit.min(total));
            if count > fit || fit == 0 {
                return refuse(
                    Refusal::TooMany {
                        type_name: format!("{} VF", mib_text(item.framebuffer_mib)),
                        asked: count.max(1),
                        max: fit,
                    },
                    item.at,
                );
            }
            (count, item.at, Some(item.framebuffer_mib))
        }
    };
    if count > total {
        return refuse(
            Refusal::NotEnoughVfs {
                asked: count,
                vfs: total,
            },
            at,
        );
    }
    let offer = Offer {
        id: Some(PLAIN_VF_TYPE.to_owned()),
        name: None,
        framebuffer_mib: share.or_else(|| {
            view.memory_mib
                .filter(|_| count > 0)
                .map(|memory| memory / u64::from(count))
        }),
        max_instances: Some(total),
        series: None,
        mig: false,
    };
    let types = match entry.vf_driver {
        VfDriver::VfioPci if count > 0 => vec![(offer, count)],
        _ => Vec::new(),
    };
    Ok(Wanted {
        types,
        vfs: Some(count),
    })
}

/// Every vGPU on the GPU: running ones, and those only a definition describes.
fn current(host: &HostState, view: &GpuView<'_>) -> Vec<Current> {
    let gpu = view.gpu;
    let defs = &host.definitions;
    let vf_addresses = vf_addresses(gpu);
    let on_gpu = |a: PciAddress| a == gpu.address || vf_addresses.contains(&a);
    let mut found: BTreeMap<VgpuHandle, Current> = BTreeMap::new();
    let mut add = |id: VgpuHandle, type_id: String, running: bool, defined: Option<Start>| {
        let entry = found.entry(id).or_insert_with(|| Current {
            id,
            name: view.name_of(&type_id),
            type_id,
            running: false,
            defined: None,
            held: host.holds.get(&id).cloned(),
        });
        entry.running |= running;
        if defined.is_some() {
            entry.defined = defined;
        }
    };
    if view.rule == Rule::Vfs {
        for vf in &gpu.vfs {
            if vf.driver.as_deref().is_some_and(is_passthrough_driver) {
                add(
                    VgpuHandle::Vf(vf.address),
                    PLAIN_VF_TYPE.to_owned(),
                    true,
                    None,
                );
            }
        }
        for def in &defs.bindings {
            if def.address != gpu.address && on_gpu(def.address) {
                add(
                    VgpuHandle::Vf(def.address),
                    PLAIN_VF_TYPE.to_owned(),
                    false,
                    Some(def.start),
                );
            }
        }
    } else {
        for vgpu in &gpu.vgpus {
            add(vgpu.id, vgpu.type_id.clone(), true, None);
        }
        for def in &defs.mdevs {
            if def.parent.parse::<PciAddress>().is_ok_and(on_gpu) {
                add(
                    VgpuHandle::Mdev(def.uuid),
                    def.mdev_type.clone(),
                    false,
                    Some(def.start),
                );
            }
        }
        for def in &defs.vf_vgpus {
            if def.gpu == gpu.address || on_gpu(def.vf) {
                add(
                    VgpuHandle::Vf(def.vf),
                    def.type_id.to_string(),
                    false,
                    Some(def.start),
                );
            }
        }
    }
    let mut list: Vec<Current> = found.into_values().collect();
    // Running vGPUs are kept before ones only defined; then by handle, for a stable plan.
    list.sort_by_key(|c| (!c.running, c.id));
    list
}

/// The addresses the GPU's VFs have or would have: the enabled ones, and those the SR-IOV
/// capability's offset and stride give for every VF it supports.
fn vf_addresses(gpu: &Gpu) -> Vec<PciAddress> {
    let mut out: Vec<PciAddress> = gpu.vfs.iter().map(|v| v.address).collect();
    if let Some(sriov) = &gpu.sriov {
        if let (Some(offset), Some(stride)) = (sriov.offset, sriov.stride) {
            let pf = gpu.address;
            let rid = (u32::from(pf.bus()) << 8)
                | (u32::from(pf.device()) << 3)
                | u32::from(pf.function());
            for i in 0..sriov.total_vfs {
                let vf = rid + offset + stride * i;
                let address = u8::try_from(vf >> 8).ok().and_then(|bus| {
                    PciAddress::new(pf.domain(), bus, ((vf >> 3) & 0x1f) as u8, (vf & 7) as u8)
                });
                if let Some(address) = address {
                    out.push(address);
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The steps from `currents` to `wanted`.
fn diff(
    host: &HostState,
    view: &GpuView<'_>,
    entry: &Entry,
    wanted: &Wanted,
    currents: Vec<Current>,
    out: &mut GpuPlan,
) {
    let gpu = view.gpu;
    let start = entry.persistence;
    let num_vfs = gpu.sriov.as_ref().map_or(0, |s| s.num_vfs);
    // A plain SR-IOV GPU whose VF count changes loses every VF, and so every vGPU on one.
    let recount = view.rule == Rule::Vfs && wanted.vfs.is_some_and(|n| n != num_vfs);
    let mut kept = vec![0u32; wanted.types.len()];
    let mut keep = Vec::new();
    let mut remove = Vec::new();
    for current in currents {
        let slot = (!recount)
            .then(|| {
                wanted
                    .types
                    .iter()
                    .enumerate()
                    .position(|(i, (offer, count))| {
                        kept[i] < *count && offer.is(&current.type_id, current.name.as_deref())
                    })
            })
            .flatten();
        match slot {
            Some(i) => {
                kept[i] += 1;
                keep.push(current);
            }
            None => remove.push(current),
        }
    }
    for current in &remove {
        if let Some(by) = &current.held {
            out.refusals.push(Refused::new(
                Refusal::Held {
                    id: current.id,
                    by: by.clone(),
                },
                Some(entry.at),
            ));
            continue;
        }
        out.steps.push(if current.running {
            Step::Destroy {
                id: current.id,
                type_id: current.type_id.clone(),
                type_name: current.name.clone(),
            }
        } else {
            Step::Undefine { id: current.id }
        });
    }
    if let Some(to) = wanted.vfs {
        let defined = sriov_defined(&host.definitions, gpu.address);
        if to != num_vfs || (view.rule == Rule::Vfs && defined != Some(to)) {
            out.steps.push(Step::Vfs { from: num_vfs, to });
        }
    }
    for current in &keep {
        if !current.running {
            out.steps.push(Step::Start { id: current.id });
        }
    }
    for current in &keep {
        match current.defined {
            Some(now) if now == start => {}
            Some(_) => {
                out.steps.push(Step::Undefine { id: current.id });
                out.steps.push(Step::Define {
                    id: current.id,
                    start,
                });
            }
            None => out.steps.push(Step::Define {
                id: current.id,
                start,
            }),
        }
    }
    for (i, (offer, count)) in wanted.types.iter().enumerate() {
        for _ in kept[i]..*count {
            out.steps.push(Step::Create {
                type_id: offer.id.clone(),
                type_name: offer.name.clone(),
                start,
            });
        }
    }
    out.keep = keep.iter().map(|c| c.id).collect();
}

fn sriov_defined(definitions: &DefinitionSet, pf: PciAddress) -> Option<u32> {
    definitions
        .sriov
        .iter()
        .find(|d| d.pf == pf)
        .map(|d| d.num_vfs)
}

/// A size in words: `12 GiB`, `512 MiB`.
pub(crate) fn mib_text(mib: u64) -> String {
    if mib % 1024 == 0 {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}
