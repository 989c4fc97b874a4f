//! NVIDIA's vendor-specific VFIO interface (vGPU 17+, kernel 6.8+): per-VF `nvidia/` attributes.
//!
//! Each VF of an Ada, Hopper or Blackwell GPU carries `nvidia/creatable_vgpu_types` (what can be
//! created on it now) and `nvidia/current_vgpu_type` (`0`, or the id of the vGPU it holds).

use std::path::Path;

use crate::error::{HostError, Result};
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{SysDir, child, read_attr};
use crate::parse::{CreatableType, parse_creatable_types};

/// The version of the loaded NVIDIA kernel module, from `/proc/driver/nvidia/version`; `None`
/// when the module is not loaded or the file names no version.
pub(crate) fn driver_version(paths: &crate::host::paths::HostPaths) -> Result<Option<String>> {
    let path = paths.proc().join("driver/nvidia/version");
    Ok(read_attr(&path)?.and_then(|text| crate::parse::parse_nvidia_driver_version(&text)))
}

/// The `nvidia/` directory of one VF, held open: its files are opened relative to it, so the
/// path down to the VF is looked up once ([`SysDir::held_open`]). Drop it before holding the
/// next VF's, so that descriptors stay few.
#[derive(Debug, Clone)]
pub(crate) struct NvidiaVf {
    dir: SysDir,
}

impl NvidiaVf {
    /// The vendor interface of the VF whose device directory is `vf_path`, when it has one;
    /// a directory that is there but cannot be opened is [`HostError::Read`](crate::host::HostError::Read).
    pub(crate) fn of(vf_path: &Path) -> Result<Option<Self>> {
        Ok(SysDir::new(child(vf_path, "nvidia"))
            .opened()?
            .map(|dir| Self { dir }))
    }

    /// [`Self::of`] the VF `vf`, looked up through its directory (held open, when it is).
    pub(crate) fn of_device(vf: &PciDevice) -> Result<Option<Self>> {
        Ok(vf.dir().join("nvidia").opened()?.map(|dir| Self { dir }))
    }

    /// The `nvidia/` directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `value` to its file `name` (`current_vgpu_type`, `gpu_instance_id`), through the
    /// directory held open ([`crate::host::sysfs::write_attr`]).
    pub(crate) fn write(&self, name: &str, value: &str) -> Result<()> {
        self.dir.write_attr(name, value)
    }

    /// `creatable_vgpu_types`: the types that can be created on this VF now.
    pub(crate) fn creatable_types(&self) -> Result<Vec<CreatableType>> {
        match self.dir.read_attr("creatable_vgpu_types")? {
            None => Ok(Vec::new()),
            Some(text) => parse_creatable_types(&text).map_err(|source| {
                HostError::Format {
                    path: child(self.path(), "creatable_vgpu_types"),
                    source,
                }
                .into()
            }),
        }
    }

    /// `current_vgpu_type`: the type of the vGPU on this VF, `None` when it holds none (`0`).
    pub(crate) fn current_type(&self) -> Result<Option<u32>> {
        let current = self
            .dir
            .read_parsed("current_vgpu_type", "a type id or 0", |t| {
                t.parse::<u32>().ok()
            })?;
        Ok(current.filter(|id| *id != 0))
    }

    /// `gpu_instance_id`: the GPU instance a MIG-backed vGPU on this VF runs on. `None` when
    /// the file is absent or unreadable (NVIDIA's driver answers `ENXIO` before one is set) or
    /// does not hold a number.
    pub(crate) fn gpu_instance_id(&self) -> Option<u32> {
        self.dir
            .read_parsed("gpu_instance_id", "a GPU instance id", |t| {
                t.parse::<u32>().ok()
            })
            .ok()
            .flatten()
    }
}
