//! Shared helpers for the simulator's integration tests (plain `std::fs`, as a shell user).

#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub(crate) use vgpu_sim::SimHost;

/// Tesla T4, legacy mdev parent (`mixed`, `t4-legacy`, `no-iommu`).
pub(crate) const T4: &str = "0000:3b:00.0";
/// L40S PF, vendor-specific VFIO, 32 VFs at boot (`mixed`).
pub(crate) const L40S: &str = "0000:5e:00.0";
/// The L40S's first VF (`mixed`).
pub(crate) const L40S_VF0: &str = "0000:5e:00.4";
/// Intel Flex 170 PF on `i915`, domain 1, no VFs at boot (`mixed`).
pub(crate) const FLEX: &str = "0001:03:00.0";
/// The Flex's first VF, once enabled.
pub(crate) const FLEX_VF0: &str = "0001:03:00.1";
/// The GVT-g iGPU (`mixed`, `gvtg`).
pub(crate) const IGPU: &str = "0000:00:02.0";
/// RTX A4000 on `vfio-pci` with `driver_override` set (`mixed`).
pub(crate) const A4000: &str = "0000:af:00.0";
/// The A4000's audio function, in its IOMMU group, on `snd_hda_intel` (`mixed`).
pub(crate) const A4000_AUDIO: &str = "0000:af:00.1";
/// An mdev UUID.
pub(crate) const UUID_A: &str = "11111111-2222-3333-4444-555555555555";
/// Another mdev UUID.
pub(crate) const UUID_B: &str = "22222222-2222-3333-4444-555555555555";

/// Mounts a built-in profile; fails the test when FUSE is unavailable.
pub(crate) fn host(profile: &str) -> SimHost {
    SimHost::mount_for_test(profile)
}

/// `echo -n VALUE > PATH` (open with O_TRUNC, one write): the errno of the write, if any.
pub(crate) fn echo(path: &Path, value: &str) -> Result<(), i32> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    f.write_all(value.as_bytes())
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// `cat PATH`, or the errno.
pub(crate) fn cat(path: &Path) -> Result<String, i32> {
    std::fs::read_to_string(path).map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// `readlink PATH` as a string, or the errno.
pub(crate) fn link(path: &Path) -> Result<String, i32> {
    std::fs::read_link(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// Sorted entry names of a directory, or the errno.
pub(crate) fn ls(path: &Path) -> Result<Vec<String>, i32> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    Ok(names)
}

/// `<root>/sys/bus/pci/devices/<addr>/<rest>`.
pub(crate) fn pci(host: &SimHost, addr: &str, rest: &str) -> PathBuf {
    let p = host.root().join("sys/bus/pci/devices").join(addr);
    if rest.is_empty() { p } else { p.join(rest) }
}

/// The basename a link points to (`driver` -> `nvidia`), or `None` when absent.
pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// `<root>/sys/bus/pci/drivers/<driver>/<file>` (`bind`, `unbind`).
pub(crate) fn driver_file(host: &SimHost, driver: &str, file: &str) -> PathBuf {
    host.root()
        .join("sys/bus/pci/drivers")
        .join(driver)
        .join(file)
}

/// `<root>/sys/bus/pci/drivers_probe`.
pub(crate) fn drivers_probe(host: &SimHost) -> PathBuf {
    host.root().join("sys/bus/pci/drivers_probe")
}

/// `<root>/proc/driver/nvidia/gpus/<addr>/unbindLock`.
pub(crate) fn unbind_lock(host: &SimHost, addr: &str) -> PathBuf {
    host.root()
        .join("proc/driver/nvidia/gpus")
        .join(addr)
        .join("unbindLock")
}

/// `<root>/sys/class/mdev_bus/<parent>/mdev_supported_types/<type_id>/<file>`.
pub(crate) fn mdev_type(host: &SimHost, parent: &str, type_id: &str, file: &str) -> PathBuf {
    host.root()
        .join("sys/class/mdev_bus")
        .join(parent)
        .join("mdev_supported_types")
        .join(type_id)
        .join(file)
}

/// Whether `dir` is a mount point of this process's namespace now.
///
/// # Panics
/// When `/proc/self/mountinfo` cannot be read: "not mounted" must not pass by default.
pub(crate) fn is_mounted(dir: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_else(|e| panic!("cannot read /proc/self/mountinfo: {e}"));
    let want = dir.to_string_lossy();
    text.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| unescape_mountinfo(m) == want)
    })
}

/// Undoes the octal escapes of `/proc/self/mountinfo` (`\040` space, `\011` tab, `\012`
/// newline, `\134` backslash).
fn unescape_mountinfo(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// How long a write that must still be waiting is watched before the test says it is.
pub(crate) const STILL_WAITING: std::time::Duration = std::time::Duration::from_millis(300);
/// How long a write that must be let through is given to return.
pub(crate) const RETURNS_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// `echo -n VALUE > PATH` on a thread of its own: the errno of the write (or success) arrives
/// on the channel when the write returns.
pub(crate) fn echo_later(path: PathBuf, value: &str) -> std::sync::mpsc::Receiver<Result<(), i32>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let value = value.to_owned();
    std::thread::spawn(move || {
        // The test may be over (and the receiver gone) by the time the write returns.
        let _ = tx.send(echo(&path, &value));
    });
    rx
}

/// The `# waiting <path>: <why>` lines of the control file: the writes the simulator holds.
pub(crate) fn waiting(host: &SimHost) -> Vec<String> {
    cat(&host.root().join(".vgpu-sim/control"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("# waiting "))
        .map(str::to_owned)
        .collect()
}

/// Polls `done` every 5 ms for up to [`RETURNS_WITHIN`]; whether it came true.
pub(crate) fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + RETURNS_WITHIN;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    done()
}

/// The last component of `<dir>/iommu_group`: the group whose node is `/dev/vfio/<group>`.
pub(crate) fn group_node(dir: &Path) -> String {
    format!(
        "/dev/vfio/{}",
        link_name(&dir.join("iommu_group")).expect("an IOMMU group")
    )
}

/// `/dev/vfio/devices/vfio<N>` for the VFIO device whose sysfs directory is `dir`.
pub(crate) fn cdev_node(dir: &Path) -> String {
    let names = ls(&dir.join("vfio-dev")).expect("a vfio-dev directory");
    format!("/dev/vfio/devices/{}", names[0])
}

/// `<root>/sys/bus/mdev/devices/<uuid>`.
pub(crate) fn mdev_dir(host: &SimHost, uuid: &str) -> PathBuf {
    host.root().join("sys/bus/mdev/devices").join(uuid)
}

/// One `write(2)` of raw bytes to `path` (opened with `O_TRUNC`), or the errno.
pub(crate) fn write_bytes(path: &Path, value: &[u8]) -> Result<(), i32> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    f.write_all(value)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// The bytes of `path`, or the errno.
pub(crate) fn cat_bytes(path: &Path) -> Result<Vec<u8>, i32> {
    std::fs::read(path).map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// A process in a mount namespace of its own, made while `dir` was mounted: it holds a copy
/// of that mount which an unmount here does not reach (`unshare(1)`: private propagation).
/// Killed when dropped.
pub(crate) struct NamespaceCopy {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl NamespaceCopy {
    /// Starts `unshare -m` (with `--user --map-root-user` when not root), once it runs.
    ///
    /// # Panics
    /// When `unshare` cannot be run or the namespace cannot be made: the test fails.
    pub(crate) fn start(dir: &Path) -> Self {
        use std::io::BufRead as _;
        // Each line read prints `copy=<mounts on dir> served=<1 when dir/sys answers>`.
        let script = "echo ready; while read _; do \
                      n=$(grep -c -F \" $1 \" /proc/self/mountinfo); \
                      if test -d \"$1/sys\"; then s=1; else s=0; fi; \
                      echo \"copy=$n served=$s\"; done";
        let mut command = std::process::Command::new("unshare");
        if !nix::unistd::geteuid().is_root() {
            command.args(["--user", "--map-root-user"]);
        }
        let mut child = command
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run unshare (apt-get install util-linux): {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut copy = Self {
            child,
            lines: std::io::BufReader::new(stdout).lines(),
        };
        let first = copy.lines.next().and_then(Result::ok);
        assert_eq!(
            first.as_deref(),
            Some("ready"),
            "unshare did not start a mount namespace"
        );
        copy
    }

    /// What the namespace sees of the copy now: `copy=<mounts on dir> served=<0|1>`.
    pub(crate) fn probe(&mut self) -> String {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin).expect("ask the namespace");
        self.lines
            .next()
            .and_then(Result::ok)
            .expect("an answer from the namespace")
    }
}

impl Drop for NamespaceCopy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
