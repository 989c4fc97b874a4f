//! Kernel semantics through plain `std::fs`, as a shell user would drive a real host: layout,
//! SR-IOV, drivers. mdevs and NVIDIA are in `mdev_nvidia.rs`.

use std::io::Write as _;

use crate::common::{
    A4000, A4000_AUDIO, FLEX, FLEX_VF0, L40S, L40S_VF0, T4, cat, driver_file, drivers_probe, echo,
    host, link, link_name, ls, pci, unbind_lock,
};

// ----- layout -----

#[test]
fn pci_device_link_is_relative_into_devices() {
    let h = host("mixed");
    assert_eq!(
        link(&pci(&h, T4, "")),
        Ok("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0".into())
    );
}

#[test]
fn pci_device_in_domain_1_sits_under_its_root_bus() {
    let h = host("mixed");
    assert_eq!(
        link(&pci(&h, FLEX, "")),
        Ok("../../../devices/pci0001:02/0001:02:00.0/0001:03:00.0".into())
    );
}

#[test]
fn pci_attributes_read_kernel_formats() {
    let h = host("mixed");
    let read = |f: &str| cat(&pci(&h, T4, f));
    assert_eq!(
        (
            read("vendor"),
            read("device"),
            read("class"),
            read("numa_node")
        ),
        (
            Ok("0x10de\n".into()),
            Ok("0x1eb8\n".into()),
            Ok("0x030200\n".into()),
            Ok("0\n".into())
        )
    );
}

#[test]
fn pci_driver_link_names_bound_driver() {
    let h = host("mixed");
    assert_eq!(
        link(&pci(&h, T4, "driver")),
        Ok("../../../../bus/pci/drivers/nvidia".into())
    );
}

#[test]
fn pci_driver_override_unset_reads_null() {
    let h = host("mixed");
    assert_eq!(cat(&pci(&h, T4, "driver_override")), Ok("(null)\n".into()));
}

#[test]
fn pci_read_only_attribute_open_for_write_is_eacces() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, T4, "vendor"), "0x8086"), Err(libc::EACCES));
}

#[test]
fn iommu_group_shared_with_audio_lists_both_functions() {
    let h = host("mixed");
    assert_eq!(
        ls(&h.root().join("sys/kernel/iommu_groups/141/devices")),
        Ok(vec![A4000.to_owned(), A4000_AUDIO.to_owned()])
    );
}

#[test]
fn iommu_group_member_link_points_back_to_device() {
    let h = host("mixed");
    assert_eq!(
        link(&h.root().join("sys/kernel/iommu_groups/31/devices").join(T4)),
        Ok("../../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0".into())
    );
}

#[test]
fn iommu_intel_ecap_has_interrupt_remapping_bit() {
    let h = host("mixed");
    assert_eq!(
        cat(&h.root().join("sys/class/iommu/dmar0/intel-iommu/ecap")),
        Ok("f050da\n".into())
    );
}

#[test]
fn no_iommu_profile_has_no_groups() {
    let h = host("no-iommu");
    assert_eq!(ls(&h.root().join("sys/kernel/iommu_groups")), Ok(vec![]));
}

#[test]
fn no_iommu_profile_device_has_no_iommu_group_link() {
    let h = host("no-iommu");
    assert_eq!(
        (
            cat(&pci(&h, T4, "vendor")),
            link(&pci(&h, T4, "iommu_group"))
        ),
        (Ok("0x10de\n".into()), Err(libc::ENOENT))
    );
}

#[test]
fn no_iommu_profile_bind_vfio_pci_is_einval() {
    let h = host("no-iommu");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind nvidia");
    echo(&pci(&h, T4, "driver_override"), "vfio-pci").expect("override");
    assert_eq!(
        echo(&driver_file(&h, "vfio-pci", "bind"), T4),
        Err(libc::EINVAL)
    );
}

#[test]
fn no_iommu_profile_drivers_probe_vfio_pci_leaves_device_unbound() {
    let h = host("no-iommu");
    echo(&unbind_lock(&h, T4), "1").expect("take unbindLock");
    echo(&driver_file(&h, "nvidia", "unbind"), T4).expect("unbind nvidia");
    echo(&pci(&h, T4, "driver_override"), "vfio-pci").expect("override");
    echo(&drivers_probe(&h), T4).expect("probe succeeds");
    assert_eq!(
        (cat(&pci(&h, T4, "vendor")), link(&pci(&h, T4, "driver"))),
        (Ok("0x10de\n".into()), Err(libc::ENOENT))
    );
}

#[test]
fn no_iommu_profile_has_no_dmar_table() {
    let h = host("no-iommu");
    assert_eq!(
        ls(&h.root().join("sys/firmware/acpi/tables")),
        Ok(vec![
            "APIC".into(),
            "DSDT".into(),
            "FACP".into(),
            "MCFG".into()
        ])
    );
}

#[test]
fn proc_cmdline_reads_profile_cmdline() {
    let h = host("gvtg");
    assert_eq!(
        cat(&h.root().join("proc/cmdline")),
        Ok(
            "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=/dev/nvme0n1p2 ro intel_iommu=on \
            i915.enable_gvt=1 kvm.ignore_msrs=1\n"
                .into()
        )
    );
}

// ----- SR-IOV -----

#[test]
fn sriov_numvfs_write_creates_vfs_beside_pf() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("i915 enables VFs");
    assert_eq!(
        ls(&h.root().join("sys/devices/pci0001:02/0001:02:00.0")).map(|v| {
            v.into_iter()
                .filter(|n| n.starts_with("0001:"))
                .collect::<Vec<_>>()
        }),
        Ok(vec![
            "0001:03:00.0".into(),
            "0001:03:00.1".into(),
            "0001:03:00.2".into()
        ])
    );
}

#[test]
fn sriov_numvfs_write_reads_back_count() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "4\n").expect("enable");
    assert_eq!(cat(&pci(&h, FLEX, "sriov_numvfs")), Ok("4\n".into()));
}

#[test]
fn sriov_virtfn_link_points_to_sibling_vf() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(
        link(&pci(&h, FLEX, "virtfn1")),
        Ok("../0001:03:00.2".into())
    );
}

#[test]
fn sriov_vf_physfn_link_points_to_pf() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    assert_eq!(
        link(&pci(&h, FLEX_VF0, "physfn")),
        Ok("../0001:03:00.0".into())
    );
}

#[test]
fn sriov_vf_gets_its_own_iommu_group() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    let group = link_name(&pci(&h, FLEX_VF0, "iommu_group")).expect("VF has a group");
    assert_eq!(
        ls(&h
            .root()
            .join("sys/kernel/iommu_groups")
            .join(group)
            .join("devices")),
        Ok(vec![FLEX_VF0.to_owned()])
    );
}

#[test]
fn sriov_vf_autoprobe_binds_pf_driver() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    assert_eq!(link_name(&pci(&h, FLEX_VF0, "driver")), Some("i915".into()));
}

#[test]
fn sriov_autoprobe_off_leaves_vfs_unbound() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    assert_eq!(
        (
            cat(&pci(&h, FLEX_VF0, "vendor")),
            link(&pci(&h, FLEX_VF0, "driver"))
        ),
        (Ok("0x8086\n".into()), Err(libc::ENOENT))
    );
}

#[test]
fn sriov_numvfs_not_a_number_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, FLEX, "sriov_numvfs"), "four"),
        Err(libc::EINVAL)
    );
}

#[test]
fn sriov_numvfs_above_u16_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, FLEX, "sriov_numvfs"), "70000"),
        Err(libc::EINVAL)
    );
}

#[test]
fn sriov_numvfs_above_total_is_erange() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, FLEX, "sriov_numvfs"), "17"),
        Err(libc::ERANGE)
    );
}

#[test]
fn sriov_numvfs_nonzero_while_enabled_is_ebusy() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "4"), Err(libc::EBUSY));
}

#[test]
fn sriov_numvfs_equal_value_succeeds_without_change() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Ok(()));
}

#[test]
fn sriov_numvfs_without_driver_is_enoent() {
    let h = host("mixed");
    echo(&h.root().join("sys/bus/pci/drivers/i915/unbind"), FLEX).expect("unbind");
    assert_eq!(echo(&pci(&h, FLEX, "sriov_numvfs"), "2"), Err(libc::ENOENT));
}

#[test]
fn sriov_numvfs_zero_removes_vfs() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "0").expect("disable");
    assert_eq!(link(&pci(&h, FLEX_VF0, "")), Err(libc::ENOENT));
}

#[test]
fn sriov_numvfs_zero_removes_virtfn_links() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    let before = link(&pci(&h, FLEX, "virtfn0"));
    echo(&pci(&h, FLEX, "sriov_numvfs"), "0").expect("disable");
    let after: Vec<String> = ls(&pci(&h, FLEX, ""))
        .expect("PF directory")
        .into_iter()
        .filter(|n| n.starts_with("virtfn"))
        .collect();
    assert_eq!(
        (before, after),
        (Ok("../0001:03:00.1".into()), Vec::<String>::new())
    );
}

#[test]
fn sriov_numvfs_on_nvidia_pf_is_enoent() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, L40S, "sriov_numvfs"), "0"), Err(libc::ENOENT));
}

#[test]
fn sriov_manage_sequence_reenables_vfs_on_nvidia() {
    let h = host("mixed");
    let lock = h
        .root()
        .join("proc/driver/nvidia/gpus")
        .join(L40S)
        .join("unbindLock");
    let drivers = h.root().join("sys/bus/pci/drivers");
    echo(&lock, "1").expect("take unbindLock");
    assert_eq!(cat(&lock), Ok("1\n".into()));
    echo(&drivers.join("nvidia/unbind"), L40S).expect("unbind nvidia");
    echo(&pci(&h, L40S, "driver_override"), "pci-pf-stub").expect("override");
    echo(&h.root().join("sys/bus/pci/drivers_probe"), L40S).expect("probe pf-stub");
    echo(&pci(&h, L40S, "sriov_numvfs"), "0").expect("disable");
    echo(&pci(&h, L40S, "sriov_numvfs"), "32").expect("enable");
    echo(&drivers.join("pci-pf-stub/unbind"), L40S).expect("unbind pf-stub");
    echo(&pci(&h, L40S, "driver_override"), "\n").expect("clear override");
    echo(&h.root().join("sys/bus/pci/drivers_probe"), L40S).expect("probe nvidia");
    assert_eq!(
        (
            link_name(&pci(&h, L40S, "driver")),
            cat(&pci(&h, L40S, "sriov_numvfs")),
            link_name(&pci(&h, "0000:5e:04.3", "driver"))
        ),
        (
            Some("nvidia".into()),
            Ok("32\n".into()),
            Some("nvidia".into())
        )
    );
}

// ----- drivers -----

#[test]
fn bind_not_matching_driver_to_bound_device_is_enodev() {
    let h = host("mixed");
    assert_eq!(
        echo(&driver_file(&h, "vfio-pci", "bind"), T4),
        Err(libc::ENODEV)
    );
}

#[test]
fn bind_matching_driver_to_bound_device_is_ebusy() {
    let h = host("mixed");
    assert_eq!(
        echo(&driver_file(&h, "nvidia", "bind"), T4),
        Err(libc::EBUSY)
    );
}

#[test]
fn bind_vf_without_autoprobe_or_override_is_enodev() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    assert_eq!(
        echo(&driver_file(&h, "i915", "bind"), FLEX_VF0),
        Err(libc::ENODEV)
    );
}

#[test]
fn drivers_probe_vf_without_autoprobe_or_override_leaves_it_unbound() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    echo(&drivers_probe(&h), FLEX_VF0).expect("probe succeeds");
    assert_eq!(
        (
            cat(&pci(&h, FLEX_VF0, "vendor")),
            link(&pci(&h, FLEX_VF0, "driver"))
        ),
        (Ok("0x8086\n".into()), Err(libc::ENOENT))
    );
}

#[test]
fn drivers_probe_vf_with_override_binds_without_autoprobe() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    echo(&pci(&h, FLEX_VF0, "driver_override"), "vfio-pci").expect("override");
    echo(&drivers_probe(&h), FLEX_VF0).expect("probe");
    assert_eq!(
        link_name(&pci(&h, FLEX_VF0, "driver")),
        Some("vfio-pci".into())
    );
}

#[test]
fn bind_unknown_device_is_enodev() {
    let h = host("mixed");
    assert_eq!(
        echo(
            &h.root().join("sys/bus/pci/drivers/nvidia/bind"),
            "0000:99:00.0"
        ),
        Err(libc::ENODEV)
    );
}

#[test]
fn bind_without_override_to_vfio_pci_is_enodev() {
    let h = host("mixed");
    echo(
        &h.root().join("sys/bus/pci/drivers/snd_hda_intel/unbind"),
        A4000_AUDIO,
    )
    .expect("unbind");
    assert_eq!(
        echo(
            &h.root().join("sys/bus/pci/drivers/vfio-pci/bind"),
            A4000_AUDIO
        ),
        Err(libc::ENODEV)
    );
}

#[test]
fn unbind_from_other_driver_is_enodev() {
    let h = host("mixed");
    assert_eq!(
        echo(&h.root().join("sys/bus/pci/drivers/i915/unbind"), T4),
        Err(libc::ENODEV)
    );
}

#[test]
fn unbind_removes_driver_link() {
    let h = host("mixed");
    echo(
        &h.root().join("sys/bus/pci/drivers/snd_hda_intel/unbind"),
        A4000_AUDIO,
    )
    .expect("unbind");
    assert_eq!(
        (
            cat(&pci(&h, A4000_AUDIO, "vendor")),
            link(&pci(&h, A4000_AUDIO, "driver"))
        ),
        (Ok("0x10de\n".into()), Err(libc::ENOENT))
    );
}

#[test]
fn driver_override_then_probe_binds_vfio_pci() {
    let h = host("mixed");
    echo(
        &h.root().join("sys/bus/pci/drivers/snd_hda_intel/unbind"),
        A4000_AUDIO,
    )
    .expect("unbind");
    echo(&pci(&h, A4000_AUDIO, "driver_override"), "vfio-pci\n").expect("override");
    echo(&h.root().join("sys/bus/pci/drivers_probe"), A4000_AUDIO).expect("probe");
    assert_eq!(
        link_name(&pci(&h, A4000_AUDIO, "driver")),
        Some("vfio-pci".into())
    );
}

#[test]
fn driver_override_of_page_size_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, A4000_AUDIO, "driver_override"), &"x".repeat(4095)),
        Err(libc::EINVAL)
    );
}

#[test]
fn store_write_beyond_page_size_is_cut_to_page_size() {
    let h = host("mixed");
    let params = pci(&h, L40S_VF0, "nvidia/vgpu_params");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(&params)
        .and_then(|mut f| f.write(&[b"x=".as_slice(), &[b'a'; 4998]].concat()));
    assert_eq!(
        (
            written.map_err(|e| e.raw_os_error()),
            cat(&params).map(|t| t.len())
        ),
        (Ok(4096), Ok(4097))
    );
}

#[test]
fn driver_override_does_not_unbind() {
    let h = host("mixed");
    echo(&pci(&h, T4, "driver_override"), "vfio-pci").expect("override");
    assert_eq!(link_name(&pci(&h, T4, "driver")), Some("nvidia".into()));
}

#[test]
fn drivers_probe_unknown_device_is_enodev() {
    let h = host("mixed");
    assert_eq!(
        echo(&h.root().join("sys/bus/pci/drivers_probe"), "0000:99:00.0"),
        Err(libc::ENODEV)
    );
}

#[test]
fn reset_value_other_than_one_is_einval() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, T4, "reset"), "2"), Err(libc::EINVAL));
}

#[test]
fn reset_number_above_u64_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, T4, "reset"), "99999999999999999999999"),
        Err(libc::EINVAL)
    );
}

#[test]
fn remove_number_above_u64_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(&pci(&h, A4000_AUDIO, "remove"), "99999999999999999999999"),
        Err(libc::EINVAL)
    );
}

#[test]
fn rescan_number_above_u64_is_einval() {
    let h = host("mixed");
    assert_eq!(
        echo(
            &h.root().join("sys/bus/pci/rescan"),
            "99999999999999999999999"
        ),
        Err(libc::EINVAL)
    );
}

#[test]
fn reset_without_reset_method_is_enotty() {
    let h = host("mixed");
    echo(&pci(&h, T4, "reset_method"), "\n").expect("disable every method");
    assert_eq!(echo(&pci(&h, T4, "reset"), "1"), Err(libc::ENOTTY));
}

#[test]
fn reset_method_empty_line_reads_empty() {
    let h = host("mixed");
    echo(&pci(&h, T4, "reset_method"), "\n").expect("disable every method");
    assert_eq!(cat(&pci(&h, T4, "reset_method")), Ok(String::new()));
}

#[test]
fn reset_method_default_restores_supported_methods() {
    let h = host("mixed");
    echo(&pci(&h, T4, "reset_method"), "bus").expect("bus only");
    echo(&pci(&h, T4, "reset_method"), "default").expect("default");
    assert_eq!(cat(&pci(&h, T4, "reset_method")), Ok("flr bus\n".into()));
}

#[test]
fn reset_method_unsupported_method_is_einval() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, T4, "reset_method"), "pm"), Err(libc::EINVAL));
}

#[test]
fn reset_one_succeeds() {
    let h = host("mixed");
    assert_eq!(echo(&pci(&h, T4, "reset"), "1"), Ok(()));
}

#[test]
fn remove_then_rescan_restores_device() {
    let h = host("mixed");
    echo(&pci(&h, A4000_AUDIO, "remove"), "1").expect("remove");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(
        link_name(&pci(&h, A4000_AUDIO, "driver")),
        Some("snd_hda_intel".into())
    );
}

#[test]
fn remove_then_rescan_clears_driver_override() {
    let h = host("mixed");
    assert_eq!(
        cat(&pci(&h, A4000, "driver_override")),
        Ok("vfio-pci\n".into())
    );
    echo(&pci(&h, A4000, "remove"), "1").expect("remove");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(
        cat(&pci(&h, A4000, "driver_override")),
        Ok("(null)\n".into())
    );
}

#[test]
fn remove_then_rescan_sets_autoprobe_back_to_one() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "remove"), "1").expect("remove");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(
        cat(&pci(&h, FLEX, "sriov_drivers_autoprobe")),
        Ok("1\n".into())
    );
}

#[test]
fn remove_then_rescan_leaves_vfs_disabled() {
    let h = host("mixed");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "2").expect("enable");
    echo(&pci(&h, FLEX, "remove"), "1").expect("remove");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(
        (
            cat(&pci(&h, FLEX, "sriov_numvfs")),
            link(&pci(&h, FLEX_VF0, ""))
        ),
        (Ok("0\n".into()), Err(libc::ENOENT))
    );
}
