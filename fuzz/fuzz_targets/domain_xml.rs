//! A libvirt domain's XML from any bytes, as the libvirt hook reads it from stdin: never panics;
//! each hostdev's text is the element as the document has it; the domain's hostdevs are those
//! `hostdevs` reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_domain::xml;

fuzz_target!(|data: &[u8]| {
    let hostdevs = xml::hostdevs_in_bytes(data);
    if let Ok(found) = &hostdevs {
        let Ok(text) = std::str::from_utf8(data) else {
            panic!("hostdevs read from bytes that are not UTF-8");
        };
        for hostdev in found {
            assert!(
                hostdev.text.starts_with('<') && text.contains(&hostdev.text),
                "{text:?}: {:?}",
                hostdev.text
            );
        }
    }
    if let Ok(domain) = xml::domain_in_bytes(data) {
        assert_eq!(hostdevs.as_ref().ok(), Some(&domain.hostdevs));
        assert!(!domain.name.is_empty() && domain.name.trim() == domain.name);
    }
});
