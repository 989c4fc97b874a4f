//! `vgpuctl metrics`, `top` and `isolation` on the simulated `mixed` host with vGPUs made, the
//! test NVML library answering from `tests/data/fake-nvml-mixed.toml` and libvirt's test
//! driver holding the domains of `tests/data/libvirt-mixed.xml`: golden files
//! (`VGPU_REGENERATE=1` rewrites them), the `/metrics` server over loopback, and `top` in a
//! pseudo-terminal (tmux).

#![allow(clippy::print_stderr)] // cleanup says on stderr what it could not undo

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::mixed::{command, fake_nvml, libvirt_uri, mixed};
use crate::common::{Host, T4, UUID, host, stderr};
use vgpu_testing::fake_nvml::FakeNvml;

/// How long a test waits for a server, a screen or an exit.
const DEADLINE: Duration = Duration::from_secs(30);

fn run(h: &Host, nvml: Option<&FakeNvml>, args: &[&str]) -> Output {
    command(h, &libvirt_uri(), nvml, args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The exit code and stdout of `out` against the golden file `name` (0 expected), with the
/// host's temporary paths shown as `<root>`, `<uri>` and `<nvml>`.
fn assert_golden(name: &str, h: &Host, nvml: Option<&FakeNvml>, out: &Output) {
    let mut actual = stdout(out).replace(&libvirt_uri(), "<uri>");
    actual = actual.replace(&h.sim.root().display().to_string(), "<root>");
    if let Some(nvml) = nvml {
        actual = actual.replace(&nvml.library().display().to_string(), "<nvml>");
    }
    let code = out.status.code().and_then(|c| u8::try_from(c).ok());
    assert_eq!(code, Some(0), "{name}: {}", stderr(out));
    common::assert_golden(name, 0, (0, actual));
}

#[test]
fn metrics_with_nvml_matches_golden() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(&h, Some(&nvml), &["metrics"]);
    assert_golden("metrics-mixed.prom", &h, Some(&nvml), &out);
}

#[test]
fn metrics_without_nvml_matches_golden() {
    let h = mixed();
    let out = run(&h, None, &["metrics"]);
    assert_golden("metrics-mixed-no-nvml.prom", &h, None, &out);
}

#[test]
fn metrics_json_with_nvml_matches_golden() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(&h, Some(&nvml), &["metrics", "--json"]);
    assert_golden("metrics-mixed.json", &h, Some(&nvml), &out);
}

#[test]
fn metrics_without_libvirt_reports_vgpus_without_domain() {
    let h = mixed();
    let uri = format!("test://{}", h.state.path().join("absent.xml").display());
    let out = command(&h, &uri, None, &["metrics"]).output().unwrap();
    let text = stdout(&out);
    let wanted = [
        "vgpu_libvirt_up 0",
        "vgpu_framebuffer_bytes{gpu=\"0000:3b:00.0\",vgpu=\"3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c\",type=\"nvidia-231\",type_name=\"GRID T4-2Q\",domain=\"\",tenant=\"\"} 2147483648",
        "vgpu_tenant_vgpus_held{tenant=\"\"} 5",
    ];
    assert_eq!(
        (
            out.status.code(),
            wanted.map(|line| text.lines().any(|l| l == line))
        ),
        (Some(0), [true, true, true]),
        "{text}"
    );
}

#[test]
fn top_snapshot_when_not_a_terminal_matches_golden() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(&h, Some(&nvml), &["top"]);
    assert_golden("top-mixed.txt", &h, Some(&nvml), &out);
}

#[test]
fn top_interval_below_the_minimum_is_a_usage_error() {
    let h = host("mixed");
    let out = run(&h, None, &["top", "--interval", "0.01"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn isolation_table_with_nvml_matches_golden() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(&h, Some(&nvml), &["isolation"]);
    assert_golden("isolation-mixed.txt", &h, Some(&nvml), &out);
}

#[test]
fn isolation_json_with_nvml_matches_golden() {
    let h = mixed();
    let nvml = fake_nvml();
    let out = run(&h, Some(&nvml), &["isolation", "--json"]);
    assert_golden("isolation-mixed.json", &h, Some(&nvml), &out);
}

#[test]
fn isolation_table_without_nvml_matches_golden() {
    let h = mixed();
    let out = run(&h, None, &["isolation"]);
    assert_golden("isolation-mixed-no-nvml.txt", &h, None, &out);
}

#[test]
fn isolation_without_iommu_matches_golden() {
    let h = host("no-iommu");
    let out = run(&h, None, &["isolation", "3b:00.0"]);
    assert_golden("isolation-no-iommu.txt", &h, None, &out);
}

#[test]
fn isolation_mig_host_with_nvml_matches_golden() {
    let h = host("h200-mig");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vgpu-nvml-fake/data/h200-mig.toml");
    let nvml = FakeNvml::on_sim(&std::fs::read_to_string(data).unwrap(), h.sim.root()).unwrap();
    let out = run(&h, Some(&nvml), &["isolation", "18:00.0"]);
    assert_golden("isolation-h200-mig.txt", &h, Some(&nvml), &out);
}

#[test]
fn isolation_unknown_gpu_is_not_found() {
    let h = host("mixed");
    let out = run(&h, None, &["isolation", "0000:99:00.0"]);
    assert_eq!(
        (
            out.status.code(),
            stderr(&out).lines().next().map(str::to_owned)
        ),
        (
            Some(1),
            Some(format!(
                "vgpuctl: error: no GPU matches \"0000:99:00.0\" under {}/sys/bus/pci/devices",
                h.sim.root().display()
            ))
        )
    );
}

/// A `metrics --listen` server, killed when dropped if still running.
struct Server {
    child: std::process::Child,
    address: String,
}

impl Server {
    fn start(h: &Host, nvml: &FakeNvml) -> Server {
        let mut child = command(
            h,
            &libvirt_uri(),
            Some(nvml),
            &["metrics", "--listen", "127.0.0.1:0"],
        )
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + DEADLINE;
        let address = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = received
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("the server did not say where it listens: {e}"));
            if let Some(rest) = line.strip_prefix("vgpuctl: serving metrics at http://") {
                break rest.trim_end_matches("/metrics").to_owned();
            }
        };
        Server { child, address }
    }

    /// The status line and body of `GET path`, over a plain TCP connection.
    fn get(&self, path: &str) -> (String, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        (
            head.lines().next().unwrap_or_default().to_owned(),
            body.to_owned(),
        )
    }

    /// SIGTERM, then the exit status, within the deadline.
    fn terminate(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            if let Err(err) = self.child.kill() {
                eprintln!("cannot kill the metrics server: {err}");
            }
            if let Err(err) = self.child.wait() {
                eprintln!("cannot reap the metrics server: {err}");
            }
        }
    }
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn metrics_listen_serves_what_metrics_prints_and_stops_on_sigterm() {
    let h = mixed();
    let nvml = fake_nvml();
    let printed = stdout(&run(&h, Some(&nvml), &["metrics"]));
    let server = Server::start(&h, &nvml);
    let (status, body) = server.get("/metrics");
    let served = (status, sorted_lines(&body));
    assert_eq!(
        (served, server.terminate()),
        (
            ("HTTP/1.1 200 OK".to_owned(), sorted_lines(&printed)),
            Some(0)
        )
    );
}

#[test]
fn metrics_listen_other_path_is_not_found() {
    let h = mixed();
    let nvml = fake_nvml();
    let server = Server::start(&h, &nvml);
    assert_eq!(
        server.get("/"),
        (
            "HTTP/1.1 404 Not Found".to_owned(),
            "not found: metrics are served at /metrics\n".to_owned()
        )
    );
}

/// A tmux server of this test's own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(name: &str) -> Tmux {
        Tmux {
            socket: format!("vgpu-{name}-{}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tmux (scripts/install-deps.sh installs it): {e}"))
    }

    fn screen(&self) -> String {
        stdout(&self.run(&["capture-pane", "-p", "-t", "top"]))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let out = self.run(&["kill-server"]);
        if !out.status.success() {
            // The server is gone already when its only session ended.
            eprintln!("tmux kill-server: {}", stderr(&out));
        }
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn top_in_a_terminal_shows_the_table_and_quits_on_q() {
    let h = mixed();
    let nvml = fake_nvml();
    let exit_file = h.state.path().join("top.exit");
    let cmd = command(
        &h,
        &libvirt_uri(),
        Some(&nvml),
        &["top", "--interval", "0.2"],
    );
    let mut line: Vec<String> = vec![shell_quote(&cmd.get_program().to_string_lossy())];
    line.extend(cmd.get_args().map(|a| shell_quote(&a.to_string_lossy())));
    let script = format!(
        "{}; echo \"exit=$?\" > {}",
        line.join(" "),
        shell_quote(&exit_file.display().to_string())
    );
    let tmux = Tmux::new("top");
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);
    assert!(started.status.success(), "{}", stderr(&started));

    let deadline = Instant::now() + DEADLINE;
    let mut screen = tmux.screen();
    // The tenant table's header, whatever its column widths, and the last lines below it.
    while !(screen.lines().any(|l| l.starts_with("TENANT ")) && screen.contains("NVML: loaded"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        screen = tmux.screen();
    }
    let row = |start: &str| -> Vec<String> {
        screen
            .lines()
            .find(|l| l.starts_with(start))
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let title = screen.lines().next().unwrap_or_default().to_owned();
    let t4 = row(T4);
    let acme = row("acme");

    let sent = tmux.run(&["send-keys", "-t", "top", "q"]);
    assert!(sent.status.success(), "{}", stderr(&sent));
    let mut exit = None;
    while exit.is_none() && Instant::now() < deadline {
        exit = std::fs::read_to_string(&exit_file)
            .ok()
            .filter(|t| t.ends_with('\n'));
        std::thread::sleep(Duration::from_millis(20));
    }

    assert_eq!(
        (title.as_str(), t4, acme, exit.as_deref()),
        (
            "vgpuctl top: every 0.2 s, q quits",
            [
                T4, UUID, "GRID", "T4-2Q", "web-1", "acme", "2048", "MiB", "300", "MiB", "2",
                "35%", "12%", "8%", "0%"
            ]
            .map(str::to_owned)
            .to_vec(),
            ["acme", "1", "2048", "MiB", "300", "MiB", "2"]
                .map(str::to_owned)
                .to_vec(),
            Some("exit=0\n")
        ),
        "{screen}"
    );
}
