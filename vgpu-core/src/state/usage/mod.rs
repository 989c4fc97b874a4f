//! The usage ledger under `var/lib/vgpu/usage/`: which domain held which vGPU, and when, for
//! billing and capacity planning. It counts allocation time, not work done on the GPU.
//!
//! - The hook opens an interval per vGPU at `started` and closes it at `stopped` (and
//!   `attach` and `detach` do the same for a running domain).
//! - Each stamp holds the wall clock, the boot id and `CLOCK_BOOTTIME`, so that a wall-clock
//!   step cannot make a length negative ([`Interval::span_ms`]).
//! - An interval left open by a crash or a power loss is closed at the next boot, at the last
//!   time the host was known to run (`alive.json`), and marked `estimated`.
//! - Closed months are folded into summaries; raw intervals are kept `keep_raw_days` days after
//!   their month ends (`etc/vgpu/usage.toml`, default 90).
//!
//! Every change is made under `usage/lock`, a lock of its own, so that a domain's start never
//! waits for a long host operation. The files are described in `files`.

mod files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{HostError, Result, StateError};
use crate::host::durable::{create_dirs, remove_durably};
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::VgpuHandle;
use crate::model::usage::{Holding, Interval, MonthSummary, Stamp, fold_month, month_bounds};
use crate::state::lock::HostLock;

use files::{LogEnd, OpenFile};

/// How long a ledger change waits for another to finish.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// Days raw intervals are kept after their month ends, unless `usage.toml` says otherwise.
pub const DEFAULT_KEEP_RAW_DAYS: u32 = 90;
const DAY_MS: i64 = 86_400_000;

/// Where time comes from. The ledger takes it as a parameter, so that tests give exact times.
pub trait Clock: std::fmt::Debug {
    /// Now.
    fn now(&self) -> Result<Stamp>;
}

/// The host's clocks: the wall clock, `proc/sys/kernel/random/boot_id` and `CLOCK_BOOTTIME`.
#[derive(Debug, Clone)]
pub struct HostClock {
    boot_id: PathBuf,
}

impl HostClock {
    /// The clocks of the host at `paths` (its boot id under its `proc/`).
    pub fn new(paths: &HostPaths) -> Self {
        Self {
            boot_id: paths.proc().join("sys/kernel/random/boot_id"),
        }
    }
}

impl Clock for HostClock {
    fn now(&self) -> Result<Stamp> {
        let boot = read_bounded(&self.boot_id, 64)?
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| HostError::Missing {
                path: self.boot_id.clone(),
            })?;
        let mono =
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_err(|errno| {
                HostError::Read {
                    path: PathBuf::from("CLOCK_BOOTTIME"),
                    source: errno.into(),
                }
            })?;
        let wall_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        };
        let mono_ns = u64::try_from(mono.tv_sec())
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(mono.tv_nsec()).unwrap_or(0));
        Ok(Stamp {
            wall_ms,
            boot,
            mono_ns,
        })
    }
}

/// `etc/vgpu/usage.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageConfig {
    /// Days raw intervals are kept after their month ends.
    #[serde(default = "default_keep")]
    pub keep_raw_days: u32,
}

fn default_keep() -> u32 {
    DEFAULT_KEEP_RAW_DAYS
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            keep_raw_days: DEFAULT_KEEP_RAW_DAYS,
        }
    }
}

impl UsageConfig {
    /// The host's configuration; the defaults when there is no file.
    pub fn load(paths: &HostPaths) -> Result<Self> {
        let path = paths.usage_toml();
        let Some(text) = read_bounded(&path, 64 * 1024)? else {
            return Ok(Self::default());
        };
        toml::from_str(&text).map_err(|err| {
            StateError::Config {
                at: err
                    .span()
                    .map(|span| crate::model::location::Location::of_offset(&text, span.start)),
                path,
                reason: err.message().to_owned(),
            }
            .into()
        })
    }
}

/// What the ledger holds for a report from some time on.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    /// Every interval that ended at or after the time asked for, and every open one.
    pub raw: Vec<Interval>,
    /// Every closed month's summary, oldest first.
    pub months: Vec<MonthSummary>,
    /// Raw intervals that ended before this may be gone; only whole summarised months are
    /// known before it.
    pub raw_from_ms: i64,
    /// Damaged records: in the raw files read, and in those folded into `months`.
    pub skipped: u64,
    /// When it was read.
    pub now: Stamp,
}

/// What [`Ledger::settle`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Intervals of an earlier boot closed as estimated.
    pub estimated: Vec<Interval>,
    /// Months folded into summaries.
    pub folded: Vec<String>,
    /// Months whose raw intervals were removed.
    pub removed: Vec<String>,
}

/// `raw_from.json`: what removing raw months left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct RawFrom {
    /// The end of the newest month removed.
    raw_from_ms: i64,
}

/// The usage ledger of one host.
pub struct Ledger<'a> {
    dir: PathBuf,
    clock: &'a dyn Clock,
    keep_raw_days: u32,
}

impl std::fmt::Debug for Ledger<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("dir", &self.dir).finish()
    }
}

impl<'a> Ledger<'a> {
    /// `var/lib/vgpu/usage`.
    pub fn dir(paths: &HostPaths) -> PathBuf {
        paths.var().join("lib/vgpu/usage")
    }

    /// The ledger of the host at `paths`, with time from `clock`.
    pub fn new(paths: &HostPaths, clock: &'a dyn Clock, config: &UsageConfig) -> Self {
        Self {
            dir: Self::dir(paths),
            clock,
            keep_raw_days: config.keep_raw_days,
        }
    }

    /// Opens an interval for each of `holdings`, unless its domain already has one open for
    /// that vGPU (libvirt may run a hook twice). Returns the intervals opened.
    pub(crate) fn begin(&self, holdings: Vec<Holding>) -> Result<Vec<Interval>> {
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        let mut open = self.settle_locked(&now)?.0;
        let mut opened = Vec::new();
        for holding in holdings {
            let held = open.intervals.iter().any(|i| {
                i.holding.holder.uuid == holding.holder.uuid && i.holding.vgpu == holding.vgpu
            });
            if !held {
                opened.push(Interval {
                    id: Uuid::new_v4(),
                    holding,
                    start: now.clone(),
                    end: None,
                    estimated: false,
                });
            }
        }
        if opened.is_empty() {
            return Ok(opened);
        }
        open.intervals.extend(opened.iter().cloned());
        crash_point()?;
        self.write_open(&open)?;
        Ok(opened)
    }

    /// Closes the open intervals of domain `domain`: all of them, or those of the vGPUs in
    /// `only`. Returns the intervals closed.
    pub(crate) fn end(&self, domain: Uuid, only: Option<&[VgpuHandle]>) -> Result<Vec<Interval>> {
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        let (mut open, _) = self.settle_locked(&now)?;
        let (mut closing, kept): (Vec<Interval>, Vec<Interval>) =
            open.intervals.drain(..).partition(|i| {
                i.holding.holder.uuid == domain && only.is_none_or(|o| o.contains(&i.holding.vgpu))
            });
        open.intervals = kept;
        if closing.is_empty() {
            return Ok(closing);
        }
        for interval in &mut closing {
            interval.end = Some(now.clone());
        }
        self.close(&mut open, &closing, &now)?;
        Ok(closing)
    }

    /// Appends intervals closed elsewhere, as a close appends its own: earlier records
    /// imported, or a benchmark's year of usage (`Manager::usage_import`). An open interval is refused. A month that is
    /// already folded keeps its summary: import a month before it closes.
    pub(crate) fn import(&self, closed: &[Interval]) -> Result<()> {
        if let Some(open) = closed.iter().find(|i| i.end.is_none()) {
            return Err(StateError::Ledger {
                path: self.dir.clone(),
                reason: format!(
                    "interval {} is not closed: only closed ones are imported",
                    open.id
                ),
            }
            .into());
        }
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        // Appended before the months they fall in are folded.
        let mut open = self.reconciled()?;
        self.close(&mut open, closed, &now)?;
        self.settle_locked(&now).map(drop)
    }

    /// Closes what an earlier boot left open, folds the closed months and removes raw months
    /// past their keeping, then records that the host runs now. Every other call does this
    /// first; `restore` calls it at boot.
    pub fn settle(&self) -> Result<Settled> {
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        Ok(self.settle_locked(&now)?.1)
    }

    /// What a report of the window `[since_ms, until_ms)` needs: every month's summary, and
    /// the raw intervals of the parts of the window that no summary covers whole (those that
    /// ended then or later), with the open ones up to now. Settles first.
    pub fn read_window(&self, since_ms: i64, until_ms: i64) -> Result<Contents> {
        let summaries = self.summaries()?;
        let mut from_ms = since_ms;
        if since_ms == i64::MIN {
            // All time: every month before the newest summary is summarised too, so raw
            // intervals are needed only from its end.
            if let Some(newest) = summaries.last() {
                from_ms = newest.end_ms;
            }
        } else {
            let summarised: BTreeSet<&str> = summaries.iter().map(|m| m.month.as_str()).collect();
            let mut at = month_bounds(since_ms);
            while at.1 == from_ms && at.2 <= until_ms && summarised.contains(at.0.as_str()) {
                from_ms = at.2;
                at = month_bounds(at.2);
            }
        }
        self.read(from_ms)
    }

    /// What a report from `from_ms` on needs: the raw intervals that ended then or later, the
    /// open ones (up to now), and every month's summary. Settles first.
    pub fn read(&self, from_ms: i64) -> Result<Contents> {
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        // A report is read even where the ledger cannot be written (a full disk): what is
        // open is then taken as it stands.
        let open = match self.settle_locked(&now) {
            Ok((open, _)) => open,
            Err(err) => {
                tracing::warn!("usage ledger not settled: {}", err.chain());
                self.reconciled()?
            }
        };
        let from_month = match from_ms {
            i64::MIN => String::new(),
            _ => month_bounds(from_ms).0,
        };
        let mut raw = Vec::new();
        let mut skipped = 0;
        for month in files::months_in(&self.raw_dir(), "jsonl")? {
            if month >= from_month {
                let read = files::read_raw(&self.raw_path(&month), 0)?;
                skipped += read.skipped;
                raw.extend(
                    read.intervals
                        .into_iter()
                        .filter(|i| i.span_ms(&now).1 >= from_ms),
                );
            }
        }
        raw.extend(open.intervals);
        let months = self.summaries()?;
        skipped += months
            .iter()
            .filter(|m| m.month < from_month)
            .map(|m| m.skipped)
            .sum::<u64>();
        let raw_from_ms = files::read_json::<RawFrom>(&self.dir.join("raw_from.json"))?
            .map_or(i64::MIN, |r| r.raw_from_ms);
        Ok(Contents {
            raw,
            months,
            raw_from_ms,
            skipped,
            now,
        })
    }

    /// The intervals open now.
    pub fn open_intervals(&self) -> Result<Vec<Interval>> {
        let _lock = self.lock()?;
        let now = self.clock.now()?;
        Ok(self.settle_locked(&now)?.0.intervals)
    }

    fn lock(&self) -> Result<HostLock> {
        create_dirs(&self.dir, files::DIR_MODE)?;
        HostLock::acquire_file(self.dir.join("lock"), LOCK_TIMEOUT)
    }

    fn raw_dir(&self) -> PathBuf {
        self.dir.join("raw")
    }

    fn raw_path(&self, month: &str) -> PathBuf {
        self.raw_dir().join(format!("{month}.jsonl"))
    }

    fn months_dir(&self) -> PathBuf {
        self.dir.join("months")
    }

    fn open_path(&self) -> PathBuf {
        self.dir.join("open.json")
    }

    fn alive_path(&self) -> PathBuf {
        self.dir.join("alive.json")
    }

    fn summaries(&self) -> Result<Vec<MonthSummary>> {
        let dir = self.months_dir();
        let mut out = Vec::new();
        for month in files::months_in(&dir, "json")? {
            if let Some(summary) = files::read_month(&dir, &month)? {
                out.push(summary);
            }
        }
        Ok(out)
    }

    /// Where the raw log ends now: its newest file and that file's length.
    fn log_end(&self) -> Result<LogEnd> {
        match files::months_in(&self.raw_dir(), "jsonl")?.pop() {
            Some(month) => Ok(LogEnd {
                len: files::length(&self.raw_path(&month))?,
                month,
            }),
            None => Ok(LogEnd::default()),
        }
    }

    fn write_open(&self, open: &OpenFile) -> Result<()> {
        let open = OpenFile {
            log_end: self.log_end()?,
            intervals: open.intervals.clone(),
        };
        files::write_json(&self.open_path(), &open)
    }

    /// Appends the closed intervals `closed` to the raw file of the month each ends in, then
    /// writes `open` (which no longer lists them).
    fn close(&self, open: &mut OpenFile, closed: &[Interval], now: &Stamp) -> Result<()> {
        let mut by_month: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for interval in closed {
            let month = month_bounds(interval.span_ms(now).1).0;
            let path = self.raw_path(&month);
            by_month
                .entry(month)
                .or_default()
                .extend(files::encode(interval, &path)?);
        }
        for (month, bytes) in &by_month {
            crash_point()?;
            #[cfg(test)]
            tests::torn_point(&self.raw_path(month), bytes)?;
            files::append(&self.raw_path(month), bytes)?;
        }
        crash_point()?;
        self.write_open(open)
    }

    /// Reads `open.json` without what the raw log closed after it was written (a crash
    /// between the two writes of a close), closes what an earlier boot left open, folds
    /// closed months and removes old raw ones, and records that the host runs at `now`.
    fn settle_locked(&self, now: &Stamp) -> Result<(OpenFile, Settled)> {
        let mut settled = Settled::default();
        let mut open = files::read_json::<OpenFile>(&self.open_path())?.unwrap_or_default();
        let listed = open.intervals.len();
        self.drop_closed(&mut open)?;
        if open.intervals.len() != listed {
            tracing::warn!(
                count = listed - open.intervals.len(),
                "usage intervals closed in the raw log but still listed open: dropped from the open list"
            );
            self.write_open(&open)?;
        }

        let alive = files::read_json::<Stamp>(&self.alive_path())?;
        let (stale, current): (Vec<Interval>, Vec<Interval>) = open
            .intervals
            .drain(..)
            .partition(|i| i.start.boot != now.boot);
        open.intervals = current;
        if !stale.is_empty() {
            let estimated: Vec<Interval> = stale
                .into_iter()
                .map(|mut i| {
                    let end = match &alive {
                        Some(a) if a.boot == i.start.boot && a.mono_ns >= i.start.mono_ns => {
                            a.clone()
                        }
                        // Nothing says it ran at all: it is closed where it began.
                        _ => i.start.clone(),
                    };
                    tracing::warn!(domain = i.holding.holder.domain, vgpu = %i.holding.vgpu, "usage interval of an earlier boot closed as estimated");
                    i.end = Some(end);
                    i.estimated = true;
                    i
                })
                .collect();
            self.close(&mut open, &estimated, now)?;
            settled.estimated = estimated;
        }

        settled.folded = self.fold(&open, now)?;
        settled.removed = self.remove_old(now)?;
        files::write_json(&self.alive_path(), now)?;
        Ok((open, settled))
    }

    /// `open.json` without what the raw log closed after it was written.
    fn reconciled(&self) -> Result<OpenFile> {
        let mut open = files::read_json::<OpenFile>(&self.open_path())?.unwrap_or_default();
        self.drop_closed(&mut open)?;
        Ok(open)
    }

    fn drop_closed(&self, open: &mut OpenFile) -> Result<()> {
        let closed = self.closed_since(&open.log_end)?;
        open.intervals.retain(|i| !closed.contains(&i.id));
        Ok(())
    }

    /// The ids of the intervals the raw log records after `end`.
    fn closed_since(&self, end: &LogEnd) -> Result<BTreeSet<Uuid>> {
        let mut ids = BTreeSet::new();
        for month in files::months_in(&self.raw_dir(), "jsonl")? {
            let from = match month.cmp(&end.month) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => end.len,
                std::cmp::Ordering::Greater => 0,
            };
            ids.extend(
                files::read_raw(&self.raw_path(&month), from)?
                    .intervals
                    .into_iter()
                    .map(|i| i.id),
            );
        }
        Ok(ids)
    }

    /// Folds every closed month that has usage and no summary yet. Returns the months folded.
    fn fold(&self, open: &OpenFile, now: &Stamp) -> Result<Vec<String>> {
        let (_, current_start, _) = month_bounds(now.wall_ms);
        let summarised: BTreeSet<String> = files::months_in(&self.months_dir(), "json")?
            .into_iter()
            .collect();
        let raw_months = files::months_in(&self.raw_dir(), "jsonl")?;
        // Usage begins with the oldest raw month or the oldest open interval.
        let first = raw_months
            .first()
            .map(|m| month_start(m))
            .into_iter()
            .chain(open.intervals.iter().map(|i| i.start.wall_ms))
            .min();
        let Some(first) = first else {
            return Ok(Vec::new());
        };
        let mut wanted = Vec::new();
        let mut at = month_bounds(first);
        while at.2 <= current_start {
            if !summarised.contains(&at.0) {
                wanted.push(at.clone());
            }
            at = month_bounds(at.2);
        }
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // Every interval that may overlap a wanted month: those that ended in it or later,
        // and the open ones.
        let oldest = wanted[0].0.clone();
        let mut intervals = open.intervals.clone();
        let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
        for month in raw_months.iter().filter(|m| **m >= oldest) {
            let read = files::read_raw(&self.raw_path(month), 0)?;
            skipped.insert(month.clone(), read.skipped);
            intervals.extend(read.intervals);
        }
        let mut folded = Vec::new();
        for (month, start, end) in wanted {
            let mut summary = fold_month(start, end, &month, &intervals, now);
            summary.skipped = skipped.get(&month).copied().unwrap_or(0);
            crash_point()?;
            files::write_json(&self.months_dir().join(format!("{month}.json")), &summary)?;
            folded.push(month);
        }
        Ok(folded)
    }

    /// Removes the raw months that are summarised and ended more than `keep_raw_days` ago.
    fn remove_old(&self, now: &Stamp) -> Result<Vec<String>> {
        let horizon = now
            .wall_ms
            .saturating_sub(i64::from(self.keep_raw_days).saturating_mul(DAY_MS));
        let summarised: BTreeSet<String> = files::months_in(&self.months_dir(), "json")?
            .into_iter()
            .collect();
        let mut removed = Vec::new();
        let mut raw_from = None;
        for month in files::months_in(&self.raw_dir(), "jsonl")? {
            let (_, _, end) = month_bounds(month_start(&month));
            if end <= horizon && summarised.contains(&month) {
                raw_from = Some(end);
                removed.push(month);
            }
        }
        if let Some(raw_from_ms) = raw_from {
            // Said before the files go: a crash in between leaves raw files that are no
            // longer needed, never a gap that is not said.
            let path = self.dir.join("raw_from.json");
            let old = files::read_json::<RawFrom>(&path)?.map_or(i64::MIN, |r| r.raw_from_ms);
            files::write_json(
                &path,
                &RawFrom {
                    raw_from_ms: raw_from_ms.max(old),
                },
            )?;
            for month in &removed {
                remove_durably(&self.raw_path(month))?;
            }
        }
        Ok(removed)
    }
}

/// A point where a test may stop the ledger as a crash would (`tests::crash_after`).
fn crash_point() -> Result<()> {
    #[cfg(test)]
    tests::crash_point()?;
    Ok(())
}

/// The first millisecond of `month` (`YYYY-MM`), as the ledger names its files.
fn month_start(month: &str) -> i64 {
    crate::model::usage::month_start(month).unwrap_or(0)
}

#[cfg(test)]
mod tests;
