//! Files real sysfs has that libvirt and libudev read: each PCI function's `config` and
//! `revision`, every device directory's `uevent`, `sys/devices/system/cpu`.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

use crate::common::{IGPU, T4, UUID_A, cat, echo, host, link, ls, mdev_type, pci};

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read")
}

#[test]
fn config_of_t4_is_4096_bytes_with_its_ids() {
    let h = host("mixed");
    let c = bytes(&pci(&h, T4, "config"));
    assert_eq!(
        (c.len(), &c[..4], &c[0x2c..0x30]),
        (
            4096,
            &[0xde, 0x10, 0xb8, 0x1e][..],
            &[0xde, 0x10, 0xa2, 0x12][..]
        )
    );
}

#[test]
fn config_class_bytes_equal_class_file() {
    let h = host("mixed");
    let c = bytes(&pci(&h, T4, "config"));
    let class = u32::from_le_bytes([c[9], c[10], c[11], 0]);
    assert_eq!(cat(&pci(&h, T4, "class")), Ok(format!("{class:#08x}\n")));
}

#[test]
fn config_read_from_offset_returns_that_range() {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let h = host("mixed");
    let mut f = std::fs::File::open(pci(&h, T4, "config")).expect("open");
    f.seek(SeekFrom::Start(0x34)).expect("seek");
    let mut cap = [0u8; 1];
    f.read_exact(&mut cap).expect("read");
    assert_eq!(cap, [0x40]);
}

#[test]
fn config_open_for_write_is_eacces() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, T4, "config"), "x"), Err(libc::EACCES));
}

#[test]
fn config_read_by_unprivileged_user_is_first_64_bytes() {
    let h = host("mixed");
    let path = pci(&h, T4, "config");
    // As `nobody`: the simulator is mounted with allow_other when it runs as root.
    let out = Command::new("wc")
        .arg("-c")
        .arg(&path)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run wc as nobody");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next(),
        Some("64")
    );
}

#[test]
fn config_sriov_num_vfs_follows_sriov_numvfs() {
    let h = host("mixed");
    let flex = "0001:03:00.0";
    echo(&pci(&h, flex, "sriov_numvfs"), "4").expect("i915 enables VFs");
    let c = bytes(&pci(&h, flex, "config"));
    assert_eq!((c[0x108], c[0x110]), (0x09, 4));
}

#[test]
fn revision_reads_hex_byte() {
    let h = host("mixed");
    assert_eq!(cat(&pci(&h, T4, "revision")), Ok("0x00\n".into()));
}

#[test]
fn uevent_of_mdev_names_its_driver() {
    let h = host("mixed");
    echo(&mdev_type(&h, T4, "nvidia-231", "create"), UUID_A).expect("create");
    assert_eq!(
        cat(&pci(&h, T4, &format!("{UUID_A}/uevent"))),
        Ok("DRIVER=nvidia-vgpu-vfio\n".into())
    );
}

#[test]
fn uevent_of_pci_function_has_pci_uevent_variables() {
    let h = host("mixed");
    assert_eq!(
        cat(&pci(&h, T4, "uevent")),
        Ok(
            "DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:1EB8\nPCI_SUBSYS_ID=10DE:12A2\n\
            PCI_SLOT_NAME=0000:3b:00.0\n\
            MODALIAS=pci:v000010DEd00001EB8sv000010DEsd000012A2bc03sc02i00\n"
                .into()
        )
    );
}

#[test]
fn uevent_of_root_bus_is_empty() {
    let h = host("mixed");
    assert_eq!(
        cat(&h.root().join("sys/devices/pci0000:00/uevent")),
        Ok(String::new())
    );
}

#[test]
fn cpu_online_possible_present_span_profile_cpus() {
    let h = host("l40s-vendor-vfio");
    let cpu = h.root().join("sys/devices/system/cpu");
    assert_eq!(
        (
            cat(&cpu.join("online")),
            cat(&cpu.join("possible")),
            cat(&cpu.join("present"))
        ),
        (
            Ok("0-15\n".into()),
            Ok("0-15\n".into()),
            Ok("0-15\n".into())
        )
    );
}

#[test]
fn cpu_directory_lists_one_directory_per_cpu() {
    let h = host("l40s-vendor-vfio");
    let names = ls(&h.root().join("sys/devices/system/cpu")).expect("ls");
    assert_eq!(names.iter().filter(|n| n.starts_with("cpu")).count(), 16);
}

#[test]
fn cpu0_has_no_online_file() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        cat(&h.root().join("sys/devices/system/cpu/cpu0/online")),
        Err(libc::ENOENT)
    );
}

#[test]
fn cpu_topology_of_cpu9_reads_core_and_siblings() {
    let h = host("l40s-vendor-vfio");
    let t = h.root().join("sys/devices/system/cpu/cpu9/topology");
    assert_eq!(
        (
            cat(&t.join("physical_package_id")),
            cat(&t.join("die_id")),
            cat(&t.join("core_id")),
            cat(&t.join("thread_siblings_list")),
            cat(&t.join("thread_siblings")),
            cat(&t.join("core_siblings_list")),
        ),
        (
            Ok("0\n".into()),
            Ok("0\n".into()),
            Ok("9\n".into()),
            Ok("9\n".into()),
            Ok("0200\n".into()),
            Ok("0-15\n".into()),
        )
    );
}

#[test]
fn cpu9_links_to_its_numa_node() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        link(&h.root().join("sys/devices/system/cpu/cpu9/node1")),
        Ok("../../node/node1".into())
    );
}

#[test]
fn numa_node_lists_its_cpus() {
    let h = host("l40s-vendor-vfio");
    let names = ls(&h.root().join("sys/devices/system/node/node1")).expect("ls");
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("cpu") && n[3..].parse::<u32>().is_ok())
            .cloned()
            .collect::<Vec<_>>(),
        [
            "cpu10", "cpu11", "cpu12", "cpu13", "cpu14", "cpu15", "cpu8", "cpu9"
        ]
    );
}

#[test]
fn cpu_uevent_has_modalias_of_amd_cpu() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        cat(&h.root().join("sys/devices/system/cpu/cpu0/uevent")),
        Ok("MODALIAS=cpu:type:x86,ven0002fam0019mod0011:feature:\n".into())
    );
}

#[test]
fn igpu_config_header_type_is_single_function_endpoint() {
    let h = host("gvtg");
    assert_eq!(bytes(&pci(&h, IGPU, "config"))[0x0e], 0);
}
