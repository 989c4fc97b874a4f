//! NVIDIA's live-migration calls: a running vGPU's metadata, and NVML's verdict on another
//! host's vGPU metadata and a GPU here ("vGPU Migration" of the NVML API Reference Guide);
//! and the two read-only queries built on them: the source's document
//! ([`migration_metadata`]) and the destination's judgement ([`migration_checks`]).
//!
//! NVML names a running vGPU by its own instance id. Which host vGPU that is comes from the
//! match telemetry makes (`nvml_vgpu`): the mdev UUID, or else the VM and the type. A VF of
//! NVIDIA's vendor-specific VFIO has no mdev UUID, so its metadata needs libvirt to say which
//! domain holds it. On the destination, each vGPU is judged against what `migrate begin` would
//! make of it here ([`Arrival`]), by [`migration::judge`].

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::error::{Error, NvmlError, Object, Result};
use crate::host::paths::HostPaths;
use crate::model::holder::Holder;
use crate::model::migration::{
    self, Arrival, FORMAT, Here, MigrationCheck, MigrationMetadata, VgpuMetadata,
};
use crate::model::nvml::matching::{nvml_vgpu, vm_of};
use crate::model::nvml::{NvmlHost, Unavailable};
use crate::model::{Backend, Inventory, NVIDIA_VENDOR_ID, VgpuHandle};

use super::Nvml;
use crate::model::migration::Compatibility;
use crate::model::nvml::{EccMode, Fact};
use crate::model::pci::PciAddress;

/// A vGPU's metadata buffer, whole, with the fixed part decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawVgpuMetadata {
    /// The buffer NVML filled.
    pub bytes: Vec<u8>,
    /// The host driver version in it.
    pub host_driver: String,
    /// The guest driver version in it, once the guest reported one.
    pub guest_driver: Option<String>,
}

impl RawVgpuMetadata {
    /// `bytes` with their fixed part decoded; `None` when they are not whole vGPU metadata
    /// (shorter than the opaque section they announce), or when built without NVML, which
    /// knows the layout.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn decode(bytes: Vec<u8>) -> Option<Self> {
        #[cfg(feature = "nvml")]
        if let Some(header) = vgpu_nvml_ext::migration::vgpu_metadata_header(&bytes) {
            return Some(RawVgpuMetadata {
                bytes,
                host_driver: header.host_driver,
                guest_driver: header.guest_driver,
            });
        }
        None
    }
}

impl Nvml {
    /// The ECC mode of the GPU at `address` (`nvmlDeviceGetEccMode`), alone: a migration check
    /// needs only it.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn ecc_mode(&self, address: PciAddress) -> Fact<EccMode> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::ecc_mode_at(nvml, address);
        }
        self.not_loaded()
    }

    /// The metadata of the running vGPU `instance` (`nvmlVgpuInstanceGetMetadata`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn raw_vgpu_metadata(&self, instance: u32) -> Fact<RawVgpuMetadata> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::vgpu_metadata(nvml, instance);
        }
        self.not_loaded()
    }

    /// NVML's verdict on the vGPU of `metadata` (another host's `nvmlVgpuInstanceGetMetadata`)
    /// and the GPU at `address` here (`nvmlDeviceGetVgpuMetadata`, `nvmlGetVgpuCompatibility`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn compatibility(&self, address: PciAddress, metadata: &[u8]) -> Fact<Compatibility> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::compatibility(nvml, address, metadata);
        }
        self.not_loaded()
    }
}

/// Reads NVML on the source: each of `vgpus` (as the domain XML names them), its GPU, NVML's
/// vGPU instance, type and metadata. `owners` says which domain holds each vGPU of
/// `inventory`; a vendor-VFIO VF is found only through it.
///
/// # Errors
/// NVML not loaded; a vGPU that is not this host's, is not on an NVIDIA GPU, or that NVML
/// does not run; a call that fails.
pub fn migration_metadata(
    nvml: &Nvml,
    paths: &HostPaths,
    inventory: &Inventory,
    owners: &BTreeMap<VgpuHandle, Holder>,
    vgpus: &[VgpuHandle],
) -> Result<MigrationMetadata> {
    if !nvml.status().loaded {
        return Err(NvmlError::NotLoaded {
            needed_for: "read a vGPU's migration metadata".to_owned(),
            reason: nvml.status().reason.clone().unwrap_or_default(),
        }
        .into());
    }
    let host = nvml.read();
    let mut out = MigrationMetadata {
        format: FORMAT.to_owned(),
        vgpus: Vec::new(),
    };
    for &id in vgpus {
        out.vgpus
            .push(one(nvml, paths, inventory, &host, owners, id)?);
    }
    Ok(out)
}

fn one(
    nvml: &Nvml,
    paths: &HostPaths,
    inventory: &Inventory,
    host: &NvmlHost,
    owners: &BTreeMap<VgpuHandle, Holder>,
    id: VgpuHandle,
) -> Result<VgpuMetadata> {
    let Some((gpu, host_vgpu)) = inventory
        .gpus
        .iter()
        .find_map(|g| g.vgpus.iter().find(|v| v.id == id).map(|v| (g, v)))
    else {
        return Err(Error::NotFound {
            what: Object::Vgpu,
            id: id.to_string(),
            path: paths.pci_devices(),
        });
    };
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) {
        return Err(NvmlError::NotNvidia {
            gpu: gpu.address,
            what: "migration metadata".to_owned(),
        }
        .into());
    }
    let call = |why: Unavailable| NvmlError::Call {
        gpu: gpu.address,
        why,
    };
    let Some(nvml_gpu) = host.gpu(gpu.address) else {
        return Err(NvmlError::NotRunning {
            vgpu: id.to_string(),
            gpu: gpu.address,
            reason: "NVML does not manage this GPU".to_owned(),
        }
        .into());
    };
    let running = match &nvml_gpu.vgpus {
        Fact::Value(running) => running.as_slice(),
        Fact::Unavailable(why) => return Err(call(why.clone()).into()),
    };
    let Some(vgpu) = nvml_vgpu(gpu, running, owners, id) else {
        let reason = match (gpu.backend, owners.get(&id)) {
            (Backend::NvidiaVfio, None) => "NVML names a VF's vGPU only by its VM and type, \
                 and libvirt names no domain that holds it"
                .to_owned(),
            (Backend::NvidiaVfio, Some(owner)) => {
                let nvml_type = crate::model::nvml_type_id(&host_vgpu.type_id);
                let alike = running
                    .iter()
                    .filter(|v| {
                        vm_of(v) == Some(owner.uuid) && v.type_id.value().copied() == nvml_type
                    })
                    .count();
                match alike {
                    0 => format!(
                        "none of NVML's vGPUs on the GPU is of its type in domain {} ({})",
                        owner.domain, owner.uuid
                    ),
                    n => format!(
                        "NVML runs {n} vGPU(s) of its type in domain {} ({}) and names none by \
                         its VF, so which one it is cannot be told",
                        owner.domain, owner.uuid
                    ),
                }
            }
            _ => "a vGPU has metadata only while its VM runs".to_owned(),
        };
        return Err(NvmlError::NotRunning {
            vgpu: id.to_string(),
            gpu: gpu.address,
            reason,
        }
        .into());
    };
    let type_id = match &vgpu.type_id {
        Fact::Value(id) => *id,
        Fact::Unavailable(why) => return Err(call(why.clone()).into()),
    };
    let raw = match nvml.raw_vgpu_metadata(vgpu.instance) {
        Fact::Value(raw) => raw,
        Fact::Unavailable(why) => return Err(call(why).into()),
    };
    // The name every command shows for the type.
    let type_name = inventory
        .type_name(gpu.address, &host_vgpu.type_id)
        .map(str::to_owned);
    Ok(VgpuMetadata {
        vgpu: id,
        gpu: gpu.address,
        domain: owners.get(&id).map(|o| o.uuid),
        instance: vgpu.instance,
        type_id,
        type_name,
        ecc: nvml_gpu.ecc_mode.value().map(|ecc| ecc.current),
        host_driver: raw.host_driver,
        guest_driver: raw.guest_driver,
        nvml: raw.bytes,
    })
}

/// Judges on the destination each vGPU of `metadata` against what it would become here
/// (`arrivals`, the choice `migrate begin` makes for the domain `domain`):
/// [`migration::judge`] with NVML's verdict, the vGPU type, ECC and this host's driver.
///
/// # Errors
/// Metadata in another format, of another domain, naming a vGPU twice or one not among
/// `arrivals`, or whose NVML buffer is not whole metadata (or disagrees with it); an arrival
/// of an NVIDIA type (one NVML names, [`crate::model::nvml_type_id`]) that it leaves out.
pub fn migration_checks(
    nvml: &Nvml,
    domain: Uuid,
    arrivals: &[Arrival],
    metadata: &MigrationMetadata,
) -> Result<Vec<MigrationCheck>> {
    let bad = |reason: String| Error::from(NvmlError::BadMetadata { reason });
    if metadata.format != FORMAT {
        return Err(bad(format!("format {:?}, not {FORMAT:?}", metadata.format)));
    }
    let mut checks = Vec::new();
    for (i, source) in metadata.vgpus.iter().enumerate() {
        if metadata.vgpus[..i].iter().any(|m| m.vgpu == source.vgpu) {
            return Err(bad(format!("it names vGPU {} twice", source.vgpu)));
        }
        if let Some(other) = source.domain.filter(|d| *d != domain) {
            return Err(bad(format!(
                "vGPU {} is of domain {other} there, not of {domain}",
                source.vgpu
            )));
        }
        if nvml.status().loaded {
            match RawVgpuMetadata::decode(source.nvml.clone()) {
                None => {
                    return Err(bad(format!(
                        "the NVML buffer of vGPU {} ({} bytes) is not whole vGPU metadata",
                        source.vgpu,
                        source.nvml.len()
                    )));
                }
                Some(raw) if raw.host_driver != source.host_driver => {
                    return Err(bad(format!(
                        "vGPU {} is said to run under host driver {}, its NVML buffer says {}",
                        source.vgpu, source.host_driver, raw.host_driver
                    )));
                }
                Some(_) => {}
            }
        }
        let Some(arrival) = arrivals.iter().find(|a| a.from == source.vgpu) else {
            return Err(bad(format!(
                "it names vGPU {}, which is not one of the vGPUs this host would make for the domain",
                source.vgpu
            )));
        };
        let here = Here {
            vgpu: arrival.to,
            gpu: arrival.gpu,
            type_id: crate::model::nvml_type_id(&arrival.type_id),
            ecc: nvml.ecc_mode(arrival.gpu).value().map(|ecc| ecc.current),
            host_driver: nvml.status().driver_version.clone(),
            nvml: nvml.compatibility(arrival.gpu, &source.nvml),
        };
        checks.push(migration::judge(source, here));
    }
    if let Some(missing) = arrivals.iter().find(|a| {
        crate::model::nvml_type_id(&a.type_id).is_some()
            && !metadata.vgpus.iter().any(|m| m.vgpu == a.from)
    }) {
        return Err(bad(format!(
            "it leaves out vGPU {}, which would be an NVIDIA vGPU on {} here",
            missing.from, missing.gpu
        )));
    }
    Ok(checks)
}
