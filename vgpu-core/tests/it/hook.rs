//! `Manager::prepare_domain` and `release_domain`, the libvirt hook's work, on the simulator:
//! what they report, what they audit, and what a failure undoes.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common;

use crate::common::{addr, audit, manager, paths, record};
use uuid::Uuid;
use vgpu_core::{
    manager::{HookDomain, Left},
    model::{VgpuHandle, holder::Holder},
    state::{HookConfig, Made, Start},
};
use vgpu_sim::SimHost;

const L40S: &str = "0000:41:00.0";
const VF: &str = "0000:41:00.4";
const DOMAIN: Uuid = Uuid::from_u128(0x0d0d);
const OTHER: Uuid = Uuid::from_u128(0x0e0e);
const EIO: i32 = 5;

fn domain(uuid: Uuid, devices: &[&str], vgpu_type: Option<&str>) -> HookDomain {
    HookDomain {
        holder: Holder {
            domain: format!("vm-{}", uuid.as_u128()),
            uuid,
            tenant: None,
        },
        devices: devices.iter().map(|d| d.parse().unwrap()).collect(),
        vgpu_type: vgpu_type.map(str::to_owned),
        flavor: None,
    }
}

fn vendor_type(vf: &str, type_id: u32) -> Made {
    Made::VendorType {
        vf: addr(vf),
        type_id,
    }
}

#[test]
fn prepare_domain_reports_what_it_made_from_metadata() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let prepared = manager(&host)
        .prepare_domain(
            &domain(DOMAIN, &[VF, "0000:41:00.5"], Some("L40S-24Q")),
            &HookConfig::default(),
        )
        .unwrap();
    assert_eq!(
        prepared.made,
        vec![vendor_type(VF, 1155), vendor_type("0000:41:00.5", 1155)]
    );
}

#[test]
fn prepare_domain_without_devices_takes_no_lock_and_audits_nothing() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let prepared = manager(&host)
        .prepare_domain(&domain(DOMAIN, &[], None), &HookConfig::default())
        .unwrap();
    assert_eq!(
        (
            prepared.made.len(),
            paths(&host).var().join("log/vgpu/audit.jsonl").exists()
        ),
        (0, false)
    );
}

/// The third VF's type cannot be written: the first two are cleared again, newest first, and
/// the record is put back as it was (none).
#[test]
fn prepare_domain_that_fails_undoes_its_types_and_its_record() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    host.fail_next(1, EIO, "*/0000:41:00.6/nvidia/current_vgpu_type");
    let vfs = [VF, "0000:41:00.5", "0000:41:00.6"];
    let err = manager(&host)
        .prepare_domain(
            &domain(DOMAIN, &vfs, Some("L40S-12Q")),
            &HookConfig::default(),
        )
        .unwrap_err();
    let log = audit(&paths(&host));
    let undone: Vec<_> = log
        .iter()
        .filter(|(action, _, _)| action.starts_with("undo"))
        .cloned()
        .collect();
    let record_path = paths(&host)
        .run()
        .join("vgpu/hook")
        .join(DOMAIN.to_string());
    assert_eq!(
        (err.to_string(), undone, record_path.exists()),
        (
            "domain vm-3341: cannot make 0000:41:00.6 ready".to_owned(),
            vec![
                record("undo-create", "0000:41:00.5", "ok"),
                record("undo-create", VF, "ok"),
                record("undo-record", &record_path.display().to_string(), "ok"),
            ],
            false
        )
    );
}

#[test]
fn release_domain_leaves_a_vf_a_process_holds_open_and_says_who() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let m = manager(&host);
    m.prepare_domain(
        &domain(DOMAIN, &[VF], Some("L40S-12Q")),
        &HookConfig::default(),
    )
    .unwrap();
    let group = std::fs::read_link(
        host.root()
            .join(format!("sys/bus/pci/devices/{VF}/iommu_group")),
    )
    .unwrap();
    let node = format!("/dev/vfio/{}", group.file_name().unwrap().to_string_lossy());
    host.hold(4242, "qemu-system-x86", &node).unwrap();
    let released = m.release_domain(DOMAIN, "vm").unwrap();
    let reason = "process 4242 (qemu-system-x86) holds it open";
    assert_eq!(
        (
            released.stopped,
            released.left,
            audit(&paths(&host)).contains(&record("leave", VF, reason))
        ),
        (
            Vec::new(),
            vec![Left {
                made: vendor_type(VF, 1153),
                reason: reason.to_owned()
            }],
            true
        )
    );
}

/// A VF whose type another domain's record claims, and that no process holds, moves to the
/// domain that starts with it; the late release of the first one finds nothing to take back.
#[test]
fn prepare_domain_takes_over_the_claim_of_a_stopped_domain() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let m = manager(&host);
    m.prepare_domain(
        &domain(DOMAIN, &[VF], Some("L40S-12Q")),
        &HookConfig::default(),
    )
    .unwrap();
    let taken = m
        .prepare_domain(
            &domain(OTHER, &[VF], Some("L40S-12Q")),
            &HookConfig::default(),
        )
        .unwrap();
    let late = m.release_domain(DOMAIN, "vm").unwrap();
    assert_eq!(
        (taken.adopted, taken.made, late.stopped),
        (vec![vendor_type(VF, 1153)], Vec::new(), Vec::new())
    );
}

#[test]
fn release_domain_keeps_the_definition_of_what_it_stops() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let m = manager(&host);
    let defined = m
        .define(addr(L40S), "L40S-6Q", None, Start::Manual)
        .unwrap();
    m.prepare_domain(&domain(DOMAIN, &[VF], None), &HookConfig::default())
        .unwrap();
    let released = m.release_domain(DOMAIN, "vm").unwrap();
    assert_eq!(
        (
            defined.id,
            released.stopped,
            m.definitions()
                .vf_vgpu(addr(VF))
                .unwrap()
                .map(|d| d.type_id)
        ),
        (
            VgpuHandle::Vf(addr(VF)),
            vec![vendor_type(VF, 1151)],
            Some(1151)
        )
    );
}

/// An L40S holds one L40S-48Q: a domain asking for two is refused while planning (before any
/// type is written), not half-made and undone.
#[test]
fn prepare_domain_asking_one_type_twice_past_the_gpus_room_makes_nothing() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let err = manager(&host)
        .prepare_domain(
            &domain(DOMAIN, &[VF, "0000:41:00.5"], Some("L40S-48Q")),
            &HookConfig::default(),
        )
        .unwrap_err();
    let written = audit(&paths(&host))
        .into_iter()
        .filter(|(action, _, _)| action == "start")
        .count();
    assert_eq!(
        (err.kind(), written, common::gpu(&host, L40S).vgpus.len()),
        (vgpu_core::ErrorKind::NoCapacity, 0, 0)
    );
}

/// Domain vm-a's metadata asks L40S-24Q for a VF and its prepare types it; vm-b asks L40S-12Q
/// for the same VF: vm-b is refused, naming both types, and vm-a keeps its claim.
#[test]
fn prepare_domain_refuses_a_running_vgpu_of_another_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    let config = HookConfig::default();
    manager
        .prepare_domain(&domain(DOMAIN, &[VF], Some("L40S-24Q")), &config)
        .unwrap();
    let hook_record = |uuid: Uuid| {
        std::fs::read_to_string(paths(&host).run().join("vgpu/hook").join(uuid.to_string())).ok()
    };
    let record_before = hook_record(DOMAIN);

    let err = manager
        .prepare_domain(&domain(OTHER, &[VF], Some("L40S-12Q")), &config)
        .unwrap_err();

    assert_eq!(
        (
            err.kind(),
            err.chain(),
            hook_record(DOMAIN),
            hook_record(OTHER),
        ),
        (
            vgpu_core::ErrorKind::Conflict,
            format!(
                "domain vm-3598: cannot make {VF} ready (type \"L40S-12Q\" from the domain's \
                 metadata): {VF} is a NVIDIA L40S-24Q (1155) vGPU, not the L40S-12Q asked for"
            ),
            record_before,
            None
        )
    );
}

/// The same domain asking the type its VF has is given it.
#[test]
fn prepare_domain_takes_a_running_vgpu_of_its_type() {
    let host = SimHost::mount_for_test("l40s-vendor-vfio");
    let manager = manager(&host);
    let config = HookConfig::default();
    manager
        .prepare_domain(&domain(DOMAIN, &[VF], Some("L40S-24Q")), &config)
        .unwrap();

    let again = manager
        .prepare_domain(&domain(DOMAIN, &[VF], Some("NVIDIA L40S-24Q")), &config)
        .unwrap();

    assert_eq!(again.running, vec![VgpuHandle::Vf(addr(VF))]);
}
