//! The simulator's error type, and the errno the simulated kernel answers with.

use std::path::PathBuf;

/// An errno (positive, as in `libc`).
pub(crate) type Errno = i32;

/// Errors of the simulator library.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No built-in profile has this name.
    #[error("unknown profile {0:?} (built-in: {names})", names = crate::Profile::names().join(", "))]
    UnknownProfile(String),
    /// A profile file could not be read.
    #[error("cannot read profile {path}")]
    ProfileRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A profile does not parse or is inconsistent.
    #[error("invalid profile {path}: {reason}")]
    ProfileInvalid {
        /// The file (`<builtin>/NAME.toml` for embedded ones).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The mount point could not be prepared.
    #[error("cannot prepare mount point {path}")]
    MountPoint {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// FUSE refused the mount.
    #[error("cannot mount the simulator at {path}")]
    Mount {
        /// The directory.
        path: PathBuf,
        /// The I/O error (its errno says why: EPERM without the right to mount).
        #[source]
        source: std::io::Error,
    },
    /// The simulator could not be unmounted (the detach failed, or the directory is still a
    /// mount point at the deadline), or whether it is still mounted cannot be told.
    #[error("cannot unmount the simulator at {path}")]
    Unmount {
        /// The directory.
        path: PathBuf,
        /// The I/O error (`EBUSY` when still mounted at the deadline).
        #[source]
        source: std::io::Error,
    },
    /// A control command was malformed or named something that does not exist.
    #[error("control command {line:?}: {reason}")]
    Control {
        /// The command line.
        line: String,
        /// What is wrong.
        reason: String,
    },
}
