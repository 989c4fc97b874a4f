//! What `vgpu` keeps on the host itself: persistent definitions ([`Store`]), the host lock,
//! the audit log, the hook's records, the last `restore` ([`RestoreRun`]) and the usage ledger ([`usage`]), each written with the durable file updates of
//! `host::durable`.

pub(crate) mod audit;
pub(crate) mod desired;
pub(crate) mod format;
pub(crate) mod hook;
pub(crate) mod input;
pub(crate) mod lock;
pub(crate) mod restore_run;
pub(crate) mod store;
pub mod usage;

pub use crate::error::StateError;
pub use audit::AuditEntry;
pub use desired::read_desired;
pub use hook::{HookConfig, Made};
pub use input::{read_input, read_input_text};
pub use restore_run::{RestoreRun, read_restore_run, restore_run_path};
pub use store::{
    BindingDefinition, MdevDefinition, MigDefinition, MigInstanceDefinition, RecordedOffer,
    SchedDefinition, SizeModeDefinition, SriovDefinition, Start, Store, VfVgpuDefinition,
    add_recorded_offers,
};

#[cfg(test)]
// A failed fixture step is a failed test.
#[allow(clippy::unwrap_used)]
mod tests;
