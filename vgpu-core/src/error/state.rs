//! Errors of `vgpu`'s own state: a persistent definition or a desired-state file that is not
//! what it should be, the host lock held by another process, a usage-ledger file, a file the
//! caller named. They are the `state` module's; `crate::Error` wraps them
//! ([`crate::Error::State`]) and keeps their kinds. They live here, in the lowest layer, so that
//! `Error` can hold them.

use std::io;
use std::path::PathBuf;

use crate::model::ErrorKind;

/// A failure of `vgpu`'s own state. Every variant names the file it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A file the caller named (`plan -f`, `can-host -f`, `--metadata`) cannot be read: it is
    /// missing, unreadable, too large or not text.
    #[error("cannot read {}", path.display())]
    Input {
        /// The file, as the caller named it.
        path: PathBuf,
        /// The kernel's answer, or what is wrong with the content.
        #[source]
        source: io::Error,
    },
    /// A usage-ledger file is not what the ledger writes.
    #[error("usage ledger {}: {reason}", path.display())]
    Ledger {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A persistent definition file is not JSON, or not the JSON expected there (a missing
    /// field, an unknown `start`).
    #[error("cannot parse definition {}", path.display())]
    DefinitionJson {
        /// The definition file.
        path: PathBuf,
        /// Where and why the JSON does not fit.
        #[source]
        source: serde_json::Error,
    },
    /// A persistent definition, or its file's name, is not valid (a name that is not a UUID or
    /// PCI address, another format version, an attribute or driver name that is not a file
    /// name).
    #[error("invalid definition {}: {reason}", path.display())]
    Definition {
        /// The definition file (or the store directory, for a name refused before writing).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An mdev UUID is already defined under another parent.
    #[error("mdev {uuid} is already defined under parent {parent} ({})", path.display())]
    MdevDefinedElsewhere {
        /// The UUID.
        uuid: uuid::Uuid,
        /// The parent it is defined under.
        parent: String,
        /// Its definition file.
        path: PathBuf,
    },
    /// A GPU's definitions disagree on its size mode: it is, or is to be, defined in
    /// equal-size mode, and vGPUs on it are defined at placements, which need mixed-size mode.
    #[error(
        "the definitions of GPU {gpu} disagree: equal-size mode ({}) and vGPUs at placements \
         ({}), which need mixed-size mode; undefine one or the other",
        path.display(),
        placed.join(", ")
    )]
    SizeModeDisagrees {
        /// The GPU.
        gpu: crate::model::pci::PciAddress,
        /// Its size-mode definition.
        path: PathBuf,
        /// The vGPUs defined at a placement.
        placed: Vec<String>,
    },
    /// The libvirt hook's configuration (`etc/vgpu/hook.toml`) is not valid.
    #[error(
        "{}{}: {reason}",
        path.display(),
        at.map(|at| format!(":{at}")).unwrap_or_default()
    )]
    Config {
        /// The file.
        path: PathBuf,
        /// Where in it, when known.
        at: Option<crate::model::location::Location>,
        /// What is wrong, in one line.
        reason: String,
    },
    /// The host lock is held by another process that changes the host through this crate
    /// (`vgpuctl`, `vgpuctl-libvirt`, the libvirt hook, an embedder).
    #[error(
        "another vgpu process holds {} (waited {waited_ms} ms)",
        path.display()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// How long it was waited for.
        waited_ms: u128,
    },
}

impl StateError {
    /// The category a caller acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StateError::Input { .. } | StateError::Config { .. } => ErrorKind::BadInput,
            StateError::MdevDefinedElsewhere { .. } | StateError::SizeModeDisagrees { .. } => {
                ErrorKind::Conflict
            }
            StateError::Locked { .. } => ErrorKind::Busy,
            StateError::Ledger { .. }
            | StateError::DefinitionJson { .. }
            | StateError::Definition { .. } => ErrorKind::HostFault,
        }
    }

    /// The kernel's errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            StateError::Input { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
