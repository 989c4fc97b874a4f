//! Plain SR-IOV GPUs in a plan: a partition becomes a VF count and, where it asks for VF
//! sizes other than the driver's equal share, a local-memory quota per VF.
//!
//! A plain SR-IOV GPU holds whole VFs. Its driver gives each VF an equal share of local memory
//! when the VFs are enabled; Intel's SR-IOV drivers (out-of-tree `i915`, `xe`) also let each
//! VF's share be set, `drm/card<N>/iov/vf<M>/gt*/lmem_quota` in bytes, while no driver uses the
//! VF (intel-gpu-i915-backports, `gt/iov/intel_iov_sysfs.c` and `intel_iov_provisioning.c`).
//!
//! - `vfs = N` and `types = { vf = N }` ask for a count; the driver's share stands.
//! - One size, `"4x2GiB"`, asks for that many VFs of that size (without a count, as many as
//!   fit); a list, `["8GiB", "4GiB", "4GiB"]`, for one VF per size (`count` of them for
//!   `"2x4GiB"`), in VF order: the first size is `vf1`'s.
//! - The sizes add up to at most the GPU's local memory: what its driver says it can give the
//!   VFs ([`HostState::local_memory_mib`]), else the nominal memory of its model
//!   (`offers::sriov_memory_mib`).
//! - Sizes that are the driver's equal share need no quota. Otherwise each VF whose quota
//!   differs gets a [`Step::Quota`], the lowered ones first, so that the quotas never add up to
//!   more than the driver has while they change. A GPU whose driver takes no quotas is refused
//!   ([`Refusal::NoQuotas`]), and so is one whose VF to change is bound to a guest's driver or
//!   held open ([`Refusal::QuotaInUse`]).

use super::Wanted;
use crate::HostState;
use crate::desired::{Entry, Location, Partition, VfDriver};
use crate::model::PLAIN_VF_TYPE;
use crate::model::is_passthrough_driver;
use crate::model::pci::PciAddress;
use crate::model::{Gpu, VgpuHandle};
use crate::offers::{GpuView, Offer, sriov_memory_mib};
use crate::steps::{GpuPlan, Refusal, Refused, Step, mib_text};

/// The local memory `gpu` can give its VFs, in MiB: what its driver says, else its model's.
pub(super) fn local_memory(host: &HostState, gpu: &Gpu) -> Option<u64> {
    host.local_memory_mib
        .get(&gpu.address)
        .copied()
        .or_else(|| sriov_memory_mib(gpu))
}

/// Whether a quota read back as `found_mib` is `wanted_mib`: i915 rounds a quota up to whole
/// 2 MiB (`pf_provision_lmem`).
pub fn quota_matches(found_mib: u64, wanted_mib: u64) -> bool {
    found_mib == wanted_mib || found_mib == wanted_mib.next_multiple_of(2)
}

/// Resolves a partition on a plain SR-IOV GPU into a VF count, and for sizes, each VF's size.
pub(super) fn want_vfs(
    host: &HostState,
    view: &GpuView<'_>,
    entry: &Entry,
) -> Result<Wanted, Vec<Refused>> {
    let total = view.vf_slots.unwrap_or(0);
    let refuse = |refusal: Refusal, at: Location| Err(vec![Refused::new(refusal, Some(at))]);
    let memory = local_memory(host, view.gpu);
    let (count, at, sizes) = match &entry.partition {
        Partition::Vfs { count, at } => (*count, *at, Vec::new()),
        Partition::Types(items) => match items.as_slice() {
            [] => (0, entry.at, Vec::new()),
            [item] if item.name == PLAIN_VF_TYPE => (item.count, item.at, Vec::new()),
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
        Partition::Unchanged => {
            return refuse(
                Refusal::MigUnknown {
                    why: "a plain SR-IOV GPU has no MIG mode".to_owned(),
                },
                entry.at,
            );
        }
        Partition::Sizes(items) => {
            let first_at = items.first().map_or(entry.at, |i| i.at);
            let Some(memory) = memory else {
                return refuse(Refusal::UnknownMemory, first_at);
            };
            let counts: Vec<(u32, u64)> = match items.as_slice() {
                [item] => {
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
                    vec![(count, item.framebuffer_mib)]
                }
                // Several sizes: each is one VF, or `count` VFs.
                _ => items
                    .iter()
                    .map(|i| (i.count.unwrap_or(1), i.framebuffer_mib))
                    .collect(),
            };
            let count = counts
                .iter()
                .fold(0u32, |sum, (n, _)| sum.saturating_add(*n));
            if count > total {
                return refuse(
                    Refusal::NotEnoughVfs {
                        asked: count,
                        vfs: total,
                    },
                    first_at,
                );
            }
            let mut asked = 0u64;
            for (item, (n, mib)) in items.iter().zip(&counts) {
                asked = asked.saturating_add(u64::from(*n).saturating_mul(*mib));
                if asked > memory {
                    let asked_mib = counts.iter().fold(0u64, |sum, (n, mib)| {
                        sum.saturating_add(u64::from(*n).saturating_mul(*mib))
                    });
                    return refuse(
                        Refusal::NotEnoughMemory {
                            asked_mib,
                            memory_mib: memory,
                        },
                        item.at,
                    );
                }
            }
            // Bounded by `total`: the count was checked above.
            let sizes = counts
                .iter()
                .flat_map(|(n, mib)| std::iter::repeat_n(*mib, *n as usize))
                .collect();
            (count, first_at, sizes)
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
    let share = memory
        .filter(|_| count > 0)
        .map(|memory| memory / u64::from(count));
    let offer = |framebuffer_mib: Option<u64>| Offer {
        id: Some(PLAIN_VF_TYPE.to_owned()),
        name: None,
        framebuffer_mib,
        max_instances: Some(total),
        series: None,
        mig: false,
        confirmed: true,
    };
    // One wanted type per size, in the order the sizes come.
    let mut types: Vec<(Offer, u32)> = Vec::new();
    if entry.vf_driver == VfDriver::VfioPci && count > 0 {
        if sizes.is_empty() {
            types.push((offer(share), count));
        }
        for size in &sizes {
            match types
                .iter_mut()
                .find(|(o, _)| o.framebuffer_mib == Some(*size))
            {
                Some((_, n)) => *n += 1,
                None => types.push((offer(Some(*size)), 1)),
            }
        }
    }
    Ok(Wanted {
        types,
        vfs: Some(count),
        vf_memory_mib: sizes,
        share_mib: share,
        fresh: false,
    })
}

/// The quota steps that give each VF of a plain SR-IOV GPU the size `wanted` asks for, after
/// the VF count: for VFs this plan enables (`recount`), where a size is not the driver's equal
/// share; for VFs enabled already, where the quota read differs. Pushed on `out`'s steps, or
/// its refusals where the GPU takes no quotas or the VF is in a guest's hands.
pub(super) fn quota_steps(
    host: &HostState,
    view: &GpuView<'_>,
    entry: &Entry,
    wanted: &Wanted,
    recount: bool,
    out: &mut GpuPlan,
) {
    let gpu = view.gpu;
    let quotas = host.local_memory_mib.contains_key(&gpu.address);
    let mut steps = Vec::new();
    for (i, to_mib) in wanted.vf_memory_mib.iter().copied().enumerate() {
        let vf = i as u32 + 1;
        let found = if recount {
            None
        } else {
            gpu.vfs.get(i).and_then(|v| v.memory_mib)
        };
        let differs = match found {
            Some(found) => !quota_matches(found, to_mib),
            None => wanted.share_mib != Some(to_mib),
        };
        if !differs {
            continue;
        }
        if !quotas {
            let refusal = Refusal::NoQuotas {
                vfs: wanted.vfs.unwrap_or(0),
                share_mib: wanted.share_mib.unwrap_or(0),
            };
            out.refusals.push(Refused::new(refusal, Some(entry.at)));
            return;
        }
        let enabled = gpu.vfs.get(i).filter(|_| !recount);
        // A VF the plan gives back from a guest's driver first is free by its quota step.
        let given_back = |vf: PciAddress| {
            out.steps
                .iter()
                .any(|s| matches!(s, Step::Destroy { id, .. } if *id == VgpuHandle::Vf(vf)))
        };
        let in_use = enabled.filter(|v| !given_back(v.address));
        if let (Some(vf_now), Some(found_mib)) = (in_use, found) {
            let by = host
                .holds
                .get(&VgpuHandle::Vf(vf_now.address))
                .map(|hold| hold.by.clone())
                .or_else(|| {
                    vf_now
                        .driver
                        .as_deref()
                        .filter(|d| is_passthrough_driver(d))
                        .map(str::to_owned)
                });
            if let Some(by) = by {
                let refusal = Refusal::QuotaInUse {
                    vf: vf_now.address,
                    by,
                    found_mib,
                    wanted_mib: to_mib,
                };
                out.refusals.push(Refused::new(refusal, Some(entry.at)));
                continue;
            }
        }
        steps.push(Step::Quota {
            vf,
            address: enabled.map(|v| v.address).or_else(|| nth_vf(gpu, i as u32)),
            from_mib: found,
            to_mib,
        });
    }
    lowered_first(&mut steps, wanted.share_mib.filter(|_| recount));
    out.steps.extend(steps);
}

/// Orders quota steps so that lowered quotas go first: they free what raised ones take, so
/// the quotas never add up to more than the driver has while they change. `share` is the
/// driver's equal share, the quota before the step of a VF whose `from_mib` is `None`.
pub fn lowered_first(steps: &mut [Step], share: Option<u64>) {
    steps.sort_by_key(|step| !lowers(step, share));
}

/// Whether a quota step lowers the VF's quota: from what it has, or from `share`, the
/// driver's equal share for a VF this plan enables.
fn lowers(step: &Step, share: Option<u64>) -> bool {
    match step {
        Step::Quota {
            from_mib, to_mib, ..
        } => from_mib.or(share).is_some_and(|from| *to_mib < from),
        _ => false,
    }
}

/// The address of the GPU's VF `index` (from 0) as its SR-IOV capability's offset and stride
/// give it, whether or not it is enabled.
pub fn nth_vf(gpu: &Gpu, index: u32) -> Option<PciAddress> {
    let sriov = gpu.sriov.as_ref()?;
    let (offset, stride) = (sriov.offset?, sriov.stride?);
    let pf = gpu.address;
    let rid = (u32::from(pf.bus()) << 8) | (u32::from(pf.device()) << 3) | u32::from(pf.function());
    // Offset and stride come from sysfs: a routing id past 16 bits is no VF.
    let vf = stride
        .checked_mul(index)
        .and_then(|step| step.checked_add(rid))
        .and_then(|r| r.checked_add(offset))?;
    let bus = u8::try_from(vf >> 8).ok()?;
    PciAddress::new(pf.domain(), bus, ((vf >> 3) & 0x1f) as u8, (vf & 7) as u8)
}

#[cfg(test)]
mod tests;
