//! End to end, as an orchestrator embedding the library would use it, on the simulated
//! `mixed` host: discover, check, provision, persist, lose the host's state, restore, destroy.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use vgpu_core::{
    ErrorKind, HostPaths, Manager,
    checks::check_host,
    discover,
    manager::Placement,
    manager::Target,
    model::{Backend, VgpuHandle},
    state::Start,
};
use vgpu_sim::SimHost;
use vgpu_testing::addr;

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const FLEX: &str = "0001:03:00.0";

struct Host {
    sim: SimHost,
    _state: tempfile::TempDir,
    paths: HostPaths,
}

fn mixed() -> Host {
    mount("mixed")
}

fn mount(profile: &str) -> Host {
    let sim = SimHost::mount_for_test(profile);
    let state = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(sim.root()).with_state_root(state.path());
    Host {
        sim,
        _state: state,
        paths,
    }
}

fn vgpus(host: &Host, gpu: &str) -> Vec<VgpuHandle> {
    let inventory = discover(&host.paths).unwrap();
    inventory
        .gpus
        .iter()
        .find(|g| g.address == addr(gpu))
        .unwrap()
        .vgpus
        .iter()
        .map(|v| v.id)
        .collect()
}

#[test]
fn mixed_host_backends_are_discovered() {
    let host = mixed();
    let backends: Vec<(String, Backend)> = discover(&host.paths)
        .unwrap()
        .gpus
        .iter()
        .map(|g| (g.address.to_string(), g.backend))
        .collect();
    assert_eq!(
        backends,
        [
            ("0000:00:02.0".to_owned(), Backend::Mdev),
            (T4.to_owned(), Backend::Mdev),
            (L40S.to_owned(), Backend::NvidiaVfio),
            ("0000:af:00.0".to_owned(), Backend::None),
            (FLEX.to_owned(), Backend::Sriov),
        ]
    );
}

/// The A4000 shares its group with its own audio function, still on `snd_hda_intel`: it is
/// isolated (the audio function is a companion, not a blocker) but not ready until that
/// function is detached too.
#[test]
fn mixed_host_gpu_with_bound_audio_companion_is_isolated_but_not_ready() {
    let host = mixed();
    let report = check_host(&host.paths, &discover(&host.paths).unwrap());
    let a4000 = report
        .devices
        .iter()
        .find(|d| d.address == addr("0000:af:00.0"))
        .unwrap();
    let companions: Vec<(String, Option<&str>)> = a4000
        .companions
        .iter()
        .map(|c| (c.address.to_string(), c.driver.as_deref()))
        .collect();
    assert_eq!(
        (a4000.isolated, a4000.ready, companions),
        (
            true,
            false,
            vec![("0000:af:00.1".to_owned(), Some("snd_hda_intel"))]
        )
    );
}

#[test]
fn mixed_host_passes_every_host_check() {
    let host = mixed();
    let report = check_host(&host.paths, &discover(&host.paths).unwrap());
    let failing: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.status != vgpu_core::checks::Status::Pass)
        .map(|c| c.id)
        .collect();
    assert_eq!(failing, Vec::<&str>::new());
}

#[test]
fn provision_across_three_interfaces_in_parallel() {
    let host = mixed();
    let targets = vec![
        Target {
            gpu: addr(T4),
            vfs: None,
            type_name: "GRID T4-4Q".to_owned(),
            count: None,
            define: None,
        },
        Target {
            gpu: addr(L40S),
            vfs: None,
            type_name: "NVIDIA L40S-24Q".to_owned(),
            count: None,
            define: None,
        },
        Target {
            gpu: addr(FLEX),
            vfs: Some(4),
            type_name: "vf".to_owned(),
            count: Some(3),
            define: None,
        },
    ];
    let reports = Manager::new(&host.paths, "embedder test")
        .provision(targets)
        .unwrap();
    let made: Vec<(String, usize, Option<String>)> = reports
        .iter()
        .map(|r| (r.gpu.to_string(), r.created.len(), r.error.clone()))
        .collect();
    assert_eq!(
        made,
        [
            (T4.to_owned(), 4, None),
            (L40S.to_owned(), 2, None),
            (FLEX.to_owned(), 3, None)
        ]
    );
}

/// A defined vGPU that disappears (a reboot, a driver reload) comes back with `restore`, and
/// `destroy` then leaves neither device nor definition.
#[test]
fn defined_vgpu_survives_loss_and_destroy_cleans_up() {
    let host = mixed();
    let manager = Manager::new(&host.paths, "embedder test");
    let created = manager
        .create(addr(T4), "T4-2Q", None, Some(Start::Auto))
        .unwrap();
    std::fs::write(
        host.sim
            .root()
            .join(format!("sys/bus/mdev/devices/{}/remove", created.id)),
        "1",
    )
    .unwrap();
    let lost = vgpus(&host, T4);
    let report = manager.restore().unwrap();
    let restored = vgpus(&host, T4);
    manager.destroy(created.id).unwrap();
    assert_eq!(
        (
            lost,
            report.failed(),
            restored,
            vgpus(&host, T4),
            manager.definitions().mdevs().unwrap().len()
        ),
        (vec![], 0, vec![created.id], vec![], 0)
    );
}

const L40S_CARD: &str = "0000:41:00.0";
/// The first VF of `L40S_CARD`, where the first definition goes.
const L40S_VF0: &str = "0000:41:00.4";

fn provision_one(host: &Host, target: Target) -> vgpu_core::manager::GpuReport {
    let mut reports = Manager::new(&host.paths, "embedder test")
        .provision(vec![target])
        .unwrap();
    reports.remove(0)
}

fn l40s_24q(count: Option<u32>) -> Target {
    Target {
        gpu: addr(L40S_CARD),
        vfs: None,
        type_name: "L40S-24Q".to_owned(),
        count,
        define: None,
    }
}

/// An L40S holds two L40S-24Q; one is defined (not started), so only one more may be made.
#[test]
fn provision_count_past_a_definitions_room_is_refused_and_makes_nothing() {
    let host = mount("l40s-vendor-vfio");
    let manager = Manager::new(&host.paths, "embedder test");
    manager
        .define(addr(L40S_CARD), "L40S-24Q", None, Start::Auto)
        .unwrap();
    let report = provision_one(&host, l40s_24q(Some(2)));
    assert_eq!(
        (
            report.kind,
            report.error.as_deref(),
            report.created,
            vgpus(&host, L40S_CARD)
        ),
        (
            Some(ErrorKind::NoCapacity),
            Some(
                "GPU 0000:41:00.0 has room for 1 more vGPU(s) of type 1155, not 2 \
                 (1 held for defined vGPUs)"
            ),
            vec![],
            vec![]
        )
    );
}

#[test]
fn provision_fill_never_places_on_a_reserved_vf() {
    let host = mount("l40s-vendor-vfio");
    let manager = Manager::new(&host.paths, "embedder test");
    let defined = manager
        .define(addr(L40S_CARD), "L40S-24Q", None, Start::Auto)
        .unwrap();
    let report = provision_one(&host, l40s_24q(None));
    assert_eq!(
        (defined.id, report.error, report.created),
        (
            VgpuHandle::Vf(addr(L40S_VF0)),
            None,
            vec![VgpuHandle::Vf(addr("0000:41:00.5"))]
        )
    );
}

/// After provisioning around a definition, `restore` brings the defined vGPU up on its own VF:
/// its capacity was not given away.
#[test]
fn restore_after_provision_starts_the_defined_vgpu_on_its_vf() {
    let host = mount("l40s-vendor-vfio");
    let manager = Manager::new(&host.paths, "embedder test");
    manager
        .define(addr(L40S_CARD), "L40S-24Q", None, Start::Auto)
        .unwrap();
    provision_one(&host, l40s_24q(None));
    let report = manager.restore().unwrap();
    let steps: Vec<(&str, String, String)> = report
        .steps
        .iter()
        .map(|s| (s.action, s.device.clone(), s.outcome.to_string()))
        .collect();
    assert_eq!(
        (steps, vgpus(&host, L40S_CARD)),
        (
            vec![("vf-vgpu", L40S_VF0.to_owned(), "created".to_owned())],
            vec![
                VgpuHandle::Vf(addr(L40S_VF0)),
                VgpuHandle::Vf(addr("0000:41:00.5"))
            ]
        )
    );
}

#[test]
fn create_past_a_definitions_room_is_no_capacity_naming_the_reservation() {
    let host = mount("l40s-vendor-vfio");
    let manager = Manager::new(&host.paths, "embedder test");
    manager
        .define(addr(L40S_CARD), "L40S-24Q", None, Start::Auto)
        .unwrap();
    manager
        .create(addr(L40S_CARD), "L40S-24Q", None, None)
        .unwrap();
    let err = manager
        .create(addr(L40S_CARD), "L40S-24Q", None, None)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            vgpu_core::Error::NoCapacity { gpu, type_id, asked: 1, available: 0, reserved: 1, .. }
                if *gpu == addr(L40S_CARD) && type_id == "1155"
        ),
        "{err:?}"
    );
}

#[test]
fn create_on_a_gpu_with_a_definition_skips_the_reserved_vf() {
    let host = mount("l40s-vendor-vfio");
    let manager = Manager::new(&host.paths, "embedder test");
    manager
        .define(addr(L40S_CARD), "L40S-24Q", None, Start::Auto)
        .unwrap();
    let created = manager
        .create(addr(L40S_CARD), "L40S-24Q", None, None)
        .unwrap();
    assert_eq!(
        created.placement,
        Placement::VendorVf {
            vf: addr("0000:41:00.5"),
            type_id: 1155
        }
    );
}

/// An NVIDIA GPU holds one type at a time: a defined T4-2Q that is not running keeps a T4-8Q
/// off the GPU, so `restore` can still start it.
#[test]
fn create_of_another_type_on_an_nvidia_gpu_with_a_definition_is_no_capacity() {
    let host = mount("t4-legacy");
    let manager = Manager::new(&host.paths, "embedder test");
    manager
        .define(addr(T4), "T4-2Q", None, Start::Auto)
        .unwrap();
    let err = manager.create(addr(T4), "T4-8Q", None, None).unwrap_err();
    assert!(
        matches!(
            &err,
            vgpu_core::Error::NoCapacity {
                type_id,
                asked: 1,
                available: 0,
                limit: Some(vgpu_core::plan::capacity::Limit::Mixing { with }),
                ..
            } if type_id == "nvidia-233" && with == "GRID T4-2Q"
        ),
        "{err:?}"
    );
}
