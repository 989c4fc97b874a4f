//! In-memory GPUs, as discovery reports them, for planner and placement tests and benchmarks:
//! no files, so a fleet of a thousand GPUs costs nothing to build.
//!
//! Types come from the built-in catalog (frame buffer, instances per GPU, the type ids one
//! driver version used), so they agree with `vgpu-sim`'s profiles. [`record`] changes an
//! inventory as the kernel would when a vGPU is made at a [`Pick`], so that a sequence of
//! placements can be replayed without a host.

use uuid::Uuid;

use crate::model::catalog;
use crate::model::pci::PciAddress;
use crate::model::pci::SriovCapability;
use crate::model::{Backend, Gpu, Inventory, Vf, Vgpu, VgpuHandle, VgpuType};
use crate::parse::{gvtg_type_instances, mig_backing};
use crate::place::Pick;

/// The models these builders know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// Tesla T4 16 GB: mdev on the PF, one type at a time.
    T4,
    /// A40 48 GB: mdev on 32 VFs, one type at a time.
    A40,
    /// L40S 48 GB: NVIDIA vendor VFIO on 32 VFs, one type at a time.
    L40s,
    /// L40S 48 GB whose VFs are not enabled yet.
    L40sVfsOff,
    /// Data Center GPU Flex 170 16 GB: plain SR-IOV, 16 VFs, none enabled.
    Flex170,
    /// UHD Graphics 630: Intel GVT-g, types mixed by shares.
    Gvtg,
}

/// `(vendor, device, model name, catalog gpu, catalog interface)`.
fn ids(model: Model) -> (u16, u16, &'static str, &'static str, &'static str) {
    match model {
        Model::T4 => (
            0x10de,
            0x1eb8,
            "TU104GL [Tesla T4]",
            "Tesla T4 16GB",
            "mdev",
        ),
        Model::A40 => (
            0x10de,
            0x2235,
            "GA102GL [A40]",
            "NVIDIA A40 48GB",
            "mdev-on-vf",
        ),
        Model::L40s | Model::L40sVfsOff => (
            0x10de,
            0x26b9,
            "AD102GL [L40S]",
            "NVIDIA L40S 48GB",
            "vendor-vfio",
        ),
        Model::Flex170 => (0x8086, 0x56c0, "ATS-M [Data Center GPU Flex 170]", "", ""),
        Model::Gvtg => (
            0x8086,
            0x3e92,
            "CoffeeLake-S GT2 [UHD Graphics 630]",
            "",
            "",
        ),
    }
}

/// GVT-g's types: `(id, low MiB, high MiB)`, four fences each.
const GVTG: &[(&str, u64, u64)] = &[
    ("i915-GVTg_V5_1", 512, 2048),
    ("i915-GVTg_V5_2", 256, 1024),
    ("i915-GVTg_V5_4", 128, 512),
    ("i915-GVTg_V5_8", 64, 384),
];
/// GVT-g's graphics memory and fences, as `vgpu-sim` models them.
const GVT_LOW_MIB: u64 = 512;
const GVT_HIGH_MIB: u64 = 3072;
const GVT_FENCES: u64 = 28;

/// A GPU of `model` at `address` on `numa_node`, idle.
pub fn gpu(model: Model, address: PciAddress, numa_node: Option<u32>) -> Gpu {
    let (vendor, device, name, catalog_gpu, interface) = ids(model);
    let (backend, total_vfs, enabled) = match model {
        Model::T4 | Model::Gvtg => (Backend::Mdev, 0, 0),
        Model::A40 => (Backend::VfMdev, 32, 32),
        Model::L40s => (Backend::NvidiaVfio, 32, 32),
        Model::L40sVfsOff => (Backend::Sriov, 32, 0),
        Model::Flex170 => (Backend::Sriov, 16, 0),
    };
    let vfs: Vec<Vf> = (0..enabled)
        .filter_map(|i| vf_address(address, i))
        .map(|vf| Vf {
            address: vf,
            driver: Some(if vendor == 0x10de { "nvidia" } else { "i915" }.to_owned()),
            iommu_group: None,
            vgpu_type: None,
            memory_mib: None,
        })
        .collect();
    let types = match model {
        Model::Gvtg => GVTG
            .iter()
            .map(|(id, low, high)| {
                let mut ty = vgpu_type(
                    id,
                    Some(id.trim_start_matches("i915-")),
                    low + high,
                    gvtg_type_instances(id).unwrap_or(1),
                );
                ty.description = Some(format!(
                    "low_gm_size: {low}MB\nhigh_gm_size: {high}MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n"
                ));
                ty
            })
            .collect(),
        Model::Flex170 | Model::L40sVfsOff => Vec::new(),
        _ => catalog::all()
            .iter()
            .filter(|row| row.gpu == catalog_gpu && row.interface == interface)
            .filter_map(|row| {
                let id = row.type_id.as_deref()?;
                Some(vgpu_type(
                    id,
                    Some(&row.name),
                    row.framebuffer_mib,
                    row.max_instances,
                ))
            })
            .collect(),
    };
    let mut gpu = Gpu {
        size_mode: None,
        address,
        vendor_id: Some(vendor),
        device_id: Some(device),
        subsystem_vendor_id: Some(vendor),
        subsystem_device_id: None,
        class: Some(if model == Model::Gvtg {
            0x030000
        } else {
            0x030200
        }),
        vendor: None,
        model: Some(name.to_owned()),
        driver: Some(if vendor == 0x10de { "nvidia" } else { "i915" }.to_owned()),
        numa_node,
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
        vfs,
        types,
        vgpus: Vec::new(),
    };
    recount(&mut gpu);
    gpu
}

fn vgpu_type(id: &str, name: Option<&str>, framebuffer_mib: u64, max: u32) -> VgpuType {
    VgpuType {
        placements: None,
        placement_size: None,
        id: id.to_owned(),
        name: name.map(str::to_owned),
        name_source: name.map(|_| crate::model::NameSource::Sysfs),
        framebuffer_mib: Some(framebuffer_mib),
        max_instances: Some(max),
        available: 0,
        limit: None,
        in_use: 0,
        device_api: Some("vfio-pci".to_owned()),
        description: None,
        mig: name.and_then(mig_backing),
        offered: 0,
    }
}

/// The `index`-th VF of `pf` (offset 4, stride 1).
pub fn vf_address(pf: PciAddress, index: u32) -> Option<PciAddress> {
    let rid = (u32::from(pf.bus()) << 8) | (u32::from(pf.device()) << 3) | u32::from(pf.function());
    let vf = rid + 4 + index;
    PciAddress::new(
        pf.domain(),
        u8::try_from(vf >> 8).ok()?,
        ((vf >> 3) & 0x1f) as u8,
        (vf & 7) as u8,
    )
}

/// Sets every type's `available` as the kernel would show it now.
fn recount(gpu: &mut Gpu) {
    let free_vfs = gpu.vfs.iter().filter(|v| v.vgpu_type.is_none()).count() as u32;
    let busy: Option<String> = gpu
        .types
        .iter()
        .find(|t| t.in_use > 0)
        .map(|t| t.id.clone());
    if gpu.backend == Backend::Mdev && gpu.vendor_id != Some(0x10de) {
        let used = |f: &dyn Fn(&VgpuType) -> u64| -> u64 {
            gpu.types.iter().map(|t| u64::from(t.in_use) * f(t)).sum()
        };
        let (low, high, fences) = (used(&|t| gvt(t).0), used(&|t| gvt(t).1), used(&|_| 4));
        for t in &mut gpu.types {
            let (l, h) = gvt(t);
            let n = ((GVT_LOW_MIB - low.min(GVT_LOW_MIB)) / l)
                .min((GVT_HIGH_MIB - high.min(GVT_HIGH_MIB)) / h)
                .min((GVT_FENCES - fences.min(GVT_FENCES)) / 4);
            t.offered = u32::try_from(n).unwrap_or(0);
            t.recount();
        }
        return;
    }
    for t in &mut gpu.types {
        let other_busy = busy.as_ref().is_some_and(|b| *b != t.id);
        t.offered = match gpu.backend {
            _ if other_busy => 0,
            Backend::Mdev => t.max_instances.unwrap_or(0),
            _ => free_vfs,
        };
        t.recount();
    }
    if gpu.backend == Backend::NvidiaVfio {
        // Only creatable types are listed, and none by name once the card is full.
        gpu.types.retain(|t| t.in_use > 0 || t.available > 0);
    }
}

fn gvt(t: &VgpuType) -> (u64, u64) {
    GVTG.iter()
        .find(|(id, _, _)| *id == t.id)
        .map_or((1, 1), |(_, low, high)| (*low, *high))
}

/// Changes `inventory` as the kernel would when the vGPU `pick` names is made (an mdev gets
/// UUID `n` for the `n`-th vGPU of the inventory).
pub fn record(inventory: &mut Inventory, pick: &Pick) {
    let serial = inventory.gpus.iter().map(|g| g.vgpus.len()).sum::<usize>() as u128 + 1;
    let Some(gpu) = inventory.gpus.iter_mut().find(|g| g.address == pick.gpu) else {
        return;
    };
    if gpu.backend == Backend::Sriov {
        if let Some(vf) = gpu.vfs.iter_mut().find(|v| Some(v.address) == pick.vf) {
            vf.driver = Some("vfio-pci".to_owned());
        }
        return;
    }
    let id = match (gpu.backend, pick.vf) {
        (Backend::NvidiaVfio, Some(vf)) => VgpuHandle::Vf(vf),
        _ => VgpuHandle::Mdev(Uuid::from_u128(serial)),
    };
    if let Some(vf) = gpu.vfs.iter_mut().find(|v| Some(v.address) == pick.vf) {
        vf.vgpu_type = Some(pick.type_id.clone());
    }
    gpu.vgpus.push(Vgpu {
        placement: None,
        id,
        type_id: pick.type_id.clone(),
        parent: match gpu.backend {
            Backend::VfMdev => pick.vf.unwrap_or(gpu.address),
            _ => gpu.address,
        },
    });
    if let Some(t) = gpu.types.iter_mut().find(|t| t.id == pick.type_id) {
        t.in_use += 1;
    }
    recount(gpu);
}

/// Changes `inventory` as the kernel would when `count` vGPUs of `type_id` (of
/// `framebuffer_mib` each) are made on GPU `gpu`, one per VF from the VF `first` on for a
/// VF-based interface (see [`record`]).
pub fn record_vgpus(
    inventory: &mut Inventory,
    gpu: PciAddress,
    type_id: &str,
    framebuffer_mib: u64,
    first: u32,
    count: u32,
) {
    for i in first..first + count {
        let pick = Pick {
            gpu,
            type_id: type_id.to_owned(),
            type_name: None,
            framebuffer_mib: Some(framebuffer_mib),
            vf: vf_address(gpu, i),
            needs_scheduler: None,
            placement_id: None,
        };
        record(inventory, &pick);
    }
}

/// `count` GPUs of mixed models (T4, A40, L40S, Flex 170 with its VFs enabled, in turn), on
/// two NUMA nodes, at distinct addresses.
pub fn fleet(count: usize) -> Inventory {
    let models = [Model::T4, Model::A40, Model::L40s, Model::Flex170];
    let gpus = (0..count)
        .filter_map(|i| {
            let bus = u8::try_from(i % 200 + 1).ok()?;
            let address = PciAddress::new((i / 200) as u32, bus, 0, 0)?;
            let model = models[i % models.len()];
            let mut gpu = gpu(model, address, Some((i % 2) as u32));
            if model == Model::Flex170 {
                enable_vfs(&mut gpu, 8);
            }
            Some(gpu)
        })
        .collect();
    Inventory {
        gpus,
        warnings: Vec::new(),
    }
}

/// Enables `count` VFs of a plain SR-IOV GPU, each on `i915`.
pub fn enable_vfs(gpu: &mut Gpu, count: u32) {
    gpu.vfs = (0..count)
        .filter_map(|i| vf_address(gpu.address, i))
        .map(|address| Vf {
            address,
            driver: Some("i915".to_owned()),
            iommu_group: None,
            vgpu_type: None,
            memory_mib: None,
        })
        .collect();
    if let Some(sriov) = &mut gpu.sriov {
        sriov.num_vfs = count;
    }
}
