//! Offers a GPU's sysfs made: `var/lib/vgpu/offers/<gpu>.json`, every vGPU type an NVIDIA
//! vendor-VFIO GPU listed as creatable under one driver version. They are learned, not
//! defined, so they live under `var/lib`, not `etc`. An offer recorded by an earlier version
//! under `etc/vgpu/offers/` is read once, written to its new place by the next change, and
//! removed.
//!
//! A VF's `nvidia/creatable_vgpu_types` lists only the types that fit beside the vGPUs present
//! (NVIDIA Virtual GPU Software User Guide, "Creating an NVIDIA vGPU on a Linux with KVM
//! hypervisor that uses a vendor-specific VFIO framework"). Without NVML, the other types the
//! GPU supports are known only from an earlier offer. Type ids are per card and driver
//! branch, so a record of another driver version is not used, and is replaced by the next.
//!
//! ```json
//! {"version": 1, "driver_version": "550.90.05",
//!  "types": [{"id": "1145", "name": "NVIDIA L40S-1B", "framebuffer_mib": 1024, "max_instances": 32}]}
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::capacity::{HostState, KnownType};
use crate::error::Result;
use crate::host::durable::{present, remove_dir_if_empty, remove_durably, write_atomic};
use crate::host::nvidia;
use crate::host::paths::HostPaths;
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, NVIDIA_VENDOR_ID, NameSource, VgpuType, Warning};
use crate::state::format::{FORMAT_VERSION, decode_own, encode_own};

const OFFERS_DIR: &str = "offers";

/// The vGPU types one GPU offered under one driver version, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedOffer {
    /// The GPU.
    pub gpu: PciAddress,
    /// The NVIDIA driver's version when the types were offered.
    pub driver_version: String,
    /// Every type offered, each as the GPU's sysfs named it.
    pub types: Vec<KnownType>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TypeEntry {
    id: String,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    framebuffer_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_instances: Option<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OfferFile {
    version: u32,
    driver_version: String,
    types: Vec<TypeEntry>,
}

fn decode(path: &Path, gpu: PciAddress, text: &str) -> Result<RecordedOffer> {
    let file: OfferFile = decode_own(path, text)?;
    Ok(RecordedOffer {
        gpu,
        driver_version: file.driver_version,
        types: file
            .types
            .into_iter()
            .map(|t| KnownType {
                id: t.id,
                name: t.name,
                framebuffer_mib: t.framebuffer_mib,
                max_instances: t.max_instances,
                source: NameSource::Recorded,
            })
            .collect(),
    })
}

fn entry(t: &KnownType) -> TypeEntry {
    TypeEntry {
        id: t.id.clone(),
        name: t.name.clone(),
        framebuffer_mib: t.framebuffer_mib,
        max_instances: t.max_instances,
    }
}

impl Store {
    /// The file of the offer recorded for `gpu`: `var/lib/vgpu/offers/<gpu>.json`.
    pub fn offer_path(&self, gpu: PciAddress) -> std::path::PathBuf {
        self.learned.join(OFFERS_DIR).join(format!("{gpu}.json"))
    }

    /// The offer recorded for `gpu` under `driver_version`; `None` when there is none, or
    /// only one of another driver version. One recorded at the old place (`etc/vgpu/offers/`)
    /// is read when there is none at the new one.
    pub fn offer_of(&self, gpu: PciAddress, driver_version: &str) -> Result<Option<RecordedOffer>> {
        let path = self.offer_path(gpu);
        let recorded = match super::read_definition(&path)? {
            Some(text) => Some(decode(&path, gpu, &text)?),
            None => self.read_own(OFFERS_DIR, gpu, decode)?,
        };
        Ok(recorded.filter(|r| r.driver_version == driver_version))
    }

    /// Adds the types `types` names from sysfs (named, [`NameSource::Sysfs`]) to the offer
    /// recorded for `gpu` under `driver_version`. Writes only when a type is new; a record of
    /// another driver version is replaced. Returns whether it wrote.
    pub(crate) fn record_offer(
        &self,
        gpu: PciAddress,
        driver_version: &str,
        types: &[VgpuType],
    ) -> Result<bool> {
        let mut known = self
            .offer_of(gpu, driver_version)?
            .map(|r| r.types)
            .unwrap_or_default();
        let before = known.len();
        for t in types {
            let (Some(name), Some(NameSource::Sysfs)) = (&t.name, t.name_source) else {
                continue;
            };
            if known.iter().any(|k| k.id == t.id) {
                continue;
            }
            known.push(KnownType {
                id: t.id.clone(),
                name: name.clone(),
                framebuffer_mib: t.framebuffer_mib,
                max_instances: t.max_instances,
                source: NameSource::Recorded,
            });
        }
        let legacy = self.own_path(OFFERS_DIR, gpu);
        let moving = present(&legacy)?;
        if known.len() == before && !moving {
            return Ok(false);
        }
        known.sort_by_cached_key(|k| crate::model::type_order(&k.id));
        let path = self.offer_path(gpu);
        let file = OfferFile {
            version: FORMAT_VERSION,
            driver_version: driver_version.to_owned(),
            types: known.iter().map(entry).collect(),
        };
        write_atomic(&path, &encode_own(&path, &file)?)?;
        if moving {
            // Written at its new place first: a crash between the two leaves both, and the
            // new one is read.
            remove_durably(&legacy)?;
            if let Some(dir) = legacy.parent() {
                remove_dir_if_empty(dir)?;
                dir.parent().map(remove_dir_if_empty).transpose()?;
            }
        }
        Ok(true)
    }
}

/// Adds the recorded offer of each NVIDIA vendor-VFIO GPU of `state` that NVML gave no list
/// for ([`HostState::supported_types`]), under the driver version loaded now. A record that
/// cannot be read is a warning naming its file; the GPU then has what sysfs and the catalog
/// say. Does not settle `state`.
#[tracing::instrument(level = "trace", skip_all)]
pub fn add_recorded_offers(state: &mut HostState, paths: &HostPaths, store: &Store) {
    let wanted: Vec<PciAddress> = state
        .inventory
        .gpus
        .iter()
        .filter(|g| is_vendor_vfio(g) && !state.supported_types.contains_key(&g.address))
        .map(|g| g.address)
        .collect();
    if wanted.is_empty() {
        return;
    }
    let version = match nvidia::driver_version(paths) {
        Ok(Some(version)) => version,
        Ok(None) => return,
        Err(err) => {
            state
                .inventory
                .warnings
                .push(warning("NVIDIA driver", &err));
            return;
        }
    };
    for gpu in wanted {
        match store.offer_of(gpu, &version) {
            Ok(Some(record)) => {
                state.supported_types.insert(gpu, record.types);
            }
            Ok(None) => {}
            Err(err) => state
                .inventory
                .warnings
                .push(warning(&gpu.to_string(), &err)),
        }
    }
}

/// Records what each NVIDIA vendor-VFIO GPU of `gpus` offers now, as discovery read it, under
/// the driver version loaded now ([`Store::record_offer`]). Nothing without a driver version.
#[tracing::instrument(level = "trace", skip_all)]
pub(crate) fn record_offers(paths: &HostPaths, store: &Store, gpus: &[Gpu]) -> Result<()> {
    if !gpus.iter().any(is_vendor_vfio) {
        return Ok(());
    }
    let Some(version) = nvidia::driver_version(paths)? else {
        return Ok(());
    };
    for gpu in gpus.iter().filter(|g| is_vendor_vfio(g)) {
        store.record_offer(gpu.address, &version, &gpu.types)?;
    }
    Ok(())
}

fn is_vendor_vfio(gpu: &Gpu) -> bool {
    gpu.vendor_id == Some(NVIDIA_VENDOR_ID) && gpu.backend == Backend::NvidiaVfio
}

fn warning(device: &str, err: &crate::error::Error) -> Warning {
    Warning {
        device: device.to_owned(),
        message: err.chain(),
    }
}
