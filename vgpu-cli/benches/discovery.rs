//! Benchmark: discovery on a static copy of the simulated `a40x8-vf-mdev` host (8 A40 x 32 VFs,
//! mdev types on each VF: 7,424 type directories), `vgpuctl list --json` against
//! `mdevctl types --dumpjson` on the same copy, side by side in one run.
//!
//! `cargo bench -p vgpu-cli --bench discovery` mounts the profile, copies its `sys/` to a
//! temporary directory on tmpfs (`/dev/shm`, where there is one), unmounts, then runs each
//! command [`RUNS`] times, interleaved, each in the same wrapper: a private mount namespace
//! with the copy's `sys` bound on `/sys` (mdevctl reads `/sys` only; vgpuctl is given
//! `--root COPY`). It prints the median wall time of each, of the wrapper alone, the ratio
//! with and without the wrapper's cost; the median CPU time (user and system, from
//! `getrusage(RUSAGE_CHILDREN)` around each run: the wrapper execs the command, so this is
//! the wrapper's and the command's, and, unlike wall time, hardly moves when other work
//! shares the CPUs) and its ratio; and, when `strace` is installed, the system calls of
//! each (`strace -c -f`, run inside the wrapper so that only the command is traced). It
//! asserts nothing about speed. Needs root, FUSE, `unshare` and `mdevctl`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vgpu_sim::{Profile, SimHost, peer::mdevctl_unavailable, require_fuse};

const PROFILE: &str = "a40x8-vf-mdev";
const RUNS: usize = 15;
const VGPUCTL: &str = env!("CARGO_BIN_EXE_vgpuctl");

/// Copies the tree at `from` to `to` as `cp -a` would, without following links. A file that
/// cannot be opened for reading (a write-only attribute such as `create` or `remove`) is
/// copied empty, with its mode. Returns the entries copied.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    let meta = std::fs::symlink_metadata(from)?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
        return Ok(1);
    }
    if kind.is_dir() {
        std::fs::create_dir(to)?;
        let mut copied = 1;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copied += copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        std::fs::set_permissions(to, meta.permissions())?;
        return Ok(copied);
    }
    let mut content = Vec::new();
    match std::fs::File::open(from) {
        Ok(file) => {
            file.take(1 << 20).read_to_end(&mut content)?;
        }
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {}
        Err(e) => return Err(e),
    }
    std::fs::write(to, &content)?;
    std::fs::set_permissions(
        to,
        std::fs::Permissions::from_mode(meta.permissions().mode()),
    )?;
    Ok(1)
}

/// `sh -c SCRIPT` in a private mount namespace with `copy/sys` bound on `/sys`, then `args`.
fn in_namespace(copy: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1/sys\" /sys && shift && exec \"$@\"")
        .arg("sh")
        .arg(copy)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// CPU time (user and system) of the children waited for so far.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let time = |t: nix::sys::time::TimeVal| {
        Duration::new(
            u64::try_from(t.tv_sec()).unwrap(),
            u32::try_from(t.tv_usec()).unwrap() * 1000,
        )
    };
    time(usage.user_time()) + time(usage.system_time())
}

/// The command's wall time and CPU time.
fn timed(mut command: Command) -> (Duration, Duration) {
    let cpu = children_cpu();
    let start = Instant::now();
    let out = command.output().expect("the command starts");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{command:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (elapsed, children_cpu() - cpu)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `total` calls and the `write` calls of an `strace -c` summary.
fn strace_counts(summary: &str) -> Option<(u64, u64)> {
    let calls = |line: &str| -> Option<u64> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // % time, seconds, usecs/call, calls, [errors,] syscall (or `total`).
        fields.get(3)?.parse().ok()
    };
    let total = summary
        .lines()
        .find(|l| l.trim_end().ends_with(" total"))
        .and_then(calls)?;
    let writes = summary
        .lines()
        .find(|l| l.trim_end().ends_with(" write"))
        .and_then(calls)
        .unwrap_or(0);
    Some((total, writes))
}

/// Runs `args` under `strace -c -f` inside the namespace; its summary.
fn strace(copy: &Path, out: &Path, args: &[&str]) -> Option<String> {
    let out_arg = out.to_string_lossy().into_owned();
    let mut traced = vec!["strace", "-c", "-f", "-o", out_arg.as_str()];
    traced.extend_from_slice(args);
    let status = in_namespace(copy, &traced).status().ok()?;
    if !status.success() {
        return None;
    }
    std::fs::read_to_string(out).ok()
}

fn type_dirs(copy: &Path) -> usize {
    let parents = copy.join("sys/class/mdev_bus");
    std::fs::read_dir(&parents)
        .map(|entries| {
            entries
                .flatten()
                .map(|parent| {
                    std::fs::read_dir(parent.path().join("mdev_supported_types"))
                        .map(Iterator::count)
                        .unwrap_or(0)
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    if let Some(reason) = require_fuse().or_else(mdevctl_unavailable) {
        println!("discovery: not run: {reason}");
        return;
    }
    let scratch = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory");
    let copy: PathBuf = scratch.path().to_path_buf();
    {
        let host = SimHost::mount(Profile::builtin(PROFILE).expect("built-in profile"))
            .expect("the simulator mounts");
        let start = Instant::now();
        let entries = copy_tree(&host.root().join("sys"), &copy.join("sys")).expect("copy");
        println!(
            "copied {PROFILE}'s sys/ to {}: {entries} entries in {:.1} s",
            copy.display(),
            start.elapsed().as_secs_f64()
        );
    }
    println!("mdev type directories: {}", type_dirs(&copy));
    let root = copy.to_string_lossy().into_owned();
    let ours: [&str; 5] = [VGPUCTL, "--root", &root, "list", "--json"];
    let peer: [&str; 3] = ["mdevctl", "types", "--dumpjson"];

    let listed = Command::new(VGPUCTL)
        .args(&ours[1..])
        .output()
        .expect("vgpuctl runs");
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    println!(
        "vgpuctl list --json: {} GPUs, {} warnings, {} bytes",
        json["gpus"].as_array().map_or(0, Vec::len),
        json["warnings"].as_array().map_or(0, Vec::len),
        listed.stdout.len()
    );

    // One warm-up each, then interleaved runs, so that both see the same machine.
    timed(in_namespace(&copy, &ours));
    timed(in_namespace(&copy, &peer));
    let (mut base, mut us, mut them) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        base.push(timed(in_namespace(&copy, &["true"])));
        us.push(timed(in_namespace(&copy, &ours)));
        them.push(timed(in_namespace(&copy, &peer)));
    }
    type Of = fn(&[(Duration, Duration)]) -> Duration;
    let wall: Of = |runs| median(runs.iter().map(|r| r.0).collect());
    let cpu: Of = |runs| median(runs.iter().map(|r| r.1).collect());
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE);
    println!("median over {RUNS} runs, each in unshare -m with the copy on /sys (wall, CPU):");
    for (name, runs) in [
        ("wrapper alone (true):    ", &base),
        ("vgpuctl list --json:     ", &us),
        ("mdevctl types --dumpjson:", &them),
    ] {
        println!(
            "  {name} {:8.2} ms {:8.2} ms",
            ms(wall(runs)),
            ms(cpu(runs))
        );
    }
    for (what, of) in [("wall", wall), ("CPU", cpu)] {
        let (base, us, them) = (of(&base), of(&us), of(&them));
        println!(
            "  {what} ratio vgpuctl/mdevctl: {:.3}x (less the wrapper: {:.3}x)",
            ratio(us, them),
            ratio(us.saturating_sub(base), them.saturating_sub(base))
        );
    }

    if Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        println!(
            "system calls: strace is not installed; inside `unshare -m sh -c 'mount --bind \
             COPY/sys /sys && exec \"$@\"' sh`, run `strace -c -f -o FILE` before each command"
        );
        return;
    }
    let ours_trace = strace(&copy, &copy.join("vgpuctl.strace"), &ours);
    let peer_trace = strace(&copy, &copy.join("mdevctl.strace"), &peer);
    match (
        ours_trace.as_deref().and_then(strace_counts),
        peer_trace.as_deref().and_then(strace_counts),
    ) {
        (Some((ours_total, ours_writes)), Some((peer_total, peer_writes))) => {
            println!("system calls (strace -c -f):");
            println!("  vgpuctl list --json:      {ours_total:>8} ({ours_writes} write)");
            println!("  mdevctl types --dumpjson: {peer_total:>8} ({peer_writes} write)");
            println!(
                "  ratio vgpuctl/mdevctl: {:.3}x",
                ours_total as f64 / peer_total as f64
            );
        }
        _ => println!("system calls: strace gave no summary"),
    }
}
