//! Safe calls to the NVML functions that `nvml-wrapper` 0.13 does not wrap, made through the
//! library `nvml-wrapper` loaded (so a missing symbol is the same
//! [`NvmlError::FailedToLoadSymbol`] as for the wrapper's own calls):
//!
//! - the active vGPU instances' raw ids (`nvmlDeviceGetActiveVgpus`; the wrapper hides the id
//!   that `nvmlDeviceGetVgpuUtilization` samples are keyed by);
//! - GPU-instance profiles with their names (`nvmlDeviceGetGpuInstanceProfileInfoV`) and the
//!   GPU instances of a profile (`nvmlDeviceGetGpuInstances`, `nvmlGpuInstanceGetInfo`);
//! - vGPU utilisation samples (`nvmlDeviceGetVgpuUtilization`);
//! - a vGPU type's placements (`nvmlDeviceGetVgpuTypeSupportedPlacements`,
//!   `nvmlDeviceGetVgpuTypeCreatablePlacements`), a vGPU's placement id
//!   (`nvmlVgpuInstanceGetPlacementId`) and the GPU's mixed-size (heterogeneous) mode
//!   (`nvmlDeviceGetVgpuHeterogeneousMode`, `nvmlDeviceSetVgpuHeterogeneousMode`);
//! - GPU-instance placements, free room, and GPU instances made and destroyed
//!   (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`,
//!   `nvmlDeviceGetGpuInstanceRemainingCapacity`, `nvmlDeviceCreateGpuInstanceWithPlacement`,
//!   `nvmlDeviceGetGpuInstanceById`, `nvmlGpuInstanceDestroy`). `nvml-wrapper` makes the
//!   placements call itself (`Device::possible_placements`), but returns its buffer without
//!   setting the vector's length, so its list is always empty.
//!
//! - vGPU migration metadata and NVIDIA's compatibility verdict ([`migration`]):
//!   `nvml-wrapper` decodes a vGPU's metadata without its opaque section, which the verdict
//!   needs.
//!
//! MIG mode is set with `nvml-wrapper`'s own `Device::set_mig_mode`.
//!
//! Signatures and structure layouts are those of `nvml.h` as `nvml-wrapper-sys` binds it
//! (NVIDIA NVML API Reference Guide, "vGPU Management" and "Multi Instance GPU Management").
//! Every pointer handed to NVML points into a buffer this crate owns for the whole call, sized
//! as NVML was told; every count NVML returns is bounded by that size before it is used.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod migration;

use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try, nvml_try_count};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlGpuInstance_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlReturn_t, nvmlValue_t,
    nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE, nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT, nvmlValueType_t,
    nvmlVgpuHeterogeneousMode_v1_t, nvmlVgpuInstance_t, nvmlVgpuInstanceUtilizationSample_t,
    nvmlVgpuPlacementId_v1_t, nvmlVgpuPlacementList_v2_t,
};

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` of the bindings: profile indices are `0..` this.
pub const GPU_INSTANCE_PROFILE_COUNT: u32 =
    nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_COUNT;

/// `NVML_ERROR_INSUFFICIENT_RESOURCES` (a GPU instance does not fit), for which `nvml-wrapper`
/// 0.13 has no variant: it comes back as [`NvmlError::UnexpectedVariant`] of this code.
pub const ERROR_INSUFFICIENT_RESOURCES: u32 =
    nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;

/// `NVML_VGPU_PGPU_HETEROGENEOUS_MODE`: placements as mixed-size mode uses them.
const HETEROGENEOUS_MODE: c_uint = nvml_wrapper_sys::bindings::NVML_VGPU_PGPU_HETEROGENEOUS_MODE;

/// `NVML_STRUCT_VERSION(name, version)` of `nvml.h`: the structure's size, and its version in
/// the top byte.
const fn struct_version<T>(version: u32) -> u32 {
    // The structures versioned this way are a few dozen bytes: the size fits in 24 bits.
    (std::mem::size_of::<T>() as u32) | (version << 24)
}

/// The version tag of `nvmlGpuInstanceProfileInfo_v2_t`.
pub const GPU_INSTANCE_PROFILE_INFO_V2: u32 = struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2);

/// The version tag of `nvmlVgpuPlacementList_v2_t`.
pub const VGPU_PLACEMENT_LIST_V2: u32 = struct_version::<nvmlVgpuPlacementList_v2_t>(2);

/// The version tag of `nvmlVgpuHeterogeneousMode_v1_t` (`0x1000008`).
pub const VGPU_HETEROGENEOUS_MODE_V1: u32 = struct_version::<nvmlVgpuHeterogeneousMode_v1_t>(1);

/// The version tag of `nvmlVgpuPlacementId_v1_t`.
pub const VGPU_PLACEMENT_ID_V1: u32 = struct_version::<nvmlVgpuPlacementId_v1_t>(1);

/// A GPU's vGPU size mode (`nvmlVgpuHeterogeneousMode_t`): NVIDIA's mixed-size mode is
/// `NVML_FEATURE_ENABLED` there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VgpuSizeMode {
    /// Every vGPU of the GPU has one type (the default at each boot).
    Equal,
    /// Time-sliced vGPUs of several sizes share the GPU, each at a placement id.
    Mixed,
}

/// A GPU-instance profile of a GPU (`nvmlGpuInstanceProfileInfo_v2_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInstanceProfile {
    /// The profile index it was asked for (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// The profile id GPU instances and vGPU types refer to.
    pub id: u32,
    /// Compute slices.
    pub slices: u32,
    /// How many GPU instances of the profile the GPU can hold at most.
    pub instance_count: u32,
    /// Memory, in MiB.
    pub memory_mib: u64,
    /// The driver's name, e.g. `MIG 1g.18gb`.
    pub name: String,
}

/// One GPU instance (`nvmlGpuInstanceInfo_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuInstanceInfo {
    /// Its id.
    pub id: u32,
    /// Its profile's id.
    pub profile_id: u32,
    /// First memory slice it occupies.
    pub placement_start: u32,
    /// Memory slices it occupies.
    pub placement_size: u32,
}

/// A place a GPU instance takes on its GPU, in memory slices (`nvmlGpuInstancePlacement_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuInstancePlacement {
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// One utilisation sample of one vGPU instance, values in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VgpuUtilization {
    /// The vGPU instance.
    pub instance: u32,
    /// When it was taken, in microseconds.
    pub timestamp_us: u64,
    /// SM utilisation.
    pub sm: u64,
    /// Memory controller utilisation.
    pub memory: u64,
    /// Encoder utilisation.
    pub encoder: u64,
    /// Decoder utilisation.
    pub decoder: u64,
}

/// The placements of a vGPU type on a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuPlacements {
    /// Placement slots one vGPU of the type occupies.
    pub size: u32,
    /// The placement ids it can start at.
    pub ids: Vec<u32>,
}

/// The raw ids of the vGPU instances running on `device` (`nvmlDeviceGetActiveVgpus`).
pub fn active_vgpu_instances(device: &Device<'_>) -> Result<Vec<u32>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetActiveVgpus.as_ref())?;
    // SAFETY: `device.handle()` is valid while `device` lives, which outlasts the calls.
    let handle = unsafe { device.handle() };
    let mut count: c_uint = 0;
    // SAFETY: a null array with a count of 0 asks for the count only; NVML writes `count`,
    // which points at a local.
    nvml_try_count(unsafe { sym(handle, &mut count, std::ptr::null_mut()) })?;
    let mut ids: Vec<nvmlVgpuInstance_t> = vec![0; count as usize];
    let mut filled = count;
    // SAFETY: `ids` holds `count` elements and NVML is told so through `filled`; it writes
    // at most that many and the new count to `filled`.
    nvml_try(unsafe { sym(handle, &mut filled, ids.as_mut_ptr()) })?;
    ids.truncate(filled.min(count) as usize);
    Ok(ids)
}

/// The GPU-instance profile at `index` (`NVML_GPU_INSTANCE_PROFILE_*`) of `device`, with its
/// name (`nvmlDeviceGetGpuInstanceProfileInfoV`). `NotSupported` or `InvalidArg` for an index
/// the GPU does not have.
pub fn gpu_instance_profile(
    device: &Device<'_>,
    index: u32,
) -> Result<GpuInstanceProfile, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .as_ref(),
    )?;
    // SAFETY: an all-zero `nvmlGpuInstanceProfileInfo_v2_t` is a valid value: integers and a
    // character array.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = GPU_INSTANCE_PROFILE_INFO_V2;
    // SAFETY: the handle is valid while `device` lives; `info` is a local of the type and
    // version NVML is told.
    nvml_try(unsafe { sym(device.handle(), index, &mut info) })?;
    Ok(GpuInstanceProfile {
        index,
        id: info.id,
        slices: info.sliceCount,
        instance_count: info.instanceCount,
        memory_mib: info.memorySizeMB,
        name: text(&info.name),
    })
}

/// The text of a C character array: up to its NUL, or to the array's end if NVML filled all of
/// it, never past it.
pub(crate) fn text(chars: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|c| c.to_ne_bytes()[0])
        .take_while(|b| *b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A failure of one of the NVML functions a call here makes, with the function's name.
#[derive(Debug)]
pub struct Failed {
    /// The NVML function that failed.
    pub function: &'static str,
    /// How it failed.
    pub error: NvmlError,
}

/// The GPU instances of profile `profile_id` on `device`, at most `capacity` (the profile's
/// `instance_count`): `nvmlDeviceGetGpuInstances`, then `nvmlGpuInstanceGetInfo` of each.
pub fn gpu_instances(
    device: &Device<'_>,
    profile_id: u32,
    capacity: u32,
) -> Result<Vec<GpuInstanceInfo>, Failed> {
    let listing = |error| Failed {
        function: "nvmlDeviceGetGpuInstances",
        error,
    };
    let getting = |error| Failed {
        function: "nvmlGpuInstanceGetInfo",
        error,
    };
    let lib = device.nvml().lib();
    let list = nvml_sym(lib.nvmlDeviceGetGpuInstances.as_ref()).map_err(listing)?;
    let info = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref()).map_err(getting)?;
    let mut handles: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); capacity as usize];
    let mut count: c_uint = 0;
    if capacity > 0 {
        // SAFETY: `handles` holds `capacity` elements, the size NVML requires (the profile's
        // instance count); NVML writes at most that many handles and their number to `count`.
        nvml_try(unsafe {
            list(
                device.handle(),
                profile_id,
                handles.as_mut_ptr(),
                &mut count,
            )
        })
        .map_err(listing)?;
    }
    handles.truncate(count.min(capacity) as usize);
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        // SAFETY: `handle` is one NVML just returned for this device.
        out.push(unsafe { instance_info(info, handle) }.map_err(getting)?);
    }
    Ok(out)
}

/// `nvmlGpuInstanceGetInfo`'s signature in the bindings.
type GetInfo = unsafe extern "C" fn(nvmlGpuInstance_t, *mut nvmlGpuInstanceInfo_t) -> nvmlReturn_t;

/// What `nvmlGpuInstanceGetInfo` (`info`) says about the GPU instance `handle`.
///
/// # Safety
/// `handle` is a GPU instance NVML gave and no call has destroyed since.
unsafe fn instance_info(
    info: &GetInfo,
    handle: nvmlGpuInstance_t,
) -> Result<GpuInstanceInfo, NvmlError> {
    // SAFETY: an all-zero `nvmlGpuInstanceInfo_t` is valid (a null device pointer and
    // integers).
    let mut raw: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `handle` is a live GPU instance, as the caller promises; `raw` is a local.
    nvml_try(unsafe { info(handle, &mut raw) })?;
    Ok(GpuInstanceInfo {
        id: raw.id,
        profile_id: raw.profileId,
        placement_start: raw.placement.start,
        placement_size: raw.placement.size,
    })
}

/// Every placement a GPU instance of profile `profile_id` can take on `device`, taken or not
/// (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`). `NotSupported` when MIG mode is off or
/// the GPU lacks the profile.
pub fn gpu_instance_possible_placements(
    device: &Device<'_>,
    profile_id: u32,
) -> Result<Vec<GpuInstancePlacement>, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    let mut count: c_uint = 0;
    // SAFETY: a null array asks for the count only; NVML writes `count`, a local.
    nvml_try_count(unsafe { sym(handle, profile_id, std::ptr::null_mut(), &mut count) })?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut raw = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
    let mut filled = count;
    // SAFETY: `raw` holds `count` placements, the number NVML just gave for this profile and
    // the number it writes ("must be large enough to accommodate the placements supported by
    // the profile"); it writes their number to `filled`, a local.
    nvml_try(unsafe { sym(handle, profile_id, raw.as_mut_ptr(), &mut filled) })?;
    raw.truncate(filled.min(count) as usize);
    Ok(raw
        .into_iter()
        .map(|p| GpuInstancePlacement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// How many more GPU instances of profile `profile_id` `device` can take as its instances are
/// placed now (`nvmlDeviceGetGpuInstanceRemainingCapacity`).
pub fn gpu_instance_remaining_capacity(
    device: &Device<'_>,
    profile_id: u32,
) -> Result<u32, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetGpuInstanceRemainingCapacity
            .as_ref(),
    )?;
    let mut count: c_uint = 0;
    // SAFETY: the handle is valid while `device` lives; NVML writes `count`, a local.
    nvml_try(unsafe { sym(device.handle(), profile_id, &mut count) })?;
    Ok(count)
}

/// Makes a GPU instance of profile `profile_id` at `placement` on `device`
/// (`nvmlDeviceCreateGpuInstanceWithPlacement`) and reads it back (`nvmlGpuInstanceGetInfo`).
/// NVML answers `InsufficientResources` (here [`ERROR_INSUFFICIENT_RESOURCES`]) when the
/// placement overlaps an instance or the profile has no room left. When only the read-back
/// fails, the instance exists: the error names `nvmlGpuInstanceGetInfo`.
pub fn create_gpu_instance(
    device: &Device<'_>,
    profile_id: u32,
    placement: GpuInstancePlacement,
) -> Result<GpuInstanceInfo, Failed> {
    let creating = |error| Failed {
        function: "nvmlDeviceCreateGpuInstanceWithPlacement",
        error,
    };
    let getting = |error| Failed {
        function: "nvmlGpuInstanceGetInfo",
        error,
    };
    let lib = device.nvml().lib();
    let create =
        nvml_sym(lib.nvmlDeviceCreateGpuInstanceWithPlacement.as_ref()).map_err(creating)?;
    let info = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref()).map_err(getting)?;
    let asked = nvmlGpuInstancePlacement_t {
        start: placement.start,
        size: placement.size,
    };
    let mut handle: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: the device handle is valid while `device` lives; `asked` is a local NVML only
    // reads, `handle` a local it writes.
    nvml_try(unsafe { create(device.handle(), profile_id, &asked, &mut handle) })
        .map_err(creating)?;
    // SAFETY: `handle` is the GPU instance NVML just made on this device.
    unsafe { instance_info(info, handle) }.map_err(getting)
}

/// Destroys the GPU instance `id` of `device`: its handle from `nvmlDeviceGetGpuInstanceById`
/// (`NotFound` for an id the GPU does not have), then `nvmlGpuInstanceDestroy` (`InUse`
/// while something runs on it).
pub fn destroy_gpu_instance(device: &Device<'_>, id: u32) -> Result<(), Failed> {
    let finding = |error| Failed {
        function: "nvmlDeviceGetGpuInstanceById",
        error,
    };
    let destroying = |error| Failed {
        function: "nvmlGpuInstanceDestroy",
        error,
    };
    let lib = device.nvml().lib();
    let find = nvml_sym(lib.nvmlDeviceGetGpuInstanceById.as_ref()).map_err(finding)?;
    let destroy = nvml_sym(lib.nvmlGpuInstanceDestroy.as_ref()).map_err(destroying)?;
    let mut handle: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: the device handle is valid while `device` lives; NVML writes `handle`, a local.
    nvml_try(unsafe { find(device.handle(), id, &mut handle) }).map_err(finding)?;
    // SAFETY: `handle` is the GPU instance NVML just gave for this device and id; it is not
    // used after this call.
    nvml_try(unsafe { destroy(handle) }).map_err(destroying)
}

/// A sample value as the number its type says, in whole units (a negative one is 0).
fn sample_value(kind: nvmlValueType_t, value: nvmlValue_t) -> Result<u64, NvmlError> {
    // SAFETY: each arm reads the union member that `kind`, NVML's own tag for the samples of
    // this call, says is the one written.
    unsafe {
        #[allow(non_upper_case_globals)]
        match kind {
            nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => {
                let v = value.dVal;
                Ok(if v.is_finite() && v > 0.0 {
                    v.round() as u64
                } else {
                    0
                })
            }
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => Ok(u64::from(value.uiVal)),
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => Ok(value.ulVal),
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => Ok(value.ullVal),
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => {
                Ok(u64::try_from(value.sllVal).unwrap_or(0))
            }
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => {
                Ok(u64::try_from(value.siVal).unwrap_or(0))
            }
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => Ok(u64::from(value.usVal)),
            other => Err(NvmlError::UnexpectedVariant(other)),
        }
    }
}

/// The utilisation samples of the vGPUs on `device` taken after `last_seen_us` (0: the
/// latest the driver holds): `nvmlDeviceGetVgpuUtilization`.
pub fn vgpu_utilization(
    device: &Device<'_>,
    last_seen_us: u64,
) -> Result<Vec<VgpuUtilization>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetVgpuUtilization.as_ref())?;
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    let mut kind: nvmlValueType_t = 0;
    let mut count: c_uint = 0;
    // SAFETY: a null sample array asks for the count; NVML writes `kind` and `count`, locals.
    nvml_try_count(unsafe {
        sym(
            handle,
            last_seen_us,
            &mut kind,
            &mut count,
            std::ptr::null_mut(),
        )
    })?;
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: an all-zero sample is valid: integers and unions of numbers.
    let zero: nvmlVgpuInstanceUtilizationSample_t = unsafe { std::mem::zeroed() };
    let mut samples = vec![zero; count as usize];
    let mut filled = count;
    // SAFETY: `samples` holds `count` elements, as `filled` tells NVML; it writes at most that
    // many and their number to `filled`.
    nvml_try(unsafe {
        sym(
            handle,
            last_seen_us,
            &mut kind,
            &mut filled,
            samples.as_mut_ptr(),
        )
    })?;
    samples.truncate(filled.min(count) as usize);
    samples
        .into_iter()
        .map(|s| {
            Ok(VgpuUtilization {
                instance: s.vgpuInstance,
                timestamp_us: s.timeStamp,
                sm: sample_value(kind, s.smUtil)?,
                memory: sample_value(kind, s.memUtil)?,
                encoder: sample_value(kind, s.encUtil)?,
                decoder: sample_value(kind, s.decUtil)?,
            })
        })
        .collect()
}

/// The placements a vGPU of type `type_id` can take on `device` in mixed-size mode
/// (`nvmlDeviceGetVgpuTypeSupportedPlacements`, vGPU 17+).
pub fn vgpu_type_supported_placements(
    device: &Device<'_>,
    type_id: u32,
) -> Result<VgpuPlacements, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetVgpuTypeSupportedPlacements
            .as_ref(),
    )?;
    placements(device, *sym, type_id, HETEROGENEOUS_MODE)
}

/// The placements of `type_id` on `device` in `list_mode` (`nvmlDeviceGetVgpuTypeSupportedPlacements`
/// or `...CreatablePlacements`): the count first (null ids), then the ids, asking again
/// while NVML answers `NVML_ERROR_INSUFFICIENT_SIZE` (the count grew in between).
fn placements(
    device: &Device<'_>,
    sym: unsafe extern "C" fn(
        nvml_wrapper_sys::bindings::nvmlDevice_t,
        c_uint,
        *mut nvmlVgpuPlacementList_v2_t,
    ) -> nvmlReturn_t,
    type_id: u32,
    list_mode: c_uint,
) -> Result<VgpuPlacements, NvmlError> {
    // SAFETY: the handle is valid while `device` lives.
    let handle = unsafe { device.handle() };
    let mut list = nvmlVgpuPlacementList_v2_t {
        version: VGPU_PLACEMENT_LIST_V2,
        placementSize: 0,
        count: 0,
        placementIds: std::ptr::null_mut(),
        mode: list_mode,
    };
    // SAFETY: a null id array with a count of 0 asks for the count; `list` is a local of the
    // version NVML is told.
    nvml_try_count(unsafe { sym(handle, type_id, &mut list) })?;
    // NVML gives at most one id per slot of a GPU's frame buffer: a few hundred.
    for _ in 0..4 {
        let count = list.count;
        if count == 0 {
            return Ok(VgpuPlacements {
                size: list.placementSize,
                ids: Vec::new(),
            });
        }
        let mut ids: Vec<c_uint> = vec![0; count as usize];
        list.placementIds = ids.as_mut_ptr();
        // SAFETY: `ids` holds `count` elements, the count NVML asked for and is told again
        // through `list.count`; it lives until after the call.
        let code = unsafe { sym(handle, type_id, &mut list) };
        list.placementIds = std::ptr::null_mut();
        if code == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            continue;
        }
        nvml_try(code)?;
        ids.truncate(list.count.min(count) as usize);
        return Ok(VgpuPlacements {
            size: list.placementSize,
            ids,
        });
    }
    Err(NvmlError::InsufficientSize(None))
}

/// The placement ids a new vGPU of `type_id` may take on `device` now, in the GPU's mode
/// (`nvmlDeviceGetVgpuTypeCreatablePlacements`); none when it cannot be created now.
pub fn vgpu_type_creatable_placements(
    device: &Device<'_>,
    type_id: u32,
) -> Result<VgpuPlacements, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetVgpuTypeCreatablePlacements
            .as_ref(),
    )?;
    placements(device, *sym, type_id, HETEROGENEOUS_MODE)
}

/// The vGPU size mode of `device` (`nvmlDeviceGetVgpuHeterogeneousMode`):
/// `NotSupported` on a GPU without NVIDIA's mixed-size mode.
pub fn vgpu_heterogeneous_mode(device: &Device<'_>) -> Result<VgpuSizeMode, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    let mut mode = nvmlVgpuHeterogeneousMode_v1_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: 0,
    };
    // SAFETY: the handle is valid while `device` lives; `mode` is a local of the version NVML
    // is told.
    nvml_try(unsafe { sym(device.handle(), &mut mode) })?;
    match mode.mode {
        nvml_wrapper_sys::bindings::nvmlEnableState_enum_NVML_FEATURE_ENABLED => {
            Ok(VgpuSizeMode::Mixed)
        }
        nvml_wrapper_sys::bindings::nvmlEnableState_enum_NVML_FEATURE_DISABLED => {
            Ok(VgpuSizeMode::Equal)
        }
        other => Err(NvmlError::UnexpectedVariant(other)),
    }
}

/// Sets the vGPU size mode of `device`: mixed-size when `mixed`, else equal
/// (`nvmlDeviceSetVgpuHeterogeneousMode`). `InUse` while the GPU has a vGPU, `NotSupported`
/// on a GPU without the mode.
pub fn set_vgpu_heterogeneous_mode(device: &Device<'_>, mixed: bool) -> Result<(), NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceSetVgpuHeterogeneousMode
            .as_ref(),
    )?;
    let mode = nvmlVgpuHeterogeneousMode_v1_t {
        version: VGPU_HETEROGENEOUS_MODE_V1,
        mode: if mixed {
            nvml_wrapper_sys::bindings::nvmlEnableState_enum_NVML_FEATURE_ENABLED
        } else {
            nvml_wrapper_sys::bindings::nvmlEnableState_enum_NVML_FEATURE_DISABLED
        },
    };
    // SAFETY: the handle is valid while `device` lives; NVML only reads `mode`, a local of
    // the version it is told.
    nvml_try(unsafe { sym(device.handle(), &mode) })
}

/// The placement id of vGPU instance `instance` (`nvmlVgpuInstanceGetPlacementId`).
pub fn vgpu_instance_placement_id(nvml: &Nvml, instance: u32) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlVgpuInstanceGetPlacementId.as_ref())?;
    let mut placement = nvmlVgpuPlacementId_v1_t {
        version: VGPU_PLACEMENT_ID_V1,
        placementId: 0,
    };
    // SAFETY: `placement` is a local of the version NVML is told; an unknown instance is an
    // error code, not undefined behaviour.
    nvml_try(unsafe { sym(instance, &mut placement) })?;
    Ok(placement.placementId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_version_profile_info_v2_is_size_and_version() {
        assert_eq!(
            GPU_INSTANCE_PROFILE_INFO_V2,
            (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24)
        );
    }

    #[test]
    fn struct_version_heterogeneous_mode_v1_is_0x1000008() {
        assert_eq!(VGPU_HETEROGENEOUS_MODE_V1, 0x0100_0008);
    }

    #[test]
    fn struct_version_placement_id_v1_is_size_and_version() {
        assert_eq!(VGPU_PLACEMENT_ID_V1, 0x0100_0008);
    }

    #[test]
    fn struct_version_placement_list_v2_is_size_and_version() {
        assert_eq!(
            VGPU_PLACEMENT_LIST_V2,
            (std::mem::size_of::<nvmlVgpuPlacementList_v2_t>() as u32) | (2 << 24)
        );
    }

    #[test]
    fn sample_value_unsigned_int_reads_ui_val() {
        let value = nvmlValue_t { uiVal: 42 };
        assert_eq!(
            sample_value(nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT, value).ok(),
            Some(42)
        );
    }

    #[test]
    fn sample_value_negative_double_is_zero() {
        let value = nvmlValue_t { dVal: -3.0 };
        assert_eq!(
            sample_value(nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE, value).ok(),
            Some(0)
        );
    }

    #[test]
    fn sample_value_unknown_type_is_unexpected_variant() {
        let value = nvmlValue_t { uiVal: 1 };
        assert!(matches!(
            sample_value(99, value),
            Err(NvmlError::UnexpectedVariant(99))
        ));
    }
}
