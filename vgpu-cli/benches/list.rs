//! Benchmark: `vgpuctl list --json` on a generated large host (8 GPUs x 32 VFs x 20 types),
//! against `mdevctl types` on the same tree when mdevctl can be run (root, `unshare`).
//!
//! `cargo bench -p vgpu-cli --bench list` prints wall time per run and per GPU, the peak
//! resident memory of this process, and the ratio to mdevctl. It asserts nothing about speed.
//! Where `strace` is installed, it also counts the system calls of one `vgpuctl list --json`
//! process on the same tree, against the floor: one open of each type's
//! `available_instances`.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use vgpu_cli::libvirt_facts::from_helper;
use vgpu_cli::{Cli, run_local};
use vgpu_testing::{FakeHost, scenarios};

const GPUS: u32 = 8;
const VFS: u32 = 32;
const TYPES: u32 = 20;
const RUNS: u32 = 10;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn ours(root: &str) -> Duration {
    let cli = Cli::try_parse_from(["vgpuctl", "--root", root, "list", "--json"]).unwrap();
    let mut samples = Vec::new();
    for _ in 0..RUNS {
        let mut out = Vec::with_capacity(1 << 20);
        let start = Instant::now();
        run_local(&cli, &mut out, from_helper).unwrap();
        samples.push(start.elapsed());
    }
    median(samples)
}

/// `mdevctl types` with the tree's `sys` bind-mounted on /sys in a private mount namespace.
fn mdevctl(root: &str) -> Option<Duration> {
    let script = format!("mount --bind {root}/sys /sys && exec mdevctl types >/dev/null");
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .status()
        .ok()?;
    if !probe.success() {
        return None;
    }
    let mut samples = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let status = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .status()
            .ok()?;
        samples.push(start.elapsed());
        if !status.success() {
            return None;
        }
    }
    Some(median(samples))
}

/// The system calls of one `vgpuctl --root ROOT list --json` process, by name, counted by
/// `strace -f -c`; `None` without strace.
fn syscalls(root: &str) -> Option<Vec<(String, u64)>> {
    let out = tempfile::NamedTempFile::new().ok()?;
    let status = Command::new("strace")
        .arg("-f")
        .arg("-c")
        .arg("-o")
        .arg(out.path())
        .arg(env!("CARGO_BIN_EXE_vgpuctl"))
        .args(["--root", root, "list", "--json"])
        .stdout(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(out.path()).ok()?;
    // `% time  seconds  usecs/call  calls  [errors]  syscall`, then a `total` line.
    let mut counts: Vec<(String, u64)> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let calls = fields.get(3)?.parse().ok()?;
            let name = *fields.last()?;
            (name != "total").then(|| (name.to_owned(), calls))
        })
        .collect();
    counts.sort_by_key(|(_, calls)| std::cmp::Reverse(*calls));
    Some(counts)
}

fn main() {
    let host = FakeHost::new().unwrap();
    scenarios::large(
        &host,
        &scenarios::Large {
            gpus: GPUS,
            vfs: VFS,
            types: TYPES,
        },
    )
    .unwrap();
    let root = host.root().to_string_lossy().into_owned();
    let time = ours(&root);
    println!(
        "host: {GPUS} GPUs x {VFS} VFs x {TYPES} types ({} mdev type directories)",
        GPUS * VFS * TYPES
    );
    println!(
        "vgpuctl list --json: median {:.2} ms over {RUNS} runs, {:.3} ms per GPU",
        time.as_secs_f64() * 1e3,
        time.as_secs_f64() * 1e3 / f64::from(GPUS)
    );
    if let Some(kib) = peak_rss_kib() {
        println!(
            "peak resident memory of the bench process: {:.1} MiB",
            kib as f64 / 1024.0
        );
    }
    match mdevctl(&root) {
        Some(peer) => println!(
            "mdevctl types (same tree): median {:.2} ms; vgpuctl is {:.1}x faster",
            peer.as_secs_f64() * 1e3,
            peer.as_secs_f64() / time.as_secs_f64()
        ),
        None => println!("mdevctl types: not run (needs mdevctl, unshare and root)"),
    }
    match syscalls(&root) {
        Some(counts) => {
            let floor = GPUS * VFS * TYPES;
            let shown: Vec<String> = counts
                .iter()
                .take(8)
                .map(|(name, calls)| format!("{name} {calls}"))
                .collect();
            let total: u64 = counts.iter().map(|(_, calls)| calls).sum();
            println!(
                "system calls of one vgpuctl list --json (strace -c): {total} in all; {}",
                shown.join(", ")
            );
            if let Some((_, opens)) = counts.iter().find(|(name, _)| name == "openat") {
                println!(
                    "openat against the floor ({floor} available_instances files): {:.2}x",
                    *opens as f64 / f64::from(floor)
                );
            }
        }
        None => println!("system calls: not counted (needs strace)"),
    }
}
