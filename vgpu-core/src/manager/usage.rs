//! The usage ledger as the hook, `attach`, `detach`, `usage` and `metrics` use it: what a
//! domain's devices are, from the settled inventory, and each record in the ledger
//! (`state::usage`). The reports over what the ledger holds are `vgpu-report`'s (`usage`).
//!
//! A ledger that cannot be written never stops a domain: the hook reports the loss in the audit
//! log and on stderr, and answers libvirt as if nothing happened.

use uuid::Uuid;

use crate::error::Result;
use crate::model::VgpuHandle;
use crate::model::usage::{Holding, Interval};
use crate::state::audit::{AuditEntry, AuditLog};
use crate::state::usage::{Clock, Contents, HostClock, Ledger, Settled, UsageConfig};

use super::Manager;
use super::policy::{identify, settled_inventory};
use crate::model::holder::Holder;

impl Manager {
    /// Opens a usage interval for each of `devices` that is a vGPU of this host, held by
    /// `domain` from now on (the hook's `started`, or `attach` to a running domain). Devices
    /// of no GPU are not counted. Returns the intervals opened.
    pub fn usage_begin(&self, domain: &Holder, devices: &[VgpuHandle]) -> Result<Vec<Interval>> {
        if devices.is_empty() {
            return Ok(Vec::new());
        }
        let inventory = settled_inventory(&self.paths, &self.store)?;
        let holdings: Vec<Holding> = devices
            .iter()
            .filter_map(|id| {
                let found = identify(&inventory, *id)?;
                Some(Holding {
                    holder: domain.clone(),
                    vgpu: *id,
                    gpu: found.gpu.address,
                    type_id: found.type_id.to_owned(),
                    type_name: found.ty.and_then(|t| t.name.clone()),
                    framebuffer_bytes: found
                        .framebuffer_mib
                        .unwrap_or(0)
                        .saturating_mul(1024 * 1024),
                    gpu_instance_profile: found
                        .ty
                        .and_then(|t| t.mig.as_ref())
                        .map(|m| m.gpu_instance_profile.clone()),
                })
            })
            .collect();
        if holdings.is_empty() {
            return Ok(Vec::new());
        }
        self.with_ledger(|ledger| ledger.begin(holdings))
    }

    /// Closes the usage intervals of domain `uuid`: all of them (the hook's `stopped` and
    /// `release`), or those of `only` (`detach`). Returns the intervals closed.
    pub fn usage_end(&self, uuid: Uuid, only: Option<&[VgpuHandle]>) -> Result<Vec<Interval>> {
        self.with_ledger(|ledger| ledger.end(uuid, only))
    }

    /// What the ledger holds for the window `[since_ms, until_ms)`: its raw intervals, the
    /// closed months' summaries and the damaged records skipped. `vgpuctl usage` reports a
    /// window from it, and `metrics` counts all time (`i64::MIN` to `i64::MAX`).
    pub fn usage(&self, since_ms: i64, until_ms: i64) -> Result<Contents> {
        self.with_ledger(|ledger| ledger.read_window(since_ms, until_ms))
    }

    /// What the ledger holds from `from_ms` on, raw: every interval that ended then or later,
    /// the open ones and every month's summary ([`Ledger::read`]).
    pub fn usage_from(&self, from_ms: i64) -> Result<Contents> {
        self.with_ledger(|ledger| ledger.read(from_ms))
    }

    /// Appends intervals closed elsewhere: earlier records, or a benchmark's year. An open
    /// interval is refused; a month already folded keeps its summary.
    pub fn usage_import(&self, closed: &[Interval]) -> Result<()> {
        self.with_ledger(|ledger| ledger.import(closed))
    }

    /// Closes what an earlier boot left open and folds closed months ([`Ledger::settle`]).
    pub fn usage_settle(&self) -> Result<Settled> {
        self.with_ledger(|ledger| ledger.settle())
    }

    /// Writes to the audit log that the usage of `domain` could not be recorded, and why. The
    /// caller goes on: a domain is never stopped for its bill.
    pub fn usage_lost(&self, action: &str, domain: &str, err: &crate::Error) {
        tracing::error!(action, domain, "usage not recorded: {}", err.chain());
        let entry = AuditEntry::now(
            &self.command,
            action,
            domain,
            format!("usage not recorded: {}", err.chain()),
        );
        let logged = AuditLog::open(&self.paths).and_then(|log| log.record(&entry));
        if let Err(log_err) = logged {
            tracing::error!("cannot write the audit log either: {}", log_err.chain());
        }
    }

    /// The ledger, with the clock [`Manager::with_usage_clock`] gave or the host's.
    fn with_ledger<T>(&self, f: impl FnOnce(&Ledger<'_>) -> Result<T>) -> Result<T> {
        let config = UsageConfig::load(&self.paths)?;
        let host = HostClock::new(&self.paths);
        let clock: &dyn Clock = match &self.usage_clock {
            Some(given) => given.as_ref(),
            None => &host,
        };
        f(&Ledger::new(&self.paths, clock, &config))
    }
}
