//! The fake as a view of a vgpu-sim host: what a driver knows, read live from the simulator
//! at every call, and MIG changes asked of it through its control file.
//!
//! The simulator publishes each vendor-VFIO GPU's driver state in
//! `<root>/.vgpu-sim/nvidia/<dddd:bb:ss.f>.json` (name, PCI ids, MIG mode, GPU-instance
//! profiles with their remaining capacity, instances, the supported types, the VFs). The running vGPUs are the GPU's VFs
//! whose `nvidia/current_vgpu_type` is not 0, each on the GPU instance
//! of its `nvidia/gpu_instance_id`. The creatable types are the union of the VFs'
//! `nvidia/creatable_vgpu_types`.
//!
//! A GPU the data file names (by `pci`) keeps the data's `uuid`, `name`, modes, scheduler,
//! capabilities, behaviours, `mig_reset_required` and `[[gpu.type]]` rows (by id, over the
//! simulator's). Every other value is the simulator's, or a default: a UUID derived from the
//! PCI address, the `host-vgpu` and `sriov` modes, ECC on, the scheduler's capabilities of
//! [`SIM_CAPABILITIES`]. The scheduler's policy and time slice are the simulator's
//! (`scheduler` in the state file) unless the data gives `scheduler`; the adaptive
//! round-robin mode, which the simulator does not model, is the last one set.

use std::path::Path;

use serde::Deserialize;

use crate::data::{
    Data, Gpu, GpuInstance, Mode, Profile, ProfilePlacements, Scheduler, Vgpu, VgpuType,
};

/// The environment variable naming a simulated host's mount root: with it, and no data file,
/// the fake serves every NVIDIA GPU of the simulated host with defaults.
pub const SIM_ENV: &str = "VGPU_FAKE_NVML_SIM";

/// The simulator's state of one GPU (`.vgpu-sim/nvidia/<addr>.json`).
#[derive(Debug, Clone, Deserialize)]
struct SimGpu {
    address: String,
    name: String,
    pci_device_id: u32,
    mig: Option<SimMig>,
    /// `equal` or `mixed`; absent on a GPU without NVIDIA's mixed-size mode.
    #[serde(default)]
    size_mode: Option<String>,
    supported_vgpu_types: Vec<SimType>,
    /// The vGPU scheduler now; absent from a simulator without one.
    #[serde(default)]
    scheduler: Option<SimScheduler>,
    vfs: Vec<String>,
    #[serde(default)]
    vgpus: Vec<SimVgpu>,
}

/// The simulator's vGPU scheduler of a GPU.
#[derive(Debug, Clone, Deserialize)]
struct SimScheduler {
    /// `best-effort`, `equal-share` or `fixed-share`.
    policy: String,
    timeslice_ns: u32,
}

/// NVML's `NVML_VGPU_SCHEDULER_POLICY_*` of each policy the simulator names.
const POLICIES: [(&str, u32); 3] = [("best-effort", 1), ("equal-share", 2), ("fixed-share", 3)];

/// NVML's policy number of a simulator's policy name (`0`, unknown, for another).
pub(crate) fn policy_number(name: &str) -> u32 {
    POLICIES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, p)| *p)
}

/// The simulator's name of NVML's policy `number`.
pub(crate) fn policy_name(number: u32) -> Option<&'static str> {
    POLICIES.iter().find(|(_, p)| *p == number).map(|(n, _)| *n)
}

/// The scheduler's capabilities of a simulated GPU the data gives none for: the three
/// policies, time slices of 1 to 30 ms, as the simulator takes them.
pub(crate) const SIM_CAPABILITIES: (u32, u32) = (1_000_000, 30_000_000);

/// A vGPU the simulator publishes, with its placement.
#[derive(Debug, Clone, Deserialize)]
struct SimVgpu {
    vf: Option<String>,
    placement_id: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
struct SimMig {
    enabled: bool,
    profiles: Vec<SimProfile>,
    gpu_instances: Vec<SimInstance>,
}

#[derive(Debug, Clone, Deserialize)]
struct SimProfile {
    name: String,
    index: u32,
    id: u32,
    slices: u32,
    instance_count: u32,
    memory_mib: u64,
    placement_size: u32,
    placement_starts: Vec<u32>,
    remaining: u32,
}

#[derive(Debug, Clone, Deserialize)]
struct SimInstance {
    id: u32,
    profile: String,
    start: u32,
    size: u32,
}

#[derive(Debug, Clone, Deserialize)]
struct SimType {
    id: u32,
    name: String,
    framebuffer_mib: u64,
    max_instances: u32,
    gpu_instance_profile: Option<String>,
    #[serde(default)]
    placement_size: Option<u32>,
    #[serde(default)]
    placement_ids_equal: Option<Vec<u32>>,
    #[serde(default)]
    placement_ids_mixed: Option<Vec<u32>>,
    #[serde(default)]
    creatable_placement_ids: Option<Vec<u32>>,
}

/// One VF of a GPU as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SimVf {
    address: String,
    current: u32,
    gpu_instance: Option<u32>,
    creatable: Vec<u32>,
}

/// An error reading the simulator: the path and what went wrong.
fn failed(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

/// The simulator's GPUs, in address order.
fn read_gpus(root: &Path) -> Result<Vec<SimGpu>, String> {
    let dir = root.join(".vgpu-sim/nvidia");
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| failed(&dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|e| failed(p, e))?;
            serde_json::from_str(&text).map_err(|e| failed(p, e))
        })
        .collect()
}

/// A decimal number in a sysfs file, or `None` when the file cannot be read (`ENXIO` for an
/// unset `gpu_instance_id`).
fn read_number(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The type ids of a `creatable_vgpu_types` text: `ID    : vGPU Name`, then `%-5d : %s`.
pub(crate) fn parse_creatable(text: &str) -> Vec<u32> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split(':').next()?.trim().parse().ok())
        .collect()
}

/// What a call reads from the VFs' `nvidia/` files, beyond the GPUs' state files: sysfs
/// reads are many, so each call reads only what it answers from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Need {
    /// The running vGPUs: each VF's `current_vgpu_type` and `gpu_instance_id`.
    pub(crate) vgpus: bool,
    /// The creatable types: each VF's `creatable_vgpu_types`.
    pub(crate) creatable: bool,
}

impl Need {
    /// Whether what `self` read holds everything `other` asks for.
    pub(crate) fn covers(self, other: Self) -> bool {
        (self.vgpus || !other.vgpus) && (self.creatable || !other.creatable)
    }

    /// What `self` and `other` read together.
    pub(crate) fn and(self, other: Self) -> Self {
        Self {
            vgpus: self.vgpus || other.vgpus,
            creatable: self.creatable || other.creatable,
        }
    }

    /// What NVML function `function` answers from.
    pub(crate) fn of(function: &str) -> Self {
        let vgpus = function.starts_with("nvmlVgpuInstance")
            || matches!(
                function,
                "nvmlDeviceGetActiveVgpus"
                    | "nvmlDeviceGetVgpuUtilization"
                    | "nvmlDeviceSetVgpuSchedulerState"
                    | "nvmlDeviceSetMigMode"
                    | "nvmlGpuInstanceDestroy"
            );
        Self {
            vgpus,
            creatable: function == "nvmlDeviceGetCreatableVgpus",
        }
    }
}

/// The VFs `vfs` with what `need` asks for: those without `nvidia/` (not bound to `nvidia`)
/// are left out.
fn read_vfs(root: &Path, vfs: &[String], need: Need) -> Vec<SimVf> {
    let devices = root.join("sys/bus/pci/devices");
    vfs.iter()
        .filter_map(|address| {
            let nv = devices.join(address).join("nvidia");
            let current = read_number(&nv.join("current_vgpu_type"))?;
            let creatable = if need.creatable {
                std::fs::read_to_string(nv.join("creatable_vgpu_types"))
                    .map(|t| parse_creatable(&t))
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let gpu_instance = if current != 0 {
                read_number(&nv.join("gpu_instance_id"))
            } else {
                None
            };
            Some(SimVf {
                address: address.clone(),
                current,
                gpu_instance,
                creatable,
            })
        })
        .collect()
}

/// The parts of a PCI address `dddd:bb:ss.f`.
fn pci_parts(address: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = address.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (slot, function) = rest.split_once('.')?;
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(slot, 16).ok()?,
        u32::from_str_radix(function, 16).ok()?,
    ))
}

/// The GPU UUID the fake gives a GPU the data does not name: its PCI address in the last
/// group, `GPU-00000000-0000-4000-8000-000000410000` for `0000:41:00.0`.
pub(crate) fn gpu_uuid(address: &str) -> String {
    let (d, b, s, f) = pci_parts(address).unwrap_or_default();
    format!("GPU-00000000-0000-4000-8000-00{d:04x}{b:02x}{s:02x}{f:02x}")
}

/// The vGPU instance id of the vGPU on VF `address`, stable while the VF exists: its domain
/// and routing id, `0x4104` for `0000:41:00.4`.
pub(crate) fn vgpu_instance(address: &str) -> u32 {
    let (d, b, s, f) = pci_parts(address).unwrap_or_default();
    (d << 16) | (b << 8) | (s << 3) | f
}

/// The vGPU UUID of the vGPU on VF `address`: its PCI address in the last group.
fn vgpu_uuid(address: &str) -> String {
    let (d, b, s, f) = pci_parts(address).unwrap_or_default();
    format!("00000000-0000-4000-8000-00{d:04x}{b:02x}{s:02x}{f:02x}")
}

/// NVML's class of a type, from its name's letter (`NVIDIA L40S-24Q`: `Quadro`).
fn class_of(name: &str) -> String {
    let tail = name.rsplit('-').next().unwrap_or_default();
    let letter = tail
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .chars()
        .next();
    match letter {
        Some('Q') => "Quadro",
        Some('B') => "NVS",
        Some('A') => "GRID",
        _ => "Compute",
    }
    .to_owned()
}

/// A GPU the data does not name: [`update`] gives it the simulator's values and the defaults.
fn default_gpu(address: &str) -> Gpu {
    Gpu {
        pci: address.to_owned(),
        name: String::new(),
        uuid: String::new(),
        pci_device_id: 0,
        virtualization_mode: "host-vgpu".to_owned(),
        host_vgpu_mode: "sriov".to_owned(),
        mig: None,
        mig_reset_required: false,
        ecc: None,
        scheduler: None,
        scheduler_capabilities: None,
        creatable: Vec::new(),
        functions: std::collections::BTreeMap::new(),
        types: Vec::new(),
        profiles: Vec::new(),
        gpu_instances: Vec::new(),
        vgpus: Vec::new(),
        given: crate::data::Given::default(),
        mig_pending: None,
        size_mode: None,
    }
}

/// Sets `g`'s live values from the simulator's `s`, and from the VFs `vfs` what `need` asks.
fn update(g: &mut Gpu, s: &SimGpu, vfs: &[SimVf], need: Need) {
    if !g.given.name {
        g.name.clone_from(&s.name);
    }
    if g.uuid.is_empty() {
        g.uuid = gpu_uuid(&s.address);
    }
    g.ecc.get_or_insert(Mode {
        current: true,
        pending: true,
    });
    if !g.given.scheduler {
        let arr_mode = g.scheduler.map_or(0, |s| s.arr_mode);
        g.scheduler = Some(s.scheduler.as_ref().map_or(
            Scheduler {
                policy: 1,
                arr_mode,
                timeslice_ns: 0,
            },
            |s| Scheduler {
                policy: policy_number(&s.policy),
                arr_mode,
                timeslice_ns: s.timeslice_ns,
            },
        ));
    }
    g.scheduler_capabilities
        .get_or_insert_with(|| crate::data::Capabilities {
            policies: POLICIES.iter().map(|(_, p)| *p).collect(),
            arr_supported: false,
            min_timeslice_ns: SIM_CAPABILITIES.0,
            max_timeslice_ns: SIM_CAPABILITIES.1,
        });
    if g.pci_device_id == 0 {
        g.pci_device_id = s.pci_device_id;
    }
    let profile_id = |name: &str| {
        s.mig
            .as_ref()
            .and_then(|m| m.profiles.iter().find(|p| p.name == name))
            .map(|p| p.id)
    };
    g.mig = s.mig.as_ref().map(|m| Mode {
        current: m.enabled,
        pending: if g.mig_reset_required {
            g.mig_pending.unwrap_or(m.enabled)
        } else {
            m.enabled
        },
    });
    g.profiles = s
        .mig
        .as_ref()
        .map(|m| {
            m.profiles
                .iter()
                .map(|p| Profile {
                    index: p.index,
                    id: p.id,
                    name: format!("MIG {}", p.name),
                    slices: p.slices,
                    instance_count: p.instance_count,
                    memory_mib: p.memory_mib,
                    placements: Some(ProfilePlacements {
                        size: p.placement_size,
                        starts: p.placement_starts.clone(),
                    }),
                    remaining: Some(p.remaining),
                })
                .collect()
        })
        .unwrap_or_default();
    g.gpu_instances = s
        .mig
        .as_ref()
        .filter(|m| m.enabled)
        .map(|m| {
            m.gpu_instances
                .iter()
                .filter_map(|gi| {
                    Some(GpuInstance {
                        id: gi.id,
                        profile_id: profile_id(&gi.profile)?,
                        placement_start: gi.start,
                        placement_size: gi.size,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    g.size_mode = s.size_mode.as_deref().map(|m| m == "mixed");
    let given: Vec<VgpuType> = std::mem::take(&mut g.given.types);
    g.types = s
        .supported_vgpu_types
        .iter()
        .map(|t| {
            let mut row = given
                .iter()
                .find(|d| d.id == t.id)
                .cloned()
                .unwrap_or_else(|| VgpuType {
                    id: t.id,
                    name: t.name.clone(),
                    class: class_of(&t.name),
                    framebuffer_mib: t.framebuffer_mib,
                    max_instances: t.max_instances,
                    max_instances_per_vm: 1,
                    gpu_instance_profile_id: t.gpu_instance_profile.as_deref().and_then(profile_id),
                    placements: None,
                    placements_equal: None,
                    creatable_placements: None,
                });
            if let Some(size) = t.placement_size {
                let list = |ids: &Option<Vec<u32>>| {
                    ids.clone().map(|ids| crate::data::Placements { size, ids })
                };
                if row.placements.is_none() {
                    row.placements = list(&t.placement_ids_mixed);
                }
                row.placements_equal = list(&t.placement_ids_equal);
                row.creatable_placements
                    .clone_from(&t.creatable_placement_ids);
            }
            row
        })
        .collect();
    g.given.types = given;
    if need.creatable {
        let mut creatable: Vec<u32> = vfs
            .iter()
            .flat_map(|v| v.creatable.iter().copied())
            .collect();
        creatable.sort_unstable();
        creatable.dedup();
        g.creatable = creatable;
    }
    if !need.vgpus {
        return;
    }
    g.vgpus = vfs
        .iter()
        .filter(|v| v.current != 0)
        .map(|v| Vgpu {
            instance: vgpu_instance(&v.address),
            type_id: v.current,
            uuid: vgpu_uuid(&v.address),
            mdev_uuid: None,
            vm_id: None,
            fb_usage_mib: 0,
            encoder: None,
            gpu_instance_id: v.gpu_instance,
            utilization: Vec::new(),
            guest_driver: None,
            placement_id: s
                .vgpus
                .iter()
                .find(|p| p.vf.as_deref() == Some(v.address.as_str()))
                .and_then(|p| p.placement_id),
        })
        .collect();
}

/// Makes `data`'s GPUs those of the simulated host at `root` now, in address order: a GPU the
/// data names keeps its own values, the rest are the simulator's. The VFs are read as `need`
/// says; what it leaves out keeps its last value and is not answered from.
///
/// # Errors
/// The path that could not be read or parsed.
pub(crate) fn refresh(data: &mut Data, root: &Path, need: Need) -> Result<(), String> {
    let sim = read_gpus(root)?;
    let mut old = std::mem::take(&mut data.gpus);
    for s in &sim {
        let mut g = match old.iter().position(|g| g.pci == s.address) {
            Some(i) => old.swap_remove(i),
            None => default_gpu(&s.address),
        };
        let vfs = if need.vgpus || need.creatable {
            read_vfs(root, &s.vfs, need)
        } else {
            Vec::new()
        };
        update(&mut g, s, &vfs, need);
        data.gpus.push(g);
    }
    Ok(())
}

/// What the data holds of the simulator: the generation it was read at and what of the VFs
/// was read at that generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The line `.vgpu-sim/generation` read before the read.
    generation: String,
    /// What of the VFs the reads at that generation covered.
    need: Need,
}

/// The simulator's state generation at `root`: the line of `.vgpu-sim/generation` (boot id and
/// generation), which changes with every change of the simulated state and at every boot.
/// `None` when it cannot be read (a simulator without one): the caller reads the host anew.
pub(crate) fn generation(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(".vgpu-sim/generation")).ok()?;
    let line = text.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

/// As [`refresh`], skipped when `seen` says the data already holds what `need` asks of the
/// simulator's state now (its generation unchanged since a read that covered `need`). `seen`
/// is updated: `None` when the generation cannot be read or the read failed.
///
/// # Errors
/// As [`refresh`].
pub(crate) fn refresh_if_changed(
    data: &mut Data,
    root: &Path,
    need: Need,
    seen: &mut Option<Seen>,
) -> Result<(), String> {
    let now = generation(root);
    let last = seen.take();
    let Some(now) = now else {
        return refresh(data, root, need);
    };
    let before = last.filter(|s| s.generation == now);
    if let Some(s) = before.as_ref().filter(|s| s.need.covers(need)) {
        *seen = Some(s.clone());
        return Ok(());
    }
    refresh(data, root, need)?;
    *seen = Some(Seen {
        need: before.map_or(need, |s| s.need.and(need)),
        generation: now,
    });
    Ok(())
}

/// Asks the simulator at `root` for a change with one control line, as NVIDIA's driver
/// carries out NVML's request; its refusal is an errno.
///
/// # Errors
/// The write's error (its errno is the simulator's answer).
pub(crate) fn control(root: &Path, line: &str) -> std::io::Result<()> {
    std::fs::write(root.join(".vgpu-sim/control"), format!("{line}\n"))
}

#[cfg(test)]
// Named by path: the legacy library compiles this file from another crate's directory.
#[path = "sim/tests.rs"]
mod tests;
