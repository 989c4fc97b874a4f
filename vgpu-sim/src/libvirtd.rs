//! A private system `libvirtd` for tests, optionally over a simulated host's `sys/`.
//!
//! libvirt reads fixed paths (`/etc/libvirt`, its hooks in `/etc/libvirt/hooks`, `/sys`), so
//! the daemon runs in a private mount namespace (`unshare --mount`) where directories of a
//! temporary directory are bind-mounted over `/etc/libvirt`, `/run/libvirt`,
//! `/var/lib/libvirt`, `/var/log/libvirt` and `/var/cache/libvirt`, and, when asked, the
//! simulator's `sys` over `/sys` (with `SYSTEMD_DEVICE_VERIFY_SYSFS=0`, so that libudev
//! accepts a `/sys` that is not a sysfs mount) and a hooks directory over
//! `/etc/libvirt/hooks`. `LIBVIRT_DRIVER_DIR` can name a directory holding only some
//! connection drivers. The daemon listens on a socket in the temporary directory
//! (`unix_sock_dir`, no authentication) and is reached as `<driver>:///system?socket=…`
//! ([`Libvirtd::uri`]). Its standard error and log file are kept for [`Libvirtd::logs`].
//!
//! Needs root, `unshare` (util-linux), `libvirtd` (Debian `libvirt-daemon`) and `virsh`
//! (`libvirt-clients`); [`Builder::missing`] says what this host lacks.
//!
//! ```no_run
//! # fn main() -> Result<(), vgpu_sim::libvirtd::StartError> {
//! let sim = vgpu_sim::SimHost::mount_for_test("mixed");
//! let daemon = vgpu_sim::libvirtd::Libvirtd::builder("nodedev")
//!     .sys(&sim)
//!     .only_drivers(&["nodedev"])
//!     .start()?;
//! let list = daemon.virsh(&["nodedev-list", "--cap", "mdev_types"]);
//! # Ok(())
//! # }
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::SimHost;

/// The system daemon.
pub const LIBVIRTD: &str = "/usr/sbin/libvirtd";
/// libvirt's command-line client.
pub const VIRSH: &str = "/usr/bin/virsh";
/// Where Debian installs libvirt's connection drivers (`libvirt_driver_<name>.so`).
pub const DRIVER_DIR: &str = "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver";
const UNSHARE: &str = "/usr/bin/unshare";

/// How long [`Builder::start`] waits for the socket.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// How long dropping a [`Libvirtd`] waits after SIGTERM before it kills.
const STOP_DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// Why [`Builder::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A file or directory of the fixture could not be made, or a process not spawned.
    #[error("cannot {what}")]
    Setup {
        /// What was being done, with its path.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The daemon (or the shell that mounts its namespace) exited before making its socket.
    #[error("libvirtd exited with {status}: {logs}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// Its standard error and log file ([`Libvirtd::logs`]).
        logs: String,
    },
    /// The daemon made no socket in time; it is killed.
    #[error("libvirtd made no socket in {} s: {logs}", START_DEADLINE.as_secs())]
    NoSocket {
        /// Its standard error and log file ([`Libvirtd::logs`]).
        logs: String,
    },
}

/// What differs between daemons: drivers, `/sys`, hooks, configuration, logging.
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    scheme: String,
    sys: Option<PathBuf>,
    drivers: Option<Vec<String>>,
    hooks: Option<PathBuf>,
    config: Vec<(String, String)>,
    log_level: u8,
    log_filters: Option<String>,
    host_uuid: Option<String>,
}

impl Builder {
    /// Makes `<name>` of [`DRIVER_DIR`]'s `libvirt_driver_<name>.so` the only connection
    /// drivers the daemon loads (through `LIBVIRT_DRIVER_DIR`); by default it loads them all.
    pub fn only_drivers(mut self, names: &[&str]) -> Self {
        self.drivers = Some(names.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    /// Bind-mounts `sim`'s `sys` over `/sys` in the daemon's namespace.
    pub fn sys(mut self, sim: &SimHost) -> Self {
        self.sys = Some(sim.root().join("sys"));
        self
    }

    /// Bind-mounts `dir` over `/etc/libvirt/hooks`, where libvirt looks for hook scripts.
    pub fn hooks(mut self, dir: &Path) -> Self {
        self.hooks = Some(dir.to_path_buf());
        self
    }

    /// Writes `/etc/libvirt/<name>` (as `qemu.conf`) with `text`. `libvirtd.conf` is the
    /// fixture's own.
    pub fn config(mut self, name: &str, text: &str) -> Self {
        self.config.push((name.to_owned(), text.to_owned()));
        self
    }

    /// The host UUID the daemon reports (`host_uuid` of `libvirtd.conf`). Two daemons on one
    /// machine need different ones to migrate between them: libvirt refuses "to migrate guest
    /// to the same host" when the UUIDs are equal.
    pub fn host_uuid(mut self, uuid: &str) -> Self {
        self.host_uuid = Some(uuid.to_owned());
        self
    }

    /// The level of the log file, `1` (debug) to `4` (error); `3` by default.
    pub fn log_level(mut self, level: u8) -> Self {
        self.log_level = level;
        self
    }

    /// libvirt's `log_filters` (`"1:node_device 1:util.pci"`); none by default.
    pub fn log_filters(mut self, filters: &str) -> Self {
        self.log_filters = Some(filters.to_owned());
        self
    }

    /// What this host lacks to start such a daemon, if anything: root, `unshare`,
    /// `libvirtd`, `virsh`, the drivers named in [`Builder::only_drivers`]; each with the
    /// Debian package that has it.
    pub fn missing(&self) -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return Some("not root (libvirtd in a mount namespace needs it)".into());
        }
        let drivers = self.drivers.iter().flatten().map(|name| driver_path(name));
        let needed = [
            (PathBuf::from(UNSHARE), "util-linux"),
            (PathBuf::from(LIBVIRTD), "libvirt-daemon"),
        ]
        .into_iter()
        .chain(drivers.map(|path| (path, "libvirt-daemon")))
        .chain([(PathBuf::from(VIRSH), "libvirt-clients")]);
        for (path, package) in needed {
            if !path.exists() {
                return Some(format!(
                    "{} is missing (apt-get install {package})",
                    path.display()
                ));
            }
        }
        None
    }

    /// Starts the daemon and waits (30 s at most) until its socket is there. The socket may
    /// appear before a driver has finished starting; libvirt's calls wait for that (the
    /// node-device driver's `nodeDeviceWaitInit`, say).
    ///
    /// # Errors
    /// When a file of the fixture cannot be made, or the daemon exits or makes no socket in
    /// time (the error has its logs).
    pub fn start(&self) -> Result<Libvirtd, StartError> {
        let dir = tempfile::tempdir().map_err(|e| setup("make a temporary directory", e))?;
        let root = dir.path();
        for sub in ["etc", "run", "lib", "log", "cache", "sock", "drivers"] {
            let path = root.join(sub);
            std::fs::create_dir_all(&path)
                .map_err(|e| setup(format!("make {}", path.display()), e))?;
        }
        for name in self.drivers.iter().flatten() {
            let link = root.join(format!("drivers/libvirt_driver_{name}.so"));
            std::os::unix::fs::symlink(driver_path(name), &link)
                .map_err(|e| setup(format!("link {}", link.display()), e))?;
        }
        write(&root.join("etc/libvirtd.conf"), &self.libvirtd_conf(root))?;
        for (name, text) in &self.config {
            write(&root.join("etc").join(name), text)?;
        }
        let stderr_path = root.join("libvirtd.stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| setup(format!("create {}", stderr_path.display()), e))?;
        let mut command = Command::new(UNSHARE);
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(self.script(root))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if self.sys.is_some() {
            command.env("SYSTEMD_DEVICE_VERIFY_SYSFS", "0");
        }
        if self.drivers.is_some() {
            command.env("LIBVIRT_DRIVER_DIR", root.join("drivers"));
        }
        let child = command
            .spawn()
            .map_err(|e| setup(format!("run {UNSHARE}"), e))?;
        let mut daemon = Libvirtd {
            uri: format!(
                "{}:///system?socket={}",
                self.scheme,
                root.join("sock/libvirt-sock").display()
            ),
            dir,
            child,
        };
        let deadline = Instant::now() + START_DEADLINE;
        while !daemon.socket().exists() {
            match daemon.child.try_wait() {
                Ok(Some(status)) => {
                    return Err(StartError::Exited {
                        status,
                        logs: daemon.logs(),
                    });
                }
                Ok(None) => {}
                Err(e) => return Err(setup("wait for libvirtd", e)),
            }
            if Instant::now() >= deadline {
                return Err(StartError::NoSocket {
                    logs: daemon.logs(),
                });
            }
            std::thread::sleep(POLL);
        }
        Ok(daemon)
    }

    fn libvirtd_conf(&self, root: &Path) -> String {
        let mut conf = format!(
            "unix_sock_dir = \"{sock}\"\nunix_sock_rw_perms = \"0700\"\n\
             auth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n",
            sock = root.join("sock").display()
        );
        if let Some(filters) = &self.log_filters {
            let _infallible = writeln!(conf, "log_filters = \"{filters}\"");
        }
        if let Some(uuid) = &self.host_uuid {
            let _infallible = writeln!(conf, "host_uuid = \"{uuid}\"");
        }
        let _infallible = writeln!(
            conf,
            "log_outputs = \"{}:file:{}\"",
            self.log_level,
            root.join("libvirtd.log").display()
        );
        conf
    }

    /// The shell that mounts the namespace, then becomes libvirtd.
    fn script(&self, root: &Path) -> String {
        let r = root.display();
        let mut script = String::from(
            "set -e\n\
             mkdir -p /etc/libvirt /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt\n",
        );
        if let Some(sys) = &self.sys {
            let _infallible = writeln!(script, "mount --bind {} /sys", sys.display());
        }
        let _infallible = write!(
            script,
            "mount --bind {r}/etc /etc/libvirt\n\
             mount --bind {r}/run /run/libvirt\n\
             mount --bind {r}/lib /var/lib/libvirt\n\
             mount --bind {r}/log /var/log/libvirt\n\
             mount --bind {r}/cache /var/cache/libvirt\n"
        );
        if let Some(hooks) = &self.hooks {
            let _infallible = writeln!(
                script,
                "mkdir -p /etc/libvirt/hooks\nmount --bind {} /etc/libvirt/hooks",
                hooks.display()
            );
        }
        let _infallible = writeln!(
            script,
            "exec {LIBVIRTD} --config /etc/libvirt/libvirtd.conf --pid-file {r}/libvirtd.pid"
        );
        script
    }
}

/// A running `libvirtd` in its own mount namespace; stopped on drop (SIGTERM, which lets it
/// remove its socket and pid file, then a kill after 10 s), its namespace going with it.
#[derive(Debug)]
pub struct Libvirtd {
    dir: tempfile::TempDir,
    child: Child,
    uri: String,
}

impl Libvirtd {
    /// A daemon reached as `<scheme>:///system` (`qemu`, `nodedev`), with all drivers,
    /// the host's `/sys`, no hooks and log level 3 until the builder says otherwise.
    pub fn builder(scheme: &str) -> Builder {
        Builder {
            scheme: scheme.to_owned(),
            sys: None,
            drivers: None,
            hooks: None,
            config: Vec::new(),
            log_level: 3,
            log_filters: None,
            host_uuid: None,
        }
    }

    /// `<scheme>:///system?socket=…`, the URI that reaches this daemon.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Runs `virsh -c URI ARGS` to its end.
    ///
    /// # Errors
    /// When `virsh` cannot be run.
    pub fn try_virsh(&self, args: &[&str]) -> std::io::Result<Output> {
        Command::new(VIRSH)
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .output()
    }

    /// [`Libvirtd::try_virsh`], for a test.
    ///
    /// # Panics
    /// When `virsh` cannot be run (a failing `virsh` is its output, not a panic).
    pub fn virsh(&self, args: &[&str]) -> Output {
        match self.try_virsh(args) {
            Ok(out) => out,
            Err(e) => panic!("cannot run {VIRSH}: {e}"),
        }
    }

    /// The daemon's standard error, then its log file (what is there of each).
    pub fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!("{}\n{}", read("libvirtd.stderr"), read("libvirtd.log"))
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock/libvirt-sock")
    }
}

impl Drop for Libvirtd {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _signalled = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + STOP_DEADLINE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(POLL);
            }
        }
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

fn driver_path(name: &str) -> PathBuf {
    Path::new(DRIVER_DIR).join(format!("libvirt_driver_{name}.so"))
}

fn setup(what: impl Into<String>, source: std::io::Error) -> StartError {
    StartError::Setup {
        what: what.into(),
        source,
    }
}

fn write(path: &Path, text: &str) -> Result<(), StartError> {
    std::fs::write(path, text).map_err(|e| setup(format!("write {}", path.display()), e))
}
