//! Errors of `vgpu-libvirt`: what failed, on which domain and device, and libvirt's own answer.

use vgpu_core::ErrorKind;

/// An error from talking to libvirt or reading a domain's XML.
///
/// `Display` never repeats the source: print the chain once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No domain has this name.
    #[error("no domain named {name:?}")]
    NoSuchDomain {
        /// The name looked up.
        name: String,
    },
    /// libvirt refused or failed an operation; `code` and `message` are libvirt's own
    /// (`virErrorNumber` and the message of `virGetLastError`), verbatim.
    #[error("libvirt {operation} failed{}: {message} (code {code})", context(domain.as_deref(), device.as_deref()))]
    Libvirt {
        /// What was asked of libvirt: `open`, `define`, `start`, `attach`, ...
        operation: &'static str,
        /// The domain it concerned, if any.
        domain: Option<String>,
        /// The device it concerned, if any.
        device: Option<String>,
        /// libvirt's error number (`virErrorNumber`, e.g. 42 for `VIR_ERR_NO_DOMAIN`).
        code: i32,
        /// libvirt's message.
        message: String,
    },
    /// The device is referenced by another domain (in its live or persistent configuration):
    /// detach it there first.
    #[error("{device} is already assigned to domain {domain:?}")]
    HeldElsewhere {
        /// The device asked for.
        device: String,
        /// The first other domain, by name, that references it.
        domain: String,
    },
    /// The domain does not hold the device in the scopes asked.
    #[error("domain {domain:?} does not hold {device}")]
    NotAttached {
        /// The device asked for.
        device: String,
        /// The domain.
        domain: String,
    },
    /// A domain's XML was refused, or a device is not a vGPU on this host (`vgpu-domain`'s
    /// error).
    #[error(transparent)]
    Domain(#[from] vgpu_domain::Error),
    /// An error of `vgpu-core` (reading the host, a malformed name).
    #[error(transparent)]
    Core(#[from] vgpu_core::Error),
}

impl From<vgpu_core::error::HostError> for Error {
    fn from(err: vgpu_core::error::HostError) -> Self {
        Error::Core(err.into())
    }
}

fn context(domain: Option<&str>, device: Option<&str>) -> String {
    match (domain, device) {
        (Some(domain), Some(device)) => format!(" (domain {domain:?}, device {device})"),
        (Some(domain), None) => format!(" (domain {domain:?})"),
        (None, Some(device)) => format!(" (device {device})"),
        (None, None) => String::new(),
    }
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// libvirt's error numbers (`virErrorNumber` in `libvirt/virterror.h`) that say what a caller
/// can do; every other number is a fault of the host.
mod code {
    use virt::sys;

    pub(super) const NO_DOMAIN: u32 = sys::VIR_ERR_NO_DOMAIN;
    pub(super) const DEVICE_MISSING: u32 = sys::VIR_ERR_DEVICE_MISSING;
    pub(super) const NO_DEVICE: u32 = sys::VIR_ERR_NO_DEVICE;
    pub(super) const OPERATION_DENIED: u32 = sys::VIR_ERR_OPERATION_DENIED;
    pub(super) const AUTH_FAILED: u32 = sys::VIR_ERR_AUTH_FAILED;
    pub(super) const AUTH_CANCELLED: u32 = sys::VIR_ERR_AUTH_CANCELLED;
    pub(super) const AUTH_UNAVAILABLE: u32 = sys::VIR_ERR_AUTH_UNAVAILABLE;
    pub(super) const ACCESS_DENIED: u32 = sys::VIR_ERR_ACCESS_DENIED;
    pub(super) const OPERATION_TIMEOUT: u32 = sys::VIR_ERR_OPERATION_TIMEOUT;
    pub(super) const AGENT_UNRESPONSIVE: u32 = sys::VIR_ERR_AGENT_UNRESPONSIVE;
    pub(super) const OPERATION_INVALID: u32 = sys::VIR_ERR_OPERATION_INVALID;
    pub(super) const DOM_EXIST: u32 = sys::VIR_ERR_DOM_EXIST;
    pub(super) const XML_ERROR: u32 = sys::VIR_ERR_XML_ERROR;
    pub(super) const XML_DETAIL: u32 = sys::VIR_ERR_XML_DETAIL;
    pub(super) const INVALID_ARG: u32 = sys::VIR_ERR_INVALID_ARG;
}

impl Error {
    /// The category a caller acts on.
    ///
    /// A libvirt error is a [`ErrorKind::HostFault`] unless its code says otherwise:
    /// `VIR_ERR_NO_DOMAIN`, `VIR_ERR_NO_DEVICE` and `VIR_ERR_DEVICE_MISSING` are
    /// [`ErrorKind::NotFound`]; `VIR_ERR_OPERATION_DENIED`, `VIR_ERR_ACCESS_DENIED` and the
    /// authentication errors [`ErrorKind::Permission`]; `VIR_ERR_OPERATION_TIMEOUT` (another
    /// job holds the domain) and `VIR_ERR_AGENT_UNRESPONSIVE` [`ErrorKind::Busy`];
    /// `VIR_ERR_OPERATION_INVALID` (the domain is not running, or is running already) and
    /// `VIR_ERR_DOM_EXIST` [`ErrorKind::Conflict`]; `VIR_ERR_XML_ERROR`,
    /// `VIR_ERR_XML_DETAIL` and `VIR_ERR_INVALID_ARG` (XML the caller gave)
    /// [`ErrorKind::BadInput`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NoSuchDomain { .. } | Error::NotAttached { .. } => ErrorKind::NotFound,
            Error::HeldElsewhere { .. } => ErrorKind::Conflict,
            Error::Domain(err) => err.kind(),
            Error::Core(err) => err.kind(),
            Error::Libvirt { code, .. } => libvirt_kind(*code),
        }
    }

    /// An [`Error::Libvirt`] from `virt`'s error.
    pub(crate) fn libvirt(
        operation: &'static str,
        domain: Option<&str>,
        device: Option<String>,
        err: &virt::error::Error,
    ) -> Self {
        Error::Libvirt {
            operation,
            domain: domain.map(str::to_owned),
            device,
            code: i32::try_from(err.code().to_raw()).unwrap_or(i32::MAX),
            message: err.message().to_owned(),
        }
    }
}

/// Whether `err` is libvirt's "no such domain".
pub(crate) fn is_no_domain(err: &virt::error::Error) -> bool {
    err.code().to_raw() == code::NO_DOMAIN
}

fn libvirt_kind(raw: i32) -> ErrorKind {
    let Ok(raw) = u32::try_from(raw) else {
        return ErrorKind::HostFault;
    };
    match raw {
        code::NO_DOMAIN | code::NO_DEVICE | code::DEVICE_MISSING => ErrorKind::NotFound,
        code::OPERATION_DENIED
        | code::ACCESS_DENIED
        | code::AUTH_FAILED
        | code::AUTH_CANCELLED
        | code::AUTH_UNAVAILABLE => ErrorKind::Permission,
        code::OPERATION_TIMEOUT | code::AGENT_UNRESPONSIVE => ErrorKind::Busy,
        code::OPERATION_INVALID | code::DOM_EXIST => ErrorKind::Conflict,
        code::XML_ERROR | code::XML_DETAIL | code::INVALID_ARG => ErrorKind::BadInput,
        _ => ErrorKind::HostFault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libvirt_error(code: u32) -> Error {
        Error::Libvirt {
            operation: "attach",
            domain: Some("vm1".to_owned()),
            device: None,
            code: code as i32,
            message: "m".to_owned(),
        }
    }

    #[test]
    fn kind_no_domain_is_not_found() {
        assert_eq!(
            libvirt_error(virt::sys::VIR_ERR_NO_DOMAIN).kind(),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn kind_config_unsupported_is_host_fault() {
        assert_eq!(
            libvirt_error(virt::sys::VIR_ERR_CONFIG_UNSUPPORTED).kind(),
            ErrorKind::HostFault
        );
    }

    #[test]
    fn kind_operation_invalid_is_conflict() {
        assert_eq!(
            libvirt_error(virt::sys::VIR_ERR_OPERATION_INVALID).kind(),
            ErrorKind::Conflict
        );
    }

    #[test]
    fn kind_access_denied_is_permission() {
        assert_eq!(
            libvirt_error(virt::sys::VIR_ERR_ACCESS_DENIED).kind(),
            ErrorKind::Permission
        );
    }

    #[test]
    fn kind_operation_timeout_is_busy() {
        assert_eq!(
            libvirt_error(virt::sys::VIR_ERR_OPERATION_TIMEOUT).kind(),
            ErrorKind::Busy
        );
    }

    #[test]
    fn kind_negative_code_is_host_fault() {
        assert_eq!(
            Error::Libvirt {
                operation: "open",
                domain: None,
                device: None,
                code: -1,
                message: String::new(),
            }
            .kind(),
            ErrorKind::HostFault
        );
    }

    #[test]
    fn kind_held_elsewhere_is_conflict() {
        assert_eq!(
            Error::HeldElsewhere {
                device: "d".to_owned(),
                domain: "vm".to_owned()
            }
            .kind(),
            ErrorKind::Conflict
        );
    }

    /// The one variant with a source (`Core`, transparent: its source is the core error's),
    /// whose message must not repeat it. Every other variant is named, so that a new one
    /// cannot be added without saying whether it has a source.
    #[test]
    fn display_of_a_sourced_variant_does_not_repeat_its_source() {
        let sourced = |err: &Error| match err {
            Error::Core(_) => true,
            Error::NoSuchDomain { .. }
            | Error::Libvirt { .. }
            | Error::HeldElsewhere { .. }
            | Error::NotAttached { .. }
            | Error::Domain(_) => false,
        };
        let text = "distinctive-source-text-7f3a";
        let err = Error::from(vgpu_core::error::HostError::Read {
            path: "/sys/bus/pci/devices".into(),
            source: std::io::Error::other(text),
        });
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            (sourced(&err), err.to_string().contains(text), source),
            (true, false, Some(text.to_owned()))
        );
    }

    #[test]
    fn display_libvirt_names_operation_domain_device_and_code() {
        let err = Error::Libvirt {
            operation: "attach",
            domain: Some("vm1".to_owned()),
            device: Some("0000:41:00.4".to_owned()),
            code: 67,
            message: "unsupported configuration: x".to_owned(),
        };
        assert_eq!(
            err.to_string(),
            "libvirt attach failed (domain \"vm1\", device 0000:41:00.4): unsupported configuration: x (code 67)"
        );
    }
}
