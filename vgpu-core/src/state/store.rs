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
//!   - `mig/<gpu>.json`: MIG mode and GPU instances (`store/mig.rs`);
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
//! The text of each file, both ways, is [`format`](super::format)'s (pure functions, which the
//! fuzz targets of `fuzz/` and the round-trip properties drive); this module adds the names and
//! the I/O.
//!
//! Every write is atomic: a temporary file in the same directory is written, flushed to disk,
//! renamed over the target, and the directory is flushed. Readers therefore see the old or the
//! new definition, never half of one. Names beginning with `.` (temporary files, editors'
//! backups) are skipped when listing, so no parent of such a name is written. Any other file
//! that is not a definition (a name that is not a UUID or a canonical PCI address, text that is
//! not JSON, an unknown `start`, a foreign or newer format) is an error naming the file: the
//! listing functions stop at the first one, the `*_lenient` ones return it beside the
//! definitions they could read.
//!
//! `Store` does not lock: callers that change definitions hold a `HostLock` (the manager takes it).

use std::path::{Path, PathBuf};

use uuid::Uuid;

mod mig;
mod offers;
mod sched;
mod size_mode;

pub use mig::{MigDefinition, MigInstanceDefinition};
pub(crate) use offers::record_offers;
pub use offers::{RecordedOffer, add_recorded_offers};
pub(crate) use sched::Sched;
pub use sched::SchedDefinition;
pub use size_mode::SizeModeDefinition;
pub(crate) use size_mode::SizeModeKind;
pub(crate) use size_mode::{PLACEMENT_ATTR, placed_among};
pub use vgpu_model::definition::{
    BindingDefinition, MdevDefinition, SriovDefinition, Start, VfVgpuDefinition,
};

use super::format::{
    check_name, decode_binding, decode_mdev, decode_sriov, decode_vf_vgpu, definition,
    encode_binding, encode_mdev, encode_sriov, encode_vf_vgpu,
};
use crate::error::{Error, Result, StateError};
use crate::host::durable::{
    is_dir, list_dir, present, remove_dir_if_empty, remove_durably, write_atomic,
};
use crate::host::paths::HostPaths;
use crate::host::sysfs::read_bounded;
use crate::model::pci::PciAddress;

/// The largest definition file read.
pub(crate) const DEFINITION_LIMIT: usize = 64 * 1024;

/// Bytes in a MiB: `lmem_quota` is written in bytes, quotas are defined in MiB.
pub(crate) const MIB: u64 = 1024 * 1024;

/// The directory of mdevctl's callout and notifier scripts, beside the parents.
const MDEVCTL_SCRIPTS: &str = "scripts.d";

const SRIOV_DIR: &str = "sriov";
const VF_VGPU_DIR: &str = "vf-vgpus";
const BINDING_DIR: &str = "bindings";

/// One kind of definition kept in vgpu's own files, `etc/vgpu/<DIR>/<address>.json`: where,
/// keyed by which device, and how it is written and read. The store's accessors are written
/// once, over this.
pub(crate) trait OwnKind {
    /// The directory under `etc/vgpu`.
    const DIR: &'static str;
    /// The definition.
    type Def;
    /// The device it is keyed by.
    fn key(d: &Self::Def) -> PciAddress;
    /// Its file's text, read from `path`, as the definition of `key`.
    fn decode(path: &Path, key: PciAddress, text: &str) -> Result<Self::Def>;
    /// The file's bytes for `d`, to be written at `path`.
    fn encode(path: &Path, d: &Self::Def) -> Result<Vec<u8>>;
}

/// Declares the [`OwnKind`] `$kind` of `$def`, in `$dir`, keyed by field `$key`, written by
/// `$encode` and read by `$decode`.
macro_rules! own_kind {
    ($(#[$doc:meta])* $kind:ident, $dir:expr, $def:ty, $key:ident, $decode:path, $encode:path) => {
        $(#[$doc])*
        pub(crate) struct $kind;

        impl $crate::state::store::OwnKind for $kind {
            const DIR: &'static str = $dir;
            type Def = $def;
            fn key(d: &$def) -> PciAddress {
                d.$key
            }
            fn decode(path: &Path, key: PciAddress, text: &str) -> Result<$def> {
                $decode(path, key, text)
            }
            fn encode(path: &Path, d: &$def) -> Result<Vec<u8>> {
                $encode(path, d)
            }
        }
    };
}
pub(crate) use own_kind;

own_kind!(
    /// A PF's VF count and quotas.
    Sriov, SRIOV_DIR, SriovDefinition, pf, decode_sriov, encode_sriov
);
own_kind!(
    /// An NVIDIA vendor-VFIO VF's vGPU type.
    VfVgpu, VF_VGPU_DIR, VfVgpuDefinition, vf, decode_vf_vgpu, encode_vf_vgpu
);
own_kind!(
    /// A function's driver binding.
    Binding, BINDING_DIR, BindingDefinition, address, decode_binding, encode_binding
);

/// Every definition that could be read, and, for each file that could not, the kind of
/// definition (`sriov`, `bind`, `mig-mode`, `scheduler`, `size-mode`, `mdev`, `vf-vgpu`) and
/// the error.
#[derive(Debug, Default)]
pub(crate) struct AllDefinitions {
    pub(crate) sriov: Vec<SriovDefinition>,
    pub(crate) bindings: Vec<BindingDefinition>,
    pub(crate) migs: Vec<MigDefinition>,
    pub(crate) scheds: Vec<SchedDefinition>,
    pub(crate) size_modes: Vec<SizeModeDefinition>,
    pub(crate) mdevs: Vec<MdevDefinition>,
    pub(crate) vf_vgpus: Vec<VfVgpuDefinition>,
    pub(crate) errors: Vec<(&'static str, Error)>,
}

/// The persistent definitions of one host.
#[derive(Debug, Clone)]
pub struct Store {
    mdevctl: PathBuf,
    vgpu: PathBuf,
    /// `var/lib/vgpu`: what vgpu learned of the host (offers), not what the operator defined.
    learned: PathBuf,
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
            migs: tag("mig-mode", self.migs_lenient(), &mut errors),
            scheds: tag("scheduler", self.scheds_lenient(), &mut errors),
            size_modes: tag("size-mode", self.size_modes_lenient(), &mut errors),
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
            learned: paths.var().join("lib/vgpu"),
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
    /// ([`StateError::MdevDefinedElsewhere`](crate::state::StateError::MdevDefinedElsewhere)): undefine it first.
    pub(crate) fn define_mdev(&self, def: &MdevDefinition) -> Result<()> {
        check_name(&self.mdevctl, "parent", &def.parent)?;
        if def.parent == MDEVCTL_SCRIPTS {
            return Err(definition(
                &self.mdevctl,
                format!("parent {MDEVCTL_SCRIPTS:?} is mdevctl's scripts directory"),
            ));
        }
        // Listing skips hidden names: a definition under one could never be read back.
        if def.parent.starts_with('.') {
            return Err(definition(
                &self.mdevctl,
                format!("parent {:?} is a hidden name", def.parent),
            ));
        }
        let path = self.mdevctl.join(&def.parent).join(uuid_name(def.uuid));
        let bytes = encode_mdev(&path, def)?;
        for (parent, dir) in self.parent_dirs()? {
            let other = dir.join(uuid_name(def.uuid));
            if parent != def.parent && present(&other)? {
                return Err(StateError::MdevDefinedElsewhere {
                    uuid: def.uuid,
                    parent,
                    path: other,
                }
                .into());
            }
        }
        write_atomic(&path, &bytes)
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
        self.own_lenient::<Sriov>()
    }

    /// The SR-IOV definition of `pf`; `None` when there is none.
    pub fn sriov_of(&self, pf: PciAddress) -> Result<Option<SriovDefinition>> {
        self.own_of::<Sriov>(pf)
    }

    /// Writes the SR-IOV definition of `d.pf`, replacing any. A quota for no VF of `num_vfs`,
    /// or of no memory, is refused ([`StateError::Definition`](crate::state::StateError::Definition)).
    pub(crate) fn define_sriov(&self, d: &SriovDefinition) -> Result<()> {
        self.define_own::<Sriov>(d)
    }

    /// Removes the SR-IOV definition of `pf`; `false` when there was none.
    pub(crate) fn undefine_sriov(&self, pf: PciAddress) -> Result<bool> {
        self.undefine_own::<Sriov>(pf)
    }

    // ---- NVIDIA vendor-specific VFIO types on VFs ----

    /// Every VF vGPU definition, sorted by VF; the first bad file is an error.
    pub fn vf_vgpus(&self) -> Result<Vec<VfVgpuDefinition>> {
        strict(self.vf_vgpus_lenient())
    }

    /// Every VF vGPU definition that can be read, sorted by VF, and an error for each file
    /// that cannot.
    pub fn vf_vgpus_lenient(&self) -> (Vec<VfVgpuDefinition>, Vec<Error>) {
        self.own_lenient::<VfVgpu>()
    }

    /// The vGPU definition of `vf`; `None` when there is none.
    pub fn vf_vgpu(&self, vf: PciAddress) -> Result<Option<VfVgpuDefinition>> {
        self.own_of::<VfVgpu>(vf)
    }

    /// Writes the vGPU definition of `d.vf`, replacing any.
    pub(crate) fn define_vf_vgpu(&self, d: &VfVgpuDefinition) -> Result<()> {
        self.define_own::<VfVgpu>(d)
    }

    /// Removes the vGPU definition of `vf`; `false` when there was none.
    pub(crate) fn undefine_vf_vgpu(&self, vf: PciAddress) -> Result<bool> {
        self.undefine_own::<VfVgpu>(vf)
    }

    // ---- driver bindings ----

    /// Every binding definition, sorted by address; the first bad file is an error.
    pub fn bindings(&self) -> Result<Vec<BindingDefinition>> {
        strict(self.bindings_lenient())
    }

    /// Every binding definition that can be read, sorted by address, and an error for each
    /// file that cannot.
    pub fn bindings_lenient(&self) -> (Vec<BindingDefinition>, Vec<Error>) {
        self.own_lenient::<Binding>()
    }

    /// The binding definition of `a`; `None` when there is none.
    pub fn binding(&self, a: PciAddress) -> Result<Option<BindingDefinition>> {
        self.own_of::<Binding>(a)
    }

    /// Writes the binding definition of `d.address`, replacing any.
    pub(crate) fn define_binding(&self, d: &BindingDefinition) -> Result<()> {
        self.define_own::<Binding>(d)
    }

    /// Removes the binding definition of `a`; `false` when there was none.
    pub(crate) fn undefine_binding(&self, a: PciAddress) -> Result<bool> {
        self.undefine_own::<Binding>(a)
    }

    // ---- our own files ----

    /// Every definition of kind `K` that can be read, sorted by device, and an error for each
    /// file that cannot.
    pub(crate) fn own_lenient<K: OwnKind>(&self) -> (Vec<K::Def>, Vec<Error>) {
        self.list_own(K::DIR, K::decode)
    }

    /// The definition of kind `K` of `address`; `None` when there is none.
    pub(crate) fn own_of<K: OwnKind>(&self, address: PciAddress) -> Result<Option<K::Def>> {
        self.read_own(K::DIR, address, K::decode)
    }

    /// Writes the definition `d` of kind `K`, replacing any of its device.
    pub(crate) fn define_own<K: OwnKind>(&self, d: &K::Def) -> Result<()> {
        let path = self.own_path(K::DIR, K::key(d));
        write_atomic(&path, &K::encode(&path, d)?)
    }

    /// The file of the definition `d` of kind `K`, and its bytes: for an operation that writes
    /// it as a step it can undo ([`Operation::replace_file`](crate::manager)).
    pub(crate) fn own_file<K: OwnKind>(&self, d: &K::Def) -> Result<(PathBuf, Vec<u8>)> {
        let path = self.own_path(K::DIR, K::key(d));
        let bytes = K::encode(&path, d)?;
        Ok((path, bytes))
    }

    /// Removes the definition of kind `K` of `address`; `false` when there was none.
    pub(crate) fn undefine_own<K: OwnKind>(&self, address: PciAddress) -> Result<bool> {
        remove_durably(&self.own_path(K::DIR, address))
    }

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

    fn list_own<D>(
        &self,
        kind: &str,
        decode: fn(&Path, PciAddress, &str) -> Result<D>,
    ) -> (Vec<D>, Vec<Error>) {
        let mut found = Vec::new();
        let mut errors = Vec::new();
        let entries = match list_dir(&self.vgpu.join(kind)) {
            Ok(entries) => entries,
            Err(err) => return (Vec::new(), vec![err]),
        };
        for (path, name) in entries {
            let read = address_name(&path, name.as_deref()).and_then(|address| {
                read_definition(&path)?
                    .map(|text| decode(&path, address, &text).map(|def| (address, def)))
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

    fn read_own<D>(
        &self,
        kind: &str,
        address: PciAddress,
        decode: fn(&Path, PciAddress, &str) -> Result<D>,
    ) -> Result<Option<D>> {
        let path = self.own_path(kind, address);
        read_definition(&path)?
            .map(|text| decode(&path, address, &text))
            .transpose()
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
    decode_mdev(path, uuid, parent, &text).map(Some)
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

/// Reads a definition file, bounded; `None` when it does not exist.
fn read_definition(path: &Path) -> Result<Option<String>> {
    read_bounded(path, DEFINITION_LIMIT)
}
