//! A test NVML: a shared library (`libvgpu_nvml_fake.so`) exporting the NVML entry points
//! `vgpu` calls, answering from a data file or live from a simulated host instead of a
//! driver, so that the production NVML
//! code (`nvml-wrapper` and `vgpu-core`'s `nvml` module) runs end to end on hosts without an
//! NVIDIA GPU, a simulated host's GPUs included.
//!
//! # Loading it
//!
//! Name it as the NVML library: `vgpuctl --nvml-library target/debug/libvgpu_nvml_fake.so`
//! (or `VGPU_NVML_LIBRARY`), `Nvml::load_from(path)` in `vgpu-core`.
//!
//! # The data file
//!
//! `nvmlInit_v2` reads the TOML file named by `VGPU_FAKE_NVML_DATA`, or else `fake-nvml.toml`
//! beside the library, so that a test copies the library into a directory of its own with its
//! data. Top-level keys: `driver_version`, `nvml_version`, `init` (how `nvmlInit_v2`
//! answers), `functions` (how each function answers, by NVML name), `confidential_computing`,
//! `sim_root` (below), `[migration]` (below), and `[[gpu]]` tables: `pci`, `name`, `uuid`, `pci_device_id`, `virtualization_mode`,
//! `host_vgpu_mode`, `mig`/`ecc` (`{ current, pending }`; absent: not supported),
//! `mig_reset_required` (a MIG-mode change waits for a GPU reset; default `false`),
//! `scheduler` (`{ policy, arr_mode, timeslice_ns }`), `scheduler_capabilities`,
//! `creatable` (type ids), `functions` (per GPU), and arrays `[[gpu.type]]`,
//! `[[gpu.profile]]` (GPU-instance profiles: `index`, `id`, `name`, `slices`,
//! `instance_count`, `memory_mib`, `placements = { size, starts }` in memory slices, as
//! `nvidia-smi mig -lgipp` lists them), `[[gpu.gpu_instance]]` (`id`, `profile_id`,
//! `placement_start`, `placement_size`) and `[[gpu.vgpu]]`
//! (`instance`, `type_id`, `uuid`, `mdev_uuid`, `vm_id = { kind, id }`, `fb_usage_mib`,
//! `encoder`, `gpu_instance_id`, `utilization`, `guest_driver`). A value the data leaves out that NVML may
//! not give is answered `NVML_ERROR_NOT_SUPPORTED`: `mig`, `ecc`, the scheduler's, a type's
//! or a profile's `placements`, a vGPU's `mdev_uuid` (NVML gives it only on KVM, for a vGPU
//! that is a mediated device) and `vm_id`.
//!
//! # Migration
//!
//! `nvmlVgpuInstanceGetMetadata` and `nvmlDeviceGetVgpuMetadata` give metadata whose opaque
//! section names the vGPU's type and its GPU's `pci_device_id`, or the GPU's device id and
//! supported types. `nvmlGetVgpuCompatibility` judges a vGPU's metadata against a GPU's by
//! the data's rule. A vGPU is limited by the GPU when the device ids differ or the GPU lacks
//! its type; by the host driver when the source's driver version is not in
//! `migration.host_drivers` (default: this host's `driver_version`); by the guest driver when
//! the guest reported a version not in `migration.guest_drivers` (default: any). Without a
//! limit it can move live or cold.
//!
//! # A view of a simulated host
//!
//! `sim_root = "<mount root>"` (or the environment variable `VGPU_FAKE_NVML_SIM`, when the
//! data has no `sim_root`) makes the fake a view of a vgpu-sim host. With it the data file
//! may be absent. The GPUs are the simulated host's vendor-VFIO GPUs, in address order. At
//! every call the fake reads from the simulator each GPU's name, PCI ids, MIG mode,
//! GPU-instance profiles (with their remaining capacity) and instances, supported types and
//! VFs (`.vgpu-sim/nvidia/<addr>.json`).
//! It reads the running vGPUs from the VFs: one per VF whose `nvidia/current_vgpu_type` is
//! not 0, on the GPU instance of its `nvidia/gpu_instance_id`, its instance id the VF's
//! domain and routing id. The creatable types are the union of the VFs'
//! `nvidia/creatable_vgpu_types`. A `[[gpu]]` of the data with the same `pci` keeps its
//! `name`, `uuid`, modes, scheduler, capabilities, `functions`, `mig_reset_required` and
//! `[[gpu.type]]` rows; its `mig`, profiles, instances, vGPUs and `creatable` are the
//! simulator's. The defaults: a UUID with the PCI address in its last group, the
//! `host-vgpu` and `sriov` modes, ECC on, the scheduler's capabilities (the three policies,
//! time slices of 1 to 30 ms). The scheduler's policy and time slice are the simulator's
//! (`scheduler` in the state file, best effort at each boot) unless the data gives
//! `scheduler`; `nvmlDeviceSetVgpuSchedulerState` then writes the control line
//! `vgpu-scheduler` (refused with `EBUSY` while the GPU holds a vGPU: `NVML_ERROR_IN_USE`),
//! and logs the call as before. MIG changes are control
//! lines to the simulator (`mig-mode`, `gpu-instance-add`, `gpu-instance-remove`); the new
//! instance's id is read back, and the simulator's refusal is NVML's error: `EBUSY`
//! `NVML_ERROR_IN_USE`, `ENOSPC` `NVML_ERROR_INSUFFICIENT_RESOURCES`, `EINVAL`
//! `NVML_ERROR_INVALID_ARGUMENT`, `EOPNOTSUPP` `NVML_ERROR_NOT_SUPPORTED`.
//!
//! NVIDIA's mixed-size mode is the simulator's alone: `nvmlDeviceGetVgpuHeterogeneousMode`
//! reads its `size_mode` (`NVML_ERROR_NOT_SUPPORTED` on a GPU without one, and for a GPU the
//! data alone describes), `nvmlDeviceSetVgpuHeterogeneousMode` writes the control line
//! `size-mode` (`EBUSY` is `NVML_ERROR_IN_USE`). `nvmlDeviceGetVgpuTypeSupportedPlacements`
//! answers in the list's `mode` (the simulator's mixed or equal ids; the data's `placements`
//! are the mixed ones), `nvmlDeviceGetVgpuTypeCreatablePlacements` the ids free now, and
//! `nvmlVgpuInstanceGetPlacementId` a VF's vGPU's placement. Every versioned structure of
//! another version is `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`; a placement list shorter than
//! the ids (or with null ids) gets the count and `NVML_ERROR_INSUFFICIENT_SIZE`.
//!
//! A behaviour is `ok` (answer from the data), `not-supported`, `uninitialized`, `missing`
//! (`NVML_ERROR_FUNCTION_NOT_FOUND`, as an older driver answers), `no-permission`,
//! `driver-not-loaded` or `unknown`. A function the library does not export at all is what
//! the `legacy` build (`vgpu-nvml-fake-legacy`) models: it leaves out the scheduler, the
//! versioned profile query and placements, as drivers before them do. It leaves out the MIG
//! changes above too. It keeps
//! `nvmlVgpuInstanceGetMdevUUID`, which NVML's header already declares in CUDA 11.0 (R450
//! drivers), older than any of those.
//!
//! # Changes
//!
//! `nvmlDeviceSetVgpuSchedulerState`, `nvmlDeviceSetMigMode`,
//! `nvmlDeviceCreateGpuInstanceWithPlacement` and `nvmlGpuInstanceDestroy` append what they
//! accepted, one JSON object a line, to `<data file stem>.calls` beside the data file, and
//! apply it; every initialisation replays that log, so a later process sees the change (as
//! a later process on a real host sees the driver's state). With a simulator, the GPU
//! instances are the simulator's: their changes are logged, not replayed.
//!
//! Without a simulator, the MIG changes follow these rules. A GPU instance takes memory slices
//! `start .. start + size` at one of its profile's `placements`. Overlapping another, or
//! passing the profile's `instance_count`, is `NVML_ERROR_INSUFFICIENT_RESOURCES`; compute
//! slices are not counted. A profile's remaining capacity is how many of its placements
//! still fit side by side, at most its `instance_count` less its instances. A new instance
//! gets the lowest id from 1 that the GPU does not use. An instance named as a vGPU's
//! `gpu_instance_id` is in use (`NVML_ERROR_IN_USE`) and is not destroyed. MIG mode does not
//! change while the GPU has GPU instances or vGPUs (`NVML_ERROR_IN_USE`); a change sets the
//! pending mode, and the current one unless `mig_reset_required`, when the activation status
//! is `NVML_ERROR_RESET_REQUIRED` and the current mode stays (the fake has no GPU reset).
//!
//! Every entry point writes only through the caller's out-pointers, each checked for null.

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case, reason = "the exported names are NVML's")]

mod data;
mod exports;
mod sim;
mod state;

pub use sim::SIM_ENV;
pub use state::{DATA_ENV, DATA_FILE};
