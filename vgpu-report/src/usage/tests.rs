use crate::model::holder::{Holder, Tenant};
use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;
use crate::model::usage::{Holding, fold_month};

/// 2026-11-01T00:00:00Z, 2026-12-01T00:00:00Z, 2027-01-01T00:00:00Z.
const NOV: i64 = 1_793_491_200_000;
const DEC: i64 = 1_796_083_200_000;
const JAN: i64 = 1_798_761_600_000;
const GIB: u64 = 1 << 30;

fn stamp(wall_ms: i64, boot: &str, mono_ms: i64) -> Stamp {
    Stamp {
        wall_ms,
        boot: boot.to_owned(),
        mono_ns: u64::try_from(mono_ms).unwrap() * 1_000_000,
    }
}

/// An interval of `tenant`'s domain `domain` from `start` for `ms` (open when `None`), in one
/// boot, holding 2 GiB of an L40S-2Q.
fn interval(tenant: &str, domain: &str, start: i64, ms: Option<i64>) -> Interval {
    Interval {
        id: Uuid::new_v4(),
        holding: Holding {
            holder: Holder {
                domain: domain.to_owned(),
                uuid: Uuid::from_u128(1),
                tenant: Some(tenant).filter(|t| !t.is_empty()).map(Tenant::label),
            },
            vgpu: VgpuHandle::Vf(PciAddress::new(0, 0x41, 0, 4).unwrap()),
            gpu: PciAddress::new(0, 0x41, 0, 0).unwrap(),
            type_id: "nvidia-1061".to_owned(),
            type_name: Some("NVIDIA L40S-2Q".to_owned()),
            framebuffer_bytes: 2 * GIB,
            gpu_instance_profile: None,
        },
        start: stamp(start, "a", 1_000),
        end: ms.map(|ms| stamp(start + ms, "a", 1_000 + ms)),
        estimated: false,
    }
}

fn query(since_ms: i64, until_ms: i64, by: By) -> Query {
    Query {
        since_ms,
        until_ms,
        by,
    }
}

/// (key, ms, intervals, estimated) of each row.
fn rows(report: &UsageReport) -> Vec<(String, u64, u64, u64)> {
    report
        .rows
        .iter()
        .map(|r| {
            (
                r.key.clone(),
                (r.vgpu_seconds * 1000.0).round() as u64,
                r.intervals,
                r.estimated,
            )
        })
        .collect()
}

fn now() -> Stamp {
    stamp(JAN, "a", 1_000 + (JAN - NOV))
}

#[test]
fn intervals_are_cut_at_both_bounds_and_counted_once() {
    let raw = vec![
        interval("acme", "vm1", NOV + 1_000, Some(10_000)),
        interval("acme", "vm2", NOV + 5_000, Some(1_000)),
        interval("globex", "vm3", NOV, Some(60_000)),
    ];
    let report = report(
        &query(NOV + 4_000, NOV + 8_000, By::Tenant),
        &raw,
        &[],
        i64::MIN,
        &now(),
    )
    .unwrap();
    assert_eq!(
        (report.since.as_str(), report.until.as_str(), rows(&report)),
        (
            "2026-11-01T00:00:04.000Z",
            "2026-11-01T00:00:08.000Z",
            vec![
                ("acme".to_owned(), 5_000, 2, 0),
                ("globex".to_owned(), 4_000, 1, 0)
            ]
        )
    );
}

#[test]
fn a_summarised_month_and_raw_edges_give_what_raw_alone_gives() {
    let mut raw = vec![
        interval("acme", "vm1", NOV - 60_000, Some(120_000)),
        interval("acme", "vm2", DEC - 30_000, Some(90_000)),
        interval("globex", "vm3", NOV + 86_400_000, None),
    ];
    raw[1].estimated = true;
    let now = now();
    let summary = fold_month(NOV, DEC, "2026-11", &raw, &now);
    let q = query(NOV - 30_000, DEC + 30_000, By::Tenant);
    let from_raw = report(&q, &raw, &[], i64::MIN, &now).unwrap();
    let mixed = report(&q, &raw, &[summary], i64::MIN, &now).unwrap();
    assert_eq!(rows(&mixed), rows(&from_raw));
    let globex = u64::try_from(DEC + 30_000 - NOV - 86_400_000).unwrap();
    assert_eq!(
        rows(&from_raw),
        vec![
            ("acme".to_owned(), 90_000 + 60_000, 2, 1),
            ("globex".to_owned(), globex, 1, 0)
        ]
    );
}

#[test]
fn a_month_starting_the_window_counts_what_it_carried_in() {
    let raw = vec![interval("acme", "vm1", NOV - 1_000, Some(3_000))];
    let now = now();
    let summary = fold_month(NOV, DEC, "2026-11", &raw, &now);
    let whole = report(
        &query(NOV, DEC, By::Domain),
        &[],
        std::slice::from_ref(&summary),
        DEC,
        &now,
    )
    .unwrap();
    let later = report(
        &query(NOV - 5_000, DEC, By::Domain),
        &raw,
        &[summary],
        i64::MIN,
        &now,
    )
    .unwrap();
    assert_eq!(
        (rows(&whole), rows(&later)),
        (
            vec![("vm1".to_owned(), 2_000, 1, 0)],
            vec![("vm1".to_owned(), 3_000, 1, 0)]
        )
    );
}

#[test]
fn a_wall_clock_step_within_a_boot_does_not_change_a_length() {
    let mut stepped = interval("acme", "vm1", NOV, None);
    // The wall clock went back an hour; the monotonic clock says 60 s.
    stepped.end = Some(stamp(NOV - 3_600_000 + 60_000, "a", 61_000));
    let mut rebooted = interval("acme", "vm2", NOV, None);
    rebooted.end = Some(stamp(NOV - 5_000, "b", 1));
    rebooted.estimated = true;
    assert_eq!(
        (stepped.span_ms(&now()), rebooted.span_ms(&now())),
        ((NOV, NOV + 60_000), (NOV, NOV))
    );
}

#[test]
fn an_open_interval_counts_up_to_now() {
    let raw = vec![interval("acme", "vm1", DEC, None)];
    let now = stamp(DEC + 7_000, "a", 8_000);
    let report = report(&query(NOV, JAN, By::Gpu), &raw, &[], i64::MIN, &now).unwrap();
    assert_eq!(
        (rows(&report), report.rows[0].open),
        (vec![("0000:41:00.0".to_owned(), 7_000, 1, 0)], 1)
    );
}

#[test]
fn a_bound_inside_a_month_no_longer_kept_raw_is_refused() {
    let err = report(&query(NOV + 1, JAN, By::Tenant), &[], &[], DEC, &now()).unwrap_err();
    let empty = report(&query(DEC, DEC, By::Tenant), &[], &[], i64::MIN, &now()).unwrap_err();
    assert_eq!(
        (err.to_string(), empty.to_string()),
        (
            "usage before 2026-12-01T00:00:00.000Z is kept only as whole months: 2026-11 cannot be cut; put the bound on a month's first instant".to_owned(),
            "the window is empty: 2026-12-01T00:00:00.000Z is not before 2026-12-01T00:00:00.000Z".to_owned()
        )
    );
}

#[test]
fn json_names_the_key_by_what_rows_are_keyed_by() {
    let raw = vec![interval("acme", "vm1", NOV, Some(1_500))];
    let by_type = report(&query(NOV, DEC, By::Type), &raw, &[], i64::MIN, &now()).unwrap();
    assert_eq!(
        serde_json::to_value(&by_type).unwrap(),
        serde_json::json!({
            "since": "2026-11-01T00:00:00.000Z",
            "until": "2026-12-01T00:00:00.000Z",
            "by": "type",
            "rows": [{
                "type": "nvidia-1061",
                "type_name": "NVIDIA L40S-2Q",
                "vgpu_seconds": 1.5,
                "framebuffer_byte_seconds": 3 * GIB,
                "intervals": 1,
                "estimated": 0,
                "open": 0,
            }],
        })
    );
}

#[test]
fn csv_quotes_a_field_with_a_comma_or_a_quote() {
    let raw = vec![
        interval("a,\"b\"", "vm1", NOV, Some(1_500)),
        interval("plain", "vm2", NOV, Some(2)),
    ];
    let by_tenant = report(&query(NOV, DEC, By::Tenant), &raw, &[], i64::MIN, &now()).unwrap();
    let by_type = report(&query(NOV, DEC, By::Type), &raw, &[], i64::MIN, &now()).unwrap();
    let mut text = String::new();
    write_csv(&by_tenant, &mut text).unwrap();
    write_csv(&by_type, &mut text).unwrap();
    assert_eq!(
        text,
        "tenant,vgpu_seconds,framebuffer_byte_seconds,intervals,estimated,open\n\
         \"a,\"\"b\"\"\",1.500,3221225472,1,0,0\n\
         plain,0.002,4294967,1,0,0\n\
         type,type_name,vgpu_seconds,framebuffer_byte_seconds,intervals,estimated,open\n\
         nvidia-1061,NVIDIA L40S-2Q,1.502,3225520439,2,0,0\n"
    );
}

#[test]
fn times_are_rfc3339_or_before_now() {
    let now = DEC;
    assert_eq!(
        [
            "2026-11-01T00:00:00Z",
            "2026-11-01T01:00:00.5+01:00",
            "-30d",
            "-2w",
            "-12h",
            "-90m",
            "-45s",
        ]
        .map(|t| parse_time(t, now)),
        [
            Ok(NOV),
            Ok(NOV + 500),
            Ok(DEC - 30 * 86_400_000),
            Ok(DEC - 14 * 86_400_000),
            Ok(DEC - 12 * 3_600_000),
            Ok(DEC - 90 * 60_000),
            Ok(DEC - 45_000),
        ]
    );
    for bad in ["yesterday", "-30", "-d", "-3y", "2026-11-01", "+30d", ""] {
        assert_eq!(
            parse_time(bad, now),
            Err(UsageError::BadTime {
                text: bad.to_owned()
            }),
            "{bad}"
        );
    }
}

#[test]
fn by_parses_its_four_names_and_refuses_others() {
    assert_eq!(
        (
            ["tenant", "domain", "type", "gpu"].map(|s| s.parse::<By>()),
            "vm".parse::<By>().map_err(|e| e.to_string())
        ),
        (
            [Ok(By::Tenant), Ok(By::Domain), Ok(By::Type), Ok(By::Gpu)],
            Err("\"vm\" is not tenant, domain, type or gpu".to_owned())
        )
    );
}

/// Random intervals around November: the counters agree with an all-time report, and
/// summarising November gives the same report as raw intervals alone.
fn intervals_strategy() -> impl Strategy<Value = Vec<Interval>> {
    prop::collection::vec(
        (
            0usize..3,
            -3_000_000i64..3_000_000,
            prop::option::of(1i64..6_000_000),
            any::<bool>(),
            prop::bool::ANY,
        ),
        0..12,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .map(|(tenant, offset, ms, at_end, estimated)| {
                let base = if at_end { DEC } else { NOV };
                let mut i = interval(["acme", "globex", ""][tenant], "vm", base + offset, ms);
                i.estimated = estimated && ms.is_some();
                i
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn summaries_and_counters_agree_with_raw_intervals(raw in intervals_strategy()) {
        let now = now();
        let summary = fold_month(NOV, DEC, "2026-11", &raw, &now);
        for (since, until) in [(NOV, DEC), (NOV - 4_000_000, DEC + 4_000_000), (NOV, JAN)] {
            let q = query(since, until, By::Tenant);
            let from_raw = report(&q, &raw, &[], i64::MIN, &now).unwrap();
            let mixed = report(&q, &raw, std::slice::from_ref(&summary), i64::MIN, &now).unwrap();
            prop_assert_eq!(rows(&mixed), rows(&from_raw));
        }
        let all = report(&query(NOV - DEC, JAN + DEC, By::Tenant), &raw, &[], i64::MIN, &now).unwrap();
        let totals: Vec<(String, u64)> = counters(&raw, std::slice::from_ref(&summary), &now)
            .into_iter()
            .filter(|c| c.vgpu_seconds > 0.0)
            .map(|c| (c.tenant, (c.vgpu_seconds * 1000.0).round() as u64))
            .collect();
        let expected: Vec<(String, u64)> = rows(&all).into_iter().map(|(k, ms, _, _)| (k, ms)).collect();
        prop_assert_eq!(totals, expected);
    }
}
