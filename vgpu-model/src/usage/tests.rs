use super::*;

/// 2026-11-01T00:00:00Z, 2026-12-01T00:00:00Z, 2027-01-01T00:00:00Z.
const NOV: i64 = 1_793_491_200_000;
const DEC: i64 = 1_796_083_200_000;
const JAN: i64 = 1_798_761_600_000;

#[test]
fn months_are_utc_calendar_months() {
    assert_eq!(
        [
            month_bounds(NOV),
            month_bounds(DEC - 1),
            month_bounds(JAN + 1)
        ],
        [
            ("2026-11".to_owned(), NOV, DEC),
            ("2026-11".to_owned(), NOV, DEC),
            ("2027-01".to_owned(), JAN, 1_801_440_000_000)
        ]
    );
}

#[test]
fn a_month_starts_at_its_first_millisecond() {
    assert_eq!(
        ["2026-12", "1970-01", "2024-03", "2026-13", "2026", "x-01"].map(month_start),
        [
            Some(DEC),
            Some(0),
            Some(1_709_251_200_000),
            None,
            None,
            None
        ]
    );
}

#[test]
fn an_interval_written_before_the_holder_type_reads_and_is_written_anew() {
    // An interval as earlier ledgers wrote it: `domain_uuid`, and `""` for no tenant.
    let old = r#"{"id":"00000000-0000-0000-0000-000000000001","tenant":"","domain":"vm1",
        "domain_uuid":"00000000-0000-0000-0000-0000000000d1","vgpu":"0000:41:00.4",
        "gpu":"0000:41:00.0","type_id":"nvidia-1067","framebuffer_bytes":4294967296,
        "start":{"wall_ms":1,"boot":"b","mono_ns":2}}"#;
    let interval: Interval = serde_json::from_str(old).unwrap();
    let holder = crate::holder::Holder {
        domain: "vm1".to_owned(),
        uuid: Uuid::from_u128(0xd1),
        tenant: None,
    };
    assert_eq!(interval.holding.holder, holder);
    assert_eq!(interval.holding.tenant_key(), "");
    let written = serde_json::to_string(&interval).unwrap();
    assert_eq!(
        written,
        r#"{"id":"00000000-0000-0000-0000-000000000001","domain":"vm1","uuid":"00000000-0000-0000-0000-0000000000d1","tenant":null,"vgpu":"0000:41:00.4","gpu":"0000:41:00.0","type_id":"nvidia-1067","framebuffer_bytes":4294967296,"start":{"wall_ms":1,"boot":"b","mono_ns":2}}"#
    );
    let again: Interval = serde_json::from_str(&written).unwrap();
    assert_eq!(again, interval);
}
