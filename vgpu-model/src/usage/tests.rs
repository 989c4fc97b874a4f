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
