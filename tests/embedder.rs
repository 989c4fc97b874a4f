//! End to end, as an orchestrator embedding the library would use it, on the simulated
//! `mixed` host: discover, check, provision, persist, lose the host's state, restore, destroy.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use vgpu::checks::{self, Status};
use vgpu::manager::Manager;
use vgpu::provision::{ProvisionOptions, Target, provision};
use vgpu::store::Start;
use vgpu::{Backend, HostPaths, PciAddress, VgpuHandle, discover};
use vgpu_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const FLEX: &str = "0001:03:00.0";

struct Host {
    sim: SimHost,
    _state: tempfile::TempDir,
    paths: HostPaths,
}

fn mixed() -> Host {
    let sim = SimHost::mount_for_test("mixed");
    let state = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(sim.root()).with_state_root(state.path());
    Host {
        sim,
        _state: state,
        paths,
    }
}

fn addr(text: &str) -> PciAddress {
    text.parse().unwrap()
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
    let report = checks::check_host(&host.paths, &discover(&host.paths).unwrap());
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
    let report = checks::check_host(&host.paths, &discover(&host.paths).unwrap());
    let failing: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.status != Status::Pass)
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
        },
        Target {
            gpu: addr(L40S),
            vfs: None,
            type_name: "NVIDIA L40S-24Q".to_owned(),
            count: None,
        },
        Target {
            gpu: addr(FLEX),
            vfs: Some(4),
            type_name: "vf".to_owned(),
            count: Some(3),
        },
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reports = runtime
        .block_on(provision(&host.paths, targets, ProvisionOptions::default()))
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
        .create(T4, "T4-2Q", None, Some(Start::Auto))
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
            manager.store().mdevs().unwrap().len()
        ),
        (vec![], 0, vec![created.id], vec![], 0)
    );
}
