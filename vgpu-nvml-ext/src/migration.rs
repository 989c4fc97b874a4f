//! vGPU migration metadata and NVIDIA's compatibility verdict ("vGPU Migration" of the NVML
//! API Reference Guide):
//!
//! - `nvmlVgpuInstanceGetMetadata`: a running vGPU's metadata, on the source host;
//! - `nvmlDeviceGetVgpuMetadata`: a physical GPU's metadata, on the destination host;
//! - `nvmlGetVgpuCompatibility`: whether that vGPU can run on that GPU, and if not what limits
//!   it.
//!
//! Both metadata structures end in an opaque section of `opaqueDataSize` bytes that runs past
//! the structure's declared end. NVML needs all of it back, so the metadata is kept as the whole
//! buffer NVML filled. `nvml-wrapper`'s `VgpuInstance::metadata` decodes the fixed part only.

use std::mem::{offset_of, size_of};
use std::os::raw::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try, nvml_try_count};
use nvml_wrapper::{Device, Nvml};

use crate::text;
use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlVgpuGuestInfoState_enum_NVML_VGPU_INSTANCE_GUEST_INFO_STATE_INITIALIZED as GUEST_INFO_INITIALIZED,
    nvmlVgpuMetadata_t, nvmlVgpuPgpuCompatibility_t, nvmlVgpuPgpuMetadata_t,
};

/// A metadata buffer NVML filled, whole: the structure, then its opaque section.
trait Metadata: Copy {
    /// Where `opaqueDataSize` sits in the structure.
    const OPAQUE_SIZE_AT: usize;
    /// Where the opaque section starts.
    const OPAQUE_AT: usize;
    /// The room `nvml.h` gives the opaque section (`NVML_VGPU_METADATA_OPAQUE_DATA_SIZE`,
    /// `NVML_VGPU_PGPU_METADATA_OPAQUE_DATA_SIZE`): a buffer handed to NVML has at least that
    /// much, zero past what the metadata holds, whatever NVML reads.
    const OPAQUE_ROOM: usize;
}

impl Metadata for nvmlVgpuMetadata_t {
    const OPAQUE_SIZE_AT: usize = offset_of!(nvmlVgpuMetadata_t, opaqueDataSize);
    const OPAQUE_AT: usize = offset_of!(nvmlVgpuMetadata_t, opaqueData);
    const OPAQUE_ROOM: usize = 4 + 256;
}

impl Metadata for nvmlVgpuPgpuMetadata_t {
    const OPAQUE_SIZE_AT: usize = offset_of!(nvmlVgpuPgpuMetadata_t, opaqueDataSize);
    const OPAQUE_AT: usize = offset_of!(nvmlVgpuPgpuMetadata_t, opaqueData);
    const OPAQUE_ROOM: usize = 256;
}

/// Whether `bytes` are one whole metadata buffer of `T`: the fixed part, and the opaque section
/// it says it has.
fn whole<T: Metadata>(bytes: &[u8]) -> bool {
    let Some(size) = bytes.get(T::OPAQUE_SIZE_AT..T::OPAQUE_SIZE_AT + 4) else {
        return false;
    };
    let opaque = u32::from_ne_bytes([size[0], size[1], size[2], size[3]]) as usize;
    bytes.len() >= size_of::<T>() && bytes.len() >= T::OPAQUE_AT.saturating_add(opaque)
}

/// `bytes` in a buffer of whole `T`s, so that NVML reads an aligned structure, with the
/// opaque section after it, at least [`Metadata::OPAQUE_ROOM`] long. The tail past `bytes` is
/// zero.
fn aligned<T: Metadata>(bytes: &[u8]) -> Vec<T> {
    let len = bytes.len().max(T::OPAQUE_AT + T::OPAQUE_ROOM);
    let count = len.div_ceil(size_of::<T>());
    // SAFETY: both structures are integers and character arrays; all zero is a valid value.
    let mut buffer: Vec<T> = vec![unsafe { std::mem::zeroed() }; count];
    // SAFETY: `buffer` holds `count * size_of::<T>()` bytes, at least `bytes.len()`; the two do
    // not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            buffer.as_mut_ptr().cast::<u8>(),
            bytes.len(),
        )
    };
    buffer
}

/// The most metadata taken from NVML: its opaque sections are a few hundred bytes
/// (`nvml.h`), so a larger size is refused rather than allocated.
const MOST: usize = 64 * 1024;

/// How many times the size is asked again when the metadata grew between the two calls (a
/// guest driver reporting its version, say).
const TRIES: usize = 3;

/// Calls a metadata getter for the size, then into a buffer of that size, again with the new
/// size if NVML says it grew meanwhile. Returns the bytes NVML said the metadata takes; whether
/// they are whole is the caller's to check.
///
/// # Safety
/// `call` hands its pointers to one NVML metadata getter of structure `T`: NVML writes at most
/// `*size` bytes to the buffer, and the new size to `size`.
unsafe fn fetch<T: Metadata>(
    call: impl Fn(*mut T, *mut c_uint) -> nvml_wrapper_sys::bindings::nvmlReturn_t,
) -> Result<Vec<u8>, NvmlError> {
    let mut needed: c_uint = 0;
    nvml_try_count(call(std::ptr::null_mut(), &mut needed))?;
    for _ in 0..TRIES {
        let wanted = (needed as usize).max(size_of::<T>());
        if wanted > MOST {
            return Err(NvmlError::IncorrectBits(nvml_wrapper::error::Bits::U32(
                needed,
            )));
        }
        let count = wanted
            .max(T::OPAQUE_AT + T::OPAQUE_ROOM)
            .div_ceil(size_of::<T>());
        // SAFETY: as in `aligned`.
        let mut buffer: Vec<T> = vec![unsafe { std::mem::zeroed() }; count];
        let room = count * size_of::<T>();
        let mut size = c_uint::try_from(room).map_err(|_| NvmlError::InvalidArg)?;
        match call(buffer.as_mut_ptr(), &mut size) {
            // NVML says how much it needs now: ask again with that.
            code if code == INSUFFICIENT_SIZE => {
                needed = size;
                continue;
            }
            code => nvml_try(code)?,
        }
        let len = (size as usize).clamp(size_of::<T>(), room);
        // SAFETY: `buffer` holds `room` initialised bytes and `len <= room`.
        let bytes = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), len) };
        return Ok(bytes.to_vec());
    }
    Err(NvmlError::InsufficientSize(Some(needed as usize)))
}

/// The metadata of the running vGPU `instance` (`nvmlVgpuInstanceGetMetadata`), whole: what
/// the destination's `nvmlGetVgpuCompatibility` takes.
pub fn vgpu_instance_metadata(nvml: &Nvml, instance: u32) -> Result<Vec<u8>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlVgpuInstanceGetMetadata.as_ref())?;
    let call = |buffer: *mut nvmlVgpuMetadata_t, size: *mut c_uint| {
        // SAFETY: `buffer` is null with `*size` 0, or holds `*size` bytes (`fetch`); `size`
        // points at a local.
        unsafe { sym(instance, buffer, size) }
    };
    // SAFETY: `call` hands `fetch`'s pointers to `nvmlVgpuInstanceGetMetadata` as they are.
    unsafe { fetch(call) }
}

/// The metadata of the physical GPU `device` (`nvmlDeviceGetVgpuMetadata`), whole.
pub fn device_vgpu_metadata(device: &Device<'_>) -> Result<Vec<u8>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetVgpuMetadata.as_ref())?;
    let call = |buffer: *mut nvmlVgpuPgpuMetadata_t, size: *mut c_uint| {
        // SAFETY: as in `vgpu_instance_metadata`; the handle is valid while `device` lives.
        unsafe { sym(device.handle(), buffer, size) }
    };
    // SAFETY: `call` hands `fetch`'s pointers to `nvmlDeviceGetVgpuMetadata` as they are.
    unsafe { fetch(call) }
}

/// NVML's verdict on a vGPU and a GPU (`nvmlVgpuPgpuCompatibility_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VgpuCompatibility {
    /// `NVML_VGPU_VM_COMPATIBILITY_*` bits: how the VM can move (cold, hibernate, sleep, live).
    pub vm: u32,
    /// `NVML_VGPU_COMPATIBILITY_LIMIT_*` bits: what limits it (host driver, guest driver, GPU,
    /// other).
    pub limit: u32,
}

/// Whether the vGPU of metadata `vgpu` can run on the GPU of metadata `pgpu`
/// (`nvmlGetVgpuCompatibility`). Buffers that are not whole metadata (shorter than the
/// opaque section they announce) are `InvalidArg`, never handed to NVML.
pub fn vgpu_compatibility(
    nvml: &Nvml,
    vgpu: &[u8],
    pgpu: &[u8],
) -> Result<VgpuCompatibility, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlGetVgpuCompatibility.as_ref())?;
    if !whole::<nvmlVgpuMetadata_t>(vgpu) || !whole::<nvmlVgpuPgpuMetadata_t>(pgpu) {
        return Err(NvmlError::InvalidArg);
    }
    let mut vgpu = aligned::<nvmlVgpuMetadata_t>(vgpu);
    let mut pgpu = aligned::<nvmlVgpuPgpuMetadata_t>(pgpu);
    let mut out = nvmlVgpuPgpuCompatibility_t {
        vgpuVmCompatibility: 0,
        compatibilityLimitCode: 0,
    };
    // SAFETY: both buffers hold whole metadata, opaque sections included (checked above), and
    // at least the opaque room `nvml.h` declares; `out` is a local.
    nvml_try(unsafe { sym(vgpu.as_mut_ptr(), pgpu.as_mut_ptr(), &mut out) })?;
    Ok(VgpuCompatibility {
        vm: out.vgpuVmCompatibility,
        limit: out.compatibilityLimitCode,
    })
}

/// The fixed part of a vGPU's metadata that says something to a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuMetadataHeader {
    /// The host driver version the vGPU runs under.
    pub host_driver: String,
    /// The guest driver version, once the guest driver has reported it.
    pub guest_driver: Option<String>,
}

/// The fixed part of the vGPU metadata `bytes`; `None` when they are not whole metadata.
pub fn vgpu_metadata_header(bytes: &[u8]) -> Option<VgpuMetadataHeader> {
    if !whole::<nvmlVgpuMetadata_t>(bytes) {
        return None;
    }
    let raw = aligned::<nvmlVgpuMetadata_t>(bytes)[0];
    Some(VgpuMetadataHeader {
        host_driver: text(&raw.hostDriverVersion),
        guest_driver: (raw.guestInfoState == GUEST_INFO_INITIALIZED)
            .then(|| text(&raw.guestDriverVersion)),
    })
}

/// The host driver version of the GPU metadata `bytes`; `None` when they are not whole
/// metadata.
pub fn pgpu_metadata_host_driver(bytes: &[u8]) -> Option<String> {
    whole::<nvmlVgpuPgpuMetadata_t>(bytes)
        .then(|| text(&aligned::<nvmlVgpuPgpuMetadata_t>(bytes)[0].hostDriverVersion))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vGPU metadata buffer with `opaque` after the structure, as NVML fills one.
    fn vgpu_bytes(opaque: &[u8], declared: u32) -> Vec<u8> {
        let at = <nvmlVgpuMetadata_t as Metadata>::OPAQUE_AT;
        let mut bytes = vec![0u8; (at + opaque.len()).max(size_of::<nvmlVgpuMetadata_t>())];
        let size_at = <nvmlVgpuMetadata_t as Metadata>::OPAQUE_SIZE_AT;
        bytes[size_at..size_at + 4].copy_from_slice(&declared.to_ne_bytes());
        let host = offset_of!(nvmlVgpuMetadata_t, hostDriverVersion);
        bytes[host..host + 9].copy_from_slice(b"550.90.05");
        bytes[at..at + opaque.len()].copy_from_slice(opaque);
        bytes
    }

    #[test]
    fn header_reads_the_host_driver_and_no_guest_driver_before_the_guest_reports() {
        let bytes = vgpu_bytes(b"opaque state", 12);
        assert_eq!(
            vgpu_metadata_header(&bytes),
            Some(VgpuMetadataHeader {
                host_driver: "550.90.05".to_owned(),
                guest_driver: None,
            })
        );
    }

    #[test]
    fn metadata_shorter_than_its_opaque_section_is_not_whole() {
        let bytes = vgpu_bytes(b"opaque state", 64);
        assert_eq!(
            (
                whole::<nvmlVgpuMetadata_t>(&bytes),
                vgpu_metadata_header(&bytes)
            ),
            (false, None)
        );
        assert!(!whole::<nvmlVgpuMetadata_t>(&bytes[..8]));
    }

    /// A scripted metadata getter: the sizes it says it needs, one per call, each call after
    /// the first writing `bytes` when the buffer holds them.
    fn scripted(
        sizes: Vec<c_uint>,
        bytes: Vec<u8>,
    ) -> impl Fn(*mut nvmlVgpuMetadata_t, *mut c_uint) -> nvml_wrapper_sys::bindings::nvmlReturn_t
    {
        let calls = std::cell::Cell::new(0_usize);
        move |buffer, size| {
            let n = calls.get();
            calls.set(n + 1);
            let needed = sizes[n.min(sizes.len() - 1)];
            // SAFETY: `fetch` passes a local size and a buffer of at least `*size` bytes.
            unsafe {
                let room = size.read();
                size.write(needed);
                if buffer.is_null() || room < needed {
                    return INSUFFICIENT_SIZE;
                }
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len());
            }
            0
        }
    }

    #[test]
    fn fetch_asks_again_when_the_metadata_grows_and_gives_up_after_three_tries() {
        let grown = vgpu_bytes(&[7; 600], 600);
        let len = c_uint::try_from(grown.len()).expect("small");
        // The size query says 216 bytes; the fill says it grew to `len`; the next fill holds it.
        // SAFETY: the scripted getter honours `fetch`'s contract.
        let bytes = unsafe { fetch(scripted(vec![216, len, len], grown.clone())) };
        assert_eq!(bytes.ok(), Some(grown.clone()));
        // It grows at every call: after three fills, the size the third said.
        let sizes = vec![216, 1000, 2000, 3000, 4000];
        // SAFETY: as above.
        let err = unsafe { fetch(scripted(sizes, grown.clone())) }.expect_err("gives up");
        assert!(
            matches!(err, NvmlError::InsufficientSize(Some(3000))),
            "{err:?}"
        );
        // A size past 64 KiB is refused, not allocated.
        // SAFETY: as above.
        let err = unsafe { fetch(scripted(vec![70_000], grown)) }.expect_err("refused");
        assert!(matches!(err, NvmlError::IncorrectBits(_)), "{err:?}");
    }

    #[test]
    fn aligned_pads_the_opaque_section_to_nvml_h_s_room_with_zeros() {
        let bytes = vgpu_bytes(b"abc", 3);
        let buffer = aligned::<nvmlVgpuMetadata_t>(&bytes);
        let room = buffer.len() * size_of::<nvmlVgpuMetadata_t>();
        // SAFETY: `buffer` holds `room` initialised bytes.
        let all = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), room) };
        let at = <nvmlVgpuMetadata_t as Metadata>::OPAQUE_AT;
        assert!(room >= at + 260, "{room}");
        assert_eq!(
            (
                &all[..bytes.len()],
                all[bytes.len()..].iter().all(|b| *b == 0)
            ),
            (&bytes[..], true)
        );
    }
}
