//! libvirt's own node-device driver (its udev backend, through libudev) reads the simulator's
//! `sys/` as it reads a host's: `libvirtd` runs in a private mount namespace (`unshare -m`)
//! where the simulator's `sys` is bind-mounted on `/sys` and temporary directories on
//! `/etc/libvirt`, `/run/libvirt`, `/var/lib/libvirt`, `/var/log/libvirt` and
//! `/var/cache/libvirt`. It loads only the node-device driver (`LIBVIRT_DRIVER_DIR` names a
//! directory holding just `libvirt_driver_nodedev.so`), listens on a socket in the temporary
//! directory (`unix_sock_dir`) and is reached as `nodedev:///system?socket=…`.
//! `SYSTEMD_DEVICE_VERIFY_SYSFS=0` lets libudev accept a `/sys` that is not a sysfs mount. The
//! daemon is `vgpu_sim::libvirtd`'s.
//!
//! What this checks in the simulator: libvirt keeps a PCI function only when its `config`
//! opens and parses (`virPCIDeviceNew`, `virPCIGetHeaderType`, the PCI Express capability
//! walk in `src/util/virpci.c`), and libudev lists a device only when its directory has a
//! `uevent` file.
//!
//! Needs root, `/dev/fuse`, `unshare`, `libvirtd` and `virsh` (Debian `libvirt-daemon`,
//! `libvirt-clients`, `util-linux`). Without them the tests are skipped, unless `CI` is set,
//! where they fail naming what is missing.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common::{IGPU, T4, UUID_A, echo, host, mdev_type};
use vgpu_sim::SimHost;
use vgpu_sim::libvirtd::{Builder, Libvirtd};

/// libvirtd with only its node-device driver, logging what it reads of PCI and mdev.
fn nodedev() -> Builder {
    Libvirtd::builder("nodedev")
        .only_drivers(&["nodedev"])
        .log_level(1)
        .log_filters("1:node_device 1:util.pci 1:util.mdev")
}

/// What this host lacks to run the tests, if anything.
fn missing() -> Option<String> {
    nodedev().missing().or_else(vgpu_sim::require_fuse)
}

/// Whether to run: `false` (the test returns) when something is missing and `CI` is unset.
///
/// # Panics
/// When something is missing and `CI` is set.
#[allow(clippy::print_stderr)] // a skipped test says why
fn runnable() -> bool {
    match missing() {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("libvirt node-device tests cannot run: {why} (scripts/install-deps.sh)")
        }
        Some(why) => {
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// The node-device daemon on `sim`'s `sys`; stopped on drop.
fn start(sim: &SimHost) -> Libvirtd {
    nodedev().sys(sim).start().unwrap_or_else(|e| panic!("{e}"))
}

/// `virsh -c nodedev:///system?socket=… ARGS`: its standard output; fails on an error.
fn virsh(daemon: &Libvirtd, args: &[&str]) -> String {
    let out = daemon.virsh(args);
    assert!(
        out.status.success(),
        "virsh {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.logs()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The non-empty lines of `virsh nodedev-list` output.
fn names(list: &str) -> Vec<String> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every text between `open` and the next `close` in `xml`, in order.
fn between<'a>(xml: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    xml.split(open)
        .skip(1)
        .filter_map(|rest| rest.split_once(close).map(|(inside, _)| inside))
        .collect()
}

/// `(type id, availableInstances)` of each `<type>` in a node device's XML, in order.
fn mdev_types(xml: &str) -> Vec<(String, u32)> {
    between(xml, "<type id='", "</type>")
        .into_iter()
        .map(|t| {
            let id = t.split_once('\'').unwrap().0.to_owned();
            let available = between(t, "<availableInstances>", "</availableInstances>")[0]
                .parse()
                .unwrap();
            (id, available)
        })
        .collect()
}

fn owned(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(id, n)| ((*id).to_owned(), *n)).collect()
}

/// The T4's types in `mixed` with no vGPU, as the simulator lists them.
const T4_TYPES: [(&str, u32); 17] = [
    ("nvidia-234", 1),
    ("nvidia-233", 2),
    ("nvidia-232", 4),
    ("nvidia-231", 8),
    ("nvidia-230", 16),
    ("nvidia-223", 8),
    ("nvidia-224", 8),
    ("nvidia-222", 16),
    ("nvidia-252", 16),
    ("nvidia-229", 1),
    ("nvidia-228", 2),
    ("nvidia-227", 4),
    ("nvidia-226", 8),
    ("nvidia-225", 16),
    ("nvidia-321", 1),
    ("nvidia-320", 2),
    ("nvidia-319", 4),
];

#[test]
fn libvirt_nodedev_lists_igpu_and_t4_as_mdev_parents() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    let daemon = start(&sim);
    assert_eq!(
        names(&virsh(&daemon, &["nodedev-list", "--cap", "mdev_types"])),
        vec!["pci_0000_00_02_0".to_owned(), "pci_0000_3b_00_0".to_owned()]
    );
}

#[test]
fn libvirt_nodedev_t4_types_and_available_instances_match_sysfs() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    let daemon = start(&sim);
    let xml = virsh(&daemon, &["nodedev-dumpxml", "pci_0000_3b_00_0"]);
    assert_eq!(mdev_types(&xml), owned(&T4_TYPES));
}

#[test]
fn libvirt_nodedev_igpu_types_and_available_instances_match_sysfs() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    let daemon = start(&sim);
    let xml = virsh(&daemon, &["nodedev-dumpxml", "pci_0000_00_02_0"]);
    assert_eq!(
        mdev_types(&xml),
        owned(&[
            ("i915-GVTg_V5_8", 7),
            ("i915-GVTg_V5_4", 4),
            ("i915-GVTg_V5_2", 2),
            ("i915-GVTg_V5_1", 1),
        ])
    );
}

#[test]
fn libvirt_nodedev_t4_pci_express_link_from_config() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    let daemon = start(&sim);
    let xml = virsh(&daemon, &["nodedev-dumpxml", "pci_0000_3b_00_0"]);
    assert_eq!(
        between(&xml, "<pci-express>", "</pci-express>")
            .iter()
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>(),
        vec![
            "<link validity='cap' port='0' speed='16' width='16'/> \
             <link validity='sta' speed='16' width='16'/>"
                .to_owned()
        ]
    );
}

#[test]
fn libvirt_nodedev_lists_mdev_created_before_start_on_its_parent() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    echo(&mdev_type(&sim, T4, "nvidia-231", "create"), UUID_A).unwrap();
    let daemon = start(&sim);
    let name = format!("mdev_{}_0000_3b_00_0", UUID_A.replace('-', "_"));
    let xml = virsh(&daemon, &["nodedev-dumpxml", &name]);
    assert_eq!(
        (
            names(&virsh(&daemon, &["nodedev-list", "--cap", "mdev"])),
            between(&xml, "<parent>", "</parent>"),
            between(&xml, "<type id='", "'/>"),
            between(&xml, "<uuid>", "</uuid>"),
        ),
        (
            vec![name.clone()],
            vec!["pci_0000_3b_00_0"],
            vec!["nvidia-231"],
            vec![UUID_A]
        )
    );
}

#[test]
fn libvirt_nodedev_t4_with_one_vgpu_offers_only_its_type() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    echo(&mdev_type(&sim, T4, "nvidia-231", "create"), UUID_A).unwrap();
    let daemon = start(&sim);
    let xml = virsh(&daemon, &["nodedev-dumpxml", "pci_0000_3b_00_0"]);
    let expected: Vec<(String, u32)> = T4_TYPES
        .iter()
        .map(|(id, _)| ((*id).to_owned(), if *id == "nvidia-231" { 7 } else { 0 }))
        .collect();
    assert_eq!(mdev_types(&xml), expected);
}

#[test]
fn libvirt_nodedev_igpu_parent_is_pci_function_of_root_bus() {
    if !runnable() {
        return;
    }
    let sim = host("mixed");
    let daemon = start(&sim);
    let xml = virsh(&daemon, &["nodedev-dumpxml", "pci_0000_00_02_0"]);
    assert_eq!(
        (
            between(&xml, "<parent>", "</parent>"),
            between(&xml, "<path>", "</path>"),
        ),
        (
            vec!["computer"],
            vec![format!("/sys/devices/pci0000:00/{IGPU}").as_str()]
        )
    );
}
