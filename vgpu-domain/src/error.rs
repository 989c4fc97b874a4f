//! Errors of `vgpu-domain`: a domain's XML refused, a device that is not a vGPU.

use vgpu_model::ErrorKind;

/// An error reading a domain's XML or naming a vGPU as a hostdev.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A domain's XML was refused: malformed, too large, too deep, with a DTD, not UTF-8, or
    /// with a hostdev this crate cannot read.
    #[error("{}{reason}", domain.as_deref().map(|d| format!("XML of domain {d:?}: ")).unwrap_or_else(|| "XML: ".to_owned()))]
    Xml {
        /// The domain whose XML it is, when known.
        domain: Option<String>,
        /// What is wrong, in one line.
        reason: String,
    },
    /// The device is not a vGPU on this host: not a mediated device, not a VF holding an
    /// NVIDIA vendor-VFIO type, not a plain SR-IOV VF bound to `vfio-pci`.
    #[error("{device} is not a vGPU on this host")]
    NotAVgpu {
        /// The device named.
        device: String,
    },
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The category a caller acts on: [`ErrorKind::BadInput`] for both.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Xml { .. } | Error::NotAVgpu { .. } => ErrorKind::BadInput,
        }
    }

    /// The same error, about `domain`'s XML when it is an [`Error::Xml`] that names none.
    #[must_use]
    pub fn in_domain(self, domain: &str) -> Self {
        match self {
            Error::Xml {
                domain: None,
                reason,
            } => Error::Xml {
                domain: Some(domain.to_owned()),
                reason,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_xml_is_bad_input() {
        let err = Error::Xml {
            domain: None,
            reason: "r".to_owned(),
        };
        assert_eq!(err.kind(), ErrorKind::BadInput);
    }

    #[test]
    fn kind_not_a_vgpu_is_bad_input() {
        let err = Error::NotAVgpu {
            device: "0000:41:00.5".to_owned(),
        };
        assert_eq!(err.kind(), ErrorKind::BadInput);
    }

    #[test]
    fn display_xml_without_domain() {
        let err = Error::Xml {
            domain: None,
            reason: "not well-formed".to_owned(),
        };
        assert_eq!(err.to_string(), "XML: not well-formed");
    }

    #[test]
    fn in_domain_names_the_domain() {
        let err = Error::Xml {
            domain: None,
            reason: "not well-formed".to_owned(),
        };
        assert_eq!(
            err.in_domain("vm1").to_string(),
            "XML of domain \"vm1\": not well-formed"
        );
    }

    #[test]
    fn in_domain_keeps_a_named_domain() {
        let err = Error::Xml {
            domain: Some("vm1".to_owned()),
            reason: "r".to_owned(),
        };
        assert_eq!(
            err.in_domain("vm2"),
            Error::Xml {
                domain: Some("vm1".to_owned()),
                reason: "r".to_owned(),
            }
        );
    }
}
