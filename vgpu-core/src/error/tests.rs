//! The rule the error chain relies on: no `Display` repeats its source, so that
//! [`error_chain`] (and `vgpuctl`, which prints every cause) says each cause once.

use std::error::Error as _;
use std::io;
use std::mem::discriminant;
use std::path::PathBuf;

use super::*;
use crate::error::{HostError, StateError};

/// What every source below says: text no message of this crate has of its own.
const SOURCE_TEXT: &str = "distinctive-source-text-7f3a";

fn io_source() -> io::Error {
    io::Error::other(SOURCE_TEXT)
}

fn path() -> PathBuf {
    PathBuf::from("/sys/bus/pci/devices/0000:41:00.0/sriov_numvfs")
}

/// One error of every variant that has a source, each source saying [`SOURCE_TEXT`].
fn with_sources() -> Vec<Error> {
    let value = || "4".to_owned();
    let json = serde_json::from_str::<u32>(&format!("\"{SOURCE_TEXT}\"")).unwrap_err();
    vec![
        HostError::Read {
            path: path(),
            source: io_source(),
        }
        .into(),
        StateError::Input {
            path: path(),
            source: io_source(),
        }
        .into(),
        HostError::Monitor {
            what: "listen to the kernel's uevents of pci".to_owned(),
            source: io_source(),
        }
        .into(),
        HostError::Format {
            path: path(),
            source: crate::parse::ParseError::Field {
                field: "type".to_owned(),
                value: SOURCE_TEXT.to_owned(),
            },
        }
        .into(),
        HostError::Busy {
            path: path(),
            value: value(),
            source: io_source(),
        }
        .into(),
        HostError::Denied {
            path: path(),
            value: value(),
            source: io_source(),
        }
        .into(),
        HostError::Gone {
            path: path(),
            value: value(),
            source: io_source(),
        }
        .into(),
        HostError::NoSpace {
            path: path(),
            value: value(),
            source: io_source(),
        }
        .into(),
        HostError::Write {
            path: path(),
            value: value(),
            source: io_source(),
        }
        .into(),
        StateError::DefinitionJson {
            path: path(),
            source: json,
        }
        .into(),
        HostError::Update {
            action: "write",
            path: path(),
            source: io_source(),
        }
        .into(),
        Error::HookDevice {
            domain: "vm1".to_owned(),
            device: "0000:41:00.4".to_owned(),
            from: Some("type \"L40S-12Q\" from the domain's metadata".to_owned()),
            source: Box::new(
                HostError::Read {
                    path: PathBuf::from(format!("/{SOURCE_TEXT}")),
                    source: io::Error::other("no such file"),
                }
                .into(),
            ),
        },
    ]
}

/// Whether a variant has a source of its own. Every variant is named, so that a new one
/// cannot be added without saying: one that has must be added to [`with_sources`] too.
/// (`Nvml` is transparent: its message and its source are the `NvmlError`'s, which has
/// none.)
fn has_source(err: &Error) -> bool {
    match err {
        Error::Host(host) => host_has_source(host),
        Error::State(state) => state_has_source(state),
        Error::HookDevice { .. } => true,
        Error::NotApplied { .. }
        | Error::NoCapacity { .. }
        | Error::NoRoomHere { .. }
        | Error::NotFound { .. }
        | Error::Ambiguous { .. }
        | Error::UnknownType { .. }
        | Error::BadName { .. }
        | Error::NotVirtualizable { .. }
        | Error::NoVfs { .. }
        | Error::UuidNotApplicable { .. }
        | Error::DuplicateTarget { .. }
        | Error::NotGpu { .. }
        | Error::NotOwned { .. }
        | Error::HoldersUnknown { .. }
        | Error::Interrupted { .. }
        | Error::PolicyRefused { .. }
        | Error::InUse { .. }
        | Error::HeldOpen { .. }
        | Error::AlreadyExists { .. }
        | Error::DefinitionExists { .. }
        | Error::DefinitionMismatch { .. }
        | Error::RestoreFailed { .. }
        | Error::TaskLost { .. }
        | Error::PlanRefused { .. }
        | Error::PlanStale { .. }
        | Error::NotDefined { .. }
        | Error::NoTypeForVf { .. }
        | Error::MigrationTypeUnknown { .. }
        | Error::FlavorNotMapped { .. }
        | Error::Nvml(_)
        | Error::Plan(_)
        | Error::MigResetPending { .. }
        | Error::MigNoFit { .. }
        | Error::NoGpuInstance { .. } => false,
    }
}

/// [`has_source`] of `vgpu`'s own state errors, every variant named.
fn state_has_source(err: &StateError) -> bool {
    match err {
        StateError::Input { .. } | StateError::DefinitionJson { .. } => true,
        StateError::Definition { .. }
        | StateError::MdevDefinedElsewhere { .. }
        | StateError::SizeModeDisagrees { .. }
        | StateError::Ledger { .. }
        | StateError::Config { .. }
        | StateError::Locked { .. } => false,
    }
}

/// [`has_source`] of the kernel's errors, every variant named.
fn host_has_source(err: &HostError) -> bool {
    match err {
        HostError::Read { .. }
        | HostError::Monitor { .. }
        | HostError::Format { .. }
        | HostError::Busy { .. }
        | HostError::Denied { .. }
        | HostError::Gone { .. }
        | HostError::NoSpace { .. }
        | HostError::Write { .. }
        | HostError::Update { .. } => true,
        HostError::Missing { .. }
        | HostError::DanglingLink { .. }
        | HostError::TooLarge { .. }
        | HostError::NotUtf8 { .. }
        | HostError::Parse { .. }
        | HostError::Timeout { .. }
        | HostError::NotBound { .. }
        | HostError::UnbindLockRefused { .. }
        | HostError::NoSriov { .. }
        | HostError::BadVfCount { .. } => false,
    }
}

#[test]
fn display_of_every_sourced_variant_does_not_repeat_its_source() {
    let repeating: Vec<String> = with_sources()
        .iter()
        .filter(|err| err.to_string().contains(SOURCE_TEXT))
        .map(|err| format!("{err:?}"))
        .collect();
    assert_eq!(repeating, Vec::<String>::new());
}

#[test]
fn every_variant_listed_with_a_source_has_one_that_says_the_text() {
    let wrong: Vec<String> = with_sources()
        .iter()
        .filter(|err| {
            !has_source(err)
                || !err
                    .source()
                    .is_some_and(|source| error_chain(source).contains(SOURCE_TEXT))
        })
        .map(|err| format!("{err:?}"))
        .collect();
    assert_eq!(wrong, Vec::<String>::new());
}

#[test]
fn with_sources_has_one_error_of_each_sourced_variant() {
    let errors = with_sources();
    let variants: std::collections::HashSet<_> = errors
        .iter()
        .map(|err| match err {
            Error::Host(host) => (discriminant(err), Some(format!("{:?}", discriminant(host)))),
            Error::State(state) => (
                discriminant(err),
                Some(format!("{:?}", discriminant(state))),
            ),
            other => (discriminant(other), None),
        })
        .collect();
    // 12: the variants of the `true` arm of `has_source`.
    assert_eq!((errors.len(), variants.len()), (12, 12));
}

#[test]
fn error_chain_says_every_source_even_one_it_seems_to_repeat() {
    let err = Error::HookDevice {
        domain: "vm1".to_owned(),
        device: "0000:41:00.4".to_owned(),
        from: None,
        source: Box::new(
            HostError::Read {
                path: PathBuf::from("/sys/x"),
                source: io::Error::other("cannot read /sys/x"),
            }
            .into(),
        ),
    };
    // The last cause repeats its error's path, but not its text: it is said too.
    assert_eq!(
        err.chain(),
        "domain vm1: cannot make 0000:41:00.4 ready: cannot read /sys/x: cannot read /sys/x"
    );
}

#[test]
fn foreign_error_chain_leaves_out_a_cause_its_message_already_says() {
    #[derive(Debug)]
    struct Outer(io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a library error occurred: {}", self.0)
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let err = Outer(io::Error::other("libnvidia-ml.so.1: cannot open"));
    assert_eq!(
        (foreign_error_chain(&err), error_chain(&err)),
        (
            "a library error occurred: libnvidia-ml.so.1: cannot open".to_owned(),
            "a library error occurred: libnvidia-ml.so.1: cannot open: libnvidia-ml.so.1: cannot open"
                .to_owned()
        )
    );
}

#[test]
fn no_config_without_a_name_says_only_the_facts() {
    let err = vgpu_plan::Error::NoConfig {
        path: PathBuf::from("host.toml"),
        name: None,
        known: vec!["a".to_owned(), "b".to_owned()],
    };
    assert_eq!(
        err.to_string(),
        "host.toml has no config named default; it has: a, b"
    );
}
