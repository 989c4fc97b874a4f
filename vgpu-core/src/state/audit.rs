//! The audit log: one JSON object per line in `var/log/vgpu/audit.jsonl`. A command that
//! changes the host writes a record when it starts (`result: "started"`), one per change it
//! makes (the device named by its handle), and one with its outcome:
//!
//! ```json
//! {"time":"2026-11-30T01:02:03.456Z","uid":0,"command":"vgpuctl create 0000:3b:00.0 --type T4-2Q","action":"create","device":"0000:3b:00.0","result":"started"}
//! {"time":"2026-11-30T01:02:03.541Z","uid":0,"command":"vgpuctl create 0000:3b:00.0 --type T4-2Q","action":"start","device":"6a8f0a3c-1111-4d2e-9b7a-000000000001","result":"ok"}
//! {"time":"2026-11-30T01:02:03.542Z","uid":0,"command":"vgpuctl create 0000:3b:00.0 --type T4-2Q","action":"create","device":"0000:3b:00.0","result":"ok"}
//! ```
//!
//! The file is opened with `O_APPEND` and each record is a single `write(2)` of one whole line,
//! so records of concurrent processes never interleave; each is flushed to disk before
//! [`AuditLog::record`] returns.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::host::durable::{create_dirs, update_error};
use crate::host::paths::HostPaths;

/// One change to the host, as recorded in the audit log. Field names are stable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, in RFC 3339 UTC with milliseconds: `2026-11-30T01:02:03.456Z`.
    pub time: String,
    /// The real user id of the process.
    pub uid: u32,
    /// The command line, as the user gave it.
    pub command: String,
    /// What was done (`create`, `start`, `define`, `sriov`, `bind`, `restore`...).
    pub action: String,
    /// The device it was done to (a PCI address, an mdev UUID, `<parent>/<uuid>`...).
    pub device: String,
    /// `ok`, or the error chain.
    pub result: String,
}

impl AuditEntry {
    /// An entry stamped with the current time and the process's real user id.
    pub fn now(
        command: impl Into<String>,
        action: impl Into<String>,
        device: impl Into<String>,
        result: impl Into<String>,
    ) -> Self {
        Self {
            time: rfc3339_utc(SystemTime::now()),
            uid: nix::unistd::getuid().as_raw(),
            command: command.into(),
            action: action.into(),
            device: device.into(),
            result: result.into(),
        }
    }
}

/// The append-only audit log of one host.
#[derive(Debug)]
pub(crate) struct AuditLog {
    file: File,
    path: PathBuf,
}

impl AuditLog {
    /// `var/log/vgpu/audit.jsonl` under the host root.
    pub(crate) fn path_for(paths: &HostPaths) -> PathBuf {
        paths.var().join("log").join("vgpu").join("audit.jsonl")
    }

    /// Opens the log for appending, creating `var/log/vgpu` (mode 0750) and the file (mode 0640)
    /// as needed.
    pub(crate) fn open(paths: &HostPaths) -> Result<AuditLog> {
        let path = Self::path_for(paths);
        if let Some(dir) = path.parent() {
            if let Some(log) = dir.parent() {
                create_dirs(log, 0o755)?;
            }
            create_dirs(dir, 0o750)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&path)
            .map_err(|err| update_error("open", &path, err))?;
        Ok(AuditLog { file, path })
    }

    /// The log file.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends `entry` as one line, in one `write(2)`, and flushes it to disk. A record is all
    /// or nothing: a short write (a full disk) is cut off again, and a record left without its
    /// newline by an earlier failure is ended before this one starts. Callers hold the host
    /// lock, so no other `vgpu` appends meanwhile.
    pub(crate) fn record(&self, entry: &AuditEntry) -> Result<()> {
        let mut line = serde_json::to_vec(entry)
            .map_err(|err| update_error("encode a record for", &self.path, err.into()))?;
        line.push(b'\n');
        let before = self
            .file
            .metadata()
            .map_err(|err| update_error("read the length of", &self.path, err))?
            .len();
        if before > 0 && !self.ends_with_newline(before)? {
            line.insert(0, b'\n');
        }
        let written = loop {
            // `write_all` could split the line into several writes; one call keeps it whole
            // under O_APPEND.
            match (&self.file).write(&line) {
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        }
        .map_err(|err| update_error("append to", &self.path, err))?;
        if written != line.len() {
            // Take the partial record back, so that the next one starts a line of its own.
            if let Err(err) = self.file.set_len(before) {
                tracing::error!(path = %self.path.display(), "cannot cut off a partial audit record: {err}");
            }
            let short = io::Error::new(
                io::ErrorKind::StorageFull,
                format!("short write: {written} of {} bytes", line.len()),
            );
            return Err(update_error("append to", &self.path, short));
        }
        self.file
            .sync_all()
            .map_err(|err| update_error("flush", &self.path, err))
    }
}

impl AuditLog {
    /// Whether the log's last byte (of `len`) is a newline.
    fn ends_with_newline(&self, len: u64) -> Result<bool> {
        use std::os::unix::fs::FileExt as _;
        let mut last = [0u8; 1];
        self.file
            .read_exact_at(&mut last, len - 1)
            .map_err(|err| update_error("read the end of", &self.path, err))?;
        Ok(last[0] == b'\n')
    }
}

/// `time` in RFC 3339, UTC, with milliseconds: `2026-11-30T01:02:03.456Z`.
pub(crate) fn rfc3339_utc(time: SystemTime) -> String {
    let millis: i128 = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_millis()).unwrap_or(i128::MAX),
        Err(before) => -i128::try_from(before.duration().as_millis()).unwrap_or(i128::MAX),
    };
    let ms = millis.rem_euclid(1000);
    let secs = millis.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i128::from(month <= 2);
    (year, month, day)
}
