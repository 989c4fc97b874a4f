//! vGPU migration ("vGPU Migration" of the NVML API Reference): a running vGPU's metadata, a
//! GPU's metadata, and the verdict on the two under the data's rule ([`crate::data::Migration`]).
//!
//! The opaque sections are this library's own: a line of text naming what the verdict needs,
//! `vgpu-nvml-fake vgpu type=<id> device=<pci_device_id>` for a vGPU and
//! `vgpu-nvml-fake pgpu device=<pci_device_id> types=<id>,<id>` for a GPU. Metadata from
//! elsewhere is `NVML_ERROR_INVALID_ARGUMENT`.

use std::ffi::{c_char, c_uint};
use std::mem::{offset_of, size_of};

use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND, nvmlReturn_t,
    nvmlVgpuGuestInfoState_enum_NVML_VGPU_INSTANCE_GUEST_INFO_STATE_INITIALIZED as GUEST_INITIALIZED,
    nvmlVgpuInstance_t, nvmlVgpuMetadata_t, nvmlVgpuPgpuCompatibility_t,
    nvmlVgpuPgpuCompatibilityLimitCode_enum_NVML_VGPU_COMPATIBILITY_LIMIT_GPU as LIMIT_GPU,
    nvmlVgpuPgpuCompatibilityLimitCode_enum_NVML_VGPU_COMPATIBILITY_LIMIT_GUEST_DRIVER as LIMIT_GUEST_DRIVER,
    nvmlVgpuPgpuCompatibilityLimitCode_enum_NVML_VGPU_COMPATIBILITY_LIMIT_HOST_DRIVER as LIMIT_HOST_DRIVER,
    nvmlVgpuPgpuMetadata_t, nvmlVgpuVmCompatibility_enum_NVML_VGPU_VM_COMPATIBILITY_COLD as COLD,
    nvmlVgpuVmCompatibility_enum_NVML_VGPU_VM_COMPATIBILITY_LIVE as LIVE,
};

use super::core::{fill, on_gpu};
use crate::data::Data;
use crate::state::{Answer, done, put, with};

/// What this library's opaque sections start with.
const TAG: &str = "vgpu-nvml-fake";

/// Writes `header` and `opaque` after it (at `opaque_at`) to the buffer of `*size` bytes at
/// `out`, `*size` set to the bytes they take; `INSUFFICIENT_SIZE` with the size when the buffer
/// is too small (or null with a size of 0: the size query); `INVALID_ARGUMENT` for a null
/// buffer of another size.
///
/// # Safety
/// `size` is null or valid for a read and a write; `out` null or valid for `*size` bytes.
unsafe fn put_metadata<T: Copy>(
    out: *mut T,
    size: *mut c_uint,
    header: T,
    opaque_at: usize,
    opaque: &[u8],
) -> Answer {
    if size.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let needed = size_of::<T>().max(opaque_at + opaque.len());
    let needed_u32 = c_uint::try_from(needed).map_err(|_| INVALID_ARGUMENT)?;
    // SAFETY: not null, valid as the caller promises.
    let room = unsafe { size.read() };
    // A null buffer is the size query, with a size of 0 (NVML API Reference Guide).
    if out.is_null() && room != 0 {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: as above.
    unsafe { size.write(needed_u32) };
    if room < needed_u32 || out.is_null() {
        return Err(INSUFFICIENT_SIZE);
    }
    let bytes = out.cast::<u8>();
    // SAFETY: `out` is valid for `room >= needed` bytes; `header` and `opaque` are separate
    // values; `opaque_at + opaque.len() <= needed`.
    unsafe {
        std::ptr::write_bytes(bytes, 0, needed);
        std::ptr::copy_nonoverlapping((&raw const header).cast::<u8>(), bytes, size_of::<T>());
        std::ptr::copy_nonoverlapping(opaque.as_ptr(), bytes.add(opaque_at), opaque.len());
    }
    Ok(())
}

/// The opaque section of a metadata structure at `meta`, whose size is at `size_at` and whose
/// bytes start at `at`.
///
/// # Safety
/// `meta` is valid for reads of the structure and of the opaque section it announces.
unsafe fn opaque_of<T>(meta: *const T, size_at: usize, at: usize) -> Answer<String> {
    if meta.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let base = meta.cast::<u8>();
    // SAFETY: `size_at` is a field of the structure, which is readable.
    let len = unsafe { base.add(size_at).cast::<c_uint>().read_unaligned() } as usize;
    if len > 4096 {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller promises the announced opaque section is readable.
    let bytes = unsafe { std::slice::from_raw_parts(base.add(at), len) };
    String::from_utf8(bytes.to_vec()).map_err(|_| INVALID_ARGUMENT)
}

/// The value of `key=` in an opaque section of kind `kind`.
fn field<'a>(opaque: &'a str, kind: &str, key: &str) -> Answer<&'a str> {
    let mut words = opaque.split(' ');
    if words.next() != Some(TAG) || words.next() != Some(kind) {
        return Err(INVALID_ARGUMENT);
    }
    words
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .ok_or(INVALID_ARGUMENT)
}

fn number(text: &str) -> Answer<u32> {
    match text.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|_| INVALID_ARGUMENT)
}

/// `nvmlVgpuInstanceGetMetadata`.
///
/// # Safety
/// `size` is null or valid for a read and a write; `meta` null or valid for `*size` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlVgpuInstanceGetMetadata(
    instance: nvmlVgpuInstance_t,
    meta: *mut nvmlVgpuMetadata_t,
    size: *mut c_uint,
) -> nvmlReturn_t {
    done(with("nvmlVgpuInstanceGetMetadata", None, |d| {
        let (gpu, vgpu) = d
            .gpus
            .iter()
            .flat_map(|g| g.vgpus.iter().map(move |v| (g, v)))
            .find(|(_, v)| v.instance == instance)
            .ok_or(NOT_FOUND)?;
        // SAFETY: an all-zero structure is valid: integers and character arrays.
        let mut header: nvmlVgpuMetadata_t = unsafe { std::mem::zeroed() };
        header.version = 1;
        header.revision = 1;
        fill(&mut header.hostDriverVersion, &d.driver_version);
        if let Some(guest) = &vgpu.guest_driver {
            header.guestInfoState = GUEST_INITIALIZED;
            fill(&mut header.guestDriverVersion, guest);
        }
        let opaque = format!(
            "{TAG} vgpu type={} device={:#010x}",
            vgpu.type_id, gpu.pci_device_id
        );
        header.opaqueDataSize = c_uint::try_from(opaque.len()).map_err(|_| INVALID_ARGUMENT)?;
        let at = offset_of!(nvmlVgpuMetadata_t, opaqueData);
        // SAFETY: as the caller promises.
        unsafe { put_metadata(meta, size, header, at, opaque.as_bytes()) }
    }))
}

/// `nvmlDeviceGetVgpuMetadata`.
///
/// # Safety
/// As [`nvmlVgpuInstanceGetMetadata`].
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlDeviceGetVgpuMetadata(
    device: nvmlDevice_t,
    meta: *mut nvmlVgpuPgpuMetadata_t,
    size: *mut c_uint,
) -> nvmlReturn_t {
    done(on_gpu("nvmlDeviceGetVgpuMetadata", device, |d, g| {
        // SAFETY: an all-zero structure is valid: integers and character arrays.
        let mut header: nvmlVgpuPgpuMetadata_t = unsafe { std::mem::zeroed() };
        header.version = 1;
        header.revision = 1;
        fill(&mut header.hostDriverVersion, &d.driver_version);
        let types: Vec<String> = g.types.iter().map(|t| t.id.to_string()).collect();
        let opaque = format!(
            "{TAG} pgpu device={:#010x} types={}",
            g.pci_device_id,
            types.join(",")
        );
        header.opaqueDataSize = c_uint::try_from(opaque.len()).map_err(|_| INVALID_ARGUMENT)?;
        let at = offset_of!(nvmlVgpuPgpuMetadata_t, opaqueData);
        // SAFETY: as the caller promises.
        unsafe { put_metadata(meta, size, header, at, opaque.as_bytes()) }
    }))
}

/// The text of a C character array, to its NUL or its end.
fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|c| c.to_ne_bytes()[0])
        .take_while(|b| *b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The limits the data's rule puts on moving the vGPU of `vgpu` (with its opaque section
/// `vgpu_opaque`) to the GPU of `pgpu_opaque`.
fn limits(
    d: &Data,
    vgpu: &nvmlVgpuMetadata_t,
    vgpu_opaque: &str,
    pgpu_opaque: &str,
) -> Answer<u32> {
    let type_id = number(field(vgpu_opaque, "vgpu", "type")?)?;
    let from_device = number(field(vgpu_opaque, "vgpu", "device")?)?;
    let to_device = number(field(pgpu_opaque, "pgpu", "device")?)?;
    let to_types = field(pgpu_opaque, "pgpu", "types")?
        .split(',')
        .filter(|t| !t.is_empty())
        .map(number)
        .collect::<Answer<Vec<u32>>>()?;
    let mut limit = 0;
    if from_device != to_device || !to_types.contains(&type_id) {
        limit |= LIMIT_GPU;
    }
    let host = text(&vgpu.hostDriverVersion);
    let host_ok = match &d.migration.host_drivers {
        Some(taken) => taken.contains(&host),
        None => host == d.driver_version,
    };
    if !host_ok {
        limit |= LIMIT_HOST_DRIVER;
    }
    if vgpu.guestInfoState == GUEST_INITIALIZED
        && let Some(taken) = &d.migration.guest_drivers
        && !taken.contains(&text(&vgpu.guestDriverVersion))
    {
        limit |= LIMIT_GUEST_DRIVER;
    }
    Ok(limit)
}

/// `nvmlGetVgpuCompatibility`.
///
/// # Safety
/// `vgpu` and `pgpu` are null or valid for reads of their structure and the opaque section it
/// announces; `out` null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn nvmlGetVgpuCompatibility(
    vgpu: *mut nvmlVgpuMetadata_t,
    pgpu: *mut nvmlVgpuPgpuMetadata_t,
    out: *mut nvmlVgpuPgpuCompatibility_t,
) -> nvmlReturn_t {
    done(with("nvmlGetVgpuCompatibility", None, |d| {
        // SAFETY: as the caller promises.
        let vgpu_opaque = unsafe {
            opaque_of(
                vgpu,
                offset_of!(nvmlVgpuMetadata_t, opaqueDataSize),
                offset_of!(nvmlVgpuMetadata_t, opaqueData),
            )
        }?;
        // SAFETY: as the caller promises.
        let pgpu_opaque = unsafe {
            opaque_of(
                pgpu,
                offset_of!(nvmlVgpuPgpuMetadata_t, opaqueDataSize),
                offset_of!(nvmlVgpuPgpuMetadata_t, opaqueData),
            )
        }?;
        // SAFETY: not null (checked by `opaque_of`), valid for a read as the caller promises.
        let header = unsafe { vgpu.read_unaligned() };
        let limit = limits(d, &header, &vgpu_opaque, &pgpu_opaque)?;
        let verdict = nvmlVgpuPgpuCompatibility_t {
            vgpuVmCompatibility: if limit == 0 { LIVE | COLD } else { 0 },
            compatibilityLimitCode: limit,
        };
        // SAFETY: as the caller promises.
        unsafe { put(out, verdict) }
    }))
}
