//! `create` when another tool (mdevctl, libvirt's node devices) takes a place between the read
//! that chose it and the write that makes the vGPU: the kernel refuses the write as full, and
//! `create` goes to the next place once. The refusal is injected with the simulator's
//! `fail-next`; the tool that fills a GPU is this test, writing to the simulated sysfs itself.
//! The real race, with mdevctl, is `vgpu-cli/tests/race_cli.rs`.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::PathBuf;

use uuid::Uuid;
use vgpu_core::{
    Error, ErrorKind,
    manager::Placement,
    manager::{Created, Target},
    model::VgpuHandle,
    state::{MdevDefinition, Start, VfVgpuDefinition},
};

use crate::common::{NONE_PENDING, addr, audit, gpu, manager, paths, pending};
use vgpu_sim::SimHost;

const A40: &str = "0000:41:00.0";
const A40_VF0: &str = "0000:41:00.4";
const A40_VF1: &str = "0000:41:00.5";
const A40_1Q: &str = "nvidia-557";
const A40_2Q: &str = "nvidia-558";
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
const L40S_VF1: &str = "0000:41:00.5";
const L40S_8Q: u32 = 1152;
const EIO: i32 = 5;
const EINVAL: i32 = 22;
/// What the kernel's mdev core answers a `create` past a type's instance count.
const EUSERS: i32 = 87;

const FIXED: Uuid = Uuid::from_u128(0x0d6c_4c1a_5e1f_4b8e_a1d2_0000_0000_0001);

/// The `create` file of mdev type `type_id` under `parent`.
fn create_path(host: &SimHost, parent: &str, type_id: &str) -> PathBuf {
    paths(host)
        .pci_device(&addr(parent))
        .join("mdev_supported_types")
        .join(type_id)
        .join("create")
}

fn auto(parent: &str, type_id: &str) -> MdevDefinition {
    MdevDefinition {
        uuid: FIXED,
        parent: parent.to_owned(),
        mdev_type: type_id.to_owned(),
        start: Start::Auto,
        attrs: Vec::new(),
    }
}

/// Another tool makes an mdev of `type_id` on each of the first `count` VFs of the A40.
fn fill_a40(host: &SimHost, type_id: &str, count: usize) {
    for (n, vf) in gpu(host, A40).vfs.iter().take(count).enumerate() {
        let uuid = Uuid::from_u128(0xa40 << 64 | n as u128);
        let parent = vf.address.to_string();
        std::fs::write(create_path(host, &parent, type_id), uuid.to_string()).unwrap();
    }
}

/// The actions of the audit records about `device`.
fn actions_on(host: &SimHost, device: &str) -> Vec<String> {
    audit(&paths(host))
        .into_iter()
        .filter(|(_, d, _)| d == device)
        .map(|(action, _, _)| action)
        .collect()
}

#[test]
fn create_refused_as_full_on_first_vf_lands_on_next_vf() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    host.fail_next(
        1,
        EUSERS,
        &format!("*{A40_VF0}/mdev_supported_types/*/create"),
    );
    let manager = manager(&host);

    let created = manager
        .create(addr(A40), "A40-2Q", Some(FIXED), Some(Start::Auto))
        .unwrap();

    assert_eq!(
        (
            created,
            manager.definitions().mdevs().unwrap(),
            gpu(&host, A40)
                .vgpus
                .iter()
                .map(|v| v.parent)
                .collect::<Vec<_>>(),
            pending(&host),
        ),
        (
            Created {
                placement_id: None,
                id: VgpuHandle::Mdev(FIXED),
                gpu: addr(A40),
                placement: Placement::Mdev {
                    parent: addr(A40_VF1),
                    type_id: A40_2Q.to_owned()
                },
                previous_driver: None,
            },
            vec![auto(A40_VF1, A40_2Q)],
            vec![addr(A40_VF1)],
            NONE_PENDING,
        )
    );
}

#[test]
fn create_refused_as_full_audits_the_retry_and_the_undone_definition() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    host.fail_next(
        1,
        EUSERS,
        &format!("*{A40_VF0}/mdev_supported_types/*/create"),
    );

    manager(&host)
        .create(addr(A40), "A40-2Q", Some(FIXED), Some(Start::Auto))
        .unwrap();

    assert_eq!(
        (
            actions_on(&host, A40_VF0),
            actions_on(&host, &FIXED.to_string())
        ),
        (
            vec!["retry".to_owned()],
            ["define", "start", "undo-define", "define", "start"]
                .map(str::to_owned)
                .to_vec()
        )
    );
}

#[test]
fn create_refused_on_last_free_vf_is_the_kernels_refusal_without_definition() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    fill_a40(&host, A40_1Q, 31);
    let last = gpu(&host, A40).vfs[31].address.to_string();
    host.fail_next(1, EUSERS, &format!("*{last}/mdev_supported_types/*/create"));
    let manager = manager(&host);

    let err = manager
        .create(addr(A40), "A40-1Q", Some(FIXED), Some(Start::Auto))
        .unwrap_err();

    let Error::Host(vgpu_core::error::HostError::NoSpace { path, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            path.clone(),
            err.errno(),
            err.kind(),
            manager.definitions().mdevs().unwrap(),
            gpu(&host, A40).vgpus.len(),
            pending(&host),
        ),
        (
            create_path(&host, &last, A40_1Q),
            Some(EUSERS),
            ErrorKind::NoCapacity,
            Vec::new(),
            31,
            NONE_PENDING,
        )
    );
}

#[test]
fn create_on_gpu_another_tool_filled_is_no_capacity_without_definition() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    fill_a40(&host, A40_1Q, 32);
    let manager = manager(&host);

    let err = manager
        .create(addr(A40), "A40-1Q", Some(FIXED), Some(Start::Auto))
        .unwrap_err();

    let Error::NoCapacity { gpu, available, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*gpu, *available, manager.definitions().mdevs().unwrap()),
        (addr(A40), 0, Vec::new())
    );
}

#[test]
fn create_write_failing_with_eio_is_not_retried() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    host.fail_next(1, EIO, &format!("*{A40_VF0}/mdev_supported_types/*/create"));
    let manager = manager(&host);

    let err = manager
        .create(addr(A40), "A40-2Q", Some(FIXED), Some(Start::Auto))
        .unwrap_err();

    assert_eq!(
        (
            err.errno(),
            manager.definitions().mdevs().unwrap(),
            gpu(&host, A40).vgpus.len(),
            actions_on(&host, A40_VF0),
        ),
        (Some(EIO), Vec::new(), 0, Vec::<String>::new())
    );
}

#[test]
fn vendor_type_refused_as_full_on_first_vf_lands_on_next_vf() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    host.fail_next(1, EUSERS, &format!("*{L40S_VF0}/nvidia/current_vgpu_type"));
    let manager = manager(&host);

    let created = manager
        .create(addr(L40S), "L40S-8Q", None, Some(Start::Auto))
        .unwrap();

    assert_eq!(
        (created, manager.definitions().vf_vgpus().unwrap()),
        (
            Created {
                placement_id: None,
                id: VgpuHandle::Vf(addr(L40S_VF1)),
                gpu: addr(L40S),
                placement: Placement::VendorVf {
                    vf: addr(L40S_VF1),
                    type_id: L40S_8Q
                },
                previous_driver: None,
            },
            vec![VfVgpuDefinition {
                placement: None,
                vf: addr(L40S_VF1),
                gpu: addr(L40S),
                type_id: L40S_8Q,
                type_name: Some("NVIDIA L40S-8Q".to_owned()),
                start: Start::Auto,
            }],
        )
    );
}

#[test]
fn vendor_type_refused_on_vf_that_still_lists_it_is_not_retried() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    host.fail_next(1, EINVAL, &format!("*{L40S_VF0}/nvidia/current_vgpu_type"));
    let manager = manager(&host);

    let err = manager
        .create(addr(L40S), "L40S-8Q", None, Some(Start::Auto))
        .unwrap_err();

    assert_eq!(
        (
            err.errno(),
            manager.definitions().vf_vgpus().unwrap(),
            actions_on(&host, L40S_VF0),
        ),
        (
            Some(EINVAL),
            Vec::new(),
            ["define", "start", "undo-define"]
                .map(str::to_owned)
                .to_vec()
        )
    );
}

#[test]
fn provision_skips_a_vf_refused_as_full_and_fills_the_next() {
    let host = SimHost::mount_for_test("a40-vf-mdev");
    host.fail_next(
        1,
        EUSERS,
        &format!("*{A40_VF0}/mdev_supported_types/*/create"),
    );
    let target = Target {
        gpu: addr(A40),
        vfs: None,
        type_name: "A40-2Q".to_owned(),
        count: Some(2),
        define: None,
    };
    let report = manager(&host).provision(vec![target]).unwrap().remove(0);

    let mut parents: Vec<_> = gpu(&host, A40).vgpus.iter().map(|v| v.parent).collect();
    parents.sort();
    assert_eq!(
        (
            report.created.len(),
            report.error,
            parents,
            actions_on(&host, A40_VF0)
        ),
        (
            2,
            None,
            vec![addr(A40_VF1), addr("0000:41:00.6")],
            vec!["skip".to_owned()]
        )
    );
}
