//! The kinds of device a VM can be given, and which of them partition a GPU's memory and
//! compute in hardware. The isolation report assesses each kind; the tenant policy's
//! `hardware` class admits the kinds partitioned in hardware beside other tenants.

use std::fmt;

use serde::Serialize;

use crate::VgpuType;

/// A kind of device a VM can be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// The whole GPU, assigned through VFIO.
    Passthrough,
    /// A vGPU on a MIG GPU instance: its own compute and memory slices.
    MigVgpu,
    /// A vGPU that shares the GPU's engines in turns with the GPU's other vGPUs.
    TimeSlicedVgpu,
    /// An SR-IOV VF of a plain SR-IOV GPU, assigned whole.
    PlainVf,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Passthrough => "passthrough",
            DeviceKind::MigVgpu => "mig-vgpu",
            DeviceKind::TimeSlicedVgpu => "time-sliced-vgpu",
            DeviceKind::PlainVf => "plain-vf",
        })
    }
}

impl DeviceKind {
    /// The kind of a vGPU of `ty`: MIG-backed (its own GPU instance) or time-sliced (the GPU's
    /// engines in turns). `None` is a whole plain VF.
    pub fn of_type(ty: Option<&VgpuType>) -> DeviceKind {
        match ty {
            None => DeviceKind::PlainVf,
            Some(ty) if ty.mig.is_some() => DeviceKind::MigVgpu,
            Some(_) => DeviceKind::TimeSlicedVgpu,
        }
    }

    /// Whether the device's memory and compute are partitioned in hardware: every kind but a
    /// time-sliced vGPU, which shares the GPU's engines, caches and memory bandwidth.
    pub fn partitioned_in_hardware(self) -> bool {
        self != DeviceKind::TimeSlicedVgpu
    }
}
