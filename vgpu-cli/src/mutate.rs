//! The commands that change the host: each goes through `vgpu_core::Manager`, which
//! holds the host lock, writes the audit log, and undoes what a failed command did.

use std::io::Write;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::{HostPaths, manager::DomainReferences, state::Start};

use crate::context::Context;
use crate::render::{self, Line};
use crate::{ChangeCommand, EXIT_ERROR, EXIT_OK, VgpuArgs};

fn start(auto: bool) -> Start {
    if auto { Start::Auto } else { Start::Manual }
}

/// The one rule of `--define` (sriov, create, bind, provision): what the command made now
/// comes back at boot, unless `--manual`. (`define` alone writes a definition only, manual
/// unless `--auto`, as `mdevctl define` does.)
fn kept(define: bool, manual: bool) -> Option<Start> {
    define.then(|| start(!manual))
}

/// The vGPU `text` names: a mediated device's UUID, or a VF's address in full or in the short
/// `bb:dd.f` form (see `vgpu_core::discovery::resolve_address`).
pub fn handle(paths: &HostPaths, text: &str) -> Result<vgpu_core::model::VgpuHandle> {
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

#[derive(Serialize)]
struct Done<'a> {
    id: String,
    action: &'a str,
}

/// Runs a mutating command; returns the exit code. The commands that take devices away are
/// refused while a libvirt domain references the device: the manager is told which domains
/// reference what, unless `--force` ([`ChangeCommand::takes_away`]).
pub(crate) fn run(ctx: &Context<'_>, command: &ChangeCommand, out: &mut dyn Write) -> Result<u8> {
    let references = if command.takes_away() {
        ctx.references()?
    } else {
        DomainReferences::NoLibvirt
    };
    let manager = ctx.manager().with_domain_references(references);
    let paths = ctx.paths();
    let format = ctx.format();
    // `--force` is the manager's (`Context::manager`); `bind` and `unbind` also take it as
    // the core's argument.
    let force = command.force();
    match command {
        ChangeCommand::Sriov {
            gpu,
            vfs,
            autoprobe,
            define,
            ..
        } => {
            let autoprobe = autoprobe.map(|a| a == crate::OnOff::On);
            let change = vgpu_core::discovery::resolve_gpu(paths, gpu)
                .and_then(|pf| manager.set_vfs(pf, *vfs, autoprobe, *define))
                .with_context(|| format!("cannot set the VF count of {gpu} to {vfs}"))?;
            let line = format!(
                "{}: {} VFs enabled (was {}, asked {})",
                change.pf, change.enabled, change.before, change.requested
            );
            render::emit(&Line::new(&change, line), format, out)?;
        }
        ChangeCommand::Create {
            vgpu:
                VgpuArgs {
                    gpu,
                    type_name,
                    uuid,
                },
            define,
            manual,
            ..
        } => {
            let define = kept(*define, *manual);
            let created = vgpu_core::discovery::resolve_gpu(paths, gpu)
                .and_then(|address| manager.create(address, type_name, *uuid, define))
                .with_context(|| format!("cannot create a {type_name} vGPU on {gpu}"))?;
            render::emit(&Line::new(&created, created.id.to_string()), format, out)?;
        }
        ChangeCommand::Define {
            vgpu:
                VgpuArgs {
                    gpu,
                    type_name,
                    uuid,
                },
            auto,
        } => {
            let defined = vgpu_core::discovery::resolve_gpu(paths, gpu)
                .and_then(|address| manager.define(address, type_name, *uuid, start(*auto)))
                .with_context(|| format!("cannot define a {type_name} vGPU on {gpu}"))?;
            render::emit(&Line::new(&defined, defined.id.to_string()), format, out)?;
        }
        ChangeCommand::Destroy { id, .. } => {
            let vgpu = handle(paths, id)?;
            let destroyed = manager
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
            render::emit(&Line::new(&destroyed, line), format, out)?;
        }
        ChangeCommand::Undefine { id, .. } => {
            let vgpu = handle(paths, id)?;
            let removed = manager
                .undefine(vgpu)
                .with_context(|| format!("cannot undefine {id}"))?;
            if !removed {
                anyhow::bail!(vgpu_core::Error::NotFound {
                    what: vgpu_core::error::Object::Definition,
                    id: id.clone(),
                    path: paths.etc(),
                });
            }
            let done = Done {
                id: vgpu.to_string(),
                action: "undefined",
            };
            render::emit(&Line::new(&done, format!("{vgpu}: undefined")), format, out)?;
        }
        ChangeCommand::Start { id } => {
            let vgpu = handle(paths, id)?;
            manager
                .start(vgpu)
                .with_context(|| format!("cannot start {id}"))?;
            let done = Done {
                id: vgpu.to_string(),
                action: "started",
            };
            render::emit(&Line::new(&done, format!("{vgpu}: started")), format, out)?;
        }
        ChangeCommand::Stop { id, .. } => {
            let vgpu = handle(paths, id)?;
            let stopped = manager
                .stop(vgpu)
                .with_context(|| format!("cannot stop {id}"))?;
            render::emit(
                &Line::new(&stopped, format!("{vgpu}: stopped")),
                format,
                out,
            )?;
        }
        ChangeCommand::Bind {
            address,
            driver,
            define,
            manual,
            ..
        } => {
            let define = kept(*define, *manual);
            let previous = manager
                .bind(*address, driver, define, force)
                .with_context(|| format!("cannot bind {address} to {driver}"))?;
            #[derive(Serialize)]
            struct Bound<'a> {
                address: String,
                driver: &'a str,
                previous_driver: Option<String>,
                changed: bool,
            }
            let changed = previous.as_deref() != Some(driver.as_str());
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
            render::emit(&Line::new(&bound, line), format, out)?;
        }
        ChangeCommand::Unbind { address, .. } => {
            let now = manager
                .unbind(*address, force)
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
            render::emit(&Line::new(&unbound, line), format, out)?;
        }
        ChangeCommand::Restore { device } => {
            let report = match device {
                Some(device) => vgpu_core::discovery::resolve_address(paths, device)
                    .and_then(|address| manager.restore_device(address))
                    .with_context(|| format!("cannot restore the definitions of {device}"))?,
                None => manager
                    .restore()
                    .context("cannot restore the host's definitions")?,
            };
            render::emit(&report, format, out)?;
            if report.failed() > 0 {
                return Ok(EXIT_ERROR);
            }
        }
        ChangeCommand::Provision {
            gpus,
            all,
            type_name,
            vfs,
            count,
            define,
            manual,
            tenant,
            ..
        } => {
            let define = kept(*define, *manual);
            let inventory = vgpu_core::discover(paths)?;
            let addresses: Vec<vgpu_core::model::pci::PciAddress> = if *all {
                inventory.gpus.iter().map(|g| g.address).collect()
            } else {
                gpus.iter()
                    .map(|name| {
                        vgpu_core::discovery::find_gpu(&inventory, name, paths).map(|g| g.address)
                    })
                    .collect::<Result<_, _>>()?
            };
            let targets = addresses
                .into_iter()
                .map(|gpu| vgpu_core::manager::Target {
                    gpu,
                    vfs: *vfs,
                    type_name: type_name.clone(),
                    count: *count,
                    define,
                })
                .collect();
            let reports = match tenant {
                Some(tenant) => manager.provision_for(tenant, targets),
                None => manager.provision(targets),
            }
            .context("cannot provision")?;
            render::emit(reports.as_slice(), format, out)?;
            if reports.iter().any(|r| r.error.is_some()) {
                return Ok(EXIT_ERROR);
            }
        }
    }
    Ok(EXIT_OK)
}
