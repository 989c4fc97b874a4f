//! What planning refuses: a desired-state file that is not valid, a config it does not have,
//! a placement that does not fit, a vGPU of another type than asked. Each variant carries the
//! facts; the wording of what to do about it is the caller's.

use std::path::PathBuf;

use vgpu_model::ErrorKind;
use vgpu_model::name::BadName;

/// Why a desired-state file, a placement or a hand-out was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A desired-state file (`host.toml`, vgpu-device-manager YAML) is not valid there: a
    /// syntax error, an unknown key, another version, a value of the wrong shape, or (from a
    /// plan) a GPU or type this host does not have.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Desired {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// What is wrong, and what was expected.
        message: String,
    },
    /// A desired-state file has no config by the name asked for (or, with none asked for, no
    /// `default` and more than one).
    #[error(
        "{} has no config {}; it has: {}",
        path.display(),
        name.as_deref().map_or_else(|| "named default".to_owned(), |n| format!("{n:?}")),
        known.join(", ")
    )]
    NoConfig {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: Option<String>,
        /// The configs it has.
        known: Vec<String>,
    },
    /// Fewer vGPUs than asked fit on the GPUs a placement may use; nothing was chosen.
    #[error(
        "{asked} vGPU(s) asked, the GPUs can take {fits}{}",
        if gpus.is_empty() { String::new() } else { format!(": {}", gpus.join("; ")) }
    )]
    NoPlacement {
        /// How many were asked for.
        asked: u32,
        /// How many fit.
        fits: u32,
        /// Each GPU a placement may use, with how many it takes and what bounds it.
        gpus: Vec<String>,
    },
    /// No GPU a placement may use offers the type asked for: a typo, or a type of another
    /// GPU.
    #[error("no GPU offers {wanted}; {}", they_offer(offered))]
    TypeNotOffered {
        /// The type asked for.
        wanted: String,
        /// The types the GPUs offer, by name where known.
        offered: Vec<String>,
    },
    /// Fewer vGPUs than asked fit on GPUs where the tenant policy lets the tenant have them;
    /// nothing was chosen.
    #[error(
        "{asked} vGPU(s) asked for tenant {tenant:?}, the GPUs the tenant policy allows can \
         take {fits}: {violation}"
    )]
    PolicyPlacement {
        /// The tenant.
        tenant: String,
        /// How many were asked for.
        asked: u32,
        /// How many fit within the policy.
        fits: u32,
        /// The first rule that kept a GPU with room from the tenant.
        violation: Box<crate::model::policy::Violation>,
    },
    /// A vGPU is not of the type a domain asked for: it is not handed out.
    #[error("{device} is a {has} vGPU, not the {wanted} asked for")]
    WrongType {
        /// The vGPU.
        device: String,
        /// Its type, by name where known.
        has: String,
        /// The type asked for.
        wanted: String,
    },
    /// A name or value given by the caller is not of the form it must have.
    #[error(transparent)]
    BadName(#[from] BadName),
    /// A vGPU cannot take the placement asked for in mixed-size mode.
    #[error(transparent)]
    Placement(#[from] crate::placement::PlacementRefusal),
}

/// This crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The category a caller acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Desired { .. } | Error::BadName(_) => ErrorKind::BadInput,
            Error::NoConfig { .. } => ErrorKind::NotFound,
            Error::NoPlacement { .. } => ErrorKind::NoCapacity,
            Error::TypeNotOffered { .. } => ErrorKind::NotFound,
            Error::PolicyPlacement { .. } => ErrorKind::Policy,
            Error::WrongType { .. } => ErrorKind::Conflict,
            Error::Placement(crate::placement::PlacementRefusal::NotMixed { .. }) => {
                ErrorKind::Conflict
            }
            // As the room's `PlacementsUnknown` is: no capacity known.
            Error::Placement(
                crate::placement::PlacementRefusal::NotCreatable { .. }
                | crate::placement::PlacementRefusal::Unknown { .. },
            ) => ErrorKind::NoCapacity,
        }
    }

    /// A [`Error::BadName`] for `value` (cut to 80 characters).
    pub(crate) fn bad_name(value: &str, expected: &'static str) -> Self {
        Error::BadName(BadName::new(value, expected))
    }
}

/// What the GPUs offer, in words: the list, or that there is none.
fn they_offer(offered: &[String]) -> String {
    if offered.is_empty() {
        "no GPU here offers a type of that kind".to_owned()
    } else {
        format!("they offer: {}", offered.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// One error of every variant, with what each says.
    fn every_variant() -> Vec<(Error, &'static str)> {
        vec![
            (
                Error::Desired {
                    path: PathBuf::from("host.toml"),
                    line: 3,
                    column: 7,
                    message: "unknown key `gpu`".to_owned(),
                },
                "host.toml:3:7: unknown key `gpu`",
            ),
            (
                Error::NoConfig {
                    path: PathBuf::from("host.toml"),
                    name: None,
                    known: vec!["a".to_owned(), "b".to_owned()],
                },
                "host.toml has no config named default; it has: a, b",
            ),
            (
                Error::NoPlacement {
                    asked: 3,
                    fits: 2,
                    gpus: Vec::new(),
                },
                "3 vGPU(s) asked, the GPUs can take 2",
            ),
            (
                Error::TypeNotOffered {
                    wanted: "T4-9Q".to_owned(),
                    offered: vec!["GRID T4-1Q".to_owned(), "GRID T4-2Q".to_owned()],
                },
                "no GPU offers T4-9Q; they offer: GRID T4-1Q, GRID T4-2Q",
            ),
            (
                Error::WrongType {
                    device: "0000:41:00.4".to_owned(),
                    has: "NVIDIA L40S-24Q (1155)".to_owned(),
                    wanted: "L40S-12Q".to_owned(),
                },
                "0000:41:00.4 is a NVIDIA L40S-24Q (1155) vGPU, not the L40S-12Q asked for",
            ),
            (
                Error::bad_name("a/b", "a vGPU type id or name"),
                "\"a/b\" is not a vGPU type id or name",
            ),
        ]
    }

    #[test]
    fn every_variant_says_its_facts_once_and_has_no_source_to_repeat() {
        let found: Vec<(String, bool)> = every_variant()
            .iter()
            .map(|(err, _)| (err.to_string(), err.source().is_none()))
            .collect();
        let expected: Vec<(String, bool)> = every_variant()
            .iter()
            .map(|(_, text)| ((*text).to_owned(), true))
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn kinds_are_the_categories_a_caller_acts_on() {
        let kinds: Vec<ErrorKind> = every_variant().iter().map(|(e, _)| e.kind()).collect();
        assert_eq!(
            kinds,
            vec![
                ErrorKind::BadInput,
                ErrorKind::NotFound,
                ErrorKind::NoCapacity,
                ErrorKind::NotFound,
                ErrorKind::Conflict,
                ErrorKind::BadInput,
            ]
        );
    }
}
