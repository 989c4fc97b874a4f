//! `vgpu-core`: discovery, lifecycle and IOMMU checks for vGPUs and SR-IOV virtual functions on
//! KVM hosts.
//!
//! # The kernel model
//!
//! A GPU physical function (PF) is a PCI function (`sys/bus/pci/devices/<dddd:bb:dd.f>`) of
//! class `0x03xxxx` (display) or `0x12xxxx` (accelerator). It offers virtual GPUs through one
//! of four interfaces ([`Backend`]):
//!
//! - **mediated devices on the PF** (`mdev_supported_types/` under the PF): NVIDIA up to
//!   Turing, Intel GVT-g. Writing a UUID to a type's `create` makes a vGPU (the kernel's
//!   `Documentation/driver-api/vfio-mediated-device.rst`);
//! - **mediated devices on SR-IOV VFs**: NVIDIA Ampere; each VF holds at most one vGPU, so
//!   capacity is counted per physical GPU, never by summing VFs;
//! - **NVIDIA's vendor-specific VFIO interface** on VFs (`nvidia/current_vgpu_type`): Ada,
//!   Hopper, Blackwell with vGPU 17+ (NVIDIA Virtual GPU Software User Guide);
//! - **plain SR-IOV VFs** (`sriov_numvfs`, `Documentation/PCI/pci-iov-howto.rst`), each
//!   assigned whole: Intel Flex, AMD MxGPU.
//!
//! Devices are assigned to guests through VFIO, whose unit of isolation is the IOMMU group
//! (`Documentation/driver-api/vfio.rst`): [`check_host`] verifies the firmware tables, the
//! kernel, interrupt remapping and each group.
//!
//! # The API
//!
//! - **Discovery**: [`discover`] reads the host into an [`Inventory`] of [`Gpu`]s, each with
//!   its [`Vf`]s, [`VgpuType`]s counted per physical GPU, and [`Vgpu`]s. It never fails
//!   because of one device: problems become [`Warning`]s.
//! - **Checks**: [`check_host`] and [`isolation`] report [`Check`]s with a [`checks::Status`].
//! - **Changes**: every change goes through a [`Manager`], which takes the host lock, writes
//!   the audit log, honours persistent definitions (it never gives away room a defined vGPU
//!   is owed) and undoes a change that fails part-way. [`Manager::definitions`] reads them.
//! - **Plans**: a desired state for a whole host, in frame buffer, types or VF counts
//!   ([`DesiredFile`]: `host.toml`, or NVIDIA vgpu-device-manager's v1 YAML), is turned by
//!   [`plan()`] (pure, over a [`HostState`] from [`Manager::host_state`]) into steps per GPU or
//!   the reasons it cannot be done ([`Plan`]); [`Manager::apply`] carries it out, one
//!   operation per GPU. [`place`] chooses GPUs for new vGPUs ([`Policy::Pack`] or
//!   [`Policy::Spread`]).
//! - **The libvirt hook**: [`Manager::prepare_domain`] makes the vGPUs a starting domain's XML
//!   names ([`HookDomain`]) from their definitions, its metadata or its Nova flavor
//!   ([`HookConfig`]); [`Manager::release_domain`] takes back what it made ([`Made`]).
//! - **NVML** (NVIDIA's management library, loaded at run time): [`Nvml::load`] (the
//!   driver's library, local host only) or [`Nvml::load_from`] (a library named, for any
//!   root); [`Nvml::read`] gives an [`NvmlHost`] of [`NvmlGpu`]s, every fact a [`Fact`] with
//!   the reason when it is [`Unavailable`]. [`Manager::set_scheduler`] sets a GPU's vGPU
//!   scheduler ([`SchedulerRequest`]); MIG-backed types ([`MigBacking`]) get a free GPU instance
//!   from NVML when they are made ([`Manager::with_nvml`] says where NVML comes from).
//! - **Errors**: [`Error`] has one variant per failure with its facts (path, errno, device);
//!   [`Error::kind`] gives the [`ErrorKind`] a caller acts on.
//!
//! # Paths
//!
//! Every path is derived from one [`HostPaths`] root, so the same code runs against `/`, a test
//! tree, or a simulated host. Nothing here prints, and nothing panics on sysfs content: reads are
//! bounded, parses are checked, and problems with one device become warnings about that device.
//!
//! # Example
//!
//! On a host simulated by `vgpu-sim` (a FUSE filesystem that behaves like sysfs), find a GPU
//! with room, make a vGPU and take it away again:
//!
//! ```
//! use vgpu_core::{ErrorKind, HostPaths, Manager, discover};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let sim = vgpu_sim::SimHost::mount_for_test("t4-legacy");
//! let state = tempfile::tempdir()?;
//! let paths = HostPaths::new(sim.root()).with_state_root(state.path());
//!
//! let inventory = discover(&paths)?;
//! let gpu = inventory
//!     .gpus
//!     .iter()
//!     .find(|g| g.types.iter().any(|t| t.name.as_deref() == Some("GRID T4-2Q") && t.available > 0))
//!     .ok_or("no GPU with room for a T4-2Q")?;
//!
//! let manager = Manager::new(&paths, "example");
//! let created = manager.create(gpu.address, "T4-2Q", None, None)?;
//! assert_eq!(discover(&paths)?.gpus[0].vgpus.len(), 1);
//!
//! // A type the GPU does not offer is a typed error the caller can act on.
//! let err = manager.create(gpu.address, "T4-99Q", None, None).unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::NotFound);
//!
//! manager.destroy(created.id)?;
//! assert!(discover(&paths)?.gpus[0].vgpus.is_empty());
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

// The model and the planner are crates of their own (`vgpu-model`, `vgpu-plan`), re-exported
// whole so that an embedder needs only this crate; `crate::model::`, `crate::plan::` and
// `crate::capacity::` are spelled the same in all three.
pub use vgpu_model as model;
use vgpu_model::parse;
pub use vgpu_plan as plan;
use vgpu_plan::capacity;

mod backend;
pub mod checks;
mod discovery;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod host;
mod manager;
mod nvml;
mod state;
mod telemetry;
pub mod tenancy;

pub use backend::{Placement, Running};
pub use capacity::{
    DefinitionSet, HostState, KnownType, Limit, MigFacts, MigFitError, PlacedGpuInstance, Room,
    check_handout, fit_gpu_instances, room,
};
pub use checks::{Check, DeviceIsolation, GroupMember, check_host, isolation};
pub use discovery::{discover, discover_gpu, find_gpu, resolve_gpu};
pub use error::{Error, ErrorKind, NvmlError, Object, Result};
pub use host::paths::HostPaths;
pub use host::pci_device::resolve_address;
pub use host::sriov::{SriovChange, SriovOptions};
pub use host::uevent::{Uevent, UeventAction, UeventOrigin, UeventParseError, UeventSource};
pub use manager::{
    ApplyEvent, ApplyOutcome, ApplyReport, Created, Defined, Destroyed, DomainReferences, GpuApply,
    GpuReport, HookDomain, Left, Manager, Prepared, Progress, Released, RestoreOutcome,
    RestoreQuota, RestoreReport, RestoreStep, Target, request_stop, stop_requested,
};
pub use model::delta::{DeltaChange, DeltaItem, DeltaKind, InventoryDelta};
pub use model::nvml::{
    ArrMode, Cause, EccMode, EncoderStats, Fact, GpuInstance, HostVgpuMode, MigMode, NvmlGpu,
    NvmlHost, NvmlStatus, NvmlVgpu, NvmlVgpuType, Placements, SchedulerCapabilities,
    SchedulerPolicy, SchedulerState, Unavailable, UtilizationSample, VirtualizationMode, VmId,
};
pub use model::pci::{PciAddress, PciAddressError, SriovCapability};
pub use model::{
    Backend, Gpu, Inventory, MigBacking, NameSource, PLAIN_VF_TYPE, Vf, Vgpu, VgpuHandle, VgpuType,
    Warning,
};
pub use nvml::host_state::add_nvml_facts;
pub use nvml::mig_write::{
    CreatedGpuInstance, GpuInstancePlacement, MigModeChange, MigModeOutcome,
};
pub use nvml::sched::{SchedulerChange, SchedulerRequest, ns_as_ms};
pub use nvml::{DEFAULT_LIBRARY, Nvml, NvmlSource};
pub use parse::ParseError;
pub use plan::desired::{
    Desired, DesiredFile, Entry, Format, Location, MigGeometry, MigRequest, Partition, Selection,
    SizeItem, TypeItem, VfDriver, parse_framebuffer,
};
pub use plan::place::{Pick, PlaceRequest, PlaceWant, Policy, place, plan_picks};
pub use plan::planner::plan;
pub use plan::steps::{GpuPlan, Plan, Refusal, Refused, Step, Unmatched, Want};
pub use state::audit::AuditEntry;
pub use state::desired::read_desired;
pub use state::hook::{HookConfig, Made};
pub use state::store::{
    BindingDefinition, MdevDefinition, MigDefinition, MigInstanceDefinition, RecordedOffer,
    SriovDefinition, Start, Store, VfVgpuDefinition, add_recorded_offers,
};
pub use telemetry::{
    GpuTelemetry, MatchedBy, Owner, Telemetry, TenantUsage, Usage, Utilization, VgpuTelemetry,
    VgpuUsage, telemetry, usage_from_nvml,
};
pub use tenancy::{
    Assessment, DeviceKind, Dimension, IsolationReport, KindReport, NvmlFacts, NvmlHostFacts,
    isolation_report,
};
