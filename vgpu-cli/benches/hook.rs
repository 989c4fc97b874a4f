//! Benchmark: the libvirt hook's own work for a domain with 4 vGPUs, on the simulated `mixed`
//! host (FUSE), with the state (records, audit log, lock) on disk under the temporary directory:
//!
//! 1. 4 defined mediated devices on the T4: `Manager::prepare_domain` starts them,
//!    `release_domain` removes them;
//! 2. 4 VFs of the L40S typed from the domain's metadata (`L40S-12Q`, the GPU's room for 4):
//!    `prepare_domain` resolves the type and the room and sets the types, `release_domain`
//!    clears them;
//! 3. the same as 2 as libvirt runs it: the installed script under `env -i`, a process each,
//!    XML on stdin.
//!
//! `cargo bench -p vgpu-cli --bench hook` prints the median and worst of each (target: under
//! 20 ms per domain for 1 and 2). It asserts nothing about speed.
//!
//! It prints the ratio of 2 and 3 to their targets: 20 ms, 25 ms as libvirt runs it, 800
//! simulated-kernel operations. Then it profiles one more prepare and release of 2. For each
//! step (a function of `vgpu-core` with a trace span) it prints the operations, by kind, and
//! the time the step took itself, its callees' not counted.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

mod steps;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vgpu_testing::addr;

use uuid::Uuid;
use vgpu_core::{
    HostPaths, Manager,
    manager::HookDomain,
    model::VgpuHandle,
    model::holder::Holder,
    state::{HookConfig, Start},
};
use vgpu_sim::{Profile, SimHost};

const RUNS: usize = 30;
const T4: &str = "0000:3b:00.0";
const L40S_VFS: [&str; 4] = [
    "0000:5e:00.4",
    "0000:5e:00.5",
    "0000:5e:00.6",
    "0000:5e:00.7",
];

struct Times {
    prepare: Vec<Duration>,
    release: Vec<Duration>,
    /// Simulated-kernel operations (FUSE lookups, reads, writes...) of one prepare and release.
    ops: (u64, u64),
}

/// Prints the median and worst of `samples`; returns the median in milliseconds.
fn show(what: &str, samples: &mut [Duration]) -> f64 {
    samples.sort();
    let median = samples[samples.len() / 2].as_secs_f64() * 1e3;
    println!(
        "{what:<52} median {median:>7.2} ms   worst {:>7.2} ms",
        samples[samples.len() - 1].as_secs_f64() * 1e3
    );
    median
}

/// The targets for 4 VFs: prepare in process, prepare as libvirt runs it, operations.
const TARGET_MS: f64 = 20.0;
const TARGET_PROCESS_MS: f64 = 25.0;
const TARGET_OPS: u64 = 800;

fn run(sim: &SimHost, manager: &Manager, domain: &HookDomain, config: &HookConfig) -> Times {
    let mut times = Times {
        prepare: Vec::new(),
        release: Vec::new(),
        ops: (0, 0),
    };
    for _ in 0..RUNS {
        sim.reset_counters();
        let start = Instant::now();
        let prepared = manager.prepare_domain(domain, config).unwrap();
        times.prepare.push(start.elapsed());
        times.ops.0 = sim.counters().total();
        assert_eq!(prepared.made.len(), 4);
        sim.reset_counters();
        let start = Instant::now();
        let released = manager
            .release_domain(domain.holder.uuid, &domain.holder.domain)
            .unwrap();
        times.release.push(start.elapsed());
        times.ops.1 = sim.counters().total();
        assert_eq!(released.stopped.len(), 4);
    }
    times
}

/// One prepare and release of `domain` under the profile, printed by step.
fn profile(sim: &SimHost, manager: &Manager, domain: &HookDomain, config: &HookConfig) {
    let profiler = steps::Profiler::install();
    sim.reset_counters();
    profiler.watch(sim);
    manager.prepare_domain(domain, config).unwrap();
    manager
        .release_domain(domain.holder.uuid, &domain.holder.domain)
        .unwrap();
    let total = sim.counters().total();
    println!(
        "simulated-kernel operations and time by step, one prepare + release of 4 VFs \
         ({total} operations in all):"
    );
    steps::print(&profiler.take(), 1);
}

fn vf_xml(domain: Uuid) -> String {
    let hostdevs: String = L40S_VFS
        .iter()
        .map(|vf| {
            let function = &vf[vf.len() - 1..];
            format!(
                "<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x5e' slot='0x00' function='0x{function}'/></source></hostdev>"
            )
        })
        .collect();
    format!(
        "<domain type='kvm'><name>bench</name><uuid>{domain}</uuid><metadata><vgpu:vgpu xmlns:vgpu='https://example.invalid/vgpu/1' type='L40S-12Q'/></metadata><devices>{hostdevs}</devices></domain>"
    )
}

fn main() {
    if let Some(missing) = vgpu_sim::require_fuse() {
        println!("hook benchmark not run: {missing}");
        return;
    }
    let sim = &SimHost::mount(Profile::builtin("mixed").unwrap()).unwrap();
    let state = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(sim.root()).with_state_root(state.path());
    let manager = Manager::new(&paths, "bench");
    let config = HookConfig::default();

    let mdevs: Vec<Uuid> = (1..=4u128).map(Uuid::from_u128).collect();
    for uuid in &mdevs {
        manager
            .define(addr(T4), "T4-2Q", Some(*uuid), Start::Manual)
            .unwrap();
    }
    let mdev_domain = HookDomain {
        holder: Holder {
            domain: "bench-mdev".to_owned(),
            uuid: Uuid::from_u128(0xd0),
            tenant: None,
        },
        devices: mdevs.iter().map(|u| VgpuHandle::Mdev(*u)).collect(),
        vgpu_type: None,
        flavor: None,
    };
    let mut mdev = run(sim, &manager, &mdev_domain, &config);

    let vf_domain = HookDomain {
        holder: Holder {
            domain: "bench-vf".to_owned(),
            uuid: Uuid::from_u128(0xd1),
            tenant: None,
        },
        devices: L40S_VFS
            .iter()
            .map(|vf| VgpuHandle::Vf(vf.parse().unwrap()))
            .collect(),
        vgpu_type: Some("L40S-12Q".to_owned()),
        flavor: None,
    };
    let mut vf = run(sim, &manager, &vf_domain, &config);

    let hooks = tempfile::tempdir().unwrap();
    let installed = Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
        .arg("--root")
        .arg(sim.root())
        .arg("--state-root")
        .arg(state.path())
        .args(["hook", "install", "--dir"])
        .arg(hooks.path())
        .output()
        .unwrap();
    assert!(installed.status.success());
    let script = hooks.path().join("qemu.d/vgpu");
    let xml = vf_xml(Uuid::from_u128(0xd2));
    let mut process = Times {
        prepare: Vec::new(),
        release: Vec::new(),
        ops: (0, 0),
    };
    for _ in 0..RUNS {
        for (op, subop, into) in [
            ("prepare", "begin", &mut process.prepare),
            ("release", "end", &mut process.release),
        ] {
            let start = Instant::now();
            let mut child = Command::new(&script)
                .args(["bench", op, subop, "-"])
                .env_clear()
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(xml.as_bytes())
                .unwrap();
            assert!(child.wait().unwrap().success());
            into.push(start.elapsed());
        }
    }

    println!("libvirt hook, one domain with 4 vGPUs, simulated mixed host, {RUNS} runs each:");
    show("prepare: 4 defined mdevs started (T4)", &mut mdev.prepare);
    show("release: 4 mdevs removed", &mut mdev.release);
    let vf_ms = show("prepare: 4 VF types from metadata (L40S)", &mut vf.prepare);
    show("release: 4 VF types cleared", &mut vf.release);
    println!(
        "simulated-kernel operations: mdevs {} + {}, VFs {} + {} (prepare + release)",
        mdev.ops.0, mdev.ops.1, vf.ops.0, vf.ops.1
    );
    let process_ms = show(
        "prepare as libvirt runs it (process, env -i, 4 VFs)",
        &mut process.prepare,
    );
    show(
        "release as libvirt runs it (process, env -i, 4 VFs)",
        &mut process.release,
    );
    println!(
        "4 VFs against the targets: prepare {:.2}x of {TARGET_MS} ms, as libvirt runs it \
         {:.2}x of {TARGET_PROCESS_MS} ms, operations {:.2}x of {TARGET_OPS}",
        vf_ms / TARGET_MS,
        process_ms / TARGET_PROCESS_MS,
        vf.ops.0 as f64 / TARGET_OPS as f64
    );
    profile(sim, &manager, &vf_domain, &config);
}
