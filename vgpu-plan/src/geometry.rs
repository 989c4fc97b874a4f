//! MIG geometry in plans: the GPU instances an entry asks for (`mig`, a mig-parted entry, or
//! what its MIG-backed types imply) turned into steps, and the MIG facts the GPU will have
//! once they are taken, which the vGPUs of the same plan are counted against.
//!
//! The steps come in the order NVIDIA's tools take them (`nvidia-smi mig -dgi`, `-cgi`):
//! GPU instances the geometry does not keep are destroyed (after the vGPUs on them), MIG mode
//! is turned on or off, and the missing instances are made at placements chosen so that the
//! whole geometry fits ([`fit_gpu_instances`]). Instances of a wanted profile are kept, those
//! a vGPU runs on first, so that a second apply changes nothing.

use std::collections::BTreeMap;

use crate::capacity::{HostState, MigFacts, PlacedGpuInstance, fit_gpu_instances};
use crate::desired::{MigGeometry, MigRequest};
use crate::model::{Gpu, VgpuHandle};
use crate::steps::{Refusal, Refused, Step};

/// The steps of one GPU's geometry, and its MIG facts once they are taken.
pub struct Geometry {
    /// Instances destroyed, the mode changed, instances made, in that order.
    pub steps: Vec<Step>,
    /// The GPU's MIG facts after the steps (new instances have ids from `u32::MAX` down).
    pub after: MigFacts,
    /// Instances it destroys that a vGPU runs on now: the plan must destroy that vGPU first.
    pub used_gone: Vec<(u32, String)>,
}

/// What becomes of the vGPUs on GPU instances a geometry removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnderVgpus<'a> {
    /// The same plan destroys them; the caller checks that it does ([`Geometry::used_gone`]).
    MayGo,
    /// They stay: `config` changes only MIG geometry (mig-parted's), so removing an instance
    /// under one is refused, naming the vGPUs and the config.
    Stay {
        /// The config's name.
        config: &'a str,
    },
}

/// The steps that give `gpu` the geometry `request` asks for, the vGPUs on instances it
/// removes treated as `under` says.
pub fn plan(
    host: &HostState,
    gpu: &Gpu,
    request: &MigRequest,
    under: UnderVgpus<'_>,
) -> Result<Geometry, Vec<Refused>> {
    let refuse = |refusal| Err(vec![Refused::new(refusal, Some(request.at))]);
    let Some(facts) = host.mig.get(&gpu.address) else {
        return refuse(Refusal::MigUnknown {
            why: "NVML is not loaded, or does not give this GPU's MIG mode".to_owned(),
        });
    };
    let (on, wanted) = match &request.geometry {
        MigGeometry::Disabled => (false, BTreeMap::new()),
        MigGeometry::Instances(wanted) => (true, wanted.clone()),
    };
    if facts.reset_pending {
        return refuse(Refusal::MigResetPending);
    }
    if !facts.mig_on {
        return Ok(enable_then_make(facts, on, &wanted));
    }
    for profile in wanted.keys() {
        if !facts.profiles.contains_key(profile) {
            return refuse(Refusal::MigProfileUnknown {
                profile: profile.clone(),
                offered: facts.profiles.keys().cloned().collect(),
            });
        }
    }
    // Keep, per wanted profile, up to the count asked: instances a vGPU runs on first.
    let mut kept: Vec<(u32, String)> = Vec::new();
    let mut gone: Vec<(u32, String)> = Vec::new();
    let mut instances = facts.instances.clone();
    instances.sort_by_key(|(id, _)| (!facts.used.contains(id), *id));
    for (id, profile) in instances {
        let keeps = kept.iter().filter(|(_, p)| *p == profile).count();
        let asked = wanted.get(&profile).copied().unwrap_or(0) as usize;
        if keeps < asked {
            kept.push((id, profile));
        } else {
            gone.push((id, profile));
        }
    }
    let used_gone: Vec<(u32, String)> = gone
        .iter()
        .filter(|(id, _)| facts.used.contains(id))
        .cloned()
        .collect();
    if let (UnderVgpus::Stay { config }, false) = (under, used_gone.is_empty()) {
        return refuse(Refusal::MigUnderVgpus {
            config: config.to_owned(),
            vgpus: vgpus_of_profiles(gpu, &used_gone),
            instances: used_gone,
        });
    }
    let placed = |id: u32, profile: &str| -> Option<PlacedGpuInstance> {
        Some(PlacedGpuInstance {
            profile: profile.to_owned(),
            placement: *facts.placements.get(&id)?,
        })
    };
    let mut steps: Vec<Step> = Vec::new();
    for (id, profile) in &gone {
        let Some(at) = facts.placements.get(id) else {
            return refuse(Refusal::MigUnknown {
                why: format!("NVML does not give where GPU instance {id} sits"),
            });
        };
        steps.push(Step::DestroyGpuInstance {
            id: *id,
            profile: profile.clone(),
            start: at.start,
        });
    }
    if !on {
        steps.push(Step::MigMode { on: false });
        let after = MigFacts {
            mig_on: false,
            instances: Vec::new(),
            placements: BTreeMap::new(),
            ..facts.clone()
        };
        return Ok(Geometry {
            steps,
            after,
            used_gone,
        });
    }
    let Some(kept_placed) = kept
        .iter()
        .map(|(id, profile)| placed(*id, profile))
        .collect::<Option<Vec<_>>>()
    else {
        return refuse(Refusal::MigUnknown {
            why: "NVML does not give where each GPU instance sits".to_owned(),
        });
    };
    let mut missing = wanted.clone();
    for (_, profile) in &kept {
        if let Some(n) = missing.get_mut(profile) {
            *n -= 1;
        }
    }
    missing.retain(|_, n| *n > 0);
    let placements = facts
        .profiles
        .iter()
        .map(|(name, p)| (name.clone(), p.placements.clone()))
        .collect();
    let new = match fit_gpu_instances(&placements, &kept_placed, &missing) {
        Ok(new) => new,
        Err(err) => {
            return refuse(Refusal::MigNoFit {
                why: err.to_string(),
            });
        }
    };
    let mut after = MigFacts {
        instances: kept.clone(),
        placements: kept
            .iter()
            .filter_map(|(id, _)| Some((*id, *facts.placements.get(id)?)))
            .collect(),
        ..facts.clone()
    };
    for (n, instance) in new.iter().enumerate() {
        let id = u32::MAX - n as u32;
        after.instances.push((id, instance.profile.clone()));
        after.placements.insert(id, instance.placement);
        steps.push(Step::CreateGpuInstance {
            profile: instance.profile.clone(),
            profile_id: facts.profiles.get(&instance.profile).map(|p| p.id),
            start: Some(instance.placement.start),
        });
    }
    Ok(Geometry {
        steps,
        after,
        used_gone,
    })
}

/// A GPU with MIG mode off: turn it on (NVML lists profiles and placements only then) and
/// make each wanted instance at a start `apply` chooses; for `on == false`, nothing to do.
fn enable_then_make(facts: &MigFacts, on: bool, wanted: &BTreeMap<String, u32>) -> Geometry {
    if !on {
        return Geometry {
            steps: Vec::new(),
            after: facts.clone(),
            used_gone: Vec::new(),
        };
    }
    let mut steps = vec![Step::MigMode { on: true }];
    let mut after = MigFacts {
        mig_on: true,
        ..facts.clone()
    };
    let mut n = 0u32;
    for (profile, count) in wanted {
        for _ in 0..*count {
            after.instances.push((u32::MAX - n, profile.clone()));
            n += 1;
            steps.push(Step::CreateGpuInstance {
                profile: profile.clone(),
                profile_id: None,
                start: None,
            });
        }
    }
    Geometry {
        steps,
        after,
        used_gone: Vec::new(),
    }
}

/// The vGPUs of `gpu` whose type runs on a GPU instance of one of the profiles `instances`
/// have. Which instance each uses is the driver's; a profile all of whose instances go takes
/// exactly these.
fn vgpus_of_profiles(gpu: &Gpu, instances: &[(u32, String)]) -> Vec<VgpuHandle> {
    gpu.vgpus
        .iter()
        .filter(|v| {
            let profile = gpu
                .types
                .iter()
                .find(|t| t.id == v.type_id)
                .and_then(|t| t.mig.as_ref())
                .map(|m| m.gpu_instance_profile.as_str());
            profile.is_some_and(|p| instances.iter().any(|(_, q)| q == p))
        })
        .map(|v| v.id)
        .collect()
}

#[cfg(test)]
mod tests;
