//! Changes to MIG through NVML: MIG mode, and GPU instances made at a placement and destroyed
//! (NVML API Reference Guide, "Multi Instance GPU Management": `nvmlDeviceSetMigMode`,
//! `nvmlDeviceGetGpuInstancePossiblePlacements_v2`,
//! `nvmlDeviceGetGpuInstanceRemainingCapacity`, `nvmlDeviceCreateGpuInstanceWithPlacement`,
//! `nvmlDeviceGetGpuInstanceById`, `nvmlGpuInstanceDestroy`).
//!
//! A placement is where a GPU instance sits on its GPU: its first memory slice and how many
//! it spans, as `nvidia-smi mig -lgipp` lists them (`{0,2,4}:2` for Hopper's `2g` profile).
//! NVML refuses an instance over another (`NVML_ERROR_INSUFFICIENT_RESOURCES`), the
//! destruction of one something runs on, and a MIG-mode change while the GPU is busy
//! (`NVML_ERROR_IN_USE`); those come back as [`NvmlError::Call`] with
//! [`Cause::InsufficientResources`](crate::model::nvml::Cause::InsufficientResources) or
//! [`Cause::InUse`](crate::model::nvml::Cause::InUse). A MIG-mode change may wait for a GPU reset
//! (`NVML_ERROR_RESET_REQUIRED` as its activation status): that is
//! [`MigModeOutcome::ResetPending`], not an error.
//!
//! Each method is one change as NVML makes it: nothing is recorded, audited or undone here.
//! So the methods are private to the crate. An embedder changes MIG through the `Manager`
//! (`apply`, `restore`), which takes the host lock, writes the audit log and undoes a change
//! that fails part-way.

use serde::Serialize;

use crate::error::NvmlError;
use crate::model::nvml::MigMode;
use crate::model::pci::PciAddress;
use crate::nvml::Nvml;

pub use crate::model::nvml::GpuInstancePlacement;

/// A GPU instance NVML just made (`nvmlGpuInstanceGetInfo` of the new instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CreatedGpuInstance {
    /// Its id, the one a VF's `nvidia/gpu_instance_id` takes; NVML chooses it.
    pub id: u32,
    /// Its profile's id.
    pub profile_id: u32,
    /// Where it sits.
    pub placement: GpuInstancePlacement,
}

/// Whether a MIG mode asked for is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigModeOutcome {
    /// The GPU is in the mode now.
    Applied,
    /// The mode is pending until the GPU is reset (`NVML_ERROR_RESET_REQUIRED`), as on
    /// platforms that do not expose a GPU reset to the driver.
    ResetPending,
}

/// What a MIG-mode change found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MigModeChange {
    /// The GPU.
    pub gpu: PciAddress,
    /// MIG mode before.
    pub before: MigMode,
    /// MIG mode after, read back.
    pub after: MigMode,
    /// Whether NVML was asked to change anything (false when the mode already was, and would
    /// stay, the one asked for).
    pub changed: bool,
    /// Whether the mode asked for is in force.
    pub outcome: MigModeOutcome,
}

impl Nvml {
    /// Every placement a GPU instance of profile `profile_id` can take on the GPU at `gpu`,
    /// taken or not, in NVML's order (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn gpu_instance_placements(
        &self,
        gpu: PciAddress,
        profile_id: u32,
    ) -> Result<Vec<GpuInstancePlacement>, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return device::placements(nvml, gpu, profile_id);
        }
        Err(self.needed_for(format!(
            "list the placements of GPU-instance profile {profile_id} on {gpu}"
        )))
    }

    /// How many more GPU instances of profile `profile_id` the GPU at `gpu` can take, with its
    /// instances where they are (`nvmlDeviceGetGpuInstanceRemainingCapacity`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn gpu_instance_remaining_capacity(
        &self,
        gpu: PciAddress,
        profile_id: u32,
    ) -> Result<u32, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return device::remaining_capacity(nvml, gpu, profile_id);
        }
        Err(self.needed_for(format!(
            "know the room for GPU-instance profile {profile_id} on {gpu}"
        )))
    }

    /// Makes a GPU instance of profile `profile_id` on the GPU at `gpu`, at the profile's
    /// placement that starts at memory slice `start`
    /// (`nvmlDeviceCreateGpuInstanceWithPlacement`), and returns it as NVML reads it back.
    /// [`NvmlError::NoSuchPlacement`] when no placement of the profile starts there; NVML's
    /// refusal otherwise. When only the read-back fails the instance exists, and the error
    /// names `nvmlGpuInstanceGetInfo`.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn create_gpu_instance(
        &self,
        gpu: PciAddress,
        profile_id: u32,
        start: u32,
    ) -> Result<CreatedGpuInstance, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return device::create(nvml, gpu, profile_id, start);
        }
        Err(self.needed_for(format!(
            "make a GPU instance of profile {profile_id} on {gpu}"
        )))
    }

    /// Destroys GPU instance `id` of the GPU at `gpu` (`nvmlDeviceGetGpuInstanceById`, then
    /// `nvmlGpuInstanceDestroy`). An id the GPU has no instance with is
    /// [`Cause::NotFound`](crate::model::nvml::Cause::NotFound); an instance something runs on is
    /// [`Cause::InUse`](crate::model::nvml::Cause::InUse).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn destroy_gpu_instance(&self, gpu: PciAddress, id: u32) -> Result<(), NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return device::destroy(nvml, gpu, id);
        }
        Err(self.needed_for(format!("destroy GPU instance {id} of {gpu}")))
    }

    /// Turns MIG mode of the GPU at `gpu` on or off (`nvmlDeviceSetMigMode`) and reads it back.
    /// Nothing is asked of NVML when the GPU already is, and will stay, in that mode. NVML
    /// refuses a change while the GPU has GPU instances or runs vGPUs
    /// ([`Cause::InUse`](crate::model::nvml::Cause::InUse)); a change that waits for a GPU reset is
    /// [`MigModeOutcome::ResetPending`].
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub(crate) fn set_mig_mode(
        &self,
        gpu: PciAddress,
        on: bool,
    ) -> Result<MigModeChange, NvmlError> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return device::set_mig_mode(nvml, gpu, on);
        }
        let mode = if on { "on" } else { "off" };
        Err(self.needed_for(format!("turn MIG mode {mode} on {gpu}")))
    }
}

#[cfg(feature = "nvml")]
mod device {
    //! The calls, on a loaded NVML.

    use nvml_wrapper::error::{NvmlError as WrapperError, nvml_try};

    use super::{CreatedGpuInstance, GpuInstancePlacement, MigModeChange, MigModeOutcome};
    use crate::error::NvmlError;
    use crate::model::nvml::MigMode;
    use crate::model::pci::PciAddress;
    use crate::nvml::read::{device_at, unavailable};

    fn failed(gpu: PciAddress, function: &str, error: &WrapperError) -> NvmlError {
        NvmlError::Call {
            gpu,
            why: unavailable(function, error),
        }
    }

    pub(super) fn placements(
        nvml: &nvml_wrapper::Nvml,
        gpu: PciAddress,
        profile_id: u32,
    ) -> Result<Vec<GpuInstancePlacement>, NvmlError> {
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        let list = vgpu_nvml_ext::gpu_instance_possible_placements(&device, profile_id)
            .map_err(|err| failed(gpu, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", &err))?;
        Ok(list
            .into_iter()
            .map(|p| GpuInstancePlacement {
                start: p.start,
                size: p.size,
            })
            .collect())
    }

    pub(super) fn remaining_capacity(
        nvml: &nvml_wrapper::Nvml,
        gpu: PciAddress,
        profile_id: u32,
    ) -> Result<u32, NvmlError> {
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        vgpu_nvml_ext::gpu_instance_remaining_capacity(&device, profile_id)
            .map_err(|err| failed(gpu, "nvmlDeviceGetGpuInstanceRemainingCapacity", &err))
    }

    pub(super) fn create(
        nvml: &nvml_wrapper::Nvml,
        gpu: PciAddress,
        profile_id: u32,
        start: u32,
    ) -> Result<CreatedGpuInstance, NvmlError> {
        let possible = placements(nvml, gpu, profile_id)?;
        let Some(placement) = possible.iter().find(|p| p.start == start).copied() else {
            return Err(NvmlError::NoSuchPlacement {
                gpu,
                profile_id,
                start,
                starts: possible.iter().map(|p| p.start).collect(),
            });
        };
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        tracing::info!(
            gpu = %gpu,
            profile_id,
            start = placement.start,
            size = placement.size,
            "making a GPU instance (nvmlDeviceCreateGpuInstanceWithPlacement)"
        );
        let info = vgpu_nvml_ext::create_gpu_instance(
            &device,
            profile_id,
            vgpu_nvml_ext::GpuInstancePlacement {
                start: placement.start,
                size: placement.size,
            },
        )
        .map_err(|f| failed(gpu, f.function, &f.error))?;
        Ok(CreatedGpuInstance {
            id: info.id,
            profile_id: info.profile_id,
            placement: GpuInstancePlacement {
                start: info.placement_start,
                size: info.placement_size,
            },
        })
    }

    pub(super) fn destroy(
        nvml: &nvml_wrapper::Nvml,
        gpu: PciAddress,
        id: u32,
    ) -> Result<(), NvmlError> {
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        tracing::info!(gpu = %gpu, id, "destroying a GPU instance (nvmlGpuInstanceDestroy)");
        vgpu_nvml_ext::destroy_gpu_instance(&device, id)
            .map_err(|f| failed(gpu, f.function, &f.error))
    }

    fn mig_mode(nvml: &nvml_wrapper::Nvml, gpu: PciAddress) -> Result<MigMode, NvmlError> {
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        let mode = device
            .mig_mode()
            .map_err(|err| failed(gpu, "nvmlDeviceGetMigMode", &err))?;
        Ok(MigMode {
            current: mode.current != 0,
            pending: mode.pending != 0,
        })
    }

    pub(super) fn set_mig_mode(
        nvml: &nvml_wrapper::Nvml,
        gpu: PciAddress,
        on: bool,
    ) -> Result<MigModeChange, NvmlError> {
        let before = mig_mode(nvml, gpu)?;
        if before.current == on && before.pending == on {
            return Ok(MigModeChange {
                gpu,
                before,
                after: before,
                changed: false,
                outcome: MigModeOutcome::Applied,
            });
        }
        let device = device_at(nvml, gpu).map_err(|why| NvmlError::Call { gpu, why })?;
        tracing::info!(gpu = %gpu, on, "setting MIG mode (nvmlDeviceSetMigMode)");
        let status = device
            .set_mig_mode(on)
            .map_err(|err| failed(gpu, "nvmlDeviceSetMigMode", &err))?;
        let outcome = match nvml_try(status) {
            Ok(()) => MigModeOutcome::Applied,
            Err(WrapperError::ResetRequired) => MigModeOutcome::ResetPending,
            Err(err) => {
                return Err(failed(
                    gpu,
                    "nvmlDeviceSetMigMode (activation status)",
                    &err,
                ));
            }
        };
        // NVML may reset the GPU to apply the mode, which gives it new handles: the mode is
        // read back through a new one.
        let after = mig_mode(nvml, gpu)?;
        Ok(MigModeChange {
            gpu,
            before,
            after,
            changed: true,
            outcome,
        })
    }
}

#[cfg(all(test, feature = "nvml"))]
mod tests;
