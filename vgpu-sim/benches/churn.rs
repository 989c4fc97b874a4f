//! Soak: mdev create/destroy churn on the `t4-legacy` host for a while, and the simulator's
//! memory at the start and the end.
//!
//! `cargo bench -p vgpu-sim --bench churn -- --seconds 600` creates an mdev with a new UUID,
//! lists its directory and reads its `mdev_type` and `iommu_group` links as management tools
//! do, and removes it,
//! over and over, for the given time (default 10 s). It prints the resident memory of this
//! process (the simulator serves from its threads) and the inodes in the simulator's table, at the start, every tenth of the run and at the end. It asserts nothing.
#![allow(clippy::print_stdout)] // printing the numbers is this program's job

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_sim::{Profile, SimHost, require_fuse};

const PARENT: &str = "0000:3b:00.0";
const TYPE: &str = "nvidia-231";

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `--seconds N` from the command line (cargo adds `--bench`, which is ignored).
fn seconds() -> Result<u64, String> {
    let mut args = std::env::args().skip(1);
    let mut seconds = 10;
    while let Some(arg) = args.next() {
        if arg == "--seconds" {
            let value = args.next().ok_or("--seconds needs a value")?;
            seconds = value
                .parse()
                .map_err(|_| format!("--seconds {value:?}: not a whole number"))?;
        }
    }
    Ok(seconds)
}

/// One create, read, remove cycle of the mdev `uuid`.
fn cycle(root: &Path, uuid: &str) -> std::io::Result<()> {
    let create = root
        .join("sys/class/mdev_bus")
        .join(PARENT)
        .join("mdev_supported_types")
        .join(TYPE)
        .join("create");
    std::fs::write(create, uuid)?;
    let dir = root.join("sys/bus/mdev/devices").join(uuid);
    let read = (|| {
        for entry in std::fs::read_dir(&dir)? {
            std::fs::symlink_metadata(entry?.path())?;
        }
        std::fs::read_link(dir.join("mdev_type"))?;
        std::fs::read_link(dir.join("iommu_group")).map(drop)
    })();
    let removed = std::fs::write(dir.join("remove"), "1");
    read.and(removed)
}

fn report(label: &str, host: &SimHost, started: Instant, cycles: u64) {
    let rss = rss_kib().map_or_else(|| "?".to_owned(), |kib| format!("{kib}"));
    println!(
        "{label:>6} {:>7.1} s  {cycles:>9} cycles  RSS {rss:>7} KiB  inodes {}",
        started.elapsed().as_secs_f64(),
        host.counters().inodes()
    );
}

fn main() {
    let seconds = match seconds() {
        Ok(s) => s,
        Err(e) => {
            println!("churn: {e}");
            std::process::exit(2);
        }
    };
    if let Some(reason) = require_fuse() {
        println!("churn: skipped, FUSE is not usable here: {reason}");
        return;
    }
    let profile = match Profile::builtin("t4-legacy") {
        Ok(p) => p,
        Err(e) => {
            println!("churn: {e}");
            std::process::exit(1);
        }
    };
    let host = match SimHost::mount(profile) {
        Ok(h) => h,
        Err(e) => {
            println!("churn: {e}");
            std::process::exit(1);
        }
    };
    let run = Duration::from_secs(seconds);
    let started = Instant::now();
    let mut cycles: u64 = 0;
    let mut failed: u64 = 0;
    report("start", &host, started, cycles);
    let mut next_report = 1;
    while started.elapsed() < run {
        let uuid = uuid::Uuid::new_v4().to_string();
        match cycle(host.root(), &uuid) {
            Ok(()) => cycles += 1,
            Err(e) => {
                failed += 1;
                if failed <= 3 {
                    println!("cycle failed: {e}");
                }
            }
        }
        if started.elapsed() >= run * next_report / 10 && next_report < 10 {
            report(&format!("{}0%", next_report), &host, started, cycles);
            next_report += 1;
        }
    }
    report("end", &host, started, cycles);
    println!("{cycles} cycles in {seconds} s, {failed} failed");
}
