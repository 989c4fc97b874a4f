//! The commands that change the host: each goes through `vgpu_core::Manager`, which
//! holds the host lock, writes the audit log, and undoes what a failed command did.

use std::io::Write;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::{
    HostPaths, Manager, manager::DomainReferences, model::pci::PciAddress, state::Start,
};

use crate::context::Context;
use crate::render::{self, Format, Line};
use crate::{ChangeCommand, EXIT_ERROR, EXIT_OK, OnOff, VgpuArgs};

fn start(auto: bool) -> Start {
    if auto { Start::Auto } else { Start::Manual }
}

#[derive(Serialize)]
struct Done<'a> {
    id: String,
    action: &'a str,
}

/// Runs a mutating command; returns the exit code. The commands that take devices away are
/// refused while a libvirt domain references the device: the manager is told which domains
/// reference what, unless `--force` ([`ChangeCommand::takes_away`]). Each command is a method
/// of [`Change`].
pub(crate) fn run(ctx: &Context<'_>, command: &ChangeCommand, out: &mut dyn Write) -> Result<u8> {
    let references = if command.takes_away() {
        ctx.references()?
    } else {
        DomainReferences::NoLibvirt
    };
    let mut change = Change {
        manager: ctx.manager().with_domain_references(references),
        paths: ctx.paths(),
        format: ctx.format(),
        // `--force` is the manager's (`Context::manager`); `bind` and `unbind` also take it as
        // the core's argument.
        force: command.force(),
        out,
    };
    match command {
        ChangeCommand::Sriov {
            gpu,
            vfs,
            autoprobe,
            define,
            ..
        } => change.sriov(gpu, *vfs, *autoprobe, *define),
        ChangeCommand::Create {
            vgpu,
            keep,
            placement,
        } => change.create(vgpu, keep.start(), *placement),
        ChangeCommand::Define { vgpu, auto } => change.define(vgpu, start(*auto)),
        ChangeCommand::Destroy { id, .. } => change.destroy(id),
        ChangeCommand::Undefine { id, .. } => change.undefine(id),
        ChangeCommand::Start { id } => change.start(id),
        ChangeCommand::Stop { id, .. } => change.stop(id),
        ChangeCommand::Bind {
            address,
            driver,
            keep,
            ..
        } => change.bind(*address, driver, keep.start()),
        ChangeCommand::Unbind { address, .. } => change.unbind(*address),
        ChangeCommand::Restore { device } => change.restore(device.as_deref()),
        ChangeCommand::Provision {
            gpus,
            all,
            type_name,
            vfs,
            count,
            keep,
            tenant,
        } => change.provision(&Provision {
            gpus,
            all: *all,
            type_name,
            vfs: *vfs,
            count: *count,
            define: keep.start(),
            tenant: tenant.as_deref(),
        }),
    }
}

/// One change command's manager, host and output.
struct Change<'a> {
    manager: Manager,
    paths: &'a HostPaths,
    format: Format,
    force: bool,
    out: &'a mut dyn Write,
}

/// What `provision` was asked.
struct Provision<'a> {
    gpus: &'a [String],
    all: bool,
    type_name: &'a str,
    vfs: Option<u32>,
    count: Option<u32>,
    define: Option<Start>,
    tenant: Option<&'a str>,
}

impl Change<'_> {
    /// `sriov GPU --vfs N`.
    fn sriov(&mut self, gpu: &str, vfs: u32, autoprobe: Option<OnOff>, define: bool) -> Result<u8> {
        let autoprobe = autoprobe.map(|a| a == OnOff::On);
        let change = vgpu_core::discovery::resolve_gpu(self.paths, gpu)
            .and_then(|pf| self.manager.set_vfs(pf, vfs, autoprobe, define))
            .with_context(|| format!("cannot set the VF count of {gpu} to {vfs}"))?;
        let line = format!(
            "{}: {} VFs enabled (was {}, asked {})",
            change.pf, change.enabled, change.before, change.requested
        );
        self.emit(&Line::new(&change, line))
    }

    /// `create GPU --type TYPE`.
    fn create(&mut self, vgpu: &VgpuArgs, define: Option<Start>, at: Option<u32>) -> Result<u8> {
        let VgpuArgs {
            gpu,
            type_name,
            uuid,
        } = vgpu;
        let created = vgpu_core::discovery::resolve_gpu(self.paths, gpu)
            .and_then(|address| {
                self.manager
                    .create_at(address, type_name, *uuid, define, at)
            })
            .with_context(|| format!("cannot create a {type_name} vGPU on {gpu}"))?;
        self.emit(&Line::new(&created, created.id.to_string()))
    }

    /// `define GPU --type TYPE`.
    fn define(&mut self, vgpu: &VgpuArgs, start: Start) -> Result<u8> {
        let VgpuArgs {
            gpu,
            type_name,
            uuid,
        } = vgpu;
        let defined = vgpu_core::discovery::resolve_gpu(self.paths, gpu)
            .and_then(|address| self.manager.define(address, type_name, *uuid, start))
            .with_context(|| format!("cannot define a {type_name} vGPU on {gpu}"))?;
        self.emit(&Line::new(&defined, defined.id.to_string()))
    }

    /// `destroy ID`.
    fn destroy(&mut self, id: &str) -> Result<u8> {
        let vgpu = crate::context::vgpu_handle(self.paths, id)?;
        let destroyed = self
            .manager
            .destroy(vgpu)
            .with_context(|| format!("cannot destroy {id}"))?;
        let line = format!(
            "{vgpu}: {}{}",
            if destroyed.stopped.is_some() {
                "destroyed"
            } else {
                "was not running"
            },
            if destroyed.undefined {
                ", definition removed"
            } else {
                ""
            }
        );
        self.emit(&Line::new(&destroyed, line))
    }

    /// `undefine ID`.
    fn undefine(&mut self, id: &str) -> Result<u8> {
        let vgpu = crate::context::vgpu_handle(self.paths, id)?;
        let removed = self
            .manager
            .undefine(vgpu)
            .with_context(|| format!("cannot undefine {id}"))?;
        if !removed {
            anyhow::bail!(vgpu_core::Error::NotFound {
                what: vgpu_core::error::Object::Definition,
                id: id.to_owned(),
                path: self.paths.etc(),
            });
        }
        let done = Done {
            id: vgpu.to_string(),
            action: "undefined",
        };
        self.emit(&Line::new(&done, format!("{vgpu}: undefined")))
    }

    /// `start ID`.
    fn start(&mut self, id: &str) -> Result<u8> {
        let vgpu = crate::context::vgpu_handle(self.paths, id)?;
        self.manager
            .start(vgpu)
            .with_context(|| format!("cannot start {id}"))?;
        let done = Done {
            id: vgpu.to_string(),
            action: "started",
        };
        self.emit(&Line::new(&done, format!("{vgpu}: started")))
    }

    /// `stop ID`.
    fn stop(&mut self, id: &str) -> Result<u8> {
        let vgpu = crate::context::vgpu_handle(self.paths, id)?;
        let stopped = self
            .manager
            .stop(vgpu)
            .with_context(|| format!("cannot stop {id}"))?;
        self.emit(&Line::new(&stopped, format!("{vgpu}: stopped")))
    }

    /// `bind ADDRESS [--driver DRIVER]`.
    fn bind(&mut self, address: PciAddress, driver: &str, define: Option<Start>) -> Result<u8> {
        let previous = self
            .manager
            .bind(address, driver, define, self.force)
            .with_context(|| format!("cannot bind {address} to {driver}"))?;
        #[derive(Serialize)]
        struct Bound<'a> {
            address: String,
            driver: &'a str,
            previous_driver: Option<String>,
            changed: bool,
        }
        let changed = previous.as_deref() != Some(driver);
        let line = match (changed, previous.as_deref()) {
            (false, _) => format!("{address}: already bound to {driver}, nothing changed"),
            (true, was) => format!(
                "{address}: bound to {driver} (was {})",
                was.unwrap_or("unbound")
            ),
        };
        let bound = Bound {
            address: address.to_string(),
            driver,
            previous_driver: previous.filter(|_| changed),
            changed,
        };
        self.emit(&Line::new(&bound, line))
    }

    /// `unbind ADDRESS`.
    fn unbind(&mut self, address: PciAddress) -> Result<u8> {
        let now = self
            .manager
            .unbind(address, self.force)
            .with_context(|| format!("cannot unbind {address}"))?;
        #[derive(Serialize)]
        struct Unbound {
            address: String,
            driver: Option<String>,
        }
        let line = format!("{address}: now {}", now.as_deref().unwrap_or("unbound"));
        let unbound = Unbound {
            address: address.to_string(),
            driver: now,
        };
        self.emit(&Line::new(&unbound, line))
    }

    /// `restore [--device DEVICE]`.
    fn restore(&mut self, device: Option<&str>) -> Result<u8> {
        let report = match device {
            Some(device) => vgpu_core::discovery::resolve_address(self.paths, device)
                .and_then(|address| self.manager.restore_device(address))
                .with_context(|| format!("cannot restore the definitions of {device}"))?,
            None => self
                .manager
                .restore()
                .context("cannot restore the host's definitions")?,
        };
        render::emit(&report, self.format, self.out)?;
        Ok(if report.failed() > 0 {
            EXIT_ERROR
        } else {
            EXIT_OK
        })
    }

    /// `provision (GPU... | --all) --type TYPE`.
    fn provision(&mut self, asked: &Provision<'_>) -> Result<u8> {
        let inventory = vgpu_core::discover(self.paths)?;
        let addresses: Vec<PciAddress> = if asked.all {
            inventory.gpus.iter().map(|g| g.address).collect()
        } else {
            asked
                .gpus
                .iter()
                .map(|name| {
                    vgpu_core::discovery::find_gpu(&inventory, name, self.paths).map(|g| g.address)
                })
                .collect::<Result<_, _>>()?
        };
        let targets = addresses
            .into_iter()
            .map(|gpu| vgpu_core::manager::Target {
                gpu,
                vfs: asked.vfs,
                type_name: asked.type_name.to_owned(),
                count: asked.count,
                define: asked.define,
            })
            .collect();
        let reports = match asked.tenant {
            Some(tenant) => self.manager.provision_for(tenant, targets),
            None => self.manager.provision(targets),
        }
        .context("cannot provision")?;
        render::emit(reports.as_slice(), self.format, self.out)?;
        Ok(if reports.iter().any(|r| r.error.is_some()) {
            EXIT_ERROR
        } else {
            EXIT_OK
        })
    }

    /// Writes a one-line result; exit 0.
    fn emit<T: Serialize>(&mut self, line: &Line<'_, T>) -> Result<u8> {
        render::emit(line, self.format, self.out)?;
        Ok(EXIT_OK)
    }
}
