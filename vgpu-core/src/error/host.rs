//! Errors of the kernel's files and devices: a read, a write the kernel refused (classified by
//! errno), a device that did not reach the state asked for, an update of `vgpu`'s own files.
//! They are the `host` module's; `crate::Error` wraps them ([`crate::Error::Host`]) and
//! keeps their kinds. They live here, in the lowest layer, so that `Error` can hold them.

use std::io;
use std::path::PathBuf;

use crate::model::ErrorKind;
use crate::model::pci::PciAddress;

/// A failure reading or changing the kernel's files and devices.
///
/// Every variant names the path it concerns; kernel errors keep their `io::Error` (and so their
/// errno) as the source. `Display` never repeats the source: print the chain once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A file or directory could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// What was read.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// A netlink uevent socket (the kernel's or udev's) could not be opened or read.
    #[error("cannot {what}")]
    Monitor {
        /// What was being done, with the subsystems.
        what: String,
        /// The answer of the socket.
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
    /// A wait ran out: the kernel accepted a write but the device did not reach the expected
    /// state in time, or a write the kernel holds until a device is released (an unbind, a
    /// removal) did not return in time and is still pending.
    #[error("{what} did not happen within {waited_ms} ms (watching {})", path.display())]
    Timeout {
        /// What was expected.
        what: String,
        /// What was watched.
        path: PathBuf,
        /// How long it was waited for.
        waited_ms: u128,
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
    /// The PF has no SR-IOV capability.
    #[error("{pf} has no SR-IOV capability (no {})", path.display())]
    NoSriov {
        /// The PCI function.
        pf: PciAddress,
        /// The `sriov_totalvfs` it lacks.
        path: PathBuf,
    },
    /// A VF count the PF cannot take.
    #[error(
        "{pf} cannot enable {asked} VFs: {}",
        if *all_or_none { format!("NVIDIA GPUs enable all {total} or none") } else { format!("it supports at most {total}") }
    )]
    BadVfCount {
        /// The PF.
        pf: PciAddress,
        /// The count asked for.
        asked: u32,
        /// `sriov_totalvfs`.
        total: u32,
        /// Whether only 0 and `total` are allowed (NVIDIA vGPU PFs).
        all_or_none: bool,
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
}

impl HostError {
    /// The category a caller acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            HostError::Gone { .. } => ErrorKind::NotFound,
            HostError::NoSpace { .. } => ErrorKind::NoCapacity,
            HostError::Busy { .. } | HostError::UnbindLockRefused { .. } => ErrorKind::Busy,
            HostError::Denied { .. } => ErrorKind::Permission,
            HostError::NoSriov { .. } | HostError::BadVfCount { .. } => ErrorKind::BadInput,
            HostError::Read { .. }
            | HostError::Monitor { .. }
            | HostError::Missing { .. }
            | HostError::DanglingLink { .. }
            | HostError::TooLarge { .. }
            | HostError::NotUtf8 { .. }
            | HostError::Parse { .. }
            | HostError::Format { .. }
            | HostError::Write { .. }
            | HostError::Timeout { .. }
            | HostError::NotBound { .. }
            | HostError::Update { .. } => ErrorKind::HostFault,
        }
    }

    /// The error of writing `value` to `path`, classified by errno.
    pub(crate) fn from_write(path: &std::path::Path, value: &str, source: io::Error) -> Self {
        use nix::errno::Errno;
        let path = path.to_path_buf();
        let value = value.chars().take(80).collect();
        match source.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EBUSY) => HostError::Busy {
                path,
                value,
                source,
            },
            Some(Errno::EPERM | Errno::EACCES) => HostError::Denied {
                path,
                value,
                source,
            },
            Some(Errno::ENOENT | Errno::ENODEV | Errno::ENXIO) => HostError::Gone {
                path,
                value,
                source,
            },
            Some(Errno::ENOSPC | Errno::EUSERS | Errno::EDQUOT) => HostError::NoSpace {
                path,
                value,
                source,
            },
            _ => HostError::Write {
                path,
                value,
                source,
            },
        }
    }

    /// The kernel's errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            HostError::Read { source, .. }
            | HostError::Monitor { source, .. }
            | HostError::Busy { source, .. }
            | HostError::Denied { source, .. }
            | HostError::Gone { source, .. }
            | HostError::NoSpace { source, .. }
            | HostError::Write { source, .. }
            | HostError::Update { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
