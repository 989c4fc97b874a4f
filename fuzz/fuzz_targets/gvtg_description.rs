//! An Intel GVT-g type's `description` and a GVT-g type id from any text: never panic; the
//! final newline changes nothing; the frame buffer is the sum of the two sizes, never an
//! overflow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::fuzzing::{gvtg_description, gvtg_type_instances};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = gvtg_description(text);
    assert_eq!(gvtg_description(&format!("{text}\n")), parsed, "{text:?}");
    if let Some(count) = gvtg_type_instances(text) {
        assert!(count > 0, "{text:?}");
    }
});
