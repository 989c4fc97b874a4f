//! Usage reports from the ledger's intervals and monthly summaries
//! ([`vgpu_model::usage`], which also holds the ledger's calendar): vGPU-seconds, frame-buffer
//! byte-seconds and intervals per tenant, domain, type or GPU, over a window.
//!
//! - A window is cut into pieces. A month that lies whole inside it and has a summary is read
//!   from the summary. The rest is read from raw intervals, each cut at the piece's bounds.
//! - An interval is counted once, in the piece that holds its start or the window's start,
//!   whichever is later.
//! - Times are milliseconds since the Unix epoch. Months are UTC calendar months.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::model::pci::PciAddress;
use crate::model::usage::{Interval, MonthSummary, Stamp, month_bounds, overlap, rfc3339};

/// What a report's rows are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// The domain's tenant.
    Tenant,
    /// The domain's name.
    Domain,
    /// The vGPU type's id.
    Type,
    /// The physical GPU.
    Gpu,
}

impl By {
    /// Its name, as `--by` takes it and JSON names the key field.
    pub fn name(self) -> &'static str {
        match self {
            By::Tenant => "tenant",
            By::Domain => "domain",
            By::Type => "type",
            By::Gpu => "gpu",
        }
    }
}

impl fmt::Display for By {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for By {
    type Err = UsageError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [By::Tenant, By::Domain, By::Type, By::Gpu]
            .into_iter()
            .find(|by| by.name() == s)
            .ok_or_else(|| UsageError::BadKey { text: s.to_owned() })
    }
}

/// What a report is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// The window's first millisecond.
    pub since_ms: i64,
    /// The millisecond after its last.
    pub until_ms: i64,
    /// The key of each row.
    pub by: By,
}

/// A refused report or time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// The window's start is not before its end.
    #[error("the window is empty: {since} is not before {until}")]
    Empty {
        /// The start, RFC 3339.
        since: String,
        /// The end, RFC 3339.
        until: String,
    },
    /// A bound falls inside a month whose raw intervals are no longer kept.
    #[error(
        "usage before {raw_from} is kept only as whole months: {month} cannot be cut; put the bound on a month's first instant"
    )]
    Compacted {
        /// The month the bound falls in, `YYYY-MM`.
        month: String,
        /// Where raw intervals begin, RFC 3339.
        raw_from: String,
    },
    /// A time that is neither RFC 3339 nor before now.
    #[error(
        "not an RFC 3339 time (2026-11-01T00:00:00Z) or a time before now (-30d, -12h, -90m, -45s, -2w)"
    )]
    BadTime {
        /// The text given.
        text: String,
    },
    /// A key other than `tenant`, `domain`, `type` or `gpu`.
    #[error("{text:?} is not tenant, domain, type or gpu")]
    BadKey {
        /// The text given.
        text: String,
    },
}

/// One row of a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What the rows are keyed by.
    pub by: By,
    /// The key's value: a tenant, a domain, a type id or a GPU's address.
    pub key: String,
    /// With [`By::Type`], the type's name when its intervals agree on one.
    pub type_name: Option<String>,
    /// vGPU-seconds held, to the millisecond.
    pub vgpu_seconds: f64,
    /// Frame-buffer byte-seconds held, rounded down.
    pub framebuffer_byte_seconds: u128,
    /// Intervals in the window.
    pub intervals: u64,
    /// Of those, the ones whose end is estimated.
    pub estimated: u64,
    /// Of those, the ones with no end yet: a domain holds the vGPU now, so a window that
    /// ends now grows with each report until it stops.
    pub open: u64,
}

impl Serialize for Row {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry(self.by.name(), &self.key)?;
        if self.by == By::Type {
            if let Some(name) = &self.type_name {
                map.serialize_entry("type_name", name)?;
            }
        }
        map.serialize_entry("vgpu_seconds", &self.vgpu_seconds)?;
        map.serialize_entry("framebuffer_byte_seconds", &self.framebuffer_byte_seconds)?;
        map.serialize_entry("intervals", &self.intervals)?;
        map.serialize_entry("estimated", &self.estimated)?;
        map.serialize_entry("open", &self.open)?;
        map.end()
    }
}

/// A usage report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    /// The window's start, RFC 3339 UTC with milliseconds.
    pub since: String,
    /// Its end.
    pub until: String,
    /// The key of each row.
    pub by: By,
    /// One row per key, sorted by key.
    pub rows: Vec<Row>,
}

/// Each tenant's usage since the ledger began: what `metrics` exports as counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantCounter {
    /// The tenant.
    pub tenant: String,
    /// vGPU-seconds held.
    pub vgpu_seconds: f64,
    /// Frame-buffer byte-seconds held, rounded down.
    pub framebuffer_byte_seconds: u128,
}

/// The sums of one key.
#[derive(Debug, Default)]
struct Sum {
    ms: u128,
    byte_ms: u128,
    intervals: u64,
    estimated: u64,
    open: u64,
    /// Every type name seen (`None` for an interval without one).
    names: BTreeSet<Option<String>>,
}

impl Sum {
    fn row(self, by: By, key: String) -> Row {
        let type_name = match self.names.len() {
            1 => self.names.into_iter().next().flatten(),
            _ => None,
        };
        Row {
            by,
            key,
            type_name,
            vgpu_seconds: self.ms as f64 / 1000.0,
            framebuffer_byte_seconds: self.byte_ms / 1000,
            intervals: self.intervals,
            estimated: self.estimated,
            open: self.open,
        }
    }
}

/// Parses a time: RFC 3339 (`2026-11-01T00:00:00Z`, any offset, fractions of a second), or
/// before `now_ms` by a count of `s`, `m`, `h`, `d` or `w` (`-30d`).
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64, UsageError> {
    let bad = || UsageError::BadTime {
        text: text.to_owned(),
    };
    if let Some(ago) = text.strip_prefix('-') {
        let split = ago.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (count, unit) = ago.split_at(split);
        let count: i64 = count.parse().map_err(|_| bad())?;
        let unit_ms: i64 = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return Err(bad()),
        };
        let back = count.checked_mul(unit_ms).ok_or_else(bad)?;
        return now_ms.checked_sub(back).ok_or_else(bad);
    }
    text.parse::<Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| bad())
}

/// The key of a holding for `by`.
fn key_of<'a>(
    by: By,
    tenant: &'a str,
    domain: &'a str,
    type_id: &'a str,
    gpu: PciAddress,
) -> std::borrow::Cow<'a, str> {
    match by {
        By::Tenant => tenant.into(),
        By::Domain => domain.into(),
        By::Type => type_id.into(),
        By::Gpu => gpu.to_string().into(),
    }
}

/// The sum of `key` in `sums`, made when missing; the key is copied only then.
fn sum_of<'s>(sums: &'s mut BTreeMap<String, Sum>, key: &str) -> &'s mut Sum {
    if !sums.contains_key(key) {
        sums.insert(key.to_owned(), Sum::default());
    }
    sums.get_mut(key).expect("inserted above")
}

/// A part of a window.
enum Piece<'a> {
    /// A whole month, from its summary.
    Month(&'a MonthSummary),
    /// From raw intervals: `[start, end)`.
    Raw(i64, i64),
}

/// Cuts `[since, until)` into pieces: the whole months with a summary, and the rest.
fn pieces<'a>(since: i64, until: i64, months: &'a [MonthSummary]) -> Vec<Piece<'a>> {
    let by_name: BTreeMap<&str, &MonthSummary> =
        months.iter().map(|m| (m.month.as_str(), m)).collect();
    let mut out: Vec<Piece<'a>> = Vec::new();
    let mut at = since;
    while at < until {
        let (name, start, end) = month_bounds(at);
        let whole = by_name
            .get(name.as_str())
            .filter(|_| start == at && end <= until);
        let next = end.min(until).max(at.saturating_add(1));
        match (whole, out.last_mut()) {
            (Some(summary), _) => out.push(Piece::Month(summary)),
            (None, Some(Piece::Raw(_, last_end))) if *last_end == at => *last_end = next,
            (None, _) => out.push(Piece::Raw(at, next)),
        }
        at = next;
    }
    out
}

/// The report of `query` from the raw intervals `raw` (open ones count up to `now`) and the
/// monthly summaries `months`. Raw intervals that ended before `raw_from_ms` may be gone: a
/// part of the window before it that no summary covers whole is an error.
pub fn report(
    query: &Query,
    raw: &[Interval],
    months: &[MonthSummary],
    raw_from_ms: i64,
    now: &Stamp,
) -> Result<UsageReport, UsageError> {
    let (since, until, by) = (query.since_ms, query.until_ms, query.by);
    if since >= until {
        return Err(UsageError::Empty {
            since: rfc3339(since),
            until: rfc3339(until),
        });
    }
    let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
    for piece in pieces(since, until, months) {
        match piece {
            Piece::Month(summary) => {
                let first = summary.start_ms == since;
                for row in &summary.rows {
                    let key = key_of(by, &row.tenant, &row.domain, &row.type_id, row.gpu);
                    let sum = sum_of(&mut sums, &key);
                    sum.ms += u128::from(row.vgpu_ms);
                    sum.byte_ms += row.framebuffer_byte_ms;
                    sum.intervals += row.began + if first { row.carried } else { 0 };
                    sum.estimated +=
                        row.began_estimated + if first { row.carried_estimated } else { 0 };
                    if by == By::Type {
                        sum.names.insert(row.type_name.clone());
                    }
                }
            }
            Piece::Raw(start, end) => {
                if start < raw_from_ms {
                    return Err(UsageError::Compacted {
                        month: month_bounds(start).0,
                        raw_from: rfc3339(raw_from_ms),
                    });
                }
                for interval in raw {
                    let span = interval.span_ms(now);
                    let ms = overlap(span, start, end);
                    if ms == 0 {
                        continue;
                    }
                    let h = &interval.holding;
                    let key = key_of(by, h.tenant_key(), &h.holder.domain, &h.type_id, h.gpu);
                    let sum = sum_of(&mut sums, &key);
                    sum.ms += ms;
                    sum.byte_ms += u128::from(h.framebuffer_bytes) * ms;
                    let counted_at = span.0.max(since);
                    if (start..end).contains(&counted_at) {
                        sum.intervals += 1;
                        sum.estimated += u64::from(interval.estimated);
                    }
                    // No end yet: a domain still holds it, counted once, in the last piece.
                    if interval.end.is_none() && end == until {
                        sum.open += 1;
                    }
                    if by == By::Type {
                        sum.names.insert(h.type_name.clone());
                    }
                }
            }
        }
    }
    let rows = sums
        .into_iter()
        .filter(|(_, sum)| sum.ms > 0 || sum.intervals > 0)
        .map(|(key, sum)| sum.row(by, key))
        .collect();
    Ok(UsageReport {
        since: rfc3339(since),
        until: rfc3339(until),
        by,
        rows,
    })
}

/// Each tenant's usage over all time: every summary, and the raw intervals outside the
/// summarised months (open ones up to `now`).
pub fn counters(raw: &[Interval], months: &[MonthSummary], now: &Stamp) -> Vec<TenantCounter> {
    let summarised: BTreeSet<(i64, i64)> = months.iter().map(|m| (m.start_ms, m.end_ms)).collect();
    let mut sums: BTreeMap<String, Sum> = BTreeMap::new();
    for row in months.iter().flat_map(|m| &m.rows) {
        let sum = sums.entry(row.tenant.clone()).or_default();
        sum.ms += u128::from(row.vgpu_ms);
        sum.byte_ms += row.framebuffer_byte_ms;
    }
    for interval in raw {
        let span = interval.span_ms(now);
        let mut ms = 0;
        let mut at = span.0;
        let sum = sum_of(&mut sums, interval.holding.tenant_key());
        while at < span.1 {
            let (_, start, end) = month_bounds(at);
            if !summarised.contains(&(start, end)) {
                ms += overlap(span, start, end);
            }
            at = end.max(at.saturating_add(1));
        }
        sum.ms += ms;
        sum.byte_ms += u128::from(interval.holding.framebuffer_bytes) * ms;
    }
    sums.into_iter()
        .map(|(tenant, sum)| TenantCounter {
            tenant,
            vgpu_seconds: sum.ms as f64 / 1000.0,
            framebuffer_byte_seconds: sum.byte_ms / 1000,
        })
        .collect()
}

/// Writes `report` as CSV (RFC 4180): a header row, then one line per row.
pub fn write_csv(report: &UsageReport, out: &mut dyn fmt::Write) -> fmt::Result {
    let typed = report.by == By::Type;
    let mut header = vec![report.by.name()];
    if typed {
        header.push("type_name");
    }
    header.extend([
        "vgpu_seconds",
        "framebuffer_byte_seconds",
        "intervals",
        "estimated",
        "open",
    ]);
    writeln!(out, "{}", header.join(","))?;
    for row in &report.rows {
        let mut fields = vec![csv_field(&row.key)];
        if typed {
            fields.push(csv_field(row.type_name.as_deref().unwrap_or_default()));
        }
        fields.extend([
            format!("{:.3}", row.vgpu_seconds),
            row.framebuffer_byte_seconds.to_string(),
            row.intervals.to_string(),
            row.estimated.to_string(),
            row.open.to_string(),
        ]);
        writeln!(out, "{}", fields.join(","))?;
    }
    Ok(())
}

/// `s` as one CSV field: quoted, with its quotes doubled, when it holds a comma, a quote or a
/// line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests;
