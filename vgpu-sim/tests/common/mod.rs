//! Shared helpers for the simulator's integration tests (plain `std::fs`, as a shell user).

#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub(crate) use vgpu_sim::SimHost;

/// Mounts a built-in profile, or `None` (skip) when FUSE is unavailable outside CI.
pub(crate) fn host(profile: &str) -> Option<SimHost> {
    SimHost::mount_for_test(profile)
}

/// `echo -n VALUE > PATH` (open with O_TRUNC, one write): the errno of the write, if any.
pub(crate) fn echo(path: &Path, value: &str) -> Result<(), i32> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    f.write_all(value.as_bytes())
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// `cat PATH`, or the errno.
pub(crate) fn cat(path: &Path) -> Result<String, i32> {
    std::fs::read_to_string(path).map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// `readlink PATH` as a string, or the errno.
pub(crate) fn link(path: &Path) -> Result<String, i32> {
    std::fs::read_link(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// Sorted entry names of a directory, or the errno.
pub(crate) fn ls(path: &Path) -> Result<Vec<String>, i32> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    Ok(names)
}

/// `<root>/sys/bus/pci/devices/<addr>/<rest>`.
pub(crate) fn pci(host: &SimHost, addr: &str, rest: &str) -> PathBuf {
    let p = host.root().join("sys/bus/pci/devices").join(addr);
    if rest.is_empty() { p } else { p.join(rest) }
}

/// The basename a link points to (`driver` -> `nvidia`), or `None` when absent.
pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// `<root>/sys/bus/pci/drivers/<driver>/<file>` (`bind`, `unbind`).
pub(crate) fn driver_file(host: &SimHost, driver: &str, file: &str) -> PathBuf {
    host.root()
        .join("sys/bus/pci/drivers")
        .join(driver)
        .join(file)
}

/// `<root>/sys/bus/pci/drivers_probe`.
pub(crate) fn drivers_probe(host: &SimHost) -> PathBuf {
    host.root().join("sys/bus/pci/drivers_probe")
}

/// `<root>/proc/driver/nvidia/gpus/<addr>/unbindLock`.
pub(crate) fn unbind_lock(host: &SimHost, addr: &str) -> PathBuf {
    host.root()
        .join("proc/driver/nvidia/gpus")
        .join(addr)
        .join("unbindLock")
}
