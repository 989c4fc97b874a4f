//! [`SimHost`]: a mounted simulator that unmounts when dropped.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::control::{
    Command, Counters, Fault, Hold, LatencyOp, MAX_ERRNO, MAX_LATENCY, is_valid_errno,
    parse_commands,
};
use crate::error::SimError;
use crate::fs::SimFs;
use crate::kernel::Kernel;
use crate::profile::{PciAddr, Profile};
use crate::shared::Shared;
use crate::uevent::Uevent;

/// How long [`SimHost::mount_at`] waits for the mount to answer, and an unmount for this
/// process's last open file of the mount.
const MOUNT_DEADLINE: Duration = Duration::from_secs(10);
/// How often an unmount waiting for this process's files looks at them again without being
/// told: a close that leaves the open file to another process (a descriptor passed or
/// inherited) sends the simulator no `FUSE_RELEASE`.
const RESCAN: Duration = Duration::from_millis(100);
/// FUSE worker threads, so that injected latency on one path does not stall the others.
const THREADS: usize = 16;

/// A simulated host mounted on a directory; unmounted on drop (also while a test panics).
#[derive(Debug)]
pub struct SimHost {
    shared: Arc<Shared>,
    session: Option<BackgroundSession>,
    root: PathBuf,
    /// The filesystem's device number (`st_dev` of the mounted root).
    dev: u64,
    tempdir: Option<tempfile::TempDir>,
}

/// Why FUSE cannot be used here, or `None` when it can (`/dev/fuse` is there and openable,
/// and we are root or have `fusermount3`).
pub fn require_fuse() -> Option<String> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        return Some(
            "/dev/fuse does not exist (load the fuse module or pass --device /dev/fuse)".into(),
        );
    }
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    let root = nix::unistd::geteuid().is_root();
    let helper = [
        "/usr/bin/fusermount3",
        "/bin/fusermount3",
        "/usr/bin/fusermount",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if !root && !helper {
        return Some("not root and no fusermount3 (install the fuse3 package)".into());
    }
    None
}

/// What every simulator test needs and how to get it, for the message of a test that cannot run.
const FUSE_NEEDED: &str = "vgpu-sim tests need /dev/fuse and fusermount3: \
                           apt-get install fuse3 (modprobe fuse), run as root";

/// For tests that use FUSE without [`SimHost::mount_for_test`] (running the `vgpu-sim`
/// binary): fails the test when FUSE is not usable here, naming what is missing
/// ([`require_fuse`] says why) and how to install it. A test that cannot run is a failure,
/// not a pass, whether or not `CI` is set.
///
/// # Panics
/// When FUSE is not usable here.
pub fn fuse_for_test() {
    if let Some(reason) = require_fuse() {
        panic!("{FUSE_NEEDED}: {reason}");
    }
}

/// Whether `dir` is a mount point now, from `/proc/self/mountinfo` (an unreadable one is an
/// error, not "not mounted").
fn is_mountpoint(dir: &Path) -> std::io::Result<bool> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    // Field 5 is the mount point, with space, tab, newline and backslash octal-escaped.
    let want = dir.to_string_lossy();
    Ok(text.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| unescape_mountinfo(m) == want.as_ref())
    }))
}

/// The ids of the mounts of the filesystem whose device number is `dev` in this mount
/// namespace (its root and any bind of it), from `/proc/self/mountinfo` (`proc(5)`: field 1
/// is the mount id, field 3 the filesystem's `major:minor`).
fn mount_ids(dev: u64) -> std::io::Result<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mount_ids_in(&text, dev))
}

fn mount_ids_in(mountinfo: &str, dev: u64) -> Vec<u64> {
    let want = format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    mountinfo
        .lines()
        .filter_map(|l| {
            let mut fields = l.split(' ');
            let id = fields.next()?.parse().ok()?;
            (fields.nth(1)? == want).then_some(id)
        })
        .collect()
}

/// Whether this process has a file open on one of the mounts `ids`: the `mnt_id` of each
/// `/proc/self/fdinfo/<fd>` (`proc(5)`). Reading them sends the filesystem no request.
fn holds_file_on(ids: &[u64]) -> std::io::Result<bool> {
    for entry in std::fs::read_dir("/proc/self/fdinfo")? {
        let text = match std::fs::read_to_string(entry?.path()) {
            Ok(text) => text,
            // Closed since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if fdinfo_mnt_id(&text).is_some_and(|id| ids.contains(&id)) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn fdinfo_mnt_id(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

fn unescape_mountinfo(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

impl SimHost {
    /// Mounts `profile` on a fresh temporary directory.
    ///
    /// # Errors
    /// [`SimError::MountPoint`] or [`SimError::Mount`].
    pub fn mount(profile: Profile) -> Result<Self, SimError> {
        let tmp = tempfile::Builder::new()
            .prefix("vgpu-sim-")
            .tempdir()
            .map_err(|source| SimError::MountPoint {
                path: std::env::temp_dir(),
                source,
            })?;
        let path = tmp.path().to_owned();
        let mut host = Self::mount_at(profile, &path)?;
        host.tempdir = Some(tmp);
        Ok(host)
    }

    /// Mounts `profile` on `dir` (which must exist and should be empty).
    ///
    /// # Errors
    /// [`SimError::MountPoint`] when `dir` is not a directory, [`SimError::Mount`] when FUSE
    /// refuses (its errno says why).
    pub fn mount_at(profile: Profile, dir: &Path) -> Result<Self, SimError> {
        let meta = std::fs::metadata(dir).map_err(|source| SimError::MountPoint {
            path: dir.to_owned(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(SimError::MountPoint {
                path: dir.to_owned(),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        let shared = Arc::new(Shared::new(Kernel::boot(profile)));
        // First choice: allow_other (root tools in other namespaces) + auto_unmount (the
        // fusermount3 helper unmounts even if this process is killed). Fallback for users
        // without `user_allow_other`: a plain private mount.
        let attempts = [
            (SessionACL::All, vec![MountOption::AutoUnmount]),
            (SessionACL::Owner, Vec::new()),
        ];
        let mut last = None;
        for (acl, extra) in attempts {
            let mut config = Config::default();
            config.mount_options = vec![
                MountOption::FSName("vgpu-sim".into()),
                MountOption::Subtype("vgpu-sim".into()),
                MountOption::RW,
                MountOption::NoDev,
                MountOption::NoSuid,
                MountOption::NoExec,
            ];
            config.mount_options.extend(extra);
            config.acl = acl;
            config.n_threads = Some(THREADS);
            match fuser::spawn_mount(SimFs::new(shared.clone()), dir, &config) {
                Ok(session) => {
                    let mut host = Self {
                        shared,
                        session: Some(session),
                        root: dir.to_owned(),
                        dev: 0,
                        tempdir: None,
                    };
                    host.dev = host.wait_ready()?;
                    return Ok(host);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(SimError::Mount {
            path: dir.to_owned(),
            source: last.unwrap_or_else(|| std::io::Error::other("no mount attempt")),
        })
    }

    /// Waits until the mount answers; returns its device number.
    fn wait_ready(&self) -> Result<u64, SimError> {
        let deadline = Instant::now() + MOUNT_DEADLINE;
        let probe = self.root.join("sys");
        loop {
            if probe.is_dir() {
                return std::fs::metadata(&self.root)
                    .map(|m| m.dev())
                    .map_err(|source| SimError::Mount {
                        path: self.root.clone(),
                        source,
                    });
            }
            if Instant::now() >= deadline {
                return Err(SimError::Mount {
                    path: self.root.clone(),
                    source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Mounts a built-in profile for a test. A test that cannot run fails, whether or not
    /// `CI` is set: when FUSE is missing ([`require_fuse`] says why) or the mount is refused
    /// with `EPERM`/`EACCES` (no right to mount, e.g. an unprivileged container), the message
    /// names what is missing and how to install it.
    ///
    /// # Panics
    /// When FUSE is not usable here, when the profile does not load, and when the mount fails
    /// for another reason (a timeout, a bad mount point).
    pub fn mount_for_test(profile_name: &str) -> Self {
        let profile = match Profile::builtin(profile_name) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        Self::mount_profile_for_test(profile)
    }

    /// [`SimHost::mount_for_test`] for a profile a test built or changed (a built-in one with
    /// `async_probe_ms`, `driver_max_vfs` or `kernel` set, say).
    ///
    /// # Panics
    /// As [`SimHost::mount_for_test`].
    pub fn mount_profile_for_test(profile: Profile) -> Self {
        fuse_for_test();
        match Self::mount(profile) {
            Ok(host) => host,
            Err(SimError::Mount { path, source })
                if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
            {
                panic!(
                    "{FUSE_NEEDED}: cannot mount FUSE on {}: {source}",
                    path.display()
                )
            }
            Err(e) => panic!(
                "vgpu-sim mount failed: {e}: {}",
                std::error::Error::source(&e).map_or_else(String::new, ToString::to_string)
            ),
        }
    }

    /// The directory that contains `sys/`, `proc/` and `dev/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The name of the profile this host runs.
    pub fn profile_name(&self) -> String {
        self.shared.kernel().profile.name.clone()
    }

    /// Runs control commands, as written to `.vgpu-sim/control` (see [`crate::control`]).
    ///
    /// # Errors
    /// [`SimError::Control`] for a malformed command, an unknown device or process, or a limit
    /// passed; nothing is applied when a line is refused.
    pub fn control(&self, text: &str) -> Result<(), SimError> {
        let cmds = parse_commands(text)?;
        self.shared
            .apply(cmds)
            .map(drop)
            .map_err(|(reason, _)| SimError::Control {
                line: text.trim().to_owned(),
                reason,
            })
    }

    /// Makes the next `count` writes to paths matching `glob` fail with `errno`.
    ///
    /// # Errors
    /// [`SimError::Control`] when `errno` is not 1 to [`MAX_ERRNO`] or [`MAX_FAULTS`](crate::control::MAX_FAULTS) faults
    /// are already pending.
    pub fn try_fail_next(&self, count: u32, errno: i32, glob: &str) -> Result<(), SimError> {
        let line = format!("fail-next {count} {errno} {glob}");
        if !is_valid_errno(errno) {
            return Err(SimError::Control {
                line,
                reason: format!("errno {errno} is not 1 to {MAX_ERRNO}"),
            });
        }
        let fault = Fault {
            remaining: count,
            errno,
            glob: glob.to_owned(),
        };
        self.shared
            .apply(vec![Command::FailNext(fault)])
            .map(drop)
            .map_err(|(reason, _)| SimError::Control { line, reason })
    }

    /// [`SimHost::try_fail_next`] for tests, whose errno is a constant of theirs.
    ///
    /// # Panics
    /// When `errno` is not 1 to [`MAX_ERRNO`] or [`MAX_FAULTS`](crate::control::MAX_FAULTS) faults are already pending:
    /// the test is wrong.
    pub fn fail_next(&self, count: u32, errno: i32, glob: &str) {
        if let Err(e) = self.try_fail_next(count, errno, glob) {
            panic!("{e}");
        }
    }

    /// Adds `delay` to every `op` (zero removes it).
    ///
    /// # Errors
    /// [`SimError::Control`] when `delay` is above [`MAX_LATENCY`].
    pub fn set_latency(&self, op: LatencyOp, delay: Duration) -> Result<(), SimError> {
        let line = format!("latency {op} {}", delay.as_millis());
        if delay > MAX_LATENCY {
            return Err(SimError::Control {
                line,
                reason: format!("more than {} ms", MAX_LATENCY.as_millis()),
            });
        }
        self.shared
            .apply(vec![Command::Latency(op, delay)])
            .map(drop)
            .map_err(|(reason, _)| SimError::Control { line, reason })
    }

    /// Hot-unplugs a PCI function (with its VFs and mdevs).
    ///
    /// # Errors
    /// [`SimError::Control`] when no such function is present.
    pub fn unplug(&self, addr: PciAddr) -> Result<(), SimError> {
        let r = self.shared.kernel().unplug(addr);
        self.shared.notify();
        r.map_err(|_| SimError::Control {
            line: format!("unplug {addr}"),
            reason: "no such device".into(),
        })
    }

    /// Gives process `pid` (created with name `comm` when new) one more open file, whose link
    /// `proc/<pid>/fd/<n>` reads `target` literally (`/dev/vfio/42`,
    /// `/dev/vfio/devices/vfio3`, `anon_inode:[vfio-device]`; it need not exist), as the
    /// control line `hold <pid> <comm> <target>` does. Returns `n`, the lowest free descriptor
    /// from 3.
    ///
    /// # Errors
    /// [`SimError::Control`] when `pid` is not 1 to [`MAX_PID`](crate::control::MAX_PID),
    /// `comm` or `target` breaks the rules of [`crate::control`] (whitespace, length, a
    /// relative path), the process runs under another name, or
    /// [`MAX_HELD_FDS`](crate::control::MAX_HELD_FDS) descriptors are held already. Nothing
    /// changes then.
    pub fn hold(&self, pid: u32, comm: &str, target: &str) -> Result<u32, SimError> {
        let line = format!("hold {pid} {comm} {target}");
        let hold = Hold::new(pid, comm, target).map_err(|reason| SimError::Control {
            line: line.clone(),
            reason,
        })?;
        let fds = self
            .shared
            .apply(vec![Command::Hold(hold)])
            .map_err(|(reason, _)| SimError::Control {
                line: line.clone(),
                reason,
            })?;
        fds.first().copied().ok_or_else(|| SimError::Control {
            line,
            reason: "no descriptor given".into(),
        })
    }

    /// Ends process `pid` with all its descriptors (`proc/<pid>` goes away), as the control
    /// line `drop <pid>` does.
    ///
    /// # Errors
    /// [`SimError::Control`] when no simulated process `pid` runs.
    pub fn drop_process(&self, pid: u32) -> Result<(), SimError> {
        let line = format!("drop {pid}");
        self.shared
            .apply(vec![Command::Drop(pid)])
            .map(drop)
            .map_err(|(reason, _)| SimError::Control { line, reason })
    }

    /// The uevents the kernel sent since the host booted or the log was cleared (at most
    /// [`MAX_UEVENTS`](crate::uevent::MAX_UEVENTS), oldest first), as
    /// `.vgpu-sim/uevents` lists them.
    pub fn uevents(&self) -> Vec<Uevent> {
        self.shared.kernel().uevents.snapshot()
    }

    /// Operations served since mount or the last reset.
    pub fn counters(&self) -> Counters {
        self.shared.counters.snapshot()
    }

    /// A reader of [`SimHost::counters`] that may outlive this borrow (a tracing layer that
    /// profiles by step keeps one). After unmount it reads the last counts.
    pub fn counter_reader(&self) -> impl Fn() -> Counters + Send + Sync + 'static {
        let shared = Arc::clone(&self.shared);
        move || shared.counters.snapshot()
    }

    /// Zeroes the counters.
    pub fn reset_counters(&self) {
        self.shared.counters.reset();
    }

    /// Unmounts now and reports a failure (drop does the same and logs it). Writes waiting
    /// for a device are answered `ENODEV` first; then the mount is detached and, up to a
    /// deadline of 10 s, this process's last open file of it waited for (a file of this mount
    /// still open when the process exits would hang the exit: the kernel asks this process to
    /// flush it). Files of other processes, and copies of the mount in other mount namespaces,
    /// are not waited for: the simulator's threads serve them until the kernel ends the
    /// connection, at the latest when this process exits.
    ///
    /// # Errors
    /// [`SimError::Unmount`] when the detach fails (`umount2`, or `fusermount3 -u -z` when
    /// not root), when `/proc/self/mountinfo` or `/proc/self/fdinfo` cannot be read, or when
    /// the directory is still a mount point after the detach (`EBUSY`: another mount on it).
    pub fn unmount(mut self) -> Result<(), SimError> {
        self.do_unmount()
    }

    fn do_unmount(&mut self) -> Result<(), SimError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let failed = |source: std::io::Error| SimError::Unmount {
            path: self.root.clone(),
            source,
        };
        // Writes waiting for a device give up first (`ENODEV`). The mounts of this filesystem
        // whose files this process may hold are listed before the root is detached and leaves
        // the mount table. Then detach synchronously ourselves (auto_unmount alone would leave
        // it to the helper, racing with the removal of the temporary directory).
        self.shared.close();
        let ids = mount_ids(self.dev);
        let detached = self.detach();
        let BackgroundSession { guard, .. } = session;
        detached.map_err(failed)?;
        let ids = ids.map_err(failed)?;
        // `umount2` (also under `fusermount3`) has removed the mount from this namespace when
        // it returns: one still there is another mount on the same directory.
        if is_mountpoint(&self.root).map_err(failed)? {
            return Err(failed(std::io::Error::from_raw_os_error(libc::EBUSY)));
        }
        // Dropping a `BackgroundSession` does not stop its threads: they serve until the
        // kernel ends the connection, once no mount of the filesystem is left anywhere and
        // its last open file is closed. A mount namespace created while it was mounted
        // (`unshare -m`, a container, a service's private namespace) keeps a copy of the
        // mount that this detach does not reach, for as long as that namespace lives; the
        // session then outlives this call, which is harmless: the connection ends when this
        // process exits, and the copy answers `ENOTCONN`. What must not outlive this call is
        // a file of this mount open in this process: when the process exits, the kernel sends
        // its FLUSH to this process, whose threads are gone, and the exit hangs. So wait, up
        // to the deadline, until this process holds no file of the mount or the session
        // ended, looking again at every release of a file and at the end of the session.
        let deadline = Instant::now() + MOUNT_DEADLINE;
        let mut seen = self.shared.session.releases();
        loop {
            if self.shared.session.has_ended() {
                if let Ok(Err(e)) = guard.join() {
                    tracing::warn!("the simulator's FUSE session ended with {e}");
                }
                return Ok(());
            }
            if !holds_file_on(&ids).map_err(failed)? {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    root = %self.root.display(),
                    "this process still has files of the detached simulator open; its threads keep serving them"
                );
                return Ok(());
            }
            seen = self.shared.session.wait(seen, left.min(RESCAN));
        }
    }

    /// Lazily detaches the mount: `umount2(MNT_DETACH)` as root, `fusermount3 -u -z`
    /// otherwise. A mount already gone (`EINVAL`: not a mount point) is not an error.
    fn detach(&self) -> std::io::Result<()> {
        if nix::unistd::geteuid().is_root() {
            match nix::mount::umount2(&self.root, nix::mount::MntFlags::MNT_DETACH) {
                Ok(()) | Err(nix::errno::Errno::EINVAL) => Ok(()),
                Err(e) => Err(std::io::Error::from(e)),
            }
        } else {
            let out = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.root)
                .output()?;
            if out.status.success() || !is_mountpoint(&self.root)? {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "fusermount3 -u -z: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )))
            }
        }
    }
}

impl Drop for SimHost {
    fn drop(&mut self) {
        if let Err(e) = self.do_unmount() {
            let cause =
                std::error::Error::source(&e).map_or_else(String::new, |s| format!(": {s}"));
            tracing::warn!("{e}{cause}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_mountinfo_space_is_unescaped() {
        assert_eq!(unescape_mountinfo("/tmp/a\\040b"), "/tmp/a b");
    }

    #[test]
    fn unescape_mountinfo_backslash_is_unescaped_last() {
        assert_eq!(unescape_mountinfo("/tmp/a\\134040"), "/tmp/a\\040");
    }

    #[test]
    fn is_mountpoint_root_is_mounted() {
        assert!(is_mountpoint(Path::new("/")).expect("mountinfo"));
    }

    #[test]
    fn mount_ids_in_are_the_mounts_of_the_device() {
        let mountinfo = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
45 27 0:41 / /tmp/a rw,nosuid - fuse.vgpu-sim vgpu-sim rw,user_id=0
46 27 0:41 /sys /srv/sys rw,nosuid - fuse.vgpu-sim vgpu-sim rw,user_id=0
47 27 0:410 / /tmp/b rw,nosuid - fuse.vgpu-sim vgpu-sim rw,user_id=0
";
        assert_eq!(
            mount_ids_in(mountinfo, nix::sys::stat::makedev(0, 41)),
            [45, 46]
        );
    }

    #[test]
    fn fdinfo_mnt_id_is_read() {
        let fdinfo = "pos:\t0\nflags:\t02100000\nmnt_id:\t45\nino:\t12\n";
        assert_eq!(fdinfo_mnt_id(fdinfo), Some(45));
    }

    #[test]
    fn holds_file_on_sees_an_open_file_of_the_mount() {
        use std::os::fd::AsRawFd as _;
        let file = tempfile::tempfile().expect("a file");
        let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))
            .expect("its fdinfo");
        let id = fdinfo_mnt_id(&fdinfo).expect("its mount id");
        assert_eq!(
            (
                holds_file_on(&[id]).expect("fdinfo"),
                holds_file_on(&[]).expect("fdinfo")
            ),
            (true, false)
        );
    }
}
