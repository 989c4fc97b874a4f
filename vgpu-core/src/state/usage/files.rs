//! The ledger's files, each written durably:
//!
//! | file | what | how it is written |
//! |---|---|---|
//! | `raw/YYYY-MM.jsonl` | closed intervals, by the month of their end | appended, flushed |
//! | `open.json` | intervals still open, and the raw log's end when written | replaced atomically |
//! | `alive.json` | the last time this host was known to run | replaced atomically |
//! | `months/YYYY-MM.json` | a closed month's usage, folded | replaced atomically |
//!
//! A raw record is one line: the CRC-32 of its JSON in 8 hex digits, a space, the JSON. A line
//! cut off by a crash or a full disk, or changed on disk, fails its checksum and is skipped.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};
use crate::host::durable::{create_dirs, list_dir, update_error, write_atomic};
use crate::host::sysfs::{is_absent, read_error};
use crate::model::usage::{Interval, MonthSummary};

/// Mode of the ledger's files: usage is the operator's business, not every user's.
const FILE_MODE: u32 = 0o640;
/// Mode of its directories.
pub(super) const DIR_MODE: u32 = 0o750;

/// Where the raw log ended when `open.json` was written: records past it may close intervals
/// that `open.json` still lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LogEnd {
    /// The raw file's month, `YYYY-MM`; empty when there was none.
    pub(super) month: String,
    /// Its length then.
    pub(super) len: u64,
}

/// `open.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct OpenFile {
    /// The newest raw file and its length when this was written.
    pub(super) log_end: LogEnd,
    /// The open intervals.
    pub(super) intervals: Vec<Interval>,
}

/// What reading a raw file found.
#[derive(Debug, Default)]
pub(super) struct RawRead {
    pub(super) intervals: Vec<Interval>,
    /// Lines that failed their checksum or did not parse.
    pub(super) skipped: u64,
}

/// One interval as a raw line, newline included.
pub(super) fn encode(interval: &Interval, path: &Path) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(interval)
        .map_err(|err| update_error("encode a record for", path, err.into()))?;
    let mut line = format!("{:08x} ", crc32fast::hash(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

/// The interval of one raw line (without its newline); `None` when it fails its checksum or
/// does not parse.
fn decode(line: &[u8]) -> Option<Interval> {
    let (sum, json) = (line.get(..8)?, line.get(9..)?);
    if line.get(8) != Some(&b' ') {
        return None;
    }
    let sum = u32::from_str_radix(std::str::from_utf8(sum).ok()?, 16).ok()?;
    (crc32fast::hash(json) == sum)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

/// Reads the raw file at `path` from byte `from`: every whole record, and the count of lines
/// skipped (each named in a warning). A last line without its newline is a record being
/// written or cut off: it is skipped too. A missing file reads as empty.
pub(super) fn read_raw(path: &Path, from: u64) -> Result<RawRead> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if is_absent(&err) => return Ok(RawRead::default()),
        Err(err) => return Err(read_error(path, err)),
    };
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    let mut read = RawRead::default();
    let mut offset = start;
    for line in bytes[start..].split_inclusive(|b| *b == b'\n') {
        let whole = line.strip_suffix(b"\n");
        match whole.and_then(decode) {
            Some(interval) => read.intervals.push(interval),
            // A blank line ends a record cut off before it (see `append`).
            None if whole.is_some_and(<[u8]>::is_empty) => {}
            None => {
                read.skipped += 1;
                tracing::warn!(
                    path = %path.display(),
                    offset,
                    "usage record skipped: cut off or damaged"
                );
            }
        }
        offset += line.len();
    }
    Ok(read)
}

/// Appends `records` (whole lines) to the raw file at `path` in one `write(2)` and flushes it.
/// A record left without its newline by an earlier failure is ended first, and a short write
/// (a full disk) is cut off again. Returns the file's new length.
pub(super) fn append(path: &Path, records: &[u8]) -> Result<u64> {
    if let Some(dir) = path.parent() {
        create_dirs(dir, DIR_MODE)?;
    }
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|err| update_error("open", path, err))?;
    let before = file
        .metadata()
        .map_err(|err| update_error("read the length of", path, err))?
        .len();
    let mut bytes = Vec::with_capacity(records.len() + 1);
    if before > 0 && !ends_with_newline(&file, before, path)? {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(records);
    let written = loop {
        match (&file).write(&bytes) {
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            other => break other,
        }
    }
    .map_err(|err| update_error("append to", path, err))?;
    if written != bytes.len() {
        if let Err(err) = file.set_len(before) {
            tracing::error!(path = %path.display(), "cannot cut off a partial usage record: {err}");
        }
        let short = io::Error::new(
            io::ErrorKind::StorageFull,
            format!("short write: {written} of {} bytes", bytes.len()),
        );
        return Err(update_error("append to", path, short));
    }
    file.sync_all()
        .map_err(|err| update_error("flush", path, err))?;
    Ok(before + u64::try_from(bytes.len()).unwrap_or(u64::MAX))
}

fn ends_with_newline(file: &File, len: u64, path: &Path) -> Result<bool> {
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)
        .map_err(|err| update_error("read the end of", path, err))?;
    Ok(last[0] == b'\n')
}

/// The length of the file at `path`; 0 when there is none.
pub(super) fn length(path: &Path) -> Result<u64> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(meta.len()),
        Err(err) if is_absent(&err) => Ok(0),
        Err(err) => Err(read_error(path, err)),
    }
}

/// Reads a JSON file the ledger wrote; `None` when there is none.
pub(super) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if is_absent(&err) => return Ok(None),
        Err(err) => return Err(read_error(path, err)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|err| {
        StateError::Ledger {
            path: path.to_path_buf(),
            reason: err.to_string(),
        }
        .into()
    })
}

/// Replaces the JSON file at `path` with `value`, atomically and durably.
pub(super) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes =
        serde_json::to_vec(value).map_err(|err| update_error("encode", path, err.into()))?;
    write_atomic(path, &bytes)
}

/// The months of the `YYYY-MM.<ext>` files in `dir`, oldest first.
pub(super) fn months_in(dir: &Path, ext: &str) -> Result<Vec<String>> {
    let mut months: Vec<String> = list_dir(dir)?
        .into_iter()
        .filter_map(|(_, name)| {
            let month = name?.strip_suffix(ext)?.strip_suffix('.')?.to_owned();
            is_month(&month).then_some(month)
        })
        .collect();
    months.sort();
    Ok(months)
}

/// Whether `s` is `YYYY-MM`.
fn is_month(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7
        && b[4] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || c.is_ascii_digit())
}

/// The summary of a closed month, if there is one.
pub(super) fn read_month(dir: &Path, month: &str) -> Result<Option<MonthSummary>> {
    read_json(&dir.join(format!("{month}.json")))
}
