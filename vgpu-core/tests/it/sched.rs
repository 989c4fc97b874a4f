//! `Manager::set_scheduler` on the simulated `l40s-vendor-vfio` host with the test NVML
//! library: what it asks NVML (the library logs the exact call), what it refuses before
//! asking, and NVML's refusals passed on. NVML reads the GPUs from the simulator (`sim_root`).

#![cfg(feature = "nvml")] // the NVML path (a default feature)
#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{addr, audit, manager, paths, record};
use vgpu_core::{
    Error,
    error::NvmlError,
    model::nvml::{Cause, SchedulerPolicy, Unavailable},
    nvml::{NvmlSource, SchedulerRequest},
};
use vgpu_sim::SimHost;
use vgpu_testing::fake_nvml::{FakeBuild, FakeNvml};

const L40S: &str = "0000:41:00.0";
const NVML_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/l40s-vendor-vfio.toml");

fn source(fake: &FakeNvml) -> NvmlSource {
    NvmlSource {
        library: Some(fake.library().to_path_buf()),
    }
}

fn equal_share(timeslice_ms: Option<u32>) -> SchedulerRequest {
    SchedulerRequest {
        policy: SchedulerPolicy::EqualShare,
        timeslice_ms,
    }
}

#[test]
fn set_scheduler_asks_nvml_for_policy_and_timeslice() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(Some(2)))
        .unwrap();
    assert_eq!(
        fake.calls().unwrap(),
        "{\"function\":\"nvmlDeviceSetVgpuSchedulerState\",\"gpu\":\"0000:41:00.0\",\
         \"policy\":2,\"arr_mode\":0,\"timeslice_ns\":2000000}\n"
    );
}

#[test]
fn set_scheduler_reads_the_new_state_back() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let change = manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(Some(2)))
        .unwrap();
    assert_eq!(
        (
            change.changed,
            change.before.policy,
            change.after.policy,
            change.after.timeslice_ns.value().copied()
        ),
        (
            true,
            Some(SchedulerPolicy::BestEffort),
            Some(SchedulerPolicy::EqualShare),
            Some(2_000_000)
        )
    );
}

#[test]
fn set_scheduler_already_so_asks_nothing() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let change = manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(
            addr(L40S),
            SchedulerRequest {
                policy: SchedulerPolicy::BestEffort,
                timeslice_ms: None,
            },
        )
        .unwrap();
    assert_eq!(
        (change.changed, fake.calls().unwrap()),
        (false, String::new())
    );
}

#[test]
fn set_scheduler_is_audited_under_the_lock() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(None))
        .unwrap();
    assert_eq!(
        audit(&paths(&host)),
        vec![
            record("sched", L40S, "started"),
            record("set-scheduler", L40S, "ok"),
            record("sched", L40S, "ok"),
        ]
    );
}

#[test]
fn set_scheduler_with_vgpu_running_is_refused_before_nvml() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let manager = manager(&host).with_nvml(source(&fake));
    manager.create(addr(L40S), "L40S-24Q", None, None).unwrap();
    let err = manager
        .set_scheduler(addr(L40S), equal_share(None))
        .unwrap_err();
    assert_eq!(
        (err.to_string(), fake.calls().unwrap()),
        (
            "the vGPU scheduler of 0000:41:00.0 cannot change while vGPUs run on it \
             (0000:41:00.4, NVML vGPU instance 16644)"
                .to_owned(),
            String::new()
        )
    );
}

#[test]
fn set_scheduler_nvml_refusal_is_passed_on_with_its_reason() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let data =
        format!("{NVML_DATA}\n[functions]\nnvmlDeviceSetVgpuSchedulerState = \"not-supported\"\n");
    let fake = FakeNvml::on_sim(&data, host.root()).unwrap();
    let err = manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(None))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Nvml(NvmlError::Call { gpu, why: Unavailable { cause: Cause::NotSupported, reason } })
                if *gpu == addr(L40S)
                    && reason == "nvmlDeviceSetVgpuSchedulerState: not supported by this GPU \
                                  or its mode (NVML_ERROR_NOT_SUPPORTED)"
        ),
        "{err}"
    );
}

#[test]
fn set_scheduler_timeslice_out_of_range_is_refused_before_nvml() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let err = manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(Some(40)))
        .unwrap_err();
    assert_eq!(
        (err.to_string(), fake.calls().unwrap()),
        (
            "time slice 40 ms for equal-share on 0000:41:00.0: the GPU takes 1 to 30 ms".to_owned(),
            String::new()
        )
    );
}

#[test]
fn set_scheduler_on_legacy_driver_is_function_not_found() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let fake = FakeNvml::build_on_sim(FakeBuild::Legacy, NVML_DATA, host.root()).unwrap();
    let err = manager(&host)
        .with_nvml(source(&fake))
        .set_scheduler(addr(L40S), equal_share(None))
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Nvml(NvmlError::Call { why, .. }) if why.cause == Cause::FunctionNotFound
        ),
        "{err}"
    );
}

#[test]
fn set_scheduler_without_nvml_is_not_loaded() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let err = manager(&host)
        .set_scheduler(addr(L40S), equal_share(None))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Nvml(NvmlError::NotLoaded { needed_for, .. })
            if needed_for == "set the vGPU scheduler of 0000:41:00.0"),
        "{err}"
    );
}

#[test]
fn set_scheduler_on_intel_gpu_is_not_nvidia() {
    let host = SimHost::mount_for_test("mixed");
    let err = manager(&host)
        .set_scheduler(addr("0001:03:00.0"), equal_share(None))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "0001:03:00.0 is not an NVIDIA GPU: the vGPU scheduler applies to NVIDIA GPUs only"
    );
}
