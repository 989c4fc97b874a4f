//! A running `systemd-udevd` for tests that need real uevents: [`Udevd::ensure`] starts one
//! (`systemd-udevd --daemon`, as root) when none answers on `/run/udev/control`, and stops it
//! again (`udevadm control --exit`) when the test is done, only if it started it. Tests that
//! hold a [`Udevd`] run one at a time within a test binary.
//!
//! Without the tools (Debian's `udev` package), a test skips, unless `CI` is set: then it
//! fails.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::wait_for;

/// Where Debian (and merged-/usr distributions) install the daemon.
const DAEMONS: [&str; 2] = [
    "/lib/systemd/systemd-udevd",
    "/usr/lib/systemd/systemd-udevd",
];

/// How long the daemon gets to start answering, or to exit.
const START_STOP: Duration = Duration::from_secs(20);

static SERIAL: Mutex<()> = Mutex::new(());

/// A `systemd-udevd` that runs while this is held.
#[derive(Debug)]
pub struct Udevd {
    started: bool,
    _serial: MutexGuard<'static, ()>,
}

/// Runs `program` with `args`; panics with its output when it fails.
pub fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {program}: {err}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether `udevadm args` succeeds.
fn udevadm_ok(args: &[&str]) -> bool {
    Command::new("udevadm")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether a daemon answers on its control socket (`udevadm control --ping`, one second).
fn answering() -> bool {
    udevadm_ok(&["control", "--ping", "--timeout=1"])
}

impl Udevd {
    /// A running daemon, started here when none runs; `None` (after saying why on stderr)
    /// when `systemd-udevd` or `udevadm` is not installed and `CI` is not set.
    ///
    /// # Panics
    /// When a tool is missing and `CI` is set, or the daemon cannot be started.
    pub fn ensure() -> Option<Self> {
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let daemon = DAEMONS.iter().find(|p| Path::new(p).exists());
        let udevadm = ["/usr/bin/udevadm", "/bin/udevadm"]
            .iter()
            .any(|p| Path::new(p).exists());
        let (Some(daemon), true) = (daemon, udevadm) else {
            let why = "systemd-udevd or udevadm is missing: install Debian's udev package \
                       (scripts/install-deps.sh)";
            assert!(std::env::var_os("CI").is_none(), "{why}");
            #[allow(clippy::print_stderr)] // a test helper telling why it skips
            {
                eprintln!("skipped: {why}");
            }
            return None;
        };
        if answering() {
            return Some(Self {
                started: false,
                _serial: serial,
            });
        }
        run(daemon, &["--daemon"]);
        // Listening is not answering yet: `udevadm control` fails with EAGAIN until udevd's
        // event loop accepts connections.
        let up = wait_for(START_STOP, answering);
        assert!(
            up,
            "{daemon} --daemon did not answer udevadm control --ping"
        );
        Some(Self {
            started: true,
            _serial: serial,
        })
    }

    /// `udevadm control --reload`: reads the rules again.
    pub fn reload(&self) {
        run("udevadm", &["control", "--reload"]);
    }
}

impl Drop for Udevd {
    /// Stops the daemon this started. A test that already failed is not made to panic again.
    fn drop(&mut self) {
        if !self.started {
            return;
        }
        let down = wait_for(START_STOP, || {
            !answering() || (udevadm_ok(&["control", "--exit"]) && !answering())
        });
        if !std::thread::panicking() {
            assert!(
                down,
                "systemd-udevd did not exit after udevadm control --exit"
            );
        }
    }
}

/// The first PCI function of this machine (`/sys/bus/pci/devices`, sorted), the device the
/// udev tests send their events for.
///
/// # Panics
/// When the machine lists none.
pub fn first_pci_function() -> String {
    let mut names: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .expect("/sys/bus/pci/devices")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .next()
        .expect("a PCI function in /sys/bus/pci/devices")
}
