//! A signal during `apply`: the step in flight finishes, no new one starts, every GPU's
//! operation is undone, and the command exits 130 (SIGINT) or 143 (SIGTERM), saying so.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{command, host, json};
use vgpu_sim::{KernelOp, LatencyOp};

const T4S: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"T4\"\ntypes = { \"T4-1Q\" = 16 }\n";

/// How many vGPUs every GPU of the host holds, and how many mdev definitions there are.
fn held(host: &common::Host) -> (u64, usize) {
    let list = json(&common::vgpuctl(host, &["list", "--json"]));
    let vgpus = list["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["vgpus"].as_array().unwrap().len() as u64)
        .sum();
    let defined = json(&common::vgpuctl(host, &["list", "--defined", "--json"]))["definitions"]
        .as_array()
        .unwrap()
        .len();
    (vgpus, defined)
}

/// Runs `args` (`HOST_TOML` names a file filling both T4s) on `t4-legacy`, slowed down, and
/// sends `signal` once the audit log shows `after` vGPUs made.
fn stopped_by(
    args: &[&str],
    signal: nix::sys::signal::Signal,
    after: usize,
) -> (Option<i32>, String, (u64, usize), usize, String) {
    let host = host("t4-legacy");
    host.sim
        .set_latency(
            LatencyOp::Kernel(KernelOp::MdevCreate),
            Duration::from_millis(150),
        )
        .unwrap();
    let file = host.state.path().join("host.toml");
    std::fs::write(&file, T4S).unwrap();
    let args: Vec<&str> = args
        .iter()
        .map(|a| {
            if *a == "HOST_TOML" {
                file.to_str().unwrap()
            } else {
                a
            }
        })
        .collect();
    let child = command(&host, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let audit = host.state.path().join("var/log/vgpu/audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let made = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"action\":\"start\"") && l.contains("\"result\":\"ok\""))
            .count();
        if made >= after {
            break;
        }
        assert!(Instant::now() < deadline, "apply made {made} vGPUs in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
    let output = child.wait_with_output().unwrap();
    host.sim
        .set_latency(LatencyOp::Kernel(KernelOp::MdevCreate), Duration::ZERO)
        .unwrap();
    let undone = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"action\":\"undo-") && l.contains("\"result\":\"ok\""))
        .count();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        held(&host),
        undone,
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Stops `args` with `signal` after 4 vGPUs are made, then checks the promise: exit
/// 128 + signal, the line saying so, nothing left on the host or defined, an undo audited
/// for every vGPU made, and each GPU's failure said once.
fn assert_stopped(args: &[&str], signal: nix::sys::signal::Signal, code: i32) {
    let (exit, stderr, left, undone, stdout) = stopped_by(args, signal, 4);
    let said: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("stopped by signal"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|gpu| gpu.trim_end_matches(':'))
        .collect();
    let mut once = said.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(
        (
            exit,
            stderr.contains(&format!(
                "vgpuctl: {signal}: stopping after the step in flight"
            )),
            left,
            undone >= 4,
            said.len(),
        ),
        (Some(code), true, (0, 0), true, once.len()),
        "{stderr}\n{stdout}"
    );
}

#[test]
fn sigint_during_apply_undoes_every_gpu_and_exits_130() {
    assert_stopped(
        &["apply", "-f", "HOST_TOML"],
        nix::sys::signal::Signal::SIGINT,
        130,
    );
}

#[test]
fn sigterm_during_apply_undoes_every_gpu_and_exits_143() {
    assert_stopped(
        &["apply", "-f", "HOST_TOML"],
        nix::sys::signal::Signal::SIGTERM,
        143,
    );
}

#[test]
fn sigint_during_provision_undoes_every_gpu_and_exits_130() {
    assert_stopped(
        &[
            "provision",
            "--all",
            "--type",
            "T4-1Q",
            "--define",
            "--auto",
        ],
        nix::sys::signal::Signal::SIGINT,
        130,
    );
}
