//! IOMMU and DMA-remapping checks on fake host trees.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use vgpu_core::checks::{Check, check_host};
use vgpu_core::checks::{Report, Status};
use vgpu_core::{discover, model::pci::PciAddress};
use vgpu_testing::scenarios::{self, L40sVendorVfio, NVIDIA, T4Legacy};
use vgpu_testing::{FakeHost, PciSpec, addr};

fn report(host: &FakeHost) -> Report {
    let inventory = discover(&host.paths()).expect("discovery");
    check_host(&host.paths(), &inventory)
}

fn check<'a>(report: &'a Report, id: &str) -> &'a Check {
    report
        .checks
        .iter()
        .find(|c| c.id == id)
        .expect("check present")
}

fn status(host: &FakeHost, id: &str) -> Status {
    check(&report(host), id).status
}

fn good_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    scenarios::t4_legacy(
        &host,
        &T4Legacy {
            address: addr("0000:3b:00.0"),
            group: 12,
            numa: 0,
            used: &[],
        },
    )
    .unwrap();
    host
}

#[test]
fn good_intel_host_passes_every_check() {
    let statuses: Vec<(&str, Status)> = report(&good_host())
        .checks
        .iter()
        .map(|c| (c.id, c.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("cpu-virtualization", Status::Pass),
            ("iommu-firmware", Status::Pass),
            ("iommu-enabled", Status::Pass),
            ("iommu-cmdline", Status::Pass),
            ("interrupt-remapping", Status::Pass),
            ("iommu-groups", Status::Pass),
            ("vfio", Status::Pass),
        ]
    );
}

#[test]
fn good_amd_host_passes_interrupt_remapping() {
    let host = FakeHost::new().unwrap();
    host.amd_iommu_host().unwrap();
    assert_eq!(status(&host, "interrupt-remapping"), Status::Pass);
}

#[test]
fn good_host_gpu_is_isolated() {
    let r = report(&good_host());
    assert_eq!(
        (r.devices[0].iommu_group, r.devices[0].isolated),
        (Some(12), true)
    );
}

fn no_iommu_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.cpu("fpu vmx sse").unwrap();
    host.write("proc/cmdline", "root=/dev/sda1 ro\n").unwrap();
    host.pci(&PciSpec::new(addr("0000:3b:00.0"), NVIDIA, 0x1eb8, 0x030200).driver("nvidia"))
        .unwrap();
    host
}

#[test]
fn no_iommu_firmware_is_fail() {
    assert_eq!(status(&no_iommu_host(), "iommu-firmware"), Status::Fail);
}

#[test]
fn no_iommu_enabled_is_fail_with_firmware_remedy() {
    let r = report(&no_iommu_host());
    let c = check(&r, "iommu-enabled");
    assert_eq!(
        (c.status, c.remedy.as_deref()),
        (
            Status::Fail,
            Some("enable VT-d/AMD-Vi in the firmware setup, then reboot")
        )
    );
}

#[test]
fn no_iommu_groups_is_fail() {
    assert_eq!(status(&no_iommu_host(), "iommu-groups"), Status::Fail);
}

#[test]
fn no_iommu_interrupt_remapping_is_fail() {
    assert_eq!(
        status(&no_iommu_host(), "interrupt-remapping"),
        Status::Fail
    );
}

#[test]
fn no_iommu_vfio_missing_is_fail() {
    assert_eq!(status(&no_iommu_host(), "vfio"), Status::Fail);
}

#[test]
fn no_iommu_device_is_not_isolated() {
    let r = report(&no_iommu_host());
    assert_eq!(
        (r.devices[0].iommu_group, r.devices[0].isolated),
        (None, false)
    );
}

fn intel_iommu_off_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    host.remove("sys/class/iommu/dmar0").unwrap();
    host.write(
        "proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n",
    )
    .unwrap();
    host
}

#[test]
fn intel_without_cmdline_flag_enabled_fails_with_cmdline_remedy() {
    let r = report(&intel_iommu_off_host());
    let c = check(&r, "iommu-enabled");
    assert_eq!(
        (c.status, c.remedy.as_deref()),
        (
            Status::Fail,
            Some("add intel_iommu=on to the kernel command line and reboot")
        )
    );
}

#[test]
fn intel_without_cmdline_flag_cmdline_check_fails() {
    assert_eq!(
        status(&intel_iommu_off_host(), "iommu-cmdline"),
        Status::Fail
    );
}

#[test]
fn intel_without_cmdline_flag_firmware_still_passes() {
    assert_eq!(
        status(&intel_iommu_off_host(), "iommu-firmware"),
        Status::Pass
    );
}

#[test]
fn intel_iommu_on_by_default_passes_cmdline() {
    let host = good_host();
    host.write("proc/cmdline", "root=/dev/sda1 ro\n").unwrap();
    assert_eq!(
        check(&report(&host), "iommu-cmdline").summary,
        "(intel_iommu on by kernel default)"
    );
}

#[test]
fn explicit_intel_iommu_off_is_named_in_remedy() {
    let host = intel_iommu_off_host();
    host.write("proc/cmdline", "root=/dev/sda1 intel_iommu=off\n")
        .unwrap();
    let r = report(&host);
    assert_eq!(
        check(&r, "iommu-cmdline").remedy.as_deref(),
        Some("remove intel_iommu=off from the kernel command line")
    );
}

#[test]
fn no_interrupt_remapping_bit_is_fail() {
    let host = good_host();
    host.write("sys/class/iommu/dmar0/intel-iommu/ecap", "f020d7\n")
        .unwrap();
    let r = report(&host);
    let c = check(&r, "interrupt-remapping");
    assert_eq!(
        (c.status, c.summary.as_str()),
        (
            Status::Fail,
            "IOMMU unit(s) without interrupt remapping (ecap bit 3 clear): dmar0"
        )
    );
}

#[test]
fn no_interrupt_remapping_with_unsafe_override_is_warn() {
    let host = good_host();
    host.write("sys/class/iommu/dmar0/intel-iommu/ecap", "f020d7\n")
        .unwrap();
    host.write(
        "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts",
        "Y\n",
    )
    .unwrap();
    assert_eq!(status(&host, "interrupt-remapping"), Status::Warn);
}

#[test]
fn intremap_off_is_fail() {
    let host = good_host();
    host.write("proc/cmdline", "intel_iommu=on intremap=off\n")
        .unwrap();
    assert_eq!(status(&host, "interrupt-remapping"), Status::Fail);
}

#[test]
fn garbage_ecap_is_warn_naming_path() {
    let host = good_host();
    host.write("sys/class/iommu/dmar0/intel-iommu/ecap", "zz\n")
        .unwrap();
    let r = report(&host);
    let c = check(&r, "interrupt-remapping");
    assert!(
        c.status == Status::Warn && c.summary.contains("dmar0/intel-iommu/ecap"),
        "{c:?}"
    );
}

#[test]
fn cpu_without_vmx_is_fail() {
    let host = good_host();
    host.cpu("fpu sse").unwrap();
    assert_eq!(status(&host, "cpu-virtualization"), Status::Fail);
}

#[test]
fn vfio_without_driver_is_warn() {
    let host = good_host();
    host.remove("sys/bus/pci/drivers/vfio-pci").unwrap();
    host.remove("sys/module/vfio_pci").unwrap();
    assert_eq!(status(&host, "vfio"), Status::Warn);
}

const ROOT_PORT: &str = "0000:00:01.0";
const SWITCH_UP: &str = "0000:01:00.0";
const SWITCH_DOWN_GPU: &str = "0000:02:00.0";
const SWITCH_DOWN_NIC: &str = "0000:02:01.0";
const GPU: &str = "0000:03:00.0";
const GPU_AUDIO: &str = "0000:03:00.1";
const NIC: &str = "0000:04:00.0";

/// A GPU and a NIC behind one PCIe switch without ACS: everything lands in group 5.
fn shared_group_host() -> FakeHost {
    let host = good_host();
    let bridge = |a: &str, parent: Option<&str>| {
        let spec = PciSpec::new(addr(a), 0x8086, 0x2030, 0x060400)
            .driver("pcieport")
            .group(5);
        match parent {
            Some(p) => spec.behind(addr(p)),
            None => spec,
        }
    };
    host.pci(&bridge(ROOT_PORT, None)).unwrap();
    host.pci(&bridge(SWITCH_UP, Some(ROOT_PORT))).unwrap();
    host.pci(&bridge(SWITCH_DOWN_GPU, Some(SWITCH_UP))).unwrap();
    host.pci(&bridge(SWITCH_DOWN_NIC, Some(SWITCH_UP))).unwrap();
    host.pci(
        &PciSpec::new(addr(GPU), NVIDIA, 0x2204, 0x030000)
            .driver("nvidia")
            .group(5)
            .behind(addr(SWITCH_DOWN_GPU)),
    )
    .unwrap();
    host.pci(
        &PciSpec::new(addr(GPU_AUDIO), NVIDIA, 0x1aef, 0x040300)
            .driver("snd_hda_intel")
            .group(5)
            .behind(addr(SWITCH_DOWN_GPU)),
    )
    .unwrap();
    host.pci(
        &PciSpec::new(addr(NIC), 0x8086, 0x1572, 0x020000)
            .driver("i40e")
            .group(5)
            .behind(addr(SWITCH_DOWN_NIC)),
    )
    .unwrap();
    host
}

fn device(report: &Report, address: PciAddress) -> &vgpu_core::checks::DeviceIsolation {
    report
        .devices
        .iter()
        .find(|d| d.address == address)
        .expect("device listed")
}

#[test]
fn shared_group_gpu_is_not_isolated() {
    let r = report(&shared_group_host());
    assert!(!device(&r, addr(GPU)).isolated);
}

#[test]
fn shared_group_nic_is_the_only_blocker() {
    let r = report(&shared_group_host());
    let blockers: Vec<(String, Option<&str>)> = device(&r, addr(GPU))
        .blockers
        .iter()
        .map(|b| (b.address.to_string(), b.driver.as_deref()))
        .collect();
    assert_eq!(blockers, [(NIC.to_owned(), Some("i40e"))]);
}

#[test]
fn shared_group_audio_function_is_a_companion() {
    let r = report(&shared_group_host());
    let companions: Vec<String> = device(&r, addr(GPU))
        .companions
        .iter()
        .map(|c| c.address.to_string())
        .collect();
    assert_eq!(companions, [GPU_AUDIO]);
}

#[test]
fn shared_group_makes_iommu_groups_warn() {
    let r = report(&shared_group_host());
    let c = check(&r, "iommu-groups");
    assert_eq!(
        (c.status, c.summary.as_str()),
        (
            Status::Warn,
            "GPU function(s) sharing their IOMMU group with other devices: 0000:03:00.0"
        )
    );
}

#[test]
fn shared_group_nic_bound_to_vfio_is_not_a_blocker() {
    let host = shared_group_host();
    host.remove(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/driver",
    )
    .unwrap();
    host.bind(addr(NIC), "vfio-pci").unwrap();
    assert!(device(&report(&host), addr(GPU)).isolated);
}

#[test]
fn shared_group_nic_unbound_is_not_a_blocker() {
    let host = shared_group_host();
    host.remove(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/driver",
    )
    .unwrap();
    assert!(device(&report(&host), addr(GPU)).isolated);
}

#[test]
fn report_worst_of_shared_group_is_fail() {
    assert_eq!(report(&shared_group_host()).worst(), Status::Fail);
}

#[test]
fn vfs_are_checked_after_their_pf() {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    scenarios::l40s_vendor_vfio(
        &host,
        &L40sVendorVfio {
            address: addr("0000:81:00.0"),
            group: 60,
            vfs: 2,
            used: 0,
        },
    )
    .unwrap();
    let groups: Vec<Option<u32>> = report(&host)
        .devices
        .iter()
        .map(|d| d.iommu_group)
        .collect();
    assert_eq!(groups, [Some(60), Some(61), Some(62)]);
}

#[test]
fn only_mdev_groups_without_iommu_is_fail() {
    let host = no_iommu_host();
    // An mdev's emulated group exists without any IOMMU.
    host.write("sys/kernel/iommu_groups/300/devices/.keep", "")
        .unwrap();
    host.link(
        "sys/kernel/iommu_groups/300/devices/6a8f0a3c-1111-4d2e-9b7a-000000000001",
        "sys/devices/virtual/mdev",
    )
    .unwrap();
    assert_eq!(status(&host, "iommu-groups"), Status::Fail);
}
