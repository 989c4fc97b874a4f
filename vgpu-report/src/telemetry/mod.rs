//! Per-vGPU and per-tenant telemetry: what each vGPU in use is allotted and uses, who holds
//! it, and the sums per tenant that showback is built on. Pure: the caller reads the host
//! (`vgpu-core`'s `discover`), NVML ([`NvmlHost`], turned into [`Usage`] by
//! [`usage_from_nvml`]) and the hypervisor's ownership ([`Holder`]), and [`telemetry`] joins
//! them.
//!
//! NVML names a running vGPU by its own instance id, its type, the VM it belongs to
//! (`nvmlVgpuInstanceGetVmID`: on KVM the UUID QEMU was started with, the libvirt domain's)
//! and, for a mediated device, the mdev's UUID (`nvmlVgpuInstanceGetMdevUUID`).
//! [`usage_from_nvml`] matches each NVML vGPU to one host vGPU of its GPU, and says how
//! ([`MatchedBy`]):
//!
//! - **by mdev UUID**, exact, when NVML gives it and the GPU's vGPUs are mediated devices: the
//!   host's vGPU of that UUID gets the usage; a UUID that names no vGPU of the GPU gives the
//!   usage to none;
//! - **by VM and type** otherwise: when NVML cannot give the mdev UUID (an older driver, not
//!   supported), and always on NVIDIA's vendor-specific VFIO interface, where a vGPU is a VF
//!   with no mediated device and no NVML function names the host VF (see
//!   [`NvmlVgpu::mdev_uuid`]). The usage goes to the host's vGPU of that GPU and type that the
//!   domain of that UUID holds, not already matched by UUID, when there is exactly one; a
//!   domain holding two such vGPUs leaves both without usage rather than guessing.
//!
//! A host vGPU that two NVML vGPUs match gets the usage of neither.
//!
//! What can be attributed to one vGPU differs by kind:
//!
//! - **frame buffer** is partitioned: a vGPU's type fixes its size (the type's `framebuffer`,
//!   or a plain VF's local-memory quota), and NVML reports how much of it the guest has in use
//!   (`nvmlVgpuInstanceGetFbUsage`);
//! - **encoder sessions** are counted per vGPU by NVML (`nvmlVgpuInstanceGetEncoderSessions`);
//! - **compute** is not partitioned on a time-sliced vGPU: every vGPU of a physical GPU runs
//!   on the same engines in turn. NVML's per-vGPU utilisation samples
//!   (`nvmlDeviceGetVgpuUtilization`: `smUtil`, `memUtil`, `encUtil`, `decUtil`) are the share
//!   of the last sample period in which the physical GPU's engine was busy with that vGPU's
//!   work, a fraction of one GPU's time; they say neither how much of the engine's capacity
//!   the work used while it ran nor what it cost the others (memory bandwidth, caches, the
//!   scheduler's switches). [`Utilization`] carries them as ratios of the physical GPU.

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::model::holder::Holder;
pub use crate::model::nvml::matching::MatchedBy;
use crate::model::nvml::matching::matches;
use crate::model::nvml::{NvmlHost, NvmlVgpu};
use crate::model::pci::PciAddress;
use crate::model::{Backend, Gpu, Inventory, VgpuHandle};

/// One MiB in bytes.
const MIB: u64 = 1024 * 1024;

/// What the GPU's management library reports about one vGPU now; `None` where it reports
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VgpuUsage {
    /// Frame buffer the guest has in use, in bytes.
    pub framebuffer_used_bytes: Option<u64>,
    /// Active encoder sessions.
    pub encoder_sessions: Option<u32>,
    /// Engine utilisation.
    pub utilization: Utilization,
    /// How the library's report was matched to the vGPU.
    pub matched_by: MatchedBy,
}

/// The usage of every vGPU the management library knows, by vGPU.
pub type Usage = BTreeMap<VgpuHandle, VgpuUsage>;

/// The share of the last sample period in which an engine of the physical GPU was busy with a
/// vGPU's work, from 0 to 1 (see the module documentation); `None` when not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Utilization {
    /// 3D and compute (the streaming multiprocessors).
    pub sm: Option<f64>,
    /// Frame buffer memory reads and writes.
    pub memory: Option<f64>,
    /// The video encoder.
    pub encoder: Option<f64>,
    /// The video decoder.
    pub decoder: Option<f64>,
}

impl Utilization {
    /// The engines by name (`sm`, `memory`, `encoder`, `decoder`), in that order.
    pub fn engines(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("sm", self.sm),
            ("memory", self.memory),
            ("encoder", self.encoder),
            ("decoder", self.decoder),
        ]
    }
}

/// Telemetry of a host: per GPU, per vGPU, per tenant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Telemetry {
    /// Every GPU that offers vGPUs or holds some, by address.
    pub gpus: Vec<GpuTelemetry>,
    /// Every vGPU in use, by GPU then id.
    pub vgpus: Vec<VgpuTelemetry>,
    /// Sums per tenant, by tenant; vGPUs with no tenant (no domain holds them, or their
    /// domain names none) are summed under `tenant: null`, last.
    pub tenants: Vec<TenantUsage>,
}

/// One GPU's count of vGPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuTelemetry {
    /// Its address.
    pub gpu: PciAddress,
    /// Its model, from the PCI ID database.
    pub model: Option<String>,
    /// How it offers vGPUs.
    pub backend: Backend,
    /// vGPUs in use on it.
    pub vgpus: u32,
}

/// One vGPU in use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VgpuTelemetry {
    /// Its physical GPU.
    pub gpu: PciAddress,
    /// Its id: a mediated device's UUID or the VF that carries it.
    pub id: VgpuHandle,
    /// Its type id (`vf` for a plain VF).
    #[serde(rename = "type")]
    pub type_id: String,
    /// Its type's name, when known.
    pub type_name: Option<String>,
    /// The domain that holds it.
    pub domain: Option<String>,
    /// The tenant the domain names.
    pub tenant: Option<String>,
    /// Frame buffer allotted, in bytes: the type's, or a plain VF's local-memory quota.
    pub framebuffer_bytes: Option<u64>,
    /// Frame buffer in use, in bytes (NVML).
    pub framebuffer_used_bytes: Option<u64>,
    /// Active encoder sessions (NVML).
    pub encoder_sessions: Option<u32>,
    /// Engine utilisation (NVML).
    pub utilization: Utilization,
    /// How NVML's report was matched to this vGPU; `None` when none was.
    pub matched_by: Option<MatchedBy>,
}

/// What one tenant's vGPUs are allotted and use, summed. A sum is `None` unless every one of
/// the tenant's vGPUs reports the value, so that a sum never reads lower than the truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantUsage {
    /// The tenant; `None` for vGPUs with none.
    pub tenant: Option<String>,
    /// Its vGPUs.
    pub vgpus: u32,
    /// Frame buffer allotted, in bytes.
    pub framebuffer_bytes: Option<u64>,
    /// Frame buffer in use, in bytes.
    pub framebuffer_used_bytes: Option<u64>,
    /// Active encoder sessions.
    pub encoder_sessions: Option<u32>,
}

/// Joins `inventory`'s vGPUs (mediated devices, vendor-VFIO VFs, and plain VFs bound to
/// `vfio-pci`) with their `usage` and `owners` into per-vGPU rows and per-tenant sums.
pub fn telemetry(
    inventory: &Inventory,
    usage: &Usage,
    owners: &BTreeMap<VgpuHandle, Holder>,
) -> Telemetry {
    let mut out = Telemetry::default();
    for gpu in &inventory.gpus {
        let rows = gpu_rows(gpu, usage, owners);
        if gpu.backend != Backend::None || !rows.is_empty() {
            out.gpus.push(GpuTelemetry {
                gpu: gpu.address,
                model: gpu.model.clone(),
                backend: gpu.backend,
                vgpus: u32::try_from(rows.len()).unwrap_or(u32::MAX),
            });
        }
        out.vgpus.extend(rows);
    }
    out.gpus.sort_by_key(|g| g.gpu);
    out.vgpus.sort_by_key(|v| (v.gpu, v.id));
    out.tenants = tenants(&out.vgpus);
    out
}

fn gpu_rows(gpu: &Gpu, usage: &Usage, owners: &BTreeMap<VgpuHandle, Holder>) -> Vec<VgpuTelemetry> {
    let row = |id: VgpuHandle, type_id: &str, type_name, framebuffer_mib: Option<u64>| {
        let owner = owners.get(&id);
        let used = usage.get(&id);
        VgpuTelemetry {
            gpu: gpu.address,
            id,
            type_id: type_id.to_owned(),
            type_name,
            domain: owner.map(|o| o.domain.clone()),
            tenant: owner.and_then(|o| o.tenant_name()).map(str::to_owned),
            framebuffer_bytes: framebuffer_mib.and_then(|mib| mib.checked_mul(MIB)),
            framebuffer_used_bytes: used.and_then(|u| u.framebuffer_used_bytes),
            encoder_sessions: used.and_then(|u| u.encoder_sessions),
            utilization: used.map(|u| u.utilization).unwrap_or_default(),
            matched_by: used.map(|u| u.matched_by),
        }
    };
    gpu.vgpus
        .iter()
        .map(|v| {
            let ty = gpu.types.iter().find(|t| t.id == v.type_id);
            // A plain VF's frame buffer is its own local-memory quota.
            let plain_vf = match v.id {
                VgpuHandle::Vf(address) if v.type_id == crate::model::PLAIN_VF_TYPE => {
                    gpu.vfs.iter().find(|vf| vf.address == address)
                }
                _ => None,
            };
            let framebuffer = match plain_vf {
                Some(vf) => vf.memory_mib,
                None => ty.and_then(|t| t.framebuffer_mib),
            };
            row(
                v.id,
                &v.type_id,
                ty.and_then(|t| t.name.clone()),
                framebuffer,
            )
        })
        .collect()
}

fn tenants(vgpus: &[VgpuTelemetry]) -> Vec<TenantUsage> {
    // `None` sorts first in a BTreeMap; the tenantless sum goes last.
    let mut by_tenant: BTreeMap<Option<&str>, Vec<&VgpuTelemetry>> = BTreeMap::new();
    for vgpu in vgpus {
        by_tenant
            .entry(vgpu.tenant.as_deref())
            .or_default()
            .push(vgpu);
    }
    let mut sums: Vec<TenantUsage> = by_tenant
        .into_iter()
        .map(|(tenant, rows)| TenantUsage {
            tenant: tenant.map(str::to_owned),
            vgpus: u32::try_from(rows.len()).unwrap_or(u32::MAX),
            framebuffer_bytes: sum(rows.iter().map(|r| r.framebuffer_bytes)),
            framebuffer_used_bytes: sum(rows.iter().map(|r| r.framebuffer_used_bytes)),
            encoder_sessions: sum(rows.iter().map(|r| r.encoder_sessions.map(u64::from)))
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        })
        .collect();
    let tenantless_first = sums.first().is_some_and(|s| s.tenant.is_none());
    sums.rotate_left(usize::from(tenantless_first));
    sums
}

/// The usage NVML reports for the vGPUs of `inventory`, each matched to one vGPU of its GPU
/// by its mdev UUID or else by its VM and type (see the module documentation).
pub fn usage_from_nvml(
    nvml: &NvmlHost,
    inventory: &Inventory,
    owners: &BTreeMap<VgpuHandle, Holder>,
) -> Usage {
    let mut usage = Usage::new();
    for gpu in &inventory.gpus {
        let Some(running) = nvml.gpu(gpu.address).and_then(|g| g.vgpus.value()) else {
            continue;
        };
        for (id, vgpu, matched_by) in matches(gpu, running, owners) {
            usage.insert(id, vgpu_usage(vgpu, matched_by));
        }
    }
    usage
}

fn vgpu_usage(vgpu: &NvmlVgpu, matched_by: MatchedBy) -> VgpuUsage {
    let sample = vgpu.utilization.value().copied().flatten();
    let ratio = |percent: u32| f64::from(percent.min(100)) / 100.0;
    VgpuUsage {
        framebuffer_used_bytes: vgpu
            .framebuffer_used_mib
            .value()
            .and_then(|mib| mib.checked_mul(MIB)),
        encoder_sessions: vgpu.encoder.value().map(|e| e.sessions),
        utilization: Utilization {
            sm: sample.map(|s| ratio(s.sm_percent)),
            memory: sample.map(|s| ratio(s.memory_percent)),
            encoder: sample.map(|s| ratio(s.encoder_percent)),
            decoder: sample.map(|s| ratio(s.decoder_percent)),
        },
        matched_by,
    }
}

/// The sum of `values`, `None` when one is unknown (or on overflow).
fn sum(mut values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.try_fold(0u64, |total, value| total.checked_add(value?))
}

#[cfg(test)]
pub(crate) mod tests;
