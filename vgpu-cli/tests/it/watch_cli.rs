//! `vgpuctl watch` on a simulated host: the simulator's uevent log is its event source, and
//! each event is printed with the change it made to the inventory, until SIGINT or SIGTERM.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::*;

/// How long a test waits for a line or for the watch to end.
const PATIENCE: Duration = Duration::from_secs(30);

/// A running `vgpuctl watch` with its stdout and stderr read line by line.
struct Watch {
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

fn lines_of(reader: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (send, receive) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

impl Watch {
    /// Starts `watch` (with `args`) and waits until it says on stderr that it listens.
    fn start(host: &Host, args: &[&str]) -> Self {
        let mut child = command(host, &[&["watch"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines_of(child.stdout.take().unwrap());
        let stderr = lines_of(child.stderr.take().unwrap());
        let watch = Self {
            child,
            stdout,
            stderr,
        };
        let ready = watch.stderr.recv_timeout(PATIENCE).unwrap();
        assert!(
            ready.starts_with("vgpuctl: watching simulator uevents"),
            "{ready}"
        );
        watch
    }

    /// The next `count` lines of stdout.
    fn lines(&self, count: usize) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        (0..count)
            .map(|i| {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.stdout.recv_timeout(left) {
                    Ok(line) => line,
                    Err(err) => panic!("line {i} of {count}: {err}"),
                }
            })
            .collect()
    }

    /// The next `count` lines of stdout, each parsed as JSON.
    fn json(&self, count: usize) -> Vec<serde_json::Value> {
        self.lines(count)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Sends `signal`, then returns how it exited and what it printed after.
    fn stop(mut self, signal: Signal) -> (ExitStatus, Vec<String>) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
        let status = self.child.wait().unwrap();
        let mut rest = Vec::new();
        loop {
            match self.stdout.recv_timeout(PATIENCE) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("stdout stayed open"),
            }
        }
        (status, rest)
    }
}

/// The devpath of the T4 of `t4-legacy`.
const T4_DEVPATH: &str = "/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0";

fn mdev_event(
    seqnum: u64,
    action: &str,
    driver: Option<&str>,
    delta: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "seqnum": seqnum,
        "action": action,
        "subsystem": "mdev",
        "device": UUID,
        "devpath": format!("{T4_DEVPATH}/{UUID}"),
        "driver": driver,
        "mdev_state": null,
        "gpu": T4,
        "delta": delta,
        "warnings": []
    })
}

fn delta(
    added: serde_json::Value,
    removed: serde_json::Value,
    changed: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"added": added, "removed": removed, "changed": changed})
}

#[test]
fn watch_json_mdev_create_then_destroy_prints_each_event_with_its_delta() {
    let h = host("t4-legacy");
    let watch = Watch::start(&h, &["--json"]);
    vgpuctl(&h, &["create", T4, "--type", "T4-2Q", "--uuid", UUID]);
    let created = watch.json(2);
    vgpuctl(&h, &["destroy", UUID]);
    let destroyed = watch.json(2);
    let vgpu = serde_json::json!([{"kind": "vgpu", "id": UUID}]);
    let none = serde_json::json!([]);
    assert_eq!(
        [created, destroyed].concat(),
        [
            mdev_event(
                1,
                "add",
                None,
                delta(vgpu.clone(), none.clone(), none.clone())
            ),
            mdev_event(
                4,
                "bind",
                Some("nvidia-vgpu-vfio"),
                delta(none.clone(), none.clone(), none.clone())
            ),
            mdev_event(7, "unbind", None, delta(none.clone(), vgpu, none.clone())),
            mdev_event(8, "remove", None, delta(none.clone(), none.clone(), none)),
        ]
    );
}

#[test]
fn watch_json_vf_enable_prints_add_and_bind_of_each_vf() {
    let h = host("flex-sriov");
    let watch = Watch::start(&h, &["--json"]);
    vgpuctl(&h, &["sriov", FLEX, "--vfs", "2"]);
    let lines = watch.json(4);
    let shown: Vec<(String, String, String, serde_json::Value)> = lines
        .iter()
        .map(|l| {
            (
                l["action"].as_str().unwrap().to_owned(),
                l["device"].as_str().unwrap().to_owned(),
                l["gpu"].as_str().unwrap().to_owned(),
                l["delta"].clone(),
            )
        })
        .collect();
    let none = serde_json::json!([]);
    let unchanged = delta(none.clone(), none.clone(), none.clone());
    assert_eq!(
        shown,
        [
            (
                "add".to_owned(),
                "0000:4d:00.1".to_owned(),
                FLEX.to_owned(),
                delta(
                    serde_json::json!([
                        {"kind": "vf", "id": "0000:4d:00.1"},
                        {"kind": "vf", "id": "0000:4d:00.2"}
                    ]),
                    none.clone(),
                    serde_json::json!([{
                        "kind": "gpu", "id": FLEX, "field": "num_vfs", "from": "0", "to": "2"
                    }])
                )
            ),
            (
                "bind".to_owned(),
                "0000:4d:00.1".to_owned(),
                FLEX.to_owned(),
                unchanged.clone()
            ),
            (
                "add".to_owned(),
                "0000:4d:00.2".to_owned(),
                FLEX.to_owned(),
                unchanged.clone()
            ),
            (
                "bind".to_owned(),
                "0000:4d:00.2".to_owned(),
                FLEX.to_owned(),
                unchanged
            ),
        ]
    );
}

#[test]
fn watch_table_mdev_create_prints_vgpu_added() {
    let h = host("t4-legacy");
    let watch = Watch::start(&h, &[]);
    vgpuctl(&h, &["create", T4, "--type", "T4-2Q", "--uuid", UUID]);
    assert_eq!(
        watch.lines(2),
        [
            format!("add mdev {UUID} driver=none gpu={T4}: +vgpu {UUID}"),
            format!("bind mdev {UUID} driver=nvidia-vgpu-vfio gpu={T4}: no change"),
        ]
    );
}

#[test]
fn watch_sigterm_ends_with_exit_0_and_nothing_more() {
    let h = host("t4-legacy");
    let watch = Watch::start(&h, &["--json"]);
    let (status, rest) = watch.stop(Signal::SIGTERM);
    assert_eq!((status.code(), rest), (Some(0), Vec::<String>::new()));
}

#[test]
fn watch_sigint_after_an_event_ends_with_exit_0() {
    let h = host("t4-legacy");
    let watch = Watch::start(&h, &[]);
    vgpuctl(&h, &["create", T4, "--type", "T4-2Q", "--uuid", UUID]);
    let printed = watch.lines(2).len();
    let (status, rest) = watch.stop(Signal::SIGINT);
    assert_eq!(
        (printed, status.code(), rest),
        (2, Some(0), Vec::<String>::new())
    );
}

#[test]
fn watch_on_a_root_without_uevents_fails_naming_the_log() {
    let root = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::vgpuctl_exe())
        .arg("--root")
        .arg(root.path())
        .arg("watch")
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT")
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (
            Some(1),
            format!(
                "vgpuctl: error: cannot watch the host at {}: {}/.vgpu-sim/uevents is missing\n",
                root.path().display(),
                root.path().display()
            )
        )
    );
}
