//! `.vgpu-sim/nvidia/<dddd:bb:ss.f>.json`: what NVIDIA's driver knows of a vendor-VFIO GPU
//! and sysfs does not show, published read-only for the test NVML library (`vgpu-nvml-fake`).
//!
//! One JSON object per GPU on one line, made afresh at every read:
//!
//! ```text
//! { "address": "0000:18:00.0", "name": "NVIDIA H200", "pci_device_id": 590418142,
//!   "mig": null | { "enabled": true,
//!                   "profiles": [{ "name": "1g.18gb", "index": 0, "id": 19, "slices": 1,
//!                                  "instance_count": 7, "memory_mib": 16896,
//!                                  "placement_size": 1, "placement_starts": [0, ...],
//!                                  "remaining": 3 }],
//!                   "gpu_instances": [{ "id": 3, "profile": "2g.35gb", "start": 0,
//!                                       "size": 2 }] },
//!   "supported_vgpu_types": [{ "id": 1414, "name": "NVIDIA H200X-1-18C",
//!                              "framebuffer_mib": 18432, "max_instances": 7,
//!                              "gpu_instance_profile": "1g.18gb" }],
//!   "vfs": ["0000:18:00.4", ...] }
//! ```
//!
//! A profile's `remaining` is how many more of its instances fit now (0 with MIG mode off).
//! `pci_device_id` is NVML's: the device id in the top 16 bits, the vendor's in the bottom.
//! `mig` is `null` for a GPU without MIG; GPU instances are in id order. The supported types
//! are every catalog row of the GPU, whatever is in use (`nvmlDeviceGetSupportedVgpus`);
//! `gpu_instance_profile` is `null` for a time-sliced type. `vfs` are the enabled VFs in
//! `virtfn<N>` order; each VF's vGPU is in its own `nvidia/` files.

use serde::Serialize;

use crate::kernel::{Dev, KResult, Kernel};
use crate::profile::{PciAddr, VgpuMode, remaining};

#[derive(Serialize)]
struct State<'a> {
    address: String,
    name: String,
    pci_device_id: u32,
    mig: Option<Mig<'a>>,
    supported_vgpu_types: Vec<SupportedType<'a>>,
    vfs: Vec<String>,
}

#[derive(Serialize)]
struct Mig<'a> {
    enabled: bool,
    profiles: Vec<Profile<'a>>,
    gpu_instances: Vec<Instance<'a>>,
}

#[derive(Serialize)]
struct Profile<'a> {
    name: &'a str,
    index: u32,
    id: u32,
    slices: u32,
    instance_count: u32,
    memory_mib: u64,
    placement_size: u32,
    placement_starts: &'a [u32],
    remaining: u32,
}

#[derive(Serialize)]
struct Instance<'a> {
    id: u32,
    profile: &'a str,
    start: u32,
    size: u32,
}

#[derive(Serialize)]
struct SupportedType<'a> {
    id: u32,
    name: &'a str,
    framebuffer_mib: u64,
    max_instances: u32,
    gpu_instance_profile: Option<&'a str>,
}

/// Whether `d` is a GPU the driver publishes: a PF of the vendor-specific VFIO interface.
pub(crate) fn published(d: &Dev) -> bool {
    d.vgpu == Some(VgpuMode::VendorVfio) && d.physfn.is_none()
}

/// The file name of `gpu`'s state.
pub(crate) fn file_name(gpu: PciAddr) -> String {
    format!("{gpu}.json")
}

impl Kernel {
    /// The product name NVIDIA's driver gives GPU `d`.
    fn product_name(&self, d: &Dev) -> String {
        self.profile
            .devices
            .iter()
            .find(|s| s.addr == d.addr)
            .and_then(|s| s.product.clone())
            .unwrap_or_else(|| format!("NVIDIA {}", d.label))
    }

    /// The state file of GPU `gpu` (`ENODEV` when it is gone or not published).
    pub(crate) fn nvidia_state(&self, gpu: PciAddr) -> KResult<Vec<u8>> {
        let d = self
            .devs
            .get(&gpu)
            .filter(|d| published(d))
            .ok_or(libc::ENODEV)?;
        let mig = self.mig.get(&gpu).map(|m| {
            let mut instances: Vec<Instance<'_>> = m
                .instances
                .iter()
                .map(|gi| Instance {
                    id: gi.id,
                    profile: &gi.profile,
                    start: gi.start,
                    size: gi.size,
                })
                .collect();
            instances.sort_by_key(|gi| gi.id);
            Mig {
                enabled: m.enabled,
                profiles: self
                    .gi_profiles(gpu)
                    .into_iter()
                    .map(|p| Profile {
                        name: &p.name,
                        index: p.index,
                        id: p.id,
                        slices: p.slices,
                        instance_count: p.instance_count,
                        memory_mib: p.memory_mib,
                        placement_size: p.placement_size,
                        placement_starts: &p.placement_starts,
                        remaining: if m.enabled {
                            remaining(p, &m.instances)
                        } else {
                            0
                        },
                    })
                    .collect(),
                gpu_instances: instances,
            }
        });
        let supported = self
            .types_of(d)
            .filter_map(|t| {
                Some(SupportedType {
                    id: t.id.parse().ok()?,
                    name: &t.name,
                    framebuffer_mib: t.framebuffer_mib,
                    max_instances: t.max_instances,
                    gpu_instance_profile: t.gpu_instance_profile.as_deref(),
                })
            })
            .collect();
        let state = State {
            address: gpu.to_string(),
            name: self.product_name(d),
            pci_device_id: (u32::from(d.device) << 16) | u32::from(d.vendor),
            mig,
            supported_vgpu_types: supported,
            vfs: self
                .vfs_of(gpu)
                .iter()
                .map(|v| v.addr.to_string())
                .collect(),
        };
        let mut text = serde_json::to_vec(&state).map_err(|_| libc::EIO)?;
        text.push(b'\n');
        Ok(text)
    }
}
