//! Waiting for the kernel and udev.
//!
//! [`wait_until`] waits for a condition on the host's files (VFs present, a VF's driver bound)
//! with a deadline. Where `systemd-udevd` runs on the real root (so that uevents are delivered
//! here) it subscribes to the kernel's events of the subsystems that can make the condition
//! true *before* checking it the first time, so that a change between the check and the wait
//! is never missed, and checks the condition again on each event (and at least every
//! [`RECHECK`], in case events were lost). It listens to the kernel rather than to udev: the
//! kernel announces a change as it makes it, while udev re-broadcasts it only once its rules
//! ran, and `contrib/udev/60-vgpu.rules` runs `vgpuctl restore --device` for the very device
//! this process is changing, which waits for the host lock this process holds. Where no udev
//! daemon runs (a simulated host, a test tree, a container without one) it polls, as
//! [`sysfs::poll_until`] does, with the same deadline.
//!
//! [`Settle`] waits until udev has processed what some changes caused: it subscribes to the
//! kernel's and udev's events before the first change, notes every event the kernel sent,
//! and waits until udev has re-broadcast each, that is, until its rules (and the programs they
//! run) finished, its database (`/run/udev/data`) was written and device nodes got their
//! owners and modes. libvirt's node-device driver learns of devices from those broadcasts, so
//! once the wait returns a new device is in its view and a new `/dev/vfio` node is ready for
//! QEMU. A session waits for it after releasing the host lock, for the reason above.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::netlink::{Group, Monitor};
use super::udevd_running;
use crate::error::{HostError, Result};
use crate::host::paths::HostPaths;
use crate::host::sysfs;

/// The longest a udev-woken wait goes without checking its condition again.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The subsystems whose events [`Settle`] waits for udev to finish: PCI functions, mediated
/// devices, and the VFIO group and device nodes QEMU opens.
pub(crate) const SETTLE_SUBSYSTEMS: [&str; 4] = ["pci", "mdev", "vfio", "vfio-dev"];

/// A monitor of `group`'s events of `subsystems`, where udevd runs for `paths`; `None`
/// (polling) elsewhere or when the subscription fails (logged).
fn subscribe(paths: &HostPaths, group: Group, subsystems: &[&str]) -> Option<Monitor> {
    if !udevd_running(paths) {
        return None;
    }
    match Monitor::open(group, subsystems) {
        Ok(monitor) => Some(monitor),
        Err(err) => {
            tracing::warn!("polling instead: {}", err.chain());
            None
        }
    }
}

/// Waits until `done` returns true or `timeout` passes; `Ok(false)` on timeout. Woken by the
/// kernel's events of `subsystems` where udevd runs, polling elsewhere (see the module
/// documentation).
pub(crate) fn wait_until(
    paths: &HostPaths,
    subsystems: &[&str],
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    let Some(mut monitor) = subscribe(paths, Group::Kernel, subsystems) else {
        return sysfs::poll_until(timeout, done);
    };
    let deadline = Instant::now() + timeout;
    loop {
        if done()? {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        if let Err(err) = monitor.receive(left.min(RECHECK)) {
            tracing::warn!("polling for the rest of the wait: {}", err.chain());
            return sysfs::poll_until(deadline.saturating_duration_since(Instant::now()), done);
        }
    }
}

/// A wait for udev to process what some changes caused: begun before the first change,
/// collected after each, waited on at the end.
#[derive(Debug)]
pub(crate) struct Settle {
    kernel: Monitor,
    udev: Monitor,
    /// The kernel's events heard so far: sequence number to devpath.
    sent: BTreeMap<u64, String>,
    /// udev's events heard so far: sequence number to devpath.
    processed: BTreeMap<u64, String>,
}

impl Settle {
    /// Subscribes to the kernel's and udev's events of [`SETTLE_SUBSYSTEMS`], where udevd runs
    /// for `paths`; `None` where it does not (nothing processes events there), or when the
    /// subscription fails (logged: the changes then end without waiting).
    pub(crate) fn begin(paths: &HostPaths) -> Option<Self> {
        let udev = subscribe(paths, Group::Udev, &SETTLE_SUBSYSTEMS)?;
        let kernel = subscribe(paths, Group::Kernel, &SETTLE_SUBSYSTEMS)?;
        Some(Self {
            kernel,
            udev,
            sent: BTreeMap::new(),
            processed: BTreeMap::new(),
        })
    }

    /// A wait, wherever udevd runs or not, that has heard the kernel send an event for
    /// `devpath` (sequence number `seqnum`) that udev will never re-broadcast: for tests of
    /// what waits for it and what does not.
    #[cfg(test)]
    pub(crate) fn unfinished_for_test(seqnum: u64, devpath: &str) -> Result<Self> {
        Ok(Self {
            kernel: Monitor::open(Group::Kernel, &SETTLE_SUBSYSTEMS)?,
            udev: Monitor::open(Group::Udev, &SETTLE_SUBSYSTEMS)?,
            sent: BTreeMap::from([(seqnum, devpath.to_owned())]),
            processed: BTreeMap::new(),
        })
    }

    /// Reads what both sockets have queued, so that a long series of changes does not overrun
    /// them. The kernel sends a change's events before the write that made it returns.
    pub(crate) fn collect(&mut self) {
        for event in self.kernel.drain() {
            self.sent.insert(event.seqnum, event.devpath);
        }
        for event in self.udev.drain() {
            self.processed.insert(event.seqnum, event.devpath);
        }
    }

    /// The events the kernel sent since [`Settle::begin`] that udev has not re-broadcast yet,
    /// as `<devpath> (uevent <seqnum>)`, oldest first; reads what the sockets have queued,
    /// without waiting.
    pub(crate) fn unprocessed(&mut self) -> Vec<String> {
        self.collect();
        self.pending()
            .into_iter()
            .map(|(seqnum, devpath)| format!("{devpath} (uevent {seqnum})"))
            .collect()
    }

    /// The events heard from the kernel and not from udev, oldest first.
    fn pending(&self) -> Vec<(u64, &str)> {
        self.sent
            .iter()
            .filter(|(seqnum, _)| !self.processed.contains_key(seqnum))
            .map(|(seqnum, devpath)| (*seqnum, devpath.as_str()))
            .collect()
    }

    /// Waits up to `within` until udev has processed every event the kernel sent since
    /// [`Settle::begin`]; returns their sequence numbers, oldest first. [`HostError::Timeout`](crate::host::HostError::Timeout)
    /// names the devices udev has not finished with; `paths` places them under its root.
    pub(crate) fn wait(&mut self, paths: &HostPaths, within: Duration) -> Result<Vec<u64>> {
        self.collect();
        let deadline = Instant::now() + within;
        loop {
            let pending = self.pending();
            let Some((_, first)) = pending.first() else {
                return Ok(self.sent.keys().copied().collect());
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let devices: Vec<String> = pending
                    .iter()
                    .map(|(seqnum, devpath)| format!("{devpath} (uevent {seqnum})"))
                    .collect();
                return Err(HostError::Timeout {
                    what: format!("udev's processing of {}", devices.join(", ")),
                    path: paths.sys().join(first.trim_start_matches('/')),
                    waited_ms: within.as_millis(),
                }
                .into());
            }
            for event in self.udev.receive(left)? {
                self.processed.insert(event.seqnum, event.devpath);
            }
        }
    }
}
