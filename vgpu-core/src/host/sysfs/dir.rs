//! [`SysDir`]: a sysfs directory whose files are opened relative to a directory held open.

use std::borrow::Cow;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{AT_FDCWD, OFlag};

use super::At;
use crate::error::Result;

/// A sysfs directory, named by its full path, whose files are opened relative to a directory
/// held open at or above it when there is one (`openat(2)`, `readlinkat(2)`, `fstatat(2)`).
///
/// Opened by path, `<root>/sys/bus/pci/devices/<addr>/mdev_supported_types/<type>/
/// available_instances` makes the kernel look up every component again and follow the
/// `devices/<addr>` link into `sys/devices/pci…`; relative to the VF's directory held open,
/// only the names below it are looked up. A GPU with 32 VFs each offering 29 types is a
/// thousand such files. Logs and errors name the full path either way.
///
/// Clones share the descriptor, which is closed with the last of them.
#[derive(Debug, Clone)]
pub(crate) struct SysDir {
    path: PathBuf,
    held: Option<Held>,
}

/// A directory held open at or above a [`SysDir`], and the path from it down to that one.
#[derive(Debug, Clone)]
struct Held {
    fd: Arc<OwnedFd>,
    below: PathBuf,
}

impl SysDir {
    /// The directory at `path`, read by its full path (until [held open](Self::held_open)).
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            held: None,
        }
    }

    /// Its full path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Its entry `name` (one name, or a relative path), reached from the same directory held
    /// open as this one.
    pub(crate) fn join(&self, name: &str) -> Self {
        self.join_as(name, self.path.join(name))
    }

    /// Its entry `name` (a link to another directory, say), reached from the same directory
    /// held open as this one, but named `path` in logs and errors: the name an operator knows
    /// it by.
    pub(crate) fn join_as(&self, name: &str, path: PathBuf) -> Self {
        Self {
            path,
            held: self.held.as_ref().map(|held| Held {
                fd: Arc::clone(&held.fd),
                below: held.below.join(name),
            }),
        }
    }

    /// The same directory, held open (`O_PATH`, looked up once): its files are then opened
    /// relative to it.
    ///
    /// A directory that cannot be opened stays read by path: what is read from it then fails
    /// as it would have (absent, not a directory, unreadable), and says so about the file
    /// that was wanted.
    pub(crate) fn held_open(self) -> Self {
        let by_path = self.clone();
        match self.opened() {
            Ok(Some(dir)) => dir,
            Ok(None) | Err(_) => by_path,
        }
    }

    /// The same directory held open ([`Self::held_open`]); `None` when it is absent or not a
    /// directory ([`super::is_absent`]). Any other failure (no permission, out of file
    /// descriptors) is [`HostError::Read`](crate::host::HostError::Read) with its path and errno.
    pub(crate) fn opened(self) -> crate::error::Result<Option<Self>> {
        let fd = match self.at("").open(OFlag::O_PATH | OFlag::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(err) if super::is_absent(&err) => return Ok(None),
            Err(err) => return Err(super::read_error(&self.path, err)),
        };
        Ok(Some(Self {
            path: self.path,
            held: Some(Held {
                fd: Arc::new(fd),
                below: PathBuf::new(),
            }),
        }))
    }

    /// Its entry `name` (or itself, for `""`), as the shared readers take it.
    fn at<'a>(&'a self, name: &'a str) -> At<'a> {
        let (dir, rel) = match &self.held {
            None if name.is_empty() => (AT_FDCWD, Cow::Borrowed(self.path.as_path())),
            None => (AT_FDCWD, Cow::Owned(self.path.join(name))),
            Some(held) => {
                let rel = match (held.below.as_os_str().is_empty(), name.is_empty()) {
                    (true, true) => Cow::Borrowed(Path::new(".")),
                    (false, true) => Cow::Borrowed(held.below.as_path()),
                    (true, false) => Cow::Borrowed(Path::new(name)),
                    (false, false) => Cow::Owned(held.below.join(name)),
                };
                (held.fd.as_fd(), rel)
            }
        };
        At {
            dir,
            rel,
            base: &self.path,
            name,
        }
    }

    /// Whether it exists (following links); a dangling link does not.
    pub(crate) fn exists(&self) -> bool {
        self.at("").exists()
    }

    /// Whether its entry `name` is a directory (following links).
    pub(crate) fn is_dir(&self, name: &str) -> bool {
        self.at(name).is_dir()
    }

    /// [`super::read_attr`] of its file `name`.
    pub(crate) fn read_attr(&self, name: &str) -> Result<Option<String>> {
        self.at(name).read_attr()
    }

    /// [`super::write_attr`] to its file `name`.
    pub(crate) fn write_attr(&self, name: &str, value: &str) -> Result<()> {
        self.at(name).write_attr(value)
    }

    /// [`super::read_parsed`] of its file `name`.
    pub(crate) fn read_parsed<T>(
        &self,
        name: &str,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        self.at(name).read_parsed(expected, parse)
    }

    /// [`super::link_name`] of its link `name`.
    pub(crate) fn link_name(&self, name: &str) -> Result<Option<String>> {
        self.at(name).link_name()
    }

    /// The sorted names in it; empty when it does not exist.
    pub(crate) fn names(&self) -> Result<Vec<String>> {
        self.at("").names(false)
    }

    /// The sorted names in it, which must exist.
    pub(crate) fn names_required(&self) -> Result<Vec<String>> {
        self.at("").names(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::fs;

    use super::*;
    use crate::error::{Error, HostError};

    /// `dir/device/` with a `vendor` attribute and a `driver` link.
    fn device_dir() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let device = root.path().join("device");
        fs::create_dir(&device).unwrap();
        fs::write(device.join("vendor"), "0x10de\n").unwrap();
        std::os::unix::fs::symlink("../drivers/nvidia", device.join("driver")).unwrap();
        (root, device)
    }

    #[test]
    fn held_open_reads_through_the_descriptor_after_a_rename() {
        let (root, device) = device_dir();
        let dir = SysDir::new(&device).held_open();
        fs::rename(&device, root.path().join("moved")).unwrap();
        assert_eq!(dir.read_attr("vendor").unwrap(), Some("0x10de".to_owned()));
    }

    #[test]
    fn by_path_read_after_a_rename_is_absent() {
        let (root, device) = device_dir();
        let dir = SysDir::new(&device);
        fs::rename(&device, root.path().join("moved")).unwrap();
        assert_eq!(dir.read_attr("vendor").unwrap(), None);
    }

    #[test]
    fn held_open_parse_error_names_the_full_path() {
        let (_root, device) = device_dir();
        let dir = SysDir::new(&device).held_open();
        let err = dir.read_parsed("vendor", "a count", |t| t.parse::<u32>().ok());
        assert!(
            matches!(&err, Err(Error::Host(HostError::Parse { path, value, .. }))
                if *path == device.join("vendor") && value == "0x10de"),
            "{err:?}"
        );
    }

    #[test]
    fn held_open_over_the_limit_is_too_large_naming_the_full_path() {
        let (_root, device) = device_dir();
        fs::write(
            device.join("big"),
            vec![b'x'; crate::host::sysfs::ATTR_LIMIT + 1],
        )
        .unwrap();
        let err = SysDir::new(&device).held_open().read_attr("big");
        assert!(
            matches!(&err, Err(Error::Host(HostError::TooLarge { path, .. })) if *path == device.join("big")),
            "{err:?}"
        );
    }

    #[test]
    fn held_open_joined_entry_reads_below_the_descriptor() {
        let (_root, device) = device_dir();
        fs::create_dir_all(device.join("mdev_supported_types/nvidia-558")).unwrap();
        fs::write(
            device.join("mdev_supported_types/nvidia-558/available_instances"),
            "1\n",
        )
        .unwrap();
        let ty = SysDir::new(&device)
            .held_open()
            .join("mdev_supported_types/nvidia-558");
        assert_eq!(
            ty.read_parsed("available_instances", "a count", |t| t.parse::<u32>().ok())
                .unwrap(),
            Some(1)
        );
    }

    #[test]
    fn held_open_missing_directory_reads_as_absent() {
        let (_root, device) = device_dir();
        let dir = SysDir::new(device.join("absent")).held_open();
        assert_eq!(
            (
                dir.exists(),
                dir.read_attr("vendor").unwrap(),
                dir.names().unwrap()
            ),
            (false, None, Vec::<String>::new())
        );
    }

    #[test]
    fn held_open_missing_required_directory_is_a_read_error_with_errno() {
        let (_root, device) = device_dir();
        let missing = device.join("absent");
        let err = SysDir::new(&missing)
            .held_open()
            .names_required()
            .unwrap_err();
        assert!(
            matches!(&err, Error::Host(HostError::Read { path, source })
                if *path == missing && source.raw_os_error() == Some(nix::libc::ENOENT)),
            "{err:?}"
        );
    }

    #[test]
    fn held_open_names_are_sorted_without_dot_entries() {
        let (_root, device) = device_dir();
        assert_eq!(
            SysDir::new(&device).held_open().names().unwrap(),
            vec!["driver".to_owned(), "vendor".to_owned()]
        );
    }

    #[test]
    fn held_open_link_name_is_the_target_name() {
        let (_root, device) = device_dir();
        assert_eq!(
            SysDir::new(&device)
                .held_open()
                .link_name("driver")
                .unwrap(),
            Some("nvidia".to_owned())
        );
    }

    #[test]
    fn held_open_is_dir_of_a_file_is_false() {
        let (_root, device) = device_dir();
        let dir = SysDir::new(&device).held_open();
        assert_eq!((dir.is_dir("vendor"), dir.exists()), (false, true));
    }
}
