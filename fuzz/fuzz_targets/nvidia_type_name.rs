//! An NVIDIA vGPU type name from any text: never panics; the `NVIDIA `/`GRID ` prefix changes
//! nothing and leaves no space around the name; a name that parses states at least 512 MiB, a
//! multiple of 512 MiB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::fuzzing::{nvidia_type_name, strip_vendor_prefix};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = nvidia_type_name(text);
    let bare = strip_vendor_prefix(text);
    assert_eq!(bare.trim(), bare, "{text:?}");
    // A name with one prefix at most (`NVIDIA NVIDIA A40-2Q` is not one).
    if strip_vendor_prefix(bare) == bare {
        assert_eq!(nvidia_type_name(bare), parsed, "{text:?}");
        assert_eq!(
            nvidia_type_name(&format!("NVIDIA {bare}")),
            parsed,
            "{text:?}"
        );
        assert_eq!(
            nvidia_type_name(&format!("GRID {bare}")),
            parsed,
            "{text:?}"
        );
    }
    if let Some((_, framebuffer_mib)) = parsed {
        assert!(
            framebuffer_mib >= 512 && framebuffer_mib % 512 == 0,
            "{text:?}: {framebuffer_mib}"
        );
    }
});
