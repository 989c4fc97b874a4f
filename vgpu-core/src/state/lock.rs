//! The host-wide lock held by every `vgpuctl` command that changes the host.
//!
//! An exclusive `flock(2)` on `run/vgpu/lock`. The kernel releases it when the holder's last
//! file descriptor on it closes, including when the process is killed, so a crashed or
//! `SIGKILL`ed `vgpuctl` never leaves the host locked, and no stale lock file needs cleaning.
//! `flock` locks belong to an open file description: two `open`s in one process contend like two
//! processes do.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Result, StateError};
use crate::host::durable::{create_dirs, update_error};
use crate::host::paths::HostPaths;

/// The first pause between two attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// An exclusive lock on the host, released when dropped.
#[derive(Debug)]
pub(crate) struct HostLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl HostLock {
    /// `run/vgpu/lock` under the host root.
    pub(crate) fn path_for(paths: &HostPaths) -> PathBuf {
        paths.run().join("vgpu").join("lock")
    }

    /// Takes the exclusive lock on `run/vgpu/lock` (creating `run/vgpu`, mode 0700, and the
    /// file, mode 0600, as needed), trying again until `timeout` has passed.
    ///
    /// Fails with [`StateError::Locked`](crate::state::StateError::Locked) when another holder keeps it that long; `Duration::ZERO`
    /// tries once.
    pub(crate) fn acquire(paths: &HostPaths, timeout: Duration) -> Result<HostLock> {
        Self::acquire_watched(paths, timeout, &mut || {})
    }

    /// [`acquire`](Self::acquire), calling `busy` each time an attempt finds the lock held (a
    /// test releases the lock once another acquire waits).
    pub(super) fn acquire_watched(
        paths: &HostPaths,
        timeout: Duration,
        busy: &mut dyn FnMut(),
    ) -> Result<HostLock> {
        let path = Self::path_for(paths);
        if let Some(dir) = path.parent() {
            if let Some(run) = dir.parent() {
                create_dirs(run, 0o755)?;
            }
            create_dirs(dir, 0o700)?;
        }
        Self::take(path, timeout, busy)
    }

    /// Takes the exclusive lock on the file at `path`, whose directory exists, as
    /// [`acquire`](Self::acquire) does.
    pub(crate) fn acquire_file(path: PathBuf, timeout: Duration) -> Result<HostLock> {
        Self::take(path, timeout, &mut || {})
    }

    /// Both acquires: an attempt, then a pause that doubles, until `timeout` has passed.
    fn take(path: PathBuf, timeout: Duration, busy: &mut dyn FnMut()) -> Result<HostLock> {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut backoff = FIRST_BACKOFF;
        loop {
            // A fresh open file description for each attempt: a failed `Flock::lock` hands the
            // file back, but reopening also follows a lock file replaced meanwhile.
            let file = open_lock_file(&path)?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    tracing::debug!(path = %path.display(), "host lock taken");
                    return Ok(HostLock { _lock: lock, path });
                }
                Err((_, Errno::EWOULDBLOCK | Errno::EINTR)) => busy(),
                Err((_, errno)) => {
                    return Err(update_error("lock", &path, io::Error::from(errno)));
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StateError::Locked {
                    path,
                    waited_ms: now.duration_since(started).as_millis(),
                }
                .into());
            }
            std::thread::sleep(backoff.min(deadline - now));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// The lock file.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        tracing::debug!(path = %self.path.display(), "host lock released");
    }
}

fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|err| update_error("open", path, err))
}
