//! Bounded, typed reads of kernel attribute files and links.
//!
//! sysfs content is untrusted input: every read is bounded, every parse is checked, and a file
//! that is absent is `Ok(None)` rather than an error, since most attributes are optional.
//!
//! A file is read by its full path, or relative to a directory held open ([`SysDir`]); both
//! go through the same code, which names the full path in logs and errors.

mod dir;

use std::borrow::Cow;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{AT_FDCWD, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use crate::error::{Error, HostError, Result};

pub(crate) use dir::SysDir;

/// The largest attribute file read. sysfs attributes are one page at most.
pub(crate) const ATTR_LIMIT: usize = 64 * 1024;

/// The largest `/proc` file read (`cpuinfo` on many-core hosts runs to hundreds of KiB).
pub(crate) const PROC_LIMIT: usize = 8 * 1024 * 1024;

/// Whether `err` says the path is not there (or a component of it is not a directory).
pub(crate) fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// [`HostError::Read`](crate::host::HostError::Read) for `path`.
pub(crate) fn read_error(path: &Path, source: io::Error) -> Error {
    HostError::Read {
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// Reads at most `limit` bytes of `path` as UTF-8; `None` when it does not exist.
pub(crate) fn read_bounded(path: &Path, limit: usize) -> Result<Option<String>> {
    let at = At::path(path);
    let file = match at.open(OFlag::O_RDONLY) {
        Ok(fd) => fs::File::from(fd),
        Err(err) if is_absent(&err) => return Ok(None),
        Err(err) => return Err(read_error(path, err)),
    };
    let mut bytes = Vec::new();
    at.read_rest(&file, &mut bytes, limit)?;
    at.decode(bytes).map(Some)
}

/// The first read of an attribute: a page, what kernfs shows of an attribute at most.
const PAGE: usize = 4096;

/// Reads an attribute file, without its trailing newline; `None` when it does not exist.
///
/// kernfs answers a read of a sysfs attribute from its `seq_file` buffer, filled up to what
/// was asked or to the end of the content, so a read shorter than asked is the end of the file
/// and no second `read(2)` is spent to find it (systemd's `read_virtual_file` reads sysfs the
/// same way). A first read that fills the page is followed by more, up to [`ATTR_LIMIT`].
pub(crate) fn read_attr(path: &Path) -> Result<Option<String>> {
    At::path(path).read_attr()
}

/// Reads an attribute file and parses it; `None` when it does not exist.
pub(crate) fn read_parsed<T>(
    path: &Path,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>> {
    At::path(path).read_parsed(expected, parse)
}

/// A file or directory to open: the directory its relative path starts from (`AT_FDCWD` for
/// a full path, or a directory held open), that path, and the full path logs and errors name.
struct At<'a> {
    dir: BorrowedFd<'a>,
    /// What is opened, relative to `dir`.
    rel: Cow<'a, Path>,
    /// The full path is `base` joined with `name` (`base` itself when `name` is empty), made
    /// only for a log line or an error.
    base: &'a Path,
    name: &'a str,
}

impl<'a> At<'a> {
    /// `path`, looked up whole.
    fn path(path: &'a Path) -> Self {
        Self {
            dir: AT_FDCWD,
            rel: Cow::Borrowed(path),
            base: path,
            name: "",
        }
    }

    /// The full path, for logs and errors.
    fn full(&self) -> Cow<'a, Path> {
        if self.name.is_empty() {
            Cow::Borrowed(self.base)
        } else {
            Cow::Owned(self.base.join(self.name))
        }
    }

    fn error(&self, err: io::Error) -> Error {
        read_error(&self.full(), err)
    }

    fn open(&self, flags: OFlag) -> io::Result<OwnedFd> {
        nix::fcntl::openat(
            self.dir,
            &*self.rel,
            flags | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)
    }

    /// [`write_attr`] to it.
    fn write_attr(&self, value: &str) -> Result<()> {
        let full = self.full();
        tracing::info!(path = %full.display(), value, "write");
        let mut file = self
            .open(OFlag::O_WRONLY)
            .map(fs::File::from)
            .map_err(|err| Error::from_write(&full, value, err))?;
        io::Write::write_all(&mut file, value.as_bytes())
            .map_err(|err| Error::from_write(&full, value, err))
    }

    /// `stat(2)` of it, following links.
    fn stat(&self) -> io::Result<FileStat> {
        nix::sys::stat::fstatat(self.dir, &*self.rel, nix::fcntl::AtFlags::empty())
            .map_err(io::Error::from)
    }

    fn exists(&self) -> bool {
        self.stat().is_ok()
    }

    fn is_dir(&self) -> bool {
        self.stat()
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
    }

    /// Reads the rest of `file` onto `bytes`, failing when it holds more than `limit` in all.
    fn read_rest(&self, mut file: &fs::File, bytes: &mut Vec<u8>, limit: usize) -> Result<()> {
        // Read one byte past the limit to tell "exactly at the limit" from "over it".
        let room = limit.saturating_sub(bytes.len()).saturating_add(1);
        let bound = u64::try_from(room).unwrap_or(u64::MAX);
        Read::by_ref(&mut file)
            .take(bound)
            .read_to_end(bytes)
            .map_err(|err| self.error(err))?;
        if bytes.len() > limit {
            return Err(HostError::TooLarge {
                path: self.full().into_owned(),
                limit,
            }
            .into());
        }
        Ok(())
    }

    fn decode(&self, bytes: Vec<u8>) -> Result<String> {
        tracing::trace!(path = %self.full().display(), bytes = bytes.len(), "read");
        String::from_utf8(bytes).map_err(|_| {
            HostError::NotUtf8 {
                path: self.full().into_owned(),
            }
            .into()
        })
    }

    /// [`read_attr`].
    fn read_attr(&self) -> Result<Option<String>> {
        let mut file = match self.open(OFlag::O_RDONLY) {
            Ok(fd) => fs::File::from(fd),
            Err(err) if is_absent(&err) => return Ok(None),
            Err(err) => return Err(self.error(err)),
        };
        let mut page = [0u8; PAGE];
        let first = loop {
            match file.read(&mut page) {
                Ok(n) => break n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(self.error(err)),
            }
        };
        let mut bytes = page[..first].to_vec();
        if first == PAGE {
            self.read_rest(&file, &mut bytes, ATTR_LIMIT)?;
        }
        let mut text = self.decode(bytes)?;
        text.truncate(text.trim_end_matches('\n').len());
        Ok(Some(text))
    }

    /// [`read_parsed`].
    fn read_parsed<T>(
        &self,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.read_attr()? {
            None => Ok(None),
            Some(text) => parse(text.trim())
                .map(Some)
                .ok_or_else(|| parse_error(&self.full(), &text, expected)),
        }
    }

    /// [`link_name`].
    fn link_name(&self) -> Result<Option<String>> {
        match nix::fcntl::readlinkat(self.dir, &*self.rel) {
            Ok(target) => {
                let target = PathBuf::from(target);
                match target.file_name() {
                    Some(name) => Ok(Some(name.to_string_lossy().into_owned())),
                    None => Err(parse_error(
                        &self.full(),
                        &target.to_string_lossy(),
                        "a link to a named object",
                    )),
                }
            }
            Err(errno) => {
                let err = io::Error::from(errno);
                if is_absent(&err) {
                    Ok(None)
                } else {
                    Err(self.error(err))
                }
            }
        }
    }

    /// The sorted names in the directory, without `.` and `..`; empty when it does not exist,
    /// unless it is `required`.
    fn names(&self, required: bool) -> Result<Vec<String>> {
        let dir = match self.open(OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
            Ok(fd) => nix::dir::Dir::from_fd(fd).map_err(|errno| self.error(errno.into()))?,
            Err(err) if is_absent(&err) && !required => return Ok(Vec::new()),
            Err(err) => return Err(self.error(err)),
        };
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|errno| self.error(errno.into()))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

/// A [`HostError::Parse`](crate::host::HostError::Parse) for `value` read from `path`, with the value cut to 80 characters.
pub(crate) fn parse_error(path: &Path, value: &str, expected: &'static str) -> Error {
    let value: String = value.chars().take(80).collect();
    HostError::Parse {
        path: path.to_path_buf(),
        value,
        expected,
    }
    .into()
}

/// The last component of the target of the link at `path`; `None` when there is no link.
///
/// The kernel expresses relations (`driver`, `iommu_group`, `physfn`, `mdev_type`) as links
/// whose last component is the name of the related object; the target need not exist.
pub(crate) fn link_name(path: &Path) -> Result<Option<String>> {
    At::path(path).link_name()
}

/// The sorted names in directory `path`; empty when it does not exist.
pub(crate) fn dir_names(path: &Path) -> Result<Vec<String>> {
    At::path(path).names(false)
}

/// The sorted names in directory `path`, which must exist.
pub(crate) fn dir_names_required(path: &Path) -> Result<Vec<String>> {
    At::path(path).names(true)
}

/// [`HostError::Missing`](crate::host::HostError::Missing) for `path`.
pub(crate) fn missing(path: &Path) -> Error {
    HostError::Missing {
        path: path.to_path_buf(),
    }
    .into()
}

/// Writes `value` to the attribute at `path` in one `write(2)`, as `echo -n value > path` does.
///
/// Kernel attributes act on each write, so the value goes out whole, unbuffered, and the
/// kernel's errno comes back classified ([`HostError::Busy`](crate::host::HostError::Busy), [`HostError::Denied`](crate::host::HostError::Denied), ...).
pub(crate) fn write_attr(path: &Path, value: &str) -> Result<()> {
    At::path(path).write_attr(value)
}

/// [`write_attr`] for a write the kernel may hold instead of answering: removing an mdev,
/// unbinding a driver, disabling VFs or clearing a vendor vGPU waits in the kernel for as long
/// as a process has the device open (`vfio_unregister_group_dev`), and unbinding `nvidia` for
/// as long as something uses the GPU. The write runs on a thread of its own; when it has not
/// returned within `within`, [`HostError::Timeout`](crate::host::HostError::Timeout) says what it was waiting for
/// (`waiting_for`, e.g. "the release of mediated device ... by the processes holding it
/// open") and that the write is still pending: the kernel carries it out once that happens,
/// and the thread ends then.
pub(crate) fn write_attr_within(
    path: &Path,
    value: &str,
    within: std::time::Duration,
    waiting_for: &str,
) -> Result<()> {
    let (sent, answer) = std::sync::mpsc::channel();
    let (target, text) = (path.to_path_buf(), value.to_owned());
    std::thread::Builder::new()
        .name("vgpu-write".to_owned())
        .spawn(move || {
            let result = write_attr(&target, &text);
            if sent.send(result).is_err() {
                tracing::warn!(path = %target.display(), value = text, "a write given up on has returned");
            }
        })
        .map_err(|err| Error::from_write(path, value, err))?;
    match answer.recv_timeout(within) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(HostError::Timeout {
            what: format!(
                "{waiting_for} (writing {value:?} stays pending in the kernel until then)"
            ),
            path: path.to_path_buf(),
            waited_ms: within.as_millis(),
        }
        .into()),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(Error::from_write(
            path,
            value,
            io::Error::other("the writing thread ended without an answer"),
        )),
    }
}

/// Polls `done` until it returns true or `timeout` passes; `Ok(false)` on timeout.
///
/// Used where the kernel finishes asynchronously (VFs appearing after `sriov_numvfs`). The
/// interval grows from 1 ms to 50 ms, so fast changes are seen fast and slow ones cost little.
pub(crate) fn poll_until(
    timeout: std::time::Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    let mut interval = std::time::Duration::from_millis(1);
    loop {
        if done()? {
            return Ok(true);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(interval.min(deadline - now));
        interval = (interval * 2).min(std::time::Duration::from_millis(50));
    }
}

/// Whether `path` exists (following links); a dangling link does not.
pub(crate) fn exists(path: &Path) -> bool {
    At::path(path).exists()
}

/// Whether `path` is a directory (following links).
pub(crate) fn is_dir(path: &Path) -> bool {
    At::path(path).is_dir()
}

/// `path` joined with `name`, for readability at call sites.
pub(crate) fn child(path: &Path, name: &str) -> PathBuf {
    path.join(name)
}

/// Parses `0x10de`-style hex as u16.
pub(crate) fn parse_hex_u16(text: &str) -> Option<u16> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    u16::from_str_radix(digits, 16).ok()
}

/// Parses `0x030200`-style hex as a 24-bit class code.
pub(crate) fn parse_class(text: &str) -> Option<u32> {
    let digits = text.strip_prefix("0x")?;
    if digits.len() != 6 {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_hex_u16_vendor_ok() {
        assert_eq!(parse_hex_u16("0x10de"), Some(0x10de));
    }

    #[test]
    fn parse_hex_u16_overlong_is_none() {
        assert_eq!(parse_hex_u16("0x10de0"), None);
    }

    #[test]
    fn parse_class_decimal_looking_is_hex() {
        assert_eq!(parse_class("0x060400"), Some(0x060400));
    }

    #[test]
    fn parse_class_without_prefix_is_none() {
        assert_eq!(parse_class("030000"), None);
    }

    #[test]
    fn read_bounded_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            read_bounded(&dir.path().join("absent"), 10)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn read_bounded_oversized_file_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, [b'x'; 11]).unwrap();
        assert!(matches!(
            read_bounded(&path, 10),
            Err(Error::Host(HostError::TooLarge { limit: 10, .. }))
        ));
    }

    #[test]
    fn read_bounded_file_at_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full");
        fs::write(&path, [b'x'; 10]).unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap(), Some("x".repeat(10)));
    }

    #[test]
    fn write_attr_within_answered_write_returns_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        fs::write(&path, "").unwrap();
        write_attr_within(&path, "1", std::time::Duration::from_secs(5), "nothing").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "1");
    }

    #[test]
    fn write_attr_within_failed_open_is_classified() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_attr_within(
            &dir.path().join("absent/attr"),
            "1",
            std::time::Duration::from_secs(5),
            "nothing",
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::Host(HostError::Gone { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn read_attr_strips_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        fs::write(&path, "nvidia-558\n").unwrap();
        assert_eq!(read_attr(&path).unwrap(), Some("nvidia-558".to_owned()));
    }

    #[test]
    fn read_attr_longer_than_a_page_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        fs::write(&path, "x".repeat(PAGE + 5)).unwrap();
        assert_eq!(read_attr(&path).unwrap().map(|t| t.len()), Some(PAGE + 5));
    }

    #[test]
    fn read_attr_over_the_limit_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        fs::write(&path, vec![b'x'; ATTR_LIMIT + 1]).unwrap();
        assert!(matches!(
            read_attr(&path),
            Err(Error::Host(HostError::TooLarge {
                limit: ATTR_LIMIT,
                ..
            }))
        ));
    }

    #[test]
    fn read_attr_at_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attr");
        fs::write(&path, vec![b'x'; ATTR_LIMIT]).unwrap();
        assert_eq!(read_attr(&path).unwrap().map(|t| t.len()), Some(ATTR_LIMIT));
    }

    #[test]
    fn read_attr_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_attr(&dir.path().join("absent")).unwrap(), None);
    }

    #[test]
    fn read_bounded_non_utf8_is_not_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_bounded(&path, 10),
            Err(Error::Host(HostError::NotUtf8 { .. }))
        ));
    }
}
