//! The production NVML path (`nvml-wrapper`, `vgpu-nvml-ext`, `vgpu-core`'s `nvml` module)
//! against the test NVML library, `vgpu-nvml-fake`: each fact read, and each way a driver
//! fails to give one (not supported, a function the driver lacks, a library without the
//! symbol, NVML not initialised, initialisation failing). The GPUs of the `l40s-vendor-vfio`
//! and `h200-mig` hosts are read from a mounted simulator (`sim_root`).

#![cfg(feature = "nvml")] // the NVML path (a default feature)
#![allow(clippy::unwrap_used)]

use uuid::Uuid;
use vgpu_core::{
    model::nvml::{
        ArrMode, Cause, EccMode, EncoderStats, Fact, GpuInstance, HostVgpuMode, MigMode, NvmlGpu,
        NvmlVgpu, NvmlVgpuType, Placements, SchedulerCapabilities, SchedulerPolicy, SchedulerState,
        Unavailable, UtilizationSample, VirtualizationMode, VmId,
    },
    nvml::Nvml,
};
use vgpu_sim::{Profile, SimHost};
use vgpu_testing::addr;
use vgpu_testing::fake_nvml::{FakeBuild, FakeNvml};

const L40S: &str = include_str!("../../../vgpu-nvml-fake/data/l40s-vendor-vfio.toml");
const H200_MIG: &str = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");

/// One GPU with a running vGPU, every fact given.
pub(crate) const ONE_VGPU: &str = r#"
driver_version = "550.90.05"
nvml_version = "12.550.90.05"
confidential_computing = true

[[gpu]]
pci = "0000:41:00.0"
name = "NVIDIA L40S"
uuid = "GPU-3b4f2c1a-9d5e-4f60-8a71-0c2d3e4f5a61"
ecc = { current = true, pending = false }
scheduler = { policy = 2, arr_mode = 0, timeslice_ns = 2000000 }
scheduler_capabilities = { policies = [1, 2, 3], arr_supported = true, min_timeslice_ns = 1000000, max_timeslice_ns = 30000000 }
creatable = [1155]

[[gpu.type]]
id = 1155
name = "NVIDIA L40S-24Q"
class = "Quadro"
framebuffer_mib = 24576
max_instances = 2
max_instances_per_vm = 1
placements = { size = 24, ids = [0, 24] }

[[gpu.vgpu]]
instance = 7
type_id = 1155
uuid = "8e2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
mdev_uuid = "5a0c7d2e-3b4f-4e61-9a8b-7c6d5e4f3a2b"
vm_id = { kind = "uuid", id = "1d3f0a2b-4c5d-4e6f-8a9b-0c1d2e3f4a5b" }
fb_usage_mib = 3072
encoder = { sessions = 2, average_fps = 60, average_latency_us = 850 }
utilization = [
  { timestamp_us = 1000, sm = 40, memory = 20, encoder = 5, decoder = 1 },
  { timestamp_us = 2000, sm = 55, memory = 25, encoder = 6, decoder = 2 },
]
"#;

/// The mdev UUID of `ONE_VGPU`'s vGPU.
const MDEV_UUID: Uuid = Uuid::from_u128(0x5a0c7d2e_3b4f_4e61_9a8b_7c6d5e4f3a2b);

fn load(fake: &FakeNvml) -> Nvml {
    Nvml::load_from(fake.library())
}

fn only_gpu(data: &str) -> NvmlGpu {
    let fake = FakeNvml::new(data).unwrap();
    let mut host = load(&fake).read();
    assert_eq!(host.gpus.len(), 1);
    host.gpus.remove(0)
}

/// A simulated host of `profile` and the test NVML on it, with `data` for the rest.
fn on_sim(profile: &str, data: &str) -> (SimHost, FakeNvml) {
    let host = SimHost::mount_for_test(profile);
    let fake = FakeNvml::on_sim(data, host.root()).unwrap();
    (host, fake)
}

/// The only GPU NVML reads on a simulated host of `profile`, with `data` for the rest.
fn only_gpu_on(profile: &str, data: &str) -> NvmlGpu {
    let (_host, fake) = on_sim(profile, data);
    let mut host = load(&fake).read();
    assert_eq!(host.gpus.len(), 1);
    host.gpus.remove(0)
}

/// `data` with `function` answering `behaviour` for every GPU.
pub(crate) fn with_function(data: &str, function: &str, behaviour: &str) -> String {
    format!("{data}\n[functions]\n{function} = \"{behaviour}\"\n")
}

fn unavailable(cause: Cause, reason: &str) -> Unavailable {
    Unavailable {
        cause,
        reason: reason.to_owned(),
    }
}

#[test]
fn load_from_fake_status_is_loaded_with_driver_version() {
    let (_host, fake) = on_sim("l40s-vendor-vfio", L40S);
    let status = load(&fake).status().clone();
    assert_eq!(
        (status.loaded, status.driver_version, status.reason),
        (true, Some("550.90.05".to_owned()), None)
    );
}

#[test]
fn load_init_driver_not_loaded_is_absent_with_reason() {
    let (_host, fake) = on_sim(
        "l40s-vendor-vfio",
        &format!("init = \"driver-not-loaded\"\n{L40S}"),
    );
    let status = load(&fake).status().clone();
    assert_eq!(
        (status.loaded, status.reason),
        (
            false,
            Some("cannot load NVML: NVIDIA driver is not loaded".to_owned())
        )
    );
}

#[test]
fn read_l40s_host_matches_gpus_to_pci_addresses() {
    let (_host, fake) = on_sim("l40s-vendor-vfio", L40S);
    let host = load(&fake).read();
    assert_eq!(
        host.gpus
            .iter()
            .map(|g| (g.index, g.address))
            .collect::<Vec<_>>(),
        vec![(0, addr("0000:41:00.0")), (1, addr("0000:c1:00.0"))]
    );
}

#[test]
fn read_device_facts_are_the_driver_s() {
    let gpu = only_gpu(ONE_VGPU);
    assert_eq!(
        (
            gpu.name,
            gpu.uuid,
            gpu.virtualization_mode,
            gpu.host_vgpu_mode,
            gpu.ecc_mode,
            gpu.confidential_computing,
        ),
        (
            Fact::Value("NVIDIA L40S".to_owned()),
            Fact::Value("GPU-3b4f2c1a-9d5e-4f60-8a71-0c2d3e4f5a61".to_owned()),
            Fact::Value(VirtualizationMode::HostVgpu),
            Fact::Value(HostVgpuMode::Sriov),
            Fact::Value(EccMode {
                current: true,
                pending: false
            }),
            Fact::Value(true),
        )
    );
}

#[test]
fn read_supported_type_has_every_field() {
    let gpu = only_gpu(ONE_VGPU);
    assert_eq!(
        gpu.supported_types,
        Fact::Value(vec![NvmlVgpuType {
            id: 1155,
            name: Fact::Value("NVIDIA L40S-24Q".to_owned()),
            class: Fact::Value("Quadro".to_owned()),
            framebuffer_mib: Fact::Value(24576),
            max_instances: Fact::Value(2),
            max_instances_per_vm: Fact::Value(1),
            gpu_instance_profile_id: Fact::Value(None),
            placements: Fact::Value(Placements {
                size: 24,
                ids: vec![0, 24]
            }),
        }])
    );
}

#[test]
fn read_creatable_type_ids_are_listed() {
    assert_eq!(
        only_gpu(ONE_VGPU).creatable_type_ids,
        Fact::Value(vec![1155])
    );
}

#[test]
fn read_active_vgpu_has_every_field_and_latest_sample() {
    let gpu = only_gpu(ONE_VGPU);
    assert_eq!(
        gpu.vgpus,
        Fact::Value(vec![NvmlVgpu {
            instance: 7,
            type_id: Fact::Value(1155),
            uuid: Fact::Value("8e2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d".to_owned()),
            mdev_uuid: Fact::Value(MDEV_UUID),
            vm_id: Fact::Value(VmId::Uuid(
                "1d3f0a2b-4c5d-4e6f-8a9b-0c1d2e3f4a5b".to_owned()
            )),
            framebuffer_used_mib: Fact::Value(3072),
            framebuffer_mib: Fact::Value(24576),
            encoder: Fact::Value(EncoderStats {
                sessions: 2,
                average_fps: 60,
                average_latency_us: 850
            }),
            gpu_instance_id: Fact::Value(None),
            utilization: Fact::Value(Some(UtilizationSample {
                instance: 7,
                timestamp_us: 2000,
                sm_percent: 55,
                memory_percent: 25,
                encoder_percent: 6,
                decoder_percent: 2,
            })),
        }])
    );
}

/// The mdev UUID NVML reports for `data`'s only vGPU.
fn mdev_uuid_of(fake: &FakeNvml) -> Fact<Uuid> {
    let mut gpus = load(fake).read().gpus;
    let vgpus = gpus.remove(0).vgpus.into_value().unwrap();
    vgpus[0].mdev_uuid.clone()
}

#[test]
fn read_mdev_uuid_is_the_mediated_device_s() {
    let fake = FakeNvml::new(ONE_VGPU).unwrap();
    assert_eq!(mdev_uuid_of(&fake), Fact::Value(MDEV_UUID));
}

#[test]
fn read_mdev_uuid_not_supported_is_unavailable_not_supported() {
    let data = with_function(ONE_VGPU, "nvmlVgpuInstanceGetMdevUUID", "not-supported");
    let fake = FakeNvml::new(&data).unwrap();
    assert_eq!(
        mdev_uuid_of(&fake),
        Fact::Unavailable(unavailable(
            Cause::NotSupported,
            "nvmlVgpuInstanceGetMdevUUID: not supported by this GPU or its mode \
             (NVML_ERROR_NOT_SUPPORTED)"
        ))
    );
}

#[test]
fn read_mdev_uuid_absent_from_the_data_is_unavailable_not_supported() {
    let data = ONE_VGPU.replace("mdev_uuid = \"5a0c7d2e-3b4f-4e61-9a8b-7c6d5e4f3a2b\"\n", "");
    let fake = FakeNvml::new(&data).unwrap();
    assert_eq!(
        mdev_uuid_of(&fake).unavailable().map(|u| u.cause),
        Some(Cause::NotSupported)
    );
}

#[test]
fn read_mdev_uuid_missing_function_is_unavailable_function_not_found() {
    let data = with_function(ONE_VGPU, "nvmlVgpuInstanceGetMdevUUID", "missing");
    let fake = FakeNvml::new(&data).unwrap();
    assert_eq!(
        mdev_uuid_of(&fake),
        Fact::Unavailable(unavailable(
            Cause::FunctionNotFound,
            "nvmlVgpuInstanceGetMdevUUID: this driver does not implement it \
             (NVML_ERROR_FUNCTION_NOT_FOUND; an older driver)"
        ))
    );
}

#[test]
fn read_mdev_uuid_uninitialized_is_unavailable_uninitialized() {
    let data = with_function(ONE_VGPU, "nvmlVgpuInstanceGetMdevUUID", "uninitialized");
    let fake = FakeNvml::new(&data).unwrap();
    assert_eq!(
        mdev_uuid_of(&fake),
        Fact::Unavailable(unavailable(
            Cause::Uninitialized,
            "nvmlVgpuInstanceGetMdevUUID: NVML is not initialised (NVML_ERROR_UNINITIALIZED)"
        ))
    );
}

#[test]
fn read_mdev_uuid_not_a_uuid_is_unavailable_unexpected() {
    let data = ONE_VGPU.replace(
        "mdev_uuid = \"5a0c7d2e-3b4f-4e61-9a8b-7c6d5e4f3a2b\"",
        "mdev_uuid = \"vgpu-7\"",
    );
    let fake = FakeNvml::new(&data).unwrap();
    assert_eq!(
        mdev_uuid_of(&fake).unavailable().map(|u| u.cause),
        Some(Cause::Unexpected)
    );
}

#[test]
fn read_legacy_library_exports_mdev_uuid() {
    let fake = FakeNvml::build(FakeBuild::Legacy, ONE_VGPU).unwrap();
    assert_eq!(mdev_uuid_of(&fake), Fact::Value(MDEV_UUID));
}

#[test]
fn read_scheduler_state_and_capabilities() {
    let gpu = only_gpu(ONE_VGPU);
    assert_eq!(
        (gpu.scheduler, gpu.scheduler_capabilities),
        (
            Fact::Value(SchedulerState {
                policy: Some(SchedulerPolicy::EqualShare),
                raw_policy: 2,
                arr_mode: ArrMode::Default,
                timeslice_ns: Fact::Value(2_000_000),
            }),
            Fact::Value(SchedulerCapabilities {
                policies: vec![
                    SchedulerPolicy::BestEffort,
                    SchedulerPolicy::EqualShare,
                    SchedulerPolicy::FixedShare
                ],
                arr_supported: true,
                min_timeslice_ns: 1_000_000,
                max_timeslice_ns: 30_000_000,
            })
        )
    );
}

#[test]
fn utilization_since_timestamp_returns_only_newer_samples() {
    let fake = FakeNvml::new(ONE_VGPU).unwrap();
    let samples = load(&fake).utilization(addr("0000:41:00.0"), 1000);
    assert_eq!(
        samples
            .value()
            .map(|s| s.iter().map(|s| s.timestamp_us).collect::<Vec<_>>()),
        Some(vec![2000])
    );
}

#[test]
fn read_not_supported_scheduler_is_unavailable_not_supported() {
    let data = with_function(ONE_VGPU, "nvmlDeviceGetVgpuSchedulerState", "not-supported");
    assert_eq!(
        only_gpu(&data).scheduler,
        Fact::Unavailable(unavailable(
            Cause::NotSupported,
            "nvmlDeviceGetVgpuSchedulerState: not supported by this GPU or its mode \
             (NVML_ERROR_NOT_SUPPORTED)"
        ))
    );
}

#[test]
fn read_missing_function_is_unavailable_function_not_found() {
    let data = with_function(ONE_VGPU, "nvmlVgpuInstanceGetFbUsage", "missing");
    let vgpus = only_gpu(&data).vgpus.into_value().unwrap();
    assert_eq!(
        vgpus[0].framebuffer_used_mib,
        Fact::Unavailable(unavailable(
            Cause::FunctionNotFound,
            "nvmlVgpuInstanceGetFbUsage: this driver does not implement it \
             (NVML_ERROR_FUNCTION_NOT_FOUND; an older driver)"
        ))
    );
}

#[test]
fn read_uninitialized_answer_is_unavailable_uninitialized() {
    let data = with_function(ONE_VGPU, "nvmlDeviceGetUUID", "uninitialized");
    assert_eq!(
        only_gpu(&data).uuid,
        Fact::Unavailable(unavailable(
            Cause::Uninitialized,
            "nvmlDeviceGetUUID: NVML is not initialised (NVML_ERROR_UNINITIALIZED)"
        ))
    );
}

#[test]
fn read_missing_function_leaves_the_other_facts() {
    let data = with_function(ONE_VGPU, "nvmlDeviceGetEccMode", "missing");
    let gpu = only_gpu(&data);
    assert_eq!(
        (gpu.ecc_mode.value().is_none(), gpu.name),
        (true, Fact::Value("NVIDIA L40S".to_owned()))
    );
}

#[test]
fn read_supported_types_not_supported_gives_no_types_and_why() {
    let data = with_function(ONE_VGPU, "nvmlDeviceGetSupportedVgpus", "not-supported");
    assert_eq!(
        only_gpu(&data)
            .supported_types
            .unavailable()
            .map(|u| u.cause),
        Some(Cause::NotSupported)
    );
}

#[test]
fn read_per_gpu_behaviour_applies_to_that_gpu_only() {
    let data = L40S.replacen(
        "pci = \"0000:c1:00.0\"",
        "pci = \"0000:c1:00.0\"\nfunctions = { nvmlDeviceGetName = \"not-supported\" }",
        1,
    );
    let (_sim, fake) = on_sim("l40s-vendor-vfio", &data);
    let host = load(&fake).read();
    assert_eq!(
        host.gpus
            .iter()
            .map(|g| g.name.value().cloned())
            .collect::<Vec<_>>(),
        vec![Some("NVIDIA L40S".to_owned()), None]
    );
}

#[test]
fn read_legacy_library_without_scheduler_symbol_is_function_not_found() {
    let fake = FakeNvml::build(FakeBuild::Legacy, ONE_VGPU).unwrap();
    let gpu = load(&fake).read().gpus.remove(0);
    assert_eq!(
        gpu.scheduler
            .unavailable()
            .map(|u| (u.cause, u.reason.clone())),
        Some((
            Cause::FunctionNotFound,
            "nvmlDeviceGetVgpuSchedulerState: this driver's NVML library does not export it \
             (an older driver)"
                .to_owned()
        ))
    );
}

#[test]
fn read_legacy_library_without_placements_keeps_the_type() {
    let fake = FakeNvml::build(FakeBuild::Legacy, ONE_VGPU).unwrap();
    let types = load(&fake)
        .read()
        .gpus
        .remove(0)
        .supported_types
        .into_value()
        .unwrap();
    assert_eq!(
        (
            types[0].name.clone(),
            types[0].placements.unavailable().map(|u| u.cause)
        ),
        (
            Fact::Value("NVIDIA L40S-24Q".to_owned()),
            Some(Cause::FunctionNotFound)
        )
    );
}

#[test]
fn read_h200_mig_lists_gpu_instances_with_profiles() {
    let gpu = only_gpu_on("h200-mig", H200_MIG);
    let instances: Vec<(u32, u32, Option<String>)> = gpu
        .gpu_instances
        .into_value()
        .unwrap()
        .into_iter()
        .map(|gi| (gi.id, gi.profile_id, gi.profile.into_value()))
        .collect();
    assert_eq!(
        instances,
        vec![
            (3, 14, Some("2g.35gb".to_owned())),
            (9, 19, Some("1g.18gb".to_owned())),
            (10, 19, Some("1g.18gb".to_owned())),
        ]
    );
}

#[test]
fn read_h200_mig_mode_is_on() {
    assert_eq!(
        only_gpu_on("h200-mig", H200_MIG).mig_mode,
        Fact::Value(MigMode {
            current: true,
            pending: true
        })
    );
}

#[test]
fn read_h200_mig_backed_type_names_its_profile_id() {
    let types = only_gpu_on("h200-mig", H200_MIG)
        .supported_types
        .into_value()
        .unwrap();
    assert_eq!(
        types
            .iter()
            .map(|t| (t.id, t.gpu_instance_profile_id.clone()))
            .collect::<Vec<_>>(),
        vec![
            (1414, Fact::Value(Some(19))),
            (1415, Fact::Value(Some(14))),
            (1428, Fact::Value(None)),
            (1416, Fact::Value(Some(15))),
            (1417, Fact::Value(Some(9))),
            (1418, Fact::Value(Some(5))),
            (1419, Fact::Value(Some(0))),
            (1420, Fact::Value(Some(20))),
            (1421, Fact::Value(None)),
            (1422, Fact::Value(None)),
            (1423, Fact::Value(None)),
            (1424, Fact::Value(None)),
            (1425, Fact::Value(None)),
            (1426, Fact::Value(None)),
            (1427, Fact::Value(None)),
            (1429, Fact::Value(None)),
        ]
    );
}

#[test]
fn read_legacy_library_lists_gpu_instances_without_profile_names() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::build_on_sim(FakeBuild::Legacy, H200_MIG, host.root()).unwrap();
    let instances = load(&fake)
        .read()
        .gpus
        .remove(0)
        .gpu_instances
        .into_value()
        .unwrap();
    assert_eq!(
        instances[1],
        GpuInstance {
            id: 9,
            profile_id: 19,
            profile: Fact::Unavailable(unavailable(
                Cause::FunctionNotFound,
                "nvmlDeviceGetGpuInstanceProfileInfoV: this driver's NVML library does not \
                 export it (an older driver)"
            )),
            slices: Fact::Value(1),
            memory_mib: Fact::Value(16896),
            placement_start: 4,
            placement_size: 1,
        }
    );
}

#[test]
fn read_mig_off_gpu_instances_are_unavailable_not_supported() {
    let mut profile = Profile::builtin("h200-mig").unwrap();
    for device in &mut profile.devices {
        if let Some(mig) = &mut device.mig {
            mig.enabled = false;
            mig.gpu_instances.clear();
        }
    }
    let host = SimHost::mount_profile_for_test(profile);
    let fake = FakeNvml::on_sim(H200_MIG, host.root()).unwrap();
    assert_eq!(
        load(&fake).read().gpus.remove(0).gpu_instances,
        Fact::Unavailable(unavailable(
            Cause::NotSupported,
            "nvmlDeviceGetGpuInstances: MIG mode is off on this GPU"
        ))
    );
}

#[test]
fn read_without_nvml_loaded_has_no_gpus_and_says_why() {
    let host = Nvml::absent("no NVIDIA driver").read();
    assert_eq!(
        (
            host.gpus.len(),
            host.device_count.unavailable().map(|u| u.cause)
        ),
        (0, Some(Cause::NotLoaded))
    );
}

/// The functions whose NVML reason shows in `data`'s read when `behaviour` is set for each in
/// turn: each function name paired with whether a fact names it as the cause.
fn reported(data: &str, functions: &[&str], behaviour: &str) -> Vec<(String, bool)> {
    reported_on(None, data, functions, behaviour)
}

/// As [`reported`], on the simulated host `sim` when given.
fn reported_on(
    sim: Option<&SimHost>,
    data: &str,
    functions: &[&str],
    behaviour: &str,
) -> Vec<(String, bool)> {
    functions
        .iter()
        .map(|function| {
            let data = with_function(data, function, behaviour);
            let fake = match sim {
                Some(host) => FakeNvml::on_sim(&data, host.root()),
                None => FakeNvml::new(&data),
            }
            .unwrap();
            let read = serde_json::to_string(&load(&fake).read()).unwrap();
            let named = read.contains(&format!("\"reason\":\"{function}: "));
            ((*function).to_owned(), named)
        })
        .collect()
}

fn all_named(functions: &[&str]) -> Vec<(String, bool)> {
    functions.iter().map(|f| ((*f).to_owned(), true)).collect()
}

/// Every function the read of a GPU with a running vGPU calls.
const VGPU_FUNCTIONS: &[&str] = &[
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetHostVgpuMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetEccMode",
    "nvmlSystemGetConfComputeSettings",
    "nvmlDeviceGetVgpuSchedulerState",
    "nvmlDeviceGetVgpuSchedulerLog",
    "nvmlDeviceGetVgpuSchedulerCapabilities",
    "nvmlDeviceGetSupportedVgpus",
    "nvmlDeviceGetCreatableVgpus",
    "nvmlVgpuTypeGetName",
    "nvmlVgpuTypeGetClass",
    "nvmlVgpuTypeGetFramebufferSize",
    "nvmlVgpuTypeGetMaxInstances",
    "nvmlVgpuTypeGetMaxInstancesPerVm",
    "nvmlVgpuTypeGetGpuInstanceProfileId",
    "nvmlDeviceGetVgpuTypeSupportedPlacements",
    "nvmlDeviceGetActiveVgpus",
    "nvmlVgpuInstanceGetType",
    "nvmlVgpuInstanceGetUUID",
    "nvmlVgpuInstanceGetMdevUUID",
    "nvmlVgpuInstanceGetVmID",
    "nvmlVgpuInstanceGetFbUsage",
    "nvmlVgpuInstanceGetEncoderStats",
    "nvmlVgpuInstanceGetGpuInstanceId",
    "nvmlDeviceGetVgpuUtilization",
];

#[test]
fn read_each_function_not_supported_is_reported_by_name() {
    assert_eq!(
        reported(ONE_VGPU, VGPU_FUNCTIONS, "not-supported"),
        all_named(VGPU_FUNCTIONS)
    );
}

#[test]
fn read_each_function_missing_is_reported_by_name() {
    assert_eq!(
        reported(ONE_VGPU, VGPU_FUNCTIONS, "missing"),
        all_named(VGPU_FUNCTIONS)
    );
}

#[test]
fn read_each_function_uninitialized_is_reported_by_name() {
    assert_eq!(
        reported(ONE_VGPU, VGPU_FUNCTIONS, "uninitialized"),
        all_named(VGPU_FUNCTIONS)
    );
}

/// The functions that list GPU instances (a profile NVML does not support is one the GPU does
/// not have, so `nvmlDeviceGetGpuInstanceProfileInfoV` is left out).
const MIG_FUNCTIONS: &[&str] = &["nvmlDeviceGetGpuInstances", "nvmlGpuInstanceGetInfo"];

#[test]
fn read_each_gpu_instance_function_missing_is_reported_by_name() {
    assert_eq!(
        reported_on(
            Some(&SimHost::mount_for_test("h200-mig")),
            H200_MIG,
            MIG_FUNCTIONS,
            "missing"
        ),
        all_named(MIG_FUNCTIONS)
    );
}
