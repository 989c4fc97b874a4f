//! The Prometheus text exposition of one [`Snapshot`]: each family with its help, type and
//! samples, labels escaped as the format says.

use super::{AlertFacts, Snapshot};

/// A label value as the exposition format escapes it.
pub(super) fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One metric family being written.
pub(super) struct Family<'a> {
    name: &'static str,
    help: &'static str,
    /// `gauge` or `counter`.
    kind: &'static str,
    samples: Vec<(Vec<(&'static str, &'a str)>, String)>,
}

impl<'a> Family<'a> {
    pub(super) fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            kind: "gauge",
            samples: Vec::new(),
        }
    }

    /// A family of counters: values that never go down.
    pub(super) fn counter(name: &'static str, help: &'static str) -> Self {
        Family {
            kind: "counter",
            ..Family::new(name, help)
        }
    }

    pub(super) fn sample(&mut self, labels: Vec<(&'static str, &'a str)>, value: impl ToString) {
        self.samples.push((labels, value.to_string()));
    }

    /// Writes the family, or nothing when it has no sample.
    pub(super) fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        // HELP text escapes `\` and line feeds; ours has neither.
        out.push_str(&format!("# HELP {} {}\n", self.name, self.help));
        out.push_str(&format!("# TYPE {} {}\n", self.name, self.kind));
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                    .collect();
                out.push_str(&format!("{{{}}}", pairs.join(",")));
            }
            out.push_str(&format!(" {value}\n"));
        }
    }
}

/// The exposition of `snapshot`. Unknown label values (no domain, no tenant, no type name)
/// are empty, which Prometheus reads as the label being absent.
pub(crate) fn exposition(snapshot: &Snapshot) -> String {
    let t = &snapshot.telemetry;
    let mut nvml_up = Family::new(
        "vgpu_nvml_up",
        "Whether NVML was loaded (1) or not (0); without it only frame buffer allotted is known.",
    );
    nvml_up.sample(Vec::new(), u8::from(snapshot.nvml.loaded));
    let mut libvirt_up = Family::new(
        "vgpu_libvirt_up",
        "Whether libvirt answered (1) or not (0); without it vGPUs are named by the hook's records.",
    );
    if snapshot.libvirt.present {
        libvirt_up.sample(Vec::new(), u8::from(snapshot.libvirt.up));
    }

    let mut gpu_vgpus = Family::new("vgpu_gpu_vgpus", "vGPUs in use on a physical GPU.");
    let gpu_names: Vec<(String, String, String)> = t
        .gpus
        .iter()
        .map(|g| {
            (
                g.gpu.to_string(),
                g.model.clone().unwrap_or_default(),
                g.backend.to_string(),
            )
        })
        .collect();
    for (g, (address, model, backend)) in t.gpus.iter().zip(&gpu_names) {
        gpu_vgpus.sample(
            vec![("gpu", address), ("model", model), ("backend", backend)],
            g.vgpus,
        );
    }

    let mut scheduler = Family::new(
        "vgpu_gpu_scheduler_info",
        "The vGPU scheduler policy of an NVIDIA GPU, as NVML reads it; absent when not read.",
    );
    for (gpu, policy) in &snapshot.schedulers {
        scheduler.sample(vec![("gpu", gpu.as_str()), ("policy", policy.name())], 1);
    }

    let mut allotted = Family::new(
        "vgpu_framebuffer_bytes",
        "Frame buffer allotted to a vGPU: its type's, or a plain VF's local-memory quota.",
    );
    let mut used = Family::new(
        "vgpu_framebuffer_used_bytes",
        "Frame buffer a vGPU's guest has in use (NVML).",
    );
    let mut sessions = Family::new(
        "vgpu_encoder_sessions",
        "Active video encoder sessions of a vGPU (NVML).",
    );
    let mut utilization = Family::new(
        "vgpu_utilization_ratio",
        "Share of the last sample period an engine of the physical GPU was busy with a vGPU's work (NVML); on time-sliced vGPUs a share of one GPU's time, not of capacity.",
    );
    let vgpu_labels: Vec<[String; 6]> = t
        .vgpus
        .iter()
        .map(|v| {
            [
                v.gpu.to_string(),
                v.id.to_string(),
                v.type_id.clone(),
                v.type_name.clone().unwrap_or_default(),
                v.domain.clone().unwrap_or_default(),
                v.tenant.clone().unwrap_or_default(),
            ]
        })
        .collect();
    for (v, names) in t.vgpus.iter().zip(&vgpu_labels) {
        let labels = || {
            vec![
                ("gpu", names[0].as_str()),
                ("vgpu", names[1].as_str()),
                ("type", names[2].as_str()),
                ("type_name", names[3].as_str()),
                ("domain", names[4].as_str()),
                ("tenant", names[5].as_str()),
            ]
        };
        if let Some(bytes) = v.framebuffer_bytes {
            allotted.sample(labels(), bytes);
        }
        if let Some(bytes) = v.framebuffer_used_bytes {
            used.sample(labels(), bytes);
        }
        if let Some(n) = v.encoder_sessions {
            sessions.sample(labels(), n);
        }
        for (engine, ratio) in v.utilization.engines() {
            if let Some(ratio) = ratio {
                let mut with_engine = labels();
                with_engine.push(("engine", engine));
                utilization.sample(with_engine, ratio);
            }
        }
    }

    let mut tenant_vgpus = Family::new(
        "vgpu_tenant_vgpus_held",
        "vGPUs a tenant's domains hold, running or shut off (tenant=\"\": vGPUs no tenant is \
         named for); vgpu_tenant_vgpu_seconds_total counts only running time.",
    );
    let mut tenant_allotted = Family::new(
        "vgpu_tenant_framebuffer_bytes",
        "Frame buffer allotted to a tenant's vGPUs; left out unless known for every one.",
    );
    let mut tenant_used = Family::new(
        "vgpu_tenant_framebuffer_used_bytes",
        "Frame buffer in use by a tenant's vGPUs (NVML); left out unless known for every one.",
    );
    let mut tenant_sessions = Family::new(
        "vgpu_tenant_encoder_sessions",
        "Encoder sessions of a tenant's vGPUs (NVML); left out unless known for every one.",
    );
    for sum in &t.tenants {
        let labels = || vec![("tenant", sum.tenant.as_deref().unwrap_or_default())];
        tenant_vgpus.sample(labels(), sum.vgpus);
        if let Some(bytes) = sum.framebuffer_bytes {
            tenant_allotted.sample(labels(), bytes);
        }
        if let Some(bytes) = sum.framebuffer_used_bytes {
            tenant_used.sample(labels(), bytes);
        }
        if let Some(n) = sum.encoder_sessions {
            tenant_sessions.sample(labels(), n);
        }
    }

    let mut tenant_seconds = Family::counter(
        "vgpu_tenant_vgpu_seconds_total",
        "vGPU-seconds a tenant's domains held since the usage ledger began (allocation time, not GPU work).",
    );
    let mut tenant_byte_seconds = Family::counter(
        "vgpu_tenant_framebuffer_byte_seconds_total",
        "Frame-buffer byte-seconds a tenant's domains held since the usage ledger began.",
    );
    let mut skipped = Family::counter(
        "vgpu_usage_ledger_records_skipped_total",
        "Usage ledger records skipped as cut off or damaged.",
    );
    if let Some(totals) = &snapshot.usage {
        for counter in &totals.tenants {
            let labels = || vec![("tenant", counter.tenant.as_str())];
            tenant_seconds.sample(labels(), counter.vgpu_seconds);
            tenant_byte_seconds.sample(labels(), counter.framebuffer_byte_seconds);
        }
        skipped.sample(Vec::new(), totals.skipped);
    }

    let alerts = alert_families(snapshot.alerts.as_ref());
    let mut out = String::new();
    for family in [
        &nvml_up,
        &libvirt_up,
        &gpu_vgpus,
        &scheduler,
        &allotted,
        &used,
        &sessions,
        &utilization,
        &tenant_vgpus,
        &tenant_allotted,
        &tenant_used,
        &tenant_sessions,
        &tenant_seconds,
        &tenant_byte_seconds,
        &skipped,
    ]
    .into_iter()
    .chain(&alerts)
    {
        family.write(&mut out);
    }
    out
}

/// The families of `facts` (none when not sampled): what the alerting rules of
/// `contrib/prometheus/vgpu.rules.yml` watch that telemetry does not say.
fn alert_families(facts: Option<&AlertFacts>) -> Vec<Family<'_>> {
    let Some(facts) = facts else {
        return Vec::new();
    };
    let mut violations = Family::new(
        "vgpu_tenant_policy_violations",
        "Rules of the tenant policy a tenant breaks now, as vgpuctl tenants lists them.",
    );
    for ((tenant, rule), n) in facts.violations.iter().flatten() {
        violations.sample(vec![("tenant", tenant.as_str()), ("rule", rule)], n);
    }
    let mut available = Family::new(
        "vgpu_gpu_type_available",
        "vGPUs of a type a GPU can still make now, as vgpuctl types says.",
    );
    for room in &facts.available {
        available.sample(
            vec![
                ("gpu", room.gpu.as_str()),
                ("type", room.type_id.as_str()),
                ("type_name", room.type_name.as_str()),
            ],
            room.available,
        );
    }
    let mut unrealised = Family::new(
        "vgpu_definitions_unrealised",
        "Definitions of a GPU that start at boot and are not in effect (vgpuctl list --defined).",
    );
    for (gpu, n) in &facts.unrealised {
        unrealised.sample(vec![("gpu", gpu.as_str())], n);
    }
    let mut last_run = Family::new(
        "vgpu_restore_last_run_timestamp_seconds",
        "When the last vgpuctl restore of the whole host ended, in seconds since the Unix epoch.",
    );
    let mut last_success = Family::new(
        "vgpu_restore_last_success",
        "Whether the last vgpuctl restore of the whole host succeeded (1) or not (0).",
    );
    let mut this_boot = Family::new(
        "vgpu_restore_this_boot",
        "Whether vgpuctl restore of the whole host ran since the host booted (1) or not (0).",
    );
    if let Some(run) = &facts.restore {
        // An f64 holds every count of milliseconds until the year 287,000.
        #[allow(clippy::cast_precision_loss)]
        last_run.sample(Vec::new(), run.finished.wall_ms as f64 / 1000.0);
        last_success.sample(Vec::new(), u8::from(run.success()));
    }
    if let Some(boot) = &facts.boot {
        let ran = facts
            .restore
            .as_ref()
            .is_some_and(|r| &r.finished.boot == boot);
        this_boot.sample(Vec::new(), u8::from(ran));
    }
    vec![
        violations,
        available,
        unrealised,
        last_run,
        last_success,
        this_boot,
    ]
}
