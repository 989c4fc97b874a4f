//! MIG changes through the production NVML path (`nvml-wrapper`, `vgpu-nvml-ext`,
//! `vgpu-core`'s `nvml` module) against the test NVML library as a view of the simulated
//! `h200-mig` host (instances 3: `2g` at slices 0-1, 9 and 10: `1g` at 4 and 5): placements,
//! room, GPU instances made and destroyed, MIG mode, and NVML's refusals, which are the
//! simulator's.
//!
//! A change is read back from a second load of NVML, after the first is shut down, as a new
//! process reads the driver's state.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use vgpu_sim::{Profile, SimHost};
use vgpu_testing::fake_nvml::FakeNvml;

use super::{CreatedGpuInstance, GpuInstancePlacement, MigModeChange, MigModeOutcome};
use crate::error::{ErrorKind, NvmlError};
use crate::model::nvml::{Cause, Fact, MigMode, Unavailable};
use crate::model::pci::PciAddress;
use crate::nvml::Nvml;

const NVML_DATA: &str = include_str!("../../../../vgpu-nvml-fake/data/h200-mig.toml");

/// `MIG 1g.18gb`.
const P1G: u32 = 19;
/// `MIG 2g.35gb`.
const P2G: u32 = 14;

fn h200() -> PciAddress {
    "0000:18:00.0".parse().unwrap()
}

fn load(fake: &FakeNvml) -> Nvml {
    Nvml::load_from(fake.library())
}

fn at(start: u32, size: u32) -> GpuInstancePlacement {
    GpuInstancePlacement { start, size }
}

fn call(cause: Cause, reason: &str) -> NvmlError {
    NvmlError::Call {
        gpu: h200(),
        why: Unavailable {
            cause,
            reason: reason.to_owned(),
        },
    }
}

/// The GPU instances of the GPU as a later process reads them: id, profile id, placement.
fn instances_later(fake: &FakeNvml) -> Vec<(u32, u32, GpuInstancePlacement)> {
    load(fake)
        .read_gpu(h200())
        .into_value()
        .unwrap()
        .gpu_instances
        .into_value()
        .unwrap()
        .into_iter()
        .map(|gi| {
            (
                gi.id,
                gi.profile_id,
                at(gi.placement_start, gi.placement_size),
            )
        })
        .collect()
}

/// A simulated `h200-mig` host and the test NVML reading it.
fn h200_sim() -> (SimHost, FakeNvml) {
    let host = SimHost::mount_for_test("h200-mig");
    let fake = FakeNvml::on_sim(NVML_DATA, host.root()).unwrap();
    (host, fake)
}

/// The `h200-mig` host without GPU instances, MIG mode off, and NVML where a MIG-mode change
/// waits for a reset.
fn mig_off_reset_required() -> (SimHost, FakeNvml) {
    let mut profile = Profile::builtin("h200-mig").unwrap();
    for device in &mut profile.devices {
        if let Some(mig) = &mut device.mig {
            mig.enabled = false;
            mig.gpu_instances.clear();
        }
    }
    let host = SimHost::mount_profile_for_test(profile);
    let data = format!("{NVML_DATA}mig_reset_required = true\n");
    let fake = FakeNvml::on_sim(&data, host.root()).unwrap();
    (host, fake)
}

/// The `h200-mig` host with a MIG-backed vGPU running on GPU instance 9 (its first VF).
fn vgpu_on_instance_9() -> (SimHost, FakeNvml) {
    let (host, fake) = h200_sim();
    let nv = host.root().join("sys/bus/pci/devices/0000:18:00.4/nvidia");
    std::fs::write(nv.join("gpu_instance_id"), "9").unwrap();
    std::fs::write(nv.join("current_vgpu_type"), "1414").unwrap();
    (host, fake)
}

#[test]
fn gpu_instance_placements_1g_are_slices_0_to_6_one_each() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_placements(h200(), P1G),
        Ok(vec![
            at(0, 1),
            at(1, 1),
            at(2, 1),
            at(3, 1),
            at(4, 1),
            at(5, 1),
            at(6, 1)
        ])
    );
}

#[test]
fn gpu_instance_placements_2g_start_at_0_2_4_two_slices_each() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_placements(h200(), P2G),
        Ok(vec![at(0, 2), at(2, 2), at(4, 2)])
    );
}

#[test]
fn gpu_instance_placements_7g_is_the_whole_gpu() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_placements(h200(), 0),
        Ok(vec![at(0, 8)])
    );
}

#[test]
fn gpu_instance_placements_of_a_profile_the_gpu_lacks_is_not_supported() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_placements(h200(), 99),
        Err(call(
            Cause::NotSupported,
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2: not supported by this GPU or its \
             mode (NVML_ERROR_NOT_SUPPORTED)"
        ))
    );
}

#[test]
fn gpu_instance_remaining_capacity_1g_is_the_three_free_slices() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_remaining_capacity(h200(), P1G),
        Ok(3)
    );
}

#[test]
fn gpu_instance_remaining_capacity_2g_is_one() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).gpu_instance_remaining_capacity(h200(), P2G),
        Ok(1)
    );
}

#[test]
fn create_gpu_instance_1g_at_2_gets_the_lowest_free_id() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).create_gpu_instance(h200(), P1G, 2),
        Ok(CreatedGpuInstance {
            id: 1,
            profile_id: P1G,
            placement: at(2, 1)
        })
    );
}

#[test]
fn create_gpu_instance_two_1g_are_read_back_by_a_later_process() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.create_gpu_instance(h200(), P1G, 2).unwrap();
    nvml.create_gpu_instance(h200(), P1G, 6).unwrap();
    drop(nvml);
    assert_eq!(
        instances_later(&fake),
        vec![
            (1, P1G, at(2, 1)),
            (2, P1G, at(6, 1)),
            (3, P2G, at(0, 2)),
            (9, P1G, at(4, 1)),
            (10, P1G, at(5, 1)),
        ]
    );
}

#[test]
fn create_gpu_instance_two_1g_leave_a_later_process_room_for_one() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.create_gpu_instance(h200(), P1G, 2).unwrap();
    nvml.create_gpu_instance(h200(), P1G, 6).unwrap();
    drop(nvml);
    assert_eq!(
        load(&fake).gpu_instance_remaining_capacity(h200(), P1G),
        Ok(1)
    );
}

#[test]
fn create_gpu_instance_is_logged_as_the_call_nvml_accepted() {
    let (_host, fake) = h200_sim();
    load(&fake).create_gpu_instance(h200(), P1G, 2).unwrap();
    assert_eq!(
        fake.calls().unwrap(),
        "{\"function\":\"nvmlDeviceCreateGpuInstanceWithPlacement\",\"gpu\":\"0000:18:00.0\",\
         \"id\":1,\"profile_id\":19,\"start\":2,\"size\":1}\n"
    );
}

#[test]
fn create_gpu_instance_over_an_instance_is_insufficient_resources() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).create_gpu_instance(h200(), P1G, 4),
        Err(call(
            Cause::InsufficientResources,
            "nvmlDeviceCreateGpuInstanceWithPlacement: not enough is free \
             (NVML_ERROR_INSUFFICIENT_RESOURCES)"
        ))
    );
}

#[test]
fn create_gpu_instance_2g_over_two_1g_is_insufficient_resources() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).create_gpu_instance(h200(), P2G, 4),
        Err(call(
            Cause::InsufficientResources,
            "nvmlDeviceCreateGpuInstanceWithPlacement: not enough is free \
             (NVML_ERROR_INSUFFICIENT_RESOURCES)"
        ))
    );
}

#[test]
fn create_gpu_instance_over_an_instance_is_no_capacity() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake)
            .create_gpu_instance(h200(), P1G, 4)
            .map_err(|e| e.kind()),
        Err(ErrorKind::NoCapacity)
    );
}

#[test]
fn create_gpu_instance_refused_leaves_the_instances_as_they_were() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.create_gpu_instance(h200(), P1G, 4).unwrap_err();
    drop(nvml);
    assert_eq!(
        instances_later(&fake),
        vec![(3, P2G, at(0, 2)), (9, P1G, at(4, 1)), (10, P1G, at(5, 1))]
    );
}

#[test]
fn create_gpu_instance_between_placements_is_no_such_placement() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).create_gpu_instance(h200(), P2G, 1),
        Err(NvmlError::NoSuchPlacement {
            gpu: h200(),
            profile_id: P2G,
            start: 1,
            starts: vec![0, 2, 4],
        })
    );
}

#[test]
fn destroy_gpu_instance_then_recreate_at_its_place_is_read_back_later() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.destroy_gpu_instance(h200(), 9).unwrap();
    nvml.create_gpu_instance(h200(), P1G, 4).unwrap();
    drop(nvml);
    assert_eq!(
        instances_later(&fake),
        vec![(1, P1G, at(4, 1)), (3, P2G, at(0, 2)), (10, P1G, at(5, 1))]
    );
}

#[test]
fn destroy_gpu_instance_unknown_id_is_not_found() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).destroy_gpu_instance(h200(), 42),
        Err(call(
            Cause::NotFound,
            "nvmlDeviceGetGpuInstanceById: a query to find an object was unsuccessful"
        ))
    );
}

#[test]
fn destroy_gpu_instance_a_vgpu_runs_on_is_busy() {
    let (_host, fake) = vgpu_on_instance_9();
    assert_eq!(
        load(&fake)
            .destroy_gpu_instance(h200(), 9)
            .map_err(|e| e.kind()),
        Err(ErrorKind::Busy)
    );
}

#[test]
fn destroy_gpu_instance_a_vgpu_runs_on_is_in_use() {
    let (_host, fake) = vgpu_on_instance_9();
    assert_eq!(
        load(&fake).destroy_gpu_instance(h200(), 9),
        Err(call(
            Cause::InUse,
            "nvmlGpuInstanceDestroy: in use (NVML_ERROR_IN_USE)"
        ))
    );
}

#[test]
fn set_mig_mode_off_with_gpu_instances_is_in_use() {
    let (_host, fake) = h200_sim();
    assert_eq!(
        load(&fake).set_mig_mode(h200(), false),
        Err(call(
            Cause::InUse,
            "nvmlDeviceSetMigMode: in use (NVML_ERROR_IN_USE)"
        ))
    );
}

#[test]
fn set_mig_mode_off_after_destroying_every_instance_applies() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.destroy_gpu_instance(h200(), 3).unwrap();
    nvml.destroy_gpu_instance(h200(), 9).unwrap();
    nvml.destroy_gpu_instance(h200(), 10).unwrap();
    assert_eq!(
        nvml.set_mig_mode(h200(), false),
        Ok(MigModeChange {
            gpu: h200(),
            before: MigMode {
                current: true,
                pending: true
            },
            after: MigMode {
                current: false,
                pending: false
            },
            changed: true,
            outcome: MigModeOutcome::Applied,
        })
    );
}

#[test]
fn set_mig_mode_off_is_read_back_by_a_later_process() {
    let (_host, fake) = h200_sim();
    let nvml = load(&fake);
    nvml.destroy_gpu_instance(h200(), 3).unwrap();
    nvml.destroy_gpu_instance(h200(), 9).unwrap();
    nvml.destroy_gpu_instance(h200(), 10).unwrap();
    nvml.set_mig_mode(h200(), false).unwrap();
    drop(nvml);
    assert_eq!(
        load(&fake).read_gpu(h200()).into_value().unwrap().mig_mode,
        Fact::Value(MigMode {
            current: false,
            pending: false
        })
    );
}

#[test]
fn set_mig_mode_on_when_a_reset_is_required_is_reset_pending() {
    let (_host, fake) = mig_off_reset_required();
    assert_eq!(
        load(&fake).set_mig_mode(h200(), true),
        Ok(MigModeChange {
            gpu: h200(),
            before: MigMode {
                current: false,
                pending: false
            },
            after: MigMode {
                current: false,
                pending: true
            },
            changed: true,
            outcome: MigModeOutcome::ResetPending,
        })
    );
}

#[test]
fn set_mig_mode_already_so_asks_nothing() {
    let (_host, fake) = h200_sim();
    let change = load(&fake).set_mig_mode(h200(), true).unwrap();
    assert_eq!(
        (change.changed, change.outcome, fake.calls().unwrap()),
        (false, MigModeOutcome::Applied, String::new())
    );
}

#[test]
fn create_gpu_instance_without_nvml_is_not_loaded() {
    let nvml = Nvml::absent("no driver");
    assert_eq!(
        nvml.create_gpu_instance(h200(), P1G, 2),
        Err(NvmlError::NotLoaded {
            needed_for: "make a GPU instance of profile 19 on 0000:18:00.0".to_owned(),
            reason: "no driver".to_owned(),
        })
    );
}
