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
}

/// The audit log of one command: a record when it starts, one per change it makes, and one
/// with its outcome.
struct Audit<'a> {
    log: AuditLog,
    command: &'a str,
}

impl Audit<'_> {
    fn record(&self, action: &str, device: &str, outcome: &str) {
        if let Err(err) = self
            .log
            .record(&AuditEntry::now(self.command, action, device, outcome))
        {
            // The change is made (or not) either way; say loudly that it went unrecorded.
            tracing::error!(
                action,
                device,
                "cannot write the audit log: {}",
                error_chain(&err)
            );
        }
    }

    fn result<T>(&self, action: &str, device: &str, result: &Result<T>) {
        match result {
            Ok(_) => self.record(action, device, "ok"),
            Err(err) => self.record(action, device, &error_chain(err)),
        }
    }
}

/// Whether `address` is a GPU function (display or accelerator class) or a VF of one.
fn is_gpu_function(paths: &HostPaths, address: PciAddress) -> Result<bool> {
    let device = PciDevice::new(paths, address);
    let function = match device.physfn()? {
        Some(pf) => PciDevice::new(paths, pf),
        None => device,
    };
    Ok(function
        .class()?
        .is_some_and(|class| matches!(class >> 16, 0x03 | 0x12)))
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

    /// Runs `f` under the host lock, recording in the audit log that it starts, what it
    /// changes (through the [`Audit`] it is given), and how it ends.
    fn mutate<T>(
        &self,
        action: &str,
        device: &str,
        f: impl FnOnce(&Audit<'_>) -> Result<T>,
    ) -> Result<T> {
        let _lock = HostLock::acquire(&self.paths, self.lock_timeout)?;
        let audit = Audit {
            log: AuditLog::open(&self.paths)?,
            command: &self.command,
        };
        audit.record(action, device, "started");
        let result = f(&audit);
        audit.result(action, device, &result);
        result
    }

    /// VFs of `gpu` that definitions hold for vGPUs that are not running: new vGPUs must not
    /// take them, or `restore` could not bring the defined ones back.
    fn reserved_vfs(&self, gpu: &Gpu) -> Result<Vec<PciAddress>> {
        let mut reserved: Vec<PciAddress> = self.store.vf_vgpus()?.iter().map(|d| d.vf).collect();
        reserved.extend(self.store.bindings()?.iter().map(|d| d.address));
        for def in self.store.mdevs()? {
            if let Ok(parent) = def.parent.parse::<PciAddress>() {
                if parent != gpu.address {
                    reserved.push(parent);
                }
            }
        }
        reserved.retain(|vf| gpu.vfs.iter().any(|v| v.address == *vf));
        Ok(reserved)
    }

    fn placement(&self, gpu: &Gpu, wanted: &str) -> Result<Placement> {
        let reserved = self.reserved_vfs(gpu)?;
        lifecycle::place_excluding(&self.paths, gpu, wanted, &reserved)
    }

    /// Creates a vGPU of type `wanted` on GPU `gpu` (see [`lifecycle::create`]); with
    /// `define`, persists it first so that `restore` brings it back after a reboot. Never
    /// replaces an existing definition.
    pub fn create(
        &self,
        gpu: &str,
        wanted: &str,
        uuid: Option<Uuid>,
        define: Option<Start>,
    ) -> Result<Created> {
        self.mutate("create", gpu, |audit| {
            let inventory = discover(&self.paths)?;
            let gpu = inventory.gpu(gpu, &self.paths)?;
            let placement = self.placement(gpu, wanted)?;
            let id = self.handle_for(gpu, &placement, uuid)?;
            if let Some(start) = define {
                self.define_placement(gpu, &placement, id, start)?;
                audit.record("define", &id.to_string(), "ok");
            }
            let started = self.start_placement(&placement, id);
            audit.result("start", &id.to_string(), &started);
            match started {
                Ok(previous_driver) => Ok(Created { id, gpu: gpu.address, placement, previous_driver }),
                Err(err) => {
                    if define.is_some() {
                        // The definition was written by this command a moment ago.
                        let undone = self.undefine_handle(id);
                        audit.result("undefine", &id.to_string(), &undone);
                        if let Err(undo) = undone {
                            tracing::error!(%id, "cannot remove the definition after a failed create: {undo}");
                        }
                    }
                    Err(err)
                }
            }
        })
    }

    /// Persists a vGPU of type `wanted` on `gpu` without creating it. Never replaces an
    /// existing definition.
    pub fn define(
        &self,
        gpu: &str,
        wanted: &str,
        uuid: Option<Uuid>,
        start: Start,
    ) -> Result<Defined> {
        self.mutate("define", gpu, |audit| {
            let inventory = discover(&self.paths)?;
            let gpu = inventory.gpu(gpu, &self.paths)?;
            let placement = self.placement(gpu, wanted)?;
            let id = self.handle_for(gpu, &placement, uuid)?;
            self.define_placement(gpu, &placement, id, start)?;
            audit.record("define", &id.to_string(), "ok");
            Ok(Defined {
                id,
                placement,
                start,
            })
        })
    }

    /// The handle a vGPU at `placement` will have: the UUID given (or a new one) for a
    /// mediated device, the VF's address otherwise (where a UUID does not apply).
    fn handle_for(
        &self,
        gpu: &Gpu,
        placement: &Placement,
        uuid: Option<Uuid>,
    ) -> Result<VgpuHandle> {
        match (placement, uuid) {
            (Placement::Mdev { .. }, uuid) => {
                Ok(VgpuHandle::Mdev(uuid.unwrap_or_else(Uuid::new_v4)))
            }
            (Placement::VendorVf { vf, .. } | Placement::PlainVf { vf }, None) => {
                Ok(VgpuHandle::Vf(*vf))
            }
            (_, Some(_)) => Err(self.uuid_does_not_apply(gpu)),
        }
    }

    fn uuid_does_not_apply(&self, gpu: &Gpu) -> Error {
        Error::Invalid {
            message: format!(
                "GPU {} makes VF-based vGPUs, named by their VF: a UUID does not apply",
                gpu.address
            ),
        }
    }

    fn already_defined(&self, id: VgpuHandle) -> Result<bool> {
        Ok(match id {
            VgpuHandle::Mdev(uuid) => self.store.mdev(uuid)?.is_some(),
            VgpuHandle::Vf(vf) => {
                self.store.vf_vgpu(vf)?.is_some() || self.store.binding(vf)?.is_some()
            }
        })
    }

    fn define_placement(
        &self,
        gpu: &Gpu,
        placement: &Placement,
        id: VgpuHandle,
        start: Start,
    ) -> Result<()> {
        if self.already_defined(id)? {
            return Err(Error::Invalid {
                message: format!("{id} is already defined: undefine it first"),
            });
        }
        match (placement, id) {
            (Placement::Mdev { parent, type_id }, VgpuHandle::Mdev(uuid)) => {
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
                })
            }
            (Placement::VendorVf { vf, type_id }, _) => {
                self.store.define_vf_vgpu(&VfVgpuDefinition {
                    vf: *vf,
                    gpu: gpu.address,
                    type_id: *type_id,
                    start,
                })
            }
            (Placement::PlainVf { vf }, _) => {
                // The driver it has now is the one to give it back to on destroy.
                let previous = PciDevice::new(&self.paths, *vf).driver()?;
                self.store.define_binding(&BindingDefinition {
                    address: *vf,
                    driver: "vfio-pci".to_owned(),
                    previous_driver: previous.filter(|d| !driver::is_passthrough_driver(d)),
                    start,
                })
            }
            (Placement::Mdev { .. }, VgpuHandle::Vf(_)) => Err(Error::Invalid {
                message: format!("{id} is not a mediated device"),
            }),
        }
    }

    /// Carries out a placement under the handle chosen for it; returns the driver a plain VF
    /// had before.
    fn start_placement(&self, placement: &Placement, id: VgpuHandle) -> Result<Option<String>> {
        let uuid = match id {
            VgpuHandle::Mdev(uuid) => Some(uuid),
            VgpuHandle::Vf(_) => None,
        };
        lifecycle::realize(&self.paths, placement, uuid).map(|(_, previous)| previous)
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
        self.mutate("undefine", &id.to_string(), |_| self.undefine_handle(id))
    }

    /// Stops the running vGPU `id` and removes its definition: the inverse of
    /// `create --define`. Fails when `id` is neither running nor defined.
    pub fn destroy(&self, id: VgpuHandle) -> Result<Destroyed> {
        self.mutate("destroy", &id.to_string(), |audit| {
            let stopped = match lifecycle::running(&self.paths, id)? {
                Some(_) => {
                    let stopped = self.stop_running(id);
                    audit.result("stop", &id.to_string(), &stopped);
                    Some(stopped?)
                }
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
            if lifecycle::running(&self.paths, id)? == Some(Running::PlainVf) {
                let fallback = self.store.binding(vf)?.map(|b| b.previous_driver);
                lifecycle::release_plain_vf(
                    &self.paths,
                    vf,
                    fallback.as_ref().map(|d| d.as_deref()),
                )?;
                return Ok(Running::PlainVf);
            }
        }
        lifecycle::destroy(&self.paths, id)
    }

    /// Stops the running vGPU `id`, keeping its definition.
    pub fn stop(&self, id: VgpuHandle) -> Result<Running> {
        self.mutate("stop", &id.to_string(), |_| self.stop_running(id))
    }

    /// Starts the defined vGPU `id`.
    pub fn start(&self, id: VgpuHandle) -> Result<()> {
        self.mutate("start", &id.to_string(), |_| {
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
                        return self.apply_binding(&def).map(|_| ());
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

    /// Binds a defined binding, recording the driver it had; true when something changed.
    fn apply_binding(&self, def: &BindingDefinition) -> Result<bool> {
        let previous = driver::bind(&self.paths, def.address, &def.driver)?;
        if previous.as_deref() == Some(def.driver.as_str()) {
            return Ok(false);
        }
        driver::remember_previous(&self.paths, def.address, previous.as_deref())?;
        Ok(true)
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
            let attempt = driver::validate_driver_name(name)
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
    /// (and `autoprobe`) first. On failure the definition and autoprobe are put back.
    pub fn set_vfs(
        &self,
        gpu: &str,
        count: u32,
        autoprobe: Option<bool>,
        define: bool,
    ) -> Result<SriovChange> {
        self.mutate("sriov", gpu, |audit| {
            let inventory = discover(&self.paths)?;
            let gpu = inventory.gpu(gpu, &self.paths)?;
            let pf = gpu.address;
            let previous_definition = self.store.sriov_of(pf)?;
            let previous_autoprobe = gpu.sriov.as_ref().and_then(|s| s.drivers_autoprobe);
            if define {
                self.store.define_sriov(&SriovDefinition {
                    pf,
                    num_vfs: count,
                    drivers_autoprobe: autoprobe,
                })?;
                audit.record("define-sriov", &pf.to_string(), "ok");
            }
            let result = (|| {
                if let Some(on) = autoprobe {
                    sriov::set_autoprobe(&self.paths, pf, on)?;
                }
                sriov::set_vf_count(&self.paths, pf, count, self.sriov)
            })();
            if result.is_err() {
                if let (Some(_), Some(was)) = (autoprobe, previous_autoprobe) {
                    let undone = sriov::set_autoprobe(&self.paths, pf, was);
                    audit.result("undo-autoprobe", &pf.to_string(), &undone);
                }
                if define {
                    let undone = match &previous_definition {
                        Some(def) => self.store.define_sriov(def),
                        None => self.store.undefine_sriov(pf).map(|_| ()),
                    };
                    audit.result("undo-define-sriov", &pf.to_string(), &undone);
                }
            }
            result
        })
    }

    /// Binds `address` to `driver`; with `define`, persists the binding. Only GPU functions
    /// and their VFs unless `force`.
    pub fn bind(
        &self,
        address: PciAddress,
        driver_name: &str,
        define: Option<Start>,
        force: bool,
    ) -> Result<Option<String>> {
        self.mutate("bind", &address.to_string(), |_| {
            driver::validate_driver_name(driver_name)?;
            let device = PciDevice::new(&self.paths, address);
            if !device.exists() {
                return Err(Error::NoSuchDevice {
                    name: address.to_string(),
                    path: self.paths.pci_devices(),
                });
            }
            if !force && !is_gpu_function(&self.paths, address)? {
                return Err(Error::Invalid {
                    message: format!(
                        "{address} is not a GPU or a VF of one (use force to bind it anyway)"
                    ),
                });
            }
            let current = device.driver()?;
            let def = BindingDefinition {
                address,
                driver: driver_name.to_owned(),
                previous_driver: current.filter(|d| d != driver_name),
                start: define.unwrap_or(Start::Manual),
            };
            if define.is_some() {
                if self.store.binding(address)?.is_some() {
                    return Err(Error::Invalid {
                        message: format!("{address} already has a binding defined"),
                    });
                }
                self.store.define_binding(&def)?;
            }
            let result = self
                .apply_binding(&def)
                .map(|_| def.previous_driver.clone());
            if result.is_err() && define.is_some() {
                if let Err(undo) = self.store.undefine_binding(address) {
                    tracing::error!(%address, "cannot remove the binding definition: {undo}");
                }
            }
            result
        })
    }

    /// Returns `address` to the driver it had before `vgpuctl bind` and removes the binding
    /// definition. A device `vgpuctl` did not bind is refused unless `force` (then it goes to
    /// its default driver).
    pub fn unbind(&self, address: PciAddress, force: bool) -> Result<Option<String>> {
        self.mutate("unbind", &address.to_string(), |_| {
            let recorded = driver::recalled_previous(&self.paths, address)?;
            let defined = self.store.binding(address)?.map(|b| b.previous_driver);
            let previous = match (recorded, defined) {
                (Some(previous), _) | (None, Some(previous)) => Some(previous),
                (None, None) => None,
            };
            match previous {
                Some(previous) => driver::restore(&self.paths, address, previous.as_deref())?,
                None if force => {
                    driver::reprobe(&self.paths, address)?;
                }
                None => {
                    return Err(Error::Invalid {
                        message: format!(
                            "{address} was not bound by vgpuctl (use force to reprobe it anyway)"
                        ),
                    });
                }
            }
            driver::forget_previous(&self.paths, address)?;
            self.store.undefine_binding(address)?;
            PciDevice::new(&self.paths, address).driver()
        })
    }

    /// Brings the host back to its definitions after a reboot or a crash: VF counts first, then
    /// driver bindings, then auto-start mediated devices, then NVIDIA VF types. Idempotent:
    /// what is already in place is left alone. Carries on past failures and reports (and
    /// audits) each step; fails as a whole when any step failed.
    pub fn restore(&self) -> Result<RestoreReport> {
        let mut report = RestoreReport::default();
        let outcome = self.mutate("restore", "host", |audit| {
            let mut push = |action: &'static str, device: String, result: Result<bool>| {
                let (outcome, error) = match &result {
                    Ok(true) => ("created", None),
                    Ok(false) => ("unchanged", None),
                    Err(err) => ("failed", Some(error_chain(err))),
                };
                if outcome != "unchanged" {
                    audit.record(action, &device, error.as_deref().unwrap_or("ok"));
                }
                report.steps.push(RestoreStep {
                    action,
                    device,
                    outcome,
                    error,
                });
            };
            let (sriov_defs, errors) = self.store.sriov_lenient();
            for err in errors {
                push("sriov", "definition".to_owned(), Err(err));
            }
            for def in sriov_defs {
                push("sriov", def.pf.to_string(), self.restore_sriov(&def));
            }
            let (bindings, errors) = self.store.bindings_lenient();
            for err in errors {
                push("bind", "definition".to_owned(), Err(err));
            }
            for def in bindings.iter().filter(|d| d.start == Start::Auto) {
                push("bind", def.address.to_string(), self.apply_binding(def));
            }
            let (mdevs, errors) = self.store.mdevs_lenient();
            for err in errors {
                push("mdev", "definition".to_owned(), Err(err));
            }
            for def in mdevs.iter().filter(|d| d.start == Start::Auto) {
                let result = match lifecycle::mdev_parent(&self.paths, def.uuid) {
                    Ok(Some(_)) => Ok(false),
                    Ok(None) => self.start_mdev(def).map(|()| true),
                    Err(err) => Err(err),
                };
                push("mdev", format!("{}/{}", def.parent, def.uuid), result);
            }
            let (vf_vgpus, errors) = self.store.vf_vgpus_lenient();
            for err in errors {
                push("vf-vgpu", "definition".to_owned(), Err(err));
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
                push("vf-vgpu", def.vf.to_string(), result);
            }
            let failed = report.failed();
            if failed > 0 {
                return Err(Error::Invalid {
                    message: format!("{failed} restore step(s) failed"),
                });
            }
            Ok(())
        });
        match outcome {
            Ok(()) => Ok(report),
            // A failed step is in the report; only a failure to run at all is an error here.
            Err(_) if report.failed() > 0 => Ok(report),
            Err(err) => Err(err),
        }
    }

    fn restore_sriov(&self, def: &SriovDefinition) -> Result<bool> {
        let device = PciDevice::new(&self.paths, def.pf);
        let current = device.sriov()?.map(|s| s.num_vfs);
        // An NVIDIA PF left on pci-pf-stub by an interrupted sequence needs finishing even
        // when its count is already right.
        let stubbed = device.driver()?.as_deref() == Some("pci-pf-stub");
        if current == Some(def.num_vfs) && !stubbed {
            return Ok(false);
        }
        if let Some(on) = def.drivers_autoprobe {
            sriov::set_autoprobe(&self.paths, def.pf, on)?;
        }
        sriov::set_vf_count(&self.paths, def.pf, def.num_vfs, self.sriov)?;
        Ok(true)
    }
}
