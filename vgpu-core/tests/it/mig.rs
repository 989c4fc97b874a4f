//! MIG-backed vGPUs on the simulated `h200-mig` host, with the test NVML library answering
//! for its GPU (reading the simulator's GPU instances): discovery marks the types, `create` writes a free GPU
//! instance to the VF before the type, and refuses, naming what is missing, when MIG mode is
//! off, no instance of the profile is free, or NVML is not there to say.

#![cfg(feature = "nvml")] // the NVML path (a default feature)
#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{addr, manager, paths};
use vgpu_core::{
    Error, ErrorKind, discover,
    error::NvmlError,
    manager::Placement,
    model::{MigBacking, VgpuHandle},
    nvml::NvmlSource,
};
use vgpu_sim::{Profile, SimHost};
use vgpu_testing::fake_nvml::FakeNvml;

const H200: &str = "0000:18:00.0";
const VF0: &str = "0000:18:00.4";
const VF1: &str = "0000:18:00.5";
const EIO: i32 = 5;
const ENXIO: i32 = 6;
const NVML_DATA: &str = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");

fn source(fake: &FakeNvml) -> NvmlSource {
    NvmlSource {
        library: Some(fake.library().to_path_buf()),
    }
}

fn nv(host: &SimHost, vf: &str, file: &str) -> Result<String, i32> {
    std::fs::read_to_string(
        host.root()
            .join(format!("sys/bus/pci/devices/{vf}/nvidia/{file}")),
    )
    .map(|s| s.trim().to_owned())
    .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// The `h200-mig` host with MIG mode off (so without GPU instances), and NVML reading it.
fn mig_off() -> (SimHost, FakeNvml) {
    let mut profile = Profile::builtin("h200-mig").unwrap();
    for device in &mut profile.devices {
        if let Some(mig) = &mut device.mig {
            mig.enabled = false;
            mig.gpu_instances.clear();
        }
    }
    let host = SimHost::mount_profile_for_test(profile);
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    (host, fake)
}

#[test]
fn discover_h200_marks_mig_backed_types_with_their_profile() {
    let host = SimHost::mount_for_test("h200-mig");
    let gpu = discover(&paths(&host)).unwrap().gpus.remove(0);
    assert_eq!(
        gpu.types
            .iter()
            .map(|t| (t.id.as_str(), t.mig.clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                "1414",
                Some(MigBacking {
                    slices: 1,
                    gpu_instance_profile: "1g.18gb".to_owned()
                })
            ),
            (
                "1415",
                Some(MigBacking {
                    slices: 2,
                    gpu_instance_profile: "2g.35gb".to_owned()
                })
            ),
        ]
    );
}

#[test]
fn create_mig_type_writes_free_gpu_instance_before_type() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let created = manager(&host)
        .with_nvml(source(&fake))
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap();
    assert_eq!(
        (
            created.placement,
            nv(&host, VF0, "gpu_instance_id"),
            nv(&host, VF0, "current_vgpu_type")
        ),
        (
            Placement::VendorVf {
                vf: addr(VF0),
                type_id: 1414
            },
            Ok("9".to_owned()),
            Ok("1414".to_owned())
        )
    );
}

#[test]
fn create_second_mig_vgpu_takes_the_next_free_instance() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let manager = manager(&host).with_nvml(source(&fake));
    manager
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap();
    manager
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap();
    assert_eq!(nv(&host, VF1, "gpu_instance_id"), Ok("10".to_owned()));
}

#[test]
fn create_mig_type_without_free_instance_names_profile_and_instances() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let manager = manager(&host).with_nvml(source(&fake));
    manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap();
    let err = manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no free GPU instance of profile 2g.35gb on 0000:18:00.0 for vGPU type \
         NVIDIA H200X-2-35C (instances of that profile: 3; in use: 3)"
    );
}

#[test]
fn create_mig_type_without_free_instance_is_no_capacity() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let manager = manager(&host).with_nvml(source(&fake));
    manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap();
    let err = manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoCapacity);
}

#[test]
fn create_mig_type_with_mig_off_is_mig_mode_off() {
    let (host, fake) = mig_off();
    let err = manager(&host)
        .with_nvml(source(&fake))
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Nvml(NvmlError::MigModeOff { gpu, type_name, profile })
                if *gpu == addr(H200) && type_name == "NVIDIA H200X-1-18C" && profile == "1g.18gb"
        ),
        "{err}"
    );
}

#[test]
fn create_time_sliced_type_with_mig_off_writes_no_instance() {
    let (host, fake) = mig_off();
    manager(&host)
        .with_nvml(source(&fake))
        .create(addr(H200), "H200X-141C", None, None)
        .unwrap();
    assert_eq!(
        (
            nv(&host, VF0, "gpu_instance_id"),
            nv(&host, VF0, "current_vgpu_type")
        ),
        (Err(ENXIO), Ok("1428".to_owned()))
    );
}

#[test]
fn create_mig_type_without_nvml_is_refused_before_writing() {
    let host = SimHost::mount_for_test("h200-mig");
    let err = manager(&host)
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap_err();
    assert_eq!(
        (
            err.to_string().starts_with(
                "NVML is needed to know the GPU instances of 0000:18:00.0 for the MIG-backed \
                 vGPU type NVIDIA H200X-1-18C, but it is not loaded: "
            ),
            nv(&host, VF0, "gpu_instance_id"),
            nv(&host, VF0, "current_vgpu_type")
        ),
        (true, Err(ENXIO), Ok("0".to_owned()))
    );
}

#[test]
fn create_mig_type_that_fails_puts_back_the_vf_s_instance() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    std::fs::write(
        host.root()
            .join(format!("sys/bus/pci/devices/{VF0}/nvidia/gpu_instance_id")),
        "10",
    )
    .unwrap();
    host.fail_next(1, EIO, &format!("*/{VF0}/nvidia/current_vgpu_type"));
    let err = manager(&host)
        .with_nvml(source(&fake))
        .create(addr(H200), "H200X-1-18C", None, None)
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            nv(&host, VF0, "gpu_instance_id"),
            nv(&host, VF0, "current_vgpu_type")
        ),
        (Some(EIO), Ok("10".to_owned()), Ok("0".to_owned()))
    );
}

#[test]
fn destroy_mig_vgpu_frees_its_instance_for_the_next() {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    let manager = manager(&host).with_nvml(source(&fake));
    manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap();
    manager.destroy(VgpuHandle::Vf(addr(VF0))).unwrap();
    let again = manager
        .create(addr(H200), "H200X-2-35C", None, None)
        .unwrap();
    assert_eq!(
        (again.id, nv(&host, VF0, "gpu_instance_id")),
        (VgpuHandle::Vf(addr(VF0)), Ok("3".to_owned()))
    );
}
