//! `PciAddress` from any text: never panics, and what parses prints in the kernel's canonical
//! form (lowercase hex, at least four domain digits), which parses back to the same address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::model::pci::PciAddress;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(address) = text.parse::<PciAddress>() else {
        return;
    };
    let shown = address.to_string();
    assert_eq!(
        shown.parse::<PciAddress>(),
        Ok(address),
        "{text:?} printed as {shown:?}"
    );
    assert_eq!(shown, shown.to_ascii_lowercase(), "{text:?}");
    assert_eq!(
        PciAddress::new(
            address.domain(),
            address.bus(),
            address.device(),
            address.function()
        ),
        Some(address),
        "{text:?}"
    );
});
