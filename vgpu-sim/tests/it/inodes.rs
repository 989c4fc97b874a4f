//! The inode table: the kernel's references (lookups) hold an inode, `forget` drops it, and
//! entries of vanished paths that no open file uses are swept, so create/destroy churn leaves
//! the table bounded by the part of the tree still there.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;

use crate::common::{T4, UUID_A, echo, host, link_name, mdev_dir, mdev_type};
use vgpu_sim::{FsOp, SimHost};

/// Mediated devices created and removed by [`churn`].
const CYCLES: u32 = 200;

/// The most inodes held after [`churn`]: the paths still there that it walked (about twenty
/// directories down to the T4's `nvidia-231/create` and to `sys/bus/mdev/devices`), doubled
/// by the sweep's rhythm, plus its 64-entry floor. Without sweeping, the table holds every
/// mdev's directory, links and files too: more than four per cycle.
const BOUND: u64 = 128;

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
fn mdev_churn_keeps_inode_table_bounded() {
    let h = host("t4-legacy");
    h.reset_counters();
    churn(&h);
    let c = h.counters();
    assert_eq!(
        (
            c.get(FsOp::Lookup) >= u64::from(CYCLES) * 4,
            c.inodes() <= BOUND
        ),
        (true, true),
        "{} lookups, {} inodes held",
        c.get(FsOp::Lookup),
        c.inodes()
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
fn open_file_of_removed_mdev_answers_enodev_through_churn() {
    let h = host("t4-legacy");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    let mut remove = std::fs::OpenOptions::new()
        .write(true)
        .open(mdev_dir(&h, UUID_A).join("remove"))
        .expect("open remove");
    remove.write_all(b"1").expect("remove");
    churn(&h);
    assert_eq!(
        remove.write_all(b"1").map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENODEV))
    );
}

#[test]
fn recreated_mdev_after_sweep_is_served_under_a_new_number() {
    let h = host("t4-legacy");
    let create = mdev_type(&h, T4, "nvidia-231", "create");
    echo(&create, UUID_A).expect("create");
    let remove = mdev_dir(&h, UUID_A).join("remove");
    let first = std::fs::metadata(&remove).expect("stat").ino();
    echo(&remove, "1").expect("remove");
    churn(&h);
    echo(&create, UUID_A).expect("create again");
    assert_eq!(
        (
            std::fs::metadata(&remove).expect("stat again").ino() != first,
            link_name(&mdev_dir(&h, UUID_A).join("mdev_type"))
        ),
        (true, Some("nvidia-231".to_owned()))
    );
}
