//! `plan`, `apply`, `assert` and `place`: a host brought to a desired-state file, and new vGPUs
//! placed for an orchestrator. The planner and placement are the core's; this module reads the
//! file, adds what libvirt knows (which domain holds which vGPU), shows progress and renders.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc;

use anyhow::{Context as _, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;

use vgpu_core::{
    Manager,
    manager::{ApplyEvent, ApplyOutcome, ApplyReport, DomainReferences},
    model::{VgpuHandle, pci::PciAddress},
    plan::{
        capacity::{Hold, HostState},
        place::{Pick, PlaceRequest, PlaceWant, Policy},
        steps::{GpuPlan, Plan, Step},
    },
    state::Start,
};

mod words;

use words::{grouped, step_text, type_text, words};

use crate::context::Context;
use crate::libvirt_facts::{Facts, LibvirtFacts, domain_references};
use crate::render::{self, Format, Report, Table, opt, size_text};
use crate::{EXIT_CHANGES_PENDING, EXIT_ERROR, EXIT_OK, PlanCommand};

/// Runs `plan`, `apply`, `assert` or `place`; returns the exit code.
pub(crate) fn run(ctx: &Context<'_>, command: &PlanCommand, out: &mut dyn Write) -> Result<u8> {
    let manager = ctx.manager();
    let facts = &mut *ctx.facts();
    let format = ctx.format();
    match command {
        PlanCommand::Plan { file, config } => {
            let (plan, _) = plan_file(ctx, &manager, file, config.as_deref(), facts)?;
            render::emit(&PlanReport(&plan), format, out)?;
            Ok(plan_exit(&plan))
        }
        PlanCommand::Apply {
            file,
            config,
            dry_run,
        } => {
            let (plan, references) = plan_file(ctx, &manager, file, config.as_deref(), facts)?;
            // Its destroy steps take devices away: the removal policy decides.
            let manager = manager.with_domain_references(references);
            if *dry_run {
                render::emit(&PlanReport(&plan), format, out)?;
                return Ok(plan_exit(&plan));
            }
            // People see what is refused before the rest is applied; JSON has it in the report.
            if plan.blocked() && format == Format::Table {
                render::emit(&PlanReport(&plan), format, out)?;
            }
            let report = apply(format, &manager, &plan, out)?;
            Ok(if report.succeeded() {
                EXIT_OK
            } else {
                EXIT_ERROR
            })
        }
        PlanCommand::Assert { file, config } => {
            let (plan, _) = plan_file(ctx, &manager, file, config.as_deref(), facts)?;
            let differences = differences(&plan);
            let report = AssertReport {
                config: &plan.config,
                matches: differences.is_empty(),
                differences: &differences,
            };
            render::emit(&report, format, out)?;
            Ok(if differences.is_empty() {
                EXIT_OK
            } else {
                EXIT_ERROR
            })
        }
        PlanCommand::Place {
            count,
            framebuffer,
            type_name,
            numa,
            policy,
            series,
            round_up,
            apply: create,
            tenant,
        } => {
            if *count == 0 {
                anyhow::bail!(vgpu_core::Error::BadName {
                    value: "0".to_owned(),
                    expected: "a --count of at least 1",
                });
            }
            if framebuffer.is_some()
                && !matches!(series.to_ascii_uppercase(), 'A' | 'B' | 'C' | 'Q')
            {
                anyhow::bail!(vgpu_core::Error::BadName {
                    value: series.to_string(),
                    expected: "an NVIDIA series: A, B, C or Q",
                });
            }
            let want = match (framebuffer, type_name) {
                (Some(size), None) => PlaceWant::Framebuffer {
                    mib: vgpu_core::plan::desired::parse_framebuffer(size)?,
                    series: series.to_ascii_uppercase(),
                    round_up: *round_up,
                },
                (None, Some(name)) => PlaceWant::Type(name.clone()),
                _ => anyhow::bail!(crate::Refusal::bad_input(
                    "place takes one of --framebuffer SIZE and --type TYPE"
                )),
            };
            let request = PlaceRequest {
                count: *count,
                want,
                numa_node: *numa,
            };
            let policy = Policy::from(*policy);
            let (state, references) = host_state(ctx, &manager, facts)?;
            let manager = manager.with_domain_references(references);
            let picks = match tenant {
                None => vgpu_core::plan::place::place(&state, &request, policy),
                Some(tenant) => vgpu_core::plan::place::place_for_tenant(
                    &state,
                    &request,
                    policy,
                    &manager.tenancy(tenant)?,
                ),
            }
            .with_context(|| format!("cannot place {count} vGPU(s)"))?;
            if !*create {
                render::emit(&PlaceReport { picks: &picks }, format, out)?;
                return Ok(EXIT_OK);
            }
            let plan = vgpu_core::plan::place::plan_picks(&state, &picks, Start::Auto);
            let report = apply(format, &manager, &plan, out)?;
            Ok(if report.succeeded() {
                EXIT_OK
            } else {
                EXIT_ERROR
            })
        }
    }
}

/// What the planner needs: the host, NVML's names, and which libvirt domains hold which vGPU
/// (when libvirt answers; without it, only processes holding VFIO devices open protect them,
/// and a libvirt that does not answer is warned about once).
fn host_state(
    ctx: &Context<'_>,
    manager: &Manager,
    facts: &mut dyn Facts,
) -> Result<(HostState, DomainReferences)> {
    let mut state = manager
        .host_state()
        .with_context(|| format!("cannot read the host at {}", ctx.cli().root.display()))?;
    vgpu_core::nvml::add_nvml_facts(&mut state, ctx.paths(), ctx.nvml());
    let facts = facts.owners(&state.inventory);
    match &facts {
        LibvirtFacts::Absent => {}
        LibvirtFacts::Answered(owners) => {
            for owned in &owners.vgpus {
                if let Some(holder) = owned.holders.first() {
                    let state_word = if holder.running {
                        "running"
                    } else {
                        "shut off"
                    };
                    state.holds.entry(owned.id).or_insert_with(|| Hold {
                        by: format!("libvirt domain {} ({state_word})", holder.holder.domain),
                        frees: frees(&holder.holder.domain, owned.id, holder.config),
                    });
                }
            }
            for reference in &owners.missing {
                state.holds.entry(reference.device).or_insert_with(|| Hold {
                    by: format!("libvirt domain {}", reference.domain),
                    frees: frees(&reference.domain, reference.device, reference.config),
                });
            }
        }
        LibvirtFacts::Unanswered { uri, reason } => {
            tracing::warn!(
                "libvirt at {uri} did not answer, so vGPUs its domains hold are not known: {reason}"
            );
        }
    }
    Ok((state, domain_references(&facts)))
}

/// What frees `id` from libvirt domain `domain`: the exact `detach`, and whether stopping the
/// domain would do (not when its configuration names the device).
fn frees(domain: &str, id: VgpuHandle, config: bool) -> String {
    let detach = format!("`vgpuctl detach {domain} {id}` frees it");
    match config {
        true => format!("{detach}; stopping the domain does not, its configuration names it"),
        false => format!("{detach}, as stopping the domain does"),
    }
}

fn plan_file(
    ctx: &Context<'_>,
    manager: &Manager,
    file: &Path,
    config: Option<&str>,
    facts: &mut dyn Facts,
) -> Result<(Plan, DomainReferences)> {
    let desired = vgpu_core::state::read_desired(file)?;
    let config = desired.config(config)?;
    let (state, references) = host_state(ctx, manager, facts)?;
    let plan = vgpu_core::plan::planner::plan(&state, config);
    // `plan`, `assert` and `apply --dry-run` refuse what `apply` would: one verdict.
    manager.plan_policy(&plan)?;
    Ok((plan, references))
}

/// Carries `plan` out, showing progress: bars on a terminal, a line per step otherwise, nothing
/// with `--json` (which gets the report). The apply runs on a thread of its own (its GPUs on
/// theirs) and sends each event over a channel; this thread shows them as they come, and the
/// channel ends when the apply has returned. A signal stops the apply between steps
/// ([`vgpu_core::manager::request_stop`]), whose events are still shown.
fn apply(
    format: Format,
    manager: &Manager,
    plan: &Plan,
    out: &mut dyn Write,
) -> Result<ApplyReport> {
    let table = format == Format::Table;
    let terminal = table && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
    let mut bars = Bars::new(terminal, plan);
    let (sender, events) = mpsc::channel::<ApplyEvent>();
    let (result, shown) = std::thread::scope(|scope| {
        let applying = std::thread::Builder::new()
            .name("vgpu-apply".to_owned())
            .spawn_scoped(scope, move || {
                // The receiver outlives the apply; a send to it cannot fail before it ends.
                let progress = move |event: &ApplyEvent| {
                    let _sent = sender.send(event.clone());
                };
                manager.apply(plan, Some(&progress))
            })
            .context("cannot start the thread that applies the plan")?;
        // A progress line that cannot be written stops the display, not the apply: it goes on
        // to its end (or to its undo), and the write error is the command's.
        let mut shown = Ok(());
        for event in &events {
            if shown.is_ok() {
                shown = bars.show(table, out, &event);
            }
        }
        let result = match applying.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        anyhow::Ok((result, shown))
    })?;
    let report = result.with_context(|| format!("cannot apply config {:?}", plan.config))?;
    shown?;
    bars.finish();
    let summary = Summary {
        report: &report,
        // Plain progress lines have said why each failed GPU failed.
        failures_shown: table && !terminal,
    };
    render::emit(&summary, format, out)?;
    Ok(report)
}

/// `apply`'s report: JSON as `ApplyReport`, and a summary for people.
struct Summary<'a> {
    report: &'a ApplyReport,
    /// Whether the progress lines said why each failed GPU failed.
    failures_shown: bool,
}

impl Serialize for Summary<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.report.serialize(serializer)
    }
}

impl Report for Summary<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        apply_summary(out, self.report, self.failures_shown)
    }
}

/// Progress: one bar per GPU on a terminal, else plain lines.
struct Bars {
    multi: Option<MultiProgress>,
    bars: BTreeMap<PciAddress, ProgressBar>,
}

impl Bars {
    fn new(terminal: bool, plan: &Plan) -> Self {
        let mut bars = BTreeMap::new();
        let multi = terminal.then(MultiProgress::new);
        if let Some(multi) = &multi {
            let style = ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            for gpu in plan
                .gpus
                .iter()
                .filter(|g| g.refusals.is_empty() && !g.steps.is_empty())
            {
                let bar = multi.add(ProgressBar::new(gpu.steps.len() as u64));
                bar.set_style(style.clone());
                bar.set_prefix(gpu.gpu.to_string());
                bars.insert(gpu.gpu, bar);
            }
        }
        Bars { multi, bars }
    }

    /// Shows `event`: on its GPU's bar, or as a line for people (`table`); nothing for JSON.
    fn show(&mut self, table: bool, out: &mut dyn Write, event: &ApplyEvent) -> Result<()> {
        if self.multi.is_some() {
            if let ApplyEvent::Stepped { gpu, step, .. } = event {
                if let Some(bar) = self.bars.get(gpu) {
                    bar.inc(1);
                    bar.set_message(step_text(step));
                }
            }
            if let ApplyEvent::Finished { gpu, error } = event {
                if let Some(bar) = self.bars.get(gpu) {
                    bar.finish_with_message(match error {
                        Some(_) => "failed, undone".to_owned(),
                        None => "done".to_owned(),
                    });
                }
            }
            return Ok(());
        }
        if !table {
            return Ok(());
        }
        match event {
            ApplyEvent::Started { .. } => {}
            ApplyEvent::Stepped {
                gpu, step, device, ..
            } => {
                // The device, unless the step already names it (a vGPU destroyed).
                let text = step_text(step);
                match text.contains(&device.to_string()) {
                    true => writeln!(out, "{gpu}: {text}")?,
                    false => writeln!(out, "{gpu}: {text} ({device})")?,
                }
            }
            ApplyEvent::Finished { gpu, error } => match error {
                Some(error) => writeln!(out, "{gpu}: failed, its steps were undone: {error}")?,
                None => writeln!(out, "{gpu}: done")?,
            },
        }
        // Progress is read as it happens, whatever buffers stdout.
        out.flush()?;
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(multi) = &self.multi {
            // The bars were drawn on stderr; the summary follows on stdout.
            let _cleared = multi.clear();
        }
    }
}

/// `apply`'s summary: the GPUs that failed or were skipped, then the counts.
impl Report for ApplyReport {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        apply_summary(out, self, false)
    }
}

/// The GPUs that failed (unless `failures_shown`) or were skipped, with why, then the counts.
fn apply_summary(
    out: &mut dyn Write,
    report: &ApplyReport,
    failures_shown: bool,
) -> std::io::Result<()> {
    let count = |o: ApplyOutcome| report.gpus.iter().filter(|g| g.outcome == o).count();
    for gpu in &report.gpus {
        if let Some(error) = &gpu.error {
            let what = match gpu.outcome {
                ApplyOutcome::Skipped => "skipped",
                _ if failures_shown => continue,
                _ => "failed",
            };
            writeln!(out, "{}: {what}: {error}", gpu.gpu)?;
        }
    }
    writeln!(
        out,
        "config {:?}: {} GPU(s) changed, {} unchanged, {} skipped, {} failed",
        report.config,
        count(ApplyOutcome::Applied),
        count(ApplyOutcome::Unchanged),
        count(ApplyOutcome::Skipped),
        count(ApplyOutcome::Failed)
    )?;
    Ok(())
}

/// The exit code of `plan` and of `apply --dry-run`: 1 when anything is refused, 4 when
/// changes are pending, 0 when the host matches.
fn plan_exit(plan: &Plan) -> u8 {
    if !refusals(plan).is_empty() {
        EXIT_ERROR
    } else if plan.changes() > 0 {
        EXIT_CHANGES_PENDING
    } else {
        EXIT_OK
    }
}

/// Every refusal of the plan, with its place in the file (`file:line:col: message`).
fn refusals(plan: &Plan) -> Vec<Difference<'_>> {
    let file = plan.file.display();
    let mut out: Vec<Difference<'_>> = plan
        .unmatched
        .iter()
        .filter(|u| u.blocking)
        .map(|u| Difference {
            gpu: u.selection.clone(),
            difference: format!("{file}:{}: matches no GPU on this host", u.at),
            unmatched: Some(u),
            ..Difference::default()
        })
        .collect();
    for gpu in &plan.gpus {
        for refused in &gpu.refusals {
            let text = match refused.at {
                Some(at) => format!("{file}:{at}: {}", refused.message),
                None => refused.message.clone(),
            };
            out.push(Difference {
                gpu: gpu.gpu.to_string(),
                difference: text,
                refused: Some(refused),
                ..Difference::default()
            });
        }
    }
    out
}

/// `plan` (and `apply --dry-run`): the plan, with its summary in JSON.
struct PlanReport<'a>(&'a Plan);

/// `plan --json`.
#[derive(Serialize)]
struct PlanJson<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    matches: bool,
    changes: usize,
    blocked: bool,
}

impl Serialize for PlanReport<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let plan = self.0;
        PlanJson {
            plan,
            matches: plan.matches(),
            changes: plan.changes(),
            blocked: plan.blocked(),
        }
        .serialize(serializer)
    }
}

impl Report for PlanReport<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        plan_text(out, self.0)
    }
}

/// The plan for people: per GPU what it wants, what is refused, kept and done.
fn plan_text(out: &mut dyn Write, plan: &Plan) -> std::io::Result<()> {
    writeln!(out, "config {:?} of {}", plan.config, plan.file.display())?;
    for gpu in &plan.gpus {
        gpu_plan(out, plan, gpu)?;
    }
    for unmatched in &plan.unmatched {
        writeln!(
            out,
            "{}:{}: {}{} matches no GPU{}",
            plan.file.display(),
            unmatched.at,
            if unmatched.blocking { "" } else { "warning: " },
            unmatched.selection,
            if unmatched.blocking {
                " (assert and apply fail; optional = true allows it)"
            } else {
                ""
            }
        )?;
    }
    let refused = refusals(plan).len();
    let changed = plan
        .gpus
        .iter()
        .filter(|g| g.refusals.is_empty() && !g.steps.is_empty())
        .count();
    if plan.matches() {
        writeln!(out, "the host matches: nothing to do")?;
    } else {
        writeln!(
            out,
            "{} change(s) pending on {changed} GPU(s){}",
            plan.changes(),
            if refused > 0 {
                format!("; {refused} refused")
            } else {
                String::new()
            }
        )?;
    }
    Ok(())
}

fn gpu_plan(out: &mut dyn Write, plan: &Plan, gpu: &GpuPlan) -> std::io::Result<()> {
    writeln!(
        out,
        "{}  {}  ({})",
        gpu.gpu,
        gpu.model.as_deref().unwrap_or("-"),
        gpu.selection
    )?;
    let wants: Vec<String> = gpu
        .want
        .iter()
        .map(|w| {
            let size = w
                .framebuffer_mib
                .map(|mib| format!(" ({})", size_text(mib)))
                .unwrap_or_default();
            match w.type_id.as_deref() {
                Some(vgpu_core::model::PLAIN_VF_TYPE) => format!("each on vfio-pci{size}"),
                _ => {
                    let name = type_text(w.type_id.as_deref(), w.type_name.as_deref());
                    format!("{} x {name}{size}", w.count)
                }
            }
        })
        .collect();
    let mixed = gpu.vf_memory_mib.windows(2).any(|w| w[0] != w[1]);
    let want = match (gpu.vfs, wants.is_empty()) {
        (Some(vfs), _) if mixed => {
            let sizes: Vec<String> = gpu.vf_memory_mib.iter().map(|m| size_text(*m)).collect();
            let on_vfio = gpu
                .want
                .iter()
                .any(|w| w.type_id.as_deref() == Some(vgpu_core::model::PLAIN_VF_TYPE));
            format!(
                "{vfs} VFs of {}{}",
                sizes.join(", "),
                if on_vfio { ", each on vfio-pci" } else { "" }
            )
        }
        (Some(vfs), true) => format!("{vfs} VFs"),
        (Some(vfs), false) => format!("{vfs} VFs, {}", wants.join(", ")),
        (None, true) => "no vGPUs".to_owned(),
        (None, false) => wants.join(", "),
    };
    if gpu.refusals.is_empty() || !gpu.want.is_empty() {
        writeln!(out, "  want     {want}")?;
    }
    for refused in &gpu.refusals {
        match refused.at {
            Some(at) => writeln!(
                out,
                "  refused  {}:{at}: {}",
                plan.file.display(),
                refused.message
            )?,
            None => writeln!(out, "  refused  {}", refused.message)?,
        }
    }
    if !gpu.keep.is_empty() {
        writeln!(out, "  keep     {} vGPU(s)", gpu.keep.len())?;
    }
    if gpu.refusals.is_empty() {
        for (step, times) in grouped(&gpu.steps) {
            let text = step_text(step);
            match times {
                1 => writeln!(out, "  {text}")?,
                n => writeln!(out, "  {text}  x{n}")?,
            }
        }
    }
    Ok(())
}

/// One way the host differs from the config: in words, and as the refusal, the selection
/// that matched nothing, or the step (with how many times) that would fix it.
#[derive(Debug, Default, Serialize)]
struct Difference<'a> {
    gpu: String,
    difference: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<&'a vgpu_core::plan::steps::Refused>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unmatched: Option<&'a vgpu_core::plan::steps::Unmatched>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<usize>,
}

/// `assert`: whether the host matches the config, and every difference.
#[derive(Serialize)]
struct AssertReport<'a> {
    config: &'a str,
    matches: bool,
    differences: &'a [Difference<'a>],
}

impl Report for AssertReport<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.differences.is_empty() {
            return writeln!(out, "the host matches config {:?}", self.config);
        }
        for d in self.differences {
            writeln!(out, "{}: {}", d.gpu, d.difference)?;
        }
        Ok(())
    }
}

/// Every difference between the host and the config.
fn differences(plan: &Plan) -> Vec<Difference<'_>> {
    let mut out = refusals(plan);
    for gpu in &plan.gpus {
        for (step, times) in grouped(&gpu.steps) {
            let difference = words(step, times).1;
            out.push(Difference {
                gpu: gpu.gpu.to_string(),
                difference,
                step: Some(step),
                count: Some(times),
                ..Difference::default()
            });
        }
    }
    out
}

/// `place` without `--apply`: the GPUs (and VFs) chosen.
#[derive(Serialize)]
struct PlaceReport<'a> {
    picks: &'a [Pick],
}

impl Report for PlaceReport<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut table = Table::new(&["GPU", "TYPE", "NAME", "FRAMEBUFFER", "VF"]);
        for pick in self.picks {
            table.row(vec![
                pick.gpu.to_string(),
                pick.type_id.clone(),
                opt(pick.type_name.as_deref()),
                opt(pick.framebuffer_mib.map(size_text)),
                opt(pick.vf),
            ]);
        }
        table.write(out)?;
        let mut noted = Vec::new();
        for pick in self.picks {
            if let Some(policy) = pick.needs_scheduler {
                if !noted.contains(&pick.gpu) {
                    noted.push(pick.gpu);
                    writeln!(
                        out,
                        "note: {} needs its vGPU scheduler set to {policy} first \
                         (`place --apply` sets it; so does `vgpuctl sched {} --policy {policy}`)",
                        pick.gpu, pick.gpu
                    )?;
                }
            }
        }
        Ok(())
    }
}
