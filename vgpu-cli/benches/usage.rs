//! Benchmark: `usage` over a year of 10,000 domain starts a day, read from the ledger on disk.
//!
//! The ledger is filled month by month, as a host fills it: 500 domains of 4 tenants, each
//! start held 1 to 8 hours. At the first instant after each month the ledger settles, which
//! folds the month. Raw months are kept 400 days here, so that the peer below can read them.
//! All of it goes through `Manager`, with the benchmark's clock (`Manager::with_usage_clock`).
//! Then it measures, through `Manager::usage` and `vgpu_report::usage::report` (what
//! `vgpuctl usage` runs):
//!
//! 1. the year, by tenant: 11 folded months and the current month's raw intervals;
//! 2. the peer, in the same run: the same year from raw intervals alone, as a ledger without
//!    folding would report it;
//! 3. the all-time counters of `metrics`.
//!
//! `cargo bench -p vgpu-cli --bench usage` prints the numbers; it asserts nothing about speed.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Instant;

use uuid::Uuid;
use vgpu_core::model::VgpuHandle;
use vgpu_core::model::holder::{Holder, Tenant};
use vgpu_core::model::pci::PciAddress;
use vgpu_core::model::usage::{Holding, Interval, Stamp, month_bounds};
use vgpu_core::state::usage::Clock;
use vgpu_core::{HostPaths, Manager};
use vgpu_report::usage::{By, Query, counters, report};

const STARTS_PER_DAY: i64 = 10_000;
const DOMAINS: u64 = 500;
const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;
/// 2025-12-01T00:00:00Z: the year runs to 2026-11-30.
const YEAR_START: i64 = 1_764_547_200_000;

/// A clock the benchmark sets: one boot, the monotonic clock equal to the wall clock.
#[derive(Debug)]
struct SetClock(Mutex<i64>);

impl Clock for SetClock {
    fn now(&self) -> vgpu_core::Result<Stamp> {
        Ok(stamp(*self.0.lock().unwrap()))
    }
}

fn stamp(wall_ms: i64) -> Stamp {
    Stamp {
        wall_ms,
        boot: "bench".to_owned(),
        mono_ns: u64::try_from(wall_ms - YEAR_START + DAY_MS).unwrap() * 1_000_000,
    }
}

/// xorshift64*: the same year on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// The starts of `[from, to)`, each closed 1 to 8 hours later.
fn starts(rng: &mut Rng, from: i64, to: i64) -> Vec<Interval> {
    let days = (to - from) / DAY_MS;
    let step = DAY_MS / STARTS_PER_DAY;
    (0..days * STARTS_PER_DAY)
        .map(|n| {
            let domain = rng.below(DOMAINS);
            let start = from + n * step;
            let end = start + HOUR_MS * (1 + i64::try_from(rng.below(8)).unwrap());
            Interval {
                id: Uuid::from_u128(u128::try_from(start).unwrap() << 16 | u128::from(domain)),
                holding: Holding {
                    holder: Holder {
                        domain: format!("vm-{domain}"),
                        uuid: Uuid::from_u128(u128::from(domain)),
                        tenant: Some(Tenant::label(&format!("tenant-{}", domain % 4))),
                    },
                    vgpu: VgpuHandle::Vf(
                        PciAddress::new(0, 0x41, 1 + (domain / 8) as u8 % 30, (domain % 8) as u8)
                            .unwrap(),
                    ),
                    gpu: PciAddress::new(0, 0x41, 0, 0).unwrap(),
                    type_id: "nvidia-1061".to_owned(),
                    type_name: Some("NVIDIA L40S-2Q".to_owned()),
                    framebuffer_bytes: 2 << 30,
                    gpu_instance_profile: None,
                },
                start: stamp(start),
                end: Some(stamp(end)),
                estimated: false,
            }
        })
        .collect()
}

fn timed<T>(what: &str, runs: u32, mut f: impl FnMut() -> T) -> T {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let began = Instant::now();
        last = Some(f());
        times.push(began.elapsed());
    }
    times.sort();
    println!(
        "{what}: median {:.3} s, best {:.3} s ({runs} runs)",
        times[times.len() / 2].as_secs_f64(),
        times[0].as_secs_f64()
    );
    last.unwrap()
}

/// `usage` of `query` as `vgpuctl usage` reads it.
fn report_year(manager: &Manager, query: &Query) -> Vec<vgpu_report::usage::Row> {
    let c = manager.usage(query.since_ms, query.until_ms).unwrap();
    report(query, &c.raw, &c.months, c.raw_from_ms, &c.now)
        .unwrap()
        .rows
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(dir.path());
    std::fs::create_dir_all(paths.usage_toml().parent().unwrap()).unwrap();
    std::fs::write(paths.usage_toml(), "keep_raw_days = 400\n").unwrap();
    let clock = Arc::new(SetClock(Mutex::new(YEAR_START)));
    let manager = Manager::new(&paths, "bench").with_usage_clock(clock.clone());
    let mut rng = Rng(0x5eed);

    let filled = Instant::now();
    let mut month = month_bounds(YEAR_START);
    let mut total = 0;
    for _ in 0..11 {
        let closed = starts(&mut rng, month.1, month.2);
        total += closed.len();
        // The first instant after the month's last interval ended: the month folds then.
        *clock.0.lock().unwrap() = month.2 + 9 * HOUR_MS;
        manager.usage_import(&closed).unwrap();
        manager.usage_settle().unwrap();
        month = month_bounds(month.2);
    }
    let now = month.1 + 29 * DAY_MS;
    let current = starts(&mut rng, month.1, now - 9 * HOUR_MS);
    total += current.len();
    *clock.0.lock().unwrap() = now;
    manager.usage_import(&current).unwrap();
    println!(
        "filled: {total} intervals over 12 months in {:.1} s",
        filled.elapsed().as_secs_f64()
    );

    let year = Query {
        since_ms: YEAR_START,
        until_ms: now,
        by: By::Tenant,
    };
    let rows = timed("usage over the year, by tenant", 5, || {
        report_year(&manager, &year).len()
    });
    let raw = timed(
        "the peer: the same year from raw intervals alone",
        3,
        || {
            let c = manager.usage_from(YEAR_START).unwrap();
            let peer = report(&year, &c.raw, &[], i64::MIN, &c.now).unwrap();
            (c.raw.len(), peer.rows == report_year(&manager, &year))
        },
    );
    let tenants = timed("the counters of metrics", 5, || {
        let c = manager.usage(i64::MIN, i64::MAX).unwrap();
        counters(&c.raw, &c.months, &c.now).len()
    });
    println!(
        "rows {rows}, raw intervals the peer read {}, same rows {}, tenants {tenants}",
        raw.0, raw.1
    );
}
