//! PCI addresses as the kernel names devices (`dddd:bb:dd.f`), and a function's SR-IOV
//! capability.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI function address, `domain:bus:device.function`.
///
/// The domain (segment) is 16 bits on ordinary hosts, where the kernel prints it as four hex
/// digits; Intel VMD exposes wider synthetic domains such as `10000:01:00.0`, which are accepted
/// and printed with as many digits as they need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

/// Why a string is not a PCI address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PciAddressError {
    /// The string is empty.
    #[error("empty PCI address")]
    Empty,
    /// The string does not have the `domain:bus:device.function` shape.
    #[error("PCI address {0:?} is not of the form dddd:bb:dd.f")]
    Shape(String),
    /// The string is the short `bus:device.function` form, without the domain.
    #[error("PCI address {0:?} has no domain: give it in full, such as 0000:{0}")]
    NoDomain(String),
    /// The domain is not hex or has more than 8 digits.
    #[error("PCI address {0:?} has an invalid domain")]
    Domain(String),
    /// The bus is not two hex digits.
    #[error("PCI address {0:?} has an invalid bus")]
    Bus(String),
    /// The device is not two hex digits below 0x20.
    #[error("PCI address {0:?} has an invalid device (00-1f)")]
    Device(String),
    /// The function is not one digit below 8.
    #[error("PCI address {0:?} has an invalid function (0-7)")]
    Function(String),
}

impl PciAddress {
    /// Builds an address from its parts; `None` when the device or function is out of range.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Option<Self> {
        (device < 0x20 && function < 8).then_some(Self {
            domain,
            bus,
            device,
            function,
        })
    }

    /// The PCI domain (segment).
    pub fn domain(&self) -> u32 {
        self.domain
    }

    /// The bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// The device (slot) number.
    pub fn device(&self) -> u8 {
        self.device
    }

    /// The function number.
    pub fn function(&self) -> u8 {
        self.function
    }

    /// Whether `other` is another function of the same slot (same domain, bus and device).
    pub fn same_slot(&self, other: &PciAddress) -> bool {
        self.domain == other.domain && self.bus == other.bus && self.device == other.device
    }
}

fn hex_field(text: &str, width: usize) -> Option<u32> {
    if text.len() != width || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

impl FromStr for PciAddress {
    type Err = PciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(PciAddressError::Empty);
        }
        let shape = || PciAddressError::Shape(s.to_owned());
        if s.matches(':').count() == 1 && format!("0000:{s}").parse::<PciAddress>().is_ok() {
            return Err(PciAddressError::NoDomain(s.to_owned()));
        }
        let (domain, rest) = s.split_once(':').ok_or_else(shape)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(shape)?;
        let (device, function) = rest.split_once('.').ok_or_else(shape)?;
        let domain_ok =
            (4..=8).contains(&domain.len()) && domain.bytes().all(|b| b.is_ascii_hexdigit());
        if !domain_ok {
            return Err(PciAddressError::Domain(s.to_owned()));
        }
        let domain =
            u32::from_str_radix(domain, 16).map_err(|_| PciAddressError::Domain(s.to_owned()))?;
        let bus = hex_field(bus, 2).ok_or_else(|| PciAddressError::Bus(s.to_owned()))?;
        let device = hex_field(device, 2)
            .filter(|d| *d < 0x20)
            .ok_or_else(|| PciAddressError::Device(s.to_owned()))?;
        let function = hex_field(function, 1)
            .filter(|f| *f < 8)
            .ok_or_else(|| PciAddressError::Function(s.to_owned()))?;
        // The filters above bound every field, so the narrowing casts cannot truncate.
        Ok(Self {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddress {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The SR-IOV capability of a physical function (`sriov_*` attributes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SriovCapability {
    /// `sriov_totalvfs`: the most VFs the device supports.
    pub total_vfs: u32,
    /// `sriov_numvfs`: VFs enabled now.
    pub num_vfs: u32,
    /// `sriov_offset`: routing-id offset of the first VF.
    pub offset: Option<u32>,
    /// `sriov_stride`: routing-id distance between VFs.
    pub stride: Option<u32>,
    /// `sriov_vf_device`: the VFs' PCI device id, as lowercase hex.
    #[serde(serialize_with = "super::serde_hex::option_u16")]
    pub vf_device_id: Option<u16>,
    /// `sriov_drivers_autoprobe`: whether new VFs are bound to a driver.
    pub drivers_autoprobe: Option<bool>,
}

impl SriovCapability {
    /// The addresses of every VF the PF at `pf` may have, enabled or not: VF `n` (from 0) is
    /// at routing id `pf + offset + n * stride` (PCIe Base Specification, SR-IOV "First VF
    /// Offset" and "VF Stride"; Linux `pci_iov_virtfn_bus`/`devfn`). The kernel reports offset
    /// and stride for the VF count set now; none without them.
    pub fn vf_addresses(&self, pf: PciAddress) -> Vec<PciAddress> {
        let (Some(offset), Some(stride)) = (self.offset, self.stride) else {
            return Vec::new();
        };
        let routing =
            u32::from(pf.bus()) << 8 | u32::from(pf.device()) << 3 | u32::from(pf.function());
        (0..self.total_vfs)
            .map_while(|n| {
                let id = routing
                    .checked_add(offset)?
                    .checked_add(n.checked_mul(stride)?)?;
                let bus = u8::try_from(id >> 8).ok()?;
                let devfn = u8::try_from(id & 0xff).ok()?;
                PciAddress::new(pf.domain(), bus, devfn >> 3, devfn & 7)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<PciAddress, PciAddressError> {
        s.parse()
    }

    #[test]
    fn vf_addresses_follow_offset_and_stride_across_a_bus() {
        let sriov = |total_vfs, offset, stride| SriovCapability {
            total_vfs,
            num_vfs: 0,
            offset,
            stride,
            vf_device_id: None,
            drivers_autoprobe: None,
        };
        let pf = parse("0000:41:00.0").unwrap();
        let shown = |cap: SriovCapability, at: PciAddress| -> Vec<String> {
            cap.vf_addresses(at)
                .iter()
                .map(ToString::to_string)
                .collect()
        };

        let near_bus_end = shown(sriov(3, Some(0xfd), Some(1)), pf);
        let last_bus = shown(sriov(4, Some(1), Some(1)), parse("0000:ff:1f.6").unwrap());

        assert_eq!(
            shown(sriov(3, Some(4), Some(1)), pf),
            ["0000:41:00.4", "0000:41:00.5", "0000:41:00.6"]
        );
        assert_eq!(
            near_bus_end,
            ["0000:41:1f.5", "0000:41:1f.6", "0000:41:1f.7"]
        );
        assert_eq!(last_bus, ["0000:ff:1f.7"]);
        assert!(sriov(3, None, Some(1)).vf_addresses(pf).is_empty());
    }

    #[test]
    fn parse_zero_domain_roundtrips() {
        assert_eq!(
            parse("0000:41:00.4").map(|a| a.to_string()),
            Ok("0000:41:00.4".to_owned())
        );
    }

    #[test]
    fn parse_nonzero_domain_keeps_domain() {
        assert_eq!(
            parse("0001:3b:1f.7"),
            Ok(PciAddress {
                domain: 1,
                bus: 0x3b,
                device: 0x1f,
                function: 7
            })
        );
    }

    #[test]
    fn parse_vmd_domain_is_accepted() {
        assert_eq!(
            parse("10000:01:00.0").map(|a| a.to_string()),
            Ok("10000:01:00.0".to_owned())
        );
    }

    #[test]
    fn parse_uppercase_hex_prints_lowercase() {
        assert_eq!(
            parse("0000:AF:00.0").map(|a| a.to_string()),
            Ok("0000:af:00.0".to_owned())
        );
    }

    #[test]
    fn parse_empty_is_empty_error() {
        assert_eq!(parse(""), Err(PciAddressError::Empty));
    }

    #[test]
    fn parse_missing_domain_is_no_domain_error_suggesting_the_full_form() {
        let err = parse("41:00.0").unwrap_err();
        assert_eq!(
            (err.clone(), err.to_string()),
            (
                PciAddressError::NoDomain("41:00.0".to_owned()),
                "PCI address \"41:00.0\" has no domain: give it in full, such as 0000:41:00.0"
                    .to_owned()
            )
        );
    }

    #[test]
    fn parse_short_form_that_is_no_address_is_shape_error() {
        assert_eq!(
            parse("41:zz.0"),
            Err(PciAddressError::Shape("41:zz.0".to_owned()))
        );
    }

    #[test]
    fn parse_missing_function_is_shape_error() {
        assert_eq!(
            parse("0000:41:00"),
            Err(PciAddressError::Shape("0000:41:00".to_owned()))
        );
    }

    #[test]
    fn parse_short_domain_is_domain_error() {
        assert_eq!(
            parse("00:41:00.0"),
            Err(PciAddressError::Domain("00:41:00.0".to_owned()))
        );
    }

    #[test]
    fn parse_overlong_domain_is_domain_error() {
        assert_eq!(
            parse("123456789:41:00.0"),
            Err(PciAddressError::Domain("123456789:41:00.0".to_owned()))
        );
    }

    #[test]
    fn parse_non_hex_bus_is_bus_error() {
        assert_eq!(
            parse("0000:4g:00.0"),
            Err(PciAddressError::Bus("0000:4g:00.0".to_owned()))
        );
    }

    #[test]
    fn parse_device_above_1f_is_device_error() {
        assert_eq!(
            parse("0000:41:20.0"),
            Err(PciAddressError::Device("0000:41:20.0".to_owned()))
        );
    }

    #[test]
    fn parse_function_8_is_function_error() {
        assert_eq!(
            parse("0000:41:00.8"),
            Err(PciAddressError::Function("0000:41:00.8".to_owned()))
        );
    }

    #[test]
    fn parse_path_traversal_is_rejected() {
        assert_eq!(
            parse("../x"),
            Err(PciAddressError::Shape("../x".to_owned()))
        );
    }

    #[test]
    fn parse_trailing_newline_is_function_error() {
        assert_eq!(
            parse("0000:41:00.0\n"),
            Err(PciAddressError::Function("0000:41:00.0\n".to_owned()))
        );
    }

    #[test]
    fn same_slot_audio_function_is_true() {
        let gpu = PciAddress {
            domain: 0,
            bus: 0x41,
            device: 0,
            function: 0,
        };
        let audio = PciAddress {
            domain: 0,
            bus: 0x41,
            device: 0,
            function: 1,
        };
        assert!(gpu.same_slot(&audio));
    }

    /// Every bus, device and function, in domains at both ends of the 16-bit range and beyond
    /// it (Intel VMD), prints as the kernel names it and parses back to itself.
    #[test]
    fn display_then_parse_every_bus_device_function_is_identity() {
        let mut wrong = Vec::new();
        for domain in [0, 1, 0xffff, 0x1_0000, u32::MAX] {
            for bus in 0..=u8::MAX {
                for device in 0..0x20 {
                    for function in 0..8 {
                        let address = PciAddress {
                            domain,
                            bus,
                            device,
                            function,
                        };
                        if address.to_string().parse() != Ok(address) {
                            wrong.push(address);
                        }
                    }
                }
            }
        }
        assert_eq!(wrong, Vec::new());
    }

    proptest::proptest! {
        #[test]
        fn display_then_parse_any_address_is_identity(
            domain in proptest::prelude::any::<u32>(),
            bus in proptest::prelude::any::<u8>(),
            device in 0u8..0x20,
            function in 0u8..8,
        ) {
            let address = PciAddress::new(domain, bus, device, function);
            proptest::prop_assert_eq!(
                address.map(|a| a.to_string().parse::<PciAddress>()),
                address.map(Ok)
            );
        }

        #[test]
        fn parse_address_shaped_text_prints_it_in_lowercase(
            text in "[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[01][0-9a-fA-F]\\.[0-7]",
        ) {
            proptest::prop_assert_eq!(
                parse(&text).map(|a| a.to_string()),
                Ok(text.to_ascii_lowercase())
            );
        }

        #[test]
        fn parse_any_text_that_parses_prints_what_parses_back(text in "\\PC{0,20}") {
            if let Ok(address) = parse(&text) {
                proptest::prop_assert_eq!(parse(&address.to_string()), Ok(address));
            }
        }
    }

    #[test]
    fn serde_uses_string_form() {
        let addr = PciAddress {
            domain: 1,
            bus: 2,
            device: 3,
            function: 4,
        };
        assert_eq!(
            serde_json::to_string(&addr).ok(),
            Some("\"0001:02:03.4\"".to_owned())
        );
    }
}
