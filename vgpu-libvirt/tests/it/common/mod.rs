//! What the integration tests share: libvirt's embedded QEMU driver under one directory per
//! test binary (libvirt allows one embedded root per process), minimal domains, domains that
//! are stopped and undefined when a test ends, and inventories built by hand.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)] // each test binary uses a part

use std::path::PathBuf;
use std::sync::OnceLock;

use uuid::Uuid;
use vgpu_core::model::{Backend, Gpu, Inventory, Vf, Vgpu, VgpuHandle};
use vgpu_domain::embedded_uri;
use vgpu_libvirt::Connection;

const NEEDS: &str = "these tests run libvirt's embedded QEMU driver (qemu:///embed): they need \
     root, the packages libvirt-daemon-driver-qemu and qemu-system-x86, and the libvirt-qemu \
     user and group (scripts/install-deps.sh installs all of them)";

/// The embedded driver's root of this test binary: `target/tmp/embed-<name>`, emptied when the
/// binary first uses it.
fn root(name: &str) -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next().map(str::to_owned));
        assert_eq!(uid.as_deref(), Some("0"), "not running as root: {NEEDS}");
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("embed-{name}"));
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .unwrap_or_else(|e| panic!("cannot empty {}: {e}", root.display()));
        }
        std::fs::create_dir_all(&root)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", root.display()));
        root
    })
}

/// The URI of this test binary's embedded driver.
pub fn uri(binary: &str) -> String {
    embedded_uri(root(binary))
}

/// A connection to this test binary's embedded driver; fails the test, saying what is
/// needed, when the driver cannot be opened.
pub fn connect(binary: &str) -> Connection {
    Connection::open(&uri(binary)).unwrap_or_else(|e| panic!("{NEEDS}; opening failed: {e}"))
}

/// The domain XML of `name` (`inactive`: the persistent definition), read with `virt`
/// directly, as a check independent of the code under test.
pub fn domain_xml(binary: &str, name: &str, inactive: bool) -> String {
    let conn = virt::connect::Connect::open(Some(&uri(binary))).unwrap();
    let dom = conn.lookup_domain_by_name(name).unwrap();
    let flags = if inactive {
        virt::sys::VIR_DOMAIN_XML_INACTIVE
    } else {
        0
    };
    dom.xml_desc(flags).unwrap()
}

/// The smallest domain the QEMU driver defines and starts: 64 MiB, no disk, TCG.
pub fn minimal_domain(name: &str, devices: &str) -> String {
    domain_with_metadata(name, "", devices)
}

/// [`minimal_domain`] with `metadata` (elements of applications' namespaces) in its
/// `<metadata>`.
pub fn domain_with_metadata(name: &str, metadata: &str, devices: &str) -> String {
    format!(
        "<domain type='qemu'><name>{name}</name><metadata>{metadata}</metadata>\
         <memory unit='MiB'>64</memory>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os>\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{devices}</devices></domain>"
    )
}

/// A domain that is stopped (when running) and undefined when dropped, even when the test
/// fails.
pub struct TestDomain<'a> {
    pub conn: &'a Connection,
    pub name: String,
}

impl<'a> TestDomain<'a> {
    pub fn define(conn: &'a Connection, name: &str, devices: &str) -> Self {
        Self::define_with_metadata(conn, name, "", devices)
    }

    pub fn define_with_metadata(
        conn: &'a Connection,
        name: &str,
        metadata: &str,
        devices: &str,
    ) -> Self {
        conn.define(&domain_with_metadata(name, metadata, devices))
            .unwrap_or_else(|e| panic!("defining {name}: {e}"));
        TestDomain {
            conn,
            name: name.to_owned(),
        }
    }
}

impl Drop for TestDomain<'_> {
    fn drop(&mut self) {
        if self.conn.domain(&self.name).is_ok_and(|d| d.running) {
            let _stopped = self.conn.stop(&self.name);
        }
        let _undefined = self.conn.undefine(&self.name);
    }
}

pub use vgpu_testing::addr;

pub fn mdev(n: u128) -> Uuid {
    Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000000 | n)
}

pub fn gpu(address: &str, backend: Backend) -> Gpu {
    Gpu {
        vendor_id: Some(0x10de),
        class: Some(0x030200),
        driver: Some("nvidia".to_owned()),
        ..Gpu::new(addr(address), backend)
    }
}

pub fn vf(address: &str, driver: &str) -> Vf {
    Vf {
        address: addr(address),
        driver: Some(driver.to_owned()),
        iommu_group: None,
        vgpu_type: None,
        memory_mib: None,
    }
}

/// A T4 with mdevs `mdevs` (numbers for [`mdev`]), an L40S whose VFs `vendor_vfs` hold
/// vendor-VFIO vGPUs, and a Flex whose VFs `plain_vfs` are bound to `vfio-pci`.
pub fn inventory(mdevs: &[u128], vendor_vfs: &[&str], plain_vfs: &[&str]) -> Inventory {
    let mut t4 = gpu("0000:3b:00.0", Backend::Mdev);
    t4.vgpus = mdevs
        .iter()
        .map(|&n| Vgpu {
            placement: None,
            id: VgpuHandle::Mdev(mdev(n)),
            type_id: "nvidia-222".to_owned(),
            parent: addr("0000:3b:00.0"),
        })
        .collect();
    let mut l40s = gpu("0000:41:00.0", Backend::NvidiaVfio);
    for address in vendor_vfs {
        l40s.vfs.push(vf(address, "nvidia"));
        l40s.vgpus.push(Vgpu {
            placement: None,
            id: VgpuHandle::Vf(addr(address)),
            type_id: "1145".to_owned(),
            parent: addr("0000:41:00.0"),
        });
    }
    let mut flex = gpu("0001:03:00.0", Backend::Sriov);
    flex.vfs = plain_vfs.iter().map(|a| vf(a, "vfio-pci")).collect();
    Inventory {
        gpus: vec![t4, l40s, flex],
        warnings: Vec::new(),
    }
}
