//! Plain SR-IOV VFs, each assigned whole: bound to `vfio-pci` for a guest, given back to the
//! driver it had afterwards (`Documentation/PCI/pci-iov-howto.rst`,
//! `Documentation/driver-api/vfio.rst`).

use std::time::Duration;

use super::{Placement, Running};
use crate::error::Result;
use crate::host::driver;
use crate::host::driver::GiveBack;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::model::Gpu;
use crate::model::pci::PciAddress;

/// Each VF, in `virtfnN` order.
pub(super) fn candidates(gpu: &Gpu) -> Vec<Placement> {
    gpu.vfs
        .iter()
        .map(|vf| Placement::PlainVf { vf: vf.address })
        .collect()
}

/// Whether the VF is not held by a passthrough driver already.
pub(super) fn fits(paths: &HostPaths, placement: &Placement) -> Result<bool> {
    let Placement::PlainVf { vf } = placement else {
        return Ok(false);
    };
    Ok(!PciDevice::new(paths, *vf)
        .driver()?
        .as_deref()
        .is_some_and(driver::is_passthrough_driver))
}

/// Binds a plain VF to `vfio-pci` for a guest, its host driver recorded first
/// ([`driver::take`]); returns that driver.
pub(crate) fn bind(paths: &HostPaths, vf: PciAddress, within: Duration) -> Result<Option<String>> {
    driver::take(paths, vf, "vfio-pci", within)
}

/// Gives a plain VF back to the driver recorded when it was bound for a guest, or, with no
/// record, to `fallback` when given, else to its default driver.
pub(crate) fn release(
    paths: &HostPaths,
    vf: PciAddress,
    fallback: GiveBack<'_>,
    within: Duration,
) -> Result<()> {
    match (driver::recalled_previous(paths, vf)?, fallback) {
        (Some(record), _) => driver::restore(paths, vf, record.driver.as_deref(), within)?,
        (None, GiveBack::To(previous)) => driver::restore(paths, vf, previous, within)?,
        (None, GiveBack::Probe) => driver::reprobe(paths, vf, within).map(|_| ())?,
    }
    driver::forget_previous(paths, vf)
}

/// A VF on `vfio-pci` is a plain VF given to a guest.
pub(super) fn running(device: &PciDevice) -> Result<Option<Running>> {
    let is_vf = device.physfn()?.is_some();
    Ok((is_vf && device.driver()?.as_deref() == Some("vfio-pci")).then_some(Running::PlainVf))
}

/// The passthrough driver holding a VF, in words.
pub(super) fn vf_holder(paths: &HostPaths, vf: PciAddress) -> Result<Option<String>> {
    Ok(PciDevice::new(paths, vf)
        .driver()?
        .filter(|d| driver::is_passthrough_driver(d))
        .map(|d| format!("it is bound to {d}")))
}
