//! Persistent definitions: what `vgpuctl restore` re-creates after a reboot.
//!
//! Two stores live under the host's `etc/`:
//!
//! - **mdevctl's store**, `etc/mdevctl.d/<parent>/<uuid>`, one JSON file per mediated device,
//!   written byte for byte as mdevctl 1.2 writes it, so that mdevctl and libvirt's node-device
//!   driver see the definitions `vgpu` makes and `vgpu` sees theirs:
//!
//!   ```json
//!   {
//!     "mdev_type": "nvidia-222",
//!     "start": "auto",
//!     "attrs": [
//!       {
//!         "remap": "on"
//!       }
//!     ]
//!   }
//!   ```
//!
//!   `etc/mdevctl.d/scripts.d/` holds mdevctl's callouts, not a parent, and is skipped.
//!   `attrs` may be absent (mdevctl reads that as none); other fields are ignored, as mdevctl
//!   ignores them.
//!
//! - **`vgpu`'s own store**, `etc/vgpu/`, for what mdevctl cannot express, one file per device
//!   named after its PCI address, each with `"version": 1`:
//!   - `sriov/<pf>.json`: `{"version": 1, "num_vfs": 4, "drivers_autoprobe": false}`
//!     (`drivers_autoprobe` is `null` when it is to be left as the kernel has it), and where
//!     VFs have local-memory quotas of their own (Intel SR-IOV, `iov/vf<M>/gt*/lmem_quota`),
//!     `"lmem_quota_mib": {"1": 8192, "2": 2048}`, keyed by `M` (from 1, at most `num_vfs`);
//!     absent when no VF has one, so files written without it read and write unchanged;
//!   - `vf-vgpus/<vf>.json`: `{"version": 1, "gpu": "0000:41:00.0", "type_id": 1151,
//!     "start": "auto"}`, a vGPU type set through NVIDIA's vendor-specific VFIO interface
//!     (`nvidia/current_vgpu_type`) on a VF of `gpu`;
//!   - `bindings/<address>.json`: `{"version": 1, "driver": "vfio-pci", "previous_driver":
//!     "i915", "start": "auto"}`.
//!
//! Every write is atomic: a temporary file in the same directory is written, flushed to disk,
//! renamed over the target, and the directory is flushed. Readers therefore see the old or the
//! new definition, never half of one. Names beginning with `.` (temporary files, editors'
//! backups) are skipped when listing. Any other file that is not a definition (a name that is
//! not a UUID or a canonical PCI address, text that is not JSON, an unknown `start`, a foreign
//! or newer format) is an error naming the file: the listing functions stop at the first one,
//! the `*_lenient` ones return it beside the definitions they could read.
//!
//! `Store` does not lock: callers that change definitions hold a `HostLock` (the manager takes it).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::durable::{
    is_dir, list_dir, present, remove_dir_if_empty, remove_durably, update_error, write_atomic,
};
use crate::error::{Error, Result};
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::pci::PciAddress;

/// The largest definition file read.
pub(crate) const DEFINITION_LIMIT: usize = 64 * 1024;

/// Bytes in a MiB: `lmem_quota` is written in bytes, quotas are defined in MiB.
pub(crate) const MIB: u64 = 1024 * 1024;

/// The version of `vgpu`'s own definition files this code reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// The directory of mdevctl's callout and notifier scripts, beside the parents.
const MDEVCTL_SCRIPTS: &str = "scripts.d";

const SRIOV_DIR: &str = "sriov";
const VF_VGPU_DIR: &str = "vf-vgpus";
const BINDING_DIR: &str = "bindings";

/// When a definition is to be started: at boot (`vgpuctl restore`, mdevctl's udev rule) or
/// only on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// Started when the parent device appears: `"auto"`.
    Auto,
    /// Started only on request: `"manual"`.
    Manual,
}

impl Start {
    /// The word written in definition files: `auto` or `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Auto => "auto",
            Start::Manual => "manual",
        }
    }
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A persistent mediated device, as mdevctl stores it in `etc/mdevctl.d/<parent>/<uuid>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MdevDefinition {
    /// The device's UUID, the file's name.
    pub uuid: Uuid,
    /// The parent device's name under `sys/class/mdev_bus` (usually a PCI address), the
    /// directory's name.
    pub parent: String,
    /// The type's name under the parent's `mdev_supported_types` (e.g. `nvidia-222`).
    pub mdev_type: String,
    /// When the device is started.
    pub start: Start,
    /// Attributes written to the device's sysfs directory, in order, after it is created.
    pub attrs: Vec<(String, String)>,
}

/// The number of SR-IOV VFs to enable on a PF (`sriov_numvfs`), and the local-memory quotas
/// to give them, in `etc/vgpu/sriov/<pf>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SriovDefinition {
    /// The physical function.
    pub pf: PciAddress,
    /// The value for `sriov_numvfs`.
    pub num_vfs: u32,
    /// The value for `sriov_drivers_autoprobe`, written before the VFs are enabled; `None`
    /// leaves the kernel's setting.
    pub drivers_autoprobe: Option<bool>,
    /// The local-memory quota of VF `M` (from 1, in `virtfn` order, at most `num_vfs`) in MiB,
    /// written to `drm/card<N>/iov/vf<M>/gt*/lmem_quota` after the VFs are enabled; a VF not
    /// listed keeps the equal share its driver gives it.
    pub lmem_quota_mib: BTreeMap<u32, u64>,
}

/// A vGPU type set on an NVIDIA VF through the vendor-specific VFIO interface
/// (`nvidia/current_vgpu_type`), in `etc/vgpu/vf-vgpus/<vf>.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VfVgpuDefinition {
    /// The virtual function.
    pub vf: PciAddress,
    /// The physical GPU the VF belongs to.
    pub gpu: PciAddress,
    /// The type's numeric id as `creatable_vgpu_types` lists it.
    pub type_id: u32,
    /// When the type is set.
    pub start: Start,
}

/// A driver binding (`driver_override` and `drivers/<driver>/bind`), in
/// `etc/vgpu/bindings/<address>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindingDefinition {
    /// The PCI function.
    pub address: PciAddress,
    /// The driver to bind (usually `vfio-pci`).
    pub driver: String,
    /// The driver it was bound to before, to return it to; `None` when it had none.
    pub previous_driver: Option<String>,
    /// When the binding is applied.
    pub start: Start,
}

/// Every definition that could be read, and, for each file that could not, the kind of
/// definition (`sriov`, `bind`, `mdev`, `vf-vgpu`) and the error.
#[derive(Debug, Default)]
pub(crate) struct AllDefinitions {
    pub(crate) sriov: Vec<SriovDefinition>,
    pub(crate) bindings: Vec<BindingDefinition>,
    pub(crate) mdevs: Vec<MdevDefinition>,
    pub(crate) vf_vgpus: Vec<VfVgpuDefinition>,
    pub(crate) errors: Vec<(&'static str, Error)>,
}

/// The persistent definitions of one host.
#[derive(Debug, Clone)]
pub struct Store {
    mdevctl: PathBuf,
    vgpu: PathBuf,
}

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
    start: Start,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingFile {
    version: u32,
    driver: String,
    previous_driver: Option<String>,
    start: Start,
}

impl Store {
    /// Every definition, read leniently: what cannot be read is an error beside the rest.
    pub(crate) fn all_lenient(&self) -> AllDefinitions {
        fn tag<T>(
            kind: &'static str,
            (defs, errors): (Vec<T>, Vec<Error>),
            all: &mut Vec<(&'static str, Error)>,
        ) -> Vec<T> {
            all.extend(errors.into_iter().map(|e| (kind, e)));
            defs
        }
        let mut errors = Vec::new();
        AllDefinitions {
            sriov: tag("sriov", self.sriov_lenient(), &mut errors),
            bindings: tag("bind", self.bindings_lenient(), &mut errors),
            mdevs: tag("mdev", self.mdevs_lenient(), &mut errors),
            vf_vgpus: tag("vf-vgpu", self.vf_vgpus_lenient(), &mut errors),
            errors,
        }
    }

    /// The stores of the host at `paths`: `etc/mdevctl.d` and `etc/vgpu`.
    pub fn new(paths: &HostPaths) -> Self {
        let etc = paths.etc();
        Self {
            mdevctl: etc.join("mdevctl.d"),
            vgpu: etc.join("vgpu"),
        }
    }

    /// mdevctl's store, `etc/mdevctl.d`.
    pub fn mdevctl_dir(&self) -> &Path {
        &self.mdevctl
    }

    /// `vgpu`'s own store, `etc/vgpu`.
    pub fn vgpu_dir(&self) -> &Path {
        &self.vgpu
    }

    // ---- mediated devices (mdevctl's store) ----

    /// Every mdev definition, sorted by parent then UUID; the first unreadable or malformed
    /// file is an error.
    pub fn mdevs(&self) -> Result<Vec<MdevDefinition>> {
        strict(self.mdevs_lenient())
    }

    /// Every mdev definition that can be read, sorted by parent then UUID, and an error for
    /// each file or directory that cannot.
    pub fn mdevs_lenient(&self) -> (Vec<MdevDefinition>, Vec<Error>) {
        let mut defs = Vec::new();
        let mut errors = Vec::new();
        let parents = match self.parents() {
            Ok(parents) => parents,
            Err(err) => return (defs, vec![err]),
        };
        for parent in parents {
            let (name, dir) = match parent {
                Ok(parent) => parent,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            };
            let entries = match list_dir(&dir) {
                Ok(entries) => entries,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            };
            for (path, file_name) in entries {
                match read_mdev(&path, file_name.as_deref(), &name) {
                    Ok(Some(def)) => defs.push(def),
                    Ok(None) => {}
                    Err(err) => errors.push(err),
                }
            }
        }
        defs.sort_by(|a, b| (&a.parent, a.uuid).cmp(&(&b.parent, b.uuid)));
        (defs, errors)
    }

    /// The definition of the mdev `uuid`, under whichever parent it is; `None` when there is
    /// none. Were it defined under several parents (by another tool), the first parent in name
    /// order wins.
    pub fn mdev(&self, uuid: Uuid) -> Result<Option<MdevDefinition>> {
        for (name, dir) in self.parent_dirs()? {
            let path = dir.join(uuid_name(uuid));
            if let Some(def) = read_mdev(&path, Some(&uuid_name(uuid)), &name)? {
                return Ok(Some(def));
            }
        }
        Ok(None)
    }

    /// Writes the definition to `etc/mdevctl.d/<parent>/<uuid>`, replacing one under the same
    /// parent. A definition of the same UUID under another parent is refused
    /// ([`Error::MdevDefinedElsewhere`]): undefine it first.
    pub(crate) fn define_mdev(&self, def: &MdevDefinition) -> Result<()> {
        check_name(&self.mdevctl, "parent", &def.parent)?;
        if def.parent == MDEVCTL_SCRIPTS {
            return Err(definition(
                &self.mdevctl,
                format!("parent {MDEVCTL_SCRIPTS:?} is mdevctl's scripts directory"),
            ));
        }
        let path = self.mdevctl.join(&def.parent).join(uuid_name(def.uuid));
        check_name(&path, "mdev type", &def.mdev_type)?;
        for (name, _) in &def.attrs {
            check_name(&path, "attribute", name)?;
        }
        for (parent, dir) in self.parent_dirs()? {
            let other = dir.join(uuid_name(def.uuid));
            if parent != def.parent && present(&other)? {
                return Err(Error::MdevDefinedElsewhere {
                    uuid: def.uuid,
                    parent,
                    path: other,
                });
            }
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
        // mdevctl writes pretty JSON with two-space indents and no final newline.
        write_atomic(&path, &encode(&path, &file)?)
    }

    /// Removes the definition of the mdev `uuid` from every parent it is under, and each
    /// parent directory left empty; `false` when there was none.
    pub(crate) fn undefine_mdev(&self, uuid: Uuid) -> Result<bool> {
        let mut removed = false;
        for (_, dir) in self.parent_dirs()? {
            let path = dir.join(uuid_name(uuid));
            if remove_durably(&path)? {
                removed = true;
                remove_dir_if_empty(&dir)?;
            }
        }
        Ok(removed)
    }

    /// The parent directories, each with its name, or an error for an entry that is not one.
    fn parents(&self) -> Result<Vec<Result<(String, PathBuf)>>> {
        let mut parents = Vec::new();
        for (path, name) in list_dir(&self.mdevctl)? {
            let parent = match name {
                Some(name) if name == MDEVCTL_SCRIPTS => continue,
                Some(name) if is_dir(&path)? => Ok((name, path)),
                Some(_) => Err(definition(&path, "not a parent directory".to_owned())),
                None => Err(definition(&path, "the name is not UTF-8".to_owned())),
            };
            parents.push(parent);
        }
        Ok(parents)
    }

    /// The parent directories that are well named, skipping any entry that is not one.
    fn parent_dirs(&self) -> Result<Vec<(String, PathBuf)>> {
        Ok(self.parents()?.into_iter().filter_map(Result::ok).collect())
    }

    // ---- SR-IOV ----

    /// Every SR-IOV definition, sorted by PF; the first bad file is an error.
    pub fn sriov(&self) -> Result<Vec<SriovDefinition>> {
        strict(self.sriov_lenient())
    }

    /// Every SR-IOV definition that can be read, sorted by PF, and an error for each file that
    /// cannot.
    pub fn sriov_lenient(&self) -> (Vec<SriovDefinition>, Vec<Error>) {
        self.list_own(SRIOV_DIR, sriov_from_file)
    }

    /// The SR-IOV definition of `pf`; `None` when there is none.
    pub fn sriov_of(&self, pf: PciAddress) -> Result<Option<SriovDefinition>> {
        self.read_own(SRIOV_DIR, pf, sriov_from_file)
    }

    /// Writes the SR-IOV definition of `d.pf`, replacing any. A quota for no VF of `num_vfs`,
    /// or of no memory, is refused ([`Error::Definition`]).
    pub(crate) fn define_sriov(&self, d: &SriovDefinition) -> Result<()> {
        check_quotas(
            &self.own_path(SRIOV_DIR, d.pf),
            d.num_vfs,
            &d.lmem_quota_mib,
        )?;
        let file = SriovFile {
            version: FORMAT_VERSION,
            num_vfs: d.num_vfs,
            drivers_autoprobe: d.drivers_autoprobe,
            lmem_quota_mib: d.lmem_quota_mib.clone(),
        };
        self.write_own(SRIOV_DIR, d.pf, &file)
    }

    /// Removes the SR-IOV definition of `pf`; `false` when there was none.
    pub(crate) fn undefine_sriov(&self, pf: PciAddress) -> Result<bool> {
        remove_durably(&self.own_path(SRIOV_DIR, pf))
    }

    // ---- NVIDIA vendor-specific VFIO types on VFs ----

    /// Every VF vGPU definition, sorted by VF; the first bad file is an error.
    pub fn vf_vgpus(&self) -> Result<Vec<VfVgpuDefinition>> {
        strict(self.vf_vgpus_lenient())
    }

    /// Every VF vGPU definition that can be read, sorted by VF, and an error for each file
    /// that cannot.
    pub fn vf_vgpus_lenient(&self) -> (Vec<VfVgpuDefinition>, Vec<Error>) {
        self.list_own(VF_VGPU_DIR, vf_vgpu_from_file)
    }

    /// The vGPU definition of `vf`; `None` when there is none.
    pub fn vf_vgpu(&self, vf: PciAddress) -> Result<Option<VfVgpuDefinition>> {
        self.read_own(VF_VGPU_DIR, vf, vf_vgpu_from_file)
    }

    /// Writes the vGPU definition of `d.vf`, replacing any.
    pub(crate) fn define_vf_vgpu(&self, d: &VfVgpuDefinition) -> Result<()> {
        let file = VfVgpuFile {
            version: FORMAT_VERSION,
            gpu: d.gpu,
            type_id: d.type_id,
            start: d.start,
        };
        self.write_own(VF_VGPU_DIR, d.vf, &file)
    }

    /// Removes the vGPU definition of `vf`; `false` when there was none.
    pub(crate) fn undefine_vf_vgpu(&self, vf: PciAddress) -> Result<bool> {
        remove_durably(&self.own_path(VF_VGPU_DIR, vf))
    }

    // ---- driver bindings ----

    /// Every binding definition, sorted by address; the first bad file is an error.
    pub fn bindings(&self) -> Result<Vec<BindingDefinition>> {
        strict(self.bindings_lenient())
    }

    /// Every binding definition that can be read, sorted by address, and an error for each
    /// file that cannot.
    pub fn bindings_lenient(&self) -> (Vec<BindingDefinition>, Vec<Error>) {
        self.list_own(BINDING_DIR, binding_from_file)
    }

    /// The binding definition of `a`; `None` when there is none.
    pub fn binding(&self, a: PciAddress) -> Result<Option<BindingDefinition>> {
        self.read_own(BINDING_DIR, a, binding_from_file)
    }

    /// Writes the binding definition of `d.address`, replacing any.
    pub(crate) fn define_binding(&self, d: &BindingDefinition) -> Result<()> {
        let path = self.own_path(BINDING_DIR, d.address);
        check_name(&path, "driver", &d.driver)?;
        if let Some(previous) = &d.previous_driver {
            check_name(&path, "previous driver", previous)?;
        }
        let file = BindingFile {
            version: FORMAT_VERSION,
            driver: d.driver.clone(),
            previous_driver: d.previous_driver.clone(),
            start: d.start,
        };
        self.write_own(BINDING_DIR, d.address, &file)
    }

    /// Removes the binding definition of `a`; `false` when there was none.
    pub(crate) fn undefine_binding(&self, a: PciAddress) -> Result<bool> {
        remove_durably(&self.own_path(BINDING_DIR, a))
    }

    // ---- our own files ----

    fn own_path(&self, kind: &str, address: PciAddress) -> PathBuf {
        self.vgpu.join(kind).join(format!("{address}.json"))
    }

    /// The file of an mdev definition.
    pub fn mdev_path(&self, def: &MdevDefinition) -> PathBuf {
        self.mdevctl.join(&def.parent).join(uuid_name(def.uuid))
    }

    /// The file of the vGPU definition of `vf`.
    pub fn vf_vgpu_path(&self, vf: PciAddress) -> PathBuf {
        self.own_path(VF_VGPU_DIR, vf)
    }

    /// The file of the binding definition of `address`.
    pub fn binding_path(&self, address: PciAddress) -> PathBuf {
        self.own_path(BINDING_DIR, address)
    }

    fn list_own<F: DeserializeOwned, D>(
        &self,
        kind: &str,
        convert: fn(&Path, PciAddress, F) -> Result<D>,
    ) -> (Vec<D>, Vec<Error>) {
        let mut found = Vec::new();
        let mut errors = Vec::new();
        let entries = match list_dir(&self.vgpu.join(kind)) {
            Ok(entries) => entries,
            Err(err) => return (Vec::new(), vec![err]),
        };
        for (path, name) in entries {
            let read = address_name(&path, name.as_deref()).and_then(|address| {
                read_own_file(&path)?
                    .map(|file| convert(&path, address, file).map(|def| (address, def)))
                    .transpose()
            });
            match read {
                Ok(Some(def)) => found.push(def),
                Ok(None) => {}
                Err(err) => errors.push(err),
            }
        }
        found.sort_by_key(|(address, _)| *address);
        (found.into_iter().map(|(_, def)| def).collect(), errors)
    }

    fn read_own<F: DeserializeOwned, D>(
        &self,
        kind: &str,
        address: PciAddress,
        convert: fn(&Path, PciAddress, F) -> Result<D>,
    ) -> Result<Option<D>> {
        let path = self.own_path(kind, address);
        read_own_file(&path)?
            .map(|file| convert(&path, address, file))
            .transpose()
    }

    fn write_own<F: Serialize>(&self, kind: &str, address: PciAddress, file: &F) -> Result<()> {
        let path = self.own_path(kind, address);
        let mut bytes = encode(&path, file)?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes)
    }
}

/// The definitions, or the first error.
fn strict<T>((defs, errors): (Vec<T>, Vec<Error>)) -> Result<Vec<T>> {
    match errors.into_iter().next() {
        Some(err) => Err(err),
        None => Ok(defs),
    }
}

fn uuid_name(uuid: Uuid) -> String {
    uuid.hyphenated().to_string()
}

/// Reads `etc/mdevctl.d/<parent>/<name>`; `None` when it is gone or is not a definition
/// (a hidden file).
fn read_mdev(path: &Path, name: Option<&str>, parent: &str) -> Result<Option<MdevDefinition>> {
    let name = name.ok_or_else(|| definition(path, "the name is not UTF-8".to_owned()))?;
    let uuid = Uuid::try_parse(name)
        .ok()
        .filter(|uuid| uuid_name(*uuid) == name)
        .ok_or_else(|| {
            definition(
                path,
                "the name is not a lowercase hyphenated UUID".to_owned(),
            )
        })?;
    let Some(text) = read_definition(path)? else {
        return Ok(None);
    };
    let file: MdevctlFile = decode(path, &text)?;
    check_name(path, "mdev type", &file.mdev_type)?;
    let mut attrs = Vec::with_capacity(file.attrs.len());
    for (index, attr) in file.attrs.into_iter().enumerate() {
        let mut entries = attr.into_iter();
        match (entries.next(), entries.next()) {
            (Some((name, value)), None) => {
                check_name(path, "attribute", &name)?;
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
    Ok(Some(MdevDefinition {
        uuid,
        parent: parent.to_owned(),
        mdev_type: file.mdev_type,
        start: file.start,
        attrs,
    }))
}

/// The address a file `<address>.json` of our store is named after.
fn address_name(path: &Path, name: Option<&str>) -> Result<PciAddress> {
    let name = name.ok_or_else(|| definition(path, "the name is not UTF-8".to_owned()))?;
    name.strip_suffix(".json")
        .and_then(|stem| stem.parse::<PciAddress>().ok())
        .filter(|address| format!("{address}.json") == name)
        .ok_or_else(|| {
            definition(
                path,
                "the name is not a canonical PCI address with .json (dddd:bb:dd.f.json)".to_owned(),
            )
        })
}

/// Reads one of our files, checking its version before its fields.
fn read_own_file<F: DeserializeOwned>(path: &Path) -> Result<Option<F>> {
    let Some(text) = read_definition(path)? else {
        return Ok(None);
    };
    let header: VersionHeader = decode(path, &text)?;
    match header.version {
        None => Err(definition(
            path,
            "no \"version\" field: not a vgpu definition".to_owned(),
        )),
        Some(version) if version.as_u64() == Some(u64::from(FORMAT_VERSION)) => {
            decode(path, &text).map(Some)
        }
        Some(version) => Err(definition(
            path,
            format!("format version {version} is not supported (this vgpu reads {FORMAT_VERSION})"),
        )),
    }
}

fn sriov_from_file(path: &Path, pf: PciAddress, file: SriovFile) -> Result<SriovDefinition> {
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

fn vf_vgpu_from_file(_: &Path, vf: PciAddress, file: VfVgpuFile) -> Result<VfVgpuDefinition> {
    Ok(VfVgpuDefinition {
        vf,
        gpu: file.gpu,
        type_id: file.type_id,
        start: file.start,
    })
}

fn binding_from_file(
    path: &Path,
    address: PciAddress,
    file: BindingFile,
) -> Result<BindingDefinition> {
    check_name(path, "driver", &file.driver)?;
    if let Some(previous) = &file.previous_driver {
        check_name(path, "previous driver", previous)?;
    }
    Ok(BindingDefinition {
        address,
        driver: file.driver,
        previous_driver: file.previous_driver,
        start: file.start,
    })
}

/// Reads a definition file, bounded; `None` when it does not exist.
fn read_definition(path: &Path) -> Result<Option<String>> {
    read_bounded(path, DEFINITION_LIMIT)
}

fn decode<F: DeserializeOwned>(path: &Path, text: &str) -> Result<F> {
    serde_json::from_str(text).map_err(|source| Error::DefinitionJson {
        path: path.to_path_buf(),
        source,
    })
}

fn encode<F: Serialize>(path: &Path, file: &F) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(file).map_err(|err| update_error("encode", path, err.into()))
}

fn definition(path: &Path, reason: String) -> Error {
    Error::Definition {
        path: path.to_path_buf(),
        reason,
    }
}

/// Checks that `value` can be one component of a sysfs or store path: not empty, no `/`, no
/// NUL, not `.` or `..`.
fn check_name(path: &Path, what: &str, value: &str) -> Result<()> {
    let bad = value.is_empty()
        || value == "."
        || value == ".."
        || value.contains('/')
        || value.contains('\0');
    if bad {
        let shown: String = value.chars().take(80).collect();
        return Err(definition(
            path,
            format!("{what} {shown:?} is not a file name"),
        ));
    }
    Ok(())
}
