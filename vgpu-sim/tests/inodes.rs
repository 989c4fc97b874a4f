//! The inode table: the kernel's references (lookups) hold an inode, `forget` drops it, and
//! entries that vanished are invalidated, so create/destroy churn leaves the table as small
//! as the part of the tree still there that was walked.

mod common;

use std::os::unix::fs::MetadataExt as _;

use common::{T4, UUID_A, echo, eventually, host, link_name, mdev_dir, mdev_type};
use vgpu_sim::{FsOp, SimHost};

/// Mediated devices created and removed by [`churn`].
const CYCLES: u32 = 200;

/// More than the paths that stay after [`churn`]: the directories down to the T4's
/// `nvidia-231/create` (through `sys/class/mdev_bus`, and `sys/devices/...`) and to
/// `sys/bus/mdev/devices`, about twenty. Without `forget` the table would hold every mdev's
/// entries too: more than four per cycle.
const BOUND: u64 = 32;

/// Creates and removes [`CYCLES`] mdevs, each with a UUID of its own, reading each one's
/// `mdev_type` link and `remove` file as a management tool does.
fn churn(h: &SimHost) {
    for i in 0..CYCLES {
        let uuid = format!("{i:08x}-0000-4000-8000-000000000000");
        echo(&mdev_type(h, T4, "nvidia-231", "create"), &uuid).expect("create");
        let dir = mdev_dir(h, &uuid);
        std::fs::read_link(dir.join("mdev_type")).expect("mdev_type link");
        std::fs::metadata(dir.join("remove")).expect("stat remove");
        echo(&dir.join("remove"), "1").expect("remove");
    }
}

#[test]
fn forget_after_mdev_churn_keeps_inode_table_bounded() {
    let h = host("t4-legacy");
    h.reset_counters();
    churn(&h);
    let lookups = h.counters().get(FsOp::Lookup);
    assert_eq!(
        (
            lookups >= u64::from(CYCLES) * 4,
            eventually(|| h.counters().inodes() <= BOUND)
        ),
        (true, true),
        "{lookups} lookups, {} inodes held",
        h.counters().inodes()
    );
}

#[test]
fn inode_held_open_keeps_its_number_through_churn() {
    let h = host("t4-legacy");
    let path = mdev_type(&h, T4, "nvidia-231", "available_instances");
    let file = std::fs::File::open(&path).expect("open");
    let held = file.metadata().expect("fstat").ino();
    churn(&h);
    assert_eq!(std::fs::metadata(&path).expect("stat").ino(), held);
}

#[test]
fn removed_mdev_entries_are_forgotten() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    std::fs::metadata(mdev_dir(&h, UUID_A).join("remove")).expect("stat");
    let with_mdev = h.counters().inodes();
    echo(&mdev_dir(&h, UUID_A).join("remove"), "1").expect("remove");
    // Its directory, link and files go; the type's `create` and the directories stay.
    assert!(eventually(|| h.counters().inodes() < with_mdev));
}

#[test]
fn lookup_after_forget_serves_the_path_under_a_new_number() {
    let h = host("t4-legacy");
    let create = mdev_type(&h, T4, "nvidia-231", "create");
    echo(&create, UUID_A).expect("create");
    let remove = mdev_dir(&h, UUID_A).join("remove");
    let first = std::fs::metadata(&remove).expect("stat").ino();
    let with_mdev = h.counters().inodes();
    echo(&remove, "1").expect("remove");
    assert!(eventually(|| h.counters().inodes() < with_mdev));
    echo(&create, UUID_A).expect("create again");
    assert_eq!(
        (
            std::fs::metadata(&remove).expect("stat again").ino() != first,
            link_name(&mdev_dir(&h, UUID_A).join("mdev_type"))
        ),
        (true, Some("nvidia-231".to_owned()))
    );
}
