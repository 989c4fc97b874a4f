//! `InventoryDelta` on GPUs built here as discovery reports them: a Flex 170 (plain SR-IOV,
//! no VF enabled), a T4 (mdev on the PF) and an L40S (NVIDIA vendor VFIO on 32 VFs). A delta
//! reads no vGPU type of a GPU, so these GPUs list none.

use super::*;
use crate::pci::{PciAddress, SriovCapability};
use crate::{Backend, Gpu, Vf, Vgpu, VgpuHandle};

fn addr(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// The `index`-th VF of `pf` (offset 4, stride 1).
fn vf_address(pf: PciAddress, index: u32) -> PciAddress {
    let rid = (u32::from(pf.bus()) << 8) | (u32::from(pf.device()) << 3) | u32::from(pf.function());
    let vf = rid + 4 + index;
    PciAddress::new(
        pf.domain(),
        u8::try_from(vf >> 8).unwrap(),
        ((vf >> 3) & 0x1f) as u8,
        (vf & 7) as u8,
    )
    .unwrap()
}

/// `count` VFs of `pf` from the first, each on `driver`.
fn vfs(pf: PciAddress, count: u32, driver: &str) -> Vec<Vf> {
    (0..count)
        .map(|i| Vf {
            address: vf_address(pf, i),
            driver: Some(driver.to_owned()),
            iommu_group: None,
            vgpu_type: None,
            memory_mib: None,
        })
        .collect()
}

/// An idle GPU `vendor:device` at `address` on `driver`, its VFs on the same driver.
fn pf(
    address: &str,
    ids: (u16, u16),
    driver: &str,
    backend: Backend,
    vf_counts: (u32, u32),
) -> Gpu {
    let (vendor, device) = ids;
    let (total_vfs, enabled) = vf_counts;
    let address = addr(address);
    Gpu {
        size_mode: None,
        address,
        vendor_id: Some(vendor),
        device_id: Some(device),
        subsystem_vendor_id: Some(vendor),
        subsystem_device_id: None,
        class: Some(0x030200),
        vendor: None,
        model: None,
        driver: Some(driver.to_owned()),
        numa_node: None,
        iommu_group: None,
        backend,
        sriov: (total_vfs > 0).then_some(SriovCapability {
            total_vfs,
            num_vfs: enabled,
            offset: Some(4),
            stride: Some(1),
            vf_device_id: Some(device),
            drivers_autoprobe: Some(true),
        }),
        vfs: vfs(address, enabled, driver),
        types: Vec::new(),
        vgpus: Vec::new(),
    }
}

fn flex() -> Gpu {
    pf(
        "0000:4d:00.0",
        (0x8086, 0x56c0),
        "i915",
        Backend::Sriov,
        (16, 0),
    )
}

fn t4() -> Gpu {
    pf(
        "0000:3b:00.0",
        (0x10de, 0x1eb8),
        "nvidia",
        Backend::Mdev,
        (0, 0),
    )
}

fn l40s() -> Gpu {
    pf(
        "0000:41:00.0",
        (0x10de, 0x26b9),
        "nvidia",
        Backend::NvidiaVfio,
        (32, 32),
    )
}

/// Enables `count` VFs of a plain SR-IOV GPU, each on `i915`.
fn enable_vfs(gpu: &mut Gpu, count: u32) {
    gpu.vfs = vfs(gpu.address, count, "i915");
    if let Some(sriov) = &mut gpu.sriov {
        sriov.num_vfs = count;
    }
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
    let mut gpu = t4();
    let uuid = uuid::Uuid::from_u128(7);
    gpu.vgpus.push(Vgpu {
        placement: None,
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
    let before = l40s();
    let mut after = before.clone();
    let vf = after.vfs[0].address;
    after.vfs[0].vgpu_type = Some("1145".to_owned());
    after.vgpus.push(Vgpu {
        placement: None,
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
