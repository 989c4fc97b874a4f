//! Discovery on fake host trees laid out as the kernel does.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use uuid::Uuid;
use vgpu_core::{
    discover,
    model::{Backend, Inventory, VgpuHandle},
};
use vgpu_testing::scenarios::{
    self, A40VfMdev, INTEL, L40sVendorVfio, NVIDIA, T4Legacy, vf_address,
};
use vgpu_testing::{FakeHost, PciSpec, addr};

const UUID_A: Uuid = Uuid::from_u128(0x6a8f_0a3c_1111_4d2e_9b7a_0000_0000_0001);
const UUID_B: Uuid = Uuid::from_u128(0x6a8f_0a3c_1111_4d2e_9b7a_0000_0000_0002);

fn inventory(host: &FakeHost) -> Inventory {
    discover(&host.paths()).expect("discovery")
}

fn t4_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    let used = [("nvidia-231", UUID_A), ("nvidia-231", UUID_B)];
    scenarios::t4_legacy(
        &host,
        &T4Legacy {
            address: addr("0000:3b:00.0"),
            group: 12,
            numa: 0,
            used: &used,
        },
    )
    .unwrap();
    host
}

#[test]
fn t4_legacy_backend_is_mdev() {
    assert_eq!(inventory(&t4_host()).gpus[0].backend, Backend::Mdev);
}

#[test]
fn t4_legacy_pci_facts_are_read() {
    let inv = inventory(&t4_host());
    let gpu = &inv.gpus[0];
    assert_eq!(
        (
            gpu.vendor_id,
            gpu.device_id,
            gpu.driver.as_deref(),
            gpu.numa_node,
            gpu.iommu_group
        ),
        (
            Some(NVIDIA),
            Some(0x1eb8),
            Some("nvidia"),
            Some(0),
            Some(12)
        )
    );
}

#[test]
fn t4_legacy_names_come_from_pci_id_database() {
    let inv = inventory(&t4_host());
    assert_eq!(
        (inv.gpus[0].vendor.as_deref(), inv.gpus[0].model.as_deref()),
        (Some("NVIDIA Corporation"), Some("TU104GL [Tesla T4]"))
    );
}

#[test]
fn t4_legacy_type_in_use_counts_capacity() {
    let inv = inventory(&t4_host());
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "nvidia-231")
        .unwrap();
    assert_eq!(
        (
            t.name.as_deref(),
            t.framebuffer_mib,
            t.max_instances,
            t.available,
            t.in_use
        ),
        (Some("GRID T4-2Q"), Some(2048), Some(8), 6, 2)
    );
}

#[test]
fn t4_legacy_other_types_are_unavailable_while_one_is_used() {
    let inv = inventory(&t4_host());
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "nvidia-222")
        .unwrap();
    assert_eq!((t.available, t.in_use, t.max_instances), (0, 0, Some(16)));
}

#[test]
fn t4_legacy_types_are_in_natural_id_order() {
    let inv = inventory(&t4_host());
    let ids: Vec<&str> = inv.gpus[0].types.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["nvidia-222", "nvidia-231", "nvidia-232", "nvidia-234"]
    );
}

#[test]
fn t4_legacy_vgpus_are_listed_with_parent() {
    let inv = inventory(&t4_host());
    let listed: Vec<(String, &str, String)> = inv.gpus[0]
        .vgpus
        .iter()
        .map(|v| (v.id.to_string(), v.type_id.as_str(), v.parent.to_string()))
        .collect();
    assert_eq!(
        listed,
        [
            (UUID_A.to_string(), "nvidia-231", "0000:3b:00.0".to_owned()),
            (UUID_B.to_string(), "nvidia-231", "0000:3b:00.0".to_owned()),
        ]
    );
}

fn a40_host(vfs: u32, used: u32) -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    scenarios::a40_vf_mdev(
        &host,
        &A40VfMdev {
            address: addr("0000:41:00.0"),
            vfs,
            used,
        },
    )
    .unwrap();
    host
}

#[test]
fn a40_vf_mdev_backend_is_vf_mdev() {
    assert_eq!(inventory(&a40_host(32, 0)).gpus[0].backend, Backend::VfMdev);
}

#[test]
fn a40_vf_mdev_vfs_are_not_gpus() {
    assert_eq!(inventory(&a40_host(32, 0)).gpus.len(), 1);
}

#[test]
fn a40_vf_mdev_capacity_is_per_gpu_not_per_vf() {
    let inv = inventory(&a40_host(32, 0));
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "nvidia-558")
        .unwrap();
    assert_eq!((t.max_instances, t.available, t.in_use), (Some(24), 24, 0));
}

#[test]
fn a40_vf_mdev_used_vfs_lower_availability() {
    let inv = inventory(&a40_host(32, 3));
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "nvidia-558")
        .unwrap();
    assert_eq!((t.available, t.in_use), (21, 3));
}

#[test]
fn a40_vf_mdev_sriov_counts_are_read() {
    let inv = inventory(&a40_host(32, 0));
    let sriov = inv.gpus[0].sriov.as_ref().unwrap();
    assert_eq!(
        (sriov.total_vfs, sriov.num_vfs, sriov.vf_device_id),
        (32, 32, Some(0x2235))
    );
}

#[test]
fn a40_vf_mdev_vgpu_parent_is_the_vf() {
    let inv = inventory(&a40_host(4, 1));
    let vgpu = &inv.gpus[0].vgpus[0];
    assert_eq!(
        (vgpu.parent, vgpu.type_id.as_str()),
        (vf_address(addr("0000:41:00.0"), 0).unwrap(), "nvidia-558")
    );
}

#[test]
fn a40_vf_mdev_vf_shows_type_it_holds() {
    let inv = inventory(&a40_host(4, 1));
    let vfs: Vec<Option<&str>> = inv.gpus[0]
        .vfs
        .iter()
        .map(|v| v.vgpu_type.as_deref())
        .collect();
    assert_eq!(vfs, [Some("nvidia-558"), None, None, None]);
}

fn l40s_host(vfs: u32, used: u32) -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    scenarios::l40s_vendor_vfio(
        &host,
        &L40sVendorVfio {
            address: addr("0000:81:00.0"),
            group: 60,
            vfs,
            used,
        },
    )
    .unwrap();
    host
}

#[test]
fn l40s_vendor_vfio_backend_is_nvidia_vfio() {
    assert_eq!(
        inventory(&l40s_host(8, 0)).gpus[0].backend,
        Backend::NvidiaVfio
    );
}

#[test]
fn l40s_vendor_vfio_type_ids_are_decimal_and_sorted() {
    let inv = inventory(&l40s_host(8, 0));
    let ids: Vec<&str> = inv.gpus[0].types.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["1145", "1152", "1156"]);
}

#[test]
fn l40s_vendor_vfio_facts_come_from_name_and_catalog() {
    let inv = inventory(&l40s_host(8, 0));
    let t = inv.gpus[0].types.iter().find(|t| t.id == "1152").unwrap();
    assert_eq!(
        (
            t.name.as_deref(),
            t.framebuffer_mib,
            t.max_instances,
            t.available,
            t.in_use
        ),
        (Some("NVIDIA L40S-8Q"), Some(8192), Some(6), 6, 0)
    );
}

#[test]
fn l40s_vendor_vfio_partly_used_counts_free_vfs_and_capacity() {
    let inv = inventory(&l40s_host(8, 2));
    let t = inv.gpus[0].types.iter().find(|t| t.id == "1152").unwrap();
    assert_eq!((t.available, t.in_use), (4, 2));
}

/// A VF whose `current_vgpu_type` does not read as a type id is a warning naming the file;
/// what the VF lists as creatable still counts, and it is not taken for a vGPU.
#[test]
fn l40s_vendor_vfio_unreadable_current_type_warns_and_still_counts_what_the_vf_offers() {
    let host = l40s_host(4, 0);
    let vf = vf_address(addr("0000:81:00.0"), 1).unwrap();
    let file = host
        .root()
        .join(format!("sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"));
    std::fs::write(&file, "garbage\n").unwrap();

    let inv = inventory(&host);

    let t = inv.gpus[0].types.iter().find(|t| t.id == "1152").unwrap();
    assert_eq!(
        (
            t.available,
            inv.gpus[0].vgpus.len(),
            inv.warnings.len(),
            inv.warnings[0].device.as_str(),
            inv.warnings[0].message.as_str()
        ),
        (
            4,
            0,
            1,
            vf.to_string().as_str(),
            format!(
                "unexpected content in {}: \"garbage\" (expected a type id or 0)",
                file.display()
            )
            .as_str()
        )
    );
}

#[test]
fn l40s_vendor_vfio_vgpus_are_the_vfs() {
    let inv = inventory(&l40s_host(8, 2));
    let ids: Vec<VgpuHandle> = inv.gpus[0].vgpus.iter().map(|v| v.id).collect();
    let pf = addr("0000:81:00.0");
    assert_eq!(
        ids,
        [
            VgpuHandle::Vf(vf_address(pf, 0).unwrap()),
            VgpuHandle::Vf(vf_address(pf, 1).unwrap())
        ]
    );
}

#[test]
fn l40s_vendor_vfio_full_card_has_nothing_available() {
    let inv = inventory(&l40s_host(8, 6));
    let t = &inv.gpus[0].types;
    assert_eq!(
        t.iter()
            .map(|t| (t.id.as_str(), t.available, t.in_use))
            .collect::<Vec<_>>(),
        [("1152", 0, 6)]
    );
}

#[test]
fn l40s_vendor_vfio_full_card_type_is_named_by_the_catalog() {
    let inv = inventory(&l40s_host(8, 6));
    let ty = &inv.gpus[0].types[0];
    assert_eq!(
        (ty.name.as_deref(), ty.name_source, ty.framebuffer_mib),
        (
            Some("NVIDIA L40S-8Q"),
            Some(vgpu_core::model::NameSource::Catalog),
            Some(8192)
        )
    );
}

#[test]
fn l40s_vendor_vfio_vf_shows_current_type() {
    let inv = inventory(&l40s_host(2, 1));
    let vfs: Vec<Option<&str>> = inv.gpus[0]
        .vfs
        .iter()
        .map(|v| v.vgpu_type.as_deref())
        .collect();
    assert_eq!(vfs, [Some("1152"), None]);
}

fn gvtg_host() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.intel_iommu_host().unwrap();
    scenarios::gvtg(&host, 1).unwrap();
    host
}

#[test]
fn gvtg_without_name_file_has_no_name() {
    let inv = inventory(&gvtg_host());
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "i915-GVTg_V5_4")
        .unwrap();
    assert_eq!(t.name, None);
}

#[test]
fn gvtg_capacity_comes_from_type_id_and_description() {
    let inv = inventory(&gvtg_host());
    let t = inv.gpus[0]
        .types
        .iter()
        .find(|t| t.id == "i915-GVTg_V5_4")
        .unwrap();
    assert_eq!(
        (t.framebuffer_mib, t.max_instances, t.available),
        (Some(640), Some(4), 4)
    );
}

#[test]
fn gvtg_numa_minus_one_is_unknown() {
    assert_eq!(inventory(&gvtg_host()).gpus[0].numa_node, None);
}

#[test]
fn domain_0001_gpu_keeps_its_domain() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(addr("0001:81:00.0"), NVIDIA, 0x26b9, 0x030200).driver("nvidia"))
        .unwrap();
    assert_eq!(inventory(&host).gpus[0].address.to_string(), "0001:81:00.0");
}

#[test]
fn plain_sriov_without_vfs_is_sriov_backend() {
    let host = FakeHost::new().unwrap();
    host.pci(
        &PciSpec::new(addr("0000:4d:00.0"), INTEL, 0x56c0, 0x038000)
            .driver("i915")
            .sriov(31, 0x56c0),
    )
    .unwrap();
    assert_eq!(inventory(&host).gpus[0].backend, Backend::Sriov);
}

#[test]
fn gpu_without_sriov_or_mdev_is_none_backend() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(addr("0000:01:00.0"), NVIDIA, 0x2204, 0x030000).driver("vfio-pci"))
        .unwrap();
    assert_eq!(inventory(&host).gpus[0].backend, Backend::None);
}

#[test]
fn accelerator_class_is_a_gpu() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(
        addr("0000:01:00.0"),
        0x1002,
        0x74a1,
        0x120000,
    ))
    .unwrap();
    assert_eq!(inventory(&host).gpus.len(), 1);
}

#[test]
fn audio_and_nic_functions_are_not_gpus() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(
        addr("0000:01:00.0"),
        NVIDIA,
        0x2204,
        0x030000,
    ))
    .unwrap();
    host.pci(&PciSpec::new(
        addr("0000:01:00.1"),
        NVIDIA,
        0x1aef,
        0x040300,
    ))
    .unwrap();
    host.pci(&PciSpec::new(
        addr("0000:02:00.0"),
        0x8086,
        0x1572,
        0x020000,
    ))
    .unwrap();
    let found: Vec<String> = inventory(&host)
        .gpus
        .iter()
        .map(|g| g.address.to_string())
        .collect();
    assert_eq!(found, ["0000:01:00.0"]);
}

fn one_gpu() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.pci(
        &PciSpec::new(addr("0000:01:00.0"), NVIDIA, 0x1eb8, 0x030200)
            .driver("nvidia")
            .numa(0),
    )
    .unwrap();
    host.pci(
        &PciSpec::new(addr("0000:02:00.0"), NVIDIA, 0x1eb8, 0x030200)
            .driver("nvidia")
            .numa(0),
    )
    .unwrap();
    host
}

#[test]
fn garbage_numa_node_is_warned_and_unknown() {
    let host = one_gpu();
    host.write("sys/devices/pci0000:01/0000:01:00.0/numa_node", "lots\n")
        .unwrap();
    let inv = inventory(&host);
    assert_eq!(
        (inv.gpus[0].numa_node, inv.warnings[0].device.as_str()),
        (None, "0000:01:00.0")
    );
}

#[test]
fn garbage_numa_node_warning_names_path_and_value() {
    let host = one_gpu();
    host.write("sys/devices/pci0000:01/0000:01:00.0/numa_node", "lots\n")
        .unwrap();
    let message = &inventory(&host).warnings[0].message;
    assert!(
        message.contains("0000:01:00.0/numa_node") && message.contains("\"lots\""),
        "{message}"
    );
}

#[test]
fn broken_device_does_not_hide_others() {
    let host = one_gpu();
    host.write("sys/devices/pci0000:01/0000:01:00.0/vendor", [0xff, 0xfe])
        .unwrap();
    assert_eq!(inventory(&host).gpus.len(), 2);
}

#[test]
fn non_utf8_vendor_is_warned() {
    let host = one_gpu();
    host.write("sys/devices/pci0000:01/0000:01:00.0/vendor", [0xff, 0xfe])
        .unwrap();
    let inv = inventory(&host);
    assert_eq!((inv.gpus[0].vendor_id, inv.warnings.len()), (None, 1));
}

#[test]
fn dangling_device_link_is_warned_and_skipped() {
    let host = one_gpu();
    host.remove("sys/devices/pci0000:02/0000:02:00.0").unwrap();
    let inv = inventory(&host);
    assert_eq!(
        (inv.gpus.len(), inv.warnings[0].device.as_str()),
        (1, "0000:02:00.0")
    );
}

#[test]
fn unreadable_class_skips_device_with_warning() {
    let host = one_gpu();
    host.remove("sys/devices/pci0000:02/0000:02:00.0/class")
        .unwrap();
    std::fs::create_dir(
        host.root()
            .join("sys/devices/pci0000:02/0000:02:00.0/class"),
    )
    .unwrap();
    let inv = inventory(&host);
    assert!(
        inv.warnings[0]
            .message
            .contains("Is a directory (os error 21)"),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn oversized_description_is_warned() {
    let host = t4_host();
    let path = "sys/devices/pci0000:3b/0000:3b:00.0/mdev_supported_types/nvidia-222/description";
    host.write(path, vec![b'x'; 70_000]).unwrap();
    let inv = inventory(&host);
    assert!(
        inv.warnings[0]
            .message
            .contains("is larger than 65536 bytes"),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn bad_entry_name_in_device_list_is_warned() {
    let host = one_gpu();
    host.write("sys/bus/pci/devices/garbage", "").unwrap();
    let inv = inventory(&host);
    assert_eq!(
        (inv.gpus.len(), inv.warnings[0].device.as_str()),
        (2, "garbage")
    );
}

#[test]
fn garbage_creatable_types_is_warned_with_path() {
    let host = l40s_host(2, 0);
    let vf = vf_address(addr("0000:81:00.0"), 1).unwrap();
    host.write(
        host.device_dir(vf).join("nvidia/creatable_vgpu_types"),
        "nonsense\n",
    )
    .unwrap();
    let inv = inventory(&host);
    assert!(
        inv.warnings[0]
            .message
            .contains("creatable_vgpu_types: missing the"),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn missing_pci_tree_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = discover(&vgpu_core::HostPaths::new(dir.path())).unwrap_err();
    assert!(matches!(
        err,
        vgpu_core::Error::Host(vgpu_core::error::HostError::Read { .. })
    ));
}

#[test]
fn short_address_resolves_unique_gpu() {
    let host = t4_host();
    let inv = inventory(&host);
    assert_eq!(
        vgpu_core::discovery::find_gpu(&inv, "3b:00.0", &host.paths())
            .map(|g| g.address)
            .ok(),
        Some(addr("0000:3b:00.0"))
    );
}

#[test]
fn short_address_in_two_domains_is_ambiguous() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(
        addr("0000:81:00.0"),
        NVIDIA,
        0x26b9,
        0x030200,
    ))
    .unwrap();
    host.pci(&PciSpec::new(
        addr("0001:81:00.0"),
        NVIDIA,
        0x26b9,
        0x030200,
    ))
    .unwrap();
    let inv = inventory(&host);
    assert!(matches!(
        vgpu_core::discovery::find_gpu(&inv, "81:00.0", &host.paths()),
        Err(vgpu_core::Error::Ambiguous { .. })
    ));
}

#[test]
fn unknown_gpu_is_not_found_naming_it_and_the_device_list() {
    let host = t4_host();
    let inv = inventory(&host);
    let err = vgpu_core::discovery::find_gpu(&inv, "0000:99:00.0", &host.paths()).unwrap_err();
    let expected = host.paths().pci_devices();
    assert!(
        matches!(
            &err,
            vgpu_core::Error::NotFound { what: vgpu_core::error::Object::Gpu, id, path }
                if id == "0000:99:00.0" && *path == expected
        ) && err.kind() == vgpu_core::ErrorKind::NotFound,
        "{err:?}"
    );
}

#[test]
fn short_gpu_name_on_two_domains_is_ambiguous_listing_both() {
    let host = FakeHost::new().unwrap();
    host.pci(&PciSpec::new(
        addr("0000:41:00.0"),
        NVIDIA,
        0x1eb8,
        0x030200,
    ))
    .unwrap();
    host.pci(&PciSpec::new(
        addr("0001:41:00.0"),
        NVIDIA,
        0x1eb8,
        0x030200,
    ))
    .unwrap();
    let err =
        vgpu_core::discovery::find_gpu(&inventory(&host), "41:00.0", &host.paths()).unwrap_err();
    assert!(
        matches!(
            &err,
            vgpu_core::Error::Ambiguous { name, candidates }
                if name == "41:00.0"
                    && *candidates == [addr("0000:41:00.0"), addr("0001:41:00.0")]
        ) && err.kind() == vgpu_core::ErrorKind::BadInput,
        "{err:?}"
    );
}
