//! MIG geometry as steps of an operation, each with its undo, and recorded in the GPU's MIG
//! definition before the host changes (`state/store/mig.rs`).

use std::collections::BTreeMap;

use super::{Operation, Undo};
use crate::capacity::{PlacedGpuInstance, fit_gpu_instances};
use crate::error::NvmlError;
use crate::error::{Error, Result};
use crate::model::pci::PciAddress;
use crate::nvml::mig::{MigFacts, facts};
use crate::nvml::mig_write::MigModeOutcome;
use crate::state::store::{MigDefinition, MigInstanceDefinition};

impl Operation<'_> {
    /// The MIG facts of `gpu` now, from NVML; an error when NVML cannot give them.
    fn mig_now(&self, gpu: PciAddress) -> Result<MigFacts> {
        facts(self.paths(), self.nvml().get(), gpu).ok_or_else(|| {
            Error::from(NvmlError::NotLoaded {
                needed_for: format!("read the MIG mode and GPU instances of {gpu}"),
                reason: self
                    .nvml()
                    .get()
                    .status()
                    .reason
                    .clone()
                    .unwrap_or_else(|| "NVML does not give them (see the warning)".to_owned()),
            })
        })
    }

    /// The MIG definition of `gpu`, as recorded or as the GPU is now.
    fn mig_definition(&self, gpu: PciAddress, now: &MigFacts) -> Result<MigDefinition> {
        if let Some(def) = self.store().mig_of(gpu)? {
            return Ok(def);
        }
        let instances = now
            .instances
            .iter()
            .filter_map(|(id, profile)| {
                Some(MigInstanceDefinition {
                    profile: profile.clone(),
                    start: now.placements.get(id)?.start,
                })
            })
            .collect();
        Ok(MigDefinition {
            gpu,
            enabled: now.mig_on,
            instances,
        })
    }

    /// Writes `def` as the MIG definition of its GPU; undo puts back the one there was.
    fn redefine_mig(&mut self, def: MigDefinition) -> Result<()> {
        let previous = self.store().mig_of(def.gpu)?;
        let gpu = def.gpu;
        let result = self.store().define_mig(&def);
        self.step("define-mig", &gpu.to_string(), result, |()| {
            Some(Undo::MigDefinition { gpu, previous })
        })
    }

    /// Turns MIG mode of `gpu` on or off through NVML, recording it first; undo turns it
    /// back. MIG mode on is refused beside mixed-size mode, live or defined. A change the
    /// driver holds until a GPU reset is taken back at once and refused
    /// ([`Error::MigResetPending`]): `vgpu` never resets a GPU.
    pub(crate) fn set_mig_mode(&mut self, gpu: PciAddress, on: bool) -> Result<()> {
        if on {
            // MIG mode is always defined as well: the definitions must agree too.
            let found = self.gpu_of(gpu)?;
            let asked = crate::manager::sched::Asked {
                mig: true,
                ..Default::default()
            };
            crate::manager::sched::keeps_mixed_apart(self, &found, asked, true)?;
        }
        let now = self.mig_now(gpu)?;
        let mut def = self.mig_definition(gpu, &now)?;
        if def.enabled != on {
            def.enabled = on;
            if !on {
                def.instances.clear();
            }
            self.redefine_mig(def)?;
        }
        let nvml = self.nvml().get();
        let result =
            nvml.set_mig_mode(gpu, on)
                .map_err(Error::from)
                .and_then(|change| match change.outcome {
                    MigModeOutcome::Applied => Ok(change),
                    MigModeOutcome::ResetPending => {
                        if let Err(err) = nvml.set_mig_mode(gpu, change.before.current) {
                            tracing::error!(%gpu, "cannot take back the pending MIG mode: {err}");
                        }
                        Err(Error::MigResetPending { gpu })
                    }
                });
        self.step("mig-mode", &gpu.to_string(), result, |change| {
            change.changed.then_some(Undo::MigMode {
                gpu,
                on: change.before.current,
            })
        })
        .map(drop)
    }

    /// Makes a GPU instance of `profile` on `gpu` through NVML at memory slice `start`, or,
    /// for `None`, at the lowest start that fits beside the instances there; records it in
    /// the GPU's MIG definition first. Undo destroys it.
    pub(crate) fn create_gpu_instance(
        &mut self,
        gpu: PciAddress,
        profile: &str,
        start: Option<u32>,
    ) -> Result<u32> {
        let now = self.mig_now(gpu)?;
        let Some(known) = now.profiles.get(profile) else {
            return Err(Error::NoGpuInstance {
                gpu,
                what: format!("profile {profile}"),
            });
        };
        let profile_id = known.id;
        let start = match start {
            Some(start) => start,
            None => lowest_start(&now, profile)?,
        };
        let mut def = self.mig_definition(gpu, &now)?;
        let instance = MigInstanceDefinition {
            profile: profile.to_owned(),
            start,
        };
        if !def.enabled || !def.instances.contains(&instance) {
            def.enabled = true;
            def.instances.push(instance);
            self.redefine_mig(def)?;
        }
        let result = self
            .nvml()
            .get()
            .create_gpu_instance(gpu, profile_id, start)
            .map_err(Error::from);
        self.step(
            "gpu-instance",
            &format!("{gpu}/{profile}@{start}"),
            result,
            |gi| Some(Undo::GpuInstance { gpu, id: gi.id }),
        )
        .map(|gi| gi.id)
    }

    /// Destroys GPU instance `id` of `gpu` through NVML, and takes it out of the GPU's MIG
    /// definition; undo makes it again at the same placement.
    pub(crate) fn destroy_gpu_instance(&mut self, gpu: PciAddress, id: u32) -> Result<()> {
        let now = self.mig_now(gpu)?;
        let profile = now
            .instances
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| p.clone());
        let (Some(profile), Some(at)) = (profile, now.placements.get(&id).copied()) else {
            return Err(Error::NoGpuInstance {
                gpu,
                what: id.to_string(),
            });
        };
        let profile_id = now.profiles.get(&profile).map_or(u32::MAX, |p| p.id);
        let mut def = self.mig_definition(gpu, &now)?;
        def.instances
            .retain(|i| !(i.profile == profile && i.start == at.start));
        self.redefine_mig(def)?;
        let result = self
            .nvml()
            .get()
            .destroy_gpu_instance(gpu, id)
            .map_err(Error::from);
        self.step(
            "destroy-gpu-instance",
            &format!("{gpu}/{id}"),
            result,
            |()| {
                Some(Undo::RecreateGpuInstance {
                    gpu,
                    profile_id,
                    start: at.start,
                })
            },
        )
    }
}

/// The lowest start slice an instance of `profile` takes beside the instances of `now`.
fn lowest_start(now: &MigFacts, profile: &str) -> Result<u32> {
    let placements: BTreeMap<String, Vec<_>> = now
        .profiles
        .iter()
        .map(|(name, p)| (name.clone(), p.placements.clone()))
        .collect();
    let kept: Vec<PlacedGpuInstance> = now
        .instances
        .iter()
        .filter_map(|(id, p)| {
            Some(PlacedGpuInstance {
                profile: p.clone(),
                placement: *now.placements.get(id)?,
            })
        })
        .collect();
    let wanted = BTreeMap::from([(profile.to_owned(), 1)]);
    fit_gpu_instances(&placements, &kept, &wanted)
        .map_err(|err| Error::MigNoFit {
            why: err.to_string(),
        })?
        .first()
        .map(|gi| gi.placement.start)
        .ok_or_else(|| Error::MigNoFit {
            why: format!("no placement of {profile} is free"),
        })
}
