//! What the libvirt hook keeps on the host: its configuration, and a record per domain of what
//! it made for that domain.
//!
//! - **`etc/vgpu/hook.toml`** (optional), written by the operator:
//!
//!   ```toml
//!   # Nova flavor name (the domain's <nova:flavor name="…">) = vGPU type for its VFs
//!   [flavors]
//!   "vgpu.l40s-12q" = "L40S-12Q"
//!   "vgpu.l40s-24q" = "NVIDIA L40S-24Q"
//!   ```
//!
//!   Any other table or key is an error naming the file, and so is a type that is not a type
//!   name or id (1 to 64 letters, digits, spaces, `_`, `-`, `.`). Whether the GPU offers the
//!   type is checked when a domain asks for it.
//!
//! - **`run/vgpu/hook/<domain-uuid>`**, one JSON file per domain, written atomically and flushed
//!   before the hook changes the host, and rewritten as `release` takes things back:
//!
//!   ```json
//!   {"version": 1, "domain": "vm1", "made": [
//!     {"kind": "mdev", "uuid": "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c"},
//!     {"kind": "vendor-type", "vf": "0000:5e:00.4", "type_id": 1151},
//!     {"kind": "binding", "address": "0001:03:00.1", "driver": "vfio-pci"}],
//!    "tenant": "acme", "holds": ["0000:5e:00.5"]}
//!   ```
//!
//!   `tenant` is the domain's; `holds` lists devices it uses that it found running, which
//!   `release` leaves alone. The tenant policy counts both lists for the tenant.
//!
//!   It lives under `run/` because what it names does not survive a reboot either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Result, StateError};
use crate::host::durable::list_dir;
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::VgpuHandle;
use crate::model::holder::{Holder, Tenant, optional_tenant};
use crate::model::location::Location;
use crate::model::pci::PciAddress;

/// The largest `hook.toml` or record read.
const FILE_LIMIT: usize = 256 * 1024;

/// The version of record files this code reads and writes.
const RECORD_VERSION: u32 = 1;

/// What the hook made for a domain at `prepare`, and takes back at `release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Made {
    /// A defined mediated device it started.
    Mdev {
        /// Its UUID.
        uuid: Uuid,
    },
    /// An NVIDIA vendor-VFIO type it set on a VF.
    VendorType {
        /// The VF.
        vf: PciAddress,
        /// The type id it wrote to `nvidia/current_vgpu_type`.
        type_id: u32,
    },
    /// A defined driver binding it applied to a VF.
    Binding {
        /// The VF.
        address: PciAddress,
        /// The driver it bound.
        driver: String,
    },
}

impl Made {
    /// The vGPU it names.
    pub fn handle(&self) -> VgpuHandle {
        match self {
            Made::Mdev { uuid } => VgpuHandle::Mdev(*uuid),
            Made::VendorType { vf, .. } => VgpuHandle::Vf(*vf),
            Made::Binding { address, .. } => VgpuHandle::Vf(*address),
        }
    }
}

/// What a device an incoming domain's XML named became on this host (`migrate begin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Moved {
    /// As the source host named it.
    pub from: VgpuHandle,
    /// As this host names it.
    pub to: VgpuHandle,
}

/// The record of one domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Record {
    version: u32,
    /// The domain's name, for people reading the file.
    pub(crate) domain: String,
    /// What was made, in the order it was made.
    pub(crate) made: Vec<Made>,
    /// The domain's tenant: whom the tenant policy counts the devices for. Older records
    /// wrote its name alone, `""` for none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_tenant"
    )]
    pub(crate) tenant: Option<Tenant>,
    /// The GPU devices the domain uses that were there before it started: counted for its
    /// tenant, never taken back. Written only under a tenant policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) holds: Vec<VgpuHandle>,
    /// What each device of an incoming domain's XML became (`migrate begin`), so that a
    /// second run reuses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) moved: Vec<Moved>,
}

impl Record {
    pub(crate) fn new(domain: &str, made: Vec<Made>) -> Self {
        Self {
            version: RECORD_VERSION,
            domain: domain.to_owned(),
            made,
            tenant: None,
            holds: Vec::new(),
            moved: Vec::new(),
        }
    }

    /// Every device the record gives its domain: those made for it, then those it holds.
    pub(crate) fn devices(&self) -> Vec<VgpuHandle> {
        let made = self.made.iter().map(Made::handle);
        made.chain(self.holds.iter().copied()).collect()
    }

    /// The domain `uuid` whose record this is, and its tenant.
    pub(crate) fn holder(&self, uuid: Uuid) -> Holder {
        Holder {
            domain: self.domain.clone(),
            uuid,
            tenant: self.tenant.clone(),
        }
    }

    /// The record's file content.
    pub(crate) fn encode(&self, path: &Path) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec(self).map_err(|source| StateError::DefinitionJson {
            path: path.to_path_buf(),
            source,
        })?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

/// `run/vgpu/hook`.
pub(crate) fn records_dir(paths: &HostPaths) -> PathBuf {
    paths.run().join("vgpu/hook")
}

/// `run/vgpu/hook/<domain>`.
pub(crate) fn record_path(paths: &HostPaths, domain: Uuid) -> PathBuf {
    records_dir(paths).join(domain.hyphenated().to_string())
}

/// The domain whose record is at `path`: records are named by their domain's UUID.
pub(crate) fn record_uuid(path: &Path) -> Option<Uuid> {
    Uuid::try_parse(path.file_name()?.to_str()?).ok()
}

/// Reads the record at `path`; `None` when there is none.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn read_record(path: &Path) -> Result<Option<Record>> {
    let Some(text) = read_bounded(path, FILE_LIMIT)? else {
        return Ok(None);
    };
    let record: Record =
        serde_json::from_str(&text).map_err(|source| StateError::DefinitionJson {
            path: path.to_path_buf(),
            source,
        })?;
    if record.version != RECORD_VERSION {
        return Err(StateError::Definition {
            path: path.to_path_buf(),
            reason: format!(
                "record version {} is not supported (this vgpu reads {RECORD_VERSION})",
                record.version
            ),
        }
        .into());
    }
    Ok(Some(record))
}

/// Every domain's record but `except`'s, with its path. Files that are not records (a name that
/// is not a UUID, unreadable content) are skipped with a warning: they are no one's claim.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn other_records(paths: &HostPaths, except: Uuid) -> Result<Vec<(PathBuf, Record)>> {
    let mut found = Vec::new();
    for (path, _) in list_dir(&records_dir(paths))? {
        let Some(uuid) = record_uuid(&path) else {
            continue;
        };
        if uuid == except {
            continue;
        }
        match read_record(&path) {
            Ok(Some(record)) => found.push((path, record)),
            Ok(None) => {}
            Err(err) => tracing::warn!("skipping hook record: {}", err.chain()),
        }
    }
    Ok(found)
}

/// The hook's configuration, `etc/vgpu/hook.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookConfig {
    /// Nova flavor name to the vGPU type (id or name) its VFs get.
    pub flavors: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HookConfigFile {
    #[serde(default)]
    flavors: BTreeMap<String, toml::Spanned<String>>,
}

impl HookConfig {
    /// Reads the host's configuration; empty when the file does not exist.
    ///
    /// # Errors
    ///
    /// [`StateError::Config`](crate::state::StateError::Config) when it is not TOML, has a key other than `[flavors]`, or maps a
    /// flavor to something that is not a type name; [`HostError::Read`](crate::host::HostError::Read) when it cannot be read.
    pub fn load(paths: &HostPaths) -> Result<Self> {
        let path = paths.hook_toml();
        match read_bounded(&path, FILE_LIMIT)? {
            Some(text) => Self::parse(&text, &path),
            None => Ok(Self::default()),
        }
    }

    /// Parses the text of a `hook.toml` read from `path` (named in errors).
    ///
    /// # Errors
    ///
    /// [`StateError::Config`](crate::state::StateError::Config) as for [`HookConfig::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let config_error =
            |span: Option<std::ops::Range<usize>>, reason: String| StateError::Config {
                path: path.to_path_buf(),
                at: span.map(|s| Location::of_offset(text, s.start)),
                reason,
            };
        let file: HookConfigFile = toml::from_str(text)
            .map_err(|err| config_error(err.span(), one_line(err.message())))?;
        for (flavor, wanted) in &file.flavors {
            crate::backend::validate_type(wanted.get_ref()).map_err(|err| {
                config_error(Some(wanted.span()), format!("flavor {flavor:?}: {err}"))
            })?;
        }
        Ok(Self {
            flavors: file
                .flavors
                .into_iter()
                .map(|(flavor, wanted)| (flavor, wanted.into_inner()))
                .collect(),
        })
    }

    /// The vGPU type a domain of Nova flavor `flavor` gets.
    pub fn flavor_type(&self, flavor: &str) -> Option<&str> {
        self.flavors.get(flavor).map(String::as_str)
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed fixture step is a failed test
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HookConfig> {
        HookConfig::parse(text, Path::new("/etc/vgpu/hook.toml"))
    }

    #[test]
    fn hook_config_flavors_are_read() {
        let config = parse("[flavors]\n\"vgpu.small\" = \"L40S-12Q\"\n").unwrap();
        assert_eq!(config.flavor_type("vgpu.small"), Some("L40S-12Q"));
    }

    #[test]
    fn hook_config_empty_file_maps_nothing() {
        assert_eq!(parse("").ok(), Some(HookConfig::default()));
    }

    #[test]
    fn hook_config_unknown_table_is_refused_naming_it() {
        let message = parse("[flavours]\nx = \"L40S-12Q\"\n").map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err("/etc/vgpu/hook.toml:1:2: unknown field `flavours`, expected `flavors`".to_owned())
        );
    }

    #[test]
    fn hook_config_type_that_is_a_path_is_refused() {
        let message = parse("[flavors]\nx = \"../../x\"\n").map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err(
                "/etc/vgpu/hook.toml:2:5: flavor \"x\": \"../../x\" is not a vGPU type id or name"
                    .to_owned()
            )
        );
    }

    #[test]
    fn hook_config_type_that_is_not_a_string_is_refused() {
        let message = parse("[flavors]\nx = 3\n").map_err(|e| e.to_string());
        assert_eq!(
            message,
            Err("/etc/vgpu/hook.toml:2:5: invalid type: integer `3`, expected a string".to_owned())
        );
    }

    #[test]
    fn record_round_trips_through_its_file_format() {
        let record = Record::new(
            "vm1",
            vec![
                Made::Mdev {
                    uuid: Uuid::from_u128(1),
                },
                Made::VendorType {
                    vf: "0000:5e:00.4".parse().unwrap(),
                    type_id: 1151,
                },
            ],
        );
        let path = Path::new("/run/vgpu/hook/x");
        let text = String::from_utf8(record.encode(path).unwrap()).unwrap();
        assert_eq!(
            text,
            "{\"version\":1,\"domain\":\"vm1\",\"made\":[{\"kind\":\"mdev\",\"uuid\":\"00000000-0000-0000-0000-000000000001\"},{\"kind\":\"vendor-type\",\"vf\":\"0000:5e:00.4\",\"type_id\":1151}]}\n"
        );
    }
}
