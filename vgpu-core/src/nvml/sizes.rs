//! The size mode of an NVIDIA GPU's time-sliced vGPUs, read and set through NVML
//! (`nvmlDeviceGetVgpuHeterogeneousMode`, `nvmlDeviceSetVgpuHeterogeneousMode`; NVIDIA Virtual
//! GPU Software User Guide, "Mixed-Size Mode for Time-Sliced vGPUs"). NVML takes a new mode
//! only while the GPU holds no vGPU: a change is refused before NVML is asked when vGPUs
//! exist, and NVML's own refusal is passed on otherwise. The driver forgets the mode at each
//! reload and reboot.

use serde::Serialize;

use crate::error::NvmlError;
use crate::model::nvml::Fact;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;

/// What `size-mode` changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeModeChange {
    /// The GPU.
    pub gpu: PciAddress,
    /// The mode before.
    pub before: SizeMode,
    /// The mode after, read back.
    pub after: SizeMode,
    /// Whether NVML was asked to change anything (false when it was already so).
    pub changed: bool,
}

impl crate::nvml::Nvml {
    /// The size mode of the GPU at `gpu`: unavailable for a GPU without mixed-size mode
    /// (`NOT_SUPPORTED`), an older driver, or NVML not loaded.
    pub fn size_mode(&self, gpu: PciAddress) -> Fact<SizeMode> {
        match self.read_gpu(gpu) {
            Fact::Value(read) => read.size_mode,
            Fact::Unavailable(why) => Fact::Unavailable(why),
        }
    }

    /// Sets the size mode of `gpu` to `mode`, refused while `vgpus` (the vGPUs on it, by
    /// handle) is not empty, then reads it back. Nothing is asked of NVML when the GPU is
    /// already so. Callers go through [`Manager::set_size_mode`](crate::Manager::set_size_mode).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn set_size_mode(
        &self,
        gpu: PciAddress,
        mode: SizeMode,
        vgpus: &[String],
    ) -> Result<SizeModeChange, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            let call = |why| NvmlError::Call { gpu, why };
            let before = self
                .size_mode(gpu)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            if before == mode {
                return Ok(SizeModeChange {
                    gpu,
                    before,
                    after: before,
                    changed: false,
                });
            }
            if !vgpus.is_empty() {
                return Err(NvmlError::SizeModeInUse {
                    gpu,
                    vgpus: vgpus.to_vec(),
                });
            }
            let device = crate::nvml::read::device_at(nvml, gpu).map_err(call)?;
            vgpu_nvml_ext::set_vgpu_heterogeneous_mode(&device, mode == SizeMode::Mixed).map_err(
                |err| {
                    call(crate::nvml::read::unavailable(
                        "nvmlDeviceSetVgpuHeterogeneousMode",
                        &err,
                    ))
                },
            )?;
            let after = self
                .size_mode(gpu)
                .as_result()
                .cloned()
                .map_err(|w| call(w.clone()))?;
            return Ok(SizeModeChange {
                gpu,
                before,
                after,
                changed: true,
            });
        }
        Err(self.needed_for(format!("set the size mode of {gpu}")))
    }
}
