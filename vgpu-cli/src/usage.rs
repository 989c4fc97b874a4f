//! `vgpuctl usage`: what each tenant, domain, type or GPU held over a window, from the usage
//! ledger (`vgpu_core::Manager::usage`, reported by `vgpu_report::usage::report`), as a table,
//! JSON or CSV.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use vgpu_core::model::usage::month_bounds;
use vgpu_report::usage::{By, Query, UsageReport, report, write_csv};

use crate::EXIT_OK;
use crate::context::Context;
use crate::render::{self, Report, Table};

/// The report as `--json` gives it.
#[derive(Serialize)]
struct Shown<'a>(&'a UsageReport);

impl Report for Shown<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let report = self.0;
        let key = report.by.to_string().to_uppercase();
        let typed = report.by == vgpu_report::usage::By::Type;
        let mut header = vec![key.as_str()];
        if typed {
            header.push("NAME");
        }
        header.extend(["VGPU SECONDS", "FB BYTE SECONDS", "INTERVALS", "ESTIMATED"]);
        let mut table = Table::new(&header);
        for row in &report.rows {
            let mut cells = vec![if row.key.is_empty() {
                "(none)".to_owned()
            } else {
                row.key.clone()
            }];
            if typed {
                cells.push(render::opt(row.type_name.as_deref()));
            }
            let mark = if row.open > 0 { "*" } else { "" };
            cells.extend([
                format!("{:.3}{mark}", row.vgpu_seconds),
                format!("{}{mark}", row.framebuffer_byte_seconds),
                row.intervals.to_string(),
                row.estimated.to_string(),
            ]);
            table.row(cells);
        }
        writeln!(out, "From {} to {}", report.since, report.until)?;
        if table.is_empty() {
            return writeln!(out, "No vGPU was held.");
        }
        table.write(out)?;
        if report.rows.iter().any(|r| r.open > 0) {
            writeln!(
                out,
                "\n* still held: a running domain's interval is open, so this grows until it stops."
            )?;
        }
        Ok(())
    }
}

/// `vgpuctl usage`: the window is `since` (default: the first instant of this month, UTC)
/// to `until` (default: now), both in milliseconds since the epoch.
pub(crate) fn run(
    ctx: &Context<'_>,
    since: Option<i64>,
    until: Option<i64>,
    by: By,
    csv: bool,
    out: &mut dyn Write,
) -> Result<u8> {
    let now = crate::args::now_ms();
    let query = Query {
        since_ms: since.unwrap_or_else(|| month_bounds(now).1),
        until_ms: until.unwrap_or(now),
        by,
    };
    let held = ctx.manager().usage(query.since_ms, query.until_ms)?;
    let report = report(&query, &held.raw, &held.months, held.raw_from_ms, &held.now)?;
    if csv {
        let mut text = String::new();
        write_csv(&report, &mut text)?;
        out.write_all(text.as_bytes())?;
    } else {
        render::emit(&Shown(&report), ctx.format(), out)?;
    }
    Ok(EXIT_OK)
}
