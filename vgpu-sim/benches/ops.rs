//! Throughput and memory of the simulator on the `large` profile (8 GPUs x 32 VFs).
//!
//! `cargo bench -p vgpu-sim --bench ops` prints the client operations that succeeded per
//! second (and how many failed), and the filesystem operations served (as counted by the
//! simulator), under a client load of several threads doing what management
//! tools do (stat, readlink, read attributes, list directories), and the resident memory of
//! this process (simulator plus clients) after walking the whole tree. It asserts nothing.
#![allow(clippy::print_stdout)] // printing the numbers is this program's job

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vgpu_sim::{Profile, SimHost, require_fuse};

const CLIENTS: usize = 4;
const RUN: Duration = Duration::from_secs(3);

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Walks the tree (no symlink following), returning the number of entries seen.
fn walk(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        n += 1;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            n += walk(&e.path());
        }
    }
    n
}

/// What one client did: operations that succeeded and that failed, and loops run.
#[derive(Clone, Copy, Default)]
struct Tally {
    ok: u64,
    failed: u64,
    loops: u64,
}

impl Tally {
    fn count<T, E>(&mut self, r: Result<T, E>) {
        if r.is_ok() {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
    }

    fn add(self, o: Tally) -> Tally {
        Tally {
            ok: self.ok + o.ok,
            failed: self.failed + o.failed,
            loops: self.loops + o.loops,
        }
    }
}

fn client(root: PathBuf, vfs: Vec<String>, seed: usize) -> Tally {
    let deadline = Instant::now() + RUN;
    let mut i = seed;
    let mut t = Tally::default();
    while Instant::now() < deadline {
        let vf = &vfs[i % vfs.len()];
        let dev = root.join("sys/bus/pci/devices").join(vf);
        t.count(std::fs::read_to_string(
            dev.join("nvidia/current_vgpu_type"),
        ));
        t.count(std::fs::read_link(dev.join("driver")));
        t.count(std::fs::metadata(dev.join("vendor")));
        t.count(std::fs::read_to_string(dev.join("class")));
        if i % 8 == 0 {
            t.count(std::fs::read_dir(&dev).map(|d| d.count()));
        }
        i += 7;
        t.loops += 1;
    }
    t
}

/// Runs the client load on `root` and sums what the clients did; a client thread that
/// panicked counts as one failure.
fn load(root: &Path, devices: &[String]) -> (Tally, f64) {
    let start = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|n| {
            let (root, devices) = (root.to_owned(), devices.to_vec());
            std::thread::spawn(move || client(root, devices, n * 31))
        })
        .collect();
    let total = threads.into_iter().fold(Tally::default(), |sum, t| {
        sum.add(t.join().unwrap_or(Tally {
            failed: 1,
            ..Tally::default()
        }))
    });
    (total, start.elapsed().as_secs_f64())
}

fn main() {
    if let Some(reason) = require_fuse() {
        println!("vgpu-sim bench skipped: {reason}");
        return;
    }
    let before = rss_kib();
    let profile = match Profile::builtin("large") {
        Ok(p) => p,
        Err(e) => return println!("vgpu-sim bench: {e}"),
    };
    let host = match SimHost::mount(profile) {
        Ok(h) => h,
        Err(e) => return println!("vgpu-sim bench: {e}"),
    };
    let root = host.root().to_owned();
    let mounted = rss_kib();
    let t = Instant::now();
    let entries = walk(&root.join("sys"));
    let walk_time = t.elapsed();
    let walked = rss_kib();
    let vfs: Vec<String> = std::fs::read_dir(root.join("sys/bus/pci/devices"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let vfs: Vec<String> = vfs.into_iter().filter(|a| !a.ends_with(":00.0")).collect();

    host.reset_counters();
    let (sim, elapsed) = load(&root, &vfs);
    let c = host.counters();
    let after = rss_kib();

    println!(
        "vgpu-sim bench, profile large ({} VFs), {CLIENTS} client threads, {RUN:?}",
        vfs.len()
    );
    println!(
        "  tree walk: {entries} entries under sys/ in {:.0} ms",
        walk_time.as_secs_f64() * 1e3
    );
    println!(
        "  client operations: {} succeeded = {:.0} ops/s, {} failed ({} client loops)",
        sim.ok,
        sim.ok as f64 / elapsed,
        sim.failed,
        sim.loops
    );
    println!(
        "  served: {} FUSE ops in {elapsed:.2} s = {:.0} ops/s",
        c.total(),
        c.total() as f64 / elapsed
    );
    println!("  counters: {}", c.render().trim_end().replace('\n', ", "));
    println!(
        "  RSS (simulator + clients): {:.1} MiB before mount, {:.1} MiB mounted, \
         {:.1} MiB after full walk, {:.1} MiB after load",
        before as f64 / 1024.0,
        mounted as f64 / 1024.0,
        walked as f64 / 1024.0,
        after as f64 / 1024.0
    );
    drop(host);

    // The peer: the same client loop against this machine's own kernel sysfs, in the same
    // run. Its PCI functions have no `nvidia/` directory, so that read is a failed lookup.
    let real: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if real.is_empty() {
        println!("  kernel sysfs peer: no PCI devices under /sys/bus/pci/devices");
        return;
    }
    let (kernel, kernel_elapsed) = load(Path::new("/"), &real);
    let sim_rate = sim.ok as f64 / elapsed;
    let kernel_rate = kernel.ok as f64 / kernel_elapsed;
    println!(
        "  kernel sysfs peer: {} succeeded, {} failed (no nvidia/ directory there)",
        kernel.ok, kernel.failed
    );
    println!(
        "  successful client ops/s: simulator {sim_rate:.0}, kernel sysfs {kernel_rate:.0} \
         (simulator at {:.0}% of the kernel's rate)",
        100.0 * sim_rate / kernel_rate
    );
}
