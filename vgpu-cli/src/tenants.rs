//! `vgpuctl tenants`: each tenant's policy and what it holds, and every rule of the tenant
//! policy broken on the host now. `vgpu_core::Manager::holdings` reads what each domain holds;
//! `vgpu_report::tenants::report` applies the rules, the one check the hook and `attach` ask,
//! and names the GPUs that serve each tenant's QoS class now (the schedulers NVML reads).

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use vgpu_core::manager::read_policy;
use vgpu_report::tenants::{TenantsReport, report};

use crate::context::Context;
use crate::render::{self, Report, Table};
use crate::{EXIT_CHECK_FAILED, EXIT_OK};

/// The report as `--json` gives it.
#[derive(Serialize)]
struct Shown<'a>(&'a TenantsReport);

impl Report for Shown<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let report = self.0;
        match &report.policy {
            Some(path) => writeln!(out, "Policy: {}", path.display())?,
            None => writeln!(out, "Policy: none (every tenant is shared, no quota)")?,
        }
        let mut table = Table::new(&[
            "TENANT",
            "ISOLATION",
            "SPREAD",
            "QOS",
            "VGPUS",
            "FRAMEBUFFER",
            "QUOTA",
            "GPUS",
        ]);
        for t in &report.tenants {
            let quota = [
                t.policy.max_vgpus.map(|n| format!("{n} vGPUs")),
                t.policy.max_framebuffer_mib.map(|m| format!("{m} MiB")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
            let gpus: Vec<String> = t.gpus.iter().map(ToString::to_string).collect();
            table.row(vec![
                if t.tenant.is_empty() {
                    "(none)".to_owned()
                } else {
                    t.tenant.clone()
                },
                t.policy.isolation.to_string(),
                if t.policy.spread { "yes" } else { "no" }.to_owned(),
                t.policy.qos.to_string(),
                t.vgpus.to_string(),
                format!("{} MiB", t.framebuffer_bytes >> 20),
                render::opt((!quota.is_empty()).then(|| quota.join(", ")).as_deref()),
                render::opt((!gpus.is_empty()).then(|| gpus.join(" ")).as_deref()),
            ]);
        }
        if !table.is_empty() {
            table.write(out)?;
        }
        for violation in &report.violations {
            writeln!(out, "violation: {violation}")?;
        }
        Ok(())
    }
}

/// `vgpuctl tenants`. Exits [`EXIT_CHECK_FAILED`] when a rule is broken now.
pub(crate) fn run(ctx: &Context<'_>, out: &mut dyn Write) -> Result<u8> {
    let policy = read_policy(ctx.paths())?;
    let manager = ctx.manager();
    let holdings = manager.holdings()?;
    let host = manager.capacity_state(ctx.nvml())?;
    let path = policy.as_ref().map(|_| ctx.paths().tenants_toml());
    let report = report(
        &policy.unwrap_or_default(),
        path.as_deref(),
        &holdings,
        &host,
    );
    render::emit(&Shown(&report), ctx.format(), out)?;
    Ok(if report.violations.is_empty() {
        EXIT_OK
    } else {
        EXIT_CHECK_FAILED
    })
}
