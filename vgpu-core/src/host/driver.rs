//! Binding a PCI function to a driver, the way the kernel documents it: set `driver_override`,
//! unbind from the current driver, then `drivers_probe` (never `new_id`, which captures every
//! device with the same ids).

use std::time::Duration;

use crate::error::{Error, HostError, Object, Result};
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, write_attr, write_attr_within};
use crate::model::pci::PciAddress;

pub(crate) use crate::model::is_passthrough_driver;

fn previous_path(paths: &HostPaths, address: PciAddress) -> std::path::PathBuf {
    paths
        .run()
        .join("vgpu/previous-driver")
        .join(address.to_string())
}

/// Records, until the next reboot (under `run/`), which driver `address` had before `vgpu`
/// bound it for a guest, so that giving it back restores exactly that (an empty record: none).
pub(crate) fn remember_previous(
    paths: &HostPaths,
    address: PciAddress,
    driver: Option<&str>,
) -> Result<()> {
    crate::host::durable::write_atomic(
        &previous_path(paths, address),
        driver.unwrap_or("").as_bytes(),
    )
}

/// The record [`remember_previous`] made for `address`; `None` when there is none.
pub(crate) fn recalled_previous(
    paths: &HostPaths,
    address: PciAddress,
) -> Result<Option<DriverRecord>> {
    let path = previous_path(paths, address);
    let driver = match sysfs::read_attr(&path)? {
        None => return Ok(None),
        Some(text) if text.trim().is_empty() => None,
        Some(text) => {
            let name = text.trim().to_owned();
            validate_driver_name(&name)?;
            Some(name)
        }
    };
    Ok(Some(DriverRecord { address, driver }))
}

/// Where a device goes when it is given back to the host and no record of
/// [`remember_previous`] says which driver it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveBack<'a> {
    /// To the driver the kernel probes for it.
    Probe,
    /// To the driver a definition names; `None`: to no driver.
    To(Option<&'a str>),
}

/// Forgets the record of [`remember_previous`].
pub(crate) fn forget_previous(paths: &HostPaths, address: PciAddress) -> Result<()> {
    crate::host::durable::remove_durably(&previous_path(paths, address)).map(|_| ())
}

/// A record of [`remember_previous`]: the device, and the driver to give it back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverRecord {
    pub(crate) address: PciAddress,
    pub(crate) driver: Option<String>,
}

/// Every record of [`remember_previous`]; a file whose name is not a PCI address is an error
/// of its own.
pub(crate) fn recorded(paths: &HostPaths) -> Result<Vec<Result<DriverRecord>>> {
    let dir = paths.run().join("vgpu/previous-driver");
    Ok(sysfs::dir_names(&dir)?
        .into_iter()
        .map(|name| {
            let address = name
                .parse::<PciAddress>()
                .map_err(|_| sysfs::parse_error(&dir.join(&name), &name, "a PCI address"))?;
            Ok(recalled_previous(paths, address)?.unwrap_or(DriverRecord {
                address,
                driver: None,
            }))
        })
        .collect())
}

/// The host driver of `address`: the driver it has, unless that is a passthrough driver or
/// none; then the one [`remember_previous`] recorded when `vgpu` took it, if any.
pub(crate) fn host_driver(paths: &HostPaths, address: PciAddress) -> Result<Option<String>> {
    match PciDevice::new(paths, address).driver()? {
        Some(current) if !is_passthrough_driver(&current) => Ok(Some(current)),
        _ => Ok(recalled_previous(paths, address)?.and_then(|r| r.driver)),
    }
}

/// Binds `address` to `driver` as [`bind`] does, having recorded first the host driver to
/// give it back to ([`host_driver`]). A process killed half-way thus leaves a record that
/// `restore` acts on. Returns that host driver (for a device without one: the driver it
/// had). Already bound to `driver`: nothing changes. On failure the record is put back as
/// it was.
pub(crate) fn take(
    paths: &HostPaths,
    address: PciAddress,
    driver: &str,
    within: Duration,
) -> Result<Option<String>> {
    validate_driver_name(driver)?;
    let current = PciDevice::existing(paths, address)?.driver()?;
    if current.as_deref() == Some(driver) {
        return Ok(current);
    }
    let earlier = recalled_previous(paths, address)?;
    let host = match (&current, &earlier) {
        (Some(name), _) if !is_passthrough_driver(name) => current.clone(),
        (_, Some(record)) => record.driver.clone(),
        (_, None) => current.clone(),
    };
    remember_previous(paths, address, host.as_deref())?;
    match bind(paths, address, driver, within) {
        Ok(_) => Ok(host),
        Err(err) => {
            let put_back = match &earlier {
                Some(record) => remember_previous(paths, address, record.driver.as_deref()),
                None => forget_previous(paths, address),
            };
            if let Err(record) = put_back {
                tracing::error!(%address, "cannot put back the record of its driver: {record}");
            }
            Err(err)
        }
    }
}

/// Unbinds `address` from its host driver `driver` for a change the driver allows only
/// while it is unbound, having recorded first that the device is to go back to it.
pub(crate) fn set_aside(
    paths: &HostPaths,
    address: PciAddress,
    driver: &str,
    within: Duration,
) -> Result<()> {
    remember_previous(paths, address, Some(driver))?;
    if let Err(err) = unbind(paths, address, within) {
        if let Err(record) = forget_previous(paths, address) {
            tracing::error!(%address, "cannot remove the record of its driver: {record}");
        }
        return Err(err);
    }
    Ok(())
}

/// Checks that `driver` is a plausible driver name (it becomes a path component).
pub(crate) fn validate_driver_name(driver: &str) -> Result<()> {
    let ok = !driver.is_empty()
        && driver.len() <= 64
        && driver != "."
        && driver != ".."
        && driver
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::bad_name(driver, "a driver name"))
    }
}

/// Unbinds `address` from its driver; returns the driver it had (`None` if it was unbound).
/// The kernel holds the unbind while a process has the device open (or, for `nvidia`, while
/// the GPU is used): after `within`, [`HostError::Timeout`](crate::host::HostError::Timeout).
pub(crate) fn unbind(
    paths: &HostPaths,
    address: PciAddress,
    within: Duration,
) -> Result<Option<String>> {
    let device = PciDevice::existing(paths, address)?;
    let current = device.driver()?;
    let Some(driver) = &current else {
        return Ok(current);
    };
    // NVIDIA's driver lets go of a GPU only to a holder of its unbindLock (its vGPU manager
    // may be using the GPU); the lock is given back if the unbind then fails.
    let locked = driver == "nvidia" && take_unbind_lock(paths, address)?;
    let unbound = write_attr_within(
        &paths.pci_drivers().join(driver).join("unbind"),
        &address.to_string(),
        within,
        &if driver == "nvidia" {
            format!("the release of {address} by nvidia, which waits until nothing uses the GPU")
        } else {
            format!(
                "the release of {address} by {driver}, which waits for the processes holding \
                 it open"
            )
        },
    );
    if let Err(err) = unbound {
        if locked {
            release_unbind_lock(paths, address);
        }
        return Err(err);
    }
    Ok(current)
}

/// `proc/driver/nvidia/gpus/<addr>/unbindLock`.
fn unbind_lock_path(paths: &HostPaths, address: PciAddress) -> std::path::PathBuf {
    paths
        .proc()
        .join("driver/nvidia/gpus")
        .join(address.to_string())
        .join("unbindLock")
}

/// Takes NVIDIA's unbindLock of `address` (write `1`, read back `1`); `false` when the GPU has
/// none (not an NVIDIA GPU the driver lists). Refused while the GPU is in use.
pub(crate) fn take_unbind_lock(paths: &HostPaths, address: PciAddress) -> Result<bool> {
    let lock = unbind_lock_path(paths, address);
    if !sysfs::exists(&lock) {
        return Ok(false);
    }
    write_attr(&lock, "1")?;
    if sysfs::read_attr(&lock)?.is_some_and(|v| v.trim() == "1") {
        Ok(true)
    } else {
        Err(HostError::UnbindLockRefused { path: lock }.into())
    }
}

/// Gives NVIDIA's unbindLock of `address` back; logs when it cannot.
pub(crate) fn release_unbind_lock(paths: &HostPaths, address: PciAddress) {
    if let Err(err) = write_attr(&unbind_lock_path(paths, address), "0") {
        tracing::error!(%address, "cannot release the unbindLock: {err}");
    }
}

/// Sets `driver_override` (an empty value clears it).
fn set_override(paths: &HostPaths, address: PciAddress, driver: Option<&str>) -> Result<()> {
    // The kernel takes "\n" as "clear"; an empty write would be a no-op on some kernels.
    write_attr(
        &paths.pci_device(&address).join("driver_override"),
        driver.unwrap_or("\n"),
    )
}

fn probe(paths: &HostPaths, address: PciAddress) -> Result<()> {
    write_attr(
        &paths.sys().join("bus/pci/drivers_probe"),
        &address.to_string(),
    )
}

/// Binds `address` to `driver` and pins it there with `driver_override`; returns the driver
/// it had before. Already bound to `driver`: nothing is written. The driver is read back
/// afterwards: `drivers_probe` succeeds even when the probe fails (`vfio-pci` refusing a PF
/// with VFs, say), so [`HostError::NotBound`](crate::host::HostError::NotBound) says what the device has instead.
///
/// On failure after the unbind, the previous driver is bound again. `within` bounds each
/// unbind ([`unbind`]).
pub(crate) fn bind(
    paths: &HostPaths,
    address: PciAddress,
    driver: &str,
    within: Duration,
) -> Result<Option<String>> {
    validate_driver_name(driver)?;
    let device = PciDevice::existing(paths, address)?;
    let previous = device.driver()?;
    if previous.as_deref() == Some(driver) {
        return Ok(previous);
    }
    if !sysfs::is_dir(&paths.pci_drivers().join(driver)) {
        return Err(Error::NotFound {
            what: Object::Driver,
            id: driver.to_owned(),
            path: paths.pci_drivers().join(driver),
        });
    }
    set_override(paths, address, Some(driver))?;
    let attempt = (|| {
        unbind(paths, address, within)?;
        probe(paths, address)?;
        match device.driver()? {
            Some(bound) if bound == driver => Ok(()),
            found => Err(HostError::NotBound {
                path: device.path().to_path_buf(),
                wanted: driver.to_owned(),
                found,
            }
            .into()),
        }
    })();
    if let Err(err) = attempt {
        if let Err(undo) = restore(paths, address, previous.as_deref(), within) {
            tracing::error!(%address, "cannot rebind the previous driver: {undo}");
        }
        return Err(err);
    }
    Ok(previous)
}

/// Returns `address` to `driver` (or leaves it unbound for `None`) and clears
/// `driver_override`; reads the driver back. `within` bounds the unbind ([`unbind`]).
pub(crate) fn restore(
    paths: &HostPaths,
    address: PciAddress,
    driver: Option<&str>,
    within: Duration,
) -> Result<()> {
    if let Some(driver) = driver {
        validate_driver_name(driver)?;
    }
    let device = PciDevice::existing(paths, address)?;
    let current = device.driver()?;
    if current.as_deref() == driver {
        return set_override(paths, address, None);
    }
    set_override(paths, address, driver)?;
    unbind(paths, address, within)?;
    if driver.is_some() {
        probe(paths, address)?;
    }
    set_override(paths, address, None)?;
    match (device.driver()?, driver) {
        (now, wanted) if now.as_deref() == wanted => Ok(()),
        (found, wanted) => Err(HostError::NotBound {
            path: device.path().to_path_buf(),
            wanted: wanted.unwrap_or("no driver").to_owned(),
            found,
        }
        .into()),
    }
}

/// Clears `driver_override`, unbinds `address` and lets the kernel probe its default driver;
/// returns the driver it has then. `within` bounds the unbind ([`unbind`]).
pub(crate) fn reprobe(
    paths: &HostPaths,
    address: PciAddress,
    within: Duration,
) -> Result<Option<String>> {
    PciDevice::existing(paths, address)?;
    set_override(paths, address, None)?;
    unbind(paths, address, within)?;
    probe(paths, address)?;
    PciDevice::new(paths, address).driver()
}
