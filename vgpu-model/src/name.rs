//! Names and values a caller gives as text, checked: a vGPU id, a scheduler policy, a vGPU
//! type id or name. What is not of its form is a [`BadName`].

use std::str::FromStr;

use uuid::Uuid;

use crate::VgpuHandle;
use crate::nvml::SchedulerPolicy;
use crate::pci::PciAddress;

/// A name or value given by the caller that is not of the form it must have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not {expected}")]
pub struct BadName {
    /// The text given, cut to 80 characters.
    pub value: String,
    /// What it should have been, in words.
    pub expected: &'static str,
}

impl BadName {
    /// A [`BadName`] for `value` (cut to 80 characters).
    pub fn new(value: &str, expected: &'static str) -> Self {
        BadName {
            value: value.chars().take(80).collect(),
            expected,
        }
    }
}

impl FromStr for VgpuHandle {
    type Err = BadName;

    /// A mediated device's UUID, or a VF's PCI address.
    fn from_str(text: &str) -> Result<Self, BadName> {
        if let Ok(uuid) = Uuid::try_parse(text) {
            return Ok(VgpuHandle::Mdev(uuid));
        }
        text.parse::<PciAddress>().map(VgpuHandle::Vf).map_err(|_| {
            BadName::new(
                text,
                "a vGPU id (a mediated device UUID or a VF's PCI address)",
            )
        })
    }
}

impl FromStr for SchedulerPolicy {
    type Err = BadName;

    fn from_str(text: &str) -> Result<Self, BadName> {
        SchedulerPolicy::ALL
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| {
                BadName::new(
                    text,
                    "a scheduler policy (best-effort, equal-share, fixed-share)",
                )
            })
    }
}

/// Checks a type id or name given by a user: 1 to 64 characters of letters, digits, space,
/// `_`, `-`, `.`, and not a path.
pub fn validate_type(text: &str) -> Result<(), BadName> {
    let ok = !text.is_empty()
        && text.len() <= 64
        && !text.contains("..")
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(BadName::new(text, "a vGPU type id or name"))
    }
}
