//! Creating and destroying vGPUs on the simulated host (`vgpu-sim`) through [`Manager`]: the
//! production code path writes to a FUSE filesystem that answers like the kernel. VF counts
//! and driver binding are in `lifecycle_sriov.rs`.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::PathBuf;

use uuid::Uuid;
use vgpu_core::{
    Error, ErrorKind,
    error::Object,
    manager::{Created, Destroyed},
    manager::{Placement, Running},
    model::{Backend, Vgpu, VgpuHandle},
    state::Start,
};

use crate::common::{NONE_PENDING, addr, audit, gpu, inventory, manager, paths, pending, record};
use vgpu_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const A40: &str = "0000:41:00.0";
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
const FLEX: &str = "0000:4d:00.0";
const FLEX_VF0: &str = "0000:4d:00.1";
const EIO: i32 = 5;
const EBUSY: i32 = 16;
const ENODEV: i32 = 19;
const ENOSPC: i32 = 28;

const FIXED: Uuid = Uuid::from_u128(0x0d6c_4c1a_5e1f_4b8e_a1d2_0000_0000_0001);
const FIXED_TEXT: &str = "0d6c4c1a-5e1f-4b8e-a1d2-000000000001";

fn available(host: &SimHost, address: &str, type_id: &str) -> (u32, u32) {
    let gpu = gpu(host, address);
    let t = gpu.types.iter().find(|t| t.id == type_id).unwrap();
    (t.available, t.in_use)
}

/// The `create` file of mdev type `type_id` under `parent`.
fn create_path(host: &SimHost, parent: &str, type_id: &str) -> PathBuf {
    paths(host)
        .pci_device(&addr(parent))
        .join("mdev_supported_types")
        .join(type_id)
        .join("create")
}

// ----- mediated devices on the PF (T4) -----

#[test]
fn t4_create_by_name_makes_mdev_on_pf() {
    let host = SimHost::mount_for_test("t4-legacy");
    let created = manager(&host)
        .create(addr(T4), "GRID T4-2Q", Some(FIXED), None)
        .unwrap();
    assert_eq!(
        created,
        Created {
            placement_id: None,
            id: VgpuHandle::Mdev(FIXED),
            gpu: addr(T4),
            placement: Placement::Mdev {
                parent: addr(T4),
                type_id: "nvidia-231".to_owned()
            },
            previous_driver: None,
        }
    );
}

#[test]
fn t4_create_lowers_available_instances() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "nvidia-231", None, None)
        .unwrap();
    assert_eq!(available(&host, T4, "nvidia-231"), (7, 1));
}

#[test]
fn t4_create_shows_in_mdev_bus() {
    let host = SimHost::mount_for_test("t4-legacy");
    manager(&host)
        .create(addr(T4), "T4-2Q", Some(FIXED), None)
        .unwrap();
    let device = std::fs::canonicalize(paths(&host).mdev_devices().join(FIXED_TEXT)).unwrap();
    let parent = std::fs::canonicalize(paths(&host).pci_device(&addr(T4))).unwrap();
    assert_eq!(device.parent(), Some(parent.as_path()));
}

#[test]
fn t4_destroy_removes_mdev() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    manager.destroy(VgpuHandle::Mdev(FIXED)).unwrap();
    assert_eq!(available(&host, T4, "nvidia-231"), (8, 0));
}

#[test]
fn t4_destroy_reports_the_stopped_mdev() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    let destroyed = manager.destroy(VgpuHandle::Mdev(FIXED)).unwrap();
    assert_eq!(
        destroyed,
        Destroyed {
            id: VgpuHandle::Mdev(FIXED),
            stopped: Some(Running::Mdev { parent: addr(T4) }),
            undefined: false,
        }
    );
}

#[test]
fn t4_second_type_refused_while_one_in_use() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager.create(addr(T4), "nvidia-231", None, None).unwrap();
    let err = manager
        .create(addr(T4), "nvidia-222", None, None)
        .unwrap_err();
    let Error::NoCapacity {
        gpu,
        type_id,
        asked,
        available,
        reserved,
        limit,
        path,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        limit,
        &Some(vgpu_core::plan::capacity::Limit::Mixing {
            with: "GRID T4-2Q".to_owned()
        })
    );
    assert_eq!(
        (
            *gpu,
            type_id.as_str(),
            *asked,
            *available,
            *reserved,
            path.clone(),
            err.kind()
        ),
        (
            addr(T4),
            "nvidia-222",
            1,
            0,
            0,
            paths(&host).pci_device(&addr(T4)),
            ErrorKind::NoCapacity
        )
    );
}

#[test]
fn t4_full_type_is_refused_and_creates_nothing() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager.create(addr(T4), "GRID T4-16Q", None, None).unwrap();
    let before = inventory(&host);
    let err = manager
        .create(addr(T4), "GRID T4-16Q", None, None)
        .unwrap_err();
    assert_eq!(
        (err.kind(), inventory(&host)),
        (ErrorKind::NoCapacity, before)
    );
}

#[test]
fn t4_duplicate_uuid_is_refused() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    let err = manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap_err();
    let Error::AlreadyExists { what, id } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*what, id.as_str(), err.kind()),
        (Object::Mdev, FIXED_TEXT, ErrorKind::Conflict)
    );
}

#[test]
fn t4_create_of_defined_uuid_is_refused_as_defined() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .define(addr(T4), "nvidia-231", Some(FIXED), Start::Manual)
        .unwrap();
    let err = manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap_err();
    let Error::DefinitionExists { id, path } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (id.as_str(), path.clone(), err.kind()),
        (
            FIXED_TEXT,
            paths(&host)
                .etc()
                .join("mdevctl.d")
                .join(T4)
                .join(FIXED_TEXT),
            ErrorKind::Conflict
        )
    );
}

#[test]
fn t4_definition_holds_its_room_from_create() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .define(addr(T4), "GRID T4-16Q", Some(FIXED), Start::Manual)
        .unwrap();
    let err = manager
        .create(addr(T4), "GRID T4-16Q", None, None)
        .unwrap_err();
    let Error::NoCapacity {
        available,
        reserved,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*available, *reserved, err.kind()),
        (0, 1, ErrorKind::NoCapacity)
    );
}

#[test]
fn t4_unknown_type_names_what_is_offered() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = manager(&host)
        .create(addr(T4), "T4-3Q", None, None)
        .unwrap_err();
    let Error::UnknownType {
        gpu,
        wanted,
        offered,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            *gpu,
            wanted.as_str(),
            offered.iter().map(String::as_str).collect::<Vec<_>>(),
            err.kind()
        ),
        (
            addr(T4),
            "T4-3Q",
            vec![
                "GRID T4-1B",
                "GRID T4-2B",
                "GRID T4-2B4",
                "GRID T4-1A",
                "GRID T4-2A",
                "GRID T4-4A",
                "GRID T4-8A",
                "GRID T4-16A",
                "GRID T4-1Q",
                "GRID T4-2Q",
                "GRID T4-4Q",
                "GRID T4-8Q",
                "GRID T4-16Q",
                "GRID T4-1B4",
                "GRID T4-4C",
                "GRID T4-8C",
                "GRID T4-16C",
            ],
            ErrorKind::NotFound
        )
    );
}

#[test]
fn t4_path_like_type_is_rejected() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = manager(&host)
        .create(addr(T4), "../x", None, None)
        .unwrap_err();
    let Error::BadName { value, expected } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (value.as_str(), *expected, err.kind()),
        ("../x", "a vGPU type id or name", ErrorKind::BadInput)
    );
}

#[test]
fn t4_injected_create_failure_keeps_errno_and_path() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, EIO, "*/nvidia-231/create");
    let err = manager(&host)
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap_err();
    let Error::Host(vgpu_core::error::HostError::Write { path, value, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            path.clone(),
            value.as_str(),
            err.errno(),
            err.kind(),
            pending(&host)
        ),
        (
            create_path(&host, T4, "nvidia-231"),
            FIXED_TEXT,
            Some(EIO),
            ErrorKind::HostFault,
            NONE_PENDING
        )
    );
}

#[test]
fn t4_injected_create_failure_leaves_host_unchanged() {
    let host = SimHost::mount_for_test("t4-legacy");
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/nvidia-231/create");
    let err = manager(&host)
        .create(addr(T4), "nvidia-231", None, None)
        .unwrap_err();
    assert_eq!(
        (err.errno(), err.kind(), pending(&host), inventory(&host)),
        (Some(EBUSY), ErrorKind::Busy, NONE_PENDING, before)
    );
}

#[test]
fn t4_injected_create_failure_with_define_removes_the_definition() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, EIO, "*/nvidia-231/create");
    let manager = manager(&host);
    let err = manager
        .create(addr(T4), "nvidia-231", Some(FIXED), Some(Start::Auto))
        .unwrap_err();
    assert_eq!(
        (
            err.errno(),
            pending(&host),
            manager.definitions().mdevs().unwrap()
        ),
        (Some(EIO), NONE_PENDING, Vec::new())
    );
}

#[test]
fn t4_injected_create_failure_with_define_audits_the_undo() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, EIO, "*/nvidia-231/create");
    let err = manager(&host)
        .create(addr(T4), "nvidia-231", Some(FIXED), Some(Start::Auto))
        .unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), audit(&paths(&host))),
        (
            Some(EIO),
            NONE_PENDING,
            vec![
                record("create", T4, "started"),
                record("define", FIXED_TEXT, "ok"),
                record("start", FIXED_TEXT, &err.chain()),
                record("undo-define", FIXED_TEXT, "ok"),
                record("create", T4, &err.chain()),
            ]
        )
    );
}

#[test]
fn t4_injected_remove_failure_is_busy() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    host.fail_next(1, EBUSY, "*/remove");
    let err = manager.destroy(VgpuHandle::Mdev(FIXED)).unwrap_err();
    let Error::Host(vgpu_core::error::HostError::Busy { path, value, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            path.clone(),
            value.as_str(),
            err.errno(),
            err.kind(),
            pending(&host)
        ),
        (
            paths(&host)
                .pci_device(&addr(T4))
                .join(FIXED_TEXT)
                .join("remove"),
            "1",
            Some(EBUSY),
            ErrorKind::Busy,
            NONE_PENDING
        )
    );
}

#[test]
fn t4_destroy_of_unknown_mdev_is_not_found() {
    let host = SimHost::mount_for_test("t4-legacy");
    let err = manager(&host).destroy(VgpuHandle::Mdev(FIXED)).unwrap_err();
    let Error::NotFound { what, id, path } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*what, id.as_str(), path.clone(), err.kind()),
        (
            Object::Vgpu,
            FIXED_TEXT,
            paths(&host).mdev_devices(),
            ErrorKind::NotFound
        )
    );
}

#[test]
fn mdev_remove_failing_keeps_the_mdev() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap();
    let before = inventory(&host);
    host.fail_next(1, ENODEV, "*/remove");
    let err = manager.destroy(VgpuHandle::Mdev(FIXED)).unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), inventory(&host)),
        (Some(ENODEV), NONE_PENDING, before)
    );
}

#[test]
fn mdev_create_refused_for_capacity_is_no_space() {
    let host = SimHost::mount_for_test("t4-legacy");
    host.fail_next(1, ENOSPC, "*/nvidia-231/create");
    let err = manager(&host)
        .create(addr(T4), "nvidia-231", Some(FIXED), None)
        .unwrap_err();
    let Error::Host(vgpu_core::error::HostError::NoSpace { path, value, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            path.clone(),
            value.as_str(),
            err.errno(),
            err.kind(),
            pending(&host)
        ),
        (
            create_path(&host, T4, "nvidia-231"),
            FIXED_TEXT,
            Some(ENOSPC),
            ErrorKind::NoCapacity,
            NONE_PENDING
        )
    );
}

#[test]
fn no_capacity_is_its_own_error_naming_gpu_and_type() {
    let host = SimHost::mount_for_test("t4-legacy");
    let manager = manager(&host);
    manager.create(addr(T4), "GRID T4-16Q", None, None).unwrap();
    let err = manager
        .create(addr(T4), "GRID T4-16Q", None, None)
        .unwrap_err();
    let Error::NoCapacity {
        gpu,
        type_id,
        asked,
        available,
        reserved,
        limit,
        path,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        limit,
        &Some(vgpu_core::plan::capacity::Limit::Max { max: 1 })
    );
    assert_eq!(
        (
            *gpu,
            type_id.as_str(),
            *asked,
            *available,
            *reserved,
            path.clone(),
            err.kind()
        ),
        (
            addr(T4),
            "nvidia-234",
            1,
            0,
            0,
            paths(&host).pci_device(&addr(T4)),
            ErrorKind::NoCapacity
        )
    );
}

// ----- mediated devices on VFs (A40) -----

#[test]
fn a40_create_goes_on_first_free_vf() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    let created = manager(&host)
        .create(addr(A40), "NVIDIA A40-2Q", None, None)
        .unwrap();
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
    let manager = manager(&host);
    manager.create(addr(A40), "nvidia-558", None, None).unwrap();
    let created = manager.create(addr(A40), "nvidia-558", None, None).unwrap();
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
    manager(&host)
        .create(addr(A40), "nvidia-558", None, None)
        .unwrap();
    assert_eq!(available(&host, A40, "nvidia-558"), (23, 1));
}

// ----- NVIDIA vendor-specific VFIO (L40S) -----

#[test]
fn l40s_create_sets_vf_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let created = manager(&host)
        .create(addr(L40S), "NVIDIA L40S-8Q", None, None)
        .unwrap();
    assert_eq!(
        created,
        Created {
            placement_id: None,
            id: VgpuHandle::Vf(addr(L40S_VF0)),
            gpu: addr(L40S),
            placement: Placement::VendorVf {
                vf: addr(L40S_VF0),
                type_id: 1152
            },
            previous_driver: None,
        }
    );
}

#[test]
fn l40s_created_vgpu_runs_as_vendor_vf() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    manager(&host)
        .create(addr(L40S), "L40S-8Q", None, None)
        .unwrap();
    assert_eq!(
        gpu(&host, L40S).vgpus,
        vec![Vgpu {
            placement: None,
            id: VgpuHandle::Vf(addr(L40S_VF0)),
            type_id: "1152".to_owned(),
            parent: addr(L40S),
        }]
    );
}

#[test]
fn l40s_destroy_reports_the_stopped_vendor_vgpu() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    let created = manager.create(addr(L40S), "L40S-8Q", None, None).unwrap();
    let destroyed = manager.destroy(created.id).unwrap();
    assert_eq!(destroyed.stopped, Some(Running::VendorVf { type_id: 1152 }));
}

#[test]
fn l40s_uuid_for_vf_vgpu_is_refused() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let err = manager(&host)
        .create(addr(L40S), "L40S-8Q", Some(FIXED), None)
        .unwrap_err();
    let Error::UuidNotApplicable { device } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((*device, err.kind()), (addr(L40S_VF0), ErrorKind::BadInput));
}

#[test]
fn l40s_destroy_clears_vf_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let before = inventory(&host);
    let manager = manager(&host);
    let created = manager.create(addr(L40S), "L40S-8Q", None, None).unwrap();
    manager.destroy(created.id).unwrap();
    assert_eq!(inventory(&host), before);
}

#[test]
fn l40s_injected_type_write_failure_leaves_host_unchanged() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let before = inventory(&host);
    host.fail_next(1, EIO, "*/current_vgpu_type");
    let err = manager(&host)
        .create(addr(L40S), "L40S-8Q", None, None)
        .unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), inventory(&host)),
        (Some(EIO), NONE_PENDING, before)
    );
}

#[test]
fn vendor_vf_destroy_failing_keeps_the_vgpu() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    let created = manager.create(addr(L40S), "L40S-8Q", None, None).unwrap();
    let before = inventory(&host);
    host.fail_next(1, EBUSY, "*/current_vgpu_type");
    let err = manager.destroy(created.id).unwrap_err();
    assert_eq!(
        (err.errno(), pending(&host), inventory(&host)),
        (Some(EBUSY), NONE_PENDING, before)
    );
}

// ----- plain SR-IOV VFs assigned whole (Flex) -----

#[test]
fn flex_plain_vf_create_binds_vfio() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    let created = manager.create(addr(FLEX), "vf", None, None).unwrap();
    assert_eq!(
        (created, gpu(&host, FLEX).vfs[0].driver.clone()),
        (
            Created {
                placement_id: None,
                id: VgpuHandle::Vf(addr(FLEX_VF0)),
                gpu: addr(FLEX),
                placement: Placement::PlainVf { vf: addr(FLEX_VF0) },
                previous_driver: Some("i915".to_owned()),
            },
            Some("vfio-pci".to_owned())
        )
    );
}

#[test]
fn flex_plain_vf_destroy_returns_default_driver() {
    let host = SimHost::mount_for_test("flex-sriov");
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 2, None, false).unwrap();
    let before = inventory(&host);
    let created = manager.create(addr(FLEX), "vf", None, None).unwrap();
    manager.destroy(created.id).unwrap();
    assert_eq!(inventory(&host), before);
}

#[test]
fn flex_plain_vf_without_vfs_says_enable_first() {
    let host = SimHost::mount_for_test("flex-sriov");
    let err = manager(&host)
        .create(addr(FLEX), "vf", None, None)
        .unwrap_err();
    let Error::NoVfs { gpu, backend } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*gpu, *backend, err.kind()),
        (addr(FLEX), Backend::Sriov, ErrorKind::Conflict)
    );
}
