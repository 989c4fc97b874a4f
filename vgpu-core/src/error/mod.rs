//! Errors of `vgpu-core`: one variant per failure, carrying its facts, and [`ErrorKind`], the
//! few categories a caller acts on. Each module with failures of its own has its own error,
//! which [`Error`] wraps whole: [`HostError`] (`host.rs`, the kernel's files and devices),
//! [`StateError`] (`state.rs`, `vgpu`'s own state), [`NvmlError`] (`nvml.rs`, a change that
//! needs NVML). They live here, in the lowest layer, so that [`Error`] can hold them.

mod chain;
#[cfg(test)]
mod from_plan_tests;
mod host;
mod nvml;
mod state;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::model::Backend;
use crate::model::pci::PciAddress;

pub(crate) use chain::error_chain;
#[cfg(any(feature = "nvml", test))]
pub(crate) use chain::foreign_error_chain;
pub use host::HostError;
pub use nvml::NvmlError;
pub use state::StateError;
pub use vgpu_model::ErrorKind;

/// An error from reading or changing the host.
///
/// Every variant names the path it concerns; kernel errors keep their `io::Error` (and so their
/// errno) as the source. `Display` never repeats the source: print the chain once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure reading or changing the kernel's files and devices (`host/`).
    #[error(transparent)]
    Host(#[from] HostError),
    /// A failure of `vgpu`'s own state: a definition, the lock, the ledger, a file the
    /// caller named (`state/`).
    #[error(transparent)]
    State(#[from] StateError),
    /// The kernel accepted a change but the device does not show it afterwards.
    #[error("{} shows {found} after the change (expected {expected})", path.display())]
    NotApplied {
        /// What was read back.
        path: PathBuf,
        /// What should be there, in words.
        expected: String,
        /// What is there.
        found: String,
    },
    /// No GPU here has room for a vGPU of the type: each GPU's refusal, in one line.
    #[error("no GPU here has room for a vGPU of {wanted}: {}", refusals.join("; "))]
    NoRoomHere {
        /// The type asked for.
        wanted: String,
        /// Each GPU that offers the type, with why it takes none.
        refusals: Vec<String>,
    },
    /// The GPU has no room for as many vGPUs of this type as asked: try another GPU or type.
    #[error(
        "GPU {gpu} has room for {available} more vGPU(s) of type {type_id}, not {asked}{}",
        match limit {
            Some(crate::model::limit::Limit::Definitions { .. }) | None if *reserved > 0 => {
                format!(" ({reserved} held for defined vGPUs)")
            }
            Some(limit) => format!(": {limit}"),
            None => String::new(),
        }
    )]
    NoCapacity {
        /// The physical GPU (or the mdev parent).
        gpu: PciAddress,
        /// The type asked for.
        type_id: String,
        /// How many were asked for.
        asked: u32,
        /// How many more fit.
        available: u32,
        /// How many of the free places definitions hold for vGPUs that are not running.
        reserved: u32,
        /// What bounds the room, as [`room`](crate::plan::capacity::room) says; `None` where the kernel's
        /// files alone said.
        limit: Option<crate::model::limit::Limit>,
        /// The device directory whose attributes say so.
        path: PathBuf,
    },
    /// Something the caller named does not exist on the host or in the store.
    #[error("no {what} matches {id:?} under {}", path.display())]
    NotFound {
        /// What kind of thing was looked for.
        what: Object,
        /// The name given.
        id: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A name matched several GPUs.
    #[error("{name:?} matches several GPUs: {}", candidates.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Ambiguous {
        /// The name given.
        name: String,
        /// The addresses it matched.
        candidates: Vec<PciAddress>,
    },
    /// The GPU offers no vGPU type by that id or name.
    #[error(
        "GPU {gpu} offers no vGPU type {wanted:?}; it offers: {}",
        if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
    )]
    UnknownType {
        /// The GPU (or mdev parent).
        gpu: PciAddress,
        /// The type asked for.
        wanted: String,
        /// What it offers, as human output names types (`vgpu_model::type_label`).
        offered: Vec<String>,
    },
    /// A desired-state file, a plan, a placement or a hand-out is refused (`vgpu-plan`'s
    /// [`Error`](vgpu_plan::Error)).
    #[error(transparent)]
    Plan(#[from] vgpu_plan::Error),
    /// A name or value given by the caller is not of the form it must have.
    #[error("{value:?} is not {expected}")]
    BadName {
        /// The text given (cut to a sensible length).
        value: String,
        /// What it should have been, in words.
        expected: &'static str,
    },
    /// The GPU has no virtualisation interface: it can only be passed through whole.
    #[error("GPU {gpu} offers no vGPUs (backend {backend})")]
    NotVirtualizable {
        /// The GPU.
        gpu: PciAddress,
        /// Its backend.
        backend: Backend,
    },
    /// The GPU makes vGPUs on SR-IOV VFs and has none enabled.
    #[error("GPU {gpu} has no VFs enabled")]
    NoVfs {
        /// The GPU.
        gpu: PciAddress,
        /// Its backend (`sriov` for a GPU whose vGPU types show only on enabled VFs).
        backend: Backend,
    },
    /// A UUID was given for a vGPU that is named by its VF.
    #[error("the vGPU on {device} is named by its VF: a UUID does not apply")]
    UuidNotApplicable {
        /// The GPU or VF.
        device: PciAddress,
    },
    /// A GPU was named twice in one provisioning run.
    #[error("GPU {gpu} is named twice: each GPU's steps must run in order")]
    DuplicateTarget {
        /// The GPU.
        gpu: PciAddress,
    },
    /// A device other than a GPU (or a VF of one) was named where only those are managed.
    #[error("{address} is not a GPU or a VF of one")]
    NotGpu {
        /// The device.
        address: PciAddress,
    },
    /// A device was not bound by `vgpu`, so there is no driver to give it back to.
    #[error("{address} was not bound by vgpu")]
    NotOwned {
        /// The device.
        address: PciAddress,
    },
    /// libvirt is there but does not answer, so whether a domain references the device is
    /// unknown: it is not taken away.
    #[error(
        "{device} is not taken away: libvirt at {uri} does not answer ({reason}), so the domains that reference it are unknown"
    )]
    HoldersUnknown {
        /// The device.
        device: String,
        /// The libvirt URI.
        uri: String,
        /// Why libvirt did not answer.
        reason: String,
    },
    /// A signal asked the command to stop: the step in flight finished, and the operation's
    /// steps were undone.
    #[error(
        "stopped by signal {signal} after the step in flight; this operation's steps were undone"
    )]
    Interrupted {
        /// The signal (2: SIGINT, 15: SIGTERM).
        signal: i32,
    },
    /// The device (or vGPU) is in use: by a vGPU, a passthrough driver, or a process.
    #[error("{device} is in use: {by}")]
    InUse {
        /// The device or vGPU.
        device: String,
        /// What holds it.
        by: String,
    },
    /// A process holds the device's VFIO node open (a guest is using it).
    #[error("{device} is open by process {pid} ({command}) through {node}")]
    HeldOpen {
        /// The vGPU or device.
        device: String,
        /// The process.
        pid: u32,
        /// Its command name.
        command: String,
        /// The node it holds open.
        node: String,
    },
    /// Something that must be new exists already.
    #[error("{what} {id} already exists")]
    AlreadyExists {
        /// What kind of thing.
        what: Object,
        /// Its name.
        id: String,
    },
    /// A definition exists for this vGPU or device already; it is never replaced.
    #[error("{id} is already defined in {} (undefine it first)", path.display())]
    DefinitionExists {
        /// The vGPU or device.
        id: String,
        /// Its definition file.
        path: PathBuf,
    },
    /// A defined vGPU's place holds something other than the definition says.
    #[error("{id} is defined as {defined} but holds {found}")]
    DefinitionMismatch {
        /// The vGPU.
        id: String,
        /// What the definition says.
        defined: String,
        /// What the host has.
        found: String,
    },
    /// Some steps of `restore` failed; each is in its report.
    #[error("{failed} restore step(s) failed")]
    RestoreFailed {
        /// How many failed.
        failed: usize,
    },
    /// A worker task of a multi-GPU operation died before reporting.
    #[error("a {what} task did not finish: {reason}")]
    TaskLost {
        /// The operation.
        what: &'static str,
        /// Why (a panic or cancellation message).
        reason: String,
    },
    /// A plan asks for what this host cannot do (each reason is in the plan); nothing was
    /// applied.
    #[error("the plan of config {config:?} cannot be applied: {first}{}", if *refused > 1 { format!(" (and {} more)", refused - 1) } else { String::new() })]
    PlanRefused {
        /// The config.
        config: String,
        /// How many reasons there are.
        refused: usize,
        /// The first one, with its place in the file.
        first: String,
    },
    /// A GPU changed between planning and applying (another command made or removed vGPUs or
    /// VFs): plan again.
    #[error("GPU {gpu} changed since it was planned ({what}): plan again")]
    PlanStale {
        /// The GPU.
        gpu: PciAddress,
        /// What changed, in words.
        what: String,
    },
    /// A vGPU a domain names is neither running nor defined, so nothing says how to make it.
    #[error("{id} is neither running nor defined (no definition under {})", path.display())]
    NotDefined {
        /// The vGPU.
        id: String,
        /// Where its definition would be.
        path: PathBuf,
    },
    /// A domain names an NVIDIA vendor-VFIO VF, and nothing says which vGPU type it gets: the
    /// VF has no definition, and the domain's metadata names neither a type nor a Nova flavor
    /// (which the hook's configuration would map to one).
    #[error(
        "no vGPU type for VF {vf}: it has no definition, and the domain's metadata names \
         neither a type (<vgpu:vgpu type=\"…\"/>) nor a Nova flavor to map in {}",
        config.display()
    )]
    NoTypeForVf {
        /// The VF.
        vf: PciAddress,
        /// The hook's configuration file.
        config: PathBuf,
    },
    /// An incoming domain names a vGPU whose type this host cannot know: no type in its
    /// metadata, no Nova flavor `hook.toml` maps, and none `attach` recorded for the device.
    #[error(
        "the vGPU type of {device} is unknown here: the domain's metadata names none, hook.toml \
         maps no Nova flavor of it, and the source recorded none"
    )]
    MigrationTypeUnknown {
        /// The device, as the source named it.
        device: String,
    },
    /// A domain's Nova flavor has no vGPU type in the hook's configuration.
    #[error("Nova flavor {flavor:?} has no vGPU type in {} ([flavors])", path.display())]
    FlavorNotMapped {
        /// The flavor's name.
        flavor: String,
        /// The hook's configuration file.
        path: PathBuf,
    },
    /// The tenant policy forbids what a domain would hold: the first rule it breaks.
    #[error("domain {domain:?} of tenant {tenant:?}: refused by {}: {violation}", path.display())]
    PolicyRefused {
        /// The domain's name.
        domain: String,
        /// Its tenant (`""` for none).
        tenant: String,
        /// The policy file.
        path: PathBuf,
        /// The rule broken, with the tenants and the GPU or quota.
        violation: Box<crate::plan::tenants::Violation>,
    },
    /// The libvirt hook could not make one of a domain's devices ready.
    #[error("domain {domain}: cannot make {device} ready{}", from.as_deref().map(|f| format!(" ({f})")).unwrap_or_default())]
    HookDevice {
        /// The domain's name.
        domain: String,
        /// The device: a mdev UUID or a PCI address.
        device: String,
        /// Where its type came from, when that is not its definition.
        from: Option<String>,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// A change that needs NVML cannot be made: NVML is missing or refused, or the GPU's
    /// MIG or scheduler state does not allow it.
    #[error(transparent)]
    Nvml(#[from] NvmlError),
    /// A MIG-mode change that the driver holds until the GPU is reset; it was taken back.
    #[error(
        "the MIG-mode change of {gpu} waits for a GPU reset, which vgpu does not do; it was \
         taken back"
    )]
    MigResetPending {
        /// The GPU.
        gpu: PciAddress,
    },
    /// GPU instances that do not fit the GPU's placements.
    #[error("the GPU instances do not fit: {why}")]
    MigNoFit {
        /// Why, in words.
        why: String,
    },
    /// A GPU has no GPU instance (or no GPU-instance profile) by that name or id.
    #[error("{gpu} has no GPU instance {what}")]
    NoGpuInstance {
        /// The GPU.
        gpu: PciAddress,
        /// The instance or profile asked for, in words.
        what: String,
    },
}

/// The kind of thing an [`Error::NotFound`] or [`Error::AlreadyExists`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Object {
    /// A GPU physical function.
    Gpu,
    /// Any PCI function.
    PciDevice,
    /// A PCI function with `mdev_supported_types/`.
    MdevParent,
    /// A mediated device.
    Mdev,
    /// A VF with NVIDIA's vendor-specific VFIO attributes (`nvidia/`).
    VendorVf,
    /// A vGPU of any kind.
    Vgpu,
    /// A persistent definition.
    Definition,
    /// A PCI driver.
    Driver,
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Object::Gpu => "GPU",
            Object::PciDevice => "PCI device",
            Object::MdevParent => "mediated-device parent",
            Object::Mdev => "mediated device",
            Object::VendorVf => "NVIDIA vendor-VFIO VF",
            Object::Vgpu => "vGPU",
            Object::Definition => "definition",
            Object::Driver => "driver",
        })
    }
}

impl Error {
    /// The category a caller acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. }
            | Error::UnknownType { .. }
            | Error::NotDefined { .. }
            | Error::FlavorNotMapped { .. } => ErrorKind::NotFound,
            Error::HookDevice { source, .. } => source.kind(),
            Error::Host(err) => err.kind(),
            Error::State(err) => err.kind(),
            Error::Nvml(err) => err.kind(),
            Error::Plan(err) => err.kind(),
            Error::AlreadyExists { .. }
            | Error::DefinitionExists { .. }
            | Error::DefinitionMismatch { .. }
            | Error::NoVfs { .. }
            | Error::NotOwned { .. }
            | Error::PlanStale { .. }
            | Error::MigResetPending { .. } => ErrorKind::Conflict,
            Error::NoGpuInstance { .. } => ErrorKind::NotFound,
            Error::Interrupted { .. } => ErrorKind::Interrupted,
            Error::PolicyRefused { .. } => ErrorKind::Policy,
            Error::NoCapacity { .. } | Error::NoRoomHere { .. } | Error::MigNoFit { .. } => {
                ErrorKind::NoCapacity
            }
            Error::InUse { .. } | Error::HoldersUnknown { .. } | Error::HeldOpen { .. } => {
                ErrorKind::Busy
            }
            Error::BadName { .. }
            | Error::Ambiguous { .. }
            | Error::NotVirtualizable { .. }
            | Error::UuidNotApplicable { .. }
            | Error::DuplicateTarget { .. }
            | Error::NotGpu { .. }
            | Error::PlanRefused { .. }
            | Error::NoTypeForVf { .. }
            | Error::MigrationTypeUnknown { .. } => ErrorKind::BadInput,
            Error::NotApplied { .. } | Error::RestoreFailed { .. } | Error::TaskLost { .. } => {
                ErrorKind::HostFault
            }
        }
    }

    /// A [`Error::BadName`] for `value` (cut to 80 characters).
    pub(crate) fn bad_name(value: &str, expected: &'static str) -> Self {
        vgpu_model::name::BadName::new(value, expected).into()
    }

    /// The error's message with its causes, as one line.
    pub fn chain(&self) -> String {
        error_chain(self)
    }
    /// The error of writing `value` to `path`, classified by errno
    /// ([`HostError::from_write`](crate::host::HostError::from_write)).
    pub(crate) fn from_write(path: &std::path::Path, value: &str, source: io::Error) -> Self {
        HostError::from_write(path, value, source).into()
    }

    /// The kernel's errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Host(err) => err.errno(),
            Error::State(err) => err.errno(),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<vgpu_model::name::BadName> for Error {
    fn from(bad: vgpu_model::name::BadName) -> Self {
        Error::BadName {
            value: bad.value,
            expected: bad.expected,
        }
    }
}
