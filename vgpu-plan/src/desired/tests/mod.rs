//! The model's small parsers; the files' readers (`files`) and their MIG geometry (`mig`).

mod files;
mod mig;

use super::*;

#[test]
fn parse_size_count_and_gib_is_mib() {
    assert_eq!(parse_size("4x12GiB"), Ok((Some(4), 12288)));
}

#[test]
fn parse_size_without_count_is_as_many_as_fit() {
    assert_eq!(parse_size("512MiB"), Ok((None, 512)));
}

#[test]
fn parse_size_spaces_around_x_are_allowed() {
    assert_eq!(parse_size(" 2 x 24GiB "), Ok((Some(2), 24576)));
}

#[test]
fn parse_size_fraction_of_gib_is_whole_mib() {
    assert_eq!(parse_size("1.5GiB"), Ok((None, 1536)));
}

#[test]
fn parse_size_fraction_of_mib_is_refused() {
    assert!(parse_size("1.5MiB").is_err());
}

#[test]
fn parse_size_zero_count_is_refused() {
    assert!(parse_size("0x12GiB").is_err());
}

#[test]
fn parse_size_zero_size_is_refused() {
    assert!(parse_size("4x0GiB").is_err());
}

#[test]
fn parse_size_decimal_gb_is_refused() {
    assert!(parse_size("12GB").is_err());
}

#[test]
fn parse_size_huge_is_refused() {
    assert!(parse_size("99999999999999GiB").is_err());
}

#[test]
fn parse_size_negative_count_is_refused() {
    assert!(parse_size("-1x12GiB").is_err());
}

#[test]
fn parse_vendor_name_and_hex_agree() {
    assert_eq!(
        (parse_vendor("NVIDIA"), parse_vendor("0x10de")),
        (Some(0x10de), Some(0x10de))
    );
}

#[test]
fn parse_vendor_unknown_name_is_none() {
    assert_eq!(parse_vendor("matrox"), None);
}

#[test]
fn location_of_offset_counts_lines_and_columns() {
    assert_eq!(
        Location::of_offset("ab\ncde\nf", 5),
        Location { line: 2, column: 3 }
    );
}
