//! MIG geometry in `restore`: GPU instances do not survive a reboot or a driver reload, so
//! each GPU's MIG definition is carried out again: MIG mode first, then the instances it does
//! not name and no vGPU uses go, then every instance it names is made at its placement,
//! before the MIG-backed vGPUs that need them.

use super::{RestoreReport, Scope};
use crate::capacity::MigFacts;
use crate::manager::session::Session;
use crate::nvml::mig::facts;
use crate::state::store::MigDefinition;

/// Restores each MIG definition of `scope` (all with `None`), each change its own operation
/// and step of `report` (`mig-mode`, then `gpu-instance` per instance made).
pub(super) fn restore(
    session: &Session,
    report: &mut RestoreReport,
    defs: &[MigDefinition],
    scope: Option<&Scope>,
) {
    for def in defs.iter().filter(|d| Scope::is_gpu(scope, d.gpu)) {
        let gpu = def.gpu.to_string();
        let mode = session.attempt(|op| {
            let now = facts(op.paths(), op.nvml().get(), def.gpu);
            if now.is_some_and(|now| now.mig_on == def.enabled) {
                return Ok(false);
            }
            op.set_mig_mode(def.gpu, def.enabled).map(|()| true)
        });
        let failed = mode.is_err();
        report.push(session, "mig-mode", gpu.clone(), mode);
        if failed {
            continue;
        }
        // The definition is the truth: an instance it does not name, and no vGPU uses (one
        // made before boot, by another tool), goes before those it names are made.
        let strays = match session.attempt(|op| Ok(facts(op.paths(), op.nvml().get(), def.gpu))) {
            Ok(now) => now.map(|now| strays(def, &now)).unwrap_or_default(),
            Err(err) => {
                report.push(session, "gpu-instance-gone", gpu.clone(), Err(err));
                continue;
            }
        };
        for (id, profile, start) in strays {
            let shown = format!("{gpu}/{profile}@{start} (instance {id})");
            let result = session.attempt(|op| op.destroy_gpu_instance(def.gpu, id).map(|()| true));
            report.push(session, "gpu-instance-gone", shown, result);
        }
        for instance in &def.instances {
            let shown = format!("{gpu}/{}@{}", instance.profile, instance.start);
            let result = session.attempt(|op| {
                let now = facts(op.paths(), op.nvml().get(), def.gpu);
                let there = now.is_some_and(|now| {
                    now.instances.iter().any(|(id, profile)| {
                        *profile == instance.profile
                            && now.placements.get(id).map(|p| p.start) == Some(instance.start)
                    })
                });
                if there {
                    return Ok(false);
                }
                op.create_gpu_instance(def.gpu, &instance.profile, Some(instance.start))
                    .map(|_| true)
            });
            report.push(session, "gpu-instance", shown, result);
        }
    }
}

/// The GPU instances of `now` that `def` does not name (by profile and start) and no vGPU
/// uses: id, profile, start.
fn strays(def: &MigDefinition, now: &MigFacts) -> Vec<(u32, String, u32)> {
    now.instances
        .iter()
        .filter(|(id, _)| !now.used.contains(id))
        .filter_map(|(id, profile)| {
            let start = now.placements.get(id)?.start;
            let named = def
                .instances
                .iter()
                .any(|i| i.profile == *profile && i.start == start);
            (!named).then(|| (*id, profile.clone(), start))
        })
        .collect()
}
