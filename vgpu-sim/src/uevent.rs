//! Uevents: what the kernel would broadcast for each change it makes (`lib/kobject_uevent.c`,
//! `drivers/base/core.c`, `drivers/base/dd.c`, `drivers/vfio/mdev/mdev_core.c`), kept in a log
//! that `.vgpu-sim/uevents` serves, one event a line, so that event-driven clients can be
//! tested against the sequence the kernel produces.
//!
//! A line is `<seqnum> <action> <devpath> <subsystem>` followed by ` KEY=VALUE` pairs:
//!
//! ```text
//! 7 add /devices/pci0000:4c/0000:4c:00.0/0000:4d:00.1 pci PCI_CLASS=38000 PCI_ID=8086:56C0 ...
//! 8 bind /devices/pci0000:4c/0000:4c:00.0/0000:4d:00.1 pci DRIVER=i915 PCI_CLASS=38000 ...
//! 9 change /devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0 pci DRIVER=nvidia ... MDEV_STATE=registered
//! 10 add /devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/<uuid> mdev
//! 11 add /devices/virtual/vfio/52 vfio MAJOR=243 MINOR=52 DEVNAME=vfio/52
//! ```
//!
//! `DRIVER` comes first whenever the device has a driver when the event is sent
//! (`dev_uevent`): on `bind` and on a parent's `change`, never on `add`, `unbind` or `remove`.
//! PCI events then carry `PCI_CLASS`, `PCI_ID`, `PCI_SUBSYS_ID`, `PCI_SLOT_NAME` and
//! `MODALIAS` (`pci_uevent`), VFIO nodes `MAJOR`, `MINOR` and `DEVNAME`.

use std::collections::VecDeque;
use std::fmt;

/// The most events the log keeps; older ones are dropped (sequence numbers go on).
pub const MAX_UEVENTS: usize = 16_384;

/// One uevent, as a netlink listener (udev, `udevadm monitor --kernel`) would receive it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uevent {
    /// `SEQNUM`: 1 for the first event after the host booted, then one more each.
    pub seqnum: u64,
    /// `ACTION`: `add`, `remove`, `bind`, `unbind` or `change`.
    pub action: String,
    /// `DEVPATH`: the device's directory below `sys`, from `/devices`.
    pub devpath: String,
    /// `SUBSYSTEM`: `pci`, `mdev`, `vfio` (group nodes) or `vfio-dev` (device cdevs).
    pub subsystem: String,
    /// The other variables, in the order the kernel adds them.
    pub vars: Vec<(String, String)>,
}

impl Uevent {
    /// The value of variable `key` (`DRIVER`, `MDEV_STATE`, ...), if the event has it.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Uevent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            self.seqnum, self.action, self.devpath, self.subsystem
        )?;
        for (k, v) in &self.vars {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// The events sent since boot (or the last `uevents-clear`), at most [`MAX_UEVENTS`].
#[derive(Clone, Debug, Default)]
pub(crate) struct UeventLog {
    events: VecDeque<Uevent>,
    last: u64,
    /// Off while the host boots: nobody listens yet.
    pub(crate) on: bool,
}

impl UeventLog {
    /// Records one event (when the log is on).
    pub(crate) fn push(
        &mut self,
        action: &str,
        devpath: String,
        subsystem: &str,
        vars: Vec<(String, String)>,
    ) {
        if !self.on {
            return;
        }
        self.last += 1;
        if self.events.len() == MAX_UEVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Uevent {
            seqnum: self.last,
            action: action.to_owned(),
            devpath,
            subsystem: subsystem.to_owned(),
            vars,
        });
    }

    /// Forgets every event (sequence numbers go on).
    pub(crate) fn clear(&mut self) {
        self.events.clear();
    }

    /// The events, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<Uevent> {
        self.events.iter().cloned().collect()
    }

    /// The text of `.vgpu-sim/uevents`.
    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        for e in &self.events {
            s.push_str(&e.to_string());
            s.push('\n');
        }
        s
    }
}

/// `DEVPATH` of a directory below the root (`sys/devices/...` -> `/devices/...`).
pub(crate) fn devpath(sys_path: &str) -> String {
    sys_path
        .strip_prefix("sys")
        .map_or_else(|| format!("/{sys_path}"), str::to_owned)
}

/// The actions `kobject_synth_uevent` accepts (`kobject_action_type`).
const SYNTH_ACTIONS: [&str; 8] = [
    "add", "remove", "change", "move", "online", "offline", "bind", "unbind",
];

/// Parses a write to a device's `uevent` (`kobject_synth_uevent`): an action, then optionally
/// a UUID and `KEY=VALUE` arguments; returns the action and the variables the synthetic event
/// carries (`SYNTH_UUID`, `SYNTH_ARG_<KEY>`), or `EINVAL`.
pub(crate) fn parse_synth(data: &[u8]) -> Result<(String, Vec<(String, String)>), i32> {
    let text = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
    let mut words = text.split_whitespace();
    let action = words.next().ok_or(libc::EINVAL)?;
    if !SYNTH_ACTIONS.contains(&action) {
        return Err(libc::EINVAL);
    }
    let uuid = match words.next() {
        None => "0".to_owned(),
        Some(u) => uuid::Uuid::try_parse(u)
            .map_err(|_| libc::EINVAL)?
            .to_string(),
    };
    let mut vars = vec![("SYNTH_UUID".to_owned(), uuid)];
    for arg in words {
        let (k, v) = arg.split_once('=').ok_or(libc::EINVAL)?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(libc::EINVAL);
        }
        vars.push((format!("SYNTH_ARG_{k}"), v.to_owned()));
    }
    Ok((action.to_owned(), vars))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_vars_in_order() {
        let e = Uevent {
            seqnum: 3,
            action: "bind".into(),
            devpath: "/devices/pci0000:00/0000:00:02.0".into(),
            subsystem: "pci".into(),
            vars: vec![("DRIVER".into(), "i915".into())],
        };
        assert_eq!(
            e.to_string(),
            "3 bind /devices/pci0000:00/0000:00:02.0 pci DRIVER=i915"
        );
    }

    #[test]
    fn push_beyond_limit_drops_oldest_keeps_numbering() {
        let mut log = UeventLog {
            on: true,
            ..UeventLog::default()
        };
        for _ in 0..=MAX_UEVENTS {
            log.push("add", "/devices/x".into(), "pci", Vec::new());
        }
        let events = log.snapshot();
        assert_eq!((events.len(), events[0].seqnum), (MAX_UEVENTS, 2));
    }

    #[test]
    fn push_while_off_records_nothing() {
        let mut log = UeventLog::default();
        log.push("add", "/devices/x".into(), "pci", Vec::new());
        assert_eq!(log.render(), "");
    }

    #[test]
    fn devpath_strips_sys() {
        assert_eq!(
            devpath("sys/devices/pci0000:00/0000:00:02.0"),
            "/devices/pci0000:00/0000:00:02.0"
        );
    }

    #[test]
    fn parse_synth_action_alone_has_zero_uuid() {
        assert_eq!(
            parse_synth(b"change\n"),
            Ok(("change".into(), vec![("SYNTH_UUID".into(), "0".into())]))
        );
    }

    #[test]
    fn parse_synth_unknown_action_is_einval() {
        assert_eq!(parse_synth(b"poke"), Err(libc::EINVAL));
    }

    #[test]
    fn parse_synth_bad_uuid_is_einval() {
        assert_eq!(parse_synth(b"add nope"), Err(libc::EINVAL));
    }

    #[test]
    fn parse_synth_args_become_synth_arg_vars() {
        assert_eq!(
            parse_synth(b"add 11111111-2222-3333-4444-555555555555 A=b"),
            Ok((
                "add".into(),
                vec![
                    (
                        "SYNTH_UUID".into(),
                        "11111111-2222-3333-4444-555555555555".into()
                    ),
                    ("SYNTH_ARG_A".into(), "b".into())
                ]
            ))
        );
    }
}
