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
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
