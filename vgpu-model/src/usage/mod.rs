//! The usage ledger's data: intervals during which one domain held one vGPU, and the monthly
//! summaries that old intervals are folded into. `vgpu-core` keeps them on disk; `vgpu-report`
//! sums them per tenant, domain, type or GPU.
//!
//! The ledger's calendar is here too: UTC months ([`month_bounds`], [`month_start`]), times in
//! RFC 3339 ([`rfc3339`]), and one closed month folded into its summary ([`fold_month`]).
//!
//! What is counted is allocation time: a vGPU held by a running domain, whether or not the
//! guest used its engines.

use std::collections::BTreeMap;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::VgpuHandle;
use crate::holder::Holder;
use crate::pci::PciAddress;

/// A point in time as the ledger records it: the wall clock, and the boot and the clock that a
/// wall-clock step cannot move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Wall-clock time, milliseconds since the Unix epoch (UTC).
    pub wall_ms: i64,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
    /// `CLOCK_BOOTTIME` in nanoseconds: it counts suspend and is never stepped.
    pub mono_ns: u64,
}

/// What a vGPU held by a domain is, as the ledger records it when the domain starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// The domain and its tenant.
    #[serde(flatten)]
    pub holder: Holder,
    /// The vGPU: an mdev UUID or a VF's address.
    pub vgpu: VgpuHandle,
    /// The physical GPU.
    pub gpu: PciAddress,
    /// The vGPU type's id (`nvidia-558`).
    pub type_id: String,
    /// The type's name (`NVIDIA H200-1-18C`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// The frame buffer allotted to the vGPU.
    pub framebuffer_bytes: u64,
    /// For a MIG-backed vGPU, its GPU instance profile (`1g.18gb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_profile: Option<String>,
}

impl Holding {
    /// The tenant as month rows and usage reports key it: its name, `""` for none.
    pub fn tenant_key(&self) -> &str {
        self.holder.tenant_name().unwrap_or_default()
    }
}

/// One domain holding one vGPU, from `started` to `stopped`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// Unique in the ledger.
    pub id: Uuid,
    /// What was held.
    #[serde(flatten)]
    pub holding: Holding,
    /// When the domain started with it.
    pub start: Stamp,
    /// When it stopped; `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Stamp>,
    /// Whether `end` is the last time the host was known to run it, after a crash or a power
    /// loss, rather than the stop itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Interval {
    /// The interval as wall-clock milliseconds `[start, end)`, with `now` for an open one.
    ///
    /// Within one boot the length is the difference of the monotonic clocks, so a wall-clock
    /// step moves the interval but never makes it shorter or negative. Across boots (an
    /// estimated end) it is the wall-clock difference, and never below zero.
    pub fn span_ms(&self, now: &Stamp) -> (i64, i64) {
        let end = self.end.as_ref().unwrap_or(now);
        let length = if end.boot == self.start.boot {
            i64::try_from(end.mono_ns.saturating_sub(self.start.mono_ns) / 1_000_000)
                .unwrap_or(i64::MAX)
        } else {
            end.wall_ms.saturating_sub(self.start.wall_ms).max(0)
        };
        (
            self.start.wall_ms,
            self.start.wall_ms.saturating_add(length),
        )
    }
}

/// The usage of one key (tenant, domain, type and GPU) within one closed month, folded from
/// its intervals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthRow {
    /// The tenant's name; `""` for domains without one.
    pub tenant: String,
    /// The domain's name.
    pub domain: String,
    /// The vGPU type's id.
    pub type_id: String,
    /// The type's name, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// The physical GPU.
    pub gpu: PciAddress,
    /// Milliseconds of vGPU held within the month.
    pub vgpu_ms: u64,
    /// Frame-buffer byte-milliseconds held within the month.
    pub framebuffer_byte_ms: u128,
    /// Intervals that began within the month.
    pub began: u64,
    /// Intervals that began before the month and ran into it.
    pub carried: u64,
    /// Of `began`, those with an estimated end.
    pub began_estimated: u64,
    /// Of `carried`, those with an estimated end.
    pub carried_estimated: u64,
}

/// One closed month of usage, folded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthSummary {
    /// The month, `YYYY-MM` (UTC).
    pub month: String,
    /// Its first millisecond.
    pub start_ms: i64,
    /// The first millisecond of the next month.
    pub end_ms: i64,
    /// One row per key.
    pub rows: Vec<MonthRow>,
    /// Damaged records skipped in the month's raw file when it was folded.
    #[serde(default)]
    pub skipped: u64,
}

/// `ms` as a timestamp, held within what `jiff` represents.
fn timestamp(ms: i64) -> Timestamp {
    let min = Timestamp::MIN.as_millisecond();
    let max = Timestamp::MAX.as_millisecond();
    Timestamp::from_millisecond(ms.clamp(min, max)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `ms` in RFC 3339, UTC, with milliseconds: `2026-11-30T01:02:03.456Z`.
pub fn rfc3339(ms: i64) -> String {
    timestamp(ms).strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The UTC month holding `ms`: its name (`YYYY-MM`), its first millisecond and the next
/// month's first millisecond.
pub fn month_bounds(ms: i64) -> (String, i64, i64) {
    let date = timestamp(ms).to_zoned(TimeZone::UTC).date();
    let first = Date::new(date.year(), date.month(), 1).unwrap_or(date);
    let start = |d: Date| {
        d.to_zoned(TimeZone::UTC)
            .map_or(i64::MAX, |z| z.timestamp().as_millisecond())
    };
    let next = first.checked_add(1.month()).map_or(i64::MAX, start);
    (
        format!("{:04}-{:02}", first.year(), first.month()),
        start(first),
        next,
    )
}

/// The first millisecond of `month` (`YYYY-MM`, UTC); `None` for a name that is not a month.
pub fn month_start(month: &str) -> Option<i64> {
    let (year, number) = month.split_once('-')?;
    let date = Date::new(year.parse().ok()?, number.parse().ok()?, 1).ok()?;
    let zoned = date.to_zoned(TimeZone::UTC).ok()?;
    Some(zoned.timestamp().as_millisecond())
}

/// The length of `[a, b)` within `[lo, hi)`, in milliseconds.
pub fn overlap((a, b): (i64, i64), lo: i64, hi: i64) -> u128 {
    let (from, to) = (a.max(lo), b.min(hi));
    u128::try_from(to.saturating_sub(from).max(0)).unwrap_or(0)
}

/// Folds the intervals of one closed month `[start_ms, end_ms)`, named `month`, into its
/// summary: one row per tenant, domain, type and GPU. Open intervals count up to `now`.
pub fn fold_month(
    start_ms: i64,
    end_ms: i64,
    month: &str,
    intervals: &[Interval],
    now: &Stamp,
) -> MonthSummary {
    type Key = (String, String, String, String);
    let mut rows: BTreeMap<Key, MonthRow> = BTreeMap::new();
    for interval in intervals {
        let span = interval.span_ms(now);
        let ms = overlap(span, start_ms, end_ms);
        if ms == 0 {
            continue;
        }
        let h = &interval.holding;
        let tenant = h.tenant_key();
        let key = (
            tenant.to_owned(),
            h.holder.domain.clone(),
            h.type_id.clone(),
            h.gpu.to_string(),
        );
        let row = rows.entry(key).or_insert_with(|| MonthRow {
            tenant: tenant.to_owned(),
            domain: h.holder.domain.clone(),
            type_id: h.type_id.clone(),
            type_name: h.type_name.clone(),
            gpu: h.gpu,
            vgpu_ms: 0,
            framebuffer_byte_ms: 0,
            began: 0,
            carried: 0,
            began_estimated: 0,
            carried_estimated: 0,
        });
        row.vgpu_ms += u64::try_from(ms).unwrap_or(u64::MAX);
        row.framebuffer_byte_ms += u128::from(h.framebuffer_bytes) * ms;
        let estimated = u64::from(interval.estimated);
        if span.0 >= start_ms {
            row.began += 1;
            row.began_estimated += estimated;
        } else {
            row.carried += 1;
            row.carried_estimated += estimated;
        }
    }
    MonthSummary {
        month: month.to_owned(),
        start_ms,
        end_ms,
        rows: rows.into_values().collect(),
        skipped: 0,
    }
}

#[cfg(test)]
mod tests;
