//! Enabling and disabling SR-IOV virtual functions (`sriov_numvfs`, `drivers/pci/iov.c`).
//!
//! The kernel's rules: a count above `sriov_totalvfs` is refused, an equal count is a no-op,
//! a non-zero count while VFs exist is `EBUSY` (go through `0`), a PF without an SR-IOV-capable
//! driver is `ENOENT`, and a driver may enable fewer VFs than asked. NVIDIA PFs refuse the
//! write while bound to `nvidia`: like NVIDIA's `sriov-manage`, this module takes the GPU's
//! `unbindLock`, moves the PF to `pci-pf-stub`, writes the count, and rebinds the PF and every
//! VF to `nvidia`.
//!
//! The VFs are there when the write returns, but their driver may not be: a VF's first probe
//! can run later (asynchronous probing). Where the PF's driver also drives its VFs on the
//! host (`i915`, `xe`) and `sriov_drivers_autoprobe` is on, the new VFs are waited for until
//! each has a driver, so that what is reported, and the driver recorded before a VF is given
//! to a guest, is what the kernel settles on. Disabling VFs, like every unbind, waits in the
//! kernel while a process has one of them open: each such write is bounded by the timeout.

use std::time::Duration;

use serde::Serialize;

use crate::error::{HostError, Result};
use crate::host::driver;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, SysDir, write_attr, write_attr_within};
use crate::host::uevent::wait;
use crate::model::pci::PciAddress;

/// How to change a VF count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SriovOptions {
    /// Change the count even when VFs hold vGPUs or are bound to `vfio-pci`.
    pub force: bool,
    /// How long to wait for VFs to appear or go, for new VFs' drivers, and for each write the
    /// kernel holds while a VF is in use.
    pub timeout: Duration,
}

impl Default for SriovOptions {
    fn default() -> Self {
        Self {
            force: false,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What a VF-count change did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SriovChange {
    /// The physical function.
    pub pf: PciAddress,
    /// VFs before.
    pub before: u32,
    /// VFs asked for.
    pub requested: u32,
    /// VFs the driver enabled (it may enable fewer than asked).
    pub enabled: u32,
    /// The VFs now present.
    pub vfs: Vec<PciAddress>,
}

fn numvfs_path(device: &PciDevice) -> std::path::PathBuf {
    device.path().join("sriov_numvfs")
}

fn read_numvfs(device: &PciDevice) -> Result<u32> {
    let path = numvfs_path(device);
    sysfs::read_parsed(&path, "a VF count", |text| text.parse().ok())?
        .ok_or_else(|| sysfs::missing(&path))
}

/// Whether `driver`, bound to a PF, also drives the PF's VFs on the host, so that new VFs are
/// probed by it when `sriov_drivers_autoprobe` is on (Intel's `i915` and `xe`).
fn drives_its_vfs(driver: &str) -> bool {
    matches!(driver, "i915" | "xe")
}

/// Waits until each of `vfs` has a driver, up to `timeout`, woken by their `bind` events
/// where udev runs; returns those still without one.
fn wait_for_vf_drivers(
    paths: &HostPaths,
    pf: &PciDevice,
    vfs: &[PciAddress],
    timeout: Duration,
) -> Result<Vec<PciAddress>> {
    // Each VF is reached beside the PF: one lookup per VF each time the wait looks.
    let devices = SysDir::new(paths.pci_devices());
    let mut unbound = pf.beside(vfs, &devices);
    wait::wait_until(paths, &["pci"], timeout, || {
        let mut still = Vec::new();
        for vf in unbound.drain(..) {
            if vf.driver()?.is_none() {
                still.push(vf);
            }
        }
        unbound = still;
        Ok(unbound.is_empty())
    })?;
    Ok(unbound.iter().map(PciDevice::address).collect())
}

/// Waits until the PF lists exactly `count` `virtfnN` links, woken by the VFs' `add` and
/// `remove` events where udev runs.
fn wait_for_vfs(
    paths: &HostPaths,
    device: &PciDevice,
    count: u32,
    timeout: Duration,
) -> Result<Vec<PciAddress>> {
    let mut vfs = Vec::new();
    let arrived = wait::wait_until(paths, &["pci"], timeout, || {
        vfs = device.virtfns()?;
        Ok(vfs.len() == count as usize)
    })?;
    if !arrived {
        return Err(HostError::Timeout {
            what: format!("{count} VFs of {}", device.address()),
            path: device.path().to_path_buf(),
            waited_ms: timeout.as_millis(),
        }
        .into());
    }
    Ok(vfs)
}

/// Sets the number of enabled VFs of `pf` to `count`, following the kernel's rules (and
/// NVIDIA's sequence for NVIDIA PFs); reads back what the driver enabled and waits for the VFs
/// to appear. A count change from non-zero to another non-zero count goes through 0; whether
/// the VFs may go is the caller's to check (`options.force` is not read here).
///
/// On failure at any step after the first write, it puts back the count it found (and the PF
/// on `nvidia`). An NVIDIA PF left on `pci-pf-stub` by an interrupted sequence is finished:
/// the count is written if needed and the PF and its VFs go back to `nvidia`.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn set_vf_count(
    paths: &HostPaths,
    pf: PciAddress,
    count: u32,
    options: SriovOptions,
) -> Result<SriovChange> {
    // Held open: its files (VF links, driver, counts) are read without walking the path again.
    let device = PciDevice::existing(paths, pf)?;
    let Some(capability) = device.sriov()? else {
        return Err(HostError::NoSriov {
            pf,
            path: device.path().join("sriov_totalvfs"),
        }
        .into());
    };
    if count > capability.total_vfs {
        return Err(HostError::BadVfCount {
            pf,
            asked: count,
            total: capability.total_vfs,
            all_or_none: false,
        }
        .into());
    }
    let driver = device.driver()?;
    let nvidia = device.vendor_id()? == Some(crate::model::NVIDIA_VENDOR_ID)
        && matches!(driver.as_deref(), Some("nvidia" | "pci-pf-stub"));
    let interrupted = nvidia && driver.as_deref() == Some("pci-pf-stub");
    let before = read_numvfs(&device)?;
    if before == count && !interrupted {
        let vfs = device.virtfns()?;
        return Ok(SriovChange {
            pf,
            before,
            requested: count,
            enabled: before,
            vfs,
        });
    }
    if nvidia && count != 0 && count != capability.total_vfs {
        return Err(HostError::BadVfCount {
            pf,
            asked: count,
            total: capability.total_vfs,
            all_or_none: true,
        }
        .into());
    }
    let autoprobe = capability.drivers_autoprobe == Some(true);
    let attempt = (|| {
        if nvidia {
            nvidia_set(paths, &device, before, count, interrupted, options.timeout)?;
        } else {
            plain_set(&device, before, count, options.timeout)?;
        }
        let enabled = read_numvfs(&device)?;
        if enabled < count {
            tracing::warn!(%pf, requested = count, enabled, "the driver enabled fewer VFs than asked");
        }
        let vfs = wait_for_vfs(paths, &device, enabled, options.timeout)?;
        if nvidia {
            // Each VF's driver is read from the PF's parent directory, held open; only a VF
            // not on nvidia yet goes through the bind.
            let devices = SysDir::new(paths.pci_devices());
            for vf in device.beside(&vfs, &devices) {
                if vf.driver()?.as_deref() != Some("nvidia") {
                    driver::bind(paths, vf.address(), "nvidia", options.timeout)?;
                }
            }
        } else if autoprobe && driver.as_deref().is_some_and(drives_its_vfs) {
            let unbound = wait_for_vf_drivers(paths, &device, &vfs, options.timeout)?;
            if !unbound.is_empty() {
                tracing::warn!(
                    %pf,
                    ?unbound,
                    waited_ms = options.timeout.as_millis(),
                    "VFs still without a driver (their probe failed or has not run)"
                );
            }
        }
        Ok(SriovChange {
            pf,
            before,
            requested: count,
            enabled,
            vfs,
        })
    })();
    if attempt.is_err() {
        undo_count(paths, &device, before, nvidia, options.timeout);
    }
    attempt
}

/// Writes the count, through `0` when both are non-zero. Removing VFs waits in the kernel
/// while a process has one open: each write is bounded by `within`.
fn plain_set(device: &PciDevice, before: u32, count: u32, within: Duration) -> Result<()> {
    let path = numvfs_path(device);
    if before == count {
        return Ok(());
    }
    let waiting_for = format!(
        "the release of the VFs of {} by the processes holding them open",
        device.address()
    );
    if before > 0 && count > 0 {
        write_attr_within(&path, "0", within, &waiting_for)?;
    }
    write_attr_within(&path, &count.to_string(), within, &waiting_for)
}

/// NVIDIA's `sriov-manage` sequence: take the unbindLock, move the PF to `pci-pf-stub`, write
/// the count, rebind `nvidia`. With `resume`, the PF is already on the stub (a sequence that was
/// interrupted): only the rest is done. The lock is released again if the PF cannot be moved.
fn nvidia_set(
    paths: &HostPaths,
    device: &PciDevice,
    before: u32,
    count: u32,
    resume: bool,
    within: Duration,
) -> Result<()> {
    let pf = device.address();
    if !resume {
        // Taken here, not only by the unbind inside `bind`, so that a GPU in use is refused
        // before anything moves.
        driver::take_unbind_lock(paths, pf)?;
        if let Err(err) = driver::bind(paths, pf, "pci-pf-stub", within) {
            driver::release_unbind_lock(paths, pf);
            return Err(err);
        }
    }
    let written = plain_set(device, before, count, within);
    let rebound = driver::restore(paths, pf, Some("nvidia"), within);
    written?;
    rebound
}

/// Best effort to put back the VF count found before a failed change, with the PF on
/// `nvidia` for NVIDIA GPUs; logs what it cannot do.
fn undo_count(paths: &HostPaths, device: &PciDevice, before: u32, nvidia: bool, timeout: Duration) {
    let pf = device.address();
    let driver = device.driver().unwrap_or_else(|err| {
        tracing::error!(%pf, "cannot read the PF's driver while undoing: {err}");
        None
    });
    if nvidia && driver.as_deref() != Some("nvidia") {
        if let Err(err) = driver::restore(paths, pf, Some("nvidia"), timeout) {
            tracing::error!(%pf, "cannot rebind nvidia: {err}");
        }
    }
    let now = match read_numvfs(device) {
        Ok(now) => now,
        Err(err) => {
            tracing::error!(%pf, "cannot read back the VF count to undo: {err}");
            return;
        }
    };
    if now == before {
        return;
    }
    let undo = if nvidia {
        nvidia_set(paths, device, now, before, false, timeout)
    } else {
        plain_set(device, now, before, timeout)
    };
    let waited = undo.and_then(|()| wait_for_vfs(paths, device, before, timeout));
    if let Err(err) = waited {
        tracing::error!(%pf, before, now, "cannot restore the VF count: {err}");
    }
}

/// Sets `sriov_drivers_autoprobe`: whether VFs enabled from now on are bound to a driver.
pub(crate) fn set_autoprobe(paths: &HostPaths, pf: PciAddress, on: bool) -> Result<()> {
    let device = PciDevice::existing(paths, pf)?;
    write_attr(
        &device.path().join("sriov_drivers_autoprobe"),
        if on { "1" } else { "0" },
    )
}
