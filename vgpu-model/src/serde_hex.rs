//! Serialisers for ids written as lowercase hex without `0x`, as `lspci -n` prints them.

use serde::Serializer;

/// `Some(0x10de)` as `"10de"`, `None` as `null`.
pub fn option_u16<S: Serializer>(value: &Option<u16>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serializer.collect_str(&format_args!("{v:04x}")),
        None => serializer.serialize_none(),
    }
}

/// `Some(0x030200)` as `"030200"`, `None` as `null`.
pub fn option_class<S: Serializer>(value: &Option<u32>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serializer.collect_str(&format_args!("{v:06x}")),
        None => serializer.serialize_none(),
    }
}
