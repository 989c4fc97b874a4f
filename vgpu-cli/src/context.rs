//! What every command reads from the global options, built once per command line: where the
//! host is, how to write results, NVML (loaded at most once, when first asked for), the
//! manager, libvirt's facts, and the reads of the host that commands share.

use std::cell::OnceCell;
use std::sync::Arc;

use anyhow::{Context as _, Result};

use vgpu_core::{
    HostPaths, Manager, manager::DomainReferences, model::Inventory, nvml::Nvml,
    plan::capacity::HostState,
};

use crate::Cli;
use crate::libvirt_facts::{self, Facts, FactsSource};
use crate::render::Format;

/// One command line's context: the command handlers take it.
pub struct Context<'a> {
    cli: &'a Cli,
    paths: HostPaths,
    facts: FactsSource,
    nvml: OnceCell<Arc<Nvml>>,
}

impl<'a> Context<'a> {
    /// The context of `cli`, with libvirt's facts from `facts`. Reads nothing yet.
    pub fn new(cli: &'a Cli, facts: FactsSource) -> Self {
        Context {
            cli,
            paths: cli.paths(),
            facts,
            nvml: OnceCell::new(),
        }
    }

    /// The command line.
    pub fn cli(&self) -> &'a Cli {
        self.cli
    }

    /// Where the host and `vgpu`'s own files are: `--root`, and `--state-root` when given.
    pub fn paths(&self) -> &HostPaths {
        &self.paths
    }

    /// How results are written: `--json` or tables.
    pub fn format(&self) -> Format {
        Format::of(self.cli.json)
    }

    /// NVML, loaded from where the command line says the first time it is asked for. NVML
    /// that cannot be loaded is a status ([`Nvml::status`]), not an error.
    pub fn nvml(&self) -> &Nvml {
        self.shared_nvml()
    }

    /// [`Context::nvml`], for what outlives the command's stack (the metrics server's sampler).
    pub(crate) fn shared_nvml(&self) -> &Arc<Nvml> {
        self.nvml
            .get_or_init(|| Arc::new(self.cli.nvml_source().load(&self.paths)))
    }

    /// The manager for the command: the host at [`Context::paths`], NVML from where the
    /// command line says, the command line for the audit log, and the command's `--force`
    /// ([`crate::Command::force`]). Building one reads nothing.
    pub fn manager(&self) -> Manager {
        Manager::new(&self.paths, command_line())
            .with_nvml(self.cli.nvml_source())
            .with_force(self.cli.command.force())
    }

    /// What libvirt knows, from the source this executable uses.
    pub fn facts(&self) -> Box<dyn Facts> {
        (self.facts)(self.cli)
    }

    /// The host as capacity sees it (`vgpu_core::plan::capacity::room`), with NVML's facts: what every command
    /// that shows a GPU's types shows. Loads NVML first.
    pub fn state(&self) -> Result<HostState> {
        let nvml = self.nvml();
        self.manager()
            .capacity_state(nvml)
            .with_context(|| format!("cannot read the host at {}", self.cli.root.display()))
    }

    /// The vGPU `text` names, as every command reads one: a mediated device's UUID, or a VF's
    /// address in full or in the short `bb:dd.f` form.
    ///
    /// # Errors
    ///
    /// A text that is neither (kind `bad-input`), or a short address several functions have.
    pub fn vgpu(&self, text: &str) -> Result<vgpu_core::model::VgpuHandle> {
        vgpu_handle(&self.paths, text)
    }

    /// The host as capacity sees it ([`Context::state`]), with what libvirt says of who holds
    /// its vGPUs: what the reports for an orchestrator (`nova-config`, `kubevirt-config`) read.
    pub(crate) fn inventory_and_holders(&self) -> Result<(Inventory, libvirt_facts::LibvirtFacts)> {
        let inventory = self.state()?.inventory;
        let facts = self.facts().owners(&inventory);
        Ok((inventory, facts))
    }

    /// The GPUs discovery finds, without NVML.
    pub fn inventory(&self) -> Result<Inventory> {
        vgpu_core::discover(&self.paths).with_context(|| {
            format!(
                "cannot discover GPUs on the host at {}",
                self.cli.root.display()
            )
        })
    }

    /// Which libvirt domains reference which device, asked now: what the removal policy of a
    /// change that takes a device away needs.
    pub fn references(&self) -> Result<DomainReferences> {
        libvirt_facts::references_now(&mut *self.facts(), &self.paths)
    }
}

/// The command line as typed, for the audit log.
fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// The vGPU `text` names: a mediated device's UUID, or a VF's address in full or in the short
/// `bb:dd.f` form (see `vgpu_core::discovery::resolve_address`).
pub(crate) fn vgpu_handle(paths: &HostPaths, text: &str) -> Result<vgpu_core::model::VgpuHandle> {
    if let Ok(uuid) = uuid::Uuid::try_parse(text) {
        return Ok(vgpu_core::model::VgpuHandle::Mdev(uuid));
    }
    // A VF's address, in full or as `bb:dd.f` where one function of the host has it.
    match vgpu_core::discovery::resolve_address(paths, text) {
        Ok(address) => Ok(vgpu_core::model::VgpuHandle::Vf(address)),
        Err(vgpu_core::Error::BadName { .. }) => Ok(text.parse()?),
        Err(err) => Err(err.into()),
    }
}
