//! NVIDIA mig-parted's configuration file, version `v1` (its `api/spec/v1`), read so that a
//! cluster's existing file works unchanged:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-1g.18gb:                   # a named config (`-c all-1g.18gb`)
//!   - devices: all                 # `all`, or indices among the host's NVIDIA GPUs: [0, 1]
//!     device-filter: "0x233510DE"  # optional: PCI device id << 16 | vendor id, one or a list
//!     mig-enabled: true            # false: MIG mode off (then no mig-devices, or {})
//!     mig-devices:                 # GPU-instance profile: count ({} for none)
//!       "1g.18gb": 7
//! ```
//!
//! Each entry becomes an [`Entry`] with a MIG geometry ([`MigGeometry`]) and no vGPU partition
//! ([`Partition::Unchanged`]). It selects GPUs as a vgpu-device-manager entry does. mig-parted's
//! own rules hold: `mig-devices` is required when `mig-enabled` is true and must be empty when
//! it is false; a count is 0 or more (0 is none), and not every count is 0. A
//! compute-instance profile (`1c.3g.20gb`) is refused: a MIG-backed vGPU takes a whole GPU
//! instance. `3c.3g.20gb` is `3g.20gb`, as mig-parted writes it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::desired::yaml::{DeviceFilter, Devices, Seg, YamlSource, yaml_error};
use crate::desired::{
    Desired, Entry, MigGeometry, MigRequest, PROFILE_EXPECTED, Partition, VfDriver,
    parse_gpu_instance_profile,
};
use crate::error::Result;
use crate::model::definition::Start;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    version: String,
    #[serde(rename = "mig-configs", default)]
    mig_configs: BTreeMap<String, Vec<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "device-filter", default)]
    device_filter: Option<DeviceFilter>,
    devices: Devices,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: Option<BTreeMap<String, i64>>,
}

/// The top-level keys that tell the two YAML formats apart.
#[derive(Deserialize)]
struct Keys {
    #[serde(rename = "mig-configs")]
    mig_configs: Option<IgnoredAny>,
    #[serde(rename = "vgpu-configs")]
    vgpu_configs: Option<IgnoredAny>,
}

/// Whether YAML `text` is a mig-parted file: a top-level `mig-configs` and no `vgpu-configs`.
/// Text that is no YAML mapping is not (the vgpu-device-manager reader then says what is
/// wrong).
pub(crate) fn is_mig_parted(text: &str) -> bool {
    serde_yaml_ng::from_str::<Keys>(text)
        .is_ok_and(|keys| keys.mig_configs.is_some() && keys.vgpu_configs.is_none())
}

/// Parses mig-parted YAML text read from `path` into its configs.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<Desired>> {
    let raw: RawSpec = serde_yaml_ng::from_str(text).map_err(|err| yaml_error(path, text, &err))?;
    let file = YamlSource { path, text };
    file.v1_configs(&raw.version, "mig-configs", raw.mig_configs, entry_of)
}

fn entry_of(file: &YamlSource<'_>, config: &str, index: usize, raw: RawEntry) -> Result<Entry> {
    let here = [Seg::Key("mig-configs"), Seg::Key(config), Seg::Index(index)];
    let devices_at = [&here[..], &[Seg::Key("mig-devices")]].concat();
    let selection = file.nvidia_selection(&here, raw.devices, raw.device_filter)?;
    let geometry = match (raw.mig_enabled, raw.mig_devices) {
        (false, None) => MigGeometry::Disabled,
        (false, Some(devices)) if devices.is_empty() => MigGeometry::Disabled,
        (false, Some(_)) => {
            return Err(file.error(
                &devices_at,
                "mig-devices with mig-enabled: false: expected no mig-devices, or \
                 mig-enabled: true",
            ));
        }
        (true, None) => {
            return Err(file.error(
                &here,
                "mig-enabled: true without mig-devices: expected mig-devices, {} for MIG mode \
                 without GPU instances",
            ));
        }
        (true, Some(devices)) => instances(file, &devices_at, devices)?,
    };
    Ok(Entry {
        selection,
        partition: Partition::Unchanged,
        series: 'Q',
        round_up: false,
        persistence: Start::Auto,
        vf_driver: VfDriver::default(),
        scheduler: None,
        mig: Some(MigRequest {
            geometry,
            at: file.at(&here),
            implied: false,
        }),
        tenant: None,
        size_mode: None,
        at: file.at(&here),
    })
}

/// The GPU instances of a `mig-devices` map: profiles checked and named as `nvidia-smi` names
/// them, counts of 0 left out.
fn instances(
    file: &YamlSource<'_>,
    devices_at: &[Seg<'_>],
    devices: BTreeMap<String, i64>,
) -> Result<MigGeometry> {
    let given = !devices.is_empty();
    let mut instances = BTreeMap::new();
    for (name, count) in devices {
        let key_at = [devices_at, &[Seg::KeyName(name.as_str())]].concat();
        let profile =
            gpu_instance_profile(&name).map_err(|message| file.error(&key_at, message))?;
        let count = u32::try_from(count).map_err(|_| {
            let value_at = [devices_at, &[Seg::Key(name.as_str())]].concat();
            file.error(
                &value_at,
                format!("{name:?}: {count}: expected a count of 0 or more"),
            )
        })?;
        if count > 0 {
            let total: &mut u32 = instances.entry(profile).or_default();
            *total = total.saturating_add(count);
        }
    }
    if given && instances.is_empty() {
        return Err(file.error(
            devices_at,
            "every count in mig-devices is 0: expected one above 0, or mig-devices: {} for none",
        ));
    }
    Ok(MigGeometry::Instances(instances))
}

/// A `mig-devices` key as a GPU-instance profile: `1g.18gb` as it is, `3c.3g.71gb` (a compute
/// instance as large as its GPU instance) as `3g.71gb`; a smaller compute instance is refused.
fn gpu_instance_profile(name: &str) -> std::result::Result<String, String> {
    let Some((compute, rest)) = name.split_once("c.") else {
        return parse_gpu_instance_profile(name);
    };
    let slices = rest.split_once("g.").map(|(slices, _)| slices);
    if compute.bytes().all(|b| b.is_ascii_digit()) && slices == Some(compute) {
        return parse_gpu_instance_profile(rest);
    }
    if slices.is_some() && compute.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{name:?} is a compute-instance profile, and a MIG-backed vGPU takes a whole GPU \
             instance: {PROFILE_EXPECTED}"
        ));
    }
    parse_gpu_instance_profile(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_instance_profile_whole_compute_instance_is_its_gpu_instance() {
        assert_eq!(gpu_instance_profile("3c.3g.71gb"), Ok("3g.71gb".to_owned()));
    }

    #[test]
    fn gpu_instance_profile_smaller_compute_instance_is_refused() {
        assert_eq!(
            gpu_instance_profile("1c.3g.71gb"),
            Err(format!(
                "\"1c.3g.71gb\" is a compute-instance profile, and a MIG-backed vGPU takes a \
                 whole GPU instance: {PROFILE_EXPECTED}"
            ))
        );
    }

    #[test]
    fn is_mig_parted_by_top_level_key() {
        assert_eq!(
            (
                is_mig_parted("version: v1\nmig-configs: {}\n"),
                is_mig_parted("version: v1\nvgpu-configs: {}\n"),
                is_mig_parted("version: [v1\n"),
            ),
            (true, false, false)
        );
    }
}
