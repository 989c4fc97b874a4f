//! The data file the fake answers from, and the log of the changes asked of it.
//!
//! The file is TOML (see the crate documentation for its keys). Changes (`nvmlDeviceSet…`)
//! are appended, one JSON object a line, to the log beside it (`<file stem>.calls`), and
//! replayed onto the data at every initialisation, so that a later process sees them as a
//! later process on a real host sees the driver's state.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How a function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Behaviour {
    /// From the data.
    #[default]
    Ok,
    /// `NVML_ERROR_NOT_SUPPORTED`.
    NotSupported,
    /// `NVML_ERROR_UNINITIALIZED`.
    Uninitialized,
    /// `NVML_ERROR_FUNCTION_NOT_FOUND`: an older driver that lacks the function.
    Missing,
    /// `NVML_ERROR_NO_PERMISSION`.
    NoPermission,
    /// `NVML_ERROR_DRIVER_NOT_LOADED` (for `init`: no kernel driver).
    DriverNotLoaded,
    /// `NVML_ERROR_UNKNOWN`.
    Unknown,
}

/// Current and pending state of a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Mode {
    pub(crate) current: bool,
    pub(crate) pending: bool,
}

/// The scheduler's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scheduler {
    /// `NVML_VGPU_SCHEDULER_POLICY_*`.
    pub(crate) policy: u32,
    /// `NVML_VGPU_SCHEDULER_ARR_*`.
    #[serde(default)]
    pub(crate) arr_mode: u32,
    /// The time slice, in nanoseconds.
    #[serde(default)]
    pub(crate) timeslice_ns: u32,
}

/// The scheduler's capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Capabilities {
    pub(crate) policies: Vec<u32>,
    #[serde(default)]
    pub(crate) arr_supported: bool,
    pub(crate) min_timeslice_ns: u32,
    pub(crate) max_timeslice_ns: u32,
}

/// A vGPU type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VgpuType {
    pub(crate) id: u32,
    pub(crate) name: String,
    #[serde(default = "compute")]
    pub(crate) class: String,
    pub(crate) framebuffer_mib: u64,
    pub(crate) max_instances: u32,
    #[serde(default = "one")]
    pub(crate) max_instances_per_vm: u32,
    /// The GPU-instance profile id of a MIG-backed type.
    #[serde(default)]
    pub(crate) gpu_instance_profile_id: Option<u32>,
    #[serde(default)]
    pub(crate) placements: Option<Placements>,
    /// Its placements in equal-size mode (a simulator's only).
    #[serde(skip)]
    pub(crate) placements_equal: Option<Placements>,
    /// The ids a new vGPU of the type may take now, in the GPU's mode (a simulator's only).
    #[serde(skip)]
    pub(crate) creatable_placements: Option<Vec<u32>>,
}

fn compute() -> String {
    "Compute".to_owned()
}

fn one() -> u32 {
    1
}

/// Placements of a type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Placements {
    pub(crate) size: u32,
    pub(crate) ids: Vec<u32>,
}

/// A GPU-instance profile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    /// `NVML_GPU_INSTANCE_PROFILE_*`.
    pub(crate) index: u32,
    pub(crate) id: u32,
    /// As the driver names it, `MIG 1g.18gb`.
    pub(crate) name: String,
    pub(crate) slices: u32,
    pub(crate) instance_count: u32,
    pub(crate) memory_mib: u64,
    /// Where its GPU instances can go, as `nvidia-smi mig -lgipp` lists them; absent: the
    /// profile cannot be placed (`NVML_ERROR_NOT_SUPPORTED`).
    #[serde(default)]
    pub(crate) placements: Option<ProfilePlacements>,
    /// How many more instances fit, as a simulator says; without one, the fake counts.
    #[serde(skip)]
    pub(crate) remaining: Option<u32>,
}

/// The placements of a GPU-instance profile: each starts at one of `starts` and spans `size`
/// memory slices (`{0,2,4}:2` in `nvidia-smi mig -lgipp`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfilePlacements {
    pub(crate) size: u32,
    pub(crate) starts: Vec<u32>,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GpuInstance {
    pub(crate) id: u32,
    pub(crate) profile_id: u32,
    #[serde(default)]
    pub(crate) placement_start: u32,
    #[serde(default = "one")]
    pub(crate) placement_size: u32,
}

/// A VM id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VmId {
    /// `domain` or `uuid`.
    pub(crate) kind: String,
    pub(crate) id: String,
}

/// Encoder statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Encoder {
    pub(crate) sessions: u32,
    pub(crate) average_fps: u32,
    pub(crate) average_latency_us: u32,
}

/// A utilisation sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sample {
    pub(crate) timestamp_us: u64,
    pub(crate) sm: u32,
    pub(crate) memory: u32,
    pub(crate) encoder: u32,
    pub(crate) decoder: u32,
}

/// A running vGPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Vgpu {
    pub(crate) instance: u32,
    pub(crate) type_id: u32,
    pub(crate) uuid: String,
    /// The UUID of its mediated device; absent: `NOT_SUPPORTED` (as on a hypervisor other
    /// than KVM).
    #[serde(default)]
    pub(crate) mdev_uuid: Option<String>,
    /// The VM it runs in; absent: `NOT_SUPPORTED`.
    #[serde(default)]
    pub(crate) vm_id: Option<VmId>,
    #[serde(default)]
    pub(crate) fb_usage_mib: u64,
    #[serde(default)]
    pub(crate) encoder: Option<Encoder>,
    /// The GPU instance of a MIG-backed vGPU.
    #[serde(default)]
    pub(crate) gpu_instance_id: Option<u32>,
    #[serde(default)]
    pub(crate) utilization: Vec<Sample>,
    /// The guest driver version the guest reported; absent: the guest driver has not
    /// reported (`NVML_VGPU_INSTANCE_GUEST_INFO_STATE_UNINITIALIZED`).
    #[serde(default)]
    pub(crate) guest_driver: Option<String>,
    /// Its placement id (a simulator's only).
    #[serde(skip)]
    pub(crate) placement_id: Option<u32>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Gpu {
    /// The PCI address, `0000:41:00.0`.
    pub(crate) pci: String,
    /// Needed without a simulator; with one, its name is the default.
    #[serde(default)]
    pub(crate) name: String,
    /// Needed without a simulator; with one, one derived from the PCI address is the default.
    #[serde(default)]
    pub(crate) uuid: String,
    /// `pciDeviceId`: device id in the top 16 bits, vendor in the bottom.
    #[serde(default)]
    pub(crate) pci_device_id: u32,
    /// `none`, `passthrough`, `vgpu`, `host-vgpu`, `host-vsga`.
    #[serde(default = "host_vgpu")]
    pub(crate) virtualization_mode: String,
    /// `sriov` or `non-sriov`.
    #[serde(default = "sriov")]
    pub(crate) host_vgpu_mode: String,
    /// MIG mode; absent: `NOT_SUPPORTED`.
    #[serde(default)]
    pub(crate) mig: Option<Mode>,
    /// A MIG-mode change waits for a GPU reset: `nvmlDeviceSetMigMode` sets only the pending
    /// mode and answers `NVML_ERROR_RESET_REQUIRED` as the activation status.
    #[serde(default)]
    pub(crate) mig_reset_required: bool,
    /// ECC mode; absent: `NOT_SUPPORTED`.
    #[serde(default)]
    pub(crate) ecc: Option<Mode>,
    /// Scheduler state; absent: `NOT_SUPPORTED`.
    #[serde(default)]
    pub(crate) scheduler: Option<Scheduler>,
    /// Scheduler capabilities; absent: `NOT_SUPPORTED`.
    #[serde(default)]
    pub(crate) scheduler_capabilities: Option<Capabilities>,
    /// Type ids creatable now.
    #[serde(default)]
    pub(crate) creatable: Vec<u32>,
    /// How functions answer for this GPU, over the file-wide `functions`.
    #[serde(default)]
    pub(crate) functions: BTreeMap<String, Behaviour>,
    #[serde(default, rename = "type")]
    pub(crate) types: Vec<VgpuType>,
    #[serde(default, rename = "profile")]
    pub(crate) profiles: Vec<Profile>,
    #[serde(default, rename = "gpu_instance")]
    pub(crate) gpu_instances: Vec<GpuInstance>,
    #[serde(default, rename = "vgpu")]
    pub(crate) vgpus: Vec<Vgpu>,
    /// What the data file itself gave, kept over the simulator's values.
    #[serde(skip)]
    pub(crate) given: Given,
    /// The MIG mode last asked for (`nvmlDeviceSetMigMode`): the pending mode of a GPU that
    /// waits for a reset, over a simulator's.
    #[serde(skip)]
    pub(crate) mig_pending: Option<bool>,
    /// NVIDIA's vGPU size mode: `Some(true)` mixed, `Some(false)` equal, `None` a GPU without
    /// the mode (a simulator's only).
    #[serde(skip)]
    pub(crate) size_mode: Option<bool>,
}

/// What the data file gave for a GPU that a simulator also describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Given {
    /// Whether it named the GPU.
    pub(crate) name: bool,
    /// Whether it gave the scheduler's state (else a simulator's is served).
    pub(crate) scheduler: bool,
    /// Its `[[gpu.type]]` rows, each over the simulator's row with its id.
    pub(crate) types: Vec<VgpuType>,
}

fn host_vgpu() -> String {
    "host-vgpu".to_owned()
}

fn sriov() -> String {
    "sriov".to_owned()
}

/// The whole data file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Data {
    #[serde(default = "driver_version")]
    pub(crate) driver_version: String,
    #[serde(default = "nvml_version")]
    pub(crate) nvml_version: String,
    /// How `nvmlInit_v2` answers.
    #[serde(default)]
    pub(crate) init: Behaviour,
    /// How functions answer, by name.
    #[serde(default)]
    pub(crate) functions: BTreeMap<String, Behaviour>,
    #[serde(default)]
    pub(crate) confidential_computing: bool,
    #[serde(default, rename = "gpu")]
    pub(crate) gpus: Vec<Gpu>,
    /// A vgpu-sim mount root: the GPUs, their MIG state, vGPUs and types are read from the
    /// simulated host at every call, and MIG changes are asked of it (see `sim`).
    #[serde(default)]
    pub(crate) sim_root: Option<PathBuf>,
    /// The rule `nvmlGetVgpuCompatibility` follows on this host.
    #[serde(default)]
    pub(crate) migration: Migration,
}

/// Which vGPUs this host takes by live migration (`nvmlGetVgpuCompatibility`). A vGPU is
/// compatible with a GPU when none of these limits it:
///
/// - the GPU: the source GPU's `pci_device_id` differs from this GPU's, or this GPU does not
///   support the vGPU's type (`NVML_VGPU_COMPATIBILITY_LIMIT_GPU`);
/// - the host driver: the source's driver version is not in `host_drivers`
///   (`NVML_VGPU_COMPATIBILITY_LIMIT_HOST_DRIVER`);
/// - the guest driver: the guest reported a driver version not in `guest_drivers`
///   (`NVML_VGPU_COMPATIBILITY_LIMIT_GUEST_DRIVER`).
///
/// A compatible vGPU can move live or cold (`NVML_VGPU_VM_COMPATIBILITY_LIVE | _COLD`); any
/// limit leaves `NVML_VGPU_VM_COMPATIBILITY_NONE`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Migration {
    /// The source host driver versions taken; absent: this host's `driver_version` only.
    #[serde(default)]
    pub(crate) host_drivers: Option<Vec<String>>,
    /// The guest driver versions taken; absent: any.
    #[serde(default)]
    pub(crate) guest_drivers: Option<Vec<String>>,
}

fn driver_version() -> String {
    "550.90.05".to_owned()
}

fn nvml_version() -> String {
    "12.550.90.05".to_owned()
}

/// A change asked of the fake, as logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "function")]
pub(crate) enum Call {
    /// `nvmlDeviceSetVgpuSchedulerState`.
    #[serde(rename = "nvmlDeviceSetVgpuSchedulerState")]
    SetScheduler {
        gpu: String,
        policy: u32,
        arr_mode: u32,
        timeslice_ns: u32,
    },
    /// `nvmlDeviceSetMigMode`, accepted: the pending mode, and the current one unless the GPU
    /// needs a reset.
    #[serde(rename = "nvmlDeviceSetMigMode")]
    SetMigMode { gpu: String, mode: bool },
    /// `nvmlDeviceCreateGpuInstanceWithPlacement`, accepted, with the id it gave.
    #[serde(rename = "nvmlDeviceCreateGpuInstanceWithPlacement")]
    CreateGpuInstance {
        gpu: String,
        id: u32,
        profile_id: u32,
        start: u32,
        size: u32,
    },
    /// `nvmlGpuInstanceDestroy`, accepted.
    #[serde(rename = "nvmlGpuInstanceDestroy")]
    DestroyGpuInstance { gpu: String, id: u32 },
}

/// The log beside `data`.
pub(crate) fn calls_path(data: &Path) -> PathBuf {
    data.with_extension("calls")
}

/// Parses the data file at `path`. With `sim_root` (the key, else `sim_env`), a missing
/// file is no data; without one, every GPU needs `name` and `uuid`.
pub(crate) fn parse(path: &Path, sim_env: Option<PathBuf>) -> Result<Data, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && sim_env.is_some() => String::new(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut data: Data = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if data.sim_root.is_none() {
        data.sim_root = sim_env;
    }
    for g in &mut data.gpus {
        if data.sim_root.is_none() && (g.name.is_empty() || g.uuid.is_empty()) {
            return Err(format!(
                "{}: GPU {}: name and uuid are needed without sim_root",
                path.display(),
                g.pci
            ));
        }
        g.given = Given {
            name: !g.name.is_empty(),
            scheduler: g.scheduler.is_some(),
            types: g.types.clone(),
        };
    }
    Ok(data)
}

/// Replays the call log beside `path` onto `data`.
pub(crate) fn replay(data: &mut Data, path: &Path) -> Result<(), String> {
    let log = calls_path(path);
    match std::fs::read_to_string(&log) {
        Ok(text) => {
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let call: Call = serde_json::from_str(line)
                    .map_err(|e| format!("{} line {}: {e}", log.display(), n + 1))?;
                data.apply(&call);
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", log.display())),
    }
}

/// Reads `path` and replays its call log onto it (without a simulator).
#[cfg(test)]
pub(crate) fn load(path: &Path) -> Result<Data, String> {
    let mut data = parse(path, None)?;
    replay(&mut data, path)?;
    Ok(data)
}

/// Appends `call` to the log beside `data`.
pub(crate) fn record(data: &Path, call: &Call) -> Result<(), String> {
    let log = calls_path(data);
    let line = serde_json::to_string(call).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    writeln!(file, "{line}").map_err(|e| format!("{}: {e}", log.display()))
}

impl Data {
    /// Applies a logged change (one about a GPU the data lacks changes nothing). With a
    /// simulator, GPU instances are the simulator's: their changes are not applied here.
    pub(crate) fn apply(&mut self, call: &Call) {
        if self.sim_root.is_some()
            && matches!(
                call,
                Call::CreateGpuInstance { .. } | Call::DestroyGpuInstance { .. }
            )
        {
            return;
        }
        let pci = match call {
            Call::SetScheduler { gpu, .. }
            | Call::SetMigMode { gpu, .. }
            | Call::CreateGpuInstance { gpu, .. }
            | Call::DestroyGpuInstance { gpu, .. } => gpu,
        };
        let Some(g) = self.gpus.iter_mut().find(|g| &g.pci == pci) else {
            return;
        };
        match call {
            Call::SetScheduler {
                policy,
                arr_mode,
                timeslice_ns,
                ..
            } => {
                g.scheduler = Some(Scheduler {
                    policy: *policy,
                    arr_mode: *arr_mode,
                    timeslice_ns: *timeslice_ns,
                });
            }
            Call::SetMigMode { mode, .. } => {
                g.mig_pending = Some(*mode);
                if let Some(m) = &mut g.mig {
                    m.pending = *mode;
                    if !g.mig_reset_required {
                        m.current = *mode;
                    }
                }
            }
            Call::CreateGpuInstance {
                id,
                profile_id,
                start,
                size,
                ..
            } => g.gpu_instances.push(GpuInstance {
                id: *id,
                profile_id: *profile_id,
                placement_start: *start,
                placement_size: *size,
            }),
            Call::DestroyGpuInstance { id, .. } => g.gpu_instances.retain(|gi| gi.id != *id),
        }
    }

    /// How `function` answers for GPU `gpu` (an index), or file-wide.
    pub(crate) fn behaviour(&self, function: &str, gpu: Option<usize>) -> Behaviour {
        gpu.and_then(|i| self.gpus.get(i))
            .and_then(|g| g.functions.get(function))
            .or_else(|| self.functions.get(function))
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_GPU: &str = "[[gpu]]\npci = \"0000:41:00.0\"\nname = \"NVIDIA L40S\"\n\
                           uuid = \"GPU-1\"\nscheduler = { policy = 1 }\n";

    #[test]
    fn load_replays_the_call_log_onto_the_data() {
        let dir = std::env::temp_dir().join(format!("vgpu-nvml-fake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let path = dir.join("fake-nvml.toml");
        std::fs::write(&path, ONE_GPU).expect("data file");
        let call = Call::SetScheduler {
            gpu: "0000:41:00.0".to_owned(),
            policy: 3,
            arr_mode: 0,
            timeslice_ns: 2_000_000,
        };
        record(&path, &call).expect("log the call");
        let scheduler = load(&path).map(|d| d.gpus[0].scheduler);
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            scheduler,
            Ok(Some(Scheduler {
                policy: 3,
                arr_mode: 0,
                timeslice_ns: 2_000_000
            }))
        );
    }

    #[test]
    fn load_replays_mig_changes_in_order() {
        let dir = std::env::temp_dir().join(format!("vgpu-nvml-fake-mig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let path = dir.join("fake-nvml.toml");
        let data = format!("{ONE_GPU}mig = {{ current = false, pending = false }}\n");
        std::fs::write(&path, data).expect("data file");
        let gpu = || "0000:41:00.0".to_owned();
        let calls = [
            Call::SetMigMode {
                gpu: gpu(),
                mode: true,
            },
            Call::CreateGpuInstance {
                gpu: gpu(),
                id: 1,
                profile_id: 19,
                start: 2,
                size: 1,
            },
            Call::CreateGpuInstance {
                gpu: gpu(),
                id: 2,
                profile_id: 19,
                start: 3,
                size: 1,
            },
            Call::DestroyGpuInstance { gpu: gpu(), id: 1 },
        ];
        for call in &calls {
            record(&path, call).expect("log the call");
        }
        let loaded = load(&path).map(|d| (d.gpus[0].mig, d.gpus[0].gpu_instances.clone()));
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            loaded,
            Ok((
                Some(Mode {
                    current: true,
                    pending: true
                }),
                vec![GpuInstance {
                    id: 2,
                    profile_id: 19,
                    placement_start: 3,
                    placement_size: 1
                }]
            ))
        );
    }

    #[test]
    fn apply_mig_mode_with_reset_required_sets_only_pending() {
        let mut data: Data = toml::from_str(&format!(
            "{ONE_GPU}mig = {{ current = false, pending = false }}\nmig_reset_required = true\n"
        ))
        .expect("parses");
        data.apply(&Call::SetMigMode {
            gpu: "0000:41:00.0".to_owned(),
            mode: true,
        });
        assert_eq!(
            data.gpus[0].mig,
            Some(Mode {
                current: false,
                pending: true
            })
        );
    }

    #[test]
    fn behaviour_of_a_gpu_overrides_the_file_s() {
        let mut data: Data = toml::from_str(ONE_GPU).expect("parses");
        data.functions
            .insert("nvmlDeviceGetName".to_owned(), Behaviour::Missing);
        data.gpus[0]
            .functions
            .insert("nvmlDeviceGetName".to_owned(), Behaviour::NotSupported);
        assert_eq!(
            (
                data.behaviour("nvmlDeviceGetName", Some(0)),
                data.behaviour("nvmlDeviceGetName", None)
            ),
            (Behaviour::NotSupported, Behaviour::Missing)
        );
    }
}
