//! Dispatch: each parsed command ([`crate::args`]) to its module's handler, with the one
//! [`Context`] of the command line.

use std::io::Write;

use anyhow::Result;

use crate::context::Context;
use crate::libvirt_facts::FactsSource;
use crate::{
    Cli, Command, EXIT_OK, LIBVIRT_HELPER, check, completions, hook, isolation, kubevirt, list,
    mutate, nova, plans, sched, telemetry, top, usage, watch,
};

/// Runs `cli`, a command that does not need libvirt ([`Command::uses_libvirt`]), writing its
/// output to `out`, with libvirt's facts from `facts`; returns the exit code. Fails for a
/// command that needs libvirt.
///
/// `vgpuctl` calls it with [`crate::libvirt_facts::from_helper`]. `vgpuctl-libvirt` calls it
/// with the facts of the libvirt it links, and runs the domain commands itself. This crate does
/// not depend on libvirt's binding, so `vgpuctl` cannot link libvirt and runs on a host without
/// libvirt's library. Loading libvirt and the fifty libraries it needs also took 8 of the
/// 10 ms of CPU `vgpuctl --version` took.
pub fn run_local(cli: &Cli, out: &mut dyn Write, facts: FactsSource) -> Result<u8> {
    let ctx = Context::new(cli, facts);
    match &cli.command {
        Command::List {
            gpu,
            defined,
            vgpus,
        } => list::list(&ctx, gpu.as_deref(), *defined, *vgpus, out),
        Command::Types { gpu } => list::types(&ctx, gpu.as_deref(), out),
        Command::Check { gpu } => check::run(&ctx, gpu.as_deref(), out),
        Command::Tenants => crate::tenants::run(&ctx, out),
        Command::CanHost { file, metadata } => {
            crate::migrate::can_host(&ctx, file, metadata.as_deref(), out)
        }
        Command::MigrationMetadata { vgpus } => crate::migrate::metadata(&ctx, vgpus, out),
        Command::Sched {
            gpu,
            policy,
            timeslice,
            define,
        } => sched::run(&ctx, gpu, *policy, *timeslice, *define, out),
        Command::SizeMode { gpu, mode, define } => {
            crate::size_mode::run(&ctx, gpu, *mode, *define, out)
        }
        Command::Change(command) => mutate::run(&ctx, command, out),
        Command::Plans(command) => plans::run(&ctx, command, out),
        Command::Top { interval } => top::run(&ctx, *interval, out),
        Command::Metrics { listen } => telemetry::run(&ctx, *listen, out),
        Command::Watch => watch::run(&ctx, out),
        Command::Vm(_) => anyhow::bail!(crate::Refusal::new(
            vgpu_core::ErrorKind::HostFault,
            format!("this command talks to libvirt: {LIBVIRT_HELPER} runs it")
        )),
        Command::Hook { command } => hook::run(&ctx, command, out),
        Command::Completions { shell } => completions::write(*shell, out).map(|()| EXIT_OK),
        Command::Isolation { gpu } => isolation::run(&ctx, gpu.as_deref(), out),
        Command::Usage {
            since,
            until,
            by,
            csv,
        } => usage::run(&ctx, *since, *until, *by, *csv, out),
        Command::KubevirtConfig {
            kubevirt_version,
            provider,
            node,
            merge,
        } => {
            let request = kubevirt::Request {
                version: kubevirt_version.as_deref(),
                provider: *provider,
                node: node.as_deref(),
                merge,
            };
            kubevirt::run(&ctx, &request, out)
        }
        Command::NovaConfig { nova_release } => nova::run(&ctx, *nova_release, out),
    }
}
