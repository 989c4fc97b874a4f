//! The steps an operation took, and how each is taken back.

use std::path::PathBuf;

use uuid::Uuid;

use super::Operation;
use crate::backend::{self, NewVgpu};
use crate::error::Result;
use crate::host::driver;
use crate::host::durable;
use crate::host::sriov;
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;
use crate::nvml::sched::SchedulerRequest;
use crate::state::store::{
    BindingDefinition, MdevDefinition, MigDefinition, SriovDefinition, VfVgpuDefinition,
};

/// A step that was taken, and how to take it back.
#[derive(Debug)]
pub(super) enum Undo {
    /// Remove the mdev definition written.
    MdevDefinition(Uuid),
    /// Remove the VF-vGPU definition written.
    VfVgpuDefinition(PciAddress),
    /// Remove the binding definition written.
    BindingDefinition(PciAddress),
    /// Put back the SR-IOV definition that was there (or none).
    SriovDefinition {
        pf: PciAddress,
        previous: Option<SriovDefinition>,
    },
    /// Destroy the vGPU made.
    Vgpu(VgpuHandle),
    /// Put back the VF count.
    VfCount { pf: PciAddress, before: u32 },
    /// Put back `sriov_drivers_autoprobe`.
    Autoprobe { pf: PciAddress, was: bool },
    /// Give the device back to the driver it had.
    Driver {
        address: PciAddress,
        previous: Option<String>,
    },
    /// Unbind the device from its host driver `driver` again, recording it first.
    SetAside { address: PciAddress, driver: String },
    /// Put back the MIG definition that was there (or none).
    MigDefinition {
        gpu: PciAddress,
        previous: Option<MigDefinition>,
    },
    /// Turn MIG mode back.
    MigMode { gpu: PciAddress, on: bool },
    /// Destroy the GPU instance made.
    GpuInstance { gpu: PciAddress, id: u32 },
    /// Make again the GPU instance destroyed, at the same placement.
    RecreateGpuInstance {
        gpu: PciAddress,
        profile_id: u32,
        start: u32,
    },
    /// Make again the vGPU that was stopped, where it was: at its placement in mixed-size
    /// mode, where one was known.
    Restart(NewVgpu, Option<u32>),
    /// Write back the mdev definition removed.
    RedefineMdev(MdevDefinition),
    /// Write back the VF-vGPU definition removed.
    RedefineVfVgpu(VfVgpuDefinition),
    /// Write back the binding definition removed.
    RedefineBinding(BindingDefinition),
    /// Put back a file of `vgpu`'s own (a hook record) as it was, or remove it.
    File {
        path: PathBuf,
        previous: Option<String>,
    },
    /// Write back a VF's local-memory quota (`lmem_quota`, in bytes).
    LmemQuota {
        vf: PciAddress,
        path: PathBuf,
        bytes: u64,
    },
    /// Put back the vGPU scheduler state that was there.
    Scheduler {
        gpu: PciAddress,
        before: SchedulerRequest,
    },
    /// Put back the size mode the GPU had (its vGPUs are undone first: NVML sets the mode only
    /// while the GPU has none).
    SizeMode {
        gpu: PciAddress,
        before: crate::model::sizes::SizeMode,
    },
}

impl Undo {
    pub(super) fn action(&self) -> &'static str {
        match self {
            Undo::MdevDefinition(_) | Undo::VfVgpuDefinition(_) | Undo::BindingDefinition(_) => {
                "undo-define"
            }
            Undo::SriovDefinition { .. } => "undo-define-sriov",
            Undo::Vgpu(_) => "undo-create",
            Undo::VfCount { .. } => "undo-sriov",
            Undo::Autoprobe { .. } => "undo-autoprobe",
            Undo::Driver { .. } | Undo::SetAside { .. } => "undo-bind",
            Undo::Restart(..) => "undo-stop",
            Undo::RedefineMdev(_) | Undo::RedefineVfVgpu(_) | Undo::RedefineBinding(_) => {
                "undo-undefine"
            }
            Undo::File { .. } => "undo-record",
            Undo::LmemQuota { .. } => "undo-lmem-quota",
            Undo::Scheduler { .. } => "undo-sched",
            Undo::SizeMode { .. } => "undo-size-mode",
            Undo::MigDefinition { .. } => "undo-define-mig",
            Undo::MigMode { .. } => "undo-mig-mode",
            Undo::GpuInstance { .. } => "undo-gpu-instance",
            Undo::RecreateGpuInstance { .. } => "undo-destroy-gpu-instance",
        }
    }

    pub(super) fn device(&self) -> String {
        match self {
            Undo::MdevDefinition(uuid) => uuid.to_string(),
            Undo::Vgpu(id) => id.to_string(),
            Undo::Restart(vgpu, _) => vgpu.handle().to_string(),
            Undo::RedefineMdev(def) => def.uuid.to_string(),
            Undo::RedefineVfVgpu(def) => def.vf.to_string(),
            Undo::RedefineBinding(def) => def.address.to_string(),
            Undo::File { path, .. } => path.display().to_string(),
            Undo::VfVgpuDefinition(a)
            | Undo::BindingDefinition(a)
            | Undo::SriovDefinition { pf: a, .. }
            | Undo::VfCount { pf: a, .. }
            | Undo::Autoprobe { pf: a, .. }
            | Undo::Driver { address: a, .. }
            | Undo::SetAside { address: a, .. }
            | Undo::LmemQuota { vf: a, .. }
            | Undo::Scheduler { gpu: a, .. }
            | Undo::SizeMode { gpu: a, .. }
            | Undo::MigDefinition { gpu: a, .. }
            | Undo::MigMode { gpu: a, .. } => a.to_string(),
            Undo::GpuInstance { gpu, id } => format!("{gpu}/{id}"),
            Undo::RecreateGpuInstance { gpu, start, .. } => format!("{gpu}@{start}"),
        }
    }
}

impl Operation<'_> {
    /// Takes back one step.
    pub(super) fn undo_one(&self, undo: Undo) -> Result<()> {
        let paths = self.paths();
        let store = self.store();
        match undo {
            Undo::MdevDefinition(uuid) => store.undefine_mdev(uuid).map(drop),
            Undo::VfVgpuDefinition(vf) => store.undefine_vf_vgpu(vf).map(drop),
            Undo::BindingDefinition(address) => store.undefine_binding(address).map(drop),
            Undo::SriovDefinition { pf, previous } => match previous {
                Some(def) => store.define_sriov(&def),
                None => store.undefine_sriov(pf).map(drop),
            },
            Undo::Vgpu(id) => {
                backend::destroy(paths, id, driver::GiveBack::Probe, self.within()).map(drop)
            }
            Undo::VfCount { pf, before } => {
                sriov::set_vf_count(paths, pf, before, self.session.sriov).map(drop)
            }
            Undo::Autoprobe { pf, was } => sriov::set_autoprobe(paths, pf, was),
            Undo::Driver { address, previous } => {
                driver::restore(paths, address, previous.as_deref(), self.within())?;
                driver::forget_previous(paths, address)
            }
            Undo::SetAside { address, driver } => {
                driver::set_aside(paths, address, &driver, self.within())
            }
            Undo::Restart(vgpu, at) => {
                backend::realize_placed_at(paths, &vgpu, at, self.within(), self.nvml()).map(drop)
            }
            Undo::Scheduler { gpu, before } => self
                .nvml()
                .get()
                .set_scheduler(gpu, before, &[])
                .map(drop)
                .map_err(Into::into),
            Undo::SizeMode { gpu, before } => self
                .nvml()
                .get()
                .set_size_mode(gpu, before, &[])
                .map(drop)
                .map_err(Into::into),
            Undo::RedefineMdev(def) => store.define_mdev(&def),
            Undo::RedefineVfVgpu(def) => store.define_vf_vgpu(&def),
            Undo::RedefineBinding(def) => store.define_binding(&def),
            Undo::File { path, previous } => match previous {
                Some(text) => durable::write_atomic(&path, text.as_bytes()),
                None => durable::remove_durably(&path).map(drop),
            },
            Undo::MigDefinition { gpu, previous } => match previous {
                Some(def) => store.define_mig(&def),
                None => store.undefine_mig(gpu).map(drop),
            },
            Undo::MigMode { gpu, on } => self
                .nvml()
                .get()
                .set_mig_mode(gpu, on)
                .map(drop)
                .map_err(Into::into),
            Undo::GpuInstance { gpu, id } => self
                .nvml()
                .get()
                .destroy_gpu_instance(gpu, id)
                .map_err(Into::into),
            Undo::RecreateGpuInstance {
                gpu,
                profile_id,
                start,
            } => self
                .nvml()
                .get()
                .create_gpu_instance(gpu, profile_id, start)
                .map(drop)
                .map_err(Into::into),
            Undo::LmemQuota { path, bytes, .. } => {
                crate::host::sysfs::write_attr(&path, &bytes.to_string())
            }
        }
    }
}
