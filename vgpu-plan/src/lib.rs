//! `vgpu-plan`: partition plans and the capacity model, pure functions of a host state the
//! caller reads. Nothing here reads the host: `vgpu-core` reads a [`HostState`] and carries
//! plans out.
//!
//! Partition plans: the desired state of a host's GPUs, declared in frame buffer, types or VF
//! counts; the planner that turns it into steps per GPU; and placement for orchestrators.
//!
//! - [`desired`]: the model ([`desired::DesiredFile`], [`desired::Desired`],
//!   [`desired::Entry`], [`desired::Partition`], [`desired::MigGeometry`]), parsed from
//!   `host.toml` ([`desired::host_toml`]), NVIDIA vgpu-device-manager's v1 YAML
//!   ([`desired::device_manager`]) or NVIDIA mig-parted's v1 YAML ([`desired::mig_parted`]);
//! - [`planner`]: [`plan()`], a pure function from a [`HostState`] and a config to a
//!   [`steps::Plan`] ([`steps`]: the plan, its steps and refusals), MIG geometry included
//!   ([`geometry`]);
//! - [`capacity`]: [`room`], the one answer to what a GPU can still take, a type's identity,
//!   the hand-out check, and where new GPU instances fit;
//! - [`place`](mod@place): [`place::place()`], a pure function choosing GPUs for new vGPUs;
//! - [`placement`]: NVIDIA's mixed-size mode: the supported placement ids of a size, a GPU's
//!   slot map, whether sizes fit together, and where one new vGPU goes;
//! - `testing`: a synthetic fleet of GPUs, a fixture for benchmarks and tests only.
//!
//! Carrying a plan out is `vgpu-core`'s `Manager::apply`: each GPU's steps are one operation,
//! under the host lock, audited, and undone if one fails.

#![forbid(unsafe_code)]

// The model is its own crate; this name keeps `crate::model::` one spelling across the
// workspace.
use vgpu_model as model;
use vgpu_model::parse;

pub mod capacity;
pub mod desired;
pub mod error;
pub mod geometry;
pub mod offers;
pub mod place;
pub mod placement;
pub mod planner;
pub mod steps;
pub mod tenants;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use capacity::{
    DefinitionSet, HostState, KnownType, Limit, MigFacts, MigFitError, PlacedGpuInstance, Room,
    check_handout, fit_gpu_instances, room,
};
pub use error::{Error, Result};
pub use planner::plan;
