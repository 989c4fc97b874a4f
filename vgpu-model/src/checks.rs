//! The results of the host's IOMMU and VFIO checks, as data: each check with its status and
//! remedy, and each device's group isolation. `vgpu-core`'s `checks` module reads the host into
//! them; the isolation report reads them.

use std::fmt;

use serde::Serialize;

use crate::pci::PciAddress;

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Pass,
    /// Works, but something is off or could not be verified.
    Warn,
    /// Device assignment will not work (or not safely) until this is fixed.
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// The result of one host check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable id: `cpu-virtualization`, `iommu-firmware`, `iommu-enabled`, `iommu-cmdline`,
    /// `interrupt-remapping`, `iommu-groups`, `vfio`; `scrub-on-free` where the NVIDIA driver
    /// is loaded.
    pub id: &'static str,
    /// The verdict.
    pub status: Status,
    /// One line saying what was found.
    pub summary: String,
    /// What to do about it; `None` when nothing needs doing.
    pub remedy: Option<String>,
}

impl Check {
    /// A check with a stable `id`, its status, a summary and what to do about a failure.
    pub fn new(
        id: &'static str,
        status: Status,
        summary: impl Into<String>,
        remedy: Option<&str>,
    ) -> Self {
        Self {
            id,
            status,
            summary: summary.into(),
            remedy: remedy.map(str::to_owned),
        }
    }
}

/// Another function in a device's IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    /// Its address.
    pub address: PciAddress,
    /// Its driver, if bound.
    pub driver: Option<String>,
    /// Its class code, as lowercase hex.
    #[serde(serialize_with = "crate::serde_hex::option_class")]
    pub class: Option<u32>,
}

/// Whether one GPU function can be assigned to a guest on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceIsolation {
    /// The GPU function (PF or VF).
    pub address: PciAddress,
    /// Its IOMMU group; `None` without an IOMMU.
    pub iommu_group: Option<u32>,
    /// True when nothing in the group blocks assignment.
    pub isolated: bool,
    /// Devices in the group that a host driver owns and that are not part of this GPU: each
    /// must be unbound, bound to `vfio-pci`, or given to the same guest.
    pub blockers: Vec<GroupMember>,
    /// Other functions of the same slot (a GPU's audio function): assign them with it.
    pub companions: Vec<GroupMember>,
    /// What could not be read while checking; a device with problems is not called isolated.
    pub problems: Vec<String>,
    /// True when the group can be handed to VFIO now: isolated, and every companion already
    /// unbound or bound to a passthrough driver (libvirt detaches only the devices it is
    /// given; a companion left on its host driver keeps the group from being viable).
    pub ready: bool,
}

/// Everything `check` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Host-wide checks, in a fixed order.
    pub checks: Vec<Check>,
    /// Per-device isolation, PFs each followed by their VFs.
    pub devices: Vec<DeviceIsolation>,
}

impl Report {
    /// The worst status among the checks and devices (a device that is not isolated is a
    /// failure for that device).
    pub fn worst(&self) -> Status {
        let checks = self.checks.iter().map(|c| c.status);
        let devices = self.devices.iter().map(|d| {
            if d.isolated {
                Status::Pass
            } else {
                Status::Fail
            }
        });
        checks.chain(devices).max().unwrap_or(Status::Pass)
    }
}
