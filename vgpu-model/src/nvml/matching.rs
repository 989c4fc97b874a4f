//! NVML's running vGPUs matched to the host's: by mdev UUID, exact, else by the VM and the type.
//! Telemetry attributes NVML's usage by this match (`vgpu-report`'s `telemetry` documents the
//! rules); a migration finds a source vGPU's NVML instance by it (`vgpu-core`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use uuid::Uuid;

use super::{NvmlVgpu, VmId};
use crate::holder::Holder;
use crate::{Backend, Gpu, VgpuHandle};

/// How NVML's report of a running vGPU was matched to the host's vGPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchedBy {
    /// By the UUID of its mediated device (`nvmlVgpuInstanceGetMdevUUID`): exact.
    MdevUuid,
    /// By the VM it belongs to and its type: the only vGPU of that type on that GPU that the
    /// VM's domain holds.
    VmAndType,
}

/// The vGPU among NVML's `running` ones on `gpu` that is the host's vGPU `id`, matched as
/// [`matches()`] matches them: by mdev UUID, else by VM and type.
pub fn nvml_vgpu<'a>(
    gpu: &Gpu,
    running: &'a [NvmlVgpu],
    owners: &BTreeMap<VgpuHandle, Holder>,
    id: VgpuHandle,
) -> Option<&'a NvmlVgpu> {
    matches(gpu, running, owners)
        .into_iter()
        .find(|(matched, _, _)| *matched == id)
        .map(|(_, vgpu, _)| vgpu)
}

/// The host vGPU of `gpu` that each of NVML's `running` vGPUs is, where one is: by mdev UUID
/// first, then by VM and type among the vGPUs no UUID matched; a host vGPU matched twice is
/// left out.
pub fn matches<'a>(
    gpu: &Gpu,
    running: &'a [NvmlVgpu],
    owners: &BTreeMap<VgpuHandle, Holder>,
) -> Vec<(VgpuHandle, &'a NvmlVgpu, MatchedBy)> {
    let mut found = Vec::new();
    let mut by_vm = Vec::new();
    for vgpu in running {
        match exact_uuid(gpu, vgpu) {
            Some(uuid) => {
                let id = VgpuHandle::Mdev(uuid);
                if gpu.vgpus.iter().any(|v| v.id == id) {
                    found.push((id, vgpu, MatchedBy::MdevUuid));
                }
            }
            None => by_vm.push(vgpu),
        }
    }
    let claimed: BTreeSet<VgpuHandle> = found.iter().map(|(id, _, _)| *id).collect();
    for vgpu in by_vm {
        if let Some(id) = vm_and_type(gpu, vgpu, owners, &claimed) {
            found.push((id, vgpu, MatchedBy::VmAndType));
        }
    }
    let mut times: BTreeMap<VgpuHandle, usize> = BTreeMap::new();
    for (id, _, _) in &found {
        *times.entry(*id).or_default() += 1;
    }
    found.retain(|(id, _, _)| times.get(id) == Some(&1));
    found
}

/// The mdev UUID NVML gives `vgpu`, when it names a vGPU of `gpu` exactly: not on NVIDIA's
/// vendor-specific VFIO interface, whose vGPUs are VFs, not mediated devices.
fn exact_uuid(gpu: &Gpu, vgpu: &NvmlVgpu) -> Option<Uuid> {
    if gpu.backend == Backend::NvidiaVfio {
        return None;
    }
    vgpu.mdev_uuid.value().copied()
}

/// The host vGPU of `gpu` that NVML's `vgpu` is by VM and type: of its type, held by its VM,
/// not `claimed`, the only one.
fn vm_and_type(
    gpu: &Gpu,
    vgpu: &NvmlVgpu,
    owners: &BTreeMap<VgpuHandle, Holder>,
    claimed: &BTreeSet<VgpuHandle>,
) -> Option<VgpuHandle> {
    let type_id = *vgpu.type_id.value()?;
    let vm = vm_of(vgpu)?;
    let mut candidates = gpu.vgpus.iter().filter(|v| {
        crate::nvml_type_id(&v.type_id) == Some(type_id)
            && owners.get(&v.id).is_some_and(|o| o.uuid == vm)
            && !claimed.contains(&v.id)
    });
    let first = candidates.next()?;
    candidates.next().is_none().then_some(first.id)
}

/// The UUID of the VM NVML says `vgpu` runs in: on KVM, the libvirt domain's. `None` when
/// NVML does not say, or names the VM otherwise.
pub fn vm_of(vgpu: &NvmlVgpu) -> Option<Uuid> {
    match vgpu.vm_id.value()? {
        VmId::Uuid(text) => Uuid::try_parse(text.trim()).ok(),
        VmId::Domain(_) => None,
    }
}
