//! The ledger with an injected clock: exact lengths, reboots, crashes at every point of a
//! change, and months folded and removed.

use std::cell::Cell;
use std::path::Path;
use std::sync::Mutex;

use uuid::Uuid;

use super::*;

use crate::error::{Error, StateError};
use crate::model::holder::{Holder, Tenant};
use crate::model::pci::PciAddress;

thread_local! {
    /// The crash points the ledger passes before it stops as a crash would; `None`: never.
    static CRASH: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Runs `f` with the ledger stopped at its `points`-th crash point from now; no point stops
/// it after `f`.
fn crash_after<T>(points: u32, f: impl FnOnce() -> T) -> T {
    CRASH.set(Some(points));
    let out = f();
    CRASH.set(None);
    out
}

/// Whether this crash point stops the ledger; counts it down otherwise.
fn crashes_here() -> bool {
    match CRASH.get() {
        Some(0) => {
            CRASH.set(None);
            true
        }
        Some(left) => {
            CRASH.set(Some(left - 1));
            false
        }
        None => false,
    }
}

fn crash() -> Error {
    Error::State(StateError::Ledger {
        path: PathBuf::from("(crash)"),
        reason: "stopped as a crash would".to_owned(),
    })
}

/// The ledger's crash point ([`super::crash_point`]).
pub(super) fn crash_point() -> Result<()> {
    if crashes_here() {
        return Err(crash());
    }
    Ok(())
}

/// A point where the ledger's append may be cut off half-way, as a crash in the write would.
pub(super) fn torn_point(path: &Path, bytes: &[u8]) -> Result<()> {
    if crashes_here() {
        files::append(path, &bytes[..bytes.len() / 2])?;
        return Err(crash());
    }
    Ok(())
}

/// 2026-11-30T23:59:00Z.
const NOV_30_2359: i64 = 1_796_083_140_000;
/// 2026-12-01T00:00:00Z.
const DEC_1: i64 = 1_796_083_200_000;

#[derive(Debug)]
struct FakeClock(Mutex<Stamp>);

impl FakeClock {
    fn at(wall_ms: i64, boot: &str) -> Self {
        Self(Mutex::new(Stamp {
            wall_ms,
            boot: boot.to_owned(),
            mono_ns: 1_000_000_000,
        }))
    }

    /// Moves both clocks on by `ms`.
    fn advance(&self, ms: i64) {
        let mut now = self.0.lock().unwrap();
        now.wall_ms += ms;
        now.mono_ns += u64::try_from(ms).unwrap() * 1_000_000;
    }

    /// Steps the wall clock alone, as `date -s` or an NTP step does.
    fn step_wall(&self, ms: i64) {
        self.0.lock().unwrap().wall_ms += ms;
    }

    /// A new boot: another boot id, the monotonic clock from zero.
    fn reboot(&self, boot: &str, after_ms: i64) {
        let mut now = self.0.lock().unwrap();
        now.wall_ms += after_ms;
        now.boot = boot.to_owned();
        now.mono_ns = 5_000_000_000;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Result<Stamp> {
        Ok(self.0.lock().unwrap().clone())
    }
}

fn holding(domain: u128, tenant: &str, vf: u8) -> Holding {
    Holding {
        holder: Holder {
            domain: format!("vm{domain}"),
            uuid: Uuid::from_u128(domain),
            tenant: Some(tenant).filter(|t| !t.is_empty()).map(Tenant::label),
        },
        vgpu: VgpuHandle::Vf(PciAddress::new(0, 0x41, 0, vf).unwrap()),
        gpu: PciAddress::new(0, 0x41, 0, 0).unwrap(),
        type_id: "nvidia-1067".to_owned(),
        type_name: Some("NVIDIA L40S-4Q".to_owned()),
        framebuffer_bytes: 4 << 30,
        gpu_instance_profile: None,
    }
}

/// The closed intervals of `contents`, as (domain, length in ms, estimated).
fn closed(contents: &Contents) -> Vec<(String, i64, bool)> {
    let mut out: Vec<_> = contents
        .raw
        .iter()
        .filter(|i| i.end.is_some())
        .map(|i| {
            let (start, end) = i.span_ms(&contents.now);
            (i.holding.holder.domain.clone(), end - start, i.estimated)
        })
        .collect();
    out.sort();
    out
}

fn setup() -> (tempfile::TempDir, HostPaths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(dir.path());
    (dir, paths)
}

#[test]
fn an_interval_lasts_what_the_monotonic_clock_says_across_a_wall_clock_step() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    let opened = ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    clock.advance(60_000);
    clock.step_wall(-3_600_000);
    clock.advance(1_500);
    let ended = ledger.end(Uuid::from_u128(1), None).unwrap();

    let contents = ledger.read(DEC_1 - DAY_MS).unwrap();
    assert_eq!(
        (
            opened.len(),
            ended.iter().map(|i| i.id).collect::<Vec<_>>(),
            closed(&contents),
            contents.raw[0].span_ms(&contents.now),
        ),
        (
            1,
            vec![opened[0].id],
            vec![("vm1".to_owned(), 61_500, false)],
            (DEC_1, DEC_1 + 61_500),
        )
    );
}

#[test]
fn begin_twice_for_one_vgpu_opens_one_interval_and_end_closes_only_what_is_named() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    ledger
        .begin(vec![holding(1, "acme", 1), holding(1, "acme", 2)])
        .unwrap();
    let again = ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    clock.advance(10_000);
    let first = holding(1, "acme", 1).vgpu;
    let detached = ledger.end(Uuid::from_u128(1), Some(&[first])).unwrap();
    clock.advance(5_000);
    let rest = ledger.end(Uuid::from_u128(1), None).unwrap();
    let none = ledger.end(Uuid::from_u128(1), None).unwrap();

    let contents = ledger.read(DEC_1).unwrap();
    let lengths: Vec<i64> = contents
        .raw
        .iter()
        .map(|i| {
            let (a, b) = i.span_ms(&contents.now);
            b - a
        })
        .collect();
    assert_eq!(
        (again.len(), detached.len(), rest.len(), none.len(), lengths),
        (0, 1, 1, 0, vec![10_000, 15_000])
    );
}

#[test]
fn a_reboot_closes_the_open_interval_at_the_last_time_the_host_was_known_to_run() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    clock.advance(30_000);
    // A scrape: the host is known to run now.
    ledger.settle().unwrap();
    clock.advance(20_000);
    // Power lost; the host comes back an hour later.
    clock.reboot("boot-b", 3_600_000);
    let settled = ledger.settle().unwrap();
    let again = ledger.settle().unwrap();

    let contents = ledger.read(DEC_1).unwrap();
    assert_eq!(
        (
            settled.estimated.len(),
            again.estimated.len(),
            closed(&contents),
            contents.raw.iter().filter(|i| i.end.is_none()).count(),
        ),
        (1, 0, vec![("vm1".to_owned(), 30_000, true)], 0)
    );
}

/// Kill -9 at every point of a close: the interval closed before is there once; the one
/// being closed is closed once or still open, and closing it again after the crash (as
/// `release` does) leaves it closed exactly once. A record cut off half-way is skipped and
/// counted.
#[test]
fn a_crash_at_every_point_of_a_close_loses_nothing_and_counts_nothing_twice() {
    let mut outcomes = Vec::new();
    for point in 0.. {
        let (_dir, paths) = setup();
        let clock = FakeClock::at(DEC_1, "boot-a");
        let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
        ledger
            .begin(vec![holding(1, "acme", 1), holding(2, "globex", 2)])
            .unwrap();
        clock.advance(1_000);
        ledger.end(Uuid::from_u128(1), None).unwrap();
        clock.advance(1_000);
        let crashed = crash_after(point, || ledger.end(Uuid::from_u128(2), None)).is_err();

        // Another process, after the crash.
        let after = Ledger::new(&paths, &clock, &UsageConfig::default());
        let open_after_crash = after.open_intervals().unwrap().len();
        clock.advance(1_000);
        after.end(Uuid::from_u128(2), None).unwrap();
        let contents = after.read(DEC_1).unwrap();
        let mut ids: Vec<Uuid> = contents.raw.iter().map(|i| i.holding.holder.uuid).collect();
        ids.sort();
        assert_eq!(
            ids,
            vec![Uuid::from_u128(1), Uuid::from_u128(2)],
            "point {point}"
        );
        outcomes.push((crashed, open_after_crash, contents.skipped));
        if !crashed {
            break;
        }
    }
    // The crash points of a close: before the append, in it (a torn record), before
    // `open.json` is replaced; then none.
    assert_eq!(
        outcomes,
        vec![(true, 1, 0), (true, 1, 1), (true, 0, 0), (false, 0, 0)]
    );
}

#[test]
fn a_crash_before_open_json_is_written_opens_nothing() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    let crashed = crash_after(0, || ledger.begin(vec![holding(1, "acme", 1)])).is_err();
    let opened = ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    assert_eq!((crashed, opened.len()), (true, 1));
}

/// A closed month is folded at the first call after it ends; with no raw days kept, its raw
/// file goes, and what is known before it is said.
#[test]
fn a_closed_month_is_folded_and_its_raw_intervals_removed_after_keeping() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(NOV_30_2359, "boot-a");
    let config = UsageConfig { keep_raw_days: 0 };
    let ledger = Ledger::new(&paths, &clock, &config);
    ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    clock.advance(30_000);
    ledger.end(Uuid::from_u128(1), None).unwrap();
    // Runs across midnight into December.
    ledger.begin(vec![holding(2, "globex", 2)]).unwrap();
    clock.advance(60_000);
    let settled = ledger.settle().unwrap();
    let again = ledger.settle().unwrap();
    let contents = ledger.read(DEC_1).unwrap();
    let rows: Vec<(String, u64, u64, u64)> = contents.months[0]
        .rows
        .iter()
        .map(|r| (r.tenant.clone(), r.vgpu_ms, r.began, r.carried))
        .collect();

    assert_eq!(
        (
            settled.folded,
            settled.removed,
            again.folded.len(),
            contents.months.len(),
            rows,
            contents.raw_from_ms,
            contents.raw.len(),
        ),
        (
            vec!["2026-11".to_owned()],
            vec!["2026-11".to_owned()],
            0,
            1,
            vec![
                ("acme".to_owned(), 30_000, 1, 0),
                ("globex".to_owned(), 30_000, 1, 0)
            ],
            DEC_1,
            1,
        )
    );
}

#[test]
fn a_damaged_open_json_is_an_error_naming_it() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    ledger.begin(vec![holding(1, "acme", 1)]).unwrap();
    let open = Ledger::dir(&paths).join("open.json");
    std::fs::write(&open, b"{\"log_end\":").unwrap();
    let err = ledger.end(Uuid::from_u128(1), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "usage ledger {}: EOF while parsing a value at line 1 column 11",
            open.display()
        )
    );
}

#[test]
fn usage_toml_with_an_unknown_key_is_refused_with_its_position() {
    let (_dir, paths) = setup();
    let path = paths.usage_toml();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "keep_raw_days = 30\nkeep = 1\n").unwrap();
    let err = UsageConfig::load(&paths).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2:1: unknown field `keep`, expected `keep_raw_days`",
            path.display()
        )
    );
}

#[test]
fn import_appends_closed_intervals_and_refuses_an_open_one() {
    let (_dir, paths) = setup();
    let clock = FakeClock::at(DEC_1, "boot-a");
    let ledger = Ledger::new(&paths, &clock, &UsageConfig::default());
    let done = Interval {
        id: Uuid::from_u128(7),
        holding: holding(1, "acme", 1),
        start: Stamp {
            wall_ms: DEC_1 - 10_000,
            boot: "boot-a".to_owned(),
            mono_ns: 0,
        },
        end: Some(Stamp {
            wall_ms: DEC_1 - 4_000,
            boot: "boot-a".to_owned(),
            mono_ns: 6_000_000_000,
        }),
        estimated: false,
    };
    let open = Interval {
        end: None,
        id: Uuid::from_u128(8),
        ..done.clone()
    };
    let refused = ledger.import(&[done.clone(), open]).unwrap_err();
    ledger.import(std::slice::from_ref(&done)).unwrap();
    let contents = ledger.read(DEC_1 - DAY_MS).unwrap();
    assert_eq!(
        (refused.to_string(), closed(&contents)),
        (
            format!(
                "usage ledger {}: interval 00000000-0000-0000-0000-000000000008 is not closed: only closed ones are imported",
                Ledger::dir(&paths).display()
            ),
            vec![("vm1".to_owned(), 6_000, false)]
        )
    );
}
