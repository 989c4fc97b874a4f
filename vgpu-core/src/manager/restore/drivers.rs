//! Devices a killed command left without a driver. `vgpu` records a device's host driver
//! before it takes the device off it ([`driver::take`], [`driver::set_aside`]) and forgets
//! the record once it gives the device back. A recorded device with no driver is thus one a
//! command was moving when it died: `restore` gives it back to its driver before anything
//! else, and the definitions then take it from there.

use super::{RestoreReport, Scope};
use crate::error::Result;
use crate::host::driver::{self, DriverRecord};
use crate::host::pci_device::PciDevice;
use crate::manager::session::{Operation, Session};
use crate::model::pci::PciAddress;

/// Gives back each recorded device of `scope` (all with `None`) that has no driver, each its
/// own operation; a step of `report` for each one given back, and for each that failed.
pub(super) fn restore(session: &Session, report: &mut RestoreReport, scope: Option<&Scope>) {
    let records = match driver::recorded(session.paths()) {
        Ok(records) => records,
        Err(err) => {
            report.push(session, "driver", "records".to_owned(), Err(err));
            return;
        }
    };
    for record in records {
        let DriverRecord {
            address,
            driver: host,
        } = match record {
            Ok(record) => record,
            Err(err) => {
                report.push(session, "driver", "record".to_owned(), Err(err));
                continue;
            }
        };
        if scope.is_some_and(|s| !s.concerns(address)) {
            continue;
        }
        let result = session.attempt(|op| give_back(op, address, host.as_deref()));
        if !matches!(result, Ok(false)) {
            report.push(session, "driver", address.to_string(), result);
        }
    }
}

/// Gives `address` back to `host`, its recorded driver, when it has no driver; forgets a
/// record that no longer stands for anything (the device gone, back on its driver, or
/// without a driver before). A device on another driver keeps its record: `vfio-pci` holds
/// it for a guest, and destroying that vGPU gives it back. Returns whether it changed.
fn give_back(op: &mut Operation<'_>, address: PciAddress, host: Option<&str>) -> Result<bool> {
    let paths = op.paths().clone();
    let device = PciDevice::new(&paths, address);
    if !device.exists() {
        driver::forget_previous(&paths, address)?;
        return Ok(false);
    }
    match (device.driver()?.as_deref(), host) {
        (Some(current), Some(host)) if current == host => {
            driver::forget_previous(&paths, address)?;
            Ok(false)
        }
        (Some(_), _) => Ok(false),
        (None, None) => {
            driver::forget_previous(&paths, address)?;
            Ok(false)
        }
        (None, Some(host)) => {
            op.give_back_driver(address, host)?;
            Ok(true)
        }
    }
}
