//! `vgpu-report`: reports over the host as `vgpu-model` describes it. Nothing here reads the
//! host: the caller discovers it (`vgpu-core`), asks NVML and libvirt, and passes the data in.
//!
//! - [`telemetry`]: per-vGPU allotment and usage, who holds each vGPU, and sums per tenant.
//! - [`isolation`]: for each GPU, the kinds of device it can give a VM, assessed on eight
//!   dimensions of isolation from the host's facts, with the risk that remains.
//! - [`nova`]: the `nova.conf` sections an OpenStack Nova compute host needs for its vGPUs.
//! - [`kubevirt`]: the KubeVirt CR patch or Harvester's objects that let a cluster see a
//!   host's vGPUs, and their union over a cluster's nodes.
//! - [`tenants`]: each tenant's policy and what it holds, and every rule of the tenant policy
//!   broken now.
//! - [`usage`]: vGPU-seconds and frame-buffer byte-seconds per tenant, domain, type or GPU over
//!   a window, from the usage ledger's intervals and monthly summaries.

#![forbid(unsafe_code)]

// One spelling, `crate::model::`, across the workspace.
use vgpu_model as model;

pub mod isolation;
pub mod kubevirt;
pub mod nova;
pub mod telemetry;
pub mod tenants;
pub mod usage;
