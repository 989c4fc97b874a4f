//! `vgpuctl isolation [GPU]`: for each kind of device each GPU can give a VM now, the eight
//! dimensions of isolation, what this host provides on each and on which facts, and the risk
//! that remains (`vgpu_report::isolation::isolation_report`).

use std::io::Write;

use anyhow::Result;

use vgpu_report::isolation::Fact as IsolationFact;
use vgpu_report::isolation::{IsolationReport, NvmlHostFacts};

use crate::context::Context;
use crate::{EXIT_OK, render};

/// `vgpuctl isolation [GPU]`.
pub(crate) fn run(ctx: &Context<'_>, gpu: Option<&str>, out: &mut dyn Write) -> Result<u8> {
    let paths = ctx.paths();
    let mut inventory = ctx.inventory()?;
    let nvml = ctx.nvml();
    for gpu in &mut inventory.gpus {
        let warnings = nvml.enrich(gpu);
        inventory.warnings.extend(warnings);
    }
    let checks = vgpu_core::checks::check_host(paths, &inventory);
    let mut facts = NvmlHostFacts::of(&nvml.read());
    facts.driver_params = vgpu_core::checks::nvidia_registry(paths)?;
    let mut report = vgpu_report::isolation::isolation_report(&inventory, &checks, &facts);
    if let Some(name) = gpu {
        let address = vgpu_core::discovery::find_gpu(&inventory, name, paths)?.address;
        report.gpus.retain(|g| g.gpu == address);
    }
    if ctx.cli().json {
        render::json(out, &report)?;
    } else {
        table(out, &report)?;
    }
    Ok(EXIT_OK)
}

fn fact(f: &IsolationFact) -> String {
    match (&f.value, &f.detail) {
        (Some(value), Some(detail)) => format!("{}={value} ({detail}) [{}]", f.name, f.source),
        (Some(value), None) => format!("{}={value} [{}]", f.name, f.source),
        (None, _) => format!("{}=unknown [{}]", f.name, f.source),
    }
}

/// The report for people: per GPU and kind, one line per dimension with its status and
/// facts, and its residual risk below it. Why a fact is unknown is in `--json` (`detail`).
fn table(out: &mut dyn Write, report: &IsolationReport) -> std::io::Result<()> {
    for (i, gpu) in report.gpus.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "{}  {}  (backend {})",
            gpu.gpu,
            gpu.model.as_deref().unwrap_or("-"),
            gpu.backend
        )?;
        if let Some(nvidia) = &gpu.nvidia {
            let facts: Vec<String> = nvidia.facts.iter().map(fact).collect();
            writeln!(out, "  {:<17} {}", "scheduling", facts.join("; "))?;
            let scrub = &nvidia.scrub;
            writeln!(
                out,
                "  {:<17} {:<13} {}",
                "scrubbing",
                scrub.status.to_string(),
                fact(&scrub.fact)
            )?;
            writeln!(out, "  {:<17} risk: {}", "", scrub.residual_risk)?;
        }
        if gpu.kinds.is_empty() {
            writeln!(
                out,
                "  gives no device now (its VFs are off, or what it holds is in use)"
            )?;
        }
        for kind in &gpu.kinds {
            writeln!(out, "  {}", kind.kind)?;
            for a in &kind.dimensions {
                let facts: Vec<String> = a.facts.iter().map(fact).collect();
                writeln!(
                    out,
                    "    {:<15} {:<13} {}",
                    a.dimension.to_string(),
                    a.status.to_string(),
                    facts.join("; ")
                )?;
                writeln!(out, "    {:<15} risk: {}", "", a.residual_risk)?;
            }
        }
    }
    Ok(())
}
