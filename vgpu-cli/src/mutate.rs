//! The commands that change the host: each goes through `vgpu_core::Manager`, which
//! holds the host lock, writes the audit log, and undoes what a failed command did.

use std::io::Write;

use anyhow::{Context, Result};
use serde::Serialize;

use vgpu_core::{HostPaths, manager::DomainReferences, state::Start};

use crate::render;
use crate::{ChangeCommand, Cli, EXIT_ERROR, EXIT_OK, VgpuArgs};

/// The command line as typed, for the audit log.
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn start(auto: bool) -> Start {
    if auto { Start::Auto } else { Start::Manual }
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

/// Writes `value` as JSON, or `line` for people.
pub fn emit(cli: &Cli, out: &mut dyn Write, value: &impl Serialize, line: &str) -> Result<()> {
    if cli.json {
        render::json(out, value)?;
    } else {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Done<'a> {
    id: String,
    action: &'a str,
}

/// Runs a mutating command; returns the exit code.
pub(crate) fn run(
    cli: &Cli,
    paths: &HostPaths,
    command: &ChangeCommand,
    references: DomainReferences,
    out: &mut dyn Write,
) -> Result<u8> {
    let manager = crate::manager(cli, paths).with_domain_references(references);
    match command {
        ChangeCommand::Sriov {
            gpu,
            vfs,
            force,
            autoprobe,
            define,
        } => {
            let options = vgpu_core::host::SriovOptions {
                force: *force,
                ..Default::default()
            };
            let autoprobe = autoprobe.map(|a| a == crate::OnOff::On);
            let manager = manager.with_sriov_options(options).with_force(*force);
            let change = vgpu_core::discovery::resolve_gpu(paths, gpu)
                .and_then(|pf| manager.set_vfs(pf, *vfs, autoprobe, *define))
                .with_context(|| format!("cannot set the VF count of {gpu} to {vfs}"))?;
            let line = format!(
                "{}: {} VFs enabled (was {}, asked {})",
                change.pf, change.enabled, change.before, change.requested
            );
            emit(cli, out, &change, &line)?;
        }
        ChangeCommand::Create {
            vgpu:
                VgpuArgs {
                    gpu,
                    type_name,
                    uuid,
                },
            define,
            auto,
        } => {
            let define = define.then(|| start(*auto));
            let created = vgpu_core::discovery::resolve_gpu(paths, gpu)
                .and_then(|address| manager.create(address, type_name, *uuid, define))
                .with_context(|| format!("cannot create a {type_name} vGPU on {gpu}"))?;
            emit(cli, out, &created, &created.id.to_string())?;
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
            emit(cli, out, &defined, &defined.id.to_string())?;
        }
        ChangeCommand::Destroy { id, force } => {
            // Without --force, `crate::run` has checked which libvirt domains name it.
            let vgpu = handle(paths, id)?;
            let destroyed = manager
                .with_force(*force)
                .destroy(vgpu)
                .with_context(|| format!("cannot destroy {id}"))?;
            let line = format!(
                "{vgpu}: {}{}",
                if destroyed.stopped.is_some() {
                    "stopped"
                } else {
                    "was not running"
                },
                if destroyed.undefined {
                    ", definition removed"
                } else {
                    ""
                }
            );
            emit(cli, out, &destroyed, &line)?;
        }
        ChangeCommand::Undefine { id, force } => {
            // Without --force, `crate::run` has checked which libvirt domains name it.
            let vgpu = handle(paths, id)?;
            let removed = manager
                .with_force(*force)
                .undefine(vgpu)
                .with_context(|| format!("cannot undefine {id}"))?;
            if !removed {
                anyhow::bail!(vgpu_core::Error::NotFound {
                    what: vgpu_core::error::Object::Definition,
                    id: id.clone(),
                    path: paths.etc(),
                });
            }
            emit(
                cli,
                out,
                &Done {
                    id: vgpu.to_string(),
                    action: "undefined",
                },
                &format!("{vgpu}: undefined"),
            )?;
        }
        ChangeCommand::Start { id } => {
            let vgpu = handle(paths, id)?;
            manager
                .start(vgpu)
                .with_context(|| format!("cannot start {id}"))?;
            emit(
                cli,
                out,
                &Done {
                    id: vgpu.to_string(),
                    action: "started",
                },
                &format!("{vgpu}: started"),
            )?;
        }
        ChangeCommand::Stop { id, force } => {
            let vgpu = handle(paths, id)?;
            let stopped = manager
                .with_force(*force)
                .stop(vgpu)
                .with_context(|| format!("cannot stop {id}"))?;
            emit(cli, out, &stopped, &format!("{vgpu}: stopped"))?;
        }
        ChangeCommand::Bind {
            address,
            driver,
            define,
            auto,
            force,
        } => {
            let define = define.then(|| start(*auto));
            let previous = manager
                .with_force(*force)
                .bind(*address, driver, define, *force)
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
            emit(
                cli,
                out,
                &Bound {
                    address: address.to_string(),
                    driver,
                    previous_driver: previous.filter(|_| changed),
                    changed,
                },
                &line,
            )?;
        }
        ChangeCommand::Unbind { address, force } => {
            let now = manager
                .with_force(*force)
                .unbind(*address, *force)
                .with_context(|| format!("cannot unbind {address}"))?;
            #[derive(Serialize)]
            struct Unbound {
                address: String,
                driver: Option<String>,
            }
            let line = format!("{address}: now {}", now.as_deref().unwrap_or("unbound"));
            emit(
                cli,
                out,
                &Unbound {
                    address: address.to_string(),
                    driver: now,
                },
                &line,
            )?;
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
            if cli.json {
                render::json(out, &report)?;
            } else {
                render::restore_table(out, &report)?;
            }
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
            auto,
        } => {
            let define = define.then(|| start(*auto));
            let addresses: Vec<vgpu_core::model::pci::PciAddress> = if *all {
                vgpu_core::discover(paths)?
                    .gpus
                    .iter()
                    .map(|g| g.address)
                    .collect()
            } else {
                let inventory = vgpu_core::discover(paths)?;
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
            let reports = manager.provision(targets).context("cannot provision")?;
            if cli.json {
                render::json(out, &reports)?;
            } else {
                render::provision_table(out, &reports)?;
            }
            if reports.iter().any(|r| r.error.is_some()) {
                return Ok(EXIT_ERROR);
            }
        }
    }
    Ok(EXIT_OK)
}
