//! The exported NVML functions, by area.

mod core;
mod mig;
mod mig_write;
mod migration;
mod newer;
mod placement;
mod sched;
mod vgpu;

use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_IN_USE as IN_USE,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES as INSUFFICIENT_RESOURCES,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_t,
};

/// What NVML answers when the simulator refuses a change with `err`'s errno: a busy GPU is
/// `IN_USE`, no room `INSUFFICIENT_RESOURCES`, a value it does not take `INVALID_ARGUMENT`, a
/// GPU without the feature `NOT_SUPPORTED`.
fn refusal_of(err: &std::io::Error) -> nvmlReturn_t {
    match err.raw_os_error() {
        Some(libc::EBUSY) => IN_USE,
        Some(libc::ENOSPC) => INSUFFICIENT_RESOURCES,
        Some(libc::EINVAL) => INVALID_ARGUMENT,
        Some(libc::EOPNOTSUPP | libc::ENODEV) => NOT_SUPPORTED,
        _ => UNKNOWN,
    }
}

/// A versioned NVML struct's version word: its size, and the version in the top byte
/// (`NVML_STRUCT_VERSION`).
const fn struct_version<T>(version: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (version << 24)
}
