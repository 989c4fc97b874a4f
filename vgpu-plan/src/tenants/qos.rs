//! What a physical GPU gives a device handed out on it, as the QoS classes ask
//! ([`Qos`](crate::model::policy::Qos)). NVIDIA's only lever is each GPU's vGPU scheduler
//! (NVIDIA Virtual GPU Software User Guide, "Changing Scheduling Behavior for Time-Sliced
//! vGPUs"): best effort, equal share, fixed share. It has no per-VM weight, so a class can
//! only say which GPUs a tenant's vGPUs may land on. The hook, `attach`, `place`, `provision`,
//! `plan`, `apply` and `migrate begin` all ask [`service`] through the one policy check.

use crate::HostState;
use crate::model::kind::DeviceKind;
use crate::model::nvml::{Fact, SchedulerState};
use crate::model::pci::PciAddress;
use crate::model::policy::{Qos, Service};
use crate::model::{Backend, Gpu, VgpuType};

/// Whether `gpu` is in equal-size mode (every time-sliced vGPU of one size), which
/// `guaranteed` needs: NVIDIA allows fixed share only there. A GPU without a size mode (no
/// mixed-size mode, or NVML not read) runs one size per GPU.
pub fn equal_size_mode(gpu: &Gpu) -> bool {
    gpu.size_mode != Some(crate::model::sizes::SizeMode::Mixed)
}

/// What `gpu` gives a device of `kind` (of type `ty`, `None` for a plain VF) handed out on it,
/// with its scheduler as NVML read it (`None`: not read). A scheduler that was not read, or
/// that NVML could not give, is unknown: the classes that need it are refused.
pub fn service(
    gpu: &Gpu,
    kind: DeviceKind,
    ty: Option<&VgpuType>,
    scheduler: Option<&Fact<SchedulerState>>,
) -> Service {
    let sole = match kind {
        DeviceKind::Passthrough => true,
        DeviceKind::PlainVf => {
            gpu.backend == Backend::Sriov && gpu.sriov.as_ref().is_some_and(|s| s.total_vfs == 1)
        }
        DeviceKind::MigVgpu | DeviceKind::TimeSlicedVgpu => {
            ty.is_some_and(|t| t.max_instances == Some(1))
        }
    };
    let scheduler = match scheduler {
        Some(Fact::Value(state)) => state.policy,
        Some(Fact::Unavailable(_)) | None => None,
    };
    Service {
        scheduler,
        equal_size: equal_size_mode(gpu),
        sole,
    }
}

/// The GPUs of `host` that give `class` now to some device a tenant can be handed there: a
/// type the GPU offers, or a plain VF of an SR-IOV GPU. Each is judged by [`service`] with the
/// scheduler NVML read (`host.schedulers`), as the one policy check judges a hand-out.
pub fn serving(host: &HostState, class: Qos) -> Vec<PciAddress> {
    host.inventory
        .gpus
        .iter()
        .filter(|gpu| gpu.backend != Backend::None)
        .filter(|gpu| {
            let scheduler = host.schedulers.get(&gpu.address);
            let plain_vf = (gpu.backend == Backend::Sriov).then_some(None);
            gpu.types
                .iter()
                .map(Some)
                .chain(plain_vf)
                .any(|ty| service(gpu, DeviceKind::of_type(ty), ty, scheduler).serves(class))
        })
        .map(|gpu| gpu.address)
        .collect()
}

#[cfg(test)]
mod tests;
