//! `vgpuctl sched`: the vGPU scheduler of an NVIDIA GPU, read from NVML, or set through the
//! manager (audited, under the host lock).

use std::io::Write;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::{
    error::NvmlError,
    model::nvml::ns_as_ms,
    model::{
        Gpu,
        nvml::{ArrMode, Fact, SchedulerCapabilities, SchedulerState},
        pci::PciAddress,
    },
    nvml::{Nvml, SchedulerChange, SchedulerRequest},
};

use crate::context::Context;
use crate::render::{self, Line, Report, Table};
use crate::{EXIT_OK, PolicyName};

/// `sched GPU`: the scheduler and what the GPU supports; JSON or a two-column table.
#[derive(Serialize)]
struct SchedReport<'a> {
    gpu: PciAddress,
    scheduler: &'a SchedulerState,
    capabilities: &'a Fact<SchedulerCapabilities>,
    /// The vGPUs running on the GPU (sysfs handles, and NVML instances sysfs does not show):
    /// while any runs, the policy cannot change.
    running: Vec<String>,
}

/// The vGPUs running on `gpu`: sysfs's handles, then NVML's count where it knows more.
fn running(gpu: &Gpu, nvml_vgpus: Option<usize>) -> Vec<String> {
    let mut list: Vec<String> = gpu.vgpus.iter().map(|v| v.id.to_string()).collect();
    if let Some(n) = nvml_vgpus.filter(|n| *n > list.len()) {
        list.push(format!("{} more NVML shows", n - list.len()));
    }
    list
}

fn timeslice(state: &SchedulerState) -> String {
    match &state.timeslice_ns {
        Fact::Value(0) => "driver default".to_owned(),
        Fact::Value(ns) => format!("{} ms", ns_as_ms(u64::from(*ns))),
        Fact::Unavailable(why) => format!("unknown ({})", why.reason),
    }
}

fn arr_mode(mode: ArrMode) -> String {
    match mode {
        ArrMode::Default => "driver default".to_owned(),
        ArrMode::Disabled => "off".to_owned(),
        ArrMode::Enabled => "on".to_owned(),
        ArrMode::Other(code) => format!("unknown (NVML mode {code})"),
    }
}

fn policy(state: &SchedulerState) -> String {
    match state.policy {
        Some(p) => p.to_string(),
        None => format!("unknown (NVML policy {})", state.raw_policy),
    }
}

fn capabilities(caps: &Fact<SchedulerCapabilities>) -> String {
    match caps {
        Fact::Value(c) => {
            let names: Vec<&str> = c.policies.iter().map(|p| p.name()).collect();
            format!(
                "{}; time slice {} to {} ms",
                if names.is_empty() {
                    "no policy".to_owned()
                } else {
                    names.join(", ")
                },
                ns_as_ms(u64::from(c.min_timeslice_ns)),
                ns_as_ms(u64::from(c.max_timeslice_ns))
            )
        }
        Fact::Unavailable(why) => format!("unknown ({})", why.reason),
    }
}

/// `err` as the library error it is, so that `vgpuctl` finds its hint and kind.
fn nvml_error(err: NvmlError) -> anyhow::Error {
    vgpu_core::Error::from(err).into()
}

/// `vgpuctl sched GPU`: the scheduler as NVML reports it. Fails when NVML is not loaded or
/// cannot read the scheduler state, with NVML's reason.
fn show(gpu: &Gpu, nvml: &Nvml, format: render::Format, out: &mut dyn Write) -> Result<u8> {
    if gpu.vendor_id != Some(0x10de) {
        return Err(nvml_error(NvmlError::NotNvidia {
            gpu: gpu.address,
            what: "the vGPU scheduler".to_owned(),
        }));
    }
    let facts = match nvml.read_gpu(gpu.address) {
        Fact::Value(facts) => facts,
        Fact::Unavailable(why) if !nvml.status().loaded => {
            return Err(nvml_error(NvmlError::NotLoaded {
                needed_for: format!("read the vGPU scheduler of {}", gpu.address),
                reason: nvml.status().reason.clone().unwrap_or(why.reason),
            }));
        }
        Fact::Unavailable(why) => {
            return Err(nvml_error(NvmlError::Call {
                gpu: gpu.address,
                why,
            }));
        }
    };
    let state = match &facts.scheduler {
        Fact::Value(state) => state,
        Fact::Unavailable(why) => {
            return Err(nvml_error(NvmlError::Call {
                gpu: gpu.address,
                why: why.clone(),
            })
            .context(format!("cannot read the vGPU scheduler of {}", gpu.address)));
        }
    };
    let report = SchedReport {
        gpu: gpu.address,
        scheduler: state,
        capabilities: &facts.scheduler_capabilities,
        running: running(gpu, facts.vgpus.value().map(Vec::len)),
    };
    render::emit(&report, format, out)?;
    Ok(EXIT_OK)
}

impl Report for SchedReport<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let vgpus = if self.running.is_empty() {
            "none running (the policy can change)".to_owned()
        } else {
            format!(
                "{} running (the policy cannot change): {}",
                self.running.len(),
                self.running.join(", ")
            )
        };
        let mut table = Table::new(&["GPU", &self.gpu.to_string()]);
        table.row(vec!["POLICY".to_owned(), policy(self.scheduler)]);
        table.row(vec!["TIME SLICE".to_owned(), timeslice(self.scheduler)]);
        table.row(vec![
            "ADAPTIVE RR".to_owned(),
            arr_mode(self.scheduler.arr_mode),
        ]);
        table.row(vec!["SUPPORTS".to_owned(), capabilities(self.capabilities)]);
        table.row(vec!["VGPUS".to_owned(), vgpus]);
        table.write(out)
    }
}

/// `vgpuctl sched GPU --policy P [--timeslice MS] [--define]`.
fn set(
    ctx: &Context<'_>,
    gpu: &str,
    request: SchedulerRequest,
    define: bool,
    out: &mut dyn Write,
) -> Result<u8> {
    let change: SchedulerChange = vgpu_core::discovery::resolve_gpu(ctx.paths(), gpu)
        .and_then(|address| match define {
            true => ctx.manager().set_scheduler_defined(address, request),
            false => ctx.manager().set_scheduler(address, request),
        })
        .with_context(|| {
            format!(
                "cannot set the vGPU scheduler of {gpu} to {}",
                request.policy
            )
        })?;
    let line = if change.changed {
        format!(
            "{}: vGPU scheduler {}, time slice {} (was {}, time slice {})",
            change.gpu,
            policy(&change.after),
            timeslice(&change.after),
            policy(&change.before),
            timeslice(&change.before)
        )
    } else {
        format!(
            "{}: vGPU scheduler already {}, time slice {}: nothing changed",
            change.gpu,
            policy(&change.after),
            timeslice(&change.after)
        )
    };
    render::emit(&Line::new(&change, line), ctx.format(), out)?;
    Ok(EXIT_OK)
}

/// `vgpuctl sched GPU [--policy P [--timeslice MS]]`: shows the scheduler, or sets it.
pub(crate) fn run(
    ctx: &Context<'_>,
    gpu: &str,
    policy: Option<PolicyName>,
    timeslice_ms: Option<u32>,
    define: bool,
    out: &mut dyn Write,
) -> Result<u8> {
    match policy {
        None => {
            let inventory = ctx.state()?.inventory;
            let gpu = vgpu_core::discovery::find_gpu(&inventory, gpu, ctx.paths())?;
            show(gpu, ctx.nvml(), ctx.format(), out)
        }
        Some(policy) => {
            let request = SchedulerRequest {
                policy: policy.into(),
                timeslice_ms,
            };
            set(ctx, gpu, request, define, out)
        }
    }
}
