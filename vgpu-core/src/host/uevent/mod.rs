//! Device events: the uevents the kernel broadcasts when a device is added, removed, bound to
//! or unbound from a driver, or changed (`lib/kobject_uevent.c`, `drivers/base/core.c`,
//! `drivers/base/dd.c`; `Documentation/ABI/testing/sysfs-uevent`), and `systemd-udevd`'s
//! re-broadcast of each once its rules ran (udev(7)).
//!
//! Three places hear them, one type describes them ([`Uevent`]):
//!
//! - **udev's monitor** (netlink group `udev`), where `systemd-udevd` runs: an event arrives
//!   after udev processed the device (its rules ran, its database entry and `/dev` node
//!   permissions are in place), which is what libvirt's node-device driver listens to;
//! - **the kernel's** (netlink group `kernel`), on the real root where no udev daemon runs;
//! - **the simulator's log**, `<root>/.vgpu-sim/uevents` of a `vgpu-sim` host, one event a
//!   line (`<seqnum> <action> <devpath> <subsystem> KEY=VALUE...`).
//!
//! [`UeventSource`] streams events from whichever the host has. Inside the crate, `wait`
//! waits for a condition on sysfs (VFs present, a VF's driver bound) woken by uevents where
//! udevd runs, falling back to polling with the same deadline where none does (a simulated
//! host, a container), and `wait::Settle` waits, after changes, until udev has processed every
//! event they caused.
//!
//! udev serves only the real root (`/`), so only there are uevents listened to: for any other
//! root (a simulator, a test tree) every wait polls.

mod netlink;
mod simlog;
pub(crate) mod wait;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::error::{HostError, Result};
use crate::host::paths::HostPaths;
use crate::model::pci::PciAddress;

pub(crate) use netlink::udevd_running;

/// What happened to a device: a uevent's `ACTION` (`kobject_action_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UeventAction {
    /// The device was added (`device_add`).
    Add,
    /// The device was removed (`device_del`).
    Remove,
    /// A driver bound the device (`driver_bound`).
    Bind,
    /// The device's driver let it go (`device_release_driver`).
    Unbind,
    /// Something about the device changed (an mdev parent's `MDEV_STATE`, a written `uevent`).
    Change,
    /// The device was renamed or moved.
    Move,
    /// The device was brought online.
    Online,
    /// The device was taken offline.
    Offline,
}

impl UeventAction {
    /// The action named `text` as the kernel spells it (`add`, `bind`, ...).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "add" => Self::Add,
            "remove" => Self::Remove,
            "bind" => Self::Bind,
            "unbind" => Self::Unbind,
            "change" => Self::Change,
            "move" => Self::Move,
            "online" => Self::Online,
            "offline" => Self::Offline,
            _ => return None,
        })
    }

    /// The kernel's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Remove => "remove",
            Self::Bind => "bind",
            Self::Unbind => "unbind",
            Self::Change => "change",
            Self::Move => "move",
            Self::Online => "online",
            Self::Offline => "offline",
        }
    }
}

impl fmt::Display for UeventAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One uevent: what a netlink listener (udev, `udevadm monitor`) receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent {
    /// `SEQNUM`: the kernel's sequence number, one more for each event it sends.
    pub seqnum: u64,
    /// `ACTION`.
    pub action: UeventAction,
    /// `DEVPATH`: the device's directory below `/sys`, starting `/devices/`.
    pub devpath: String,
    /// `SUBSYSTEM`: `pci`, `mdev`, `vfio`, ...
    pub subsystem: String,
    /// `DRIVER`, present when the device has a driver as the event is sent.
    pub driver: Option<String>,
    /// Every other variable, in the order received (`MDEV_STATE`, `PCI_CLASS`, udev's
    /// properties such as `ID_PATH` on udev's events).
    pub vars: Vec<(String, String)>,
}

/// Why a uevent could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UeventParseError {
    /// A variable every uevent carries is missing.
    #[error("no {0}")]
    Missing(&'static str),
    /// `SEQNUM` is not a number.
    #[error("SEQNUM {0:?} is not a number")]
    Seqnum(String),
    /// `ACTION` is none the kernel sends.
    #[error("unknown ACTION {0:?}")]
    Action(String),
    /// `DEVPATH` does not start with `/devices/` or names `.` or `..`.
    #[error("DEVPATH {0:?} is not a path below /sys/devices")]
    Devpath(String),
    /// A word of a simulator log line is not `KEY=VALUE`.
    #[error("{0:?} is not KEY=VALUE")]
    Variable(String),
}

impl Uevent {
    /// The value of variable `key`, if the event has it.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `MDEV_STATE` (`registered`, `unregistered`): sent on a `change` of a device whose driver
    /// registers or unregisters it as a mediated-device parent (`mdev_register_parent`).
    pub fn mdev_state(&self) -> Option<&str> {
        self.var("MDEV_STATE")
    }

    /// The device's kernel name: the last component of its devpath (`0000:41:00.0`, an mdev's
    /// UUID), what udev rules call `%k`.
    pub fn sysname(&self) -> &str {
        self.devpath.rsplit('/').next().unwrap_or_default()
    }

    /// The PCI addresses among the devpath's components, nearest the device first: for a PCI
    /// function, itself and then the bridges above it; for a mediated device, its parent.
    pub fn pci_addresses(&self) -> Vec<PciAddress> {
        self.devpath
            .rsplit('/')
            .filter_map(|component| component.parse().ok())
            .collect()
    }

    /// Builds an event from its variables as netlink delivers them (`ACTION`, `DEVPATH`,
    /// `SUBSYSTEM`, `SEQNUM` and the rest, in any order).
    pub fn from_vars<K: AsRef<str>, V: AsRef<str>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, UeventParseError> {
        let (mut seqnum, mut action, mut devpath, mut subsystem, mut driver) =
            (None, None, None, None, None);
        let mut rest = Vec::new();
        for (key, value) in vars {
            let (key, value) = (key.as_ref(), value.as_ref().to_owned());
            match key {
                "SEQNUM" => seqnum = Some(value),
                "ACTION" => action = Some(value),
                "DEVPATH" => devpath = Some(value),
                "SUBSYSTEM" => subsystem = Some(value),
                "DRIVER" => driver = Some(value),
                _ => rest.push((key.to_owned(), value)),
            }
        }
        let seqnum = seqnum.ok_or(UeventParseError::Missing("SEQNUM"))?;
        let action = action.ok_or(UeventParseError::Missing("ACTION"))?;
        Ok(Self {
            seqnum: seqnum
                .parse()
                .map_err(|_| UeventParseError::Seqnum(seqnum))?,
            action: UeventAction::parse(&action).ok_or(UeventParseError::Action(action))?,
            devpath: checked_devpath(devpath.ok_or(UeventParseError::Missing("DEVPATH"))?)?,
            subsystem: subsystem.ok_or(UeventParseError::Missing("SUBSYSTEM"))?,
            driver,
            vars: rest,
        })
    }

    /// Parses one line of a simulated host's `.vgpu-sim/uevents`:
    /// `<seqnum> <action> <devpath> <subsystem>` then ` KEY=VALUE` pairs, `DRIVER` among them
    /// when the device has one (the format the `vgpu-sim` crate documents and alone writes).
    pub fn parse_line(line: &str) -> Result<Self, UeventParseError> {
        let mut words = line.split_ascii_whitespace();
        let mut next = |what| words.next().ok_or(UeventParseError::Missing(what));
        let fixed = [
            ("SEQNUM", next("SEQNUM")?),
            ("ACTION", next("ACTION")?),
            ("DEVPATH", next("DEVPATH")?),
            ("SUBSYSTEM", next("SUBSYSTEM")?),
        ];
        let mut vars = Vec::new();
        for word in words {
            let (key, value) = word
                .split_once('=')
                .filter(|(key, _)| !key.is_empty())
                .ok_or_else(|| UeventParseError::Variable(word.to_owned()))?;
            vars.push((key, value));
        }
        Self::from_vars(fixed.into_iter().chain(vars))
    }
}

/// `devpath` when it names a directory below `/sys/devices` without `.` or `..` components.
fn checked_devpath(devpath: String) -> Result<String, UeventParseError> {
    let ok = devpath.starts_with("/devices/")
        && devpath
            .split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(devpath)
    } else {
        Err(UeventParseError::Devpath(devpath))
    }
}

/// Where a [`UeventSource`] hears events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UeventOrigin {
    /// udev's monitor: each event after `systemd-udevd` processed it.
    Udev,
    /// The kernel's netlink broadcast (the real root, no udev daemon).
    Kernel,
    /// A simulated host's `.vgpu-sim/uevents` log.
    Simulator,
}

impl fmt::Display for UeventOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Udev => "udev",
            Self::Kernel => "kernel",
            Self::Simulator => "simulator",
        })
    }
}

#[derive(Debug)]
enum Inner {
    Netlink(netlink::Monitor),
    Simulator(simlog::SimLog),
}

/// A stream of the uevents of some subsystems, from the host's best source: the simulator's
/// log on a simulated host, else, on the real root, udev's monitor where `systemd-udevd` runs
/// and the kernel's broadcast where it does not. Only events sent after [`UeventSource::open`]
/// are delivered.
#[derive(Debug)]
pub struct UeventSource {
    inner: Inner,
    origin: UeventOrigin,
    subsystems: Vec<String>,
    pending: VecDeque<Uevent>,
}

impl UeventSource {
    /// Subscribes to the events of `subsystems` (`pci`, `mdev`, ...) on the host at `paths`.
    ///
    /// A root that is neither `/` nor a simulated host has no events:
    /// [`HostError::Missing`](crate::host::HostError::Missing) names the simulator log it looked for.
    pub fn open(paths: &HostPaths, subsystems: &[&str]) -> Result<Self> {
        let log = paths.sim_uevents();
        let (inner, origin) = if log.exists() {
            (
                Inner::Simulator(simlog::SimLog::open(log)?),
                UeventOrigin::Simulator,
            )
        } else if is_real_root(paths) {
            let origin = match udevd_running(paths) {
                true => UeventOrigin::Udev,
                false => UeventOrigin::Kernel,
            };
            let group = match origin {
                UeventOrigin::Udev => netlink::Group::Udev,
                _ => netlink::Group::Kernel,
            };
            (
                Inner::Netlink(netlink::Monitor::open(group, subsystems)?),
                origin,
            )
        } else {
            return Err(HostError::Missing { path: log }.into());
        };
        Ok(Self {
            inner,
            origin,
            subsystems: subsystems.iter().map(|s| (*s).to_owned()).collect(),
            pending: VecDeque::new(),
        })
    }

    /// Where the events come from.
    pub fn origin(&self) -> UeventOrigin {
        self.origin
    }

    /// The next event, waiting up to `timeout`; `None` when none came in time.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Uevent>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let events = match &mut self.inner {
                Inner::Netlink(monitor) => monitor.receive(left)?,
                Inner::Simulator(log) => log.receive(left)?,
            };
            let subsystems = &self.subsystems;
            self.pending.extend(
                events
                    .into_iter()
                    .filter(|e| subsystems.contains(&e.subsystem)),
            );
            if self.pending.is_empty() && left.is_zero() {
                return Ok(None);
            }
        }
    }
}

/// Whether `paths` is the running system's own root, the only one udev serves.
pub(crate) fn is_real_root(paths: &HostPaths) -> bool {
    paths.root() == Path::new("/")
}
