//! `vgpu-core`: discovery, lifecycle and IOMMU checks for vGPUs and SR-IOV virtual functions on
//! KVM hosts.
//!
//! # The kernel model
//!
//! A GPU physical function (PF) is a PCI function (`sys/bus/pci/devices/<dddd:bb:dd.f>`) of
//! class `0x03xxxx` (display) or `0x12xxxx` (accelerator). It offers virtual GPUs through one
//! of four interfaces ([`Backend`](model::Backend)):
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
//! (`Documentation/driver-api/vfio.rst`): [`checks::check_host`] verifies the firmware tables, the
//! kernel, interrupt remapping and each group.
//!
//! # The API
//!
//! The crate root holds the names an embedder starts from: [`discover`], [`Manager`],
//! [`HostPaths`], [`Error`], [`ErrorKind`] and [`Result`]. Everything else lives in the module
//! named for what it is:
//!
//! | module | what it holds |
//! |---|---|
//! | [`model`] | the host as data (crate `vgpu-model`): [`Gpu`](model::Gpu), [`Vf`](model::Vf), [`VgpuType`](model::VgpuType), [`Vgpu`](model::Vgpu), PCI addresses, NVML facts |
//! | [`plan`] | pure planning (crate `vgpu-plan`): desired state, capacity, the planner, placement |
//! | [`discovery`] | reading the host into an [`Inventory`](model::Inventory); finding a GPU by name |
//! | [`checks`] | the IOMMU and VFIO checks, and one device's group isolation |
//! | [`manager`] | what [`Manager`]'s changes take and return: where a vGPU goes, what was created, applied, restored, prepared for a domain |
//! | [`state`] | what `vgpu` keeps on the host: definitions, the audit log, the hook's records and configuration |
//! | [`nvml`] | NVIDIA's management library, loaded at run time, and the vGPU scheduler |
//! | [`host`] | SR-IOV options and uevents |
//! | [`error`] | [`Error`], its [`ErrorKind`], and the NVML errors inside it |
//!
//! - **Discovery**: [`discover`] reads the host. It never fails because of one device: problems
//!   become [`Warning`](model::Warning)s.
//! - **Checks**: [`checks::check_host`] and [`checks::isolation`] report
//!   [`Check`](checks::Check)s.
//! - **Changes**: every change goes through a [`Manager`], which takes the host lock, writes
//!   the audit log, honours persistent definitions (it never gives away room a defined vGPU
//!   is owed) and undoes a change that fails part-way. MIG changes too: NVML's writes are
//!   private to the crate.
//! - **Plans**: a desired state ([`plan::desired::DesiredFile`]: `host.toml`, or NVIDIA
//!   vgpu-device-manager's v1 YAML) is turned by [`plan::planner::plan`] (pure, over the
//!   [`HostState`](plan::capacity::HostState) of [`Manager::host_state`]) into steps per GPU;
//!   [`Manager::apply`] carries them out. [`plan::place::place`] chooses GPUs for new vGPUs.
//! - **The libvirt hook**: [`Manager::prepare_domain`] makes the vGPUs a starting domain names;
//!   [`Manager::release_domain`] takes back what it made.
//! - **NVML**: [`nvml::Nvml::load`] (the driver's library) or [`nvml::Nvml::load_from`] (a
//!   library named); [`Manager::with_nvml`] says where the manager's NVML comes from.
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
pub mod discovery;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod graph_tests;
pub mod host;
pub mod manager;
pub mod nvml;
pub mod state;
#[cfg(test)]
mod surface_tests;

// The names an embedder starts from; everything else is in the module named for what it is.
pub use discovery::discover;
pub use error::{Error, ErrorKind, Result};
pub use host::HostPaths;
pub use manager::Manager;
