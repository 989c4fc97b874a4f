//! A VF's `nvidia/creatable_vgpu_types` from any text: never panics; every type has a non-zero
//! id and a trimmed, non-empty name; the final newline changes no list read (only where in an
//! error's line a `\r` ends).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::fuzzing::creatable_vgpu_types;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = creatable_vgpu_types(text);
    if let Ok(types) = &parsed {
        for (id, name) in types {
            assert!(*id != 0, "{text:?}");
            assert!(
                !name.is_empty() && name.trim() == name,
                "{text:?}: {name:?}"
            );
        }
    }
    assert_eq!(
        creatable_vgpu_types(&format!("{text}\n")).ok(),
        parsed.ok(),
        "{text:?}"
    );
});
