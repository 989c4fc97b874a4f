//! Partition plans: the desired state of a host's GPUs, declared in frame buffer, types or VF
//! counts; the planner that turns it into steps per GPU; and placement for orchestrators.
//!
//! - [`desired`]: the model ([`DesiredFile`], [`Desired`], [`Entry`], [`Partition`],
//!   [`MigGeometry`]), read from `host.toml` ([`host_toml`]), NVIDIA vgpu-device-manager's v1
//!   YAML ([`device_manager`]) or NVIDIA mig-parted's v1 YAML ([`mig_parted`]);
//! - [`planner`]: [`plan`], a pure function from a [`HostState`] and a config to a [`Plan`]
//!   ([`model`]: the plan, its steps and refusals), MIG geometry included (`geometry`);
//! - [`place`](mod@place): [`place()`], a pure function choosing GPUs for new vGPUs.
//!
//! Carrying a plan out is [`Manager::apply`](crate::Manager::apply)'s job: each GPU's steps are
//! one operation, under the host lock, audited, and undone if one fails.

pub(crate) mod desired;
pub(crate) mod device_manager;
mod geometry;
pub(crate) mod host_toml;
pub(crate) mod mig_parted;
pub(crate) mod model;
pub(crate) mod offers;
pub(crate) mod place;
pub(crate) mod planner;
pub(crate) mod scheduler;
#[cfg(test)]
mod tests;
pub(crate) mod vfs;
mod yaml;

pub(crate) use crate::capacity::{DefinitionSet, HostState};
