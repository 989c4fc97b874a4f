//! An operation's steps on one GPU's own settings through NVML (the vGPU scheduler, the size
//! mode) and on placements in mixed-size mode: `vgpu-placement-id` written before a vGPU is
//! made, and the mode a defined vGPU's placement needs.

use super::Operation;
use super::undo::Undo;
use crate::backend::{self, NewVgpu};
use crate::error::{Error, Result};
use crate::model::Gpu;
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::nvml::host_state;
use crate::nvml::sched::{SchedulerChange, SchedulerRequest};
use crate::state::store::VfVgpuDefinition;

impl Operation<'_> {
    /// Sets the vGPU scheduler of `gpu` (`running`: the vGPUs sysfs shows on it); undo puts
    /// back the policy and time slice it had.
    pub(crate) fn set_scheduler(
        &mut self,
        gpu: PciAddress,
        request: SchedulerRequest,
        running: &[String],
    ) -> Result<SchedulerChange> {
        let result = self
            .nvml()
            .get()
            .set_scheduler(gpu, request, running)
            .map_err(Error::from);
        self.step("set-scheduler", &gpu.to_string(), result, |change| {
            let before = change.before.policy?;
            let timeslice_ms = change
                .before
                .timeslice_ns
                .value()
                .copied()
                .filter(|ns| *ns != 0 && before.takes_timeslice())
                .map(|ns| ns / 1_000_000);
            change.changed.then_some(Undo::Scheduler {
                gpu,
                before: SchedulerRequest {
                    policy: before,
                    timeslice_ms,
                },
            })
        })
    }

    /// Sets the size mode of `gpu` (`vgpus`: the vGPUs sysfs shows on it), audited; undo puts
    /// back the mode it had.
    pub(crate) fn set_size_mode(
        &mut self,
        gpu: PciAddress,
        mode: crate::model::sizes::SizeMode,
        vgpus: &[String],
    ) -> Result<crate::nvml::sizes::SizeModeChange> {
        let result = self
            .nvml()
            .get()
            .set_size_mode(gpu, mode, vgpus)
            .map_err(Error::from);
        self.step("set-size-mode", &gpu.to_string(), result, |change| {
            change.changed.then_some(Undo::SizeMode {
                gpu,
                before: change.before,
            })
        })
    }

    /// Puts the GPU of `device` (the GPU, or one of its VFs) in mixed-size mode unless it is
    /// so: a defined vGPU with a placement needs it, and the driver forgets the mode at each
    /// reboot. Refused while the GPU holds vGPUs in equal-size mode.
    pub(crate) fn ensure_mixed(&mut self, device: PciAddress) -> Result<()> {
        self.ensure_size_mode(device, SizeMode::Mixed).map(drop)
    }

    /// Puts the GPU of `device` (the GPU, or one of its VFs) in size mode `mode` unless it is
    /// so; returns whether it changed. Refused, naming them, while the GPU holds vGPUs, and
    /// refused for mixed beside MIG mode or the fixed-share scheduler.
    pub(crate) fn ensure_size_mode(&mut self, device: PciAddress, mode: SizeMode) -> Result<bool> {
        let found = self.gpu_of(device)?;
        let gpu = found.address;
        let asked = crate::manager::sched::Asked {
            mode: Some(mode),
            ..Default::default()
        };
        crate::manager::sched::keeps_mixed_apart(self, &found, asked, false)?;
        let vgpus: Vec<String> = found.vgpus.iter().map(|v| v.id.to_string()).collect();
        self.set_size_mode(gpu, mode, &vgpus).map(|c| c.changed)
    }

    /// Puts `gpu` back in mixed-size mode when it is defined so (a size-mode definition, or
    /// vGPUs defined at placements) and runs equal-size mode while it holds no vGPU; returns
    /// whether it changed. A GPU reset or a driver reload forgets the mode, and only a reboot
    /// runs `restore`: a vGPU made before this would fix equal-size mode until it goes. Nothing
    /// where NVML does not say the mode. A GPU holding vGPUs keeps its mode, and a change the
    /// driver refuses leaves it too: a warning says so either way, and the vGPU is made in the
    /// mode the GPU runs.
    pub(crate) fn mode_as_defined(&mut self, gpu: &Gpu) -> Result<bool> {
        if !host_state::may_mix(gpu) {
            return Ok(false);
        }
        let defined_mixed = match self.store().size_mode_of(gpu.address)? {
            Some(def) => def.mode == SizeMode::Mixed,
            // Read leniently: a file that cannot be read does not stop a vGPU being made.
            None => {
                let vfs = crate::manager::sched::possible_vfs(gpu);
                let (mdevs, unread) = self.store().mdevs_lenient();
                let (vf_vgpus, more) = self.store().vf_vgpus_lenient();
                for err in unread.iter().chain(&more) {
                    tracing::warn!(gpu = %gpu.address, "{}", err.chain());
                }
                let placed =
                    crate::state::store::placed_among(gpu.address, &vfs, &mdevs, &vf_vgpus);
                !placed.is_empty()
            }
        };
        let now = self.nvml().get().size_mode(gpu.address);
        if !defined_mixed || now.value() != Some(&SizeMode::Equal) {
            return Ok(false);
        }
        if !gpu.vgpus.is_empty() {
            tracing::warn!(
                gpu = %gpu.address,
                "defined in mixed-size mode, it runs equal-size mode and holds vGPUs: the mode \
                 stays"
            );
            return Ok(false);
        }
        match self.ensure_size_mode(gpu.address, SizeMode::Mixed) {
            Ok(changed) => Ok(changed),
            Err(err) => {
                tracing::warn!(
                    gpu = %gpu.address,
                    "defined in mixed-size mode, it stays in equal-size mode: {}",
                    err.chain()
                );
                Ok(false)
            }
        }
    }

    /// [`Operation::realize_at`] where [`Operation::placed`] puts `vgpu`: at the placement
    /// that takes the least room from larger types on a GPU in mixed-size mode, as `create`
    /// chooses.
    pub(crate) fn realize_placed(&mut self, vgpu: &NewVgpu) -> Result<Option<String>> {
        let at = self.placed(vgpu)?;
        self.realize_at(vgpu, at)
    }

    /// [`Operation::realize`], at placement `at` in mixed-size mode: written to the VF's
    /// `nvidia/vgpu_params` before its type is set, or to the new mediated device's before
    /// anything opens it (a failed write removes the device again).
    pub(crate) fn realize_at(&mut self, vgpu: &NewVgpu, at: Option<u32>) -> Result<Option<String>> {
        let Some(id) = at else {
            return self.realize(vgpu);
        };
        match vgpu {
            NewVgpu::VendorVf { vf, .. } => {
                let nvidia = self.paths().pci_device(vf).join("nvidia");
                backend::write_placement(&nvidia, id)?;
                self.realize(vgpu)
            }
            NewVgpu::Mdev { uuid, .. } => {
                let made = self.realize(vgpu)?;
                let nvidia = self
                    .paths()
                    .mdev_devices()
                    .join(uuid.to_string())
                    .join("nvidia");
                let result = backend::write_placement(&nvidia, id);
                self.step("place", &uuid.to_string(), result, |()| None)?;
                Ok(made)
            }
            NewVgpu::PlainVf { vf } => Err(Error::Plan(crate::plan::Error::Placement(
                crate::plan::placement::PlacementRefusal::NotMixed {
                    gpu: *vf,
                    now: "a plain VF has no placement".to_owned(),
                },
            ))),
        }
    }

    /// Makes the vendor-VFIO vGPU a definition describes: at its placement, on its GPU put in
    /// mixed-size mode first, when it has one; else where the placer chooses.
    pub(crate) fn start_vf_vgpu(&mut self, def: &VfVgpuDefinition) -> Result<()> {
        let vgpu = NewVgpu::VendorVf {
            vf: def.vf,
            type_id: def.type_id,
        };
        match def.placement {
            Some(at) => {
                self.ensure_mixed(def.gpu)?;
                self.realize_at(&vgpu, Some(at)).map(drop)
            }
            // Defined without one: where `create` would put it on a GPU in mixed-size mode.
            None => self.realize_placed(&vgpu).map(drop),
        }
    }
}
