//! NVIDIA vgpu-device-manager's configuration file, version `v1` (its `api/spec/v1`), read so
//! that a cluster's existing file works unchanged:
//!
//! ```yaml
//! version: v1
//! vgpu-configs:
//!   default:                       # a named config (`-c default`)
//!   - devices: all                 # `all`, or indices among the host's NVIDIA GPUs: [0, 1]
//!     device-filter: ["0x1EB810DE"] # optional: PCI device id << 16 | vendor id, one or a list
//!     vgpu-devices:                # type name: count (an empty map asks for no vGPUs)
//!       "T4-1Q": 16
//! ```
//!
//! Every entry selects NVIDIA GPUs only, as vgpu-device-manager does. Unknown keys, another
//! `version`, a count below 1 and values of the wrong shape are errors naming the line and
//! column; the YAML crate's marks give them.
//!
//! An entry whose types are all MIG-backed implies its MIG geometry: one GPU instance of each
//! type's profile per vGPU ([`MigGeometry::implied_by`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::desired::yaml::{DeviceFilter, Devices, Seg, YamlSource, yaml_error};
use crate::desired::{
    Desired, Entry, MigGeometry, MigRequest, Partition, SizeModeRequest, TypeItem, VfDriver,
};
use crate::error::Result;
use crate::model::definition::Start;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    version: String,
    #[serde(rename = "vgpu-configs", default)]
    vgpu_configs: BTreeMap<String, Vec<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "device-filter", default)]
    device_filter: Option<DeviceFilter>,
    devices: Devices,
    #[serde(rename = "vgpu-devices")]
    vgpu_devices: BTreeMap<String, i64>,
}

/// Parses vgpu-device-manager YAML text read from `path` into its configs.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<Desired>> {
    let raw: RawSpec = serde_yaml_ng::from_str(text).map_err(|err| yaml_error(path, text, &err))?;
    let file = YamlSource { path, text };
    file.v1_configs(&raw.version, "vgpu-configs", raw.vgpu_configs, entry_of)
}

fn entry_of(file: &YamlSource<'_>, config: &str, index: usize, raw: RawEntry) -> Result<Entry> {
    let here = [
        Seg::Key("vgpu-configs"),
        Seg::Key(config),
        Seg::Index(index),
    ];
    let selection = file.nvidia_selection(&here, raw.devices, raw.device_filter)?;
    let mut items = Vec::new();
    for (name, count) in raw.vgpu_devices {
        let at = [
            &here[..],
            &[Seg::Key("vgpu-devices"), Seg::KeyName(name.as_str())],
        ]
        .concat();
        let count = u32::try_from(count)
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| {
                let value = [&here[..], &[Seg::Key("vgpu-devices"), Seg::Key(&name)]].concat();
                file.error(
                    &value,
                    format!("{name:?}: {count}: expected a count of 1 or more"),
                )
            })?;
        crate::model::name::validate_type(&name).map_err(|_| {
            file.error(
                &at,
                format!(
                    "{name:?} is not a vGPU type name: expected letters, digits, space, '_', '-', '.'"
                ),
            )
        })?;
        let at = file.at(&at);
        items.push(TypeItem { name, count, at });
    }
    let mig = MigGeometry::implied_by(&items).map(|geometry| MigRequest {
        geometry,
        at: items.first().map_or_else(|| file.at(&here), |item| item.at),
        implied: true,
    });
    let size_mode = SizeModeRequest::implied_by(&items);
    Ok(Entry {
        selection,
        partition: Partition::Types(items),
        series: 'Q',
        round_up: false,
        persistence: Start::Auto,
        vf_driver: VfDriver::default(),
        scheduler: None,
        mig,
        tenant: None,
        size_mode,
        at: file.at(&here),
    })
}
