//! Reading the model of [`crate::model::nvml`] from a loaded NVML, one call per fact, each failure
//! kept as the fact's [`Unavailable`] reason.

use std::collections::BTreeMap;

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::{GpuVirtualizationMode, HostVgpuMode as RawHostMode};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::vgpu::{VgpuInstance, VgpuType as RawType};
use uuid::Uuid;

use super::sched;
use crate::model::nvml::{
    Cause, EccMode, EncoderStats, Fact, HostVgpuMode, MigMode, NvmlGpu, NvmlHost, NvmlStatus,
    NvmlVgpu, NvmlVgpuType, Placements, Unavailable, UtilizationSample, VirtualizationMode, VmId,
};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, NVIDIA_VENDOR_ID, Warning};

/// `INVALID_GPU_INSTANCE_ID` of `nvml.h`: what a time-sliced vGPU reports as its GPU
/// instance.
const INVALID_GPU_INSTANCE_ID: u32 = 0xFFFF_FFFF;

/// `INVALID_GPU_INSTANCE_PROFILE_ID` of `nvml.h`: what a time-sliced type reports as its
/// GPU-instance profile.
pub(crate) const INVALID_GPU_INSTANCE_PROFILE_ID: u32 = 0xFFFF_FFFF;

const MIB: u64 = 1024 * 1024;

/// Why `function` failed, as an [`Unavailable`].
pub(crate) fn unavailable(function: &str, err: &NvmlError) -> Unavailable {
    let (cause, what) = match err {
        NvmlError::FailedToLoadSymbol(_) => (
            Cause::FunctionNotFound,
            "this driver's NVML library does not export it (an older driver)".to_owned(),
        ),
        NvmlError::FunctionNotFound => (
            Cause::FunctionNotFound,
            "this driver does not implement it (NVML_ERROR_FUNCTION_NOT_FOUND; an older driver)"
                .to_owned(),
        ),
        NvmlError::NotSupported => (
            Cause::NotSupported,
            "not supported by this GPU or its mode (NVML_ERROR_NOT_SUPPORTED)".to_owned(),
        ),
        NvmlError::Uninitialized => (
            Cause::Uninitialized,
            "NVML is not initialised (NVML_ERROR_UNINITIALIZED)".to_owned(),
        ),
        NvmlError::NoPermission => (
            Cause::NoPermission,
            "not permitted (NVML_ERROR_NO_PERMISSION): run as root".to_owned(),
        ),
        NvmlError::NotFound | NvmlError::GpuLost => {
            (Cause::NotFound, crate::error::foreign_error_chain(err))
        }
        NvmlError::InUse => (Cause::InUse, "in use (NVML_ERROR_IN_USE)".to_owned()),
        NvmlError::UnexpectedVariant(vgpu_nvml_ext::ERROR_INSUFFICIENT_RESOURCES) => (
            Cause::InsufficientResources,
            "not enough is free (NVML_ERROR_INSUFFICIENT_RESOURCES)".to_owned(),
        ),
        NvmlError::UnexpectedVariant(_) | NvmlError::Utf8Error(_) | NvmlError::IncorrectBits(_) => {
            (Cause::Unexpected, crate::error::foreign_error_chain(err))
        }
        _ => (Cause::Error, crate::error::foreign_error_chain(err)),
    };
    Unavailable {
        cause,
        reason: format!("{function}: {what}"),
    }
}

/// The result of `function` as a fact.
pub(crate) fn fact<T>(function: &str, result: Result<T, NvmlError>) -> Fact<T> {
    match result {
        Ok(value) => Fact::Value(value),
        Err(err) => Fact::Unavailable(unavailable(function, &err)),
    }
}

/// The PCI address NVML gives `device` (`nvmlDeviceGetPciInfo_v3`'s bus id, whose domain has
/// eight hex digits).
pub(crate) fn address_of(device: &Device<'_>) -> Result<PciAddress, Unavailable> {
    let info = device
        .pci_info()
        .map_err(|err| unavailable("nvmlDeviceGetPciInfo_v3", &err))?;
    info.bus_id.trim().parse().map_err(|err| Unavailable {
        cause: Cause::Unexpected,
        reason: format!(
            "nvmlDeviceGetPciInfo_v3: bus id {:?}: {err}",
            info.bus_id.chars().take(40).collect::<String>()
        ),
    })
}

/// The device NVML has at `address`, by its PCI bus id.
pub(crate) fn device_at(
    nvml: &nvml_wrapper::Nvml,
    address: PciAddress,
) -> Result<Device<'_>, Unavailable> {
    nvml.device_by_pci_bus_id(address.to_string())
        .map_err(|err| unavailable("nvmlDeviceGetHandleByPciBusId_v2", &err))
}

pub(super) fn host(nvml: &nvml_wrapper::Nvml, status: &NvmlStatus) -> NvmlHost {
    let device_count = fact("nvmlDeviceGetCount_v2", nvml.device_count());
    let mut gpus = Vec::new();
    let mut unreadable = Vec::new();
    for index in 0..device_count.value().copied().unwrap_or(0) {
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(err) => {
                unreadable.push(unavailable("nvmlDeviceGetHandleByIndex_v2", &err));
                continue;
            }
        };
        match address_of(&device) {
            Ok(address) => gpus.push(gpu(&device, address, index)),
            Err(why) => unreadable.push(why),
        }
    }
    NvmlHost {
        status: status.clone(),
        nvml_version: fact("nvmlSystemGetNVMLVersion", nvml.sys_nvml_version()),
        gpus,
        device_count,
        unreadable,
    }
}

pub(super) fn gpu_at(nvml: &nvml_wrapper::Nvml, address: PciAddress) -> Fact<NvmlGpu> {
    let device = match device_at(nvml, address) {
        Ok(device) => device,
        Err(why) => return Fact::Unavailable(why),
    };
    let index = device.index().unwrap_or(u32::MAX);
    Fact::Value(gpu(&device, address, index))
}

fn virtualization_mode(mode: GpuVirtualizationMode) -> VirtualizationMode {
    match mode {
        GpuVirtualizationMode::Bare => VirtualizationMode::None,
        GpuVirtualizationMode::PassThrough => VirtualizationMode::Passthrough,
        GpuVirtualizationMode::Vgpu => VirtualizationMode::Vgpu,
        GpuVirtualizationMode::HostVgpu => VirtualizationMode::HostVgpu,
        GpuVirtualizationMode::HostVsga => VirtualizationMode::HostVsga,
    }
}

fn gpu(device: &Device<'_>, address: PciAddress, index: u32) -> NvmlGpu {
    let mig_mode = fact("nvmlDeviceGetMigMode", device.mig_mode()).map(|m| MigMode {
        current: m.current != 0,
        pending: m.pending != 0,
    });
    let gpu_instances = super::mig::read_gpu_instances(device, &mig_mode);
    let supported_types =
        fact("nvmlDeviceGetSupportedVgpus", device.vgpu_supported_types()).map(|types| {
            types
                .iter()
                .map(|t| vgpu_type(device, t))
                .collect::<Vec<_>>()
        });
    let framebuffers: BTreeMap<u32, Fact<u64>> = match &supported_types {
        Fact::Value(types) => types
            .iter()
            .map(|t| (t.id, t.framebuffer_mib.clone()))
            .collect(),
        Fact::Unavailable(_) => BTreeMap::new(),
    };
    NvmlGpu {
        address,
        index,
        name: fact("nvmlDeviceGetName", device.name()),
        uuid: fact("nvmlDeviceGetUUID", device.uuid()),
        virtualization_mode: fact(
            "nvmlDeviceGetVirtualizationMode",
            device.virtualization_mode(),
        )
        .map(virtualization_mode),
        host_vgpu_mode: fact("nvmlDeviceGetHostVgpuMode", device.vgpu_host_mode()).map(
            |m| match m {
                RawHostMode::Sriov => HostVgpuMode::Sriov,
                RawHostMode::NonSriov => HostVgpuMode::NonSriov,
            },
        ),
        mig_mode,
        gpu_instances,
        ecc_mode: ecc_mode(device),
        confidential_computing: fact("nvmlSystemGetConfComputeSettings", device.is_cc_enabled()),
        scheduler: sched::read_state(device),
        scheduler_capabilities: sched::read_capabilities(device),
        creatable_type_ids: fact("nvmlDeviceGetCreatableVgpus", device.vgpu_creatable_types())
            .map(|types| types.iter().map(RawType::id).collect()),
        supported_types,
        vgpus: vgpus(device, &framebuffers),
        size_mode: fact(
            "nvmlDeviceGetVgpuHeterogeneousMode",
            vgpu_nvml_ext::vgpu_heterogeneous_mode(device),
        )
        .map(super::sizes::size_mode_of),
    }
}

fn ecc_mode(device: &Device<'_>) -> Fact<EccMode> {
    fact("nvmlDeviceGetEccMode", device.is_ecc_enabled()).map(|e| EccMode {
        current: e.currently_enabled,
        pending: e.pending_enabled,
    })
}

/// The ECC mode of the GPU at `address`.
pub(super) fn ecc_mode_at(nvml: &nvml_wrapper::Nvml, address: PciAddress) -> Fact<EccMode> {
    match device_at(nvml, address) {
        Ok(device) => ecc_mode(&device),
        Err(why) => Fact::Unavailable(why),
    }
}

fn vgpu_type(device: &Device<'_>, ty: &RawType<'_>) -> NvmlVgpuType {
    NvmlVgpuType {
        id: ty.id(),
        name: fact("nvmlVgpuTypeGetName", ty.name()),
        class: fact("nvmlVgpuTypeGetClass", ty.class_name()),
        framebuffer_mib: fact("nvmlVgpuTypeGetFramebufferSize", ty.framebuffer_size())
            .map(|bytes| bytes / MIB),
        max_instances: fact("nvmlVgpuTypeGetMaxInstances", ty.max_instances()),
        max_instances_per_vm: fact(
            "nvmlVgpuTypeGetMaxInstancesPerVm",
            ty.max_instances_per_vm(),
        ),
        gpu_instance_profile_id: fact(
            "nvmlVgpuTypeGetGpuInstanceProfileId",
            ty.instance_profile_id(),
        )
        .map(|id| (id != INVALID_GPU_INSTANCE_PROFILE_ID).then_some(id)),
        placements: fact(
            "nvmlDeviceGetVgpuTypeSupportedPlacements",
            vgpu_nvml_ext::vgpu_type_supported_placements(device, ty.id()),
        )
        .map(|p| Placements {
            size: p.size,
            ids: p.ids,
        }),
    }
}

fn vgpus(device: &Device<'_>, framebuffers: &BTreeMap<u32, Fact<u64>>) -> Fact<Vec<NvmlVgpu>> {
    let ids = match fact(
        "nvmlDeviceGetActiveVgpus",
        vgpu_nvml_ext::active_vgpu_instances(device),
    ) {
        Fact::Value(ids) => ids,
        Fact::Unavailable(why) => return Fact::Unavailable(why),
    };
    let samples = latest_samples(device, 0);
    let list = ids
        .into_iter()
        .map(|instance| {
            let vgpu = VgpuInstance::new(instance, device);
            let type_id = fact(
                "nvmlVgpuInstanceGetType",
                vgpu.instance_type().map(|t| t.id()),
            );
            let framebuffer_mib = match type_id.value().and_then(|id| framebuffers.get(id)) {
                Some(fb) => fb.clone(),
                None => match &type_id {
                    Fact::Unavailable(why) => Fact::Unavailable(why.clone()),
                    Fact::Value(id) => Fact::unknown(
                        Cause::Unexpected,
                        format!("vGPU type {id} is not among the GPU's supported types"),
                    ),
                },
            };
            NvmlVgpu {
                instance,
                uuid: fact("nvmlVgpuInstanceGetUUID", vgpu.uuid()),
                mdev_uuid: mdev_uuid(&vgpu),
                vm_id: fact("nvmlVgpuInstanceGetVmID", vgpu.vm_id()).map(|id| match id {
                    nvml_wrapper::enum_wrappers::vgpu::VmId::Domain(id) => VmId::Domain(id),
                    nvml_wrapper::enum_wrappers::vgpu::VmId::Uuid(id) => VmId::Uuid(id),
                }),
                framebuffer_used_mib: fact("nvmlVgpuInstanceGetFbUsage", vgpu.fb_usage())
                    .map(|bytes| bytes / MIB),
                framebuffer_mib,
                encoder: fact("nvmlVgpuInstanceGetEncoderStats", vgpu.encoder_stats()).map(|s| {
                    EncoderStats {
                        sessions: s.session_count,
                        average_fps: s.average_fps,
                        average_latency_us: s.average_latency,
                    }
                }),
                gpu_instance_id: fact("nvmlVgpuInstanceGetGpuInstanceId", vgpu.gpu_instance_id())
                    .map(|id| (id != INVALID_GPU_INSTANCE_ID).then_some(id)),
                utilization: match &samples {
                    Fact::Value(by_instance) => Fact::Value(by_instance.get(&instance).copied()),
                    Fact::Unavailable(why) => Fact::Unavailable(why.clone()),
                },
                type_id,
            }
        })
        .collect();
    Fact::Value(list)
}

/// The UUID of the mediated device `vgpu` runs as (`nvmlVgpuInstanceGetMdevUUID`).
fn mdev_uuid(vgpu: &VgpuInstance<'_>) -> Fact<Uuid> {
    const FUNCTION: &str = "nvmlVgpuInstanceGetMdevUUID";
    match fact(FUNCTION, vgpu.mdev_uuid()) {
        Fact::Value(text) => match Uuid::try_parse(text.trim()) {
            Ok(uuid) => Fact::Value(uuid),
            Err(err) => Fact::unknown(
                Cause::Unexpected,
                format!(
                    "{FUNCTION}: {:?} is not a UUID: {err}",
                    text.chars().take(80).collect::<String>()
                ),
            ),
        },
        Fact::Unavailable(why) => Fact::Unavailable(why),
    }
}

fn percent(value: u64) -> u32 {
    u32::try_from(value.min(100)).unwrap_or(100)
}

fn samples(device: &Device<'_>, since_us: u64) -> Fact<Vec<UtilizationSample>> {
    fact(
        "nvmlDeviceGetVgpuUtilization",
        vgpu_nvml_ext::vgpu_utilization(device, since_us),
    )
    .map(|raw| {
        raw.into_iter()
            .map(|s| UtilizationSample {
                instance: s.instance,
                timestamp_us: s.timestamp_us,
                sm_percent: percent(s.sm),
                memory_percent: percent(s.memory),
                encoder_percent: percent(s.encoder),
                decoder_percent: percent(s.decoder),
            })
            .collect()
    })
}

/// The newest sample of each vGPU instance.
fn latest_samples(device: &Device<'_>, since_us: u64) -> Fact<BTreeMap<u32, UtilizationSample>> {
    samples(device, since_us).map(|all| {
        let mut latest: BTreeMap<u32, UtilizationSample> = BTreeMap::new();
        for s in all {
            let entry = latest.entry(s.instance).or_insert(s);
            if s.timestamp_us > entry.timestamp_us {
                *entry = s;
            }
        }
        latest
    })
}

pub(super) fn utilization_at(
    nvml: &nvml_wrapper::Nvml,
    address: PciAddress,
    since_us: u64,
) -> Fact<Vec<UtilizationSample>> {
    match device_at(nvml, address) {
        Ok(device) => samples(&device, since_us),
        Err(why) => Fact::Unavailable(why),
    }
}

pub(super) fn enrich(nvml: &nvml_wrapper::Nvml, gpu: &mut Gpu) -> Vec<Warning> {
    if gpu.vendor_id != Some(NVIDIA_VENDOR_ID) || gpu.types.is_empty() {
        return Vec::new();
    }
    let warn = |why: Unavailable| Warning {
        device: gpu.address.to_string(),
        message: format!("NVML: {}", why.reason),
    };
    let device = match device_at(nvml, gpu.address) {
        Ok(device) => device,
        Err(why) => return vec![warn(why)],
    };
    let supported = match device.vgpu_supported_types() {
        Ok(types) => types,
        Err(err) => return vec![warn(unavailable("nvmlDeviceGetSupportedVgpus", &err))],
    };
    for nvml_type in supported {
        let id = nvml_type.id();
        let Some(ty) = gpu
            .types
            .iter_mut()
            .find(|t| crate::model::nvml_type_id(&t.id) == Some(id))
        else {
            continue;
        };
        if let Ok(name) = nvml_type.name() {
            crate::discovery::set_name(ty, name, crate::model::NameSource::Nvml);
        }
        if ty.framebuffer_mib.is_none() {
            ty.framebuffer_mib = nvml_type.framebuffer_size().ok().map(|bytes| bytes / MIB);
        }
        if ty.max_instances.is_none() {
            ty.max_instances = nvml_type.max_instances().ok();
            ty.recount();
        }
    }
    Vec::new()
}

/// The metadata of the running vGPU `instance`, whole, with its fixed part read.
pub(super) fn vgpu_metadata(
    nvml: &nvml_wrapper::Nvml,
    instance: u32,
) -> Fact<super::RawVgpuMetadata> {
    const FUNCTION: &str = "nvmlVgpuInstanceGetMetadata";
    let bytes = match fact(
        FUNCTION,
        vgpu_nvml_ext::migration::vgpu_instance_metadata(nvml, instance),
    ) {
        Fact::Value(bytes) => bytes,
        Fact::Unavailable(why) => return Fact::Unavailable(why),
    };
    let len = bytes.len();
    match super::RawVgpuMetadata::decode(bytes) {
        Some(raw) => Fact::Value(raw),
        None => Fact::unknown(
            Cause::Unexpected,
            format!("{FUNCTION}: {len} bytes are not whole metadata"),
        ),
    }
}

/// NVML's verdict on the vGPU metadata `metadata` and the GPU at `address`.
pub(super) fn compatibility(
    nvml: &nvml_wrapper::Nvml,
    address: PciAddress,
    metadata: &[u8],
) -> Fact<crate::model::migration::Compatibility> {
    let device = match device_at(nvml, address) {
        Ok(device) => device,
        Err(why) => return Fact::Unavailable(why),
    };
    let pgpu = match fact(
        "nvmlDeviceGetVgpuMetadata",
        vgpu_nvml_ext::migration::device_vgpu_metadata(&device),
    ) {
        Fact::Value(bytes) => bytes,
        Fact::Unavailable(why) => return Fact::Unavailable(why),
    };
    fact(
        "nvmlGetVgpuCompatibility",
        vgpu_nvml_ext::migration::vgpu_compatibility(nvml, metadata, &pgpu),
    )
    .map(|v| crate::model::migration::Compatibility::from_bits(v.vm, v.limit))
}
