//! The netlink uevent sockets, through libudev (`udev` crate): the kernel's group, which hears
//! each event as the kernel sends it, and udev's, which hears it again once `systemd-udevd`
//! processed it (sd-device-monitor(3), udev(7)).

use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{setsockopt, sockopt};

use super::{Uevent, is_real_root};
use crate::error::{Error, HostError, Result};
use crate::host::paths::HostPaths;
use crate::host::sysfs;

/// Whether `systemd-udevd` runs for the host at `paths`: the root is the real one, its
/// control socket (`/run/udev/control`) exists, and a process listens on it, as the kernel's
/// table of Unix sockets (`/proc/net/unix`) says. A socket file left behind by a daemon that
/// exited has no listener. The table is read rather than the socket connected to: udevd
/// listens with a backlog of one, and a probe's connection would make `udevadm control`
/// fail with `EAGAIN` until udevd accepts it.
pub(crate) fn udevd_running(paths: &HostPaths) -> bool {
    if !is_real_root(paths) {
        return false;
    }
    let control = paths.udev_control();
    if !control.exists() {
        return false;
    }
    let table = paths.proc().join("net/unix");
    match sysfs::read_bounded(&table, sysfs::PROC_LIMIT) {
        Ok(Some(text)) => listens_on(&text, &control.to_string_lossy()),
        Ok(None) => false,
        Err(err) => {
            tracing::debug!("cannot tell whether udevd runs: {}", err.chain());
            false
        }
    }
}

/// Whether `table` (the text of `/proc/net/unix`: `Num RefCount Protocol Flags Type St Inode
/// Path`, `net/unix/af_unix.c`) lists a listening (`__SO_ACCEPTCON`, `0x10000`)
/// `SOCK_SEQPACKET` (type `5`) socket bound to `path`.
pub(crate) fn listens_on(table: &str, path: &str) -> bool {
    const ACCEPTCON: u32 = 0x0001_0000;
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let [_, _, _, flags, kind, _, _, bound] = fields[..] else {
            return false;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|f| f & ACCEPTCON != 0);
        let seqpacket = u32::from_str_radix(kind, 16) == Ok(5);
        listening && seqpacket && bound == path
    })
}

/// The receive buffer asked for each uevent socket, as udevd's own (16 MiB).
const RECEIVE_BUFFER: usize = 16 * 1024 * 1024;

/// Which netlink group a [`Monitor`] listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    /// Events as the kernel sends them.
    Kernel,
    /// Events as `systemd-udevd` re-broadcasts them after its rules ran.
    Udev,
}

/// A subscription to the uevents of some subsystems.
pub(crate) struct Monitor {
    socket: udev::MonitorSocket,
    group: Group,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

fn monitor_error(what: String, source: std::io::Error) -> Error {
    HostError::Monitor { what, source }.into()
}

impl Monitor {
    /// Subscribes to `group`'s events of `subsystems`; events sent from now on are queued on
    /// the socket until [`Monitor::receive`] reads them.
    pub(crate) fn open(group: Group, subsystems: &[&str]) -> Result<Self> {
        let what = || {
            format!(
                "listen to {} uevents of {}",
                match group {
                    Group::Kernel => "the kernel's",
                    Group::Udev => "udev's",
                },
                subsystems.join(", ")
            )
        };
        let mut builder = match group {
            Group::Kernel => udev::MonitorBuilder::new_kernel(),
            Group::Udev => udev::MonitorBuilder::new(),
        }
        .map_err(|err| monitor_error(what(), err))?;
        for subsystem in subsystems {
            builder = builder
                .match_subsystem(subsystem)
                .map_err(|err| monitor_error(what(), err))?;
        }
        let socket = builder.listen().map_err(|err| monitor_error(what(), err))?;
        // The default buffer holds a few hundred events; enabling 32 VFs sends more. Raising
        // it past the system's limit needs CAP_NET_ADMIN: without it, the default stays.
        if let Err(errno) = setsockopt(&socket, sockopt::RcvBufForce, &RECEIVE_BUFFER) {
            tracing::debug!(%errno, "keeping the default receive buffer of the uevent socket");
        }
        Ok(Self { socket, group })
    }

    /// Waits up to `timeout` for the socket to have events, then reads every event queued
    /// (none when the time ran out). A socket that reports an error (its buffer overran, and
    /// events were lost) is an error: the caller can no longer rely on what it hears.
    pub(crate) fn receive(&mut self, timeout: Duration) -> Result<Vec<Uevent>> {
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(millis)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
            Err(errno) => {
                return Err(monitor_error(
                    "wait for uevents".to_owned(),
                    std::io::Error::from(errno),
                ));
            }
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if revents.intersects(PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL) {
            // Reading clears a pending error (ENOBUFS after an overrun) for the next caller.
            let _lost = self.drain();
            return Err(monitor_error(
                "receive uevents".to_owned(),
                std::io::Error::other(format!(
                    "the netlink socket reported {revents:?}: events were lost"
                )),
            ));
        }
        Ok(self.drain())
    }

    /// Every event queued on the socket now, without waiting.
    pub(crate) fn drain(&mut self) -> Vec<Uevent> {
        let mut events = Vec::new();
        for event in self.socket.iter() {
            let vars = event.properties().map(|p| {
                (
                    p.name().to_string_lossy().into_owned(),
                    p.value().to_string_lossy().into_owned(),
                )
            });
            match Uevent::from_vars(vars) {
                Ok(event) => events.push(event),
                Err(err) => tracing::warn!(
                    devpath = %event.devpath().to_string_lossy(),
                    "ignoring a uevent that cannot be read: {err}"
                ),
            }
        }
        events
    }
}
