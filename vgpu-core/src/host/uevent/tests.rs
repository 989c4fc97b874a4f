//! Parsing uevents, on text captured from a real host (`udevadm monitor --kernel --udev
//! --property` around `udevadm trigger --action=change`) and from the simulator's log.

use super::*;
use crate::error::{Error, HostError};

/// A kernel `change` of a host bridge, as `udevadm monitor --kernel --property` printed it.
const KERNEL_CHANGE: &str = "ACTION=change
DEVPATH=/devices/pci0000:00/0000:00:00.0
SUBSYSTEM=pci
SYNTH_UUID=0
PCI_CLASS=60000
PCI_ID=8086:0D57
PCI_SUBSYS_ID=0000:0000
PCI_SLOT_NAME=0000:00:00.0
MODALIAS=pci:v00008086d00000D57sv00000000sd00000000bc06sc00i00
SEQNUM=2003";

fn vars(text: &str) -> Vec<(&str, &str)> {
    text.lines().filter_map(|l| l.split_once('=')).collect()
}

#[test]
fn from_vars_kernel_change_reads_fixed_fields() {
    let event = Uevent::from_vars(vars(KERNEL_CHANGE)).unwrap();
    assert_eq!(
        (
            event.seqnum,
            event.action,
            event.devpath.as_str(),
            event.subsystem.as_str(),
            event.driver.as_deref()
        ),
        (
            2003,
            UeventAction::Change,
            "/devices/pci0000:00/0000:00:00.0",
            "pci",
            None
        )
    );
}

#[test]
fn from_vars_kernel_change_keeps_other_vars_in_order() {
    let event = Uevent::from_vars(vars(KERNEL_CHANGE)).unwrap();
    let keys: Vec<&str> = event.vars.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "SYNTH_UUID",
            "PCI_CLASS",
            "PCI_ID",
            "PCI_SUBSYS_ID",
            "PCI_SLOT_NAME",
            "MODALIAS"
        ]
    );
}

#[test]
fn from_vars_without_seqnum_is_missing() {
    let err = Uevent::from_vars([("ACTION", "add")]).unwrap_err();
    assert_eq!(err, UeventParseError::Missing("SEQNUM"));
}

#[test]
fn from_vars_non_numeric_seqnum_is_seqnum_error() {
    let err = Uevent::from_vars([("SEQNUM", "12x"), ("ACTION", "add")]).unwrap_err();
    assert_eq!(err, UeventParseError::Seqnum("12x".to_owned()));
}

#[test]
fn from_vars_unknown_action_is_action_error() {
    let err = Uevent::from_vars([("SEQNUM", "1"), ("ACTION", "poke")]).unwrap_err();
    assert_eq!(err, UeventParseError::Action("poke".to_owned()));
}

#[test]
fn from_vars_devpath_with_dotdot_is_devpath_error() {
    let err = Uevent::from_vars([
        ("SEQNUM", "1"),
        ("ACTION", "add"),
        ("DEVPATH", "/devices/../etc"),
        ("SUBSYSTEM", "pci"),
    ])
    .unwrap_err();
    assert_eq!(err, UeventParseError::Devpath("/devices/../etc".to_owned()));
}

#[test]
fn from_vars_devpath_outside_devices_is_devpath_error() {
    let err = Uevent::from_vars([
        ("SEQNUM", "1"),
        ("ACTION", "add"),
        ("DEVPATH", "/module/nvidia"),
        ("SUBSYSTEM", "module"),
    ])
    .unwrap_err();
    assert_eq!(err, UeventParseError::Devpath("/module/nvidia".to_owned()));
}

#[test]
fn from_vars_without_subsystem_is_missing() {
    let err = Uevent::from_vars([
        ("SEQNUM", "1"),
        ("ACTION", "add"),
        ("DEVPATH", "/devices/x"),
    ])
    .unwrap_err();
    assert_eq!(err, UeventParseError::Missing("SUBSYSTEM"));
}

#[test]
fn parse_line_parent_change_reads_driver_and_mdev_state() {
    let event = Uevent::parse_line(
        "9 change /devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0 pci DRIVER=nvidia \
         PCI_CLASS=30200 MDEV_STATE=registered",
    )
    .unwrap();
    assert_eq!(
        (
            event.action,
            event.driver.as_deref(),
            event.mdev_state(),
            event.sysname()
        ),
        (
            UeventAction::Change,
            Some("nvidia"),
            Some("registered"),
            "0000:3b:00.0"
        )
    );
}

/// The line is the simulator's (`vgpu_sim::Uevent`'s `Display`, the one writer of the format).
#[test]
fn parse_line_reads_the_simulators_line_back() {
    let sent = vgpu_sim::Uevent {
        seqnum: 8,
        action: "bind".to_owned(),
        devpath: "/devices/pci0000:4c/0000:4c:00.0/0000:4d:00.1".to_owned(),
        subsystem: "pci".to_owned(),
        vars: vec![
            ("DRIVER".to_owned(), "i915".to_owned()),
            ("PCI_CLASS".to_owned(), "38000".to_owned()),
        ],
    };

    let read = Uevent::parse_line(&sent.to_string()).unwrap();

    assert_eq!(
        read,
        Uevent {
            seqnum: 8,
            action: UeventAction::Bind,
            devpath: sent.devpath.clone(),
            subsystem: "pci".to_owned(),
            driver: Some("i915".to_owned()),
            vars: vec![("PCI_CLASS".to_owned(), "38000".to_owned())],
        }
    );
}

#[test]
fn parse_line_truncated_is_missing_subsystem() {
    let err = Uevent::parse_line("7 add /devices/pci0000:4c/0000:4d:00.1").unwrap_err();
    assert_eq!(err, UeventParseError::Missing("SUBSYSTEM"));
}

#[test]
fn parse_line_word_without_equals_is_variable_error() {
    let err = Uevent::parse_line("7 add /devices/pci0000:4c/0000:4d:00.1 pci DRIVER").unwrap_err();
    assert_eq!(err, UeventParseError::Variable("DRIVER".to_owned()));
}

#[test]
fn parse_line_empty_key_is_variable_error() {
    let err = Uevent::parse_line("7 add /devices/pci0000:4c/0000:4d:00.1 pci =x").unwrap_err();
    assert_eq!(err, UeventParseError::Variable("=x".to_owned()));
}

#[test]
fn pci_addresses_of_mdev_lists_parent_then_bridge() {
    let event = Uevent::parse_line(
        "10 add /devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c mdev",
    )
    .unwrap();
    let addresses: Vec<String> = event
        .pci_addresses()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(addresses, ["0000:3b:00.0", "0000:3a:00.0"]);
}

/// `/proc/net/unix` with udevd running, and a daemon's socket under another name.
const NET_UNIX: &str = "Num       RefCount Protocol Flags    Type St Inode Path
000000003840645d: 00000003 00000000 00000000 0002 03 107726
00000000b5bc8b15: 00000002 00000000 00010000 0005 01 106266 /run/udev/control
00000000c5bc8b15: 00000002 00000000 00010000 0001 01 106267 /run/other
";

#[test]
fn listens_on_udev_control_in_table_is_true() {
    assert!(netlink::listens_on(NET_UNIX, "/run/udev/control"));
}

#[test]
fn listens_on_path_not_in_table_is_false() {
    assert!(!netlink::listens_on(NET_UNIX, "/run/udev/gone"));
}

#[test]
fn listens_on_stream_socket_is_false() {
    assert!(!netlink::listens_on(NET_UNIX, "/run/other"));
}

#[test]
fn listens_on_connected_socket_is_false() {
    let table = "Num RefCount Protocol Flags Type St Inode Path
0: 00000002 00000000 00000000 0005 03 106266 /run/udev/control
";
    assert!(!netlink::listens_on(table, "/run/udev/control"));
}

#[test]
fn action_parse_rejects_uppercase() {
    assert_eq!(UeventAction::parse("ADD"), None);
}

/// With the host's own `systemd-udevd` (started for the test when none runs): real uevents of
/// a PCI function of this machine. A `change` asks nothing of a device: udev reads it again.
mod real_udev {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};

    use super::super::wait::{Settle, wait_until};
    use super::*;
    use crate::host::sysfs::write_attr;
    use vgpu_testing::udevd::{Udevd, first_pci_function, run};

    /// The first PCI function of this machine: its address and devpath.
    fn some_device() -> (String, String) {
        let name = first_pci_function();
        let real = std::fs::canonicalize(HostPaths::default().pci_devices().join(&name)).unwrap();
        let devpath = format!("/{}", real.strip_prefix("/sys").unwrap().display());
        (name, devpath)
    }

    /// Starts udev's event queue again when dropped, however the test ends.
    struct QueueStopped;

    impl QueueStopped {
        fn new() -> Self {
            run("udevadm", &["control", "--stop-exec-queue"]);
            Self
        }
    }

    impl Drop for QueueStopped {
        fn drop(&mut self) {
            run("udevadm", &["control", "--start-exec-queue"]);
        }
    }

    #[test]
    fn source_on_real_root_with_udevd_sees_triggered_change() {
        let Some(_udevd) = Udevd::ensure() else {
            return;
        };
        let (name, devpath) = some_device();
        let mut source = UeventSource::open(&HostPaths::default(), &["pci"]).unwrap();
        run(
            "udevadm",
            &[
                "trigger",
                "--action=change",
                &format!("/sys/bus/pci/devices/{name}"),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let seen = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no change event for {devpath}");
            if let Some(event) = source.next(left).unwrap() {
                if event.devpath == devpath {
                    break event;
                }
            }
        };
        assert_eq!(
            (
                source.origin(),
                seen.action,
                seen.subsystem.as_str(),
                seen.devpath.as_str(),
                seen.sysname()
            ),
            (
                UeventOrigin::Udev,
                UeventAction::Change,
                "pci",
                devpath.as_str(),
                name.as_str()
            )
        );
    }

    #[test]
    fn udevd_running_with_daemon_is_true() {
        let Some(_udevd) = Udevd::ensure() else {
            return;
        };
        assert!(udevd_running(&HostPaths::default()));
    }

    #[test]
    fn udevd_running_on_other_root_is_false() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run/udev")).unwrap();
        std::fs::write(dir.path().join("run/udev/control"), "").unwrap();
        assert!(!udevd_running(&HostPaths::new(dir.path())));
    }

    #[test]
    fn wait_until_with_udevd_is_woken_by_the_uevent() {
        let Some(_udevd) = Udevd::ensure() else {
            return;
        };
        let (name, _) = some_device();
        let paths = HostPaths::default();
        let uevent = paths.pci_devices().join(&name).join("uevent");
        let (go, started) = mpsc::channel::<()>();
        let written = Arc::new(AtomicBool::new(false));
        let writer = {
            let written = written.clone();
            std::thread::spawn(move || {
                started.recv().unwrap();
                written.store(true, Ordering::SeqCst);
                write_attr(&uevent, "change").unwrap();
            })
        };
        let checks = AtomicUsize::new(0);
        let done = wait_until(&paths, &["pci"], Duration::from_secs(20), || {
            let now = written.load(Ordering::SeqCst);
            if checks.fetch_add(1, Ordering::SeqCst) == 0 {
                // Subscribed by now: the change is made only after the first check.
                go.send(()).unwrap();
            }
            Ok(now)
        })
        .unwrap();
        writer.join().unwrap();
        // The first check finds nothing; the kernel's event wakes the second, which is true.
        assert_eq!((done, checks.load(Ordering::SeqCst)), (true, 2));
    }

    #[test]
    fn settle_after_uevent_write_returns_once_udev_processed_it() {
        let Some(_udevd) = Udevd::ensure() else {
            return;
        };
        let (name, _) = some_device();
        let paths = HostPaths::default();
        let mut settle = Settle::begin(&paths).expect("udevd runs");
        write_attr(&paths.pci_devices().join(&name).join("uevent"), "change").unwrap();
        let settled = settle.wait(&paths, Duration::from_secs(20)).unwrap();
        assert_eq!(settled.len(), 1);
    }

    #[test]
    fn settle_with_udev_queue_stopped_times_out_naming_the_device() {
        let Some(_udevd) = Udevd::ensure() else {
            return;
        };
        let (name, devpath) = some_device();
        let paths = HostPaths::default();
        let mut settle = Settle::begin(&paths).expect("udevd runs");
        let stopped = QueueStopped::new();
        write_attr(&paths.pci_devices().join(&name).join("uevent"), "change").unwrap();
        let err = settle.wait(&paths, Duration::from_millis(300)).unwrap_err();
        drop(stopped);
        let Error::Host(HostError::Timeout {
            what,
            path,
            waited_ms,
        }) = err
        else {
            panic!("{err:?}");
        };
        assert_eq!(
            (
                what.starts_with(&format!("udev's processing of {devpath} (uevent ")),
                path,
                waited_ms
            ),
            (
                true,
                std::path::PathBuf::from(format!("/sys{devpath}")),
                300
            )
        );
    }
}
