//! The fake driver's state: the data loaded at initialisation, the initialisation count, the
//! handles given out, and the helpers every entry point uses to answer.

use std::ffi::{CStr, c_char, c_void};
use std::path::PathBuf;
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::{
    nvmlDevice_st, nvmlDevice_t, nvmlGpuInstance_st, nvmlGpuInstance_t,
    nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED as DRIVER_NOT_LOADED,
    nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND as FUNCTION_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT as INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NO_PERMISSION as NO_PERMISSION,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
    nvmlReturn_enum_NVML_ERROR_UNINITIALIZED as UNINITIALIZED,
    nvmlReturn_enum_NVML_ERROR_UNKNOWN as UNKNOWN, nvmlReturn_enum_NVML_SUCCESS as SUCCESS,
    nvmlReturn_t,
};

use crate::data::{self, Behaviour, Data};
use crate::sim::{self, Need, SIM_ENV, Seen};

/// What an entry point answers when it does not succeed.
pub(crate) type Answer<T = ()> = Result<T, nvmlReturn_t>;

/// The environment variable that names the data file (default: `fake-nvml.toml` beside the
/// library).
pub const DATA_ENV: &str = "VGPU_FAKE_NVML_DATA";

/// The data file's name beside the library.
pub const DATA_FILE: &str = "fake-nvml.toml";

struct Fake {
    /// `nvmlInit` calls not yet matched by `nvmlShutdown`.
    refs: u32,
    data: Option<Data>,
    path: Option<PathBuf>,
    /// What `data` holds of the simulator (`None`: read it again at the next call).
    seen: Option<Seen>,
}

static FAKE: Mutex<Fake> = Mutex::new(Fake {
    refs: 0,
    data: None,
    path: None,
    seen: None,
});

fn lock() -> std::sync::MutexGuard<'static, Fake> {
    // A panic cannot happen while the lock is held (every answer is a value), but a poisoned
    // lock still holds consistent data.
    FAKE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The path of this shared library, from the dynamic loader.
fn own_path() -> Option<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let addr = own_path as fn() -> Option<PathBuf> as *const c_void;
    // SAFETY: `addr` is a function of this library; `info` is a local the loader fills in.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: the loader returned a NUL-terminated path that lives as long as the library.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(name.to_string_lossy().into_owned()))
}

fn data_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(DATA_ENV) {
        return Some(PathBuf::from(path));
    }
    own_path().and_then(|p| p.parent().map(|d| d.join(DATA_FILE)))
}

fn code(behaviour: Behaviour) -> Option<nvmlReturn_t> {
    match behaviour {
        Behaviour::Ok => None,
        Behaviour::NotSupported => Some(NOT_SUPPORTED),
        Behaviour::Uninitialized => Some(UNINITIALIZED),
        Behaviour::Missing => Some(FUNCTION_NOT_FOUND),
        Behaviour::NoPermission => Some(NO_PERMISSION),
        Behaviour::DriverNotLoaded => Some(DRIVER_NOT_LOADED),
        Behaviour::Unknown => Some(UNKNOWN),
    }
}

/// The data at `path`: the simulated host's GPUs first when there is one (so that the log's
/// changes find them), then the call log replayed.
fn load(path: &std::path::Path) -> Result<Data, String> {
    let sim_env = std::env::var_os(SIM_ENV).map(PathBuf::from);
    let mut data = data::parse(path, sim_env)?;
    if let Some(root) = data.sim_root.clone() {
        let all = Need {
            vgpus: true,
            creatable: true,
        };
        sim::refresh(&mut data, &root, all)?;
    }
    data::replay(&mut data, path)?;
    Ok(data)
}

/// Reads the simulated host again for `function`, when there is one and its state changed
/// since `seen` (the simulator's generation): every answer is the host's now.
fn live(data: &mut Data, seen: &mut Option<Seen>, function: &str) -> Answer {
    let Some(root) = data.sim_root.clone() else {
        return Ok(());
    };
    sim::refresh_if_changed(data, &root, Need::of(function), seen).map_err(|message| {
        #[allow(clippy::print_stderr, reason = "a test library says why it fails")]
        {
            eprintln!("vgpu-nvml-fake: {message}");
        }
        UNKNOWN
    })
}

/// `nvmlInit_v2`: loads the data (and replays its call log) on the first call.
pub(crate) fn init() -> nvmlReturn_t {
    let mut fake = lock();
    if fake.refs > 0 {
        fake.refs += 1;
        return SUCCESS;
    }
    let Some(path) = data_path() else {
        return UNKNOWN;
    };
    let loaded = match load(&path) {
        Ok(data) => data,
        Err(message) => {
            #[allow(clippy::print_stderr, reason = "a test library says why it fails once")]
            {
                eprintln!("vgpu-nvml-fake: {message}");
            }
            return UNKNOWN;
        }
    };
    if let Some(code) = code(loaded.init) {
        return code;
    }
    fake.data = Some(loaded);
    fake.path = Some(path);
    // The call log replayed over the simulator's state: the first call reads the host again.
    fake.seen = None;
    fake.refs = 1;
    SUCCESS
}

/// `nvmlShutdown`.
pub(crate) fn shutdown() -> nvmlReturn_t {
    let mut fake = lock();
    match fake.refs {
        0 => UNINITIALIZED,
        1 => {
            fake.refs = 0;
            fake.data = None;
            fake.seen = None;
            SUCCESS
        }
        _ => {
            fake.refs -= 1;
            SUCCESS
        }
    }
}

/// Runs `f` on the data for `function` about GPU `gpu` (an index): `UNINITIALIZED` before
/// `nvmlInit`, the behaviour the data gives the function otherwise, then `f`'s answer.
pub(crate) fn with<T>(
    function: &str,
    gpu: Option<usize>,
    f: impl FnOnce(&Data) -> Answer<T>,
) -> Answer<T> {
    let mut fake = lock();
    let Fake { data, seen, .. } = &mut *fake;
    let data = data.as_mut().ok_or(UNINITIALIZED)?;
    live(data, seen, function)?;
    if let Some(code) = code(data.behaviour(function, gpu)) {
        return Err(code);
    }
    f(data)
}

/// As [`with`], with the data mutable and its path, for changes. The next call reads the
/// simulated host again: `f` may have changed it (a control line) or the data.
pub(crate) fn with_mut<T>(
    function: &str,
    gpu: Option<usize>,
    f: impl FnOnce(&mut Data, &std::path::Path) -> Answer<T>,
) -> Answer<T> {
    let mut fake = lock();
    let Fake {
        data, path, seen, ..
    } = &mut *fake;
    let (Some(data), Some(path)) = (data.as_mut(), path.as_ref()) else {
        return Err(UNINITIALIZED);
    };
    live(data, seen, function)?;
    if let Some(code) = code(data.behaviour(function, gpu)) {
        return Err(code);
    }
    *seen = None;
    f(data, path)
}

/// An answer as NVML's return code.
pub(crate) fn done(answer: Answer) -> nvmlReturn_t {
    match answer {
        Ok(()) => SUCCESS,
        Err(code) => code,
    }
}

/// The handle of GPU `index`.
pub(crate) fn device_handle(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut::<nvmlDevice_st>(index + 1)
}

/// The GPU index of `device`; the data decides whether it exists.
pub(crate) fn device_index(device: nvmlDevice_t) -> Answer<usize> {
    device.addr().checked_sub(1).ok_or(INVALID_ARGUMENT)
}

/// The GPU `index` of the data.
pub(crate) fn gpu(data: &Data, index: usize) -> Answer<&crate::data::Gpu> {
    data.gpus.get(index).ok_or(INVALID_ARGUMENT)
}

/// The handle of the GPU instance with id `id` of GPU `gpu` (an index). It names the id, not
/// a place in the GPU's list, so that a handle kept across a destroy names no other instance.
/// `UNKNOWN` for an id too large for the handle (65535 and up).
pub(crate) fn instance_handle(gpu: usize, id: u32) -> Answer<nvmlGpuInstance_t> {
    let low = usize::try_from(id)
        .ok()
        .and_then(|id| id.checked_add(1))
        .filter(|low| *low <= 0xFFFF)
        .ok_or(UNKNOWN)?;
    let high = gpu
        .checked_add(1)
        .and_then(|g| g.checked_mul(0x1_0000))
        .ok_or(UNKNOWN)?;
    Ok(std::ptr::without_provenance_mut::<nvmlGpuInstance_st>(
        high | low,
    ))
}

/// The GPU index and the GPU-instance id `handle` names.
pub(crate) fn instance_of(handle: nvmlGpuInstance_t) -> Answer<(usize, u32)> {
    let raw = handle.addr();
    let gpu = (raw >> 16).checked_sub(1).ok_or(INVALID_ARGUMENT)?;
    let id = (raw & 0xFFFF).checked_sub(1).ok_or(INVALID_ARGUMENT)?;
    Ok((gpu, u32::try_from(id).map_err(|_| INVALID_ARGUMENT)?))
}

/// Writes `value` through `out`.
///
/// # Safety
/// `out` is null or valid for one write of `T`, as NVML's callers promise.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Answer {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: not null, and valid for a write of `T` as the caller promises.
    unsafe { out.write(value) };
    Ok(())
}

/// Writes `text` and a NUL into the `length` bytes at `buf` (`INSUFFICIENT_SIZE` when they
/// do not fit).
///
/// # Safety
/// `buf` is null or valid for `length` bytes of writes.
pub(crate) unsafe fn put_str(buf: *mut c_char, length: u32, text: &str) -> Answer {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `bytes.len() + 1 <= length` bytes are written into a buffer valid for `length`;
    // the source is a separate Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// As [`put_str`] with the size in and out through `size`.
///
/// # Safety
/// `size` is null or valid for a read and a write; `buf` null or valid for `*size` bytes.
pub(crate) unsafe fn put_str_sized(buf: *mut c_char, size: *mut u32, text: &str) -> Answer {
    if size.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: not null, valid as the caller promises.
    let length = unsafe { size.read() };
    let needed = u32::try_from(text.len() + 1).map_err(|_| UNKNOWN)?;
    if length < needed {
        // SAFETY: as above.
        unsafe { size.write(needed) };
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` is valid for `length` bytes; `size` as above.
    unsafe {
        put_str(buf, length, text)?;
        size.write(needed);
    }
    Ok(())
}

/// Writes `items` into the array at `out` of `*count` elements, `*count` set to how many
/// there are; `INSUFFICIENT_SIZE` with the count when the array is too small (the call NVML's
/// callers make first, with a count of 0).
///
/// # Safety
/// `count` is null or valid for a read and a write; `out` null or valid for `*count` writes.
pub(crate) unsafe fn put_list<T: Copy>(count: *mut u32, out: *mut T, items: &[T]) -> Answer {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let len = u32::try_from(items.len()).map_err(|_| UNKNOWN)?;
    // SAFETY: not null, valid as the caller promises.
    let room = unsafe { count.read() };
    // SAFETY: as above.
    unsafe { count.write(len) };
    if items.is_empty() {
        return Ok(());
    }
    if room < len || out.is_null() {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `out` is valid for `room >= len` elements; the source is a separate slice.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    Ok(())
}
