//! Host mutations as an operator runs them: each under the host lock, recorded in the audit
//! log, persisted where asked, and undone when they fail part-way.
//!
//! Persistent changes are written *before* the host is changed and removed again if the change
//! fails: a process killed in between leaves a definition that [`Manager::restore`] carries out,
//! never a device that nothing describes.

use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use crate::audit::{AuditEntry, AuditLog};
use crate::driver;
use crate::error::{Error, Result};
use crate::inventory::{Gpu, VgpuHandle, discover, error_chain};
use crate::lifecycle::{self, Created, Placement, Running};
use crate::lock::HostLock;
use crate::paths::HostPaths;
use crate::pci::PciAddress;
use crate::pci_device::PciDevice;
use crate::sriov::{self, SriovChange, SriovOptions};
use crate::store::{
    BindingDefinition, MdevDefinition, SriovDefinition, Start, Store, VfVgpuDefinition,
};
use crate::sysfs::write_attr;

/// Performs host mutations for one command.
#[derive(Debug, Clone)]
pub struct Manager {
    paths: HostPaths,
    store: Store,
    command: String,
    lock_timeout: Duration,
    sriov: SriovOptions,
}

/// What `define` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Defined {
    /// The handle the definition answers to.
    pub id: VgpuHandle,
    /// Where the vGPU will go.
    pub placement: Placement,
    /// When it starts.
    pub start: Start,
}

/// What `destroy` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Destroyed {
    /// The handle.
    pub id: VgpuHandle,
    /// What was running, if anything.
    pub stopped: Option<Running>,
    /// Whether a definition was removed.
    pub undefined: bool,
}

/// One step of [`Manager::restore`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreStep {
    /// What the step does: `sriov`, `bind`, `mdev`, `vf-vgpu`.
    pub action: &'static str,
    /// The device.
    pub device: String,
    /// `created`, `unchanged`, or `failed`.
    pub outcome: &'static str,
    /// The error, when it failed.
    pub error: Option<String>,
}

/// What [`Manager::restore`] did, step by step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// Every step, in order.
    pub steps: Vec<RestoreStep>,
}

impl RestoreReport {
    /// How many steps failed.
    pub fn failed(&self) -> usize {
        self.steps.iter().filter(|s| s.outcome == "failed").count()
    }

    fn push(&mut self, action: &'static str, device: String, result: Result<bool>) {
        let (outcome, error) = match result {
            Ok(true) => ("created", None),
            Ok(false) => ("unchanged", None),
            Err(err) => ("failed", Some(error_chain(&err))),
        };
        self.steps.push(RestoreStep {
            action,
            device,
            outcome,
            error,
        });
    }
}

fn gpu_of<'a>(gpus: &'a [Gpu], name: &str, paths: &HostPaths) -> Result<&'a Gpu> {
    let inventory = crate::inventory::Inventory {
        gpus: gpus.to_vec(),
        warnings: Vec::new(),
    };
    let address = inventory.gpu(name, paths)?.address;
    gpus.iter()
        .find(|g| g.address == address)
        .ok_or_else(|| Error::NoSuchDevice {
            name: name.to_owned(),
            path: paths.pci_devices(),
        })
}

impl Manager {
    /// A manager for the host at `paths`, recording `command` (the command line) in the audit
    /// log. Waits up to 60 s for the host lock.
    pub fn new(paths: &HostPaths, command: impl Into<String>) -> Self {
        Self {
            paths: paths.clone(),
            store: Store::new(paths),
            command: command.into(),
            lock_timeout: Duration::from_secs(60),
            sriov: SriovOptions::default(),
        }
    }

    /// Waits up to `timeout` for the host lock.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// Uses these SR-IOV options (timeout, force).
    pub fn with_sriov_options(mut self, options: SriovOptions) -> Self {
        self.sriov = options;
        self
    }

    /// The persistent store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs `f` under the host lock and records its outcome in the audit log.
    fn mutate<T>(&self, action: &str, device: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _lock = HostLock::acquire(&self.paths, self.lock_timeout)?;
        let audit = AuditLog::open(&self.paths)?;
        let result = f();
        let outcome = match &result {
            Ok(_) => "ok".to_owned(),
            Err(err) => error_chain(err),
        };
        if let Err(err) = audit.record(&AuditEntry::now(&self.command, action, device, outcome)) {
            // The change is made (or not) either way; say loudly that it went unrecorded.
            tracing::error!(
                action,
                device,
                "cannot write the audit log: {}",
                error_chain(&err)
            );
        }
        result
    }

    fn gpus(&self) -> Result<Vec<Gpu>> {
        Ok(discover(&self.paths)?.gpus)
    }

    /// Creates a vGPU of type `wanted` on GPU `gpu` (see [`lifecycle::create`]); with
    /// `define`, persists it first so that `restore` brings it back after a reboot.
    pub fn create(
        &self,
        gpu: &str,
        wanted: &str,
        uuid: Option<Uuid>,
        define: Option<Start>,
    ) -> Result<Created> {
        self.mutate("create", gpu, || {
            let gpus = self.gpus()?;
            let gpu = gpu_of(&gpus, gpu, &self.paths)?;
            let Some(start) = define else {
                return lifecycle::create(&self.paths, gpu, wanted, uuid);
            };
            let placement = lifecycle::place(&self.paths, gpu, wanted)?;
            let (id, _) = self.define_placement(gpu, &placement, uuid, start)?;
            match self.start_placement(&placement, id) {
                Ok(previous_driver) => Ok(Created { id, gpu: gpu.address, placement, previous_driver }),
                Err(err) => {
                    if let Err(undo) = self.undefine_handle(id) {
                        tracing::error!(%id, "cannot remove the definition after a failed create: {undo}");
                    }
                    Err(err)
                }
            }
        })
    }

    /// Persists a vGPU of type `wanted` on `gpu` without creating it.
    pub fn define(
        &self,
        gpu: &str,
        wanted: &str,
        uuid: Option<Uuid>,
        start: Start,
    ) -> Result<Defined> {
        self.mutate("define", gpu, || {
            let gpus = self.gpus()?;
            let gpu = gpu_of(&gpus, gpu, &self.paths)?;
            let placement = lifecycle::place(&self.paths, gpu, wanted)?;
            let (id, placement) = self.define_placement(gpu, &placement, uuid, start)?;
            Ok(Defined {
                id,
                placement,
                start,
            })
        })
    }

    fn define_placement(
        &self,
        gpu: &Gpu,
        placement: &Placement,
        uuid: Option<Uuid>,
        start: Start,
    ) -> Result<(VgpuHandle, Placement)> {
        match placement {
            Placement::Mdev { parent, type_id } => {
                let uuid = uuid.unwrap_or_else(Uuid::new_v4);
                if lifecycle::mdev_parent(&self.paths, uuid)?.is_some() {
                    return Err(Error::Invalid {
                        message: format!("mediated device {uuid} already exists"),
                    });
                }
                self.store.define_mdev(&MdevDefinition {
                    uuid,
                    parent: parent.to_string(),
                    mdev_type: type_id.clone(),
                    start,
                    attrs: Vec::new(),
                })?;
                Ok((VgpuHandle::Mdev(uuid), placement.clone()))
            }
            Placement::VendorVf { vf, type_id } => {
                self.reject_uuid(uuid, gpu)?;
                self.store.define_vf_vgpu(&VfVgpuDefinition {
                    vf: *vf,
                    gpu: gpu.address,
                    type_id: *type_id,
                    start,
                })?;
                Ok((VgpuHandle::Vf(*vf), placement.clone()))
            }
            Placement::PlainVf { vf } => {
                self.reject_uuid(uuid, gpu)?;
                // The driver it has now is the one to give it back to on destroy.
                let previous = PciDevice::new(&self.paths, *vf).driver()?;
                self.store.define_binding(&BindingDefinition {
                    address: *vf,
                    driver: "vfio-pci".to_owned(),
                    previous_driver: previous.filter(|d| d != "vfio-pci"),
                    start,
                })?;
                Ok((VgpuHandle::Vf(*vf), placement.clone()))
            }
        }
    }

    fn reject_uuid(&self, uuid: Option<Uuid>, gpu: &Gpu) -> Result<()> {
        match uuid {
            Some(_) => Err(Error::Invalid {
                message: format!(
                    "GPU {} makes VF-based vGPUs, named by their VF: a UUID does not apply",
                    gpu.address
                ),
            }),
            None => Ok(()),
        }
    }

    /// Carries out a placement; returns the driver a plain VF had before.
    fn start_placement(&self, placement: &Placement, id: VgpuHandle) -> Result<Option<String>> {
        match (placement, id) {
            (Placement::Mdev { parent, type_id }, VgpuHandle::Mdev(uuid)) => {
                lifecycle::create_mdev(&self.paths, *parent, type_id, uuid)?;
                Ok(None)
            }
            (Placement::VendorVf { vf, type_id }, _) => {
                lifecycle::set_vf_type(&self.paths, *vf, *type_id)?;
                Ok(None)
            }
            (Placement::PlainVf { vf }, _) => driver::bind(&self.paths, *vf, "vfio-pci"),
            (Placement::Mdev { .. }, VgpuHandle::Vf(_)) => Err(Error::Invalid {
                message: format!("{id} is not a mediated device"),
            }),
        }
    }

    fn undefine_handle(&self, id: VgpuHandle) -> Result<bool> {
        match id {
            VgpuHandle::Mdev(uuid) => self.store.undefine_mdev(uuid),
            VgpuHandle::Vf(vf) => {
                let vgpu = self.store.undefine_vf_vgpu(vf)?;
                let binding = self.store.undefine_binding(vf)?;
                Ok(vgpu || binding)
            }
        }
    }

    /// Removes the definition of `id` (the device keeps running). False when none existed.
    pub fn undefine(&self, id: VgpuHandle) -> Result<bool> {
        self.mutate("undefine", &id.to_string(), || self.undefine_handle(id))
    }

    /// Stops the running vGPU `id` and removes its definition: the inverse of
    /// `create --define`. Fails when `id` is neither running nor defined.
    pub fn destroy(&self, id: VgpuHandle) -> Result<Destroyed> {
        self.mutate("destroy", &id.to_string(), || {
            let stopped = match lifecycle::running(&self.paths, id)? {
                Some(_) => Some(self.stop_running(id)?),
                None => None,
            };
            let undefined = self.undefine_handle(id)?;
            if stopped.is_none() && !undefined {
                return Err(Error::NoSuchDevice {
                    name: id.to_string(),
                    path: self.paths.sys(),
                });
            }
            Ok(Destroyed {
                id,
                stopped,
                undefined,
            })
        })
    }

    fn stop_running(&self, id: VgpuHandle) -> Result<Running> {
        if let VgpuHandle::Vf(vf) = id {
            if let Some(binding) = self.store.binding(vf)? {
                if lifecycle::running(&self.paths, id)? == Some(Running::PlainVf) {
                    driver::restore(&self.paths, vf, binding.previous_driver.as_deref())?;
                    return Ok(Running::PlainVf);
                }
            }
        }
        lifecycle::destroy(&self.paths, id)
    }

    /// Stops the running vGPU `id`, keeping its definition.
    pub fn stop(&self, id: VgpuHandle) -> Result<Running> {
        self.mutate("stop", &id.to_string(), || self.stop_running(id))
    }

    /// Starts the defined vGPU `id`.
    pub fn start(&self, id: VgpuHandle) -> Result<()> {
        self.mutate("start", &id.to_string(), || {
            if lifecycle::running(&self.paths, id)?.is_some() {
                return Err(Error::Invalid {
                    message: format!("{id} is already running"),
                });
            }
            match id {
                VgpuHandle::Mdev(uuid) => match self.store.mdev(uuid)? {
                    Some(def) => self.start_mdev(&def),
                    None => Err(self.not_defined(id)),
                },
                VgpuHandle::Vf(vf) => {
                    if let Some(def) = self.store.vf_vgpu(vf)? {
                        return lifecycle::set_vf_type(&self.paths, vf, def.type_id);
                    }
                    if let Some(def) = self.store.binding(vf)? {
                        return driver::bind(&self.paths, vf, &def.driver).map(|_| ());
                    }
                    Err(self.not_defined(id))
                }
            }
        })
    }

    fn not_defined(&self, id: VgpuHandle) -> Error {
        Error::Invalid {
            message: format!("{id} is not defined (see vgpuctl define)"),
        }
    }

    /// Creates a defined mediated device and writes its attributes in order; removes it again
    /// when an attribute is refused.
    fn start_mdev(&self, def: &MdevDefinition) -> Result<()> {
        let parent: PciAddress = def.parent.parse().map_err(|_| Error::Invalid {
            message: format!(
                "mediated device {} has parent {:?}, which is not a PCI device",
                def.uuid, def.parent
            ),
        })?;
        lifecycle::create_mdev(&self.paths, parent, &def.mdev_type, def.uuid)?;
        let dir = self.paths.pci_device(&parent).join(def.uuid.to_string());
        for (name, value) in &def.attrs {
            let attempt = crate::driver::validate_driver_name(name)
                .and_then(|()| write_attr(&dir.join(name), value));
            if let Err(err) = attempt {
                if let Err(undo) = lifecycle::remove_mdev(&self.paths, def.uuid) {
                    tracing::error!(uuid = %def.uuid, "cannot remove after a refused attribute: {undo}");
                }
                return Err(err);
            }
        }
        Ok(())
    }

    /// Sets the VF count of `gpu` (see [`sriov::set_vf_count`]); with `define`, persists it
    /// (and `autoprobe`) first.
    pub fn set_vfs(
        &self,
        gpu: &str,
        count: u32,
        autoprobe: Option<bool>,
        define: bool,
    ) -> Result<SriovChange> {
        self.mutate("sriov", gpu, || {
            let gpus = self.gpus()?;
            let pf = gpu_of(&gpus, gpu, &self.paths)?.address;
            let previous = self.store.sriov_of(pf)?;
            if define {
                self.store.define_sriov(&SriovDefinition {
                    pf,
                    num_vfs: count,
                    drivers_autoprobe: autoprobe,
                })?;
            }
            let result = (|| {
                if let Some(on) = autoprobe {
                    sriov::set_autoprobe(&self.paths, pf, on)?;
                }
                sriov::set_vf_count(&self.paths, pf, count, self.sriov)
            })();
            if result.is_err() && define {
                let undo = match &previous {
                    Some(def) => self.store.define_sriov(def),
                    None => self.store.undefine_sriov(pf).map(|_| ()),
                };
                if let Err(undo) = undo {
                    tracing::error!(%pf, "cannot put back the SR-IOV definition: {undo}");
                }
            }
            result
        })
    }

    /// Binds `address` to `driver`; with `define`, persists the binding.
    pub fn bind(
        &self,
        address: PciAddress,
        driver_name: &str,
        define: Option<Start>,
    ) -> Result<Option<String>> {
        self.mutate("bind", &address.to_string(), || {
            driver::validate_driver_name(driver_name)?;
            let current = PciDevice::new(&self.paths, address).driver()?;
            if let Some(start) = define {
                self.store.define_binding(&BindingDefinition {
                    address,
                    driver: driver_name.to_owned(),
                    previous_driver: current.clone().filter(|d| d != driver_name),
                    start,
                })?;
            }
            let result = driver::bind(&self.paths, address, driver_name);
            if result.is_err() && define.is_some() {
                if let Err(undo) = self.store.undefine_binding(address) {
                    tracing::error!(%address, "cannot remove the binding definition: {undo}");
                }
            }
            result
        })
    }

    /// Returns `address` to the driver it had before `bind` (when recorded) or to its default
    /// driver, and removes the binding definition.
    pub fn unbind(&self, address: PciAddress) -> Result<Option<String>> {
        self.mutate("unbind", &address.to_string(), || {
            let now = match self.store.binding(address)? {
                Some(def) => {
                    driver::restore(&self.paths, address, def.previous_driver.as_deref())?;
                    PciDevice::new(&self.paths, address).driver()?
                }
                None => driver::reprobe(&self.paths, address)?,
            };
            self.store.undefine_binding(address)?;
            Ok(now)
        })
    }

    /// Brings the host back to its definitions after a reboot or a crash: VF counts first, then
    /// driver bindings, then auto-start mediated devices, then NVIDIA VF types. Idempotent:
    /// what is already in place is left alone. Carries on past failures and reports each step.
    pub fn restore(&self) -> Result<RestoreReport> {
        self.mutate("restore", "host", || {
            let mut report = RestoreReport::default();
            let (sriov_defs, errors) = self.store.sriov_lenient();
            for err in errors {
                report.push("sriov", "definition".to_owned(), Err(err));
            }
            for def in sriov_defs {
                let result = self.restore_sriov(&def);
                report.push("sriov", def.pf.to_string(), result);
            }
            let (bindings, errors) = self.store.bindings_lenient();
            for err in errors {
                report.push("bind", "definition".to_owned(), Err(err));
            }
            for def in bindings.iter().filter(|d| d.start == Start::Auto) {
                let result = driver::bind(&self.paths, def.address, &def.driver)
                    .map(|previous| previous.as_deref() != Some(def.driver.as_str()));
                report.push("bind", def.address.to_string(), result);
            }
            let (mdevs, errors) = self.store.mdevs_lenient();
            for err in errors {
                report.push("mdev", "definition".to_owned(), Err(err));
            }
            for def in mdevs.iter().filter(|d| d.start == Start::Auto) {
                let result = match lifecycle::mdev_parent(&self.paths, def.uuid) {
                    Ok(Some(_)) => Ok(false),
                    Ok(None) => self.start_mdev(def).map(|()| true),
                    Err(err) => Err(err),
                };
                report.push("mdev", format!("{}/{}", def.parent, def.uuid), result);
            }
            let (vf_vgpus, errors) = self.store.vf_vgpus_lenient();
            for err in errors {
                report.push("vf-vgpu", "definition".to_owned(), Err(err));
            }
            for def in vf_vgpus.iter().filter(|d| d.start == Start::Auto) {
                let result = match lifecycle::running(&self.paths, VgpuHandle::Vf(def.vf)) {
                    Ok(Some(Running::VendorVf { type_id })) if type_id == def.type_id => Ok(false),
                    Ok(Some(other)) => Err(Error::Invalid {
                        message: format!(
                            "{} holds {other:?}, not the defined type {}",
                            def.vf, def.type_id
                        ),
                    }),
                    Ok(None) => {
                        lifecycle::set_vf_type(&self.paths, def.vf, def.type_id).map(|()| true)
                    }
                    Err(err) => Err(err),
                };
                report.push("vf-vgpu", def.vf.to_string(), result);
            }
            Ok(report)
        })
    }

    fn restore_sriov(&self, def: &SriovDefinition) -> Result<bool> {
        let device = PciDevice::new(&self.paths, def.pf);
        let current = device.sriov()?.map(|s| s.num_vfs);
        if current == Some(def.num_vfs) {
            return Ok(false);
        }
        if let Some(on) = def.drivers_autoprobe {
            sriov::set_autoprobe(&self.paths, def.pf, on)?;
        }
        sriov::set_vf_count(&self.paths, def.pf, def.num_vfs, self.sriov)?;
        Ok(true)
    }
}
