//! Host mutations as an operator runs them: each under the host lock, recorded in the audit
//! log, persisted where asked, and undone when they fail part-way.
//!
//! Every change goes through one session (`session`): `Manager`'s operations, [`Manager::provision`] and
//! [`Manager::restore`] are its callers. Persistent changes are written *before* the host is
//! changed and removed again if the change fails: a process killed in between leaves a
//! definition that [`Manager::restore`] carries out, never a device that nothing describes.

mod apply;
mod create;
mod hook;
mod interrupt;
mod migrate;
mod parallel;
mod placing;
mod policy;
mod provision;
mod removal;
mod restore;
mod sched;
mod session;
mod usage;
mod vgpu_steps;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

pub use apply::{ApplyEvent, ApplyOutcome, ApplyReport, GpuApply, Progress};
pub use hook::{HookDomain, Left, Prepared, Released};
pub use migrate::{Incoming, IncomingDevice};
pub use provision::{GpuReport, Target};
pub use restore::{RestoreOutcome, RestoreQuota, RestoreReport, RestoreStep};

use crate::backend;
pub use crate::backend::{Placement, Running};
use crate::discovery::discover;
use crate::error::{Error, Object, Result};
use crate::host::driver;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sriov::{SriovChange, SriovOptions};
use crate::model::holder::{Holder, Tenant};
use crate::model::pci::PciAddress;
use crate::model::{Backend, NVIDIA_VENDOR_ID, VgpuHandle};
use crate::nvml::{Nvml, NvmlSource};
use crate::plan::steps::Plan;
use crate::plan::{DefinitionSet, HostState};
use crate::state::hook::HookConfig;
use crate::state::store::{BindingDefinition, SriovDefinition, Start, Store};
use crate::state::usage::Clock;
pub use interrupt::{request_stop, stop_requested};
pub use policy::{Held, read_policy};
pub use session::DomainReferences;
use session::{Operation, Session, SessionOptions};
use vgpu_steps::{not_found, start_defined, stop, stop_unchecked, undefine};

/// Performs host mutations for one command.
#[derive(Debug, Clone)]
pub struct Manager {
    paths: HostPaths,
    store: Store,
    command: String,
    lock_timeout: Duration,
    sriov: SriovOptions,
    force: bool,
    release_timeout: Duration,
    nvml: NvmlSource,
    references: DomainReferences,
    usage_clock: Option<Arc<dyn Clock + Send + Sync>>,
}

/// What `create` made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    /// Its handle.
    pub id: VgpuHandle,
    /// The physical GPU.
    pub gpu: PciAddress,
    /// Where it went.
    pub placement: Placement,
    /// For a plain VF, the driver it had before `vfio-pci`.
    pub previous_driver: Option<String>,
    /// In mixed-size mode, the placement id it was made at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_id: Option<u32>,
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
    /// log. Waits up to 60 s for the host lock and 30 s for a write the kernel holds while a
    /// device is in use.
    pub fn new(paths: &HostPaths, command: impl Into<String>) -> Self {
        Self {
            paths: paths.clone(),
            store: Store::new(paths),
            command: command.into(),
            lock_timeout: Duration::from_secs(60),
            sriov: SriovOptions::default(),
            force: false,
            release_timeout: Duration::from_secs(30),
            nvml: NvmlSource::default(),
            references: DomainReferences::NoLibvirt,
            usage_clock: None,
        }
    }

    /// Loads NVML from `source` when a change needs it (a MIG-backed vGPU's GPU instance, the
    /// vGPU scheduler): by default the driver's library, on the local host only.
    pub fn with_nvml(mut self, source: NvmlSource) -> Self {
        self.nvml = source;
        self
    }

    /// Waits up to `timeout` for each write the kernel holds until a device is released
    /// instead of answering: removing an mdev, clearing a vendor vGPU, unbinding a driver
    /// while a process has the device open (only forced operations write then) or while
    /// NVIDIA's driver uses the GPU. After it, the operation fails with [`HostError::Timeout`](crate::host::HostError::Timeout),
    /// which says what it waited for; the write stays pending in the kernel and takes effect
    /// when the device is released. VF-count changes use [`SriovOptions::timeout`].
    pub fn with_release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
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

    /// Removes vGPUs and devices even while a process (a guest's QEMU) holds their VFIO
    /// device open, and changes VF counts even while VFs are in use. Without it, `destroy`,
    /// `undefine`, `stop`, `unbind` and `set_vfs` refuse with [`Error::HeldOpen`] or
    /// [`Error::InUse`].
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Takes `references` as what libvirt says about which domains reference which devices:
    /// every command that takes a device away refuses one a domain references, and refuses
    /// everything while libvirt does not answer (the `removal` module's policy, unless
    /// forced). Without it the host is taken to have no libvirt.
    pub fn with_domain_references(mut self, references: DomainReferences) -> Self {
        self.references = references;
        self
    }

    /// Takes the usage ledger's time from `clock` instead of the host's clocks: a benchmark's
    /// year, or an embedder replaying records.
    pub fn with_usage_clock(mut self, clock: Arc<dyn Clock + Send + Sync>) -> Self {
        self.usage_clock = Some(clock);
        self
    }

    /// The persistent definitions, to read.
    pub fn definitions(&self) -> &Store {
        &self.store
    }

    #[tracing::instrument(level = "trace", skip_all)]
    fn session(&self) -> Result<Session> {
        Session::open(
            &self.paths,
            &self.command,
            SessionOptions {
                lock_timeout: self.lock_timeout,
                sriov: self.sriov,
                force: self.force,
                release_timeout: self.release_timeout,
                nvml: self.nvml.clone(),
                references: self.references.clone(),
            },
        )
    }

    /// Runs `f` as one audited operation under the host lock.
    #[tracing::instrument(level = "trace", skip_all)]
    fn mutate<T>(
        &self,
        action: &str,
        device: &str,
        f: impl FnOnce(&mut Operation<'_>) -> Result<T>,
    ) -> Result<T> {
        let session = self.session()?;
        let result = session.run(action, device, f);
        session.finish();
        result
    }

    /// Creates a vGPU of type `wanted` (an id, a name, or a name without its vendor prefix) on
    /// GPU `gpu`, on the first place with room that no definition holds. `uuid` names a
    /// mediated device (a random one is made when `None`); it is refused for VF-based vGPUs.
    /// With `define`, persists it first so that `restore` brings it back after a reboot.
    /// Never replaces an existing definition. When another tool (mdevctl, libvirt) takes the
    /// place meanwhile and the kernel refuses it as full, the GPU is read again and the next
    /// place with room is tried, once; [`Error::NoCapacity`] means the GPU is full.
    pub fn create(
        &self,
        gpu: PciAddress,
        wanted: &str,
        uuid: Option<Uuid>,
        define: Option<Start>,
    ) -> Result<Created> {
        self.create_at(gpu, wanted, uuid, define, None)
    }

    /// [`Manager::create`] at placement `at` on a GPU in mixed-size mode; `None` takes the
    /// placement that takes the least room from the GPU's larger types. A placement the driver
    /// cannot take now, or on a GPU not in mixed-size mode, is refused before anything is
    /// made.
    pub fn create_at(
        &self,
        gpu: PciAddress,
        wanted: &str,
        uuid: Option<Uuid>,
        define: Option<Start>,
        at: Option<u32>,
    ) -> Result<Created> {
        self.mutate("create", &gpu.to_string(), |op| {
            let inventory = discover(op.paths())?;
            let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
            create::create(op, gpu, wanted, uuid, define, at)
        })
    }

    /// Persists a vGPU of type `wanted` on `gpu` without creating it; the place it will take
    /// is held for it from now on. Never replaces an existing definition.
    pub fn define(
        &self,
        gpu: PciAddress,
        wanted: &str,
        uuid: Option<Uuid>,
        start: Start,
    ) -> Result<Defined> {
        self.mutate("define", &gpu.to_string(), |op| {
            let inventory = discover(op.paths())?;
            let gpu = crate::discovery::gpu_at(&inventory, gpu, op.paths())?;
            let placement = op.place(gpu, wanted)?;
            let id = placement.handle(uuid)?;
            op.define(gpu, &placement, id, start)?;
            Ok(Defined {
                id,
                placement,
                start,
            })
        })
    }

    /// Removes the definition of `id` (the device keeps running). False when none existed.
    /// Refused as [`Manager::destroy`] is while a domain references it or a process holds it
    /// open: without its definition the vGPU is gone after the next boot.
    pub fn undefine(&self, id: VgpuHandle) -> Result<bool> {
        self.mutate("undefine", &id.to_string(), |op| undefine(op, id))
    }

    /// Stops the running vGPU `id` and removes its definition: the inverse of
    /// `create --define`. A hook record that lists it (a forced destroy) no longer does.
    /// Fails when `id` is neither running nor defined, unless forced and a record lists it.
    pub fn destroy(&self, id: VgpuHandle) -> Result<Destroyed> {
        self.mutate("destroy", &id.to_string(), |op| {
            let stopped = match backend::running(op.paths(), id)? {
                Some(_) => Some(stop(op, id)?),
                None => None,
            };
            let undefined = undefine(op, id)?;
            // A record may still list a vGPU another tool removed: forced, it is forgotten.
            let forgot =
                (op.forced() || stopped.is_some() || undefined) && op.forget_destroyed(id)?;
            if stopped.is_none() && !undefined && !forgot {
                return Err(not_found(op.paths(), id));
            }
            Ok(Destroyed {
                id,
                stopped,
                undefined,
            })
        })
    }

    /// Stops the running vGPU `id`, keeping its definition.
    pub fn stop(&self, id: VgpuHandle) -> Result<Running> {
        self.mutate("stop", &id.to_string(), |op| {
            if backend::running(op.paths(), id)?.is_none() {
                return Err(not_found(op.paths(), id));
            }
            stop(op, id)
        })
    }

    /// Starts the defined vGPU `id`.
    pub fn start(&self, id: VgpuHandle) -> Result<()> {
        self.mutate("start", &id.to_string(), |op| {
            if backend::running(op.paths(), id)?.is_some() {
                return Err(Error::AlreadyExists {
                    what: Object::Vgpu,
                    id: id.to_string(),
                });
            }
            match start_defined(op, id)? {
                true => Ok(()),
                false => Err(Error::NotFound {
                    what: Object::Definition,
                    id: id.to_string(),
                    path: op.store().vgpu_dir().to_path_buf(),
                }),
            }
        })
    }

    /// Sets the VF count of `gpu` (the kernel's rules; NVIDIA's `unbindLock` and
    /// `pci-pf-stub` sequence for NVIDIA PFs); with `define`, persists it (and `autoprobe`)
    /// first. VFs that hold a vGPU or a passthrough driver are not taken away unless the
    /// SR-IOV options say `force`. On failure the definition and autoprobe are put back.
    pub fn set_vfs(
        &self,
        gpu: PciAddress,
        count: u32,
        autoprobe: Option<bool>,
        define: bool,
    ) -> Result<SriovChange> {
        self.mutate("sriov", &gpu.to_string(), |op| {
            let inventory = discover(op.paths())?;
            let pf = crate::discovery::gpu_at(&inventory, gpu, op.paths())?.address;
            if define {
                // Quotas recorded for this count stay while the VFs do: a count that changes
                // gives every VF the driver's equal share.
                let now = PciDevice::new(op.paths(), pf).sriov()?.map(|s| s.num_vfs);
                let lmem_quota_mib = match op.store().sriov_of(pf)? {
                    Some(def) if def.num_vfs == count && now == Some(count) => def.lmem_quota_mib,
                    _ => BTreeMap::new(),
                };
                op.define_sriov(&SriovDefinition {
                    pf,
                    num_vfs: count,
                    drivers_autoprobe: autoprobe,
                    lmem_quota_mib,
                })?;
            }
            if let Some(on) = autoprobe {
                op.set_autoprobe(pf, on)?;
            }
            op.set_vf_count(pf, count)
        })
    }

    /// Binds `address` to `driver`; with `define`, persists the binding. Only GPU functions
    /// and their VFs unless `force`. Returns the driver it had: `driver` itself when it was
    /// bound to it already, and then nothing changes (a definition asked for is written, with
    /// no previous driver: `vgpu` did not bind it, so `unbind` does not claim to know one).
    pub fn bind(
        &self,
        address: PciAddress,
        driver_name: &str,
        define: Option<Start>,
        force: bool,
    ) -> Result<Option<String>> {
        self.mutate("bind", &address.to_string(), |op| {
            driver::validate_driver_name(driver_name)?;
            let device = PciDevice::existing(op.paths(), address)?;
            if !force && !is_gpu_function(op.paths(), address)? {
                return Err(Error::NotGpu { address });
            }
            let current = device.driver()?;
            let already = current.as_deref() == Some(driver_name);
            // Moving it to another driver takes it (and its mediated devices) from whoever
            // holds it open.
            if !already {
                op.check_removable(VgpuHandle::Vf(address))?;
            }
            if let Some(start) = define {
                if op.store().binding(address)?.is_some() {
                    return Err(Error::DefinitionExists {
                        id: address.to_string(),
                        path: op.store().binding_path(address),
                    });
                }
                op.define_binding(&BindingDefinition {
                    address,
                    driver: driver_name.to_owned(),
                    previous_driver: driver::host_driver(op.paths(), address)?
                        .filter(|d| d != driver_name),
                    start,
                })?;
            }
            if already {
                op.note("bind", &address.to_string(), "already bound: nothing to do");
                return Ok(current);
            }
            op.bind(address, driver_name)?;
            Ok(current)
        })
    }

    /// Returns `address` to the driver it had before `bind` and removes the binding
    /// definition. A device `vgpu` did not bind is refused unless `force` (then it goes to its
    /// default driver). Returns the driver it has now.
    pub fn unbind(&self, address: PciAddress, force: bool) -> Result<Option<String>> {
        self.mutate("unbind", &address.to_string(), |op| {
            let paths = op.paths().clone();
            PciDevice::existing(&paths, address)?;
            op.check_removable(VgpuHandle::Vf(address))?;
            let recorded = driver::recalled_previous(&paths, address)?;
            let defined = op.store().binding(address)?.map(|b| b.previous_driver);
            let within = op.within();
            let result = match recorded.map(|r| r.driver).or(defined) {
                Some(previous) => driver::restore(&paths, address, previous.as_deref(), within),
                None if force => driver::reprobe(&paths, address, within).map(drop),
                None => Err(Error::NotOwned { address }),
            };
            op.audit("unbind-driver", &address.to_string(), &result);
            result?;
            driver::forget_previous(&paths, address)?;
            op.undefine_binding(address)?;
            PciDevice::new(&paths, address).driver()
        })
    }

    /// Carries out `targets`, one thread per GPU, all GPUs at once, under one hold of the host
    /// lock (see `manager/provision.rs`); returns when every GPU is done, with a report
    /// per target in their order. A GPU whose sequence fails undoes what it made; the others
    /// go on. Fails as a whole only when the lock or the audit log cannot be had, a GPU is
    /// named twice, or a GPU's thread panics ([`Error::TaskLost`], once the others are done).
    /// Blocking: an async caller runs it on a blocking thread (`spawn_blocking`).
    pub fn provision(&self, targets: Vec<Target>) -> Result<Vec<GpuReport>> {
        let session = self.session()?;
        let result = provision::run(&session, &targets);
        session.finish();
        result
    }

    /// [`Manager::provision`] for `tenant`: under the same hold of the host lock, first asks
    /// the tenant policy whether the tenant may hold every vGPU the targets would make (the
    /// count asked, or the room each GPU has), beside what domains hold now, as the hook
    /// asks ([`Error::PolicyRefused`], kind `policy`). A refusal makes nothing. The vGPUs made
    /// are a pool: the tenant holds them once its domains take them, and the hook checks then.
    pub fn provision_for(&self, tenant: &str, targets: Vec<Target>) -> Result<Vec<GpuReport>> {
        let session = self.session()?;
        // No domain holds the pool yet: the policy counts it for the tenant.
        let claim = Holder {
            domain: "provision".to_owned(),
            uuid: Uuid::nil(),
            tenant: Some(Tenant::label(tenant)),
        };
        let allowed = session.run("provision-policy", tenant, |op| {
            provision::keep_policy(op, &claim, &targets)
        });
        let result = allowed.and_then(|()| provision::run(&session, &targets));
        session.finish();
        result
    }

    /// What capacity reads ([`room`](crate::plan::capacity::room)): the inventory, every definition, and what
    /// `nvml` says (a [`Nvml`] not loaded says nothing), settled. The vGPUs guests hold are
    /// not read: capacity does not depend on them ([`Manager::host_state`] reads them).
    pub fn capacity_state(&self, nvml: &Nvml) -> Result<HostState> {
        // A definition that cannot be read is a warning: the GPUs are still shown.
        let mut all = self.store.all_lenient();
        let mut inventory = discover(&self.paths)?;
        for (kind, err) in std::mem::take(&mut all.errors) {
            inventory.warnings.push(crate::model::Warning {
                device: format!("{kind} definition"),
                message: err.chain(),
            });
        }
        let vfs_of = |gpu: PciAddress| {
            let found = inventory.gpus.iter().find(|g| g.address == gpu);
            found.map(sched::possible_vfs).unwrap_or_default()
        };
        for (gpu, message) in all.disagreements(vfs_of) {
            inventory.warnings.push(crate::model::Warning {
                device: gpu.to_string(),
                message,
            });
        }
        let mut state = HostState {
            inventory,
            definitions: DefinitionSet {
                mdevs: all.mdevs,
                vf_vgpus: all.vf_vgpus,
                bindings: all.bindings,
                sriov: all.sriov,
            },
            ..HostState::default()
        };
        crate::state::store::add_recorded_offers(&mut state, &self.paths, &self.store);
        crate::nvml::host_state::add_nvml_facts(&mut state, &self.paths, nvml);
        Ok(state)
    }

    fn definition_set(&self) -> Result<DefinitionSet> {
        Ok(DefinitionSet {
            mdevs: self.store.mdevs()?,
            vf_vgpus: self.store.vf_vgpus()?,
            bindings: self.store.bindings()?,
            sriov: self.store.sriov()?,
        })
    }

    /// What the planner, placement and capacity read: the inventory, every definition, and the
    /// vGPUs a process holds open (named `process <pid> (<command>)`), settled
    /// ([`HostState::settle`]). Callers that know more holders (libvirt domains) add them to
    /// [`HostState::holds`]; callers with NVML add what it says with
    /// [`add_nvml_facts`](crate::nvml::add_nvml_facts).
    pub fn host_state(&self) -> Result<HostState> {
        let inventory = discover(&self.paths)?;
        let definitions = self.definition_set()?;
        let handles: Vec<VgpuHandle> = inventory
            .gpus
            .iter()
            .flat_map(|g| {
                let plain = g
                    .vfs
                    .iter()
                    .filter(|vf| {
                        vf.driver
                            .as_deref()
                            .is_some_and(driver::is_passthrough_driver)
                    })
                    .map(|vf| VgpuHandle::Vf(vf.address));
                g.vgpus.iter().map(|v| v.id).chain(plain)
            })
            .collect();
        let mut holds: BTreeMap<VgpuHandle, crate::plan::capacity::Hold> =
            backend::open_handles(&self.paths, &handles)?
                .into_iter()
                .map(|(id, holder)| {
                    let what = format!("process {} ({})", holder.pid, holder.command);
                    let by = match holder.listed {
                        true => what,
                        false => format!("{what}, whose open files cannot be listed"),
                    };
                    let frees = format!(
                        "stop process {}, or take it from the guest at once with --force",
                        holder.pid
                    );
                    (id, crate::plan::capacity::Hold { by, frees })
                })
                .collect();
        // The hook's records hold their domains' devices, with libvirt or without: a plan
        // does not propose what the removal policy would refuse.
        for (id, (record, domain)) in removal::hook_holds(&self.paths, uuid::Uuid::nil())? {
            holds.entry(id).or_insert_with(|| crate::plan::capacity::Hold {
                by: format!("domain {domain:?} by the libvirt hook's record {}", record.display()),
                frees: format!(
                    "stopping domain {domain:?} releases it; `--force` on a removal takes it anyway"
                ),
            });
        }
        let mut local_memory_mib = BTreeMap::new();
        for gpu in &inventory.gpus {
            if gpu.backend != Backend::Sriov || gpu.vendor_id == Some(NVIDIA_VENDOR_ID) {
                continue;
            }
            let device = PciDevice::new(&self.paths, gpu.address);
            if let Some(bytes) = device.lmem_total(gpu.vfs.len())? {
                local_memory_mib.insert(gpu.address, bytes / (1024 * 1024));
            }
        }
        let mut state = HostState {
            inventory,
            definitions,
            holds,
            local_memory_mib,
            ..HostState::default()
        };
        crate::state::store::add_recorded_offers(&mut state, &self.paths, &self.store);
        state.settle();
        Ok(state)
    }

    /// The tenant policy's verdict on `plan`, as [`Manager::apply`] asks it: each entry with a
    /// tenant may hold the vGPUs it makes beside what domains hold now. `plan` and `assert`
    /// ask it, so that they refuse what `apply` would.
    ///
    /// # Errors
    ///
    /// [`Error::PolicyRefused`] naming the tenant and the rule; an error reading the policy
    /// file or the host.
    pub fn plan_policy(&self, plan: &Plan) -> Result<()> {
        apply::policy_verdict(self, plan)
    }

    /// Carries `plan` out: every GPU with steps at once, each GPU's steps in order as one
    /// operation under one hold of the host lock (see `manager/apply.rs`). A GPU whose
    /// steps fail has them undone and the others go on; a GPU the plan refuses because a
    /// guest holds a vGPU is skipped. Fails as a whole, changing nothing, when the plan refuses
    /// anything else ([`Error::PlanRefused`]), or when the lock or the audit log cannot be had.
    /// `progress` hears of each GPU and step as they happen, on the GPUs' threads (see
    /// [`Progress`]). Returns when every GPU is done; a GPU's thread that panics fails the
    /// whole ([`Error::TaskLost`]) once the others are done. Applying a plan of a host that
    /// matches changes nothing and takes no lock. Blocking: an async caller runs it on a
    /// blocking thread (`spawn_blocking`).
    pub fn apply(&self, plan: &Plan, progress: Option<Progress<'_>>) -> Result<ApplyReport> {
        apply::check(plan)?;
        let busy = plan
            .gpus
            .iter()
            .any(|g| g.refusals.is_empty() && !g.steps.is_empty());
        let session = match busy {
            true => Some(self.session()?),
            false => None,
        };
        let allowed = match &session {
            Some(session) => apply::keep_policy(session, plan),
            None => Ok(()),
        };
        let gpus = allowed.and_then(|()| apply::run(session.as_ref(), plan, progress));
        if let Some(session) = session {
            session.finish();
        }
        Ok(ApplyReport {
            config: plan.config.clone(),
            gpus: gpus?,
        })
    }

    /// The libvirt hook's `prepare begin`: makes every device of `domain` that is the hook's
    /// exist, recording what it made under `run/vgpu/hook/<domain-uuid>` first (see
    /// [`HookDomain`] and the `hook` module documentation). When one device cannot be made,
    /// everything this call made and recorded is undone and the error names the device
    /// ([`Error::HookDevice`]). A domain that assigns no device returns at once, without
    /// the host lock.
    pub fn prepare_domain(&self, domain: &HookDomain, config: &HookConfig) -> Result<Prepared> {
        if domain.devices.is_empty() {
            return Ok(Prepared::default());
        }
        self.mutate("hook-prepare", &domain.holder.domain, |op| {
            hook::prepare(op, domain, config)
        })
    }

    /// The libvirt hook's `migrate begin` and `restore begin` on the destination: makes a vGPU
    /// here for each of `devices`, the vGPUs the incoming XML of `domain` names as the source
    /// host had them, and says what each became (see the `migrate` module documentation).
    /// What it makes is recorded first, as for [`Manager::prepare_domain`], and taken back by
    /// [`Manager::release_domain`]. A second call for the same domain reuses what the first
    /// made. With `dry_run` it chooses the same and changes nothing (`vgpuctl can-host`).
    ///
    /// # Errors
    ///
    /// [`Error::HookDevice`] naming the device and why: [`Error::MigrationTypeUnknown`], no GPU
    /// offers the type ([`Error::Plan`]), no room ([`Error::NoCapacity`]), or the tenant policy
    /// refuses ([`Error::PolicyRefused`]). Nothing is made then.
    pub fn migrate_domain(
        &self,
        domain: &HookDomain,
        devices: &[IncomingDevice],
        config: &HookConfig,
        dry_run: bool,
    ) -> Result<Incoming> {
        if devices.is_empty() {
            return Ok(Incoming::default());
        }
        let session = self.session()?;
        let result = if dry_run {
            session.attempt(|op| migrate::incoming(op, domain, devices, config, true))
        } else {
            session.run("hook-migrate", &domain.holder.domain, |op| {
                migrate::incoming(op, domain, devices, config, false)
            })
        };
        session.finish();
        result
    }

    /// The libvirt hook's `release end`: takes back what `prepare_domain` made for domain
    /// `uuid` (named `name`), leaving definitions, anything changed since, and anything a
    /// process holds open. What cannot be taken back stays recorded and is reported in
    /// [`Released::failed`]. A domain with no record returns at once, without the host lock.
    pub fn release_domain(&self, uuid: Uuid, name: &str) -> Result<Released> {
        self.release_as("hook-release", uuid, name)
    }

    /// [`Manager::release_domain`] on the source of a live migration that succeeded (libvirt's
    /// `release end migrated`, libvirt 10.5.0 and later): the same, audited as
    /// `hook-release-migrated`, so that the audit log names the migration.
    pub fn release_migrated_domain(&self, uuid: Uuid, name: &str) -> Result<Released> {
        self.release_as("hook-release-migrated", uuid, name)
    }

    fn release_as(&self, action: &str, uuid: Uuid, name: &str) -> Result<Released> {
        if !crate::state::hook::record_path(&self.paths, uuid).exists() {
            return Ok(Released::default());
        }
        self.mutate(action, name, |op| hook::release(op, uuid, name))
    }

    /// Brings the host back to its definitions after a reboot or a crash: VF counts first,
    /// then driver bindings, then auto-start mediated devices, then NVIDIA VF types.
    /// Idempotent: what is already in place is left alone. Carries on past failures and
    /// reports (and audits) each step; see [`RestoreReport::failed`]. Then closes the usage
    /// intervals an earlier boot left open ([`Manager::usage_settle`]). Last, records when it
    /// ended and whether it succeeded (`var/lib/vgpu/restore.json`,
    /// [`read_restore_run`](crate::state::read_restore_run)), whatever the outcome.
    pub fn restore(&self) -> Result<RestoreReport> {
        let report = self.session().and_then(|session| {
            let report = restore::run(&session, None);
            session.finish();
            report
        });
        // What an earlier boot left open in the usage ledger is closed at this one.
        if let Err(err) = self.usage_settle() {
            self.usage_lost("usage-settle", "usage ledger", &err);
        }
        self.record_restore_run(&report);
        report
    }

    /// Writes how `report` ended as the last run; a failure to is logged, never the run's.
    fn record_restore_run(&self, report: &Result<RestoreReport>) {
        let (steps, failed, error) = match report {
            Ok(report) => (report.steps.len() as u64, report.failed() as u64, None),
            Err(err) => (0, 0, Some(err.chain())),
        };
        use crate::state::usage::Clock as _;
        let recorded = crate::state::usage::HostClock::new(&self.paths)
            .now()
            .and_then(|finished| {
                let run = crate::state::RestoreRun {
                    finished,
                    steps,
                    failed,
                    error,
                };
                crate::state::restore_run::write_restore_run(&self.paths, &run)
            });
        if let Err(err) = recorded {
            tracing::warn!("the last restore is not recorded: {}", err.chain());
        }
    }

    /// [`Manager::restore`] for the definitions that concern one device, named by its PCI
    /// address as udev's `%k` names it (`0000:41:00.0`): for a physical function its VF count
    /// (and its VFs' local-memory quotas) and what is defined on it and on its VFs, for a VF or any other function what is
    /// defined on it. What nothing defines is left alone, so a device with no definitions is
    /// a report with no steps. A definition whose device is not ready yet (a mediated-device
    /// parent not registered, a VF its driver has not bound) is
    /// [`RestoreOutcome::Waiting`], not a failure: run this again when udev says it changed
    /// (`contrib/udev/60-vgpu.rules` does). A device that is not on the host is
    /// [`Error::NotFound`] ([`resolve_address`](crate::discovery::resolve_address) reads udev's name).
    pub fn restore_device(&self, address: PciAddress) -> Result<RestoreReport> {
        PciDevice::existing(&self.paths, address)?;
        let session = self.session()?;
        let report = restore::run(&session, Some(address));
        session.finish();
        report
    }
}
