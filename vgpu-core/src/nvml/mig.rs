//! MIG-backed vGPU types (NVIDIA Virtual GPU Software User Guide, "MIG-Backed NVIDIA vGPU";
//! NVIDIA Multi-Instance GPU User Guide, "GPU Instance Profiles").
//!
//! A MIG-backed type runs on a GPU instance of one profile, named in the type:
//! `H200X-1-18C` needs a `1g.18gb` instance, `A100-1-5CME` a `1g.5gb+me`. With NVIDIA's
//! vendor-specific VFIO framework, the GPU instance is written to the VF's
//! `nvidia/gpu_instance_id` before the type to `nvidia/current_vgpu_type`. GPU instances
//! themselves come from NVML (`nvidia-smi mig -cgi` makes them; this crate only reads them).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{NvmlError, Result};
use crate::host::nvidia::NvidiaVf;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::model::MigBacking;
use crate::model::nvml::{Fact, GpuInstance};
pub(crate) use crate::model::nvml::{GpuInstancePlacement, MigFacts, MigProfile};
use crate::model::pci::PciAddress;
use crate::nvml::Nvml;

// What a MIG-backed type needs follows from its name alone (`crate::parse`); this module and
// its callers name it `backing`.
pub(crate) use crate::parse::mig_backing as backing;

/// A profile name as NVML gives it (`MIG 1g.18gb`), without the `MIG ` prefix.
#[cfg(any(feature = "nvml", test))]
pub(crate) fn profile_name(raw: &str) -> String {
    let raw = raw.trim();
    raw.strip_prefix("MIG ").unwrap_or(raw).to_owned()
}

/// The GPU instance for a vGPU of `type_name` (MIG-backed as `mig` says) on `gpu`: the
/// lowest-numbered instance of the type's profile that no vGPU uses (`used`), from NVML's
/// `instances`. The profile is matched by NVML's id for the type's profile (`profile_id`,
/// from `nvmlVgpuTypeGetGpuInstanceProfileId`) when NVML gave it, by name otherwise. Fails
/// naming what is missing: MIG mode off, or no free instance.
pub(crate) fn choose(
    gpu: PciAddress,
    type_name: &str,
    mig: &MigBacking,
    profile_id: Option<u32>,
    mig_on: bool,
    instances: &[GpuInstance],
    used: &BTreeSet<u32>,
) -> std::result::Result<u32, NvmlError> {
    if !mig_on {
        return Err(NvmlError::MigModeOff {
            gpu,
            type_name: type_name.to_owned(),
            profile: mig.gpu_instance_profile.clone(),
        });
    }
    let mut existing: Vec<u32> = instances
        .iter()
        .filter(|gi| match profile_id {
            Some(id) => gi.profile_id == id,
            None => gi.profile.value() == Some(&mig.gpu_instance_profile),
        })
        .map(|gi| gi.id)
        .collect();
    existing.sort_unstable();
    match existing.iter().find(|id| !used.contains(id)) {
        Some(id) => Ok(*id),
        None => Err(NvmlError::NoFreeGpuInstance {
            gpu,
            type_name: type_name.to_owned(),
            profile: mig.gpu_instance_profile.clone(),
            used: existing
                .iter()
                .copied()
                .filter(|id| used.contains(id))
                .collect(),
            existing,
        }),
    }
}

/// The GPU instances the vGPUs on `pf`'s VFs use, as sysfs shows them: a VF holding a vGPU
/// whose `nvidia/gpu_instance_id` reads a number.
pub(crate) fn used_in_sysfs(paths: &HostPaths, pf: PciAddress) -> Result<BTreeSet<u32>> {
    let mut used = BTreeSet::new();
    for vf in PciDevice::new(paths, pf).virtfns()? {
        let Some(nvidia) = NvidiaVf::of(&paths.pci_device(&vf))? else {
            continue;
        };
        if nvidia.current_type()?.is_none() {
            continue;
        }
        if let Some(id) = nvidia.gpu_instance_id() {
            used.insert(id);
        }
    }
    Ok(used)
}

/// The GPU instance a vGPU of type `type_id` on VF `vf` of `pf` must be given before its type
/// is written: `None` for a time-sliced type (or one whose name is unknown), the chosen
/// instance for a MIG-backed one. Needs NVML for MIG mode and the GPU instances; fails naming
/// what is missing.
pub(crate) fn instance_for(
    paths: &HostPaths,
    nvml: &Nvml,
    pf: PciAddress,
    type_id: u32,
    type_name: Option<&str>,
) -> Result<Option<(String, u32)>> {
    let Some(name) = type_name else {
        return Ok(None);
    };
    let Some(mig) = backing(name) else {
        return Ok(None);
    };
    let state = nvml.mig_state(pf, type_id).map_err(|err| match err {
        MigStateError::NotLoaded(reason) => NvmlError::NotLoaded {
            needed_for: format!(
                "know the GPU instances of {pf} for the MIG-backed vGPU type {name}"
            ),
            reason,
        },
        MigStateError::Call(why) => NvmlError::Call { gpu: pf, why },
    })?;
    let mut used = used_in_sysfs(paths, pf)?;
    used.extend(state.used.iter().copied());
    let instances = match (&state.instances, state.mig_on) {
        (Fact::Value(list), _) => list.as_slice(),
        // With MIG mode off NVML has no GPU instances to list; `choose` says MIG is off.
        (Fact::Unavailable(_), false) => &[],
        (Fact::Unavailable(why), true) => {
            return Err(NvmlError::Call {
                gpu: pf,
                why: why.clone(),
            }
            .into());
        }
    };
    let id = choose(
        pf,
        name,
        &mig,
        state.type_profile_id,
        state.mig_on,
        instances,
        &used,
    )?;
    Ok(Some((mig.gpu_instance_profile, id)))
}

/// Why a MIG-backed type named `wanted`, which `gpu` does not offer or has no room for now,
/// cannot be made there: MIG mode off, no free GPU instance of its profile, or no NVML to
/// say. `None` when `wanted` is not a MIG-backed name, `gpu` is not a vendor-VFIO GPU, or an
/// instance is free (the type is missing or full for another reason).
pub(crate) fn refusal(
    paths: &HostPaths,
    nvml: &Nvml,
    gpu: &crate::model::Gpu,
    wanted: &str,
) -> Option<crate::error::Error> {
    if gpu.backend != crate::model::Backend::NvidiaVfio {
        return None;
    }
    backing(wanted)?;
    // NVML's id for the type, for its GPU-instance profile id; by name otherwise.
    let type_id = nvml
        .read_gpu(gpu.address)
        .into_value()
        .and_then(|g| g.supported_types.into_value())
        .and_then(|types| {
            types.into_iter().find(|t| {
                t.name
                    .value()
                    .is_some_and(|n| crate::parse::name_matches(n, wanted))
            })
        })
        .map_or(u32::MAX, |t| t.id);
    instance_for(paths, nvml, gpu.address, type_id, Some(wanted)).err()
}

/// MIG mode and the GPU instances of `pf`, with those running vGPUs use (NVML's answer and
/// the VFs' `nvidia/gpu_instance_id`); `None` when NVML is not loaded or cannot say. An
/// instance whose profile NVML does not name is left out.
pub(crate) fn facts(paths: &HostPaths, nvml: &Nvml, pf: PciAddress) -> Option<MigFacts> {
    let state = match nvml.mig_state(pf, u32::MAX) {
        Ok(state) => state,
        Err(MigStateError::NotLoaded(_)) => return None,
        Err(MigStateError::Call(why)) => {
            tracing::warn!(gpu = %pf, "NVML cannot list GPU instances: {}", why.reason);
            return None;
        }
    };
    let instances = match (&state.instances, state.mig_on) {
        (Fact::Value(list), _) => list
            .iter()
            .filter_map(|gi| Some((gi.id, gi.profile.value()?.clone())))
            .collect(),
        (Fact::Unavailable(_), false) => Vec::new(),
        (Fact::Unavailable(why), true) => {
            tracing::warn!(gpu = %pf, "NVML cannot list GPU instances: {}", why.reason);
            return None;
        }
    };
    let placements = match &state.instances {
        Fact::Value(list) => list
            .iter()
            .map(|gi| {
                let at = GpuInstancePlacement {
                    start: gi.placement_start,
                    size: gi.placement_size,
                };
                (gi.id, at)
            })
            .collect(),
        Fact::Unavailable(_) => BTreeMap::new(),
    };
    let mut profiles = BTreeMap::new();
    for (id, name) in &state.profiles {
        match nvml.gpu_instance_placements(pf, *id) {
            Ok(placements) => {
                profiles.insert(
                    name.clone(),
                    MigProfile {
                        id: *id,
                        placements,
                    },
                );
            }
            Err(err) => {
                tracing::warn!(gpu = %pf, "{}", crate::Error::from(err).chain());
                return None;
            }
        }
    }
    let mut used = state.used.clone();
    match used_in_sysfs(paths, pf) {
        Ok(more) => used.extend(more),
        Err(err) => {
            tracing::warn!(gpu = %pf, "{}", err.chain());
            return None;
        }
    }
    Some(MigFacts {
        mig_on: state.mig_on,
        reset_pending: state.reset_pending,
        instances,
        placements,
        profiles,
        used,
    })
}

/// What [`Nvml::mig_state`] reads about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MigState {
    /// Whether MIG mode is on now.
    pub(crate) mig_on: bool,
    /// The GPU instances.
    pub(crate) instances: Fact<Vec<GpuInstance>>,
    /// The GPU instances the running vGPUs use (`nvmlVgpuInstanceGetGpuInstanceId`).
    pub(crate) used: BTreeSet<u32>,
    /// The GPU-instance profile id NVML gives the type asked about, when it gives one.
    pub(crate) type_profile_id: Option<u32>,
    /// Whether NVML's pending MIG mode differs from the current one (a reset is due).
    pub(crate) reset_pending: bool,
    /// The GPU's GPU-instance profiles NVML names: id and name (`1g.18gb`); empty while MIG
    /// mode is off.
    pub(crate) profiles: Vec<(u32, String)>,
}

/// Why [`Nvml::mig_state`] has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MigStateError {
    /// NVML is not loaded, for this reason.
    NotLoaded(String),
    /// NVML failed to say.
    #[cfg_attr(not(feature = "nvml"), allow(dead_code))]
    Call(crate::model::nvml::Unavailable),
}

impl Nvml {
    /// MIG mode, the GPU instances and those running vGPUs use, of the GPU at `address`,
    /// and the GPU-instance profile of vGPU type `type_id`.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn mig_state(
        &self,
        address: PciAddress,
        type_id: u32,
    ) -> std::result::Result<MigState, MigStateError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return read::mig_state(nvml, address, type_id).map_err(MigStateError::Call);
        }
        Err(MigStateError::NotLoaded(
            self.status()
                .reason
                .clone()
                .unwrap_or_else(|| "not initialised".to_owned()),
        ))
    }
}

#[cfg(feature = "nvml")]
pub(crate) mod read {
    //! GPU instances from NVML.

    use std::collections::BTreeSet;

    use nvml_wrapper::Device;
    use nvml_wrapper::error::NvmlError as WrapperError;

    use super::{MigState, profile_name};
    use crate::model::nvml::{Cause, Fact, GpuInstance, MigMode, Unavailable};
    use crate::model::pci::PciAddress;
    use crate::nvml::read::{device_at, fact, unavailable};

    /// A GPU-instance profile: from `nvmlDeviceGetGpuInstanceProfileInfoV` (with its name),
    /// or, on a driver without it, `nvmlDeviceGetGpuInstanceProfileInfo` (without).
    struct Profile {
        id: u32,
        instance_count: u32,
        name: Fact<String>,
        slices: u32,
        memory_mib: u64,
    }

    fn profile(device: &Device<'_>, index: u32) -> Result<Profile, WrapperError> {
        match vgpu_nvml_ext::gpu_instance_profile(device, index) {
            Ok(p) => Ok(Profile {
                id: p.id,
                instance_count: p.instance_count,
                name: Fact::Value(profile_name(&p.name)),
                slices: p.slices,
                memory_mib: p.memory_mib,
            }),
            Err(err @ (WrapperError::FailedToLoadSymbol(_) | WrapperError::FunctionNotFound)) => {
                let why = unavailable("nvmlDeviceGetGpuInstanceProfileInfoV", &err);
                let p = device.profile_info(index)?;
                Ok(Profile {
                    id: p.id,
                    instance_count: p.instance_count,
                    name: Fact::Unavailable(why),
                    slices: p.slice_count,
                    memory_mib: p.memory_size_mb,
                })
            }
            Err(err) => Err(err),
        }
    }

    /// Every GPU instance of `device`, over every profile it has; unavailable when MIG mode
    /// is off (`mig_mode`) or NVML cannot list them.
    pub(crate) fn read_gpu_instances(
        device: &Device<'_>,
        mig_mode: &Fact<MigMode>,
    ) -> Fact<Vec<GpuInstance>> {
        match mig_mode {
            Fact::Value(MigMode { current: true, .. }) => {}
            Fact::Value(_) => {
                return Fact::unknown(
                    Cause::NotSupported,
                    "nvmlDeviceGetGpuInstances: MIG mode is off on this GPU",
                );
            }
            Fact::Unavailable(why) => return Fact::Unavailable(why.clone()),
        }
        let mut all = Vec::new();
        let mut failure: Option<Unavailable> = None;
        for index in 0..vgpu_nvml_ext::GPU_INSTANCE_PROFILE_COUNT {
            let p = match profile(device, index) {
                Ok(p) => p,
                // Profiles the GPU does not have answer NOT_SUPPORTED or INVALID_ARGUMENT.
                Err(WrapperError::NotSupported | WrapperError::InvalidArg) => continue,
                Err(err) => {
                    failure.get_or_insert(unavailable("nvmlDeviceGetGpuInstanceProfileInfo", &err));
                    continue;
                }
            };
            match vgpu_nvml_ext::gpu_instances(device, p.id, p.instance_count) {
                Ok(list) => all.extend(list.into_iter().map(|gi| GpuInstance {
                    id: gi.id,
                    profile_id: gi.profile_id,
                    profile: p.name.clone(),
                    slices: Fact::Value(p.slices),
                    memory_mib: Fact::Value(p.memory_mib),
                    placement_start: gi.placement_start,
                    placement_size: gi.placement_size,
                })),
                Err(vgpu_nvml_ext::Failed {
                    error: WrapperError::NotFound,
                    ..
                }) => {}
                Err(failed) => {
                    failure.get_or_insert(unavailable(failed.function, &failed.error));
                }
            }
        }
        match failure {
            Some(why) if all.is_empty() => Fact::Unavailable(why),
            _ => {
                all.sort_by_key(|gi| gi.id);
                Fact::Value(all)
            }
        }
    }

    pub(crate) fn mig_state(
        nvml: &nvml_wrapper::Nvml,
        address: PciAddress,
        type_id: u32,
    ) -> Result<MigState, Unavailable> {
        let device = device_at(nvml, address)?;
        let mode = fact("nvmlDeviceGetMigMode", device.mig_mode()).map(|m| MigMode {
            current: m.current != 0,
            pending: m.pending != 0,
        });
        let mig_on = match &mode {
            Fact::Value(m) => m.current,
            Fact::Unavailable(why) if why.cause == Cause::NotSupported => false,
            Fact::Unavailable(why) => return Err(why.clone()),
        };
        let instances = read_gpu_instances(&device, &mode);
        let mut used = BTreeSet::new();
        let ids = vgpu_nvml_ext::active_vgpu_instances(&device)
            .map_err(|err| unavailable("nvmlDeviceGetActiveVgpus", &err))?;
        for id in ids {
            let vgpu = nvml_wrapper::vgpu::VgpuInstance::new(id, &device);
            match vgpu.gpu_instance_id() {
                Ok(gi) if gi != u32::MAX => {
                    used.insert(gi);
                }
                Ok(_) => {}
                Err(err) => return Err(unavailable("nvmlVgpuInstanceGetGpuInstanceId", &err)),
            }
        }
        // A type NVML does not know, or a driver without the call, leaves the profile to be
        // matched by name.
        let type_profile_id = nvml_wrapper::vgpu::VgpuType::new(&device, type_id)
            .instance_profile_id()
            .ok()
            .filter(|id| *id != u32::MAX);
        let reset_pending = matches!(&mode, Fact::Value(m) if m.current != m.pending);
        let mut profiles = Vec::new();
        if mig_on {
            for index in 0..vgpu_nvml_ext::GPU_INSTANCE_PROFILE_COUNT {
                match profile(&device, index) {
                    Ok(Profile {
                        id,
                        name: Fact::Value(name),
                        ..
                    }) => profiles.push((id, name)),
                    // One without a name (an older driver) cannot be asked for by name.
                    Ok(_) => {}
                    // Profiles the GPU does not have answer NOT_SUPPORTED or INVALID_ARGUMENT.
                    Err(WrapperError::NotSupported | WrapperError::InvalidArg) => {}
                    Err(err) => {
                        return Err(unavailable("nvmlDeviceGetGpuInstanceProfileInfoV", &err));
                    }
                }
            }
        }
        Ok(MigState {
            mig_on,
            instances,
            used,
            type_profile_id,
            reset_pending,
            profiles,
        })
    }
}

#[cfg(feature = "nvml")]
pub(crate) use read::read_gpu_instances;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nvml::Cause;

    fn gi(id: u32, profile: &str) -> GpuInstance {
        GpuInstance {
            id,
            profile_id: 0,
            profile: Fact::Value(profile.to_owned()),
            slices: Fact::Value(1),
            memory_mib: Fact::Value(18432),
            placement_start: 0,
            placement_size: 1,
        }
    }

    fn gpu() -> PciAddress {
        "0000:41:00.0".parse().expect("valid address")
    }

    #[test]
    fn backing_h200x_1_18c_needs_1g_18gb() {
        assert_eq!(
            backing("NVIDIA H200X-1-18C"),
            Some(MigBacking {
                slices: 1,
                gpu_instance_profile: "1g.18gb".to_owned()
            })
        );
    }

    #[test]
    fn backing_media_extension_is_plus_me() {
        assert_eq!(
            backing("A100-1-5CME").map(|b| b.gpu_instance_profile),
            Some("1g.5gb+me".to_owned())
        );
    }

    #[test]
    fn backing_no_media_is_minus_me() {
        assert_eq!(
            backing("B200-1-23CNOME").map(|b| b.gpu_instance_profile),
            Some("1g.23gb-me".to_owned())
        );
    }

    #[test]
    fn backing_all_media_is_plus_me_all() {
        assert_eq!(
            backing("B200-1-23CMEALL").map(|b| b.gpu_instance_profile),
            Some("1g.23gb+me.all".to_owned())
        );
    }

    #[test]
    fn backing_time_sliced_type_is_none() {
        assert_eq!(backing("NVIDIA H200X-141C"), None);
    }

    #[test]
    fn backing_head_count_suffix_is_none() {
        assert_eq!(backing("GRID T4-1B4"), None);
    }

    #[test]
    fn profile_name_strips_mig_prefix() {
        assert_eq!(profile_name("MIG 2g.35gb"), "2g.35gb");
    }

    #[test]
    fn choose_lowest_free_instance_of_profile() {
        let mig = backing("H200X-1-18C").expect("MIG-backed");
        let instances = [gi(9, "1g.18gb"), gi(7, "1g.18gb"), gi(1, "2g.35gb")];
        let used = BTreeSet::from([7]);
        assert_eq!(
            choose(gpu(), "H200X-1-18C", &mig, None, true, &instances, &used),
            Ok(9)
        );
    }

    #[test]
    fn choose_mig_off_is_mig_mode_off() {
        let mig = backing("H200X-1-18C").expect("MIG-backed");
        assert_eq!(
            choose(
                gpu(),
                "H200X-1-18C",
                &mig,
                None,
                false,
                &[],
                &BTreeSet::new()
            ),
            Err(NvmlError::MigModeOff {
                gpu: gpu(),
                type_name: "H200X-1-18C".to_owned(),
                profile: "1g.18gb".to_owned(),
            })
        );
    }

    #[test]
    fn choose_all_used_is_no_free_instance_naming_them() {
        let mig = backing("H200X-1-18C").expect("MIG-backed");
        let instances = [gi(7, "1g.18gb"), gi(1, "2g.35gb")];
        let used = BTreeSet::from([7, 1]);
        assert_eq!(
            choose(gpu(), "H200X-1-18C", &mig, None, true, &instances, &used),
            Err(NvmlError::NoFreeGpuInstance {
                gpu: gpu(),
                type_name: "H200X-1-18C".to_owned(),
                profile: "1g.18gb".to_owned(),
                existing: vec![7],
                used: vec![7],
            })
        );
    }

    #[test]
    fn choose_by_profile_id_when_nvml_gives_it() {
        let mig = backing("H200X-1-18C").expect("MIG-backed");
        let mut other = gi(3, "1g.18gb");
        other.profile_id = 15;
        let mut wanted = gi(5, "unrelated");
        wanted.profile_id = 19;
        assert_eq!(
            choose(
                gpu(),
                "H200X-1-18C",
                &mig,
                Some(19),
                true,
                &[other, wanted],
                &BTreeSet::new()
            ),
            Ok(5)
        );
    }

    #[test]
    fn choose_instance_without_profile_name_is_not_matched() {
        let mig = backing("H200X-1-18C").expect("MIG-backed");
        let mut unnamed = gi(7, "1g.18gb");
        unnamed.profile = Fact::unknown(Cause::FunctionNotFound, "no name");
        assert!(matches!(
            choose(
                gpu(),
                "H200X-1-18C",
                &mig,
                None,
                true,
                &[unnamed],
                &BTreeSet::new()
            ),
            Err(NvmlError::NoFreeGpuInstance { .. })
        ));
    }
}
