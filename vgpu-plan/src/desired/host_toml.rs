//! `host.toml`, `vgpu`'s desired-state format:
//!
//! ```toml
//! version = 1
//!
//! [configs.default]            # a named config (`-c default`); options here apply to its GPUs
//! persistence = "auto"         # "auto" (started at boot) or "manual"
//!
//! [[configs.default.gpu]]
//! model = "L40S"               # selection: all = true | address | model | vendor | numa
//! optional = true              # matching no GPU is not an error (default false)
//! sizes = "4x12GiB"            # partition: sizes | types | vfs
//!
//! [[configs.default.gpu]]
//! address = "0000:3b:00.0"
//! types = { "T4-2Q" = 8 }
//!
//! [[configs.default.gpu]]
//! vendor = "intel"
//! model = "Flex 170"
//! vfs = 8
//! vf_driver = "vfio-pci"       # or "default"
//!
//! [[configs.default.gpu]]
//! model = "L40S"
//! types = { "L40S-24Q" = 2 }
//! scheduler = { policy = "equal-share", timeslice_ms = 2 }   # NVIDIA only; best-effort
//!                              # takes no time slice, which is the driver's default if absent
//!
//! [[configs.default.gpu]]
//! address = "0000:41:00.0"
//! mig = { "1g.18gb" = 3, "2g.35gb" = 2 }   # MIG geometry: GPU-instance profiles and counts,
//!                              # or "disabled"; absent leaves MIG mode and instances alone
//! types = { "H200X-1-18C" = 3, "H200X-2-35C" = 2 }
//!
//! [[configs.default.gpu]]
//! model = "L40S"
//! size_mode = "mixed"          # or "equal"; several time-sliced types imply "mixed"
//! types = { "L40S-24Q" = 1, "L40S-12Q" = 2 }
//! ```
//!
//! Unknown keys, a missing or other `version`, and values of the wrong shape are errors naming
//! the line and column.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

use crate::desired::{
    Desired, Entry, Location, MigGeometry, MigRequest, Partition, Selection, SizeItem,
    SizeModeRequest, TypeItem, VfDriver, error_at, parse_gpu_instance_profile, parse_series,
    parse_size, parse_vendor,
};
use crate::error::{Error, Result};
use crate::model::definition::Start;
use crate::model::nvml::SchedulerPolicy;
use crate::model::nvml::SchedulerRequest;
use crate::model::pci::PciAddress;

/// The version of `host.toml` this code reads.
const VERSION: i64 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Spanned<i64>,
    #[serde(default)]
    configs: BTreeMap<String, Spanned<RawConfig>>,
}

/// Options a config sets for its GPUs and a GPU entry may set for itself.
struct RawOptions {
    series: Option<Spanned<String>>,
    round_up: Option<bool>,
    persistence: Option<Start>,
    vf_driver: Option<VfDriver>,
}

// serde's `flatten` does not combine with `deny_unknown_fields`, so each table lists the
// options itself.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    gpu: Vec<Spanned<RawEntry>>,
    series: Option<Spanned<String>>,
    round_up: Option<bool>,
    persistence: Option<Start>,
    vf_driver: Option<VfDriver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    all: Option<Spanned<bool>>,
    address: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    vendor: Option<Spanned<String>>,
    numa: Option<Spanned<u32>>,
    sizes: Option<Spanned<RawSizes>>,
    types: Option<Spanned<BTreeMap<Spanned<String>, Spanned<u32>>>>,
    vfs: Option<Spanned<u32>>,
    series: Option<Spanned<String>>,
    round_up: Option<bool>,
    persistence: Option<Start>,
    vf_driver: Option<VfDriver>,
    scheduler: Option<Spanned<RawScheduler>>,
    mig: Option<Spanned<RawMig>>,
    optional: Option<bool>,
    tenant: Option<String>,
    size_mode: Option<Spanned<String>>,
}

/// `mig = "disabled"` or `mig = { "1g.18gb" = 3 }`, in file order.
enum RawMig {
    Text(String),
    Table(Vec<(Spanned<String>, Spanned<i64>)>),
}

/// What `mig` must be, for error messages.
const MIG_EXPECTED: &str = "\"disabled\" or a table of GPU-instance profiles and counts, such as \
     { \"1g.18gb\" = 7 }";

impl<'de> Deserialize<'de> for RawMig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct MigVisitor;
        impl<'de> Visitor<'de> for MigVisitor {
            type Value = RawMig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(MIG_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<RawMig, E> {
                Ok(RawMig::Text(text.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<RawMig, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<Spanned<String>, Spanned<i64>>()? {
                    entries.push(entry);
                }
                Ok(RawMig::Table(entries))
            }
        }
        deserializer.deserialize_any(MigVisitor)
    }
}

/// `scheduler = { policy = "equal-share", timeslice_ms = 2 }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduler {
    policy: Spanned<String>,
    timeslice_ms: Option<Spanned<u32>>,
}

/// `sizes = "4x12GiB"` or `sizes = ["1x24GiB", "2x12GiB"]`.
enum RawSizes {
    One(String),
    Many(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for RawSizes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct SizesVisitor;
        impl<'de> Visitor<'de> for SizesVisitor {
            type Value = RawSizes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"4x12GiB\", or a list of them")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<RawSizes, E> {
                Ok(RawSizes::One(text.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<RawSizes, A::Error> {
                let mut sizes = Vec::new();
                while let Some(size) = seq.next_element::<Spanned<String>>()? {
                    sizes.push(size);
                }
                Ok(RawSizes::Many(sizes))
            }
        }
        deserializer.deserialize_any(SizesVisitor)
    }
}

/// Parses `host.toml` text read from `path` into its configs.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<Desired>> {
    let file = Source { path, text };
    let raw: RawFile = toml::from_str(text).map_err(|err| {
        let at = err
            .span()
            .map_or(Location { line: 1, column: 1 }, |s| file.at(&s));
        error_at(path, at, err.message().trim_end().to_owned())
    })?;
    if *raw.version.get_ref() != VERSION {
        return Err(file.error(
            &raw.version.span(),
            format!(
                "version {} is not supported: expected version = {VERSION}",
                raw.version.get_ref()
            ),
        ));
    }
    if raw.configs.is_empty() {
        return Err(error_at(
            path,
            Location { line: 1, column: 1 },
            "no configs: expected at least one [configs.NAME] with [[configs.NAME.gpu]] entries",
        ));
    }
    let mut configs = Vec::new();
    for (name, config) in raw.configs {
        let span = config.span();
        let config = config.into_inner();
        if config.gpu.is_empty() {
            return Err(file.error(
                &span,
                format!("config {name:?} has no GPUs: expected [[configs.{name}.gpu]] entries"),
            ));
        }
        let defaults = RawOptions {
            series: config.series,
            round_up: config.round_up,
            persistence: config.persistence,
            vf_driver: config.vf_driver,
        };
        let mut entries = Vec::new();
        for entry in config.gpu {
            entries.push(file.entry(entry, &defaults)?);
        }
        configs.push(Desired {
            name,
            file: path.to_path_buf(),
            entries,
        });
    }
    Ok(configs)
}

struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn at(&self, span: &Range<usize>) -> Location {
        Location::of_offset(self.text, span.start)
    }

    fn error(&self, span: &Range<usize>, message: impl Into<String>) -> Error {
        error_at(self.path, self.at(span), message)
    }

    fn entry(&self, raw: Spanned<RawEntry>, defaults: &RawOptions) -> Result<Entry> {
        let entry_at = self.at(&raw.span());
        let entry_span = raw.span();
        let raw = raw.into_inner();
        let selection = self.selection(&raw, &entry_span)?;
        let partition = self.partition(&raw, &entry_span)?;
        let series = match raw.series.as_ref().or(defaults.series.as_ref()) {
            Some(series) => parse_series(series.get_ref()).ok_or_else(|| {
                self.error(
                    &series.span(),
                    format!(
                        "series {:?} is not one of \"A\", \"B\", \"C\", \"Q\"",
                        series.get_ref()
                    ),
                )
            })?,
            None => 'Q',
        };
        let size_mode = match &raw.size_mode {
            Some(mode) => Some(SizeModeRequest {
                mode: mode
                    .get_ref()
                    .parse()
                    .map_err(|why: String| self.error(&mode.span(), why))?,
                at: self.at(&mode.span()),
                implied: false,
            }),
            None => match &partition {
                Partition::Types(items) => SizeModeRequest::implied_by(items),
                _ => None,
            },
        };
        Ok(Entry {
            selection,
            partition,
            series,
            round_up: raw.round_up.or(defaults.round_up).unwrap_or(false),
            persistence: raw
                .persistence
                .or(defaults.persistence)
                .unwrap_or(Start::Auto),
            vf_driver: raw.vf_driver.or(defaults.vf_driver).unwrap_or_default(),
            scheduler: match raw.scheduler {
                Some(raw) => Some(self.scheduler(raw.into_inner())?),
                None => None,
            },
            mig: match raw.mig {
                Some(raw) => Some(self.mig(raw)?),
                None => None,
            },
            tenant: raw.tenant,
            size_mode,
            at: entry_at,
        })
    }

    fn mig(&self, raw: Spanned<RawMig>) -> Result<MigRequest> {
        let span = raw.span();
        let geometry = match raw.into_inner() {
            RawMig::Text(text) if text == "disabled" => MigGeometry::Disabled,
            RawMig::Text(text) => {
                return Err(self.error(&span, format!("mig = {text:?}: expected {MIG_EXPECTED}")));
            }
            RawMig::Table(entries) => {
                let mut instances = BTreeMap::new();
                for (profile, count) in entries {
                    let name = parse_gpu_instance_profile(profile.get_ref())
                        .map_err(|message| self.error(&profile.span(), message))?;
                    let n = u32::try_from(*count.get_ref())
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| {
                            self.error(
                                &count.span(),
                                format!(
                                    "{:?} = {}: expected a count of 1 or more (leave the profile \
                                     out for none)",
                                    profile.get_ref(),
                                    count.get_ref()
                                ),
                            )
                        })?;
                    instances.insert(name, n);
                }
                MigGeometry::Instances(instances)
            }
        };
        Ok(MigRequest {
            geometry,
            at: self.at(&span),
            implied: false,
        })
    }

    fn scheduler(&self, raw: RawScheduler) -> Result<SchedulerRequest> {
        let policy: SchedulerPolicy = raw.policy.get_ref().parse().map_err(|_| {
            self.error(
                &raw.policy.span(),
                format!(
                    "scheduler policy {:?} is not one of \"best-effort\", \"equal-share\", \
                     \"fixed-share\"",
                    raw.policy.get_ref()
                ),
            )
        })?;
        let timeslice_ms = match raw.timeslice_ms {
            Some(ms) if !policy.takes_timeslice() => {
                return Err(self.error(
                    &ms.span(),
                    format!("{policy} takes no time slice (equal-share and fixed-share do)"),
                ));
            }
            Some(ms) if *ms.get_ref() == 0 => {
                return Err(self.error(
                    &ms.span(),
                    "timeslice_ms = 0: leave it out for the driver's default",
                ));
            }
            Some(ms) => Some(*ms.get_ref()),
            None => None,
        };
        Ok(SchedulerRequest {
            policy,
            timeslice_ms,
        })
    }

    fn selection(&self, raw: &RawEntry, entry: &Range<usize>) -> Result<Selection> {
        let mut selection = Selection::default();
        if let Some(all) = &raw.all {
            if !*all.get_ref() {
                return Err(self.error(
                    &all.span(),
                    "all = false selects nothing: expected all = true, or another selection",
                ));
            }
            let others = raw.address.is_some()
                || raw.model.is_some()
                || raw.vendor.is_some()
                || raw.numa.is_some();
            if others {
                return Err(self.error(
                    &all.span(),
                    "all = true cannot be combined with address, model, vendor or numa",
                ));
            }
            selection.all = true;
        }
        if let Some(address) = &raw.address {
            let parsed = address.get_ref().parse::<PciAddress>().map_err(|err| {
                self.error(
                    &address.span(),
                    format!("{err}: expected a full PCI address such as \"0000:41:00.0\""),
                )
            })?;
            selection.address = Some(parsed);
        }
        if let Some(model) = &raw.model {
            if model.get_ref().trim().is_empty() {
                return Err(self.error(&model.span(), "model is empty: expected a model name"));
            }
            selection.model = Some(model.get_ref().trim().to_owned());
        }
        if let Some(vendor) = &raw.vendor {
            selection.vendor = Some(parse_vendor(vendor.get_ref()).ok_or_else(|| {
                self.error(
                    &vendor.span(),
                    format!(
                        "vendor {:?} is unknown: expected \"nvidia\", \"intel\", \"amd\" or a PCI vendor id such as \"10de\"",
                        vendor.get_ref()
                    ),
                )
            })?);
        }
        selection.numa_node = raw.numa.as_ref().map(|n| *n.get_ref());
        selection.optional = raw.optional.unwrap_or(false);
        let criteria = Selection {
            optional: false,
            ..selection.clone()
        };
        if criteria == Selection::default() {
            return Err(self.error(
                entry,
                "no selection: expected all = true, address, model, vendor or numa",
            ));
        }
        Ok(selection)
    }

    fn partition(&self, raw: &RawEntry, entry: &Range<usize>) -> Result<Partition> {
        let given = [raw.sizes.is_some(), raw.types.is_some(), raw.vfs.is_some()];
        match given.iter().filter(|g| **g).count() {
            0 => {
                return Err(self.error(
                    entry,
                    "no partition: expected sizes = \"4x12GiB\", types = { \"L40S-12Q\" = 4 } or vfs = 8",
                ));
            }
            1 => {}
            _ => {
                return Err(self.error(
                    entry,
                    "more than one partition: expected only one of sizes, types and vfs",
                ));
            }
        }
        if let Some(sizes) = &raw.sizes {
            let texts: Vec<(String, Range<usize>)> = match sizes.get_ref() {
                RawSizes::One(text) => vec![(text.clone(), sizes.span())],
                RawSizes::Many(list) => list
                    .iter()
                    .map(|s| (s.get_ref().clone(), s.span()))
                    .collect(),
            };
            if texts.is_empty() {
                return Err(self.error(
                    &sizes.span(),
                    "sizes is empty: expected at least one size (types = {} asks for no vGPUs)",
                ));
            }
            let mut items = Vec::new();
            for (text, span) in texts {
                let (count, framebuffer_mib) =
                    parse_size(&text).map_err(|message| self.error(&span, message))?;
                items.push(SizeItem {
                    count,
                    framebuffer_mib,
                    at: self.at(&span),
                });
            }
            return Ok(Partition::Sizes(items));
        }
        if let Some(types) = &raw.types {
            let mut items = Vec::new();
            for (name, count) in types.get_ref() {
                if *count.get_ref() == 0 {
                    return Err(self.error(
                        &count.span(),
                        format!(
                            "{:?} = 0: expected a count of 1 or more (leave the type out for none)",
                            name.get_ref()
                        ),
                    ));
                }
                crate::model::name::validate_type(name.get_ref()).map_err(|_| {
                    self.error(
                        &name.span(),
                        format!(
                            "{:?} is not a vGPU type name: expected letters, digits, space, '_', '-', '.'",
                            name.get_ref()
                        ),
                    )
                })?;
                items.push(TypeItem {
                    name: name.get_ref().clone(),
                    count: *count.get_ref(),
                    at: self.at(&name.span()),
                });
            }
            return Ok(Partition::Types(items));
        }
        match &raw.vfs {
            Some(vfs) => Ok(Partition::Vfs {
                count: *vfs.get_ref(),
                at: self.at(&vfs.span()),
            }),
            None => Err(self.error(entry, "no partition")),
        }
    }
}
