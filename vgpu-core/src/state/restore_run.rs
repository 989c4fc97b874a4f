//! The last `restore`'s time and outcome, `var/lib/vgpu/restore.json` under the state root:
//! what `vgpuctl metrics` reports as `vgpu_restore_last_run_timestamp_seconds` and
//! `vgpu_restore_last_success`. [`Manager::restore`](crate::Manager::restore) replaces it at
//! the end of each run, atomically and durably; a run for one device leaves it alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{HostError, Result};
use crate::host::HostPaths;
use crate::host::durable::write_atomic;
use crate::host::sysfs::{is_absent, read_error};
use crate::model::usage::Stamp;

/// One whole-host `restore`, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRun {
    /// When it ended, with the boot it ran in.
    pub finished: Stamp,
    /// Its steps.
    pub steps: u64,
    /// Its steps that failed.
    pub failed: u64,
    /// Why it stopped before its steps (the host lock not taken, say), when it did.
    pub error: Option<String>,
}

impl RestoreRun {
    /// Whether it ran to its end and no step failed.
    pub fn success(&self) -> bool {
        self.failed == 0 && self.error.is_none()
    }
}

/// `<state root>/var/lib/vgpu/restore.json`.
pub fn restore_run_path(paths: &HostPaths) -> PathBuf {
    paths.var().join("lib/vgpu/restore.json")
}

/// Replaces the record of the last run with `run`.
pub(crate) fn write_restore_run(paths: &HostPaths, run: &RestoreRun) -> Result<()> {
    let path = restore_run_path(paths);
    let bytes = serde_json::to_vec(run).map_err(|err| HostError::Update {
        action: "encode",
        path: path.clone(),
        source: err.into(),
    })?;
    write_atomic(&path, &bytes)
}

/// The last whole-host `restore`; `None` when none has run under this state root.
///
/// # Errors
///
/// The file cannot be read, or is not what `restore` writes ([`HostError::Parse`](crate::host::HostError::Parse)).
pub fn read_restore_run(paths: &HostPaths) -> Result<Option<RestoreRun>> {
    let path = restore_run_path(paths);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if is_absent(&err) => return Ok(None),
        Err(err) => return Err(read_error(&path, err)),
    };
    parse(&path, &bytes).map(Some)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<RestoreRun> {
    serde_json::from_slice(bytes).map_err(|_| {
        HostError::Parse {
            path: path.to_path_buf(),
            value: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
            expected: "the JSON restore writes",
        }
        .into()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed fixture step is a failed test
mod tests {
    use super::*;
    use crate::error::Error;

    fn paths() -> (tempfile::TempDir, HostPaths) {
        let dir = tempfile::tempdir().unwrap();
        let paths = HostPaths::new(dir.path()).with_state_root(dir.path());
        (dir, paths)
    }

    #[test]
    fn read_restore_run_without_a_file_is_none() {
        let (_dir, paths) = paths();
        assert_eq!(read_restore_run(&paths).unwrap(), None);
    }

    #[test]
    fn read_restore_run_reads_what_write_wrote() {
        let (_dir, paths) = paths();
        let run = RestoreRun {
            finished: Stamp {
                wall_ms: 1_700_000_000_500,
                boot: "b1".to_owned(),
                mono_ns: 7,
            },
            steps: 3,
            failed: 1,
            error: None,
        };
        write_restore_run(&paths, &run).unwrap();
        assert_eq!(read_restore_run(&paths).unwrap(), Some(run));
    }

    #[test]
    fn read_restore_run_of_other_text_is_a_parse_error() {
        let (_dir, paths) = paths();
        let path = restore_run_path(&paths);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{}").unwrap();
        let err = read_restore_run(&paths).unwrap_err();
        assert!(matches!(err, Error::Host(HostError::Parse { .. })), "{err}");
    }
}
