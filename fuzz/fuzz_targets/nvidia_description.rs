//! An NVIDIA mdev type's `description` from any text: never panics, and the newline sysfs
//! ends the file with changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::fuzzing::nvidia_description;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = nvidia_description(text);
    assert_eq!(nvidia_description(&format!("{text}\n")), parsed, "{text:?}");
});
