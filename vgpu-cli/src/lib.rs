//! The `vgpuctl` command line: its definition, its dispatch, its commands and their one
//! rendering (tables for people, `--json` for programs).
//!
//! The clap definitions are in `args` ([`Cli`], [`Command`] and its groups). [`run_local`] (module
//! `dispatch`) only matches the command and calls its module's handler. Each handler takes the one
//! [`Context`], built from the global options; `metrics` and `isolation` still take its command
//! line and paths instead. The context holds the host's paths and builds the manager. It loads NVML
//! at most once, when first asked for. It does the host reads the commands share
//! ([`Context::state`], [`Context::inventory`]). `--force` is read in one place
//! ([`Command::force`]), and the context gives it to the manager.
//!
//! Commands write to a `&mut dyn Write` so that tests can check their output against golden files.
//! A command's result is one value that is both `serde::Serialize` and [`render::Report`].
//! [`render::emit`] writes it as JSON or as a table. Tables are written by one table writer in
//! `render`. A one-line result is a [`render::Line`]. `watch` emits each event, and `top` its
//! snapshot for a script, through the same function. `metrics`, `isolation` and `nova-config` still
//! write their own output. `completions` writes a script. Exit codes: [`EXIT_OK`], [`EXIT_ERROR`],
//! [`EXIT_USAGE`], [`EXIT_CHECK_FAILED`], [`EXIT_CHANGES_PENDING`].
//!
//! Two executables share this command line. `vgpuctl` (`src/main.rs`) calls only `run_local`.
//! For the commands that need libvirt (`Command::uses_libvirt`) it execs `vgpuctl-libvirt`
//! (crate `vgpu-cli-libvirt`, which links libvirt and runs the domain commands) from its own
//! directory, with the same arguments; the others ask it only what libvirt knows
//! ([`libvirt_facts`]). This crate does not depend on libvirt. `plans` shows `apply`'s progress
//! with indicatif bars on a terminal, lines otherwise. The `/metrics` server uses hyper's
//! `http1` connection and hyper-util's `GracefulShutdown` rather than axum, whose router,
//! extractors and tower layers earn nothing for one route. `top` redraws the snapshot's own
//! rendering in crossterm's alternate screen, so a script's snapshot and a person's screen are
//! one table.

#![forbid(unsafe_code)]

mod args;
mod check;
pub mod completions;
mod context;
mod dispatch;
mod entry;
mod hook;
mod isolation;
mod kubevirt;
pub mod libvirt_facts;
mod list;
mod migrate;
mod mutate;
mod nova;
mod plans;
mod refusal;
pub mod render;
mod sched;
mod size_mode;
mod telemetry;
mod tenants;
mod top;
mod usage;
mod watch;

pub use args::{
    ChangeCommand, Cli, Command, DEFAULT_HOOKS_DIR, HookCommand, Keep, NovaReleaseArg, OnOff,
    PlanCommand, PolicyArg, PolicyName, ProviderArg, SizeModeName, VgpuArgs, VmCommand,
};
pub use context::Context;
pub use dispatch::run_local;
pub use entry::{
    LIBVIRT_HELPER, LinkedErrors, core_error, error_kind, exec_libvirt_helper, init_logging, main,
    write_error,
};
pub use refusal::Refusal;

/// Success.
pub const EXIT_OK: u8 = 0;
/// An error: the host could not be read, or a named device does not exist.
pub const EXIT_ERROR: u8 = 1;
/// The command line was wrong.
pub const EXIT_USAGE: u8 = 2;
/// `check` found a failure (a failed host check, or a device that is not isolated).
pub const EXIT_CHECK_FAILED: u8 = 3;
/// `plan` found changes to make (the host does not match the config yet).
pub const EXIT_CHANGES_PENDING: u8 = 4;

/// Every exit code `vgpuctl` documents, with its meaning, for `--help` and the man pages.
/// A command a signal stopped exits 128 + the signal's number, after undoing what it began.
pub const EXIT_CODES: [(u8, &str); 5] = [
    (EXIT_OK, "success"),
    (EXIT_ERROR, "error"),
    (EXIT_USAGE, "usage"),
    (EXIT_CHECK_FAILED, "check found a failure"),
    (EXIT_CHANGES_PENDING, "plan found changes pending"),
];
