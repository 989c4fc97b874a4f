//! Pure parsers for the text the kernel and vendor drivers put in sysfs, and for vGPU type
//! names: their grammar, their vendor prefix, and the GPU instance a MIG-backed one needs.
//!
//! Each parser takes the file's text and returns a typed value or a typed error; none of them
//! touches the filesystem, so each is tested on strings captured from real hosts.

use serde::Serialize;

use crate::MigBacking;

/// A parse failure, with what was wrong and where in the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A `key=value` (or `key: value`) field has a value that does not parse.
    #[error("field {field:?} has invalid value {value:?}")]
    Field {
        /// The field name.
        field: String,
        /// Its value.
        value: String,
    },
    /// The text has none of the fields that identify the format.
    #[error("no recognised fields")]
    Unrecognised,
    /// `creatable_vgpu_types` does not start with its `ID : vGPU Name` header.
    #[error("missing the \"ID : vGPU Name\" header")]
    MissingHeader,
    /// A line of `creatable_vgpu_types` is not `<id> : <name>`.
    #[error("line {line} is not \"<id> : <name>\": {text:?}")]
    Line {
        /// One-based line number.
        line: usize,
        /// The line, cut to 80 characters.
        text: String,
    },
}

fn field_error(field: &str, value: &str) -> ParseError {
    ParseError::Field {
        field: field.to_owned(),
        value: value.chars().take(80).collect(),
    }
}

/// The one-line `description` of an NVIDIA mdev type, e.g.
/// `num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=7680x4320, max_instance=4`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NvidiaDescription {
    /// `num_heads`: virtual display heads.
    pub num_heads: Option<u32>,
    /// `frl_config`: frame-rate limit.
    pub frl_config: Option<u32>,
    /// `framebuffer`, in MiB.
    pub framebuffer_mib: Option<u64>,
    /// `max_resolution`, as written.
    pub max_resolution: Option<String>,
    /// `max_instance`: vGPUs of this type per physical GPU.
    pub max_instance: Option<u32>,
}

/// Parses a size written as `2048M`, `1G` or `512` (MiB).
fn parse_mib(value: &str) -> Option<u64> {
    let value = value.trim();
    let (digits, scale) = if let Some(d) = value.strip_suffix(['G', 'g']) {
        (d, 1024)
    } else if let Some(d) = value.strip_suffix(['M', 'm']) {
        (d, 1)
    } else {
        (value, 1)
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// Parses an NVIDIA mdev `description` (driver `nvidia`, file
/// `mdev_supported_types/<type>/description`). Unknown fields are ignored, so newer drivers that
/// add fields still parse; a text with none of the known fields is [`ParseError::Unrecognised`].
pub fn parse_nvidia_description(text: &str) -> Result<NvidiaDescription, ParseError> {
    let mut out = NvidiaDescription::default();
    let mut known = 0;
    for field in text.trim().split(',') {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let num = || value.parse::<u32>().map_err(|_| field_error(key, value));
        match key {
            "num_heads" => out.num_heads = Some(num()?),
            "frl_config" => out.frl_config = Some(num()?),
            "max_instance" => out.max_instance = Some(num()?),
            "framebuffer" => {
                out.framebuffer_mib = Some(parse_mib(value).ok_or_else(|| field_error(key, value))?)
            }
            "max_resolution" => out.max_resolution = Some(value.to_owned()),
            _ => continue,
        }
        known += 1;
    }
    if known == 0 {
        return Err(ParseError::Unrecognised);
    }
    Ok(out)
}

/// The multi-line `description` of an Intel GVT-g type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GvtgDescription {
    /// `low_gm_size` (aperture) in MiB.
    pub low_gm_mib: Option<u64>,
    /// `high_gm_size` in MiB.
    pub high_gm_mib: Option<u64>,
    /// `fence` registers.
    pub fence: Option<u32>,
    /// `resolution`, as written.
    pub resolution: Option<String>,
    /// `weight`: scheduling weight.
    pub weight: Option<u32>,
}

impl GvtgDescription {
    /// Graphics memory of one vGPU (aperture plus high memory), when both are known.
    pub fn framebuffer_mib(&self) -> Option<u64> {
        self.low_gm_mib?.checked_add(self.high_gm_mib?)
    }
}

/// Parses an Intel GVT-g `description` (`drivers/gpu/drm/i915/gvt/kvmgt.c`), e.g.
/// `low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n`.
pub fn parse_gvtg_description(text: &str) -> Result<GvtgDescription, ParseError> {
    let mut out = GvtgDescription::default();
    let mut known = 0;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let mib = || {
            value
                .strip_suffix("MB")
                .and_then(parse_mib)
                .ok_or_else(|| field_error(key, value))
        };
        let num = || value.parse::<u32>().map_err(|_| field_error(key, value));
        match key {
            "low_gm_size" => out.low_gm_mib = Some(mib()?),
            "high_gm_size" => out.high_gm_mib = Some(mib()?),
            "fence" => out.fence = Some(num()?),
            "weight" => out.weight = Some(num()?),
            "resolution" => out.resolution = Some(value.to_owned()),
            _ => continue,
        }
        known += 1;
    }
    if known == 0 {
        return Err(ParseError::Unrecognised);
    }
    Ok(out)
}

/// The instance count encoded in a GVT-g type id: `i915-GVTg_V5_4` allows 4 per GPU.
pub fn gvtg_type_instances(type_id: &str) -> Option<u32> {
    let rest = type_id.strip_prefix("i915-GVTg_V")?;
    let (_generation, count) = rest.split_once('_')?;
    count.parse().ok().filter(|n| *n > 0)
}

/// One line of NVIDIA's `creatable_vgpu_types`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatableType {
    /// The numeric type id written to `current_vgpu_type`.
    pub id: u32,
    /// The type's name, e.g. `NVIDIA L40S-1B`.
    pub name: String,
}

/// Parses `nvidia/creatable_vgpu_types` of a VF (vendor-specific VFIO, vGPU 17+): a header
/// `ID    : vGPU Name`, then one `%-5d : %s` line per type that can be created on this VF now.
/// A card that is full shows only the header, which parses to an empty list.
pub fn parse_creatable_types(text: &str) -> Result<Vec<CreatableType>, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header = lines.next().map(|(_, l)| l);
    let is_header = header
        .and_then(|h| h.split_once(':'))
        .is_some_and(|(left, right)| {
            left.trim().eq_ignore_ascii_case("ID") && right.trim().eq_ignore_ascii_case("vGPU Name")
        });
    if !is_header {
        return Err(ParseError::MissingHeader);
    }
    let mut types = Vec::new();
    for (index, line) in lines {
        let bad = || ParseError::Line {
            line: index + 1,
            text: line.chars().take(80).collect(),
        };
        let (id, name) = line.split_once(':').ok_or_else(bad)?;
        let id = id.trim().parse::<u32>().map_err(|_| bad())?;
        let name = name.trim();
        if id == 0 || name.is_empty() {
            return Err(bad());
        }
        types.push(CreatableType {
            id,
            name: name.to_owned(),
        });
    }
    Ok(types)
}

/// The NVIDIA kernel module's version from `/proc/driver/nvidia/version`, whose first line is
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.05  <build date>` (the open
/// modules say `Open Kernel Module for x86_64  570.124.06`): the first dotted number after
/// `Kernel Module`. `None` when the line is not there or names no version.
pub fn parse_nvidia_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let (_, after) = line.split_once("Kernel Module")?;
    after
        .split_whitespace()
        .find(|word| {
            word.contains('.')
                && word.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                && !word.starts_with('.')
        })
        .map(str::to_owned)
}

/// What an NVIDIA vGPU type name says about the type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvidiaTypeName {
    /// The GPU part, e.g. `A40`, `H100XM`, `A100D`.
    pub gpu: String,
    /// Compute slices of a MIG-backed type (`A100-1-5C` has 1).
    pub mig_slices: Option<u32>,
    /// Frame buffer in MiB (`0` GB means 512 MiB).
    pub framebuffer_mib: u64,
    /// The series letter: `A` (apps), `B` (vPC), `C` (compute), `Q` (vWS).
    pub series: char,
    /// Anything after the series letter: `ME`, `NOME`, `MEALL`, or a head count such as `4`.
    pub suffix: String,
}

/// Strips the `NVIDIA ` or `GRID ` prefix that sysfs names carry, and the spaces around what
/// is left, so that stripping again changes nothing.
#[inline]
pub fn strip_vendor_prefix(name: &str) -> &str {
    let name = name.trim();
    name.strip_prefix("NVIDIA ")
        .or_else(|| name.strip_prefix("GRID "))
        .map_or(name, str::trim_start)
}

/// Whether the type name `name` is what `wanted` names: the same, or the same without the
/// vendor prefix (`T4-2Q` for `GRID T4-2Q`), case-insensitively.
#[inline]
pub fn name_matches(name: &str, wanted: &str) -> bool {
    name == wanted || strip_vendor_prefix(name).eq_ignore_ascii_case(strip_vendor_prefix(wanted))
}

/// Parses an NVIDIA type name: time-sliced `<GPU>-<GB><series>` or MIG-backed
/// `<GPU>-<slices>-<GB><series>[ME|NOME|MEALL]`, with or without the `NVIDIA `/`GRID ` prefix.
/// `None` when the name does not follow the grammar.
pub fn parse_nvidia_type_name(name: &str) -> Option<NvidiaTypeName> {
    let name = strip_vendor_prefix(name);
    let (head, size) = name.rsplit_once('-')?;
    let digits_end = size.find(|c: char| !c.is_ascii_digit())?;
    let (gb, rest) = size.split_at(digits_end);
    let mut rest_chars = rest.chars();
    let series = rest_chars
        .next()
        .filter(|c| matches!(c, 'A' | 'B' | 'C' | 'Q'))?;
    let suffix = rest_chars.as_str();
    let suffix_ok = matches!(suffix, "" | "ME" | "NOME" | "MEALL")
        || suffix.bytes().all(|b| b.is_ascii_digit());
    if gb.is_empty() || !suffix_ok {
        return None;
    }
    let gb: u64 = gb.parse().ok()?;
    let framebuffer_mib = if gb == 0 { 512 } else { gb.checked_mul(1024)? };
    let (gpu, mig_slices) = match head.rsplit_once('-') {
        Some((gpu, slices)) if !slices.is_empty() && slices.bytes().all(|b| b.is_ascii_digit()) => {
            (gpu, Some(slices.parse().ok()?))
        }
        _ => (head, None),
    };
    if gpu.is_empty() {
        return None;
    }
    Some(NvidiaTypeName {
        gpu: gpu.to_owned(),
        mig_slices,
        framebuffer_mib,
        series,
        suffix: suffix.to_owned(),
    })
}

/// What the type named `name` needs when it is MIG-backed: its slices and GPU-instance
/// profile, from the type-name grammar (`ME` is `+me`, `NOME` `-me`, `MEALL` `+me.all`);
/// `None` for a time-sliced type or a name outside the grammar.
pub fn mig_backing(name: &str) -> Option<MigBacking> {
    let parsed = parse_nvidia_type_name(name)?;
    let slices = parsed.mig_slices?;
    let gb = parsed.framebuffer_mib / 1024;
    let media = match parsed.suffix.as_str() {
        "" => "",
        "ME" => "+me",
        "NOME" => "-me",
        "MEALL" => "+me.all",
        _ => return None,
    };
    Some(MigBacking {
        slices,
        gpu_instance_profile: format!("{slices}g.{gb}gb{media}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T4_2Q: &str =
        "num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=7680x4320, max_instance=4\n";
    const GVTG_V5_4: &str =
        "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n";

    #[test]
    fn nvidia_description_t4_2q_parses_every_field() {
        assert_eq!(
            parse_nvidia_description(T4_2Q),
            Ok(NvidiaDescription {
                num_heads: Some(4),
                frl_config: Some(60),
                framebuffer_mib: Some(2048),
                max_resolution: Some("7680x4320".to_owned()),
                max_instance: Some(4),
            })
        );
    }

    #[test]
    fn nvidia_description_unknown_fields_are_ignored() {
        let text = "num_heads=1, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16, new_field=x";
        assert_eq!(
            parse_nvidia_description(text).map(|d| d.max_instance),
            Ok(Some(16))
        );
    }

    #[test]
    fn nvidia_description_bad_framebuffer_is_field_error() {
        assert_eq!(
            parse_nvidia_description("framebuffer=lots, max_instance=4"),
            Err(ParseError::Field {
                field: "framebuffer".to_owned(),
                value: "lots".to_owned()
            })
        );
    }

    #[test]
    fn nvidia_description_negative_instances_is_field_error() {
        assert_eq!(
            parse_nvidia_description("max_instance=-1"),
            Err(ParseError::Field {
                field: "max_instance".to_owned(),
                value: "-1".to_owned()
            })
        );
    }

    #[test]
    fn nvidia_description_gvtg_text_is_unrecognised() {
        assert_eq!(
            parse_nvidia_description(GVTG_V5_4),
            Err(ParseError::Unrecognised)
        );
    }

    #[test]
    fn gvtg_description_v5_4_parses_every_field() {
        assert_eq!(
            parse_gvtg_description(GVTG_V5_4),
            Ok(GvtgDescription {
                low_gm_mib: Some(128),
                high_gm_mib: Some(512),
                fence: Some(4),
                resolution: Some("1920x1200".to_owned()),
                weight: Some(4),
            })
        );
    }

    #[test]
    fn gvtg_description_framebuffer_is_low_plus_high() {
        assert_eq!(
            parse_gvtg_description(GVTG_V5_4).map(|d| d.framebuffer_mib()),
            Ok(Some(640))
        );
    }

    #[test]
    fn gvtg_description_size_without_unit_is_field_error() {
        assert_eq!(
            parse_gvtg_description("low_gm_size: 128\n"),
            Err(ParseError::Field {
                field: "low_gm_size".to_owned(),
                value: "128".to_owned()
            })
        );
    }

    #[test]
    fn gvtg_type_instances_v5_8_is_8() {
        assert_eq!(gvtg_type_instances("i915-GVTg_V5_8"), Some(8));
    }

    #[test]
    fn gvtg_type_instances_nvidia_id_is_none() {
        assert_eq!(gvtg_type_instances("nvidia-222"), None);
    }

    #[test]
    fn creatable_types_l40s_lines_parse() {
        let text = "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1155  : NVIDIA L40S-48Q\n";
        assert_eq!(
            parse_creatable_types(text),
            Ok(vec![
                CreatableType {
                    id: 1145,
                    name: "NVIDIA L40S-1B".to_owned()
                },
                CreatableType {
                    id: 1155,
                    name: "NVIDIA L40S-48Q".to_owned()
                },
            ])
        );
    }

    #[test]
    fn creatable_types_header_only_is_empty() {
        assert_eq!(parse_creatable_types("ID    : vGPU Name\n"), Ok(Vec::new()));
    }

    #[test]
    fn creatable_types_wide_ids_keep_padding_free_names() {
        let text = "ID    : vGPU Name\n12345 : NVIDIA H200X-1-18C\n";
        assert_eq!(
            parse_creatable_types(text),
            Ok(vec![CreatableType {
                id: 12345,
                name: "NVIDIA H200X-1-18C".to_owned()
            }])
        );
    }

    #[test]
    fn creatable_types_without_header_is_missing_header() {
        assert_eq!(
            parse_creatable_types("1145  : NVIDIA L40S-1B\n"),
            Err(ParseError::MissingHeader)
        );
    }

    #[test]
    fn creatable_types_empty_file_is_missing_header() {
        assert_eq!(parse_creatable_types(""), Err(ParseError::MissingHeader));
    }

    #[test]
    fn creatable_types_garbage_line_is_line_error() {
        assert_eq!(
            parse_creatable_types("ID    : vGPU Name\nabc : x\n"),
            Err(ParseError::Line {
                line: 2,
                text: "abc : x".to_owned()
            })
        );
    }

    #[test]
    fn type_name_time_sliced_a40_2q() {
        assert_eq!(
            parse_nvidia_type_name("NVIDIA A40-2Q"),
            Some(NvidiaTypeName {
                gpu: "A40".to_owned(),
                mig_slices: None,
                framebuffer_mib: 2048,
                series: 'Q',
                suffix: String::new(),
            })
        );
    }

    #[test]
    fn type_name_mig_backed_a100_1_5c() {
        assert_eq!(
            parse_nvidia_type_name("A100-1-5C"),
            Some(NvidiaTypeName {
                gpu: "A100".to_owned(),
                mig_slices: Some(1),
                framebuffer_mib: 5120,
                series: 'C',
                suffix: String::new(),
            })
        );
    }

    #[test]
    fn type_name_media_extension_suffix_is_kept() {
        assert_eq!(
            parse_nvidia_type_name("H200X-1-18CME").map(|t| (t.framebuffer_mib, t.suffix)),
            Some((18432, "ME".to_owned()))
        );
    }

    #[test]
    fn type_name_zero_gb_is_512_mib() {
        assert_eq!(
            parse_nvidia_type_name("GRID M60-0B").map(|t| t.framebuffer_mib),
            Some(512)
        );
    }

    #[test]
    fn type_name_head_count_suffix_is_kept() {
        assert_eq!(
            parse_nvidia_type_name("GRID T4-1B4").map(|t| (t.framebuffer_mib, t.suffix)),
            Some((1024, "4".to_owned()))
        );
    }

    // Found by the `nvidia_type_name` fuzz target: the space after the prefix stayed.
    #[test]
    fn strip_vendor_prefix_second_space_after_prefix_is_stripped() {
        assert_eq!(strip_vendor_prefix("NVIDIA  A40-2Q"), "A40-2Q");
    }

    #[test]
    fn type_name_second_space_after_prefix_is_not_in_the_gpu() {
        assert_eq!(
            parse_nvidia_type_name("GRID  T4-2Q").map(|t| t.gpu),
            Some("T4".to_owned())
        );
    }

    #[test]
    fn type_name_gvtg_id_is_none() {
        assert_eq!(parse_nvidia_type_name("i915-GVTg_V5_4"), None);
    }

    #[test]
    fn type_name_unknown_series_is_none() {
        assert_eq!(parse_nvidia_type_name("NVIDIA A40-2Z"), None);
    }

    #[test]
    fn driver_version_proprietary_module_is_the_dotted_number_after_kernel_module() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.05  Wed May 29 \
                    22:02:02 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(
            parse_nvidia_driver_version(text),
            Some("550.90.05".to_owned())
        );
    }

    #[test]
    fn driver_version_open_module_is_the_dotted_number_after_kernel_module() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  \
                    Release Build\n";
        assert_eq!(
            parse_nvidia_driver_version(text),
            Some("570.124.06".to_owned())
        );
    }

    #[test]
    fn driver_version_without_nvrm_line_is_none() {
        assert_eq!(parse_nvidia_driver_version("GCC version: 12\n"), None);
    }
}
