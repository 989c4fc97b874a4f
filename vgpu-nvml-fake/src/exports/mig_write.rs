//! Changes to MIG: the mode, and GPU instances made and destroyed ("Multi Instance GPU
//! Management" of the NVML API Reference), each accepted change recorded in the call log so
//! that a later process sees it.
//!
//! With a simulator (`sim_root`), the simulator decides: each change is a control line and
//! its refusal is NVML's error (see the crate documentation). Without one, the fake's rules,
//! kept to what `vgpu` relies on:
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

use std::path::Path;

use super::core::on_gpu;
use super::refusal_of;
use crate::data::{self, Call, Data, Gpu, Profile, ProfilePlacements};
use crate::sim;
use crate::state::{
    Answer, device_index, done, gpu, instance_handle, instance_of, put, put_list, with_mut,
};

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLE: c_uint = 1;

/// Reads the simulated host at `root` again after a change.
fn reread(d: &mut Data, root: &Path) -> Answer {
    let need = sim::Need {
        vgpus: true,
        creatable: false,
    };
    sim::refresh(d, root, need).map_err(|_| UNKNOWN)
}

/// `g` in MIG mode now, or `NOT_SUPPORTED`.
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
/// GPU lacks the profile; the simulator's count with one, else 0 for a profile without
/// placements and the fake's count.
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
            let n = match p.remaining {
                Some(n) => n,
                None => p.placements.as_ref().map_or(0, |pl| remaining(g, p, pl)),
            };
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
            let pci = g.pci.clone();
            let id = match d.sim_root.clone() {
                Some(root) => {
                    let name = p.name.trim_start_matches("MIG ");
                    sim::control(
                        &root,
                        &format!("gpu-instance-add {pci} {name} {}", asked.start),
                    )
                    .map_err(|e| refusal_of(&e))?;
                    reread(d, &root)?;
                    gpu(d, index)?
                        .gpu_instances
                        .iter()
                        .find(|gi| gi.profile_id == profile_id && gi.placement_start == asked.start)
                        .map(|gi| gi.id)
                        .ok_or(UNKNOWN)?
                }
                None => {
                    if left_by_count(g, p) == 0 || taken(g, (asked.start, asked.size)) {
                        return Err(INSUFFICIENT_RESOURCES);
                    }
                    next_id(g)?
                }
            };
            let handle = instance_handle(index, id)?;
            let call = Call::CreateGpuInstance {
                gpu: pci,
                id,
                profile_id,
                start: asked.start,
                size: asked.size,
            };
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
            let call = Call::DestroyGpuInstance {
                gpu: g.pci.clone(),
                id,
            };
            match d.sim_root.clone() {
                Some(root) => {
                    sim::control(&root, &format!("gpu-instance-remove {} {id}", g.pci))
                        .map_err(|e| refusal_of(&e))?;
                    data::record(path, &call).map_err(|_| UNKNOWN)?;
                    reread(d, &root)
                }
                None => {
                    if g.vgpus.iter().any(|v| v.gpu_instance_id == Some(id)) {
                        return Err(IN_USE);
                    }
                    data::record(path, &call).map_err(|_| UNKNOWN)?;
                    d.apply(&call);
                    Ok(())
                }
            }
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
        let in_use = now.current != on && (!g.gpu_instances.is_empty() || !g.vgpus.is_empty());
        let call = Call::SetMigMode {
            gpu: g.pci.clone(),
            mode: on,
        };
        // A mode that waits for a reset is not in force, in the simulator either: the fake
        // keeps it as the pending mode.
        let root = d.sim_root.clone().filter(|_| !g.mig_reset_required);
        match &root {
            Some(root) => {
                let word = if on { "on" } else { "off" };
                sim::control(root, &format!("mig-mode {} {word}", g.pci))
                    .map_err(|e| refusal_of(&e))?;
            }
            None if in_use => return Err(IN_USE),
            None => {}
        }
        data::record(path, &call).map_err(|_| UNKNOWN)?;
        d.apply(&call);
        if let Some(root) = d.sim_root.clone() {
            reread(d, &root)?;
        }
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

    /// An H200 in MIG mode with two 1g.18gb instances (slices 4 and 5) and one 2g.35gb (0).
    const H200: &str = r#"
[[gpu]]
pci = "0000:18:00.0"
name = "NVIDIA H200"
uuid = "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
pci_device_id = 0x233510de
virtualization_mode = "host-vgpu"
host_vgpu_mode = "sriov"
mig = { current = true, pending = true }
ecc = { current = true, pending = true }
scheduler = { policy = 1, arr_mode = 0, timeslice_ns = 0 }
scheduler_capabilities = { policies = [1, 2, 3], arr_supported = true, min_timeslice_ns = 1000000, max_timeslice_ns = 30000000 }
creatable = [1414, 1415]

[[gpu.profile]]
index = 0
id = 19
name = "MIG 1g.18gb"
slices = 1
instance_count = 7
memory_mib = 16896
placements = { size = 1, starts = [0, 1, 2, 3, 4, 5, 6] }

[[gpu.profile]]
index = 1
id = 14
name = "MIG 2g.35gb"
slices = 2
instance_count = 3
memory_mib = 33792
placements = { size = 2, starts = [0, 2, 4] }

[[gpu.profile]]
index = 2
id = 9
name = "MIG 3g.71gb"
slices = 3
instance_count = 2
memory_mib = 67584
placements = { size = 4, starts = [0, 4] }

[[gpu.profile]]
index = 3
id = 5
name = "MIG 4g.71gb"
slices = 4
instance_count = 1
memory_mib = 67584
placements = { size = 4, starts = [0] }

[[gpu.profile]]
index = 4
id = 0
name = "MIG 7g.141gb"
slices = 7
instance_count = 1
memory_mib = 142336
placements = { size = 8, starts = [0] }

[[gpu.profile]]
index = 7
id = 20
name = "MIG 1g.18gb+me"
slices = 1
instance_count = 1
memory_mib = 16896
placements = { size = 1, starts = [0, 1, 2, 3, 4, 5, 6] }

[[gpu.profile]]
index = 9
id = 15
name = "MIG 1g.35gb"
slices = 1
instance_count = 4
memory_mib = 33792
placements = { size = 2, starts = [0, 2, 4, 6] }

[[gpu.gpu_instance]]
id = 9
profile_id = 19
placement_start = 4
placement_size = 1

[[gpu.gpu_instance]]
id = 10
profile_id = 19
placement_start = 5
placement_size = 1

[[gpu.gpu_instance]]
id = 3
profile_id = 14
placement_start = 0
placement_size = 2
"#;

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
