//! Benchmark: provision the simulator's `large` host completely (enable 32 VFs on each of 8
//! L40S, then create a vGPU on every VF) with realistic latencies (VF enable 1.5 s per GPU,
//! vGPU create 80 ms), three ways, each on a freshly mounted host:
//!
//! 1. `Manager::provision`: all GPUs in parallel, each GPU's steps in order;
//! 2. the critical path: the same sequence on one GPU alone;
//! 3. the way operators do it today: a sequential shell loop of NVIDIA's `sriov-manage`
//!    steps and `current_vgpu_type` writes.
//!
//! `cargo bench -p vgpu-cli --bench provision` prints the three times and the ratios. It
//! asserts nothing about speed. For 1 and 2 it prints the time by step (per GPU) and the
//! simulated-kernel operations by step: where the parallel run loses time against one GPU
//! alone.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

mod steps;

use std::process::Command;
use std::time::{Duration, Instant};

use vgpu_core::{HostPaths, Manager, discover, manager::Target, model::pci::PciAddress};
use vgpu_sim::{Profile, SimHost};

const TYPE: &str = "NVIDIA L40S-1B";
const LATENCY: &str = "latency sriov-enable 1500\nlatency vgpu-create 80\n";

/// A `large` host with every GPU's VFs disabled, latencies on. Returns it, its GPUs and the
/// numeric id of `TYPE`.
fn prepared() -> (SimHost, Vec<PciAddress>, String) {
    let host = SimHost::mount(Profile::builtin("large").unwrap()).unwrap();
    let paths = HostPaths::new(host.root()).with_state_root(tempfile::tempdir().unwrap().keep());
    let inventory = discover(&paths).unwrap();
    let id = inventory.gpus[0]
        .types
        .iter()
        .find(|t| t.name.as_deref() == Some(TYPE))
        .unwrap()
        .id
        .clone();
    let gpus: Vec<PciAddress> = inventory.gpus.iter().map(|g| g.address).collect();
    let manager = Manager::new(&paths, "bench");
    for gpu in &gpus {
        manager.set_vfs(*gpu, 0, None, false).unwrap();
    }
    host.control(LATENCY).unwrap();
    (host, gpus, id)
}

/// What one provisioning run took: its time, the vGPUs made, the slowest GPU's own time (ms)
/// and the simulated-kernel operations it made.
struct Ours {
    elapsed: Duration,
    made: usize,
    slowest_ms: u128,
    ops: u64,
    steps: steps::Steps,
}

/// One provisioning of `gpus`, profiled by `profiler` when given: the timed runs go without,
/// since recording each step takes locks the GPU threads share.
fn run_ours(host: &SimHost, gpus: &[PciAddress], profiler: Option<&steps::Profiler>) -> Ours {
    let paths = HostPaths::new(host.root()).with_state_root(tempfile::tempdir().unwrap().keep());
    let targets = gpus
        .iter()
        .map(|gpu| Target {
            gpu: *gpu,
            vfs: Some(32),
            type_name: TYPE.to_owned(),
            count: None,
            define: None,
        })
        .collect();
    host.reset_counters();
    if let Some(profiler) = profiler {
        profiler.watch(host);
    }
    let start = Instant::now();
    let reports = Manager::new(&paths, "bench").provision(targets).unwrap();
    let elapsed = start.elapsed();
    let ops = host.counters().total();
    assert!(reports.iter().all(|r| r.error.is_none()), "{reports:?}");
    Ours {
        elapsed,
        made: reports.iter().map(|r| r.created.len()).sum(),
        slowest_ms: reports.iter().map(|r| r.elapsed_ms).max().unwrap_or(0),
        ops,
        steps: profiler.map(steps::Profiler::take).unwrap_or_default(),
    }
}

fn run_shell(host: &SimHost, gpus: &[PciAddress], id: &str) -> (Duration, usize) {
    let script = r#"set -e
R=$1; ID=$2; shift 2
S=$R/sys/bus/pci
for pf in "$@"; do
  echo 1 > "$R/proc/driver/nvidia/gpus/$pf/unbindLock"
  echo pci-pf-stub > "$S/devices/$pf/driver_override"
  echo "$pf" > "$S/drivers/nvidia/unbind"
  echo "$pf" > "$S/drivers_probe"
  echo 32 > "$S/devices/$pf/sriov_numvfs"
  echo nvidia > "$S/devices/$pf/driver_override"
  echo "$pf" > "$S/drivers/pci-pf-stub/unbind"
  echo "$pf" > "$S/drivers_probe"
  echo > "$S/devices/$pf/driver_override"
  for vf in "$S/devices/$pf"/virtfn*; do
    echo "$ID" > "$vf/nvidia/current_vgpu_type"
  done
done"#;
    let start = Instant::now();
    let status = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(host.root())
        .arg(id)
        .args(gpus.iter().map(|g| g.to_string()))
        .status()
        .unwrap();
    let elapsed = start.elapsed();
    assert!(status.success());
    let paths = HostPaths::new(host.root());
    let made = discover(&paths)
        .unwrap()
        .gpus
        .iter()
        .map(|g| g.vgpus.len())
        .sum();
    (elapsed, made)
}

fn main() {
    let (host, gpus, _) = prepared();
    let ours = run_ours(&host, &gpus, None);
    drop(host);

    let (host, gpus, _) = prepared();
    let critical = run_ours(&host, &gpus[..1], None);
    drop(host);

    let (host, gpus, id) = prepared();
    let (shell, made_shell) = run_shell(&host, &gpus, &id);
    drop(host);

    // The profile, from two more runs with the recorder on.
    let profiler = steps::Profiler::install();
    let (host, gpus, _) = prepared();
    let profiled = run_ours(&host, &gpus, Some(&profiler));
    drop(host);
    let (host, gpus, _) = prepared();
    let profiled_one = run_ours(&host, &gpus[..1], Some(&profiler));
    drop(host);

    let secs = |d: Duration| d.as_secs_f64();
    println!(
        "large host: {} GPUs x 32 VFs, {TYPE}, latencies: VF enable 1.5 s, vGPU create 80 ms",
        gpus.len()
    );
    println!(
        "vgpu provision (parallel):      {:7.2} s, {} vGPUs (slowest GPU task {:.2} s), \
         {} simulated-kernel operations",
        secs(ours.elapsed),
        ours.made,
        ours.slowest_ms as f64 / 1000.0,
        ours.ops
    );
    println!(
        "critical path (one GPU alone):  {:7.2} s, {} vGPUs, {} simulated-kernel operations",
        secs(critical.elapsed),
        critical.made,
        critical.ops
    );
    println!(
        "shell loop (sequential):        {:7.2} s, {made_shell} vGPUs",
        secs(shell)
    );
    println!(
        "ratio to critical path: {:.2}x; shell loop / vgpu: {:.1}x",
        secs(ours.elapsed) / secs(critical.elapsed),
        secs(shell) / secs(ours.elapsed)
    );
    println!(
        "by step, parallel, profiled run (time per GPU; operations of all {} GPUs):",
        gpus.len()
    );
    steps::print(&profiled.steps, u32::try_from(gpus.len()).unwrap());
    println!("by step, one GPU alone, profiled run:");
    steps::print(&profiled_one.steps, 1);
}
