//! Persistent definitions as data: what `restore` makes again after a reboot, and what new
//! vGPUs must leave room for. The files they are kept in, and their text, are the core's.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::pci::PciAddress;

/// When a definition is to be started: at boot (`vgpuctl restore`, mdevctl's udev rule) or
/// only on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// Started when the parent device appears: `"auto"`.
    Auto,
    /// Started only on request: `"manual"`.
    Manual,
}

impl Start {
    /// The word written in definition files: `auto` or `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Auto => "auto",
            Start::Manual => "manual",
        }
    }
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A persistent mediated device, as mdevctl stores it in `etc/mdevctl.d/<parent>/<uuid>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MdevDefinition {
    /// The device's UUID, the file's name.
    pub uuid: Uuid,
    /// The parent device's name under `sys/class/mdev_bus` (usually a PCI address), the
    /// directory's name.
    pub parent: String,
    /// The type's name under the parent's `mdev_supported_types` (e.g. `nvidia-222`).
    pub mdev_type: String,
    /// When the device is started.
    pub start: Start,
    /// Attributes written to the device's sysfs directory, in order, after it is created.
    pub attrs: Vec<(String, String)>,
}

/// The number of SR-IOV VFs to enable on a PF (`sriov_numvfs`), and the local-memory quotas
/// to give them, in `etc/vgpu/sriov/<pf>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SriovDefinition {
    /// The physical function.
    pub pf: PciAddress,
    /// The value for `sriov_numvfs`.
    pub num_vfs: u32,
    /// The value for `sriov_drivers_autoprobe`, written before the VFs are enabled; `None`
    /// leaves the kernel's setting.
    pub drivers_autoprobe: Option<bool>,
    /// The local-memory quota of VF `M` (from 1, in `virtfn` order, at most `num_vfs`) in MiB,
    /// written to `drm/card<N>/iov/vf<M>/gt*/lmem_quota` after the VFs are enabled; a VF not
    /// listed keeps the equal share its driver gives it.
    pub lmem_quota_mib: BTreeMap<u32, u64>,
}

/// A vGPU type set on an NVIDIA VF through the vendor-specific VFIO interface
/// (`nvidia/current_vgpu_type`), in `etc/vgpu/vf-vgpus/<vf>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VfVgpuDefinition {
    /// The virtual function.
    pub vf: PciAddress,
    /// The physical GPU the VF belongs to.
    pub gpu: PciAddress,
    /// The type's numeric id as `creatable_vgpu_types` lists it.
    pub type_id: u32,
    /// The type's name when it was set: the one name of the type once no free VF lists it.
    pub type_name: Option<String>,
    /// When the type is set.
    pub start: Start,
    /// In mixed-size mode, the placement id to make it at (NVIDIA's `vgpu-placement-id`): its
    /// GPU is put in mixed-size mode before it is made.
    pub placement: Option<u32>,
}

/// A driver binding (`driver_override` and `drivers/<driver>/bind`), in
/// `etc/vgpu/bindings/<address>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindingDefinition {
    /// The PCI function.
    pub address: PciAddress,
    /// The driver to bind (usually `vfio-pci`).
    pub driver: String,
    /// The driver it was bound to before, to return it to; `None` when it had none.
    pub previous_driver: Option<String>,
    /// When the binding is applied.
    pub start: Start,
}
