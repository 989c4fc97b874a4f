//! A planner's error as this crate's [`Error`]: the kind a caller acts on passes through.

use super::*;
use crate::plan::desired::{DesiredFile, Format};

#[test]
fn host_toml_error_kind_is_bad_input() {
    let err = DesiredFile::parse("host.toml", Format::HostToml, "version = [").unwrap_err();

    assert_eq!(crate::Error::from(err).kind(), ErrorKind::BadInput);
}

#[test]
fn config_unknown_name_lists_the_names() {
    let file = DesiredFile::parse(
        "host.toml",
        Format::HostToml,
        "version = 1\n[configs.a]\n[[configs.a.gpu]]\nall = true\nvfs = 1\n",
    )
    .unwrap();

    let err = file.config(Some("b")).unwrap_err();

    assert_eq!(
        (err.to_string(), crate::Error::from(err).kind()),
        (
            "host.toml has no config \"b\"; it has: a".to_owned(),
            ErrorKind::NotFound
        )
    );
}
