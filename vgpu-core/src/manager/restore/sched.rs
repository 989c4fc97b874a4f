//! The vGPU scheduler in `restore`: NVIDIA's driver forgets it when it unloads and refuses a
//! change while the GPU holds vGPUs, so each GPU's scheduler definition is set again before
//! the GPU's vGPUs are made.

use super::{RestoreReport, Scope};
use crate::manager::session::Session;
use crate::model::nvml::{Fact, already};
use crate::state::store::{SchedDefinition, SizeModeDefinition};

/// Sets each scheduler definition of `scope` (all with `None`) that NVML does not show
/// already, each its own operation and `scheduler` step of `report`.
pub(super) fn restore(
    session: &Session,
    report: &mut RestoreReport,
    defs: &[SchedDefinition],
    scope: Option<&Scope>,
) {
    for def in defs.iter().filter(|d| Scope::covers_gpu(scope, d.gpu)) {
        let result = session.attempt(|op| {
            if let Fact::Value(now) = op.nvml().get().scheduler_state(def.gpu) {
                if already(&now, def.request) {
                    return Ok(false);
                }
            }
            op.set_scheduler(def.gpu, def.request, &[]).map(|_| true)
        });
        report.push(session, "scheduler", def.gpu.to_string(), result);
    }
}

/// Sets each size-mode definition of `scope` (all with `None`) that the GPU does not show
/// already, each its own operation and `size-mode` step of `report`. The driver forgets the
/// mode at each reboot and takes a new one only before the GPU holds vGPUs.
pub(super) fn restore_size_modes(
    session: &Session,
    report: &mut RestoreReport,
    defs: &[SizeModeDefinition],
    scope: Option<&Scope>,
) {
    for def in defs.iter().filter(|d| Scope::covers_gpu(scope, d.gpu)) {
        let result = session.attempt(|op| op.ensure_size_mode(def.gpu, def.mode));
        report.push(session, "size-mode", def.gpu.to_string(), result);
    }
}
