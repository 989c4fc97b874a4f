//! `InventoryDelta` on inventories built by the test fleet.

use crate::model::delta::*;
use crate::model::pci::PciAddress;
use crate::model::*;
use crate::plan::testing::fleet::{Model, enable_vfs, gpu};

fn addr(text: &str) -> PciAddress {
    text.parse().unwrap()
}

fn flex() -> Gpu {
    gpu(Model::Flex170, addr("0000:4d:00.0"), None)
}

fn items(list: &[DeltaItem]) -> Vec<(DeltaKind, &str)> {
    list.iter().map(|i| (i.kind, i.id.as_str())).collect()
}

#[test]
fn between_same_reading_is_empty() {
    let gpu = flex();
    assert!(InventoryDelta::between(Some(&gpu), Some(&gpu)).is_empty());
}

#[test]
fn between_nothing_and_nothing_is_empty() {
    assert!(InventoryDelta::between(None, None).is_empty());
}

#[test]
fn between_absent_and_gpu_adds_gpu_then_vfs() {
    let mut gpu = flex();
    enable_vfs(&mut gpu, 2);
    let delta = InventoryDelta::between(None, Some(&gpu));
    assert_eq!(
        items(&delta.added),
        [
            (DeltaKind::Gpu, "0000:4d:00.0"),
            (DeltaKind::Vf, "0000:4d:00.4"),
            (DeltaKind::Vf, "0000:4d:00.5")
        ]
    );
}

#[test]
fn between_gpu_and_absent_removes_gpu_and_vgpus() {
    let mut gpu = gpu(Model::T4, addr("0000:3b:00.0"), None);
    let uuid = uuid::Uuid::from_u128(7);
    gpu.vgpus.push(Vgpu {
        id: VgpuHandle::Mdev(uuid),
        type_id: "nvidia-222".to_owned(),
        parent: gpu.address,
    });
    let delta = InventoryDelta::between(Some(&gpu), None);
    assert_eq!(
        items(&delta.removed),
        [
            (DeltaKind::Gpu, "0000:3b:00.0"),
            (DeltaKind::Vgpu, "00000000-0000-0000-0000-000000000007")
        ]
    );
}

#[test]
fn between_enabled_vfs_adds_them_and_changes_num_vfs() {
    let before = flex();
    let mut after = before.clone();
    enable_vfs(&mut after, 1);
    let delta = InventoryDelta::between(Some(&before), Some(&after));
    assert_eq!(
        (items(&delta.added), delta.changed),
        (
            vec![(DeltaKind::Vf, "0000:4d:00.4")],
            vec![DeltaChange {
                kind: DeltaKind::Gpu,
                id: "0000:4d:00.0".to_owned(),
                field: "num_vfs",
                from: Some("0".to_owned()),
                to: Some("1".to_owned()),
            }]
        )
    );
}

#[test]
fn between_vf_driver_unbound_is_a_driver_change() {
    let mut before = flex();
    enable_vfs(&mut before, 1);
    let mut after = before.clone();
    after.vfs[0].driver = None;
    let delta = InventoryDelta::between(Some(&before), Some(&after));
    assert_eq!(
        delta.changed,
        [DeltaChange {
            kind: DeltaKind::Vf,
            id: "0000:4d:00.4".to_owned(),
            field: "driver",
            from: Some("i915".to_owned()),
            to: None,
        }]
    );
}

#[test]
fn between_vendor_type_set_changes_vgpu_type_and_adds_vgpu() {
    let before = gpu(Model::L40s, addr("0000:41:00.0"), None);
    let mut after = before.clone();
    let vf = after.vfs[0].address;
    after.vfs[0].vgpu_type = Some("1145".to_owned());
    after.vgpus.push(Vgpu {
        id: VgpuHandle::Vf(vf),
        type_id: "1145".to_owned(),
        parent: after.address,
    });
    let delta = InventoryDelta::between(Some(&before), Some(&after));
    assert_eq!(
        (
            items(&delta.added),
            delta.changed.len(),
            delta.changed[0].field
        ),
        (vec![(DeltaKind::Vgpu, "0000:41:00.4")], 1, "vgpu_type")
    );
}

#[test]
fn between_removed_vf_is_removed_not_changed() {
    let mut before = flex();
    enable_vfs(&mut before, 2);
    let mut after = before.clone();
    after.vfs.pop();
    let delta = InventoryDelta::between(Some(&before), Some(&after));
    assert_eq!(
        (items(&delta.removed), delta.changed.len()),
        (vec![(DeltaKind::Vf, "0000:4d:00.5")], 0)
    );
}
