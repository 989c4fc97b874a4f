//! The text of one definition file, both ways: pure functions from a definition to the bytes
//! [`Store`](super::store::Store) writes, and from a file's text back to the definition. The
//! formats are described in [`store`](super::store); the store adds only the file's name (the
//! UUID or PCI address a definition is about) and the I/O.
//!
//! `path` is the file's path, named in errors; nothing here touches the filesystem.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::store::{
    BindingDefinition, MIB, MdevDefinition, SriovDefinition, Start, VfVgpuDefinition,
};
use crate::error::{Error, Result, StateError};
use crate::host::durable::update_error;
use crate::model::pci::PciAddress;

/// The version of `vgpu`'s own definition files this code reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// A file as mdevctl writes it; field order is mdevctl's.
#[derive(Serialize, Deserialize)]
struct MdevctlFile {
    mdev_type: String,
    start: Start,
    #[serde(default)]
    attrs: Vec<BTreeMap<String, String>>,
}

/// Just enough of one of our files to check its version before reading the rest.
#[derive(Deserialize)]
struct VersionHeader {
    version: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SriovFile {
    version: u32,
    num_vfs: u32,
    drivers_autoprobe: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    lmem_quota_mib: BTreeMap<u32, u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VfVgpuFile {
    version: u32,
    gpu: PciAddress,
    type_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    type_name: Option<String>,
    start: Start,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    placement: Option<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingFile {
    version: u32,
    driver: String,
    previous_driver: Option<String>,
    start: Start,
}

/// mdevctl's file for `def`: pretty JSON with two-space indents and no final newline, as
/// mdevctl 1.2 writes it. The type must be a file name, each attribute a path of file names
/// under the device.
pub(crate) fn encode_mdev(path: &Path, def: &MdevDefinition) -> Result<Vec<u8>> {
    check_name(path, "mdev type", &def.mdev_type)?;
    for (name, _) in &def.attrs {
        check_attr_name(path, name)?;
    }
    let file = MdevctlFile {
        mdev_type: def.mdev_type.clone(),
        start: def.start,
        attrs: def
            .attrs
            .iter()
            .map(|(name, value)| BTreeMap::from([(name.clone(), value.clone())]))
            .collect(),
    };
    encode(path, &file)
}

/// The definition of mdev `uuid` under `parent` in mdevctl's file `text`.
pub(crate) fn decode_mdev(
    path: &Path,
    uuid: Uuid,
    parent: &str,
    text: &str,
) -> Result<MdevDefinition> {
    let file: MdevctlFile = decode(path, text)?;
    check_name(path, "mdev type", &file.mdev_type)?;
    let mut attrs = Vec::with_capacity(file.attrs.len());
    for (index, attr) in file.attrs.into_iter().enumerate() {
        let mut entries = attr.into_iter();
        match (entries.next(), entries.next()) {
            (Some((name, value)), None) => {
                check_attr_name(path, &name)?;
                attrs.push((name, value));
            }
            _ => {
                return Err(definition(
                    path,
                    format!("attribute {index} is not one name and its value"),
                ));
            }
        }
    }
    Ok(MdevDefinition {
        uuid,
        parent: parent.to_owned(),
        mdev_type: file.mdev_type,
        start: file.start,
        attrs,
    })
}

/// `etc/vgpu/sriov/<pf>.json` for `d`.
pub(crate) fn encode_sriov(path: &Path, d: &SriovDefinition) -> Result<Vec<u8>> {
    check_quotas(path, d.num_vfs, &d.lmem_quota_mib)?;
    let file = SriovFile {
        version: FORMAT_VERSION,
        num_vfs: d.num_vfs,
        drivers_autoprobe: d.drivers_autoprobe,
        lmem_quota_mib: d.lmem_quota_mib.clone(),
    };
    encode_own(path, &file)
}

/// The SR-IOV definition of `pf` in `text`.
pub(crate) fn decode_sriov(path: &Path, pf: PciAddress, text: &str) -> Result<SriovDefinition> {
    let file: SriovFile = decode_own(path, text)?;
    check_quotas(path, file.num_vfs, &file.lmem_quota_mib)?;
    Ok(SriovDefinition {
        pf,
        num_vfs: file.num_vfs,
        drivers_autoprobe: file.drivers_autoprobe,
        lmem_quota_mib: file.lmem_quota_mib,
    })
}

/// Checks that each quota is for one of the `num_vfs` VFs (`1..=num_vfs`) and is at least
/// 1 MiB, whose bytes fit the 64 bits `lmem_quota` takes.
fn check_quotas(path: &Path, num_vfs: u32, quotas: &BTreeMap<u32, u64>) -> Result<()> {
    for (&vf, &mib) in quotas {
        if vf == 0 || vf > num_vfs {
            return Err(definition(
                path,
                format!(
                    "lmem_quota_mib names VF {vf}, not one of the {num_vfs} VFs (1 to {num_vfs})"
                ),
            ));
        }
        if mib == 0 || mib.checked_mul(MIB).is_none() {
            return Err(definition(
                path,
                format!("lmem_quota_mib of VF {vf} is {mib} MiB, not a quota (1 MiB to 16 EiB)"),
            ));
        }
    }
    Ok(())
}

/// `etc/vgpu/vf-vgpus/<vf>.json` for `d`.
pub(crate) fn encode_vf_vgpu(path: &Path, d: &VfVgpuDefinition) -> Result<Vec<u8>> {
    let file = VfVgpuFile {
        version: FORMAT_VERSION,
        gpu: d.gpu,
        type_id: d.type_id,
        type_name: d.type_name.clone(),
        start: d.start,
        placement: d.placement,
    };
    encode_own(path, &file)
}

/// The vGPU definition of `vf` in `text`.
pub(crate) fn decode_vf_vgpu(path: &Path, vf: PciAddress, text: &str) -> Result<VfVgpuDefinition> {
    let file: VfVgpuFile = decode_own(path, text)?;
    Ok(VfVgpuDefinition {
        vf,
        gpu: file.gpu,
        type_id: file.type_id,
        type_name: file.type_name,
        start: file.start,
        placement: file.placement,
    })
}

/// `etc/vgpu/bindings/<address>.json` for `d`; both drivers must be file names.
pub(crate) fn encode_binding(path: &Path, d: &BindingDefinition) -> Result<Vec<u8>> {
    check_drivers(path, &d.driver, d.previous_driver.as_deref())?;
    let file = BindingFile {
        version: FORMAT_VERSION,
        driver: d.driver.clone(),
        previous_driver: d.previous_driver.clone(),
        start: d.start,
    };
    encode_own(path, &file)
}

/// The binding definition of `address` in `text`.
pub(crate) fn decode_binding(
    path: &Path,
    address: PciAddress,
    text: &str,
) -> Result<BindingDefinition> {
    let file: BindingFile = decode_own(path, text)?;
    check_drivers(path, &file.driver, file.previous_driver.as_deref())?;
    Ok(BindingDefinition {
        address,
        driver: file.driver,
        previous_driver: file.previous_driver,
        start: file.start,
    })
}

fn check_drivers(path: &Path, driver: &str, previous: Option<&str>) -> Result<()> {
    check_name(path, "driver", driver)?;
    match previous {
        Some(previous) => check_name(path, "previous driver", previous),
        None => Ok(()),
    }
}

/// One of our files: pretty JSON and a final newline.
pub(crate) fn encode_own<F: Serialize>(path: &Path, file: &F) -> Result<Vec<u8>> {
    let mut bytes = encode(path, file)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// One of our files, its version checked before its fields.
pub(crate) fn decode_own<F: DeserializeOwned>(path: &Path, text: &str) -> Result<F> {
    let header: VersionHeader = decode(path, text)?;
    match header.version {
        None => Err(definition(
            path,
            "no \"version\" field: not a vgpu definition".to_owned(),
        )),
        Some(version) if version.as_u64() == Some(u64::from(FORMAT_VERSION)) => decode(path, text),
        Some(version) => Err(definition(
            path,
            format!("format version {version} is not supported (this vgpu reads {FORMAT_VERSION})"),
        )),
    }
}

fn decode<F: DeserializeOwned>(path: &Path, text: &str) -> Result<F> {
    serde_json::from_str(text).map_err(|source| {
        StateError::DefinitionJson {
            path: path.to_path_buf(),
            source,
        }
        .into()
    })
}

fn encode<F: Serialize>(path: &Path, file: &F) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(file).map_err(|err| update_error("encode", path, err.into()))
}

/// [`StateError::Definition`](crate::state::StateError::Definition) for the file at `path`.
pub(crate) fn definition(path: &Path, reason: String) -> Error {
    StateError::Definition {
        path: path.to_path_buf(),
        reason,
    }
    .into()
}

/// Whether `name` can name a mediated device's attribute: a path under the device whose every
/// component is a file name (`remap`, `nvidia/vgpu_params`); never absolute, never `..`.
pub(crate) fn is_attr_name(name: &str) -> bool {
    name.split('/').all(is_file_name)
}

/// Checks an mdev attribute name ([`is_attr_name`]).
fn check_attr_name(path: &Path, name: &str) -> Result<()> {
    if is_attr_name(name) {
        return Ok(());
    }
    let shown: String = name.chars().take(80).collect();
    Err(definition(
        path,
        format!("attribute {shown:?} is not a path of file names under the device"),
    ))
}

/// Whether `value` is one path component: not empty, no `/`, no NUL, not `.` or `..`.
fn is_file_name(value: &str) -> bool {
    !(value.is_empty()
        || value == "."
        || value == ".."
        || value.contains('/')
        || value.contains('\0'))
}

/// Checks that `value` can be one component of a sysfs or store path: not empty, no `/`, no
/// NUL, not `.` or `..`.
pub(crate) fn check_name(path: &Path, what: &str, value: &str) -> Result<()> {
    if !is_file_name(value) {
        let shown: String = value.chars().take(80).collect();
        return Err(definition(
            path,
            format!("{what} {shown:?} is not a file name"),
        ));
    }
    Ok(())
}
