//! The one path every change to the host takes.
//!
//! A [`Session`] holds the host lock and the audit log for one command, and ends with
//! [`Session::finish`], which waits for udev; its `Drop` never waits. Each change runs as an
//! [`Operation`]: every step it takes (a definition written, a vGPU made, a VF count or a
//! driver changed) is audited and pushed on the operation's undo list; when the operation
//! fails, or its thread unwinds, the steps are undone newest first, each undo audited too.
//! Definitions are honoured here as well: [`Operation::reservations`] says what a GPU holds
//! for defined vGPUs that are not running, and placement never gives that away.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use uuid::Uuid;

mod mig;
mod quota;
mod settings;
mod undo;

use undo::Undo;

use crate::backend::{self, NewVgpu, Placement, Running};
use crate::error::{Error, Result, StateError};
use crate::host::driver;
use crate::host::driver::GiveBack;
use crate::host::durable;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sriov::{self, SriovChange, SriovOptions};
use crate::host::uevent::wait::Settle;
use crate::model::pci::PciAddress;
use crate::model::{Gpu, VgpuHandle};
use crate::nvml::{NvmlCell, NvmlSource};
use crate::state::audit::{AuditEntry, AuditLog};
use crate::state::lock::HostLock;
use crate::state::store::{
    BindingDefinition, MdevDefinition, PLACEMENT_ATTR, SriovDefinition, Store, VfVgpuDefinition,
};

/// What libvirt says about which domains reference which devices, as the caller found out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DomainReferences {
    /// This host has no libvirt: no domain can reference a device. The default for a
    /// library that is not told otherwise.
    #[default]
    NoLibvirt,
    /// libvirt answered: the domains that reference each device, live or in their
    /// configuration; a device missing here is referenced by none.
    Known(BTreeMap<VgpuHandle, Vec<String>>),
    /// libvirt is there but did not answer: which domains reference what is unknown.
    Unanswered {
        /// The connection URI tried.
        uri: String,
        /// Why it did not answer.
        reason: String,
    },
}

/// The host lock and the audit log of one command.
#[derive(Debug)]
pub(crate) struct Session {
    paths: HostPaths,
    store: Store,
    audit: AuditLog,
    command: String,
    sriov: SriovOptions,
    force: bool,
    /// How long a write the kernel holds while a device is in use is waited for.
    release_timeout: Duration,
    /// Where udev runs: what the session's changes made udev do, waited for when it ends.
    settle: std::sync::Mutex<Option<Settle>>,
    /// NVML, loaded when a step needs it.
    nvml: NvmlCell,
    references: DomainReferences,
    /// Always `Some` until the session ends.
    lock: Option<HostLock>,
}

/// How a session waits, whether it forces, and where NVML comes from.
#[derive(Debug, Clone)]
pub(crate) struct SessionOptions {
    /// How long to wait for the host lock.
    pub(crate) lock_timeout: Duration,
    /// How VF counts change.
    pub(crate) sriov: SriovOptions,
    /// Whether devices held open are taken anyway.
    pub(crate) force: bool,
    /// How long a write the kernel holds while a device is in use is waited for.
    pub(crate) release_timeout: Duration,
    /// Where NVML is loaded from when a step needs it.
    pub(crate) nvml: NvmlSource,
    /// Which libvirt domains reference which devices, as the caller found out.
    pub(crate) references: DomainReferences,
}

impl Session {
    /// Takes the host lock (waiting up to `options.lock_timeout`) and opens the audit log.
    pub(crate) fn open(paths: &HostPaths, command: &str, options: SessionOptions) -> Result<Self> {
        let SessionOptions {
            lock_timeout,
            sriov,
            force,
            release_timeout,
            nvml,
            references,
        } = options;
        let lock = HostLock::acquire(paths, lock_timeout)?;
        Ok(Self {
            paths: paths.clone(),
            store: Store::new(paths),
            audit: AuditLog::open(paths)?,
            command: command.to_owned(),
            sriov,
            force,
            release_timeout,
            settle: std::sync::Mutex::new(None),
            nvml: NvmlCell::new(paths, nvml),
            references,
            lock: Some(lock),
        })
    }

    /// Before a change that adds, binds or removes devices: makes sure the session hears what
    /// the kernel and udev say about it from now on (where udev runs), so that the session
    /// can wait, when it ends, until udev has processed it.
    fn settle_from_now(&self) {
        let mut settle = self
            .settle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match settle.as_mut() {
            Some(settle) => settle.collect(),
            None => *settle = Settle::begin(&self.paths),
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn paths(&self) -> &HostPaths {
        &self.paths
    }

    /// Records one line in the audit log. A change is made (or not) either way, so a log that
    /// cannot be written is reported loudly rather than failing the change.
    pub(crate) fn record(&self, action: &str, device: &str, outcome: &str) {
        let entry = AuditEntry::now(&self.command, action, device, outcome);
        if let Err(err) = self.audit.record(&entry) {
            tracing::error!(
                action,
                device,
                "cannot write the audit log: {}",
                err.chain()
            );
        }
    }

    /// Records `result` of `action` on `device`: `ok` or the error chain.
    pub(crate) fn record_result<T>(&self, action: &str, device: &str, result: &Result<T>) {
        match result {
            Ok(_) => self.record(action, device, "ok"),
            Err(err) => self.record(action, device, &err.chain()),
        }
    }

    /// Runs one audited operation: a `started` record, `f` with an undo guard, the outcome.
    pub(crate) fn run<T>(
        &self,
        action: &str,
        device: &str,
        f: impl FnOnce(&mut Operation<'_>) -> Result<T>,
    ) -> Result<T> {
        self.record(action, device, "started");
        let result = self.attempt(f);
        self.record_result(action, device, &result);
        result
    }

    /// Runs `f`; when it fails, undoes every step it took through the operation, newest first.
    pub(crate) fn attempt<T>(&self, f: impl FnOnce(&mut Operation<'_>) -> Result<T>) -> Result<T> {
        super::interrupt::check()?;
        let mut op = Operation {
            session: self,
            undo: Vec::new(),
        };
        let result = f(&mut op);
        match &result {
            Ok(_) => op.undo.clear(),
            Err(_) => op.rollback(),
        }
        result
    }
}

impl Session {
    /// Ends the session: releases the host lock, then waits (up to the release timeout) until
    /// udev has processed every event the session's changes caused, so that libvirt's node
    /// devices and the `/dev/vfio` nodes of what was made are there when the command returns.
    /// The lock goes first because udev finishes an event only once the programs its rules
    /// run have returned, and `contrib/udev/60-vgpu.rules` runs `vgpuctl restore --device`,
    /// which takes the lock. The change is made by then: a udev that does not finish in time
    /// is logged and audited, not undone, and not an error of the command. Every path of the
    /// manager that ends a session normally calls this; see the `Drop` for the others.
    #[tracing::instrument(level = "trace", skip_all)]
    pub(crate) fn finish(mut self) {
        drop(self.lock.take());
        if let Some(mut settle) = self.take_settle() {
            if let Err(err) = settle.wait(&self.paths, self.release_timeout) {
                let text = err.chain();
                tracing::warn!("{text}: libvirt may not list the new devices yet");
                self.record("udev-settle", "host", &text);
            }
        }
    }

    /// The wait for udev, once: `None` after [`Session::finish`] or where none was begun.
    fn take_settle(&mut self) -> Option<Settle> {
        self.settle
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// What [`Drop`] records when a session ends without [`Session::finish`] and udev was still
/// to be waited for.
const SETTLE_SKIPPED: &str = "not waited for: the session ended early";

impl Drop for Session {
    /// Reached without [`Session::finish`] only on an early return or while a thread unwinds:
    /// releases the host lock and does nothing that waits. A wait for udev still owed is
    /// skipped, logged and audited ([`SETTLE_SKIPPED`], with the devices udev had not finished
    /// with by then); the devices appear in libvirt's view when udev is done with them.
    fn drop(&mut self) {
        drop(self.lock.take());
        let Some(mut settle) = self.take_settle() else {
            return;
        };
        let pending = settle.unprocessed();
        let text = match pending.is_empty() {
            true => SETTLE_SKIPPED.to_owned(),
            false => format!(
                "{SETTLE_SKIPPED}; udev had not finished with {}",
                pending.join(", ")
            ),
        };
        tracing::warn!("{text}: libvirt may not list the new devices yet");
        self.record("udev-settle", "host", &text);
    }
}

/// One change in progress: the steps taken so far, undone unless it succeeds.
pub(crate) struct Operation<'s> {
    session: &'s Session,
    undo: Vec<Undo>,
}

impl Drop for Operation<'_> {
    /// A thread unwinding through an operation still leaves the host as it found it.
    fn drop(&mut self) {
        self.rollback();
    }
}

impl Operation<'_> {
    pub(crate) fn paths(&self) -> &HostPaths {
        &self.session.paths
    }

    /// How long a write the kernel holds while a device is in use (an unbind, a removal) is
    /// waited for before [`HostError::Timeout`](crate::host::HostError::Timeout).
    pub(crate) fn within(&self) -> Duration {
        self.session.release_timeout
    }

    pub(crate) fn store(&self) -> &Store {
        &self.session.store
    }

    /// NVML, loaded the first time a step asks for it.
    pub(crate) fn nvml(&self) -> &NvmlCell {
        &self.session.nvml
    }

    /// Audits one step and, when it succeeded, remembers how to undo it.
    fn step<T>(
        &mut self,
        action: &str,
        device: &str,
        result: Result<T>,
        undo: impl FnOnce(&T) -> Option<Undo>,
    ) -> Result<T> {
        self.session.record_result(action, device, &result);
        if let Ok(value) = &result {
            if let Some(undo) = undo(value) {
                self.undo.push(undo);
            }
        }
        // A stop asked for meanwhile: this step is done, no other starts, and the operation
        // fails, so that what it did is undone.
        let value = result?;
        super::interrupt::check()?;
        Ok(value)
    }

    /// Undoes the steps taken, newest first; a step that cannot be undone is audited and
    /// logged, and the rest are still tried.
    fn rollback(&mut self) {
        self.rollback_to(0);
    }

    /// How many steps have been taken: a point [`Operation::rollback_to`] can go back to.
    pub(crate) fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes, newest first, the steps taken since `savepoint`, as [`Operation::rollback`]
    /// does; the operation goes on from there.
    pub(crate) fn rollback_to(&mut self, savepoint: usize) {
        while self.undo.len() > savepoint {
            let Some(undo) = self.undo.pop() else {
                break;
            };
            let (action, device) = (undo.action(), undo.device());
            let result = self.undo_one(undo);
            self.session.record_result(action, &device, &result);
            if let Err(err) = result {
                tracing::error!(action, device, "cannot undo: {}", err.chain());
            }
        }
    }

    /// Writes a definition for a vGPU at `placement` named `id`; never replaces one.
    pub(crate) fn define(
        &mut self,
        gpu: &Gpu,
        placement: &Placement,
        id: VgpuHandle,
        start: crate::state::store::Start,
    ) -> Result<()> {
        self.write_definition(gpu, placement, id, start, (false, None))
    }

    /// [`Operation::define`], recording placement id `at` in mixed-size mode: a VF's
    /// definition keeps it, a mediated device's writes it to `nvidia/vgpu_params`.
    pub(crate) fn define_at(
        &mut self,
        gpu: &Gpu,
        placement: &Placement,
        id: VgpuHandle,
        start: crate::state::store::Start,
        at: Option<u32>,
    ) -> Result<()> {
        self.write_definition(gpu, placement, id, start, (false, at))
    }

    /// Writes a definition for the running vGPU `id` at `placement`; never replaces one.
    pub(crate) fn adopt(
        &mut self,
        gpu: &Gpu,
        placement: &Placement,
        id: VgpuHandle,
        start: crate::state::store::Start,
    ) -> Result<()> {
        self.write_definition(gpu, placement, id, start, (true, None))
    }

    /// Writes the definition; `running` says the vGPU runs already, `at` is its placement id.
    fn write_definition(
        &mut self,
        gpu: &Gpu,
        placement: &Placement,
        id: VgpuHandle,
        start: crate::state::store::Start,
        (running, at): (bool, Option<u32>),
    ) -> Result<()> {
        self.check_undefined(id)?;
        let store = self.session.store.clone();
        let device = id.to_string();
        if at.is_some() {
            store.check_size_mode_agrees(gpu.address, None, vec![device.clone()])?;
        }
        let (result, undo) = match (placement, id) {
            (Placement::Mdev { parent, type_id }, VgpuHandle::Mdev(uuid)) => {
                if !running && backend::running(self.paths(), id)?.is_some() {
                    return Err(Error::AlreadyExists {
                        what: crate::error::Object::Mdev,
                        id: device,
                    });
                }
                let def = MdevDefinition {
                    uuid,
                    parent: parent.to_string(),
                    mdev_type: type_id.clone(),
                    start,
                    attrs: at
                        .map(|id| {
                            (
                                PLACEMENT_ATTR.to_owned(),
                                crate::model::sizes::placement_param(id),
                            )
                        })
                        .into_iter()
                        .collect(),
                };
                (store.define_mdev(&def), Undo::MdevDefinition(uuid))
            }
            (Placement::VendorVf { vf, type_id }, _) => {
                let def = VfVgpuDefinition {
                    placement: at,
                    vf: *vf,
                    gpu: gpu.address,
                    type_id: *type_id,
                    type_name: gpu
                        .types
                        .iter()
                        .find(|t| t.id == type_id.to_string())
                        .and_then(|t| t.name.clone()),
                    start,
                };
                (store.define_vf_vgpu(&def), Undo::VfVgpuDefinition(*vf))
            }
            (Placement::PlainVf { vf }, _) => {
                // Its host driver is the one to give it back to on destroy: the one it has, or,
                // on vfio-pci or left without one, the one recorded when vgpu took it.
                let def = BindingDefinition {
                    address: *vf,
                    driver: "vfio-pci".to_owned(),
                    previous_driver: driver::host_driver(self.paths(), *vf)?,
                    start,
                };
                (store.define_binding(&def), Undo::BindingDefinition(*vf))
            }
            (Placement::Mdev { .. }, VgpuHandle::Vf(_)) => {
                return Err(Error::UuidNotApplicable {
                    device: placement.device(),
                });
            }
        };
        self.step("define", &device, result, |()| Some(undo))
    }

    /// Fails with [`Error::DefinitionExists`] when `id` is defined.
    pub(crate) fn check_undefined(&self, id: VgpuHandle) -> Result<()> {
        let store = self.store();
        let existing = match id {
            VgpuHandle::Mdev(uuid) => store.mdev(uuid)?.map(|d| store.mdev_path(&d)),
            VgpuHandle::Vf(vf) => match store.vf_vgpu(vf)? {
                Some(_) => Some(store.vf_vgpu_path(vf)),
                None => store.binding(vf)?.map(|_| store.binding_path(vf)),
            },
        };
        match existing {
            Some(path) => Err(Error::DefinitionExists {
                id: id.to_string(),
                path,
            }),
            None => Ok(()),
        }
    }

    /// Whether the session takes devices away whatever holds them.
    pub(crate) fn forced(&self) -> bool {
        self.session.force
    }

    /// What the caller said libvirt says about domains.
    pub(crate) fn domain_references(&self) -> &DomainReferences {
        &self.session.references
    }

    /// Writes a binding definition (the caller checked there is none).
    pub(crate) fn define_binding(&mut self, def: &BindingDefinition) -> Result<()> {
        let result = self.store().define_binding(def);
        let address = def.address;
        self.step("define", &address.to_string(), result, |()| {
            Some(Undo::BindingDefinition(address))
        })
    }

    /// Removes the mdev definition of `uuid`; false when there was none.
    pub(crate) fn undefine_mdev(&mut self, uuid: Uuid) -> Result<bool> {
        let result = self.store().undefine_mdev(uuid);
        self.undefined(&uuid.to_string(), result)
    }

    /// Removes the VF-vGPU definition of `vf`; false when there was none.
    pub(crate) fn undefine_vf_vgpu(&mut self, vf: PciAddress) -> Result<bool> {
        let result = self.store().undefine_vf_vgpu(vf);
        self.undefined(&vf.to_string(), result)
    }

    /// Removes the binding definition of `address`; false when there was none.
    pub(crate) fn undefine_binding(&mut self, address: PciAddress) -> Result<bool> {
        let result = self.store().undefine_binding(address);
        self.undefined(&address.to_string(), result)
    }

    /// Audits a removal that removed something (or failed); a removal of nothing is no step.
    fn undefined(&mut self, device: &str, result: Result<bool>) -> Result<bool> {
        if !matches!(result, Ok(false)) {
            self.session.record_result("undefine", device, &result);
        }
        result
    }

    /// Writes (or replaces) the SR-IOV definition of `pf`; undo puts back the one before.
    pub(crate) fn define_sriov(&mut self, def: &SriovDefinition) -> Result<()> {
        let previous = self.store().sriov_of(def.pf)?;
        let result = self.store().define_sriov(def);
        let pf = def.pf;
        self.step("define-sriov", &pf.to_string(), result, |()| {
            Some(Undo::SriovDefinition { pf, previous })
        })
    }

    /// Makes `vgpu`; returns, for a plain VF, the driver it had. The session waits for udev
    /// to process it when it ends ([`Session::finish`]).
    pub(crate) fn realize(&mut self, vgpu: &NewVgpu) -> Result<Option<String>> {
        self.session.settle_from_now();
        let id = vgpu.handle();
        let result = backend::realize(self.paths(), vgpu, self.within(), self.nvml());
        self.step("start", &id.to_string(), result, |_| Some(Undo::Vgpu(id)))
    }

    /// Creates a defined mediated device on its parent, then writes its attributes in order.
    #[tracing::instrument(level = "trace", skip_all)]
    pub(crate) fn start_mdev(&mut self, def: &MdevDefinition) -> Result<()> {
        let parent = def.parent.parse().map_err(|_| StateError::Definition {
            path: self.store().mdev_path(def),
            reason: format!("parent {:?} is not a PCI device", def.parent),
        })?;
        let vgpu = NewVgpu::Mdev {
            parent,
            type_id: def.mdev_type.clone(),
            uuid: def.uuid,
        };
        if crate::model::sizes::placement_of_attrs(&def.attrs).is_some() {
            // Its own placement goes with its attributes.
            self.ensure_mixed(parent)?;
            self.realize(&vgpu)?;
        } else {
            self.realize_placed(&vgpu)?;
        }
        self.write_mdev_attrs(def)
    }

    /// Writes the attributes of a defined mediated device, in order.
    fn write_mdev_attrs(&mut self, def: &MdevDefinition) -> Result<()> {
        let Some(parent) = backend::mdev::parent_of(self.paths(), def.uuid)? else {
            return Err(Error::NotFound {
                what: crate::error::Object::Mdev,
                id: def.uuid.to_string(),
                path: self.paths().mdev_devices(),
            });
        };
        let dir = self.paths().pci_device(&parent).join(def.uuid.to_string());
        for (name, value) in &def.attrs {
            if !crate::state::format::is_attr_name(name) {
                return Err(Error::bad_name(
                    name,
                    "an attribute name (a path of file names under the device)",
                ));
            }
            let result = crate::host::sysfs::write_attr(&dir.join(name), value);
            self.step("attr", &format!("{}/{name}", def.uuid), result, |()| None)?;
        }
        Ok(())
    }

    /// Stops the vGPU `id` (a plain VF goes back to the driver it had, or `fallback`).
    pub(crate) fn stop(&mut self, id: VgpuHandle, fallback: GiveBack<'_>) -> Result<Running> {
        let result = backend::destroy(self.paths(), id, fallback, self.within());
        self.step("stop", &id.to_string(), result, |_| None)
    }

    /// Sets `sriov_drivers_autoprobe` of `pf`; undo puts back what it was.
    pub(crate) fn set_autoprobe(&mut self, pf: PciAddress, on: bool) -> Result<()> {
        let was = PciDevice::new(self.paths(), pf)
            .sriov()?
            .and_then(|s| s.drivers_autoprobe);
        let result = sriov::set_autoprobe(self.paths(), pf, on);
        self.step("autoprobe", &pf.to_string(), result, |()| {
            was.filter(|w| *w != on)
                .map(|was| Undo::Autoprobe { pf, was })
        })
    }

    /// Sets the VF count of `pf`. VFs that hold a vGPU or a passthrough driver are not taken
    /// away unless the session's SR-IOV options say `force`.
    pub(crate) fn set_vf_count(&mut self, pf: PciAddress, count: u32) -> Result<SriovChange> {
        let options = self.session.sriov;
        let device = PciDevice::new(self.paths(), pf);
        if !(options.force || self.session.force) && device.exists() {
            let present = device.virtfns()?;
            if !present.is_empty() && present.len() != count as usize {
                for vf in present {
                    self.check_removable(VgpuHandle::Vf(vf))?;
                    if let Some(by) = backend::vf_holder(self.paths(), vf)? {
                        return Err(Error::InUse {
                            device: vf.to_string(),
                            by,
                        });
                    }
                }
            }
        }
        // A change takes every VF away first, with the mediated devices on them; unforced,
        // no hook record holds one (checked above).
        let forced = options.force || self.session.force;
        let mut gone = Vec::new();
        if forced && device.exists() {
            for vf in device.virtfns()? {
                gone.push(VgpuHandle::Vf(vf));
                let parent = crate::host::mdev::MdevParent::new(self.paths().pci_device(&vf));
                gone.extend(parent.devices()?.iter().map(|m| VgpuHandle::Mdev(m.uuid)));
            }
        }
        self.session.settle_from_now();
        let result = sriov::set_vf_count(self.paths(), pf, count, options);
        let change = self.step("sriov", &pf.to_string(), result, |change| {
            (change.before != change.enabled).then_some(Undo::VfCount {
                pf,
                before: change.before,
            })
        })?;
        // Forced past a hook record: no domain holds what went.
        if change.before != change.enabled {
            for id in gone {
                self.forget_destroyed(id)?;
            }
        }
        Ok(change)
    }

    /// Binds `address` to `driver`, recording the driver it had until reboot; returns that
    /// driver. Already bound there: nothing changes.
    pub(crate) fn bind(
        &mut self,
        address: PciAddress,
        driver_name: &str,
    ) -> Result<Option<String>> {
        let paths = self.session.paths.clone();
        let within = self.within();
        self.session.settle_from_now();
        let result = driver::take(&paths, address, driver_name, within);
        self.step("bind", &address.to_string(), result, |previous| {
            (previous.as_deref() != Some(driver_name)).then(|| Undo::Driver {
                address,
                previous: previous.clone(),
            })
        })
    }

    /// Binds `address`, which has no driver, to its host driver `host` and forgets the record
    /// of it ([`driver::take`]); undo sets it aside again.
    pub(crate) fn give_back_driver(&mut self, address: PciAddress, host: &str) -> Result<()> {
        let paths = self.session.paths.clone();
        self.session.settle_from_now();
        let result = driver::restore(&paths, address, Some(host), self.within())
            .and_then(|()| driver::forget_previous(&paths, address));
        self.step("driver", &address.to_string(), result, |()| {
            Some(Undo::SetAside {
                address,
                driver: host.to_owned(),
            })
        })
    }

    /// Stops the vGPU `id` of type `type_id` (as [`Operation::stop`]); undo makes it again in
    /// the same place under the same handle.
    pub(crate) fn stop_reversibly(
        &mut self,
        id: VgpuHandle,
        type_id: &str,
        fallback: GiveBack<'_>,
    ) -> Result<Running> {
        let again = match (backend::running(self.paths(), id)?, id) {
            (Some(Running::Mdev { parent }), VgpuHandle::Mdev(uuid)) => Some(NewVgpu::Mdev {
                parent,
                type_id: type_id.to_owned(),
                uuid,
            }),
            (Some(Running::VendorVf { type_id }), VgpuHandle::Vf(vf)) => {
                Some(NewVgpu::VendorVf { vf, type_id })
            }
            (Some(Running::PlainVf), VgpuHandle::Vf(vf)) => Some(NewVgpu::PlainVf { vf }),
            _ => None,
        };
        // Its undo makes the vGPU again, where it is now.
        // Not knowing it does not keep the vGPU from going: the driver's default then.
        let at = match &again {
            Some(_) => self.placement_now(id).unwrap_or_else(|err| {
                tracing::warn!(%id, "its placement, for an undo, is unknown: {}", err.chain());
                None
            }),
            None => None,
        };
        self.session.settle_from_now();
        let result = backend::destroy(self.paths(), id, fallback, self.within());
        self.step("stop", &id.to_string(), result, |_| {
            again.map(|vgpu| Undo::Restart(vgpu, at))
        })
    }

    /// The placement of the running vGPU `id` in mixed-size mode, as far as it is known
    /// ([`capacity::placement_of`](crate::capacity::placement_of)): from its GPU's size facts
    /// and its own definition only, so that nothing else in the store is read.
    fn placement_now(&self, id: VgpuHandle) -> Result<Option<u32>> {
        let device = match id {
            VgpuHandle::Mdev(uuid) => backend::mdev::parent_of(self.paths(), uuid)?,
            VgpuHandle::Vf(vf) => Some(vf),
        };
        let Some(device) = device else {
            return Ok(None);
        };
        let gpu = self.gpu_of(device)?;
        let mut state = crate::capacity::HostState::default();
        let nvml = self.nvml().get();
        if let Some(facts) = crate::nvml::host_state::size_facts(self.paths(), nvml, &gpu) {
            state.sizes.insert(gpu.address, facts);
        }
        let defs = &mut state.definitions;
        match id {
            VgpuHandle::Vf(vf) => defs.vf_vgpus.extend(self.store().vf_vgpu(vf)?),
            VgpuHandle::Mdev(uuid) => defs.mdevs.extend(self.store().mdev(uuid)?),
        }
        Ok(crate::capacity::placement_of(&state, gpu.address, id))
    }

    /// Removes every definition of `id` (mdev, VF vGPU, binding); undo writes them back.
    /// False when there was none.
    pub(crate) fn undefine_reversibly(&mut self, id: VgpuHandle) -> Result<bool> {
        let store = self.store().clone();
        let device = id.to_string();
        let mut removed = false;
        match id {
            VgpuHandle::Mdev(uuid) => {
                if let Some(def) = store.mdev(uuid)? {
                    let result = store.undefine_mdev(uuid);
                    removed |= self.step("undefine", &device, result, |gone| {
                        gone.then_some(Undo::RedefineMdev(def))
                    })?;
                }
            }
            VgpuHandle::Vf(vf) => {
                if let Some(def) = store.vf_vgpu(vf)? {
                    let result = store.undefine_vf_vgpu(vf);
                    removed |= self.step("undefine", &device, result, |gone| {
                        gone.then_some(Undo::RedefineVfVgpu(def))
                    })?;
                }
                if let Some(def) = store.binding(vf)? {
                    let result = store.undefine_binding(vf);
                    removed |= self.step("undefine", &device, result, |gone| {
                        gone.then_some(Undo::RedefineBinding(def))
                    })?;
                }
            }
        }
        Ok(removed)
    }

    /// Replaces the file at `path` (one of `vgpu`'s own under `run/`, up to 256 KiB) with
    /// `bytes`, or removes it when `None`, durably; undo puts back what was there.
    #[tracing::instrument(level = "trace", skip_all)]
    pub(crate) fn replace_file(&mut self, path: &Path, bytes: Option<&[u8]>) -> Result<()> {
        let previous = crate::host::sysfs::read_bounded(path, 256 * 1024)?;
        let result = match bytes {
            Some(bytes) => durable::write_atomic(path, bytes),
            None => durable::remove_durably(path).map(drop),
        };
        let shown = path.display().to_string();
        self.step("record", &shown, result, |()| {
            Some(Undo::File {
                path: path.to_path_buf(),
                previous,
            })
        })
    }

    /// Records in the audit log that `device` was left as it is, and why.
    pub(crate) fn note(&self, action: &str, device: &str, why: &str) {
        self.session.record(action, device, why);
    }

    /// Audits a step the operation took outside these helpers.
    pub(crate) fn audit<T>(&self, action: &str, device: &str, result: &Result<T>) {
        self.session.record_result(action, device, result);
    }

    /// Makes `placement` under `uuid` or the handle it implies, at placement id `at` in
    /// mixed-size mode: the shared end of `create`, `start` and provisioning.
    pub(crate) fn create_at(
        &mut self,
        placement: &Placement,
        uuid: Option<Uuid>,
        at: Option<u32>,
    ) -> Result<(VgpuHandle, Option<String>)> {
        let vgpu = placement.vgpu(uuid)?;
        let previous = self.realize_at(&vgpu, at)?;
        Ok((vgpu.handle(), previous))
    }
}

#[cfg(test)]
mod tests;
