//! `SimHost::unmount` (and drop): a file of the mount this process holds is waited for, a copy
//! of the mount in another mount namespace is not.

use std::io::Read as _;

use crate::common::{NamespaceCopy, T4, eventually, host, is_mounted};
use vgpu_sim::{Profile, SimHost};

/// The unmount returns while a namespace made during the mount still holds a copy of it.
/// Removing the temporary mount point then takes the copy out of that namespace too: the
/// kernel detaches the mounts on a removed directory in every namespace.
#[test]
fn unmount_returns_while_another_namespace_has_the_mount() {
    let h = host("t4-legacy");
    let root = h.root().to_owned();
    let mut copy = NamespaceCopy::start(&root);
    let before = copy.probe();
    h.unmount().expect("unmount");
    assert_eq!(
        (before, is_mounted(&root), copy.probe()),
        (
            "copy=1 served=1".to_owned(),
            false,
            "copy=0 served=0".to_owned()
        )
    );
}

/// On a directory that stays, the copy stays in its namespace, and this process's threads go
/// on serving it after the unmount returned.
#[test]
fn unmount_at_leaves_the_copy_of_another_namespace_served() {
    vgpu_sim::fuse_for_test();
    let dir = tempfile::tempdir().expect("mount point");
    let profile = Profile::builtin("t4-legacy").expect("profile");
    let h = SimHost::mount_at(profile, dir.path()).expect("mount");
    let mut copy = NamespaceCopy::start(dir.path());
    h.unmount().expect("unmount");
    assert_eq!(
        (is_mounted(dir.path()), copy.probe()),
        (false, "copy=1 served=1".to_owned())
    );
}

/// A file of the mount open in this process is served after the detach, and the unmount
/// returns once it is closed (exiting with it open would hang: its FLUSH would go to this
/// process).
#[test]
fn unmount_waits_for_a_file_this_process_holds() {
    let h = host("t4-legacy");
    let root = h.root().to_owned();
    let mut file = std::fs::File::open(root.join("sys/bus/pci/devices").join(T4).join("vendor"))
        .expect("open vendor");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(h.unmount().is_ok()));
    assert!(eventually(|| !is_mounted(&root)), "not detached");
    let mut vendor = String::new();
    file.read_to_string(&mut vendor)
        .expect("read after the detach");
    let waiting = rx.try_recv().is_err();
    drop(file);
    assert_eq!(
        (
            vendor.as_str(),
            waiting,
            rx.recv().expect("unmount returns")
        ),
        ("0x10de\n", true, true)
    );
}
