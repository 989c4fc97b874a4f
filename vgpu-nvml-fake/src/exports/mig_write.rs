//! Changes to MIG: the mode, and GPU instances made and destroyed ("Multi Instance GPU
//! Management" of the NVML API Reference), each accepted change recorded in the call log so
//! that a later process sees it.
//!
//! The rules, kept to what `vgpu` relies on:
//!
//! - A profile's placements are those of its data (`placements = { size, starts }`); a
//!   profile without them cannot be placed (`NVML_ERROR_NOT_SUPPORTED`).
//! - A GPU instance takes memory slices `start .. start + size`. One that would overlap
//!   another, or pass the profile's `instance_count`, is refused
//!   (`NVML_ERROR_INSUFFICIENT_RESOURCES`). Compute slices are not counted.
//! - The remaining capacity of a profile is how many of its placements still fit side by
//!   side, at most its `instance_count` less its instances.
//! - A new GPU instance gets the lowest id that no instance of the GPU has, from 1 (a real
//!   driver chooses its own ids: callers read them back).
//! - A GPU instance is in use (`NVML_ERROR_IN_USE`) while a `[[gpu.vgpu]]` of the data names
//!   it as its `gpu_instance_id`.
//! - MIG mode does not change while the GPU has GPU instances or vGPUs (`NVML_ERROR_IN_USE`).
//!   A change sets the pending mode, and the current one too unless the data says
//!   `mig_reset_required`: then the activation status is `NVML_ERROR_RESET_REQUIRED`, and the
//!   current mode stays until the data changes (the fake has no GPU reset).

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlGpuInstance_t, nvmlGpuInstancePlacement_t,
    nvmlReturn_enum_NVML_ERROR_IN_USE as IN_USE,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES as INSUFFICIENT_RESOURCES,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED as RESET_REQUIRED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_enum_NVML_SUCCESS as SUCCESS,
    nvmlReturn_t,
};

use super::core::on_gpu;
use crate::data::{self, Call, Gpu, Profile, ProfilePlacements};
use crate::state::{
    Answer, device_index, done, gpu, instance_handle, instance_of, put, put_list, with_mut,
};

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLE: c_uint = 1;

/// `g` in MIG mode now, or `NOT_SUPPORTED`.
/// NVML's answer for a simulator that refused a MIG change: `IN_USE` for `EBUSY` (a vGPU on
/// the instance), `UNKNOWN` otherwise.
fn refusal_of(err: &std::io::Error) -> nvmlReturn_t {
    if err.raw_os_error() == Some(libc_ebusy()) {
        IN_USE
    } else {
        UNKNOWN
    }
}

/// `EBUSY` on Linux.
const fn libc_ebusy() -> i32 {
    16
}

fn in_mig_mode(g: &Gpu) -> Answer {
    if g.mig.is_some_and(|m| m.current) {
        Ok(())
    } else {
        Err(NOT_SUPPORTED)
    }
}

/// The profile of `g` with id `profile_id`.
fn profile_by_id(g: &Gpu, profile_id: u32) -> Option<&Profile> {
    g.profiles.iter().find(|p| p.id == profile_id)
}

/// Whether memory slices `a` and `b` (`(start, size)`) share one.
fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// Whether `slices` overlaps a GPU instance of `g`.
fn taken(g: &Gpu, slices: (u32, u32)) -> bool {
    g.gpu_instances
        .iter()
        .any(|gi| overlaps((gi.placement_start, gi.placement_size), slices))
}

/// Instances of `p` that `g` still has room for by count alone.
fn left_by_count(g: &Gpu, p: &Profile) -> u32 {
    let existing = g
        .gpu_instances
        .iter()
        .filter(|gi| gi.profile_id == p.id)
        .count();
    p.instance_count
        .saturating_sub(u32::try_from(existing).unwrap_or(u32::MAX))
}

/// How many more GPU instances of `p` (placed as `placements`) fit on `g`: its free
/// placements taken from the lowest start up, each beside the last (all have one size, so
/// this is the most that fit), at most what its instance count leaves.
fn remaining(g: &Gpu, p: &Profile, placements: &ProfilePlacements) -> u32 {
    let mut starts = placements.starts.clone();
    starts.sort_unstable();
    let mut chosen: Vec<(u32, u32)> = Vec::new();
    for start in starts {
        let slices = (start, placements.size);
        if !taken(g, slices) && !chosen.iter().any(|c| overlaps(*c, slices)) {
            chosen.push(slices);
        }
    }
    u32::try_from(chosen.len())
        .unwrap_or(u32::MAX)
        .min(left_by_count(g, p))
}

/// The lowest GPU-instance id from 1 that `g` does not use.
fn next_id(g: &Gpu) -> Answer<u32> {
    (1..=u32::MAX)
        .find(|id| !g.gpu_instances.iter().any(|gi| gi.id == *id))
        .ok_or(UNKNOWN)
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: `NOT_SUPPORTED` when MIG mode is off or
/// the GPU lacks the profile or its placements; with `placements` null, only the count.
///
/// # Safety
/// `count` is null or valid for a read and a write; `placements` null or valid for `*count`
/// writes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        device,
        |_, g| {
            in_mig_mode(g)?;
            let p = profile_by_id(g, profile_id).ok_or(NOT_SUPPORTED)?;
            let list = p.placements.as_ref().ok_or(NOT_SUPPORTED)?;
            let items: Vec<nvmlGpuInstancePlacement_t> = list
                .starts
                .iter()
                .map(|start| nvmlGpuInstancePlacement_t {
                    start: *start,
                    size: list.size,
                })
                .collect();
            if placements.is_null() {
                let n = u32::try_from(items.len()).map_err(|_| UNKNOWN)?;
                // SAFETY: as the caller promises.
                return unsafe { put(count, n) };
            }
            // SAFETY: as the caller promises.
            unsafe { put_list(count, placements, &items) }
        },
    ))
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity`: `NOT_SUPPORTED` when MIG mode is off or the
/// GPU lacks the profile; 0 for a profile without placements.
///
/// # Safety
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu(
        "nvmlDeviceGetGpuInstanceRemainingCapacity",
        device,
        |_, g| {
            in_mig_mode(g)?;
            let p = profile_by_id(g, profile_id).ok_or(NOT_SUPPORTED)?;
            let n = p.placements.as_ref().map_or(0, |pl| remaining(g, p, pl));
            // SAFETY: as the caller promises.
            unsafe { put(count, n) }
        },
    ))
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`: `NOT_SUPPORTED` when MIG mode is off or the
/// profile has no placements, `INVALID_ARGUMENT` for a profile the GPU lacks or a placement
/// not among the profile's, `INSUFFICIENT_RESOURCES` when it overlaps an instance or the
/// profile is at its instance count; otherwise recorded in the call log and made.
///
/// # Safety
/// `placement` is null or valid for a read; `instance` null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    let Ok(index) = device_index(device) else {
        return INVALID_ARGUMENT;
    };
    done(with_mut(
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        Some(index),
        |d, path| {
            if placement.is_null() || instance.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: not null, valid for a read as the caller promises.
            let asked = unsafe { placement.read() };
            let g = gpu(d, index)?;
            in_mig_mode(g)?;
            let p = profile_by_id(g, profile_id).ok_or(INVALID_ARGUMENT)?;
            let list = p.placements.as_ref().ok_or(NOT_SUPPORTED)?;
            if asked.size != list.size || !list.starts.contains(&asked.start) {
                return Err(INVALID_ARGUMENT);
            }
            if left_by_count(g, p) == 0 || taken(g, (asked.start, asked.size)) {
                return Err(INSUFFICIENT_RESOURCES);
            }
            let id = next_id(g)?;
            let handle = instance_handle(index, id)?;
            let call = Call::CreateGpuInstance {
                gpu: g.pci.clone(),
                id,
                profile_id,
                start: asked.start,
                size: asked.size,
            };
            data::tell_simulator(d, &call).map_err(|e| refusal_of(&e))?;
            data::record(path, &call).map_err(|_| UNKNOWN)?;
            d.apply(&call);
            // SAFETY: not null, valid for a write as the caller promises.
            unsafe { put(instance, handle) }
        },
    ))
}

/// `nvmlDeviceGetGpuInstanceById`: `NOT_SUPPORTED` when MIG mode is off, `NOT_FOUND` for an
/// id the GPU has no instance with.
///
/// # Safety
/// `instance` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetGpuInstanceById", device, |_, g| {
        in_mig_mode(g)?;
        if !g.gpu_instances.iter().any(|gi| gi.id == id) {
            return Err(NOT_FOUND);
        }
        let handle = instance_handle(device_index(device)?, id)?;
        // SAFETY: as the caller promises.
        unsafe { put(instance, handle) }
    }))
}

/// `nvmlGpuInstanceDestroy`: `INVALID_ARGUMENT` for a handle that names no instance (one
/// destroyed already), `IN_USE` while a vGPU of the data runs on it; otherwise recorded in the
/// call log and destroyed.
#[unsafe(no_mangle)]
extern "C" fn nvmlGpuInstanceDestroy(instance: nvmlGpuInstance_t) -> nvmlReturn_t {
    let Ok((index, id)) = instance_of(instance) else {
        return INVALID_ARGUMENT;
    };
    done(with_mut(
        "nvmlGpuInstanceDestroy",
        Some(index),
        |d, path| {
            let g = gpu(d, index)?;
            if !g.gpu_instances.iter().any(|gi| gi.id == id) {
                return Err(INVALID_ARGUMENT);
            }
            if g.vgpus.iter().any(|v| v.gpu_instance_id == Some(id)) {
                return Err(IN_USE);
            }
            let call = Call::DestroyGpuInstance {
                gpu: g.pci.clone(),
                id,
            };
            data::tell_simulator(d, &call).map_err(|e| refusal_of(&e))?;
            data::record(path, &call).map_err(|_| UNKNOWN)?;
            d.apply(&call);
            Ok(())
        },
    ))
}

/// `nvmlDeviceSetMigMode`: `NOT_SUPPORTED` for a GPU without MIG, `INVALID_ARGUMENT` for a
/// mode other than `NVML_DEVICE_MIG_DISABLE`/`ENABLE`, `IN_USE` for a change while the GPU
/// has GPU instances or vGPUs. Asking for the mode it has and will keep changes nothing;
/// otherwise the change is recorded in the call log and applied, and the activation status
/// is `NVML_SUCCESS`, or `NVML_ERROR_RESET_REQUIRED` when the new mode waits for a reset.
///
/// # Safety
/// `status` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: nvmlDevice_t,
    mode: c_uint,
    status: *mut nvmlReturn_t,
) -> nvmlReturn_t {
    let Ok(index) = device_index(device) else {
        return INVALID_ARGUMENT;
    };
    done(with_mut("nvmlDeviceSetMigMode", Some(index), |d, path| {
        if status.is_null() || mode > MIG_ENABLE {
            return Err(INVALID_ARGUMENT);
        }
        let on = mode == MIG_ENABLE;
        let g = gpu(d, index)?;
        let now = g.mig.ok_or(NOT_SUPPORTED)?;
        if now.current == on && now.pending == on {
            // SAFETY: not null, valid for a write as the caller promises.
            return unsafe { put(status, SUCCESS) };
        }
        if now.current != on && (!g.gpu_instances.is_empty() || !g.vgpus.is_empty()) {
            return Err(IN_USE);
        }
        let call = Call::SetMigMode {
            gpu: g.pci.clone(),
            mode: on,
        };
        // A mode that waits for a reset is not in force, in sysfs either.
        if !g.mig_reset_required {
            data::tell_simulator(d, &call).map_err(|e| refusal_of(&e))?;
        }
        data::record(path, &call).map_err(|_| UNKNOWN)?;
        d.apply(&call);
        let current = gpu(d, index)?.mig.is_some_and(|m| m.current);
        let activation = if current == on {
            SUCCESS
        } else {
            RESET_REQUIRED
        };
        // SAFETY: not null, valid for a write as the caller promises.
        unsafe { put(status, activation) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: &str = include_str!("../../data/h200-mig.toml");

    fn h200() -> Gpu {
        let mut data: crate::data::Data = toml::from_str(H200).expect("the data file parses");
        data.gpus.remove(0)
    }

    fn profile(g: &Gpu, id: u32) -> (Profile, ProfilePlacements) {
        let p = profile_by_id(g, id).expect("the profile").clone();
        let placements = p.placements.clone().expect("its placements");
        (p, placements)
    }

    #[test]
    fn overlaps_adjacent_slices_is_false() {
        assert!(!overlaps((0, 2), (2, 2)));
    }

    #[test]
    fn overlaps_inside_is_true() {
        assert!(overlaps((0, 8), (4, 1)));
    }

    #[test]
    fn remaining_1g_on_h200_data_is_the_three_free_slices() {
        let g = h200();
        let (p, placements) = profile(&g, 19);
        assert_eq!(remaining(&g, &p, &placements), 3);
    }

    #[test]
    fn remaining_2g_on_h200_data_is_one() {
        let g = h200();
        let (p, placements) = profile(&g, 14);
        assert_eq!(remaining(&g, &p, &placements), 1);
    }

    #[test]
    fn remaining_7g_on_h200_data_is_zero() {
        let g = h200();
        let (p, placements) = profile(&g, 0);
        assert_eq!(remaining(&g, &p, &placements), 0);
    }

    #[test]
    fn remaining_1g_me_is_capped_by_instance_count() {
        let mut g = h200();
        g.gpu_instances.clear();
        let (p, placements) = profile(&g, 20);
        assert_eq!(remaining(&g, &p, &placements), 1);
    }

    #[test]
    fn next_id_on_h200_data_is_one() {
        assert_eq!(next_id(&h200()), Ok(1));
    }
}
