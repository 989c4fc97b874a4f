//! The usage ledger's data: intervals during which one domain held one vGPU, and the monthly
//! summaries that old intervals are folded into. `vgpu-core` keeps them on disk; `vgpu-report`
//! sums them per tenant, domain, type or GPU.
//!
//! What is counted is allocation time: a vGPU held by a running domain, whether or not the
//! guest used its engines.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::VgpuHandle;
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
    /// The domain's tenant; `""` for a domain without one.
    pub tenant: String,
    /// The domain's name.
    pub domain: String,
    /// The domain's UUID.
    pub domain_uuid: Uuid,
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
    /// The tenant.
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
