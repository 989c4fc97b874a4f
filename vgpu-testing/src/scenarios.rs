//! The hosts the tests and demos talk about, built with real ids, names and descriptions.

use super::*;

/// NVIDIA's vendor id.
pub const NVIDIA: u16 = 0x10de;
/// Intel's vendor id.
pub const INTEL: u16 = 0x8086;

/// T4 mdev description for a type of `fb` MiB and `max` instances.
fn nvidia_description(heads: u32, fb: u64, max: u32) -> String {
    format!(
        "num_heads={heads}, frl_config=60, framebuffer={fb}M, max_resolution=7680x4320, max_instance={max}"
    )
}

/// Where [`t4_legacy`] puts a Tesla T4 and which vGPUs it already holds.
#[derive(Debug, Clone)]
pub struct T4Legacy<'a> {
    /// The T4's PCI address.
    pub address: PciAddress,
    /// Its IOMMU group (its audio-less slot is a group of its own).
    pub group: u32,
    /// Its NUMA node (`-1` for unknown).
    pub numa: i32,
    /// vGPUs already created, as (mdev type id, UUID); the first one's type is the type in
    /// use, which leaves the other types 0 available.
    pub used: &'a [(&'a str, Uuid)],
}

/// A Tesla T4 with legacy mdev on the PF: `GRID T4-1B`, `-2Q`, `-4Q`, `-16Q`, with the
/// vGPUs of `t4.used` already created.
pub fn t4_legacy(host: &FakeHost, t4: &T4Legacy<'_>) -> io::Result<()> {
    let T4Legacy {
        address,
        group,
        numa,
        used,
    } = *t4;
    host.pci(
        &PciSpec::new(address, NVIDIA, 0x1eb8, 0x030200)
            .driver("nvidia")
            .numa(numa)
            .group(group),
    )?;
    let types = [
        ("nvidia-222", "GRID T4-1B", 1, 1024, 16),
        ("nvidia-231", "GRID T4-2Q", 4, 2048, 8),
        ("nvidia-232", "GRID T4-4Q", 4, 4096, 4),
        ("nvidia-234", "GRID T4-16Q", 4, 16384, 1),
    ];
    let in_use_type = used.first().map(|(t, _)| *t);
    for (id, name, heads, fb, max) in types {
        let used_here = used.iter().filter(|(t, _)| *t == id).count() as u32;
        // One type per GPU at a time: other types show 0 once a vGPU exists.
        let available = match in_use_type {
            Some(t) if t != id => 0,
            _ => max - used_here,
        };
        host.mdev_type(
            address,
            id,
            &TypeSpec::new(Some(name), &nvidia_description(heads, fb, max), available),
        )?;
    }
    for (index, (type_id, uuid)) in used.iter().enumerate() {
        host.mdev(address, *uuid, type_id, 100 + group * 10 + index as u32)?;
    }
    Ok(())
}

/// Where [`a40_vf_mdev`] puts an A40, how many VFs it enables and how many are in use.
#[derive(Debug, Clone)]
pub struct A40VfMdev {
    /// The A40's (PF's) PCI address; its IOMMU group is 40, its VFs' 41 onwards.
    pub address: PciAddress,
    /// VFs enabled (of 32), each an mdev parent.
    pub vfs: u32,
    /// The first `used` VFs hold an A40-2Q each.
    pub used: u32,
}

/// An A40 with `a40.vfs` VFs enabled, each an mdev parent offering `NVIDIA A40-2Q`
/// (24 per GPU) and `NVIDIA A40-48Q` (1 per GPU); the first `a40.used` VFs hold an A40-2Q
/// each.
pub fn a40_vf_mdev(host: &FakeHost, a40: &A40VfMdev) -> io::Result<()> {
    let A40VfMdev { address, vfs, used } = *a40;
    host.pci(
        &PciSpec::new(address, NVIDIA, 0x2235, 0x030200)
            .driver("nvidia")
            .numa(0)
            .group(40)
            .sriov(32, 0x2235),
    )?;
    for index in 0..vfs {
        let vf = vf_address(address, index)?;
        host.vf(
            address,
            index,
            &PciSpec::new(vf, NVIDIA, 0x2235, 0x030200)
                .driver("nvidia")
                .numa(0)
                .group(41 + index),
        )?;
        let holds = index < used;
        host.mdev_type(
            vf,
            "nvidia-558",
            &TypeSpec::new(
                Some("NVIDIA A40-2Q"),
                &nvidia_description(4, 2048, 24),
                u32::from(!holds),
            ),
        )?;
        let big_available = u32::from(used == 0);
        host.mdev_type(
            vf,
            "nvidia-566",
            &TypeSpec::new(
                Some("NVIDIA A40-48Q"),
                &nvidia_description(4, 49152, 1),
                big_available,
            ),
        )?;
        if holds {
            let uuid =
                Uuid::from_u128(0xa400_0000_0000_4000_8000_0000_0000_0000 | u128::from(index));
            host.mdev(vf, uuid, "nvidia-558", 200 + index)?;
        }
    }
    Ok(())
}

/// The address of VF `index` of `pf` (offset 4, stride 1, routing ids past the PF's bus
/// carrying onto the next buses, as the kernel numbers them).
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] when the VF would sit past bus `ff` of the PF's domain.
pub fn vf_address(pf: PciAddress, index: u32) -> io::Result<PciAddress> {
    let routing = u64::from(pf.device()) * 8 + u64::from(pf.function()) + 4 + u64::from(index);
    let bus = u64::from(pf.bus()) + routing / 256;
    let routing = routing % 256;
    u8::try_from(bus)
        .ok()
        .and_then(|bus| PciAddress::new(pf.domain(), bus, (routing / 8) as u8, (routing % 8) as u8))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("VF {index} of {pf} would sit past bus ff"),
            )
        })
}

/// L40S types offered through the vendor VFIO interface in these fixtures, with the ids the
/// catalog (`data/vgpu-types.toml`) and the simulator's profiles give them.
pub const L40S_TYPES: [(u32, &str); 3] = [
    (1145, "NVIDIA L40S-1B"),
    (1152, "NVIDIA L40S-8Q"),
    (1156, "NVIDIA L40S-48Q"),
];

/// Where [`l40s_vendor_vfio`] puts an L40S, how many VFs it enables and how many are in
/// use.
#[derive(Debug, Clone)]
pub struct L40sVendorVfio {
    /// The L40S's (PF's) PCI address.
    pub address: PciAddress,
    /// The PF's IOMMU group; VF `i` is in group `group + 1 + i`.
    pub group: u32,
    /// VFs enabled (of 32), each bound to `nvidia`.
    pub vfs: u32,
    /// The first `used` VFs hold an L40S-8Q (id 1152); 6 or more fill the card.
    pub used: u32,
}

/// An L40S with `l40s.vfs` VFs on NVIDIA's vendor VFIO interface; the first `l40s.used`
/// VFs hold an L40S-8Q (id 1152). With 6 used, the card is full and every free VF lists
/// only the header.
pub fn l40s_vendor_vfio(host: &FakeHost, l40s: &L40sVendorVfio) -> io::Result<()> {
    let L40sVendorVfio {
        address,
        group,
        vfs,
        used,
    } = *l40s;
    host.pci(
        &PciSpec::new(address, NVIDIA, 0x26b9, 0x030200)
            .driver("nvidia")
            .numa(1)
            .group(group)
            .sriov(32, 0x26b9),
    )?;
    let full = used >= 6;
    for index in 0..vfs {
        let vf = vf_address(address, index)?;
        host.vf(
            address,
            index,
            &PciSpec::new(vf, NVIDIA, 0x26b9, 0x030200)
                .driver("nvidia")
                .numa(1)
                .group(group + 1 + index),
        )?;
        let current = if index < used { L40S_TYPES[1].0 } else { 0 };
        let creatable: Vec<(u32, &str)> = if current != 0 || full {
            Vec::new()
        } else if used > 0 {
            vec![L40S_TYPES[1]]
        } else {
            L40S_TYPES.to_vec()
        };
        host.nvidia_vf(vf, &creatable, current)?;
    }
    Ok(())
}

/// An Intel iGPU at `0000:00:02.0` with GVT-g types and no `name` files.
pub fn gvtg(host: &FakeHost, group: u32) -> io::Result<()> {
    let address = addr("0000:00:02.0");
    host.pci(
        &PciSpec::new(address, INTEL, 0x3e92, 0x030000)
            .driver("i915")
            .numa(-1)
            .group(group),
    )?;
    for (n, low, high, available) in [
        (8, 64, 384, 8),
        (4, 128, 512, 4),
        (2, 256, 1024, 2),
        (1, 512, 2048, 1),
    ] {
        let description = format!(
            "low_gm_size: {low}MB\nhigh_gm_size: {high}MB\nfence: 4\nresolution: 1920x1200\nweight: {}\n",
            16 / n
        );
        host.mdev_type(
            address,
            &format!("i915-GVTg_V5_{n}"),
            &TypeSpec::new(None, &description, available),
        )?;
    }
    Ok(())
}

/// One GPU per vGPU interface, on an Intel VT-d host: a T4 with legacy mdev (two T4-2Q
/// vGPUs) at `3b:00.0` on NUMA node 0, an A40 with mdev on four VFs (one holding an A40-2Q)
/// at `41:00.0`, an L40S with four vendor-VFIO VFs (one holding an L40S-8Q) at `81:00.0` on
/// node 1, an Intel Flex 170 with SR-IOV and no VFs yet at `4d:00.0`, and an Intel iGPU
/// with GVT-g at `00:02.0`, all in domain 0000.
///
/// Not the simulator's `mixed` profile (`vgpu-sim/profiles/mixed.toml`), which has no A40,
/// its L40S at `5e:00.0` with 32 VFs, its Flex 170 in domain 0001, a passthrough RTX A4000
/// sharing its group with its audio function, and no vGPU in use.
pub fn every_interface(host: &FakeHost) -> io::Result<()> {
    host.intel_iommu_host()?;
    let used = [
        (
            "nvidia-231",
            Uuid::from_u128(0x1f3a_5b7c_0000_4000_8000_0000_0000_0001),
        ),
        (
            "nvidia-231",
            Uuid::from_u128(0x1f3a_5b7c_0000_4000_8000_0000_0000_0002),
        ),
    ];
    t4_legacy(
        host,
        &T4Legacy {
            address: addr("0000:3b:00.0"),
            group: 12,
            numa: 0,
            used: &used,
        },
    )?;
    a40_vf_mdev(
        host,
        &A40VfMdev {
            address: addr("0000:41:00.0"),
            vfs: 4,
            used: 1,
        },
    )?;
    l40s_vendor_vfio(
        host,
        &L40sVendorVfio {
            address: addr("0000:81:00.0"),
            group: 60,
            vfs: 4,
            used: 1,
        },
    )?;
    host.pci(
        &PciSpec::new(addr("0000:4d:00.0"), INTEL, 0x56c0, 0x038000)
            .driver("i915")
            .numa(0)
            .group(30)
            .sriov(31, 0x56c0),
    )?;
    gvtg(host, 1)
}

/// How big a host [`large`] generates.
#[derive(Debug, Clone)]
pub struct Large {
    /// A40-like GPUs, at most [`LARGE_MAX_GPUS`].
    pub gpus: u32,
    /// VFs enabled on each GPU, each an mdev parent; at most [`LARGE_MAX_VFS`].
    pub vfs: u32,
    /// mdev types each VF offers.
    pub types: u32,
}

/// GPUs [`large`] puts in one PCI domain: one every 16 buses, from bus `10` to `f0`.
const LARGE_GPUS_PER_DOMAIN: u32 = 15;

/// The most GPUs [`large`] lays out: 15 in each of the 65536 16-bit PCI domains.
pub const LARGE_MAX_GPUS: u32 = LARGE_GPUS_PER_DOMAIN * 0x1_0000;

/// The most VFs per GPU [`large`] lays out: routing ids 4 onwards within the GPU's 16 buses.
pub const LARGE_MAX_VFS: u32 = 16 * 256 - 4;

/// A generated large host: `size.gpus` A40-like GPUs, each with `size.vfs` VFs that each
/// offer `size.types` mdev types (`nvidia-<500+n>` named `NVIDIA A40-<n+1>Q`, `n+1` GiB
/// each, at most 32 per GPU). Used to measure discovery. The sizes an A40 really has
/// (1, 2, 3, 4, 6, 8, 12, 16, 24, 48 GiB) agree with the catalog; the others are made up
/// and absent from it.
///
/// GPU `g` sits at `<g / 15>:<10 * (1 + g % 15)>:00.0` (domain, then bus in hex: 15 GPUs
/// per domain, 16 buses each, so its VFs never reach the next GPU's bus); its IOMMU group
/// is `1000 + g * (vfs + 1)`, its VFs' the following ones.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] when `size.gpus` is above [`LARGE_MAX_GPUS`] or
/// `size.vfs` above [`LARGE_MAX_VFS`], or the IOMMU group numbers would overflow; nothing is
/// laid out then. Otherwise the error of the first file that cannot be written.
pub fn large(host: &FakeHost, size: &Large) -> io::Result<()> {
    let Large { gpus, vfs, types } = *size;
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    if gpus > LARGE_MAX_GPUS {
        return Err(invalid(format!(
            "{gpus} GPUs do not fit in 65536 PCI domains of {LARGE_GPUS_PER_DOMAIN} (at most {LARGE_MAX_GPUS})"
        )));
    }
    if vfs > LARGE_MAX_VFS {
        return Err(invalid(format!(
            "{vfs} VFs per GPU do not fit in its 16 buses (at most {LARGE_MAX_VFS})"
        )));
    }
    let group_of = |g: u32| {
        g.checked_mul(vfs + 1)
            .and_then(|n| n.checked_add(1000))
            .filter(|first| first.checked_add(vfs).is_some())
            .ok_or_else(|| {
                invalid(format!(
                    "IOMMU group numbers of {gpus} GPUs with {vfs} VFs overflow u32"
                ))
            })
    };
    group_of(gpus.saturating_sub(1))?;
    host.intel_iommu_host()?;
    for g in 0..gpus {
        let bus = 0x10 * (1 + g % LARGE_GPUS_PER_DOMAIN);
        let pf = u8::try_from(bus)
            .ok()
            .and_then(|bus| PciAddress::new(g / LARGE_GPUS_PER_DOMAIN, bus, 0, 0))
            .ok_or_else(|| invalid(format!("GPU {g} has no address")))?;
        let group = group_of(g)?;
        host.pci(
            &PciSpec::new(pf, NVIDIA, 0x2235, 0x030200)
                .driver("nvidia")
                .numa((g % 2) as i32)
                .group(group)
                .sriov(vfs, 0x2235),
        )?;
        for index in 0..vfs {
            let vf = vf_address(pf, index)?;
            host.vf(
                pf,
                index,
                &PciSpec::new(vf, NVIDIA, 0x2235, 0x030200)
                    .driver("nvidia")
                    .group(group + 1 + index),
            )?;
            for t in 0..u64::from(types) {
                let gib = t + 1;
                // 48 GiB shared out, one vGPU per VF on an A40's 32 VFs (as the catalog).
                let max = u32::try_from(48 / gib).unwrap_or(0).clamp(1, 32);
                let name = format!("NVIDIA A40-{gib}Q");
                let description = nvidia_description(4, gib * 1024, max);
                host.mdev_type(
                    vf,
                    &format!("nvidia-{}", 500 + t),
                    &TypeSpec::new(Some(&name), &description, 1),
                )?;
            }
        }
    }
    Ok(())
}
