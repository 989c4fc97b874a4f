//! `vgpuctl metrics`: per-vGPU and per-tenant telemetry in Prometheus's text exposition
//! format, once to stdout or served at `/metrics`; and the sampling `top` shares.
//!
//! A sample is discovery (with NVML filling in types), NVML's usage of the running vGPUs, and
//! libvirt's ownership (`vgpu_domain::Owners`, with each domain's tenant, from
//! [`crate::libvirt_facts`]); when libvirt does not answer, or the host has none, vGPUs are
//! named by the hook's records (`Manager::holders`, what `vgpuctl tenants` counts), and
//! `vgpu_libvirt_up` is 0, or left out on a host without libvirt.
//!
//! The format is Prometheus's text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>): one `# HELP` and one
//! `# TYPE` line per metric family, then its samples; label values escape `\`, `"` and line
//! feeds; a family with no sample is left out rather than reported as zero.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;

use vgpu_core::model::nvml::{Fact, SchedulerPolicy};
use vgpu_core::{
    HostPaths,
    manager::read_policy,
    model::{Inventory, VgpuHandle, nvml::NvmlStatus, pci::PciAddress, policy::Holding},
    nvml::Nvml,
    plan::capacity::HostState,
    state::usage::{Clock as _, HostClock},
    state::{RestoreRun, read_restore_run},
};
use vgpu_domain::Owners;
use vgpu_report::telemetry::{Holder, Telemetry};
use vgpu_report::usage::{TenantCounter, counters};

use crate::context::Context;
use crate::libvirt_facts::{Facts, LibvirtFacts};
use crate::render;

/// How long a stopping server waits for the scrapes in flight.
mod exposition;

pub(crate) use exposition::exposition;

const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The content type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether libvirt answered, for a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LibvirtStatus {
    /// The connection URI.
    pub(crate) uri: String,
    /// Whether it answered.
    pub(crate) up: bool,
    /// Why not, when it did not.
    pub(crate) reason: Option<String>,
    /// Whether the host has libvirt at all; `vgpu_libvirt_up` is left out when not.
    #[serde(skip)]
    pub(crate) present: bool,
}

/// One sample of the host: `metrics --json` and `top --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Snapshot {
    /// GPUs, vGPUs and tenants.
    #[serde(flatten)]
    pub(crate) telemetry: Telemetry,
    /// Whether NVML was loaded.
    pub(crate) nvml: NvmlStatus,
    /// Whether libvirt answered.
    pub(crate) libvirt: LibvirtStatus,
    /// The usage ledger's totals, for the counters of `metrics`; `None` when not asked for
    /// or not readable (then the counters are left out, never reported as 0).
    #[serde(skip)]
    pub(crate) usage: Option<UsageTotals>,
    /// What the alerting rules need beyond telemetry; `None` when not asked for.
    #[serde(skip)]
    pub(crate) alerts: Option<AlertFacts>,
    /// The vGPU scheduler policy of each NVIDIA GPU whose scheduler NVML read, by address.
    #[serde(skip)]
    pub(crate) schedulers: BTreeMap<String, SchedulerPolicy>,
}

/// The host's states an operator is alerted to, for the gauges of `metrics` that only it
/// reports. Each comes from the function the command showing it uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct AlertFacts {
    /// Rules of the tenant policy broken now, per (tenant, rule): `vgpuctl tenants`'s
    /// violations. `None` when the policy or the holdings could not be read.
    pub(crate) violations: Option<BTreeMap<(String, &'static str), u64>>,
    /// Per GPU and type, how many more can be made now: `vgpuctl types`'s `available`.
    pub(crate) available: Vec<TypeRoom>,
    /// Per GPU, definitions that start at boot and are not in effect: `list --defined`.
    pub(crate) unrealised: BTreeMap<String, u64>,
    /// The last whole-host `restore`, when one is recorded and readable.
    pub(crate) restore: Option<RestoreRun>,
    /// The boot the host runs now, when its boot id is readable.
    pub(crate) boot: Option<String>,
}

/// What one type of one GPU can still take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TypeRoom {
    /// The physical GPU.
    pub(crate) gpu: String,
    /// The type's id.
    pub(crate) type_id: String,
    /// The type's name, as every command shows it (`""` when unknown).
    pub(crate) type_name: String,
    /// How many more can be made now.
    pub(crate) available: u32,
}

/// Each tenant's usage since the usage ledger began.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UsageTotals {
    /// Per tenant.
    pub(crate) tenants: Vec<TenantCounter>,
    /// Damaged records skipped.
    pub(crate) skipped: u64,
}

/// Takes samples of one host: NVML is the command's (loaded once), libvirt asked at every
/// sample.
pub(crate) struct Sampler {
    paths: HostPaths,
    uri: String,
    nvml: Arc<Nvml>,
    manager: vgpu_core::Manager,
    facts: Box<dyn Facts>,
    /// Whether each sample reads the usage ledger.
    usage: bool,
    /// Whether each sample reads what the alerting rules need ([`AlertFacts`]).
    alerts: bool,
}

impl Sampler {
    pub(crate) fn new(ctx: &Context<'_>) -> Self {
        Sampler {
            paths: ctx.paths().clone(),
            uri: ctx.cli().uri().to_owned(),
            nvml: Arc::clone(ctx.shared_nvml()),
            manager: ctx.manager(),
            facts: ctx.facts(),
            usage: false,
            alerts: false,
        }
    }

    /// The same, reading the usage ledger at each sample: a scrape also tells the ledger the
    /// host runs now.
    pub(crate) fn with_usage(mut self) -> Self {
        self.usage = true;
        self
    }

    /// The same, reading at each sample what the alerting rules need ([`AlertFacts`]).
    pub(crate) fn with_alerts(mut self) -> Self {
        self.alerts = true;
        self
    }

    /// The NVML the sampler loaded.
    pub(crate) fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    /// The host now, and who holds each vGPU where libvirt answers.
    pub(crate) fn holdings(
        &mut self,
    ) -> Result<(Inventory, BTreeMap<VgpuHandle, Holder>, LibvirtStatus)> {
        let (state, owners, libvirt) = self.state_and_owners()?;
        Ok((state.inventory, owners, libvirt))
    }

    /// The host as capacity sees it, and who holds each vGPU where libvirt answers.
    fn state_and_owners(
        &mut self,
    ) -> Result<(HostState, BTreeMap<VgpuHandle, Holder>, LibvirtStatus)> {
        let state = self
            .manager
            .capacity_state(&self.nvml)
            .with_context(|| format!("cannot read the host at {}", self.paths.root().display()))?;
        let (owners, libvirt) = self.owners(&state.inventory);
        Ok((state, owners, libvirt))
    }

    /// Reads the host now. A vGPU libvirt names no holder of is named by the hook's record
    /// of it, as `vgpuctl tenants` names it.
    pub(crate) fn sample(&mut self) -> Result<Snapshot> {
        let (state, mut owners, libvirt) = self.state_and_owners()?;
        let holders = self.manager.held().map_err(|err| {
            tracing::warn!("the hook's records not read: {}", err.chain());
        });
        if let Ok(holders) = &holders {
            for holder in holders {
                owners
                    .entry(holder.id)
                    .or_insert_with(|| holder.holding.holder.clone());
            }
        }
        let alerts = self.alerts.then(|| {
            let holdings = holders
                .ok()
                .map(|h| h.into_iter().map(|h| h.holding).collect());
            self.alert_facts(&state, holdings)
        });
        let schedulers = state
            .schedulers
            .iter()
            .filter_map(|(gpu, fact)| match fact {
                Fact::Value(read) => Some((gpu.to_string(), read.policy?)),
                Fact::Unavailable(_) => None,
            })
            .collect();
        let inventory = state.inventory;
        let usage = vgpu_report::telemetry::usage_from_nvml(&self.nvml.read(), &inventory, &owners);
        let totals = match self.usage {
            true => match self.manager.usage(i64::MIN, i64::MAX) {
                Ok(held) => Some(UsageTotals {
                    tenants: counters(&held.raw, &held.months, &held.now),
                    skipped: held.skipped,
                }),
                Err(err) => {
                    tracing::warn!("usage ledger not read: {}", err.chain());
                    None
                }
            },
            false => None,
        };
        Ok(Snapshot {
            telemetry: vgpu_report::telemetry::telemetry(&inventory, &usage, &owners),
            nvml: self.nvml.status().clone(),
            libvirt,
            usage: totals,
            alerts,
            schedulers,
        })
    }

    /// What the alerting rules need of the host at `state`, with the hook's `holdings`
    /// (`None`: not readable).
    fn alert_facts(&self, state: &HostState, holdings: Option<Vec<Holding>>) -> AlertFacts {
        let violations = holdings.and_then(|holdings| match read_policy(&self.paths) {
            Ok(policy) => {
                let report = vgpu_report::tenants::report(
                    &policy.unwrap_or_default(),
                    None,
                    &holdings,
                    state,
                );
                let mut counts = BTreeMap::new();
                for v in &report.violations {
                    *counts.entry((v.tenant().to_owned(), v.rule())).or_insert(0) += 1;
                }
                Some(counts)
            }
            Err(err) => {
                tracing::warn!("the tenant policy not read: {}", err.chain());
                None
            }
        });
        let inventory = &state.inventory;
        let available = inventory
            .gpus
            .iter()
            .flat_map(|g| {
                g.types.iter().map(|t| TypeRoom {
                    gpu: g.address.to_string(),
                    type_id: t.id.clone(),
                    type_name: inventory
                        .type_name(g.address, &t.id)
                        .unwrap_or_default()
                        .to_owned(),
                    available: t.available,
                })
            })
            .collect();
        let mut unrealised: BTreeMap<String, u64> = inventory
            .gpus
            .iter()
            .map(|g| (g.address.to_string(), 0))
            .collect();
        for d in crate::list::definitions(state) {
            if !d.active && d.start.as_deref() != Some("manual") {
                *unrealised
                    .entry(physical_gpu(inventory, &d.on))
                    .or_insert(0) += 1;
            }
        }
        let restore = read_restore_run(&self.paths)
            .map_err(|err| tracing::warn!("the last restore not read: {}", err.chain()))
            .ok()
            .flatten();
        let boot = HostClock::new(&self.paths)
            .now()
            .map_err(|err| tracing::warn!("the boot id not read: {}", err.chain()))
            .ok()
            .map(|now| now.boot);
        AlertFacts {
            violations,
            available,
            unrealised,
            restore,
            boot,
        }
    }

    /// Who holds each vGPU, when libvirt answers. A host without libvirt is reported as
    /// libvirt down, with no domain holding anything.
    fn owners(&mut self, inventory: &Inventory) -> (BTreeMap<VgpuHandle, Holder>, LibvirtStatus) {
        let down = |uri: &str, reason: String, present: bool| {
            tracing::debug!(
                uri,
                "libvirt does not answer, vGPUs have no domain: {reason}"
            );
            LibvirtStatus {
                uri: uri.to_owned(),
                up: false,
                reason: Some(reason),
                present,
            }
        };
        match self.facts.owners(inventory) {
            LibvirtFacts::Answered(owners) => {
                let status = LibvirtStatus {
                    uri: self.uri.clone(),
                    up: true,
                    reason: None,
                    present: true,
                };
                (owner_map(&owners), status)
            }
            LibvirtFacts::Absent => (
                BTreeMap::new(),
                down(&self.uri, "this host has no libvirt".to_owned(), false),
            ),
            LibvirtFacts::Unanswered { uri, reason } => (BTreeMap::new(), down(&uri, reason, true)),
        }
    }
}

/// Each vGPU's owner: the domain running it, else the first (by name) whose configuration
/// names it.
fn owner_map(owners: &Owners) -> BTreeMap<VgpuHandle, Holder> {
    owners
        .vgpus
        .iter()
        .filter_map(|owned| {
            let holder = owned
                .holders
                .iter()
                .find(|h| h.running && h.live)
                .or_else(|| owned.holders.first())?;
            Some((owned.id, holder.holder.clone()))
        })
        .collect()
}

/// The physical GPU of the device at `address`: itself, or the GPU whose VF it is; the
/// address as given when the host has no such device now (a VF not enabled yet).
fn physical_gpu(inventory: &Inventory, address: &str) -> String {
    inventory
        .gpus
        .iter()
        .find(|g| {
            let same = |a: &PciAddress| a.to_string() == address;
            same(&g.address) || g.vfs.iter().any(|v| same(&v.address))
        })
        .map_or_else(|| address.to_owned(), |g| g.address.to_string())
}

/// `vgpuctl metrics [--listen ADDR]`.
pub(crate) fn run(
    ctx: &Context<'_>,
    listen: Option<SocketAddr>,
    out: &mut dyn Write,
) -> Result<u8> {
    let mut sampler = Sampler::new(ctx).with_usage().with_alerts();
    let Some(addr) = listen else {
        let snapshot = sampler.sample()?;
        if ctx.cli().json {
            render::json(out, &snapshot)?;
        } else {
            out.write_all(exposition(&snapshot).as_bytes())?;
        }
        return Ok(crate::EXIT_OK);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime of the metrics server")?;
    runtime.block_on(serve(addr, Arc::new(Mutex::new(sampler))))?;
    Ok(crate::EXIT_OK)
}

/// Serves `GET /metrics` on `addr` until SIGINT or SIGTERM, then lets the scrapes in flight
/// finish (for up to [`SHUTDOWN_GRACE`]).
async fn serve(addr: SocketAddr, sampler: Arc<Mutex<Sampler>>) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {addr}"))?;
    // The bound address (the port, when 0 was asked) is how a caller finds the server.
    writeln!(
        std::io::stderr(),
        "vgpuctl: serving metrics at http://{bound}/metrics"
    )?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!("cannot accept a connection on {bound}: {err}");
                        continue;
                    }
                };
                let sampler = Arc::clone(&sampler);
                let service = hyper::service::service_fn(move |req| respond(req, Arc::clone(&sampler)));
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let watched = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(err) = watched.await {
                        tracing::debug!(%peer, "connection ended: {err}");
                    }
                });
            }
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    drop(listener);
    tracing::info!("stopping: waiting for the scrapes in flight");
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!("scrapes still in flight after {SHUTDOWN_GRACE:?}; stopping anyway");
        }
    }
    Ok(())
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(CONTENT_TYPE),
    );
    response
}

async fn respond(
    req: Request<Incoming>,
    sampler: Arc<Mutex<Sampler>>,
) -> std::result::Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() != "/metrics" {
        return Ok(text(
            StatusCode::NOT_FOUND,
            "not found: metrics are served at /metrics\n".to_owned(),
        ));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "/metrics takes GET\n".to_owned(),
        );
        response.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return Ok(response);
    }
    // Discovery and libvirt block: off the event loop, one sample at a time.
    let sampled = tokio::task::spawn_blocking(move || {
        let mut sampler = sampler.lock().unwrap_or_else(PoisonError::into_inner);
        sampler.sample().map(|s| exposition(&s))
    })
    .await;
    Ok(match sampled {
        Ok(Ok(body)) => text(StatusCode::OK, body),
        Ok(Err(err)) => {
            tracing::error!("a scrape failed: {err:#}");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err:#}\n"))
        }
        Err(err) => {
            tracing::error!("a scrape did not finish: {err}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the sample did not finish\n".to_owned(),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::exposition::{Family, escape_label};

    #[test]
    fn escape_label_escapes_backslash_quote_and_line_feed() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    #[test]
    fn family_without_samples_writes_nothing() {
        let mut out = String::new();
        Family::new("vgpu_x", "x").write(&mut out);
        assert_eq!(out, "");
    }

    #[test]
    fn family_writes_help_type_and_samples() {
        let mut out = String::new();
        let mut family = Family::new("vgpu_x", "An x.");
        family.sample(vec![("tenant", "a\"b")], 3);
        family.write(&mut out);
        assert_eq!(
            out,
            "# HELP vgpu_x An x.\n# TYPE vgpu_x gauge\nvgpu_x{tenant=\"a\\\"b\"} 3\n"
        );
    }
}
