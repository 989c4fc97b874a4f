//! Durable updates of `vgpu`'s own files (definitions, the lock, the audit log, driver
//! records): atomic replacement through a flushed temporary file, removal that survives a
//! crash, directories created and flushed entry by entry.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, HostError, Result};
use crate::host::sysfs::{is_absent, read_error};

/// Mode of files and their directories, as mdevctl creates them.
pub(crate) const FILE_MODE: u32 = 0o644;
/// Mode of directories.
pub(crate) const DIR_MODE: u32 = 0o755;

/// [`HostError::Update`](crate::host::HostError::Update) for `action` on `path`.
pub(crate) fn update_error(action: &'static str, path: &Path, source: io::Error) -> Error {
    HostError::Update {
        action,
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// The entries of `dir` not beginning with `.`, sorted by name, each with its name when that is
/// UTF-8; empty when `dir` does not exist.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<(PathBuf, Option<String>)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if is_absent(&err) => return Ok(Vec::new()),
        Err(err) => return Err(read_error(dir, err)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| read_error(dir, err))?;
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        found.push((entry.path(), name.into_string().ok()));
    }
    found.sort();
    tracing::trace!(path = %dir.display(), entries = found.len(), "listed");
    Ok(found)
}

/// Whether `path` is a directory, following links; `false` when it does not exist.
pub(crate) fn is_dir(path: &Path) -> Result<bool> {
    match fs::metadata(path) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(err) if is_absent(&err) => Ok(false),
        Err(err) => Err(read_error(path, err)),
    }
}

/// Whether anything (a file, a link, even a dangling one) is at `path`.
pub(crate) fn present(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(err) if is_absent(&err) => Ok(false),
        Err(err) => Err(read_error(path, err)),
    }
}

/// Flushes a directory's entries to disk, so that a rename or removal in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|file| file.sync_all())
        .map_err(|err| update_error("flush directory", dir, err))
}

/// Creates `dir` and its missing ancestors with `mode`, flushing each new entry to disk.
pub(crate) fn create_dirs(dir: &Path, mode: u32) -> Result<()> {
    if is_dir(dir)? {
        return Ok(());
    }
    // A relative path ends in the empty path, which is the working directory.
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dirs(parent, mode)?;
    }
    match DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {
            tracing::info!(path = %dir.display(), "created directory");
            sync_dir(parent.unwrap_or(Path::new(".")))
        }
        // Another process created it between the check and here.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && is_dir(dir)? => Ok(()),
        Err(err) => Err(update_error("create directory", dir, err)),
    }
}

/// Distinguishes the temporary files of concurrent writers within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` atomically and durably: a temporary file beside it is written
/// and flushed, renamed over it, and the directory is flushed.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(HostError::Update {
            action: "write",
            path: path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::InvalidInput),
        }
        .into());
    };
    create_dirs(dir, DIR_MODE)?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let temp = dir.join(temp_name);
    let written = write_new_file(&temp, bytes)
        .and_then(|()| fs::rename(&temp, path).map_err(|err| update_error("replace", path, err)));
    if let Err(err) = written {
        match fs::remove_file(&temp) {
            Ok(()) => {}
            Err(cleanup) if is_absent(&cleanup) => {}
            // The write's error is the one to report; a leftover hidden file is skipped by
            // readers, so say it once here.
            Err(cleanup) => {
                tracing::warn!(path = %temp.display(), error = %cleanup, "cannot remove temporary file");
            }
        }
        return Err(err);
    }
    tracing::info!(path = %path.display(), bytes = bytes.len(), "wrote");
    sync_dir(dir)
}

fn write_new_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|err| update_error("create", path, err))?;
    file.write_all(bytes)
        .map_err(|err| update_error("write", path, err))?;
    file.sync_all()
        .map_err(|err| update_error("flush", path, err))
}

/// Removes the file at `path` and flushes its directory; `false` when there was none.
pub(crate) fn remove_durably(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if is_absent(&err) => return Ok(false),
        Err(err) => return Err(update_error("remove", path, err)),
    }
    tracing::info!(path = %path.display(), "removed");
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(true)
}

/// Removes `dir` if it is empty, and flushes its parent.
pub(crate) fn remove_dir_if_empty(dir: &Path) -> Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => {
            tracing::info!(path = %dir.display(), "removed empty directory");
            match dir.parent() {
                Some(parent) => sync_dir(parent),
                None => Ok(()),
            }
        }
        // Not empty (another definition, or one written meanwhile), or already gone.
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::NotFound
            ) =>
        {
            Ok(())
        }
        Err(err) => Err(update_error("remove directory", dir, err)),
    }
}
