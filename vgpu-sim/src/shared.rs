//! The state the FUSE threads and the [`crate::SimHost`] handle share: the kernel model
//! behind one lock, the counters, and the writes waiting for a device to be released.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::control::{Command, LiveCounters, MAX_FAULTS, errno_name};
use crate::kernel::{Errno, Kernel, Scheduler};
use crate::tree::{FileRef, Node};

/// How often a waiting write looks again at its writer and at the time (asynchronous
/// probes), besides being woken by every change.
const WAIT_POLL: Duration = Duration::from_millis(20);
/// The most writes that wait at once; one more answers `EBUSY` (a deviation: the kernel has
/// no such limit), so that FUSE threads stay free to serve the reads and the `drop` that end
/// the waits (the session has 16).
pub(crate) const MAX_WAITING: usize = 8;

/// State shared by the FUSE threads and the [`crate::SimHost`] handle.
#[derive(Debug)]
pub(crate) struct Shared {
    kernel: Mutex<Kernel>,
    /// Signalled after every change of the kernel state.
    changed: Condvar,
    pub(crate) counters: LiveCounters,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) born: SystemTime,
    /// Set when the host unmounts: waiting writes give up.
    closing: AtomicBool,
    /// The writes waiting now: id -> `<path>: <why>`.
    waiting: Mutex<BTreeMap<u64, String>>,
    next_wait: AtomicU64,
    /// Files of the mount released, and the end of the FUSE session.
    pub(crate) session: SessionEvents,
}

/// The kernel lock held: reading through it changes nothing, and every mutable use of the
/// kernel (a store, a control line, an unplug) advances its state generation
/// ([`Kernel::generation`]) first, so that no change of the state can leave the generation
/// behind. The bump comes before the change, under the lock: a reader that sees the new
/// generation reads the changed state.
#[derive(Debug)]
pub(crate) struct KernelGuard<'a>(MutexGuard<'a, Kernel>);

impl Deref for KernelGuard<'_> {
    type Target = Kernel;

    fn deref(&self) -> &Kernel {
        &self.0
    }
}

impl DerefMut for KernelGuard<'_> {
    fn deref_mut(&mut self) -> &mut Kernel {
        self.0.advance();
        &mut self.0
    }
}

/// What an unmount waits on after detaching: the release of a file of the mount (the kernel
/// sends `FUSE_RELEASE` / `FUSE_RELEASEDIR` when the last descriptor of an open file is
/// closed) and the end of the FUSE session (`destroy`, once every worker thread is done).
#[derive(Debug, Default)]
pub(crate) struct SessionEvents {
    state: Mutex<SessionState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct SessionState {
    /// Files released since mount.
    releases: u64,
    /// The session ended: the kernel closed the connection.
    ended: bool,
}

impl SessionEvents {
    fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A file of the mount was released.
    pub(crate) fn released(&self) {
        self.lock().releases += 1;
        self.changed.notify_all();
    }

    /// The FUSE session ended.
    pub(crate) fn ended(&self) {
        self.lock().ended = true;
        self.changed.notify_all();
    }

    /// Whether the FUSE session ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.lock().ended
    }

    /// The files released since mount.
    pub(crate) fn releases(&self) -> u64 {
        self.lock().releases
    }

    /// Waits, at most `timeout`, until more than `seen` files were released or the session
    /// ended; returns the files released by then.
    pub(crate) fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        let (state, _) = self
            .changed
            .wait_timeout_while(self.lock(), timeout, |s| s.releases == seen && !s.ended)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.releases
    }
}

/// Whether the task that made a FUSE request gave up on it: it is gone, or a fatal signal
/// is pending (the kernel adds `SIGKILL` to every thread of a group that is being killed).
/// The FUSE connection cannot tell us itself: `fuser` answers `FUSE_INTERRUPT` with
/// `ENOSYS`, after which the kernel sends no more interrupts and a killed writer waits for
/// our answer. Pid 0 (a request of the kernel's own) never gives up.
/// Reads at most 64 KiB of a `/proc/<pid>/status` file.
fn read_status(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(64 * 1024)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn writer_gave_up(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let path = format!("/proc/{pid}/status");
    let status = match read_status(&path) {
        Ok(status) => status,
        // The writer is gone.
        Err(err)
            if err.kind() == std::io::ErrorKind::NotFound
                || err.raw_os_error() == Some(libc::ESRCH) =>
        {
            return true;
        }
        // Anything else says nothing about the writer: keep waiting for it.
        Err(err) => {
            tracing::warn!(path, "cannot read the writer's status: {err}");
            return false;
        }
    };
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    status.lines().any(|l| {
        let pending = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        pending
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|mask| mask & sigkill != 0)
    }) || status
        .lines()
        .any(|l| l.starts_with("State:") && l.contains("zombie"))
}

impl Shared {
    pub(crate) fn new(kernel: Kernel) -> Self {
        Self {
            kernel: Mutex::new(kernel),
            changed: Condvar::new(),
            counters: LiveCounters::default(),
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            born: SystemTime::now(),
            closing: AtomicBool::new(false),
            waiting: Mutex::new(BTreeMap::new()),
            next_wait: AtomicU64::new(0),
            session: SessionEvents::default(),
        }
    }

    /// The kernel lock, with due asynchronous probes run; a panic elsewhere never makes the
    /// model unusable. Changing the kernel through it advances its generation.
    pub(crate) fn kernel(&self) -> KernelGuard<'_> {
        let mut k = self
            .kernel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        k.settle();
        KernelGuard(k)
    }

    /// Wakes the waiting writes: the state changed.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    /// The host is going away: every waiting write gives up (`ENODEV`).
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        // Taking the lock orders this with a waiter between its check and its wait.
        drop(self.kernel());
        self.notify();
    }

    fn waits(&self) -> MutexGuard<'_, BTreeMap<u64, String>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A store from FUSE: when the kernel would wait before carrying it out
    /// ([`Kernel::blockers`]: a process holds a VFIO device it unregisters, NVIDIA's vGPU
    /// manager holds the GPU), waits until nothing blocks it, then carries it out. Gives up
    /// with `EINTR` (the store not done) when the writer `pid` is killed or gone, `ENODEV`
    /// when the host unmounts, and answers `EBUSY` at once when [`MAX_WAITING`] writes wait
    /// already.
    pub(crate) fn store(
        &self,
        path: &str,
        f: &FileRef,
        data: &[u8],
        pid: u32,
    ) -> Result<(), Errno> {
        let mut k = self.kernel();
        let mut wait_id = None;
        let result = loop {
            let why = k.blockers(f, data);
            if why.is_empty() {
                break k.write(f, data);
            }
            if self.closing.load(Ordering::SeqCst) {
                break Err(libc::ENODEV);
            }
            if wait_id.is_none() {
                let mut waits = self.waits();
                if waits.len() >= MAX_WAITING {
                    tracing::warn!(path, "{MAX_WAITING} writes wait already: EBUSY");
                    break Err(libc::EBUSY);
                }
                let id = self.next_wait.fetch_add(1, Ordering::Relaxed);
                waits.insert(id, format!("{path}: {}", why.join("; ")));
                wait_id = Some(id);
                tracing::info!(path, pid, "store waits: {}", why.join("; "));
            }
            if writer_gave_up(pid) {
                tracing::info!(path, pid, "the writer gave up waiting: EINTR");
                break Err(libc::EINTR);
            }
            let mut inner = self
                .changed
                .wait_timeout(k.0, WAIT_POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            // Waiting changes nothing; a due probe advances the generation itself.
            inner.settle();
            k = KernelGuard(inner);
        };
        drop(k);
        if let Some(id) = wait_id {
            self.waits().remove(&id);
        }
        self.notify();
        result
    }

    /// Applies control commands: all or none. Every command was parsed; here, in order
    /// against the state the earlier lines leave, the faults must fit in [`MAX_FAULTS`]
    /// (`EINVAL`), every unplugged device must exist (`ENODEV`), every `hold` must fit and
    /// name a process by its name (`EINVAL`) and every dropped process must exist (`ESRCH`).
    /// Returns the descriptor each `hold` got, in order.
    pub(crate) fn apply(&self, cmds: Vec<Command>) -> Result<Vec<u32>, (String, i32)> {
        let result = self.apply_locked(cmds);
        self.notify();
        result
    }

    fn apply_locked(&self, cmds: Vec<Command>) -> Result<Vec<u32>, (String, i32)> {
        let mut k = self.kernel();
        let mut pending = k.faults.len();
        // Processes are independent of the rest: run the lines on a copy, keep it on success.
        let mut procs = k.procs.clone();
        let mut fds = Vec::new();
        for cmd in &cmds {
            match cmd {
                Command::FailNext(_) => pending += 1,
                Command::Clear => {
                    pending = 0;
                    procs.clear();
                }
                Command::Unplug(a) if !k.devs.contains_key(a) => {
                    return Err((format!("unplug {a}: no such device"), libc::ENODEV));
                }
                Command::Hold(h) => fds.push(procs.hold(h)?),
                Command::Drop(pid) => procs.end(*pid)?,
                _ => {}
            }
            if pending > MAX_FAULTS {
                return Err((
                    format!("more than {MAX_FAULTS} pending faults"),
                    libc::EINVAL,
                ));
            }
        }
        for cmd in cmds {
            match cmd {
                Command::FailNext(f) => k.faults.push(f),
                Command::Latency(op, d) => {
                    if d.is_zero() {
                        k.latency.remove(&op);
                    } else {
                        k.latency.insert(op, d);
                    }
                }
                Command::Unplug(a) => {
                    k.unplug(a)
                        .map_err(|e| (format!("unplug {a}: no such device"), e))?;
                }
                Command::MigMode(gpu, on) => k
                    .set_mig_mode(gpu, on)
                    .map_err(|e| (format!("mig-mode {gpu}: refused"), e))?,
                Command::GpuInstanceAdd(gpu, profile, start) => {
                    let id = k.add_gpu_instance(gpu, &profile, start).map_err(|e| {
                        (
                            format!("gpu-instance-add {gpu} {profile} {start}: refused"),
                            e,
                        )
                    })?;
                    tracing::info!(%gpu, profile, start, id, "GPU instance made");
                }
                Command::GpuInstanceRemove(gpu, id) => k
                    .remove_gpu_instance(gpu, id)
                    .map_err(|e| (format!("gpu-instance-remove {gpu} {id}: refused"), e))?,
                Command::SizeMode(gpu, mixed) => k
                    .set_size_mode(gpu, mixed)
                    .map_err(|e| (format!("size-mode {gpu}: refused"), e))?,
                Command::Scheduler(gpu, policy, timeslice_ns) => k
                    .set_scheduler(
                        gpu,
                        Scheduler {
                            policy,
                            timeslice_ns,
                        },
                    )
                    .map_err(|e| (format!("vgpu-scheduler {gpu}: refused"), e))?,
                Command::Registry(line, value) => k
                    .set_registry(line, value)
                    .map_err(|e| (format!("nvidia-registry {}: refused", line.name()), e))?,
                Command::CountersReset => self.counters.reset(),
                Command::UeventsClear => k.uevents.clear(),
                Command::Clear => {
                    k.faults.clear();
                    k.latency.clear();
                }
                Command::Hold(_) | Command::Drop(_) => {}
            }
        }
        k.procs = procs;
        Ok(fds)
    }

    /// What reading the control file shows: the profile, pending faults and latencies, and
    /// the writes waiting (`# waiting <path>: <why>`).
    pub(crate) fn control_status(&self) -> String {
        let mut s = {
            let k = self.kernel();
            let mut s = format!("# vgpu-sim profile {}\n", k.profile.name);
            for f in &k.faults {
                s.push_str(&format!(
                    "fail-next {} {} {}\n",
                    f.remaining,
                    errno_name(f.errno),
                    f.glob
                ));
            }
            for (op, d) in &k.latency {
                s.push_str(&format!("latency {op} {}\n", d.as_millis()));
            }
            s
        };
        for line in self.waits().values() {
            s.push_str(&format!("# waiting {line}\n"));
        }
        s
    }

    /// Resolves a path below the root to its entry (`None`: no such entry).
    pub(crate) fn resolve(&self, path: &str) -> Option<Node> {
        if path.is_empty() {
            return Some(Node::Dir);
        }
        let comps: Vec<&str> = path.split('/').collect();
        let (name, parent) = comps.split_last()?;
        self.kernel().lookup(parent, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_gave_up_pid_zero_never() {
        assert!(!writer_gave_up(0));
    }

    #[test]
    fn writer_gave_up_self_is_alive() {
        assert!(!writer_gave_up(std::process::id()));
    }

    #[test]
    fn writer_gave_up_absent_pid_is_gone() {
        // Above PID_MAX_LIMIT: no such task can exist.
        assert!(writer_gave_up(4_194_305));
    }
}
