//! NVIDIA's vendor-specific VFIO interface (vGPU 17+, kernel 6.8+): per-VF `nvidia/` attributes.
//!
//! Each VF of an Ada, Hopper or Blackwell GPU carries `nvidia/creatable_vgpu_types` (what can be
//! created on it now) and `nvidia/current_vgpu_type` (`0`, or the id of the vGPU it holds).

use std::path::Path;

use crate::error::{HostError, Result};
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{SysDir, child, read_attr};
use crate::model::sizes::placement_of_param;
use crate::model::{Gpu, VgpuHandle};
use crate::parse::{CreatableType, parse_creatable_types};

/// A VF's `nvidia/` file that takes `vgpu-placement-id` before its type is set.
const PLACEMENT_FILE: &str = "vgpu_params";

/// The version of the loaded NVIDIA kernel module, from `/proc/driver/nvidia/version`; `None`
/// when the module is not loaded or the file names no version.
pub(crate) fn driver_version(paths: &crate::host::paths::HostPaths) -> Result<Option<String>> {
    let path = paths.proc().join("driver/nvidia/version");
    Ok(read_attr(&path)?.and_then(|text| crate::parse::parse_nvidia_driver_version(&text)))
}

/// Where each vGPU on `gpu`'s VFs was made, as its VF's `nvidia/vgpu_params` names it: the
/// driver takes `vgpu-placement-id` there when the VF's type is set (NVIDIA Virtual GPU
/// Software User Guide, "vGPU Placements"). NVML matches a VF's vGPU to no VF, so the VF's
/// file is where its placement shows. A VF whose file cannot be read is logged and left out.
pub(crate) fn vf_placements(
    paths: &crate::host::paths::HostPaths,
    gpu: &Gpu,
) -> Vec<(VgpuHandle, u32)> {
    let vfs = gpu.vgpus.iter().filter_map(|v| match v.id {
        VgpuHandle::Vf(vf) => Some(vf),
        VgpuHandle::Mdev(_) => None,
    });
    vfs.filter_map(|vf| {
        let read = NvidiaVf::of(&paths.pci_device(&vf))
            .and_then(|nv| nv.map(|nv| nv.placement()).transpose());
        match read {
            Ok(at) => at.flatten().map(|at| (VgpuHandle::Vf(vf), at)),
            Err(err) => {
                tracing::warn!(%vf, "cannot read where its vGPU is placed: {}", err.chain());
                None
            }
        }
    })
    .collect()
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

    /// The placement `vgpu_params` names (`vgpu-placement-id=N`); `None` when it names none.
    pub(crate) fn placement(&self) -> Result<Option<u32>> {
        let params = self.dir.read_attr(PLACEMENT_FILE)?;
        Ok(params.as_deref().and_then(placement_of_param))
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
