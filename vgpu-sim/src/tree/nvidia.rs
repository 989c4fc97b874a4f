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
//!   "scheduler": { "policy": "best-effort", "timeslice_ns": 0 },
//!   "vfs": ["0000:18:00.4", ...],
//!   "vgpus": [{ "vf": "0000:18:00.4", "mdev": null, "type_id": "1414",
//!               "placement_id": 0 }] }
//! ```
//!
//! On a GPU with NVIDIA's mixed-size mode (an L40S, L4, A10 or H100 80GB) the object has
//! two more fields, and each time-sliced supported type three more (all absent on any other
//! GPU, and for a MIG-backed type):
//!
//! ```text
//!   "size_mode": "equal" | "mixed",  "placement_region": 48,
//!   "supported_vgpu_types": [{ ..., "placement_size": 8,
//!                              "placement_ids_equal": [0, 8, 16, 24, 32, 40],
//!                              "placement_ids_mixed": [0, 16, 24, 40],
//!                              "creatable_placement_ids": [16, 24, 40] }]
//! ```
//!
//! `size_mode` is the GPU's mode now (`equal` at every boot); `placement_region` its slots
//! (GiB). A type's `placement_size` is the slots one of its vGPUs occupies (its frame buffer
//! in GiB), `placement_ids_equal` and `placement_ids_mixed` the ids it may start at in each
//! mode (NVIDIA's Appendix B tables for `mixed`; `k * size` for `k` below its maximum
//! instances for `equal`), and `creatable_placement_ids` those of the mode now whose slots
//! are free, when one more vGPU of the type may be created now (else `[]`). `vgpus` lists
//! every vGPU on the GPU, a VF's (`current_vgpu_type` set; `mdev` null) or an mdev's (`vf`
//! null), in VF then UUID order: its type id as sysfs names it and its `placement_id`,
//! absent on a GPU without the mode.
//!
//! `scheduler` is the GPU's vGPU scheduler now (`best-effort`, `equal-share` or
//! `fixed-share`; time slice 0 for the driver's default): best effort at every boot and
//! after the GPU leaves `nvidia`, else as the control line `vgpu-scheduler` set it.
//!
//! A profile's `remaining` is how many more of its instances fit now (0 with MIG mode off).
//! `pci_device_id` is NVML's: the device id in the top 16 bits, the vendor's in the bottom.
//! `mig` is `null` for a GPU without MIG; GPU instances are in id order. The supported types
//! are every catalog row of the GPU, whatever is in use (`nvmlDeviceGetSupportedVgpus`);
//! `gpu_instance_profile` is `null` for a time-sliced type. `vfs` are the enabled VFs in
//! `virtfn<N>` order; each VF's vGPU is in its own `nvidia/` files.

use serde::Serialize;

use crate::kernel::{Dev, Holder, KResult, Kernel, placement_size, region, supported_ids};
use crate::profile::TypeSpec;
use crate::profile::{PciAddr, VgpuMode, remaining};

#[derive(Serialize)]
struct State<'a> {
    address: String,
    name: String,
    pci_device_id: u32,
    mig: Option<Mig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size_mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_region: Option<u32>,
    supported_vgpu_types: Vec<SupportedType<'a>>,
    scheduler: SchedulerState,
    vfs: Vec<String>,
    vgpus: Vec<RunningVgpu>,
}

#[derive(Serialize)]
struct SchedulerState {
    policy: &'static str,
    timeslice_ns: u32,
}

#[derive(Serialize)]
struct RunningVgpu {
    vf: Option<String>,
    mdev: Option<String>,
    type_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_id: Option<u32>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_ids_equal: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_ids_mixed: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    creatable_placement_ids: Option<Vec<u32>>,
}

/// Whether `d` is a GPU the driver publishes: a PF of the vendor-specific VFIO interface, or
/// a PF with mediated devices that has mixed-size mode (an A10), whose placements only this
/// file shows.
pub(crate) fn published(d: &Dev) -> bool {
    let mixed_mdev = matches!(d.vgpu, Some(VgpuMode::Mdev | VgpuMode::MdevOnVf))
        && d.catalog.as_deref().and_then(region).is_some();
    d.physfn.is_none() && (d.vgpu == Some(VgpuMode::VendorVfio) || mixed_mdev)
}

/// The file name of `gpu`'s state.
pub(crate) fn file_name(gpu: PciAddr) -> String {
    format!("{gpu}.json")
}

impl Kernel {
    /// The ids of `t` a new vGPU may take on `gpu` now: none unless a VF could create it.
    fn creatable_now(&self, gpu: PciAddr, t: &TypeSpec) -> Vec<u32> {
        let creatable = self
            .vfs_of(gpu)
            .iter()
            .any(|vf| self.creatable(vf).iter().any(|c| c.id == t.id));
        if creatable {
            self.creatable_placements(gpu, t)
        } else {
            Vec::new()
        }
    }

    /// Every vGPU of `gpu`: VFs first, then mdevs, with their placement.
    fn running_vgpus(&self, gpu: PciAddr) -> Vec<RunningVgpu> {
        let placed = self.placed(gpu);
        let id_of = |h: Holder| placed.iter().find(|p| p.0 == h).map(|p| p.2);
        let mut out: Vec<RunningVgpu> = self
            .devs
            .values()
            .filter(|d| d.gpu == gpu && d.nv.current != 0)
            .map(|d| RunningVgpu {
                vf: Some(d.addr.to_string()),
                mdev: None,
                type_id: d.nv.current.to_string(),
                placement_id: id_of(Holder::Vf(d.addr)),
            })
            .collect();
        for (u, m) in &self.mdevs {
            if self.devs.get(&m.parent).is_some_and(|p| p.gpu == gpu) {
                out.push(RunningVgpu {
                    vf: None,
                    mdev: Some(u.to_string()),
                    type_id: m.type_id.clone(),
                    placement_id: id_of(Holder::Mdev(*u)),
                });
            }
        }
        out
    }

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
        let catalog = d.catalog.as_deref().unwrap_or_default();
        let region = region(catalog);
        let supported = self
            .types_of(d)
            .filter_map(|t| {
                let equal = supported_ids(catalog, t, false);
                let sized = equal.is_some();
                Some(SupportedType {
                    // NVML's type id: an mdev type's number (`nvidia-558` is 558).
                    id: t.id.trim_start_matches("nvidia-").parse().ok()?,
                    name: &t.name,
                    framebuffer_mib: t.framebuffer_mib,
                    max_instances: t.max_instances,
                    gpu_instance_profile: t.gpu_instance_profile.as_deref(),
                    placement_size: sized.then(|| placement_size(t)),
                    placement_ids_equal: equal,
                    placement_ids_mixed: sized
                        .then(|| supported_ids(catalog, t, true).unwrap_or_default()),
                    creatable_placement_ids: sized.then(|| self.creatable_now(gpu, t)),
                })
            })
            .collect();
        let vgpus = self.running_vgpus(gpu);
        let state = State {
            address: gpu.to_string(),
            name: self.product_name(d),
            pci_device_id: (u32::from(d.device) << 16) | u32::from(d.vendor),
            mig,
            supported_vgpu_types: supported,
            scheduler: {
                let s = self.scheduler(gpu);
                SchedulerState {
                    policy: s.policy.name(),
                    timeslice_ns: s.timeslice_ns,
                }
            },
            vfs: self
                .vfs_of(gpu)
                .iter()
                .map(|v| v.addr.to_string())
                .collect(),
            size_mode: region.map(|_| if self.mixed_on(gpu) { "mixed" } else { "equal" }),
            placement_region: region,
            vgpus,
        };
        let mut text = serde_json::to_vec(&state).map_err(|_| libc::EIO)?;
        text.push(b'\n');
        Ok(text)
    }
}
