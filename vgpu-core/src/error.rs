//! Errors of `vgpu-core`, grouped by what the caller can do about them.

use std::io;
use std::path::PathBuf;

/// An error from reading or changing the host.
///
/// Every variant names the path it concerns; kernel errors keep their `io::Error` (and so their
/// errno) as the source. `Display` never repeats the source: print the chain once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// What was read.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// A file or link that must exist does not.
    #[error("{} is missing", path.display())]
    Missing {
        /// Where it should be.
        path: PathBuf,
    },
    /// A link whose target does not exist (a device removed while being read, or a broken
    /// tree).
    #[error("{} is a dangling link", path.display())]
    DanglingLink {
        /// The link.
        path: PathBuf,
    },
    /// A file is larger than any kernel attribute should be.
    #[error("{} is larger than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound that was exceeded.
        limit: usize,
    },
    /// A file is not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// A file holds something other than what the kernel writes there.
    #[error("unexpected content in {}: {value:?} (expected {expected})", path.display())]
    Parse {
        /// The file (or link) read.
        path: PathBuf,
        /// What it held, cut to a sensible length.
        value: String,
        /// What was expected, in words.
        expected: &'static str,
    },
    /// A file's text does not follow its documented format.
    #[error("cannot parse {}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with the text.
        #[source]
        source: crate::parse::ParseError,
    },
    /// The kernel refused a write because the device is busy (`EBUSY`): in use, or VFs exist.
    #[error("{} is busy: writing {value:?} was refused", path.display())]
    Busy {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The kernel refused a write as not permitted now (`EPERM`, `EACCES`).
    #[error("writing {value:?} to {} is not permitted", path.display())]
    Denied {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The device or attribute went away or does not exist (`ENOENT`, `ENODEV`, `ENXIO`).
    #[error("cannot write {value:?} to {}: no such device", path.display())]
    Gone {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The device has no room for another instance (`ENOSPC`, `EUSERS`, `EDQUOT`).
    #[error("no capacity left: writing {value:?} to {} was refused", path.display())]
    NoSpace {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// Any other write failure (`EINVAL`, `EIO`, ...).
    #[error("cannot write {value:?} to {}", path.display())]
    Write {
        /// The attribute written.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The kernel accepted a write but the device did not reach the expected state in time.
    #[error("{what} did not happen within {waited_ms} ms (watching {})", path.display())]
    Timeout {
        /// What was expected.
        what: String,
        /// What was watched.
        path: PathBuf,
        /// How long it was waited for.
        waited_ms: u128,
    },
    /// The GPU has no room for another vGPU of this type: try another GPU or type.
    #[error("GPU {gpu} has no capacity left for vGPU type {type_id}")]
    NoCapacity {
        /// The physical GPU (or the mdev parent).
        gpu: crate::pci::PciAddress,
        /// The type asked for.
        type_id: String,
        /// The device directory whose attributes say so.
        path: PathBuf,
    },
    /// A device did not end up on the driver it was being bound to.
    #[error("{} is bound to {} instead of {wanted}", path.display(), found.as_deref().unwrap_or("no driver"))]
    NotBound {
        /// The device directory.
        path: PathBuf,
        /// The driver wanted.
        wanted: String,
        /// The driver it has.
        found: Option<String>,
    },
    /// NVIDIA's driver did not grant the GPU's unbind lock: the GPU is in use.
    #[error("{} was not granted: the NVIDIA GPU is in use", path.display())]
    UnbindLockRefused {
        /// The `unbindLock` file.
        path: PathBuf,
    },
    /// A request the host cannot satisfy as asked (unknown type, no capacity, wrong backend).
    #[error("{message}")]
    Invalid {
        /// What is wrong, naming the device and what was asked.
        message: String,
    },
    /// No device answers to the name the caller gave.
    #[error("no GPU matches {name:?} under {}", path.display())]
    NoSuchDevice {
        /// The name given.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A name matched several devices.
    #[error("{name:?} matches several GPUs: {candidates}")]
    Ambiguous {
        /// The name given.
        name: String,
        /// The addresses it matched, comma separated.
        candidates: String,
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
    /// A file or directory of `vgpu`'s own (a definition, the lock, the audit log) could not be
    /// created, written, flushed, renamed or removed.
    #[error("cannot {action} {}", path.display())]
    Update {
        /// What was being done, as a verb: `create`, `write`, `flush`, `replace`, `remove`...
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The host lock is held by another `vgpuctl`.
    #[error(
        "another vgpuctl holds {} (waited {waited_ms} ms)",
        path.display()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// How long it was waited for.
        waited_ms: u128,
    },
}

impl Error {
    /// The error of writing `value` to `path`, classified by errno.
    pub(crate) fn from_write(path: &std::path::Path, value: &str, source: io::Error) -> Self {
        use nix::errno::Errno;
        let path = path.to_path_buf();
        let value = value.chars().take(80).collect();
        match source.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EBUSY) => Error::Busy {
                path,
                value,
                source,
            },
            Some(Errno::EPERM | Errno::EACCES) => Error::Denied {
                path,
                value,
                source,
            },
            Some(Errno::ENOENT | Errno::ENODEV | Errno::ENXIO) => Error::Gone {
                path,
                value,
                source,
            },
            Some(Errno::ENOSPC | Errno::EUSERS | Errno::EDQUOT) => Error::NoSpace {
                path,
                value,
                source,
            },
            _ => Error::Write {
                path,
                value,
                source,
            },
        }
    }

    /// The kernel's errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Read { source, .. }
            | Error::Busy { source, .. }
            | Error::Denied { source, .. }
            | Error::Gone { source, .. }
            | Error::NoSpace { source, .. }
            | Error::Write { source, .. }
            | Error::Update { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
