//! YAML with locations, for the two NVIDIA formats read as YAML (vgpu-device-manager's and
//! mig-parted's): errors where the YAML crate marks them, the place of any node by its path,
//! and the `devices` and `device-filter` values both formats share.
//!
//! Each format's raw entry still declares these two fields itself, as `host.toml`'s tables
//! declare their options: serde's `flatten` does not combine with `deny_unknown_fields`. What
//! the fields mean is read once, by [`YamlSource::nvidia_selection`].

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use std::collections::BTreeMap;

use crate::desired::{Desired, Entry, Location, Selection, error_at};
use crate::error::{Error, Result};
use crate::model::NVIDIA_VENDOR_ID;

/// `device-filter: "0x1EB810DE"` or a list of them.
pub(super) struct DeviceFilter(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for DeviceFilter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct FilterVisitor;
        impl<'de> Visitor<'de> for FilterVisitor {
            type Value = DeviceFilter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a device id such as \"0x1EB810DE\", or a list of them")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<DeviceFilter, E> {
                Ok(DeviceFilter(vec![text.to_owned()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<DeviceFilter, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<String>()? {
                    ids.push(id);
                }
                Ok(DeviceFilter(ids))
            }
        }
        deserializer.deserialize_any(FilterVisitor)
    }
}

/// `devices: all` or `devices: [0, 1]`.
pub(super) enum Devices {
    /// `all`.
    All,
    /// Indices among the host's NVIDIA GPUs in address order.
    Indices(Vec<u32>),
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct DevicesVisitor;
        impl<'de> Visitor<'de> for DevicesVisitor {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`all` or a list of GPU indices such as [0, 1]")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<Devices, E> {
                if text == "all" {
                    Ok(Devices::All)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(text), &self))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Devices, A::Error> {
                let mut indices = Vec::new();
                while let Some(index) = seq.next_element::<u32>()? {
                    indices.push(index);
                }
                Ok(Devices::Indices(indices))
            }
        }
        deserializer.deserialize_any(DevicesVisitor)
    }
}

/// A YAML file being read: errors at the node a path leads to.
pub(super) struct YamlSource<'a> {
    /// The file.
    pub(super) path: &'a Path,
    /// Its text.
    pub(super) text: &'a str,
}

impl YamlSource<'_> {
    /// Where the node at `path` is.
    pub(super) fn at(&self, path: &[Seg<'_>]) -> Location {
        locate(self.text, path)
    }

    /// An error at the node at `path`.
    pub(super) fn error(&self, path: &[Seg<'_>], message: impl Into<String>) -> Error {
        error_at(self.path, self.at(path), message)
    }

    /// The configs of one of NVIDIA's v1 files: `version` is `v1`, the map under `key`
    /// (`vgpu-configs`, `mig-configs`) has at least one config, each with at least one entry,
    /// each turned into an [`Entry`] by `entry_of` (config name, index, raw entry).
    pub(super) fn v1_configs<E>(
        &self,
        version: &str,
        key: &str,
        raw: BTreeMap<String, Vec<E>>,
        entry_of: impl Fn(&YamlSource<'_>, &str, usize, E) -> Result<Entry>,
    ) -> Result<Vec<Desired>> {
        self.check_v1(version, key, raw.len())?;
        let mut configs = Vec::new();
        for (name, entries) in raw {
            if entries.is_empty() {
                return Err(self.error(
                    &[Seg::Key(key), Seg::Key(&name)],
                    format!("config {name:?} is empty: expected at least one entry"),
                ));
            }
            let mut out = Vec::new();
            for (index, entry) in entries.into_iter().enumerate() {
                out.push(entry_of(self, &name, index, entry)?);
            }
            configs.push(Desired {
                name,
                file: self.path.to_path_buf(),
                entries: out,
            });
        }
        Ok(configs)
    }

    /// Checks the head of one of NVIDIA's v1 files: `version` is `v1`, and the map `configs`
    /// (`vgpu-configs`, `mig-configs`) has `count` entries, at least one.
    fn check_v1(&self, version: &str, configs: &str, count: usize) -> Result<()> {
        if version != "v1" {
            return Err(self.error(
                &[Seg::Key("version")],
                format!("version {version:?} is not supported: expected version: v1"),
            ));
        }
        if count == 0 {
            return Err(error_at(
                self.path,
                Location { line: 1, column: 1 },
                format!("no configs: expected at least one entry under {configs}"),
            ));
        }
        Ok(())
    }

    /// The GPUs the entry at `here` selects, as both NVIDIA tools select them: NVIDIA GPUs
    /// only, by `devices` (indices among them in address order) and `device-filter`; optional,
    /// since their configs serve fleets of mixed hosts.
    pub(super) fn nvidia_selection(
        &self,
        here: &[Seg<'_>],
        devices: Devices,
        filter: Option<DeviceFilter>,
    ) -> Result<Selection> {
        let mut selection = Selection {
            vendor: Some(NVIDIA_VENDOR_ID),
            optional: true,
            ..Selection::default()
        };
        if let Devices::Indices(indices) = devices {
            selection.nvidia_indices = Some(indices);
        }
        for id in filter.map(|f| f.0).unwrap_or_default() {
            let parsed = parse_device_id(&id).ok_or_else(|| {
                let at = [here, &[Seg::Key("device-filter")]].concat();
                self.error(
                    &at,
                    format!(
                        "device-filter {id:?} is not a device id: expected the PCI device id and vendor id as one number, such as \"0x1EB810DE\""
                    ),
                )
            })?;
            selection.device_ids.push(parsed);
        }
        Ok(selection)
    }
}

/// A syntax or shape error, where the YAML crate marks it.
pub(super) fn yaml_error(path: &Path, text: &str, err: &serde_yaml_ng::Error) -> Error {
    let mut message = err.to_string();
    let at = match err.location() {
        Some(mark) => {
            // The crate appends the place to its message; it is said once, in front.
            let suffix = format!(" at line {} column {}", mark.line(), mark.column());
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_owned();
            }
            at_mark(text, mark)
        }
        None => Location { line: 1, column: 1 },
    };
    error_at(path, at, message)
}

/// Where the YAML crate's `mark` is in `text`. The crate marks the end of a text without a final
/// line break on the line after the last, which is no line of the file: such a mark is said at
/// the end of the text.
fn at_mark(text: &str, mark: serde_yaml_ng::Location) -> Location {
    let marked = Location {
        line: mark.line(),
        column: mark.column(),
    };
    marked.min(yaml_end(text))
}

/// Where the end of `text` is, its lines broken as YAML 1.1 breaks them (`\n`, `\r\n`, `\r`,
/// U+0085, U+2028, U+2029) and its columns counted in characters, as the YAML crate counts.
fn yaml_end(text: &str) -> Location {
    let mut end = Location { line: 1, column: 1 };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                end = Location {
                    line: end.line + 1,
                    column: 1,
                };
            }
            _ => end.column += 1,
        }
    }
    end
}

/// vgpu-device-manager's device id, `device << 16 | vendor`, in hex with `0x` or in decimal;
/// `(vendor, device)`.
fn parse_device_id(text: &str) -> Option<(u16, u16)> {
    let text = text.trim();
    let value = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
        None => text.parse::<u32>().ok()?,
    };
    Some(((value & 0xffff) as u16, (value >> 16) as u16))
}

/// One step of a path into the document: a mapping key or a sequence index.
#[derive(Debug, Clone, Copy)]
pub(super) enum Seg<'a> {
    /// The value of this key.
    Key(&'a str),
    /// This key itself (last in a path).
    KeyName(&'a str),
    /// This element.
    Index(usize),
}

/// Where the node at `path` is: the YAML crate marks an error raised inside the node's own
/// deserialization with the node's start (a key's value, a sequence element). A path that is
/// not in the document falls back to its longest prefix that is, then the start.
pub(super) fn locate(text: &str, path: &[Seg<'_>]) -> Location {
    for len in (1..=path.len()).rev() {
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        // The text parsed already, so the only error is the one raised on arrival.
        if let Err(err) = Seek(&path[..len]).deserialize(deserializer) {
            if let Some(mark) = err.location() {
                return at_mark(text, mark);
            }
        }
    }
    Location { line: 1, column: 1 }
}

/// Walks a document along a path and fails inside the node it arrives at.
struct Seek<'p, 'a>(&'p [Seg<'a>]);

impl<'de> DeserializeSeed<'de> for Seek<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        if self.0.is_empty() {
            return deserializer.deserialize_any(Arrived);
        }
        deserializer.deserialize_any(self)
    }
}

/// Reads a mapping key, failing (marked at the key) when it is the one wanted.
struct KeyProbe<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyProbe<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> std::result::Result<(), E> {
        if key == self.0 {
            Err(E::custom("located"))
        } else {
            Ok(())
        }
    }
}

/// A visitor that accepts nothing: every node it is given fails, marked where it starts.
struct Arrived;

impl Visitor<'_> for Arrived {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("nothing: this node is being located")
    }
}

impl<'de> Visitor<'de> for Seek<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        if let Some(Seg::KeyName(wanted)) = self.0.first() {
            while map.next_key_seed(KeyProbe(wanted))?.is_some() {
                map.next_value::<IgnoredAny>()?;
            }
            return Ok(());
        }
        while let Some(key) = map.next_key::<String>()? {
            match self.0.first() {
                Some(Seg::Key(wanted)) if *wanted == key => {
                    return map.next_value_seed(Seek(&self.0[1..]));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let mut index = 0;
        loop {
            match self.0.first() {
                Some(Seg::Index(wanted)) if *wanted == index => {
                    return seq.next_element_seed(Seek(&self.0[1..])).map(drop);
                }
                _ => {
                    if seq.next_element::<IgnoredAny>()?.is_none() {
                        return Ok(());
                    }
                }
            }
            index += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_device_id_hex_is_device_then_vendor() {
        assert_eq!(parse_device_id("0x1EB810DE"), Some((0x10de, 0x1eb8)));
    }

    #[test]
    fn parse_device_id_garbage_is_none() {
        assert_eq!(parse_device_id("T4"), None);
    }

    #[test]
    fn locate_type_key_is_its_line_and_column() {
        let text = "version: v1\nvgpu-configs:\n  default:\n  - devices: all\n    vgpu-devices:\n      T4-1Q: 16\n";
        let at = [
            Seg::Key("vgpu-configs"),
            Seg::Key("default"),
            Seg::Index(0),
            Seg::Key("vgpu-devices"),
            Seg::KeyName("T4-1Q"),
        ];
        assert_eq!(locate(text, &at), Location { line: 6, column: 7 });
    }

    #[test]
    fn locate_missing_key_falls_back_to_its_parent() {
        let text =
            "version: v1\nvgpu-configs:\n  default:\n  - devices: all\n    vgpu-devices: {}\n";
        let at = [
            Seg::Key("vgpu-configs"),
            Seg::Key("default"),
            Seg::Index(0),
            Seg::Key("device-filter"),
        ];
        assert_eq!(locate(text, &at), Location { line: 4, column: 5 });
    }
}
