//! Creating and destroying vGPUs and VFs on the simulated host (`vgpu-sim`): the production
//! code path writes to a FUSE filesystem that answers like the kernel.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use uuid::Uuid;
use vgpu_core::lifecycle::{self, Placement, Running};
use vgpu_core::sriov::{self, SriovOptions};
use vgpu_core::{Error, Gpu, HostPaths, Inventory, PciAddress, VgpuHandle, discover, driver};
use vgpu_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const A40: &str = "0000:41:00.0";
const L40S: &str = "0000:41:00.0";
const FLEX: &str = "0000:4d:00.0";
const EBUSY: i32 = 16;
const EIO: i32 = 5;

fn addr(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// The simulated kernel, with the state trees (run/ records of previous drivers) in this test
/// binary's scratch directory: the simulator serves only sys/, proc/ and dev/.
fn paths(host: &SimHost) -> HostPaths {
    let name = host.root().file_name().unwrap().to_owned();
    HostPaths::new(host.root())
        .with_state_root(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name))
}

fn inventory(host: &SimHost) -> Inventory {
    discover(&paths(host)).unwrap()
}

fn gpu(host: &SimHost, address: &str) -> Gpu {
    inventory(host)
        .gpus
        .into_iter()
        .find(|g| g.address == addr(address))
        .unwrap()
}

fn available(host: &SimHost, address: &str, type_id: &str) -> (u32, u32) {
    let gpu = gpu(host, address);
    let t = gpu.types.iter().find(|t| t.id == type_id).unwrap();
    (t.available, t.in_use)
}

const FIXED: Uuid = Uuid::from_u128(0x0d6c_4c1a_5e1f_4b8e_a1d2_0000_0000_0001);

#[test]
fn t4_create_by_name_makes_mdev_on_pf() {
    let host = SimHost::mount_for_test("t4-legacy");
    let created =
        lifecycle::create(&paths(&host), &gpu(&host, T4), "GRID T4-2Q", Some(FIXED)).unwrap();
    assert_eq!(
        (created.id, created.placement),
        (
            VgpuHandle::Mdev(FIXED),
            Placement::Mdev {
                parent: addr(T4),
                type_id: "nvidia-231".to_owned()
            }
        )
    );
}

#[test]
fn t4_create_lowers_available_instances() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", None).unwrap();
    assert_eq!(available(&host, T4, "nvidia-231"), (7, 1));
}

#[test]
fn t4_create_shows_in_mdev_bus() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "T4-2Q", Some(FIXED)).unwrap();
    assert_eq!(
        lifecycle::mdev_parent(&paths(&host), FIXED).unwrap(),
        Some(addr(T4))
    );
}

#[test]
fn t4_destroy_removes_mdev() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap();
    lifecycle::destroy(&paths(&host), VgpuHandle::Mdev(FIXED)).unwrap();
    assert_eq!(available(&host, T4, "nvidia-231"), (8, 0));
}

#[test]
fn t4_second_type_refused_while_one_in_use() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", None).unwrap();
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-222", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "GPU 0000:3b:00.0 has no capacity left for vGPU type nvidia-222"
    );
}

#[test]
fn t4_full_type_is_refused_and_creates_nothing() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "GRID T4-16Q", None).unwrap();
    let before = inventory(&host);
    assert!(lifecycle::create(&paths(&host), &gpu(&host, T4), "GRID T4-16Q", None).is_err());
    assert_eq!(inventory(&host), before);
}

#[test]
fn t4_duplicate_uuid_is_refused() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap();
    let err =
        lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("mediated device {FIXED} already exists")
    );
}

#[test]
fn t4_unknown_type_names_what_is_offered() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "T4-3Q", None).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "GPU 0000:3b:00.0 offers no vGPU type \"T4-3Q\"; it offers: nvidia-222 (GRID T4-1B)"
        ),
        "{err}"
    );
}

#[test]
fn t4_path_like_type_is_rejected() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "../x", None).unwrap_err();
    assert_eq!(err.to_string(), "\"../x\" is not a vGPU type id or name");
}

#[test]
fn t4_injected_create_failure_keeps_errno_and_path() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, EIO, "*/nvidia-231/create");
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", None).unwrap_err();
    assert!(
        matches!(&err, Error::Write { path, .. } if path.ends_with("nvidia-231/create"))
            && err.errno() == Some(EIO),
        "{err:?}"
    );
}

#[test]
fn t4_injected_create_failure_leaves_host_unchanged() {
    let host = SimHost::mount_for_test("t4-legacy");
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/nvidia-231/create");
    assert!(lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", None).is_err());
    assert_eq!(inventory(&host), before);
}

#[test]
fn t4_injected_remove_failure_is_busy() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap();
    host.fail_next(1, EBUSY, "*/remove");
    let err = lifecycle::destroy(&paths(&host), VgpuHandle::Mdev(FIXED)).unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
}

#[test]
fn unknown_mdev_destroy_is_no_such_device() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = lifecycle::destroy(&paths(&host), VgpuHandle::Mdev(FIXED)).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }), "{err:?}");
}

#[test]
fn a40_create_goes_on_first_free_vf() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    let created =
        lifecycle::create(&paths(&host), &gpu(&host, A40), "NVIDIA A40-2Q", None).unwrap();
    assert_eq!(
        created.placement,
        Placement::Mdev {
            parent: addr("0000:41:00.4"),
            type_id: "nvidia-558".to_owned()
        }
    );
}

#[test]
fn a40_second_create_skips_used_vf() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    lifecycle::create(&paths(&host), &gpu(&host, A40), "nvidia-558", None).unwrap();
    let created = lifecycle::create(&paths(&host), &gpu(&host, A40), "nvidia-558", None).unwrap();
    assert_eq!(
        created.placement,
        Placement::Mdev {
            parent: addr("0000:41:00.5"),
            type_id: "nvidia-558".to_owned()
        }
    );
}

#[test]
fn a40_capacity_counts_per_gpu() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    lifecycle::create(&paths(&host), &gpu(&host, A40), "nvidia-558", None).unwrap();
    assert_eq!(available(&host, A40, "nvidia-558"), (23, 1));
}

#[test]
fn l40s_create_sets_vf_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created =
        lifecycle::create(&paths(&host), &gpu(&host, L40S), "NVIDIA L40S-8Q", None).unwrap();
    assert_eq!(created.id, VgpuHandle::Vf(addr("0000:41:00.4")));
}

#[test]
fn l40s_created_vgpu_runs_as_vendor_vf() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created = lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", None).unwrap();
    let Placement::VendorVf { type_id, .. } = created.placement else {
        panic!("{created:?}")
    };
    assert_eq!(
        lifecycle::running(&paths(&host), created.id).unwrap(),
        Some(Running::VendorVf { type_id })
    );
}

#[test]
fn l40s_uuid_for_vf_vgpu_is_refused() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let err =
        lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", Some(FIXED)).unwrap_err();
    assert!(err.to_string().contains("a UUID does not apply"), "{err}");
}

#[test]
fn l40s_destroy_clears_vf_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let before = inventory(&host);
    let created = lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", None).unwrap();
    lifecycle::destroy(&paths(&host), created.id).unwrap();
    assert_eq!(inventory(&host), before);
}

#[test]
fn l40s_injected_type_write_failure_leaves_host_unchanged() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let before = inventory(&host);
    host.fail_next(1, EIO, "*/current_vgpu_type");
    assert!(lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", None).is_err());
    assert_eq!(inventory(&host), before);
}

#[test]
fn l40s_disable_vfs_through_nvidia_sequence() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let change =
        sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap();
    assert_eq!(
        (change.before, change.enabled, change.vfs.len()),
        (32, 0, 0)
    );
}

#[test]
fn l40s_reenable_vfs_rebinds_pf_and_vfs_to_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap();
    sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap();
    let gpu = gpu(&host, L40S);
    let drivers: Vec<Option<&str>> = gpu
        .vfs
        .iter()
        .map(|v| v.driver.as_deref())
        .filter(|d| *d != Some("nvidia"))
        .collect();
    assert_eq!(
        (gpu.driver.as_deref(), gpu.vfs.len(), drivers),
        (Some("nvidia"), 32, Vec::new())
    );
}

#[test]
fn l40s_partial_vf_count_is_refused_for_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap();
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 4, SriovOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "NVIDIA GPU 0000:41:00.0 enables all 32 VFs or none, not 4"
    );
}

#[test]
fn l40s_vf_in_use_blocks_disable_without_force() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", None).unwrap();
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot change the VF count of 0000:41:00.0: 0000:41:00.4 holds NVIDIA vGPU type 1152 (use force to override)"
    );
}

#[test]
fn l40s_failed_stub_bind_rebinds_nvidia() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap();
    host.fail_next(1, EIO, "*/sriov_numvfs");
    assert!(sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).is_err());
    let gpu = gpu(&host, L40S);
    assert_eq!((gpu.driver.as_deref(), gpu.vfs.len()), (Some("nvidia"), 0));
}

#[test]
fn flex_enable_vfs_appear() {
    let host = SimHost::mount_for_test("flex-sriov");
    let change =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 4, SriovOptions::default()).unwrap();
    assert_eq!(
        (
            change.before,
            change.requested,
            change.enabled,
            change.vfs.len()
        ),
        (0, 4, 4, 4)
    );
}

#[test]
fn flex_change_count_goes_through_zero() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_vf_count(&paths(&host), addr(FLEX), 4, SriovOptions::default()).unwrap();
    let change =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 2, SriovOptions::default()).unwrap();
    assert_eq!((change.before, change.enabled, change.vfs.len()), (4, 2, 2));
}

#[test]
fn flex_count_above_total_is_refused_before_writing() {
    let host = SimHost::mount_for_test("flex-sriov");
    let err =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 17, SriovOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "0000:4d:00.0 supports at most 16 VFs, not 17"
    );
}

#[test]
fn flex_injected_disable_failure_keeps_vfs_and_errno() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_vf_count(&paths(&host), addr(FLEX), 4, SriovOptions::default()).unwrap();
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 2, SriovOptions::default()).unwrap_err();
    assert_eq!((err.errno(), gpu(&host, FLEX).vfs.len()), (Some(EIO), 4));
}

#[test]
fn flex_plain_vf_create_binds_vfio() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_vf_count(&paths(&host), addr(FLEX), 2, SriovOptions::default()).unwrap();
    let created = lifecycle::create(&paths(&host), &gpu(&host, FLEX), "vf", None).unwrap();
    let vf = gpu(&host, FLEX).vfs[0].clone();
    assert_eq!(
        (created.id, vf.driver.as_deref()),
        (VgpuHandle::Vf(vf.address), Some("vfio-pci"))
    );
}

#[test]
fn flex_plain_vf_destroy_returns_default_driver() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_vf_count(&paths(&host), addr(FLEX), 2, SriovOptions::default()).unwrap();
    let before = inventory(&host);
    let created = lifecycle::create(&paths(&host), &gpu(&host, FLEX), "vf", None).unwrap();
    lifecycle::destroy(&paths(&host), created.id).unwrap();
    assert_eq!(inventory(&host), before);
}

#[test]
fn flex_plain_vf_without_vfs_says_enable_first() {
    let host = SimHost::mount_for_test("flex-sriov");
    let err = lifecycle::create(&paths(&host), &gpu(&host, FLEX), "vf", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "GPU 0000:4d:00.0 has no VFs enabled: enable them first (vgpuctl sriov)"
    );
}

#[test]
fn flex_injected_probe_failure_rebinds_previous_driver() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_vf_count(&paths(&host), addr(FLEX), 1, SriovOptions::default()).unwrap();
    let vf = gpu(&host, FLEX).vfs[0].clone();
    host.fail_next(1, EIO, "*drivers_probe");
    assert!(driver::bind(&paths(&host), vf.address, "vfio-pci").is_err());
    assert_eq!(gpu(&host, FLEX).vfs[0].driver, vf.driver);
}

#[test]
fn autoprobe_off_leaves_new_vfs_unbound() {
    let host = SimHost::mount_for_test("flex-sriov");
    sriov::set_autoprobe(&paths(&host), addr(FLEX), false).unwrap();
    sriov::set_vf_count(&paths(&host), addr(FLEX), 1, SriovOptions::default()).unwrap();
    assert_eq!(gpu(&host, FLEX).vfs[0].driver, None);
}

#[test]
fn sriov_slow_enable_is_waited_for() {
    let host = SimHost::mount_for_test("flex-sriov");
    host.control("latency sriov-enable 300").unwrap();
    let change =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 2, SriovOptions::default()).unwrap();
    assert_eq!(change.vfs.len(), 2);
}

// ----- a failure injected at each write step leaves the host as it was -----

const ENOSPC: i32 = 28;
const ENODEV: i32 = 19;
const EPERM: i32 = 1;

/// The L40S host with its VFs disabled: the start of NVIDIA's enable sequence.
fn l40s_without_vfs() -> SimHost {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    sriov::set_vf_count(&paths(&host), addr(L40S), 0, SriovOptions::default()).unwrap();
    host
}

fn override_of(host: &SimHost, address: &str) -> String {
    std::fs::read_to_string(
        paths(host)
            .pci_device(&addr(address))
            .join("driver_override"),
    )
    .unwrap()
}

#[test]
fn nvidia_enable_failing_at_unbind_lock_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EPERM, "*/unbindLock");
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!((err.errno(), inventory(&host)), (Some(EPERM), before));
}

#[test]
fn nvidia_enable_failing_at_driver_override_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, ENOSPC, "*/0000:41:00.0/driver_override");
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!((err.errno(), inventory(&host)), (Some(ENOSPC), before));
}

#[test]
fn nvidia_enable_failing_at_unbind_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/drivers/nvidia/unbind");
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!(
        (err.errno(), inventory(&host), override_of(&host, L40S)),
        (Some(EBUSY), before, "(null)\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_probe_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, ENODEV, "*drivers_probe");
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!(
        (err.errno(), inventory(&host), override_of(&host, L40S)),
        (Some(ENODEV), before, "(null)\n".to_owned())
    );
}

#[test]
fn nvidia_enable_failing_at_numvfs_leaves_host_unchanged() {
    let host = l40s_without_vfs();
    let before = inventory(&host);
    host.fail_next(1, EIO, "*/sriov_numvfs");
    let err =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!(
        (err.errno(), inventory(&host), override_of(&host, L40S)),
        (Some(EIO), before, "(null)\n".to_owned())
    );
}

fn flex_with_vf() -> (SimHost, PciAddress) {
    let host = SimHost::mount_for_test("flex-sriov");
    let change =
        sriov::set_vf_count(&paths(&host), addr(FLEX), 1, SriovOptions::default()).unwrap();
    (host, change.vfs[0])
}

#[test]
fn vf_bind_failing_at_driver_override_leaves_host_unchanged() {
    let (host, vf) = flex_with_vf();
    let before = inventory(&host);
    host.fail_next(1, EPERM, "*/driver_override");
    let err = driver::bind(&paths(&host), vf, "vfio-pci").unwrap_err();
    assert_eq!((err.errno(), inventory(&host)), (Some(EPERM), before));
}

#[test]
fn vf_bind_failing_at_unbind_leaves_host_unchanged() {
    let (host, vf) = flex_with_vf();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/unbind");
    let err = driver::bind(&paths(&host), vf, "vfio-pci").unwrap_err();
    assert_eq!(
        (
            err.errno(),
            inventory(&host),
            override_of(&host, &vf.to_string())
        ),
        (Some(EBUSY), before, "(null)\n".to_owned())
    );
}

#[test]
fn vf_bind_failing_at_probe_clears_override() {
    let (host, vf) = flex_with_vf();
    host.fail_next(1, ENODEV, "*drivers_probe");
    driver::bind(&paths(&host), vf, "vfio-pci").unwrap_err();
    assert_eq!(override_of(&host, &vf.to_string()), "(null)\n");
}

#[test]
fn vendor_vf_destroy_failing_keeps_the_vgpu() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created = lifecycle::create(&paths(&host), &gpu(&host, L40S), "L40S-8Q", None).unwrap();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/current_vgpu_type");
    let err = lifecycle::destroy(&paths(&host), created.id).unwrap_err();
    assert_eq!((err.errno(), inventory(&host)), (Some(EBUSY), before));
}

#[test]
fn mdev_remove_failing_keeps_the_mdev() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap();
    let before = inventory(&host);
    host.fail_next(1, ENODEV, "*/remove");
    let err = lifecycle::destroy(&paths(&host), VgpuHandle::Mdev(FIXED)).unwrap_err();
    assert_eq!((err.errno(), inventory(&host)), (Some(ENODEV), before));
}

#[test]
fn mdev_create_refused_for_capacity_is_no_space() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, ENOSPC, "*/nvidia-231/create");
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", None).unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
}

fn unbind_lock(host: &SimHost) -> String {
    std::fs::read_to_string(
        paths(host)
            .proc()
            .join("driver/nvidia/gpus")
            .join(L40S)
            .join("unbindLock"),
    )
    .unwrap()
}

#[test]
fn nvidia_enable_failing_at_stub_bind_releases_unbind_lock() {
    let host = l40s_without_vfs();
    host.fail_next(1, ENOSPC, "*/0000:41:00.0/driver_override");
    sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    assert_eq!(unbind_lock(&host), "0\n");
}

#[test]
fn nvidia_enable_failing_at_vf_rebind_puts_count_back() {
    let host = l40s_without_vfs();
    sriov::set_autoprobe(&paths(&host), addr(L40S), false).unwrap();
    host.fail_next(1, EIO, "*/0000:41:00.5/driver_override");
    sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap_err();
    let gpu = gpu(&host, L40S);
    assert_eq!(
        (
            gpu.driver.as_deref(),
            gpu.vfs.len(),
            override_of(&host, L40S)
        ),
        (Some("nvidia"), 0, "(null)\n".to_owned())
    );
}

/// A sequence interrupted with the PF on pci-pf-stub (as after a SIGKILL) is finished.
#[test]
fn nvidia_pf_left_on_stub_is_finished() {
    let host = l40s_without_vfs();
    driver::bind(&paths(&host), addr(L40S), "pci-pf-stub").unwrap();
    let change =
        sriov::set_vf_count(&paths(&host), addr(L40S), 32, SriovOptions::default()).unwrap();
    let gpu = gpu(&host, L40S);
    assert_eq!(
        (
            change.enabled,
            gpu.driver.as_deref(),
            override_of(&host, L40S)
        ),
        (32, Some("nvidia"), "(null)\n".to_owned())
    );
}

#[test]
fn no_capacity_is_its_own_error_naming_gpu_and_type() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "GRID T4-16Q", None).unwrap();
    let err = lifecycle::create(&paths(&host), &gpu(&host, T4), "GRID T4-16Q", None).unwrap_err();
    assert!(
        matches!(&err, Error::NoCapacity { gpu, type_id, .. } if *gpu == addr(T4) && type_id == "nvidia-234"),
        "{err:?}"
    );
}

/// On a static tree the VFs never appear after the write: the wait ends at its deadline with
/// an error naming the PF, and the count is put back.
#[test]
fn vfs_that_never_appear_time_out_and_count_is_put_back() {
    use vgpu_core::testing::{FakeHost, PciSpec};
    let host = FakeHost::new().unwrap();
    let pf = addr("0000:4d:00.0");
    host.pci(
        &PciSpec::new(pf, 0x8086, 0x56c0, 0x038000)
            .driver("i915")
            .sriov(16, 0x56c0),
    )
    .unwrap();
    let options = SriovOptions {
        force: false,
        timeout: std::time::Duration::from_millis(50),
    };
    let err = sriov::set_vf_count(&host.paths(), pf, 2, options).unwrap_err();
    let numvfs =
        std::fs::read_to_string(host.paths().pci_device(&pf).join("sriov_numvfs")).unwrap();
    assert_eq!(
        (err.to_string(), numvfs),
        (
            "2 VFs of 0000:4d:00.0 did not happen within 50 ms (watching ".to_owned()
                + &host.paths().pci_device(&pf).display().to_string()
                + ")",
            "0\n".to_owned()
        )
    );
}

#[test]
fn binding_a_busy_nvidia_gpu_away_is_refused_by_its_unbind_lock() {
    let host = SimHost::mount_for_test("t4-legacy");
    lifecycle::create(&paths(&host), &gpu(&host, T4), "nvidia-231", Some(FIXED)).unwrap();
    let err = driver::bind(&paths(&host), addr(T4), "vfio-pci").unwrap_err();
    assert!(
        matches!(&err, Error::UnbindLockRefused { path } if path.ends_with("0000:3b:00.0/unbindLock"))
            && gpu(&host, T4).driver.as_deref() == Some("nvidia"),
        "{err:?}"
    );
}

#[test]
fn binding_an_idle_nvidia_gpu_away_takes_its_unbind_lock() {
    let host = SimHost::mount_for_test("t4-legacy");
    let previous = driver::bind(&paths(&host), addr(T4), "vfio-pci").unwrap();
    assert_eq!(
        (previous.as_deref(), gpu(&host, T4).driver.as_deref()),
        (Some("nvidia"), Some("vfio-pci"))
    );
}
