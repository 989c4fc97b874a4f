//! The commands that give vGPUs to VMs through libvirt: `attach`, `detach`, `owners`, and the
//! libvirt half of `destroy`'s guard.

use std::io::Write;

use anyhow::{Context as _, Result};
use serde::Serialize;
use uuid::Uuid;

use vgpu_cli::render::{self, Line};
use vgpu_cli::{Cli, Context, EXIT_OK, VmCommand};
use vgpu_core::{
    Manager, discover, manager::DomainReferences, model::VgpuHandle, model::holder::Holder,
    state::Start,
};
use vgpu_domain::{GuestAddress, Hostdev, HostdevKind, Scope};
use vgpu_libvirt::Connection;

/// Which scopes a change applies to: as asked, or both when the domain runs and its config
/// alone when it does not.
fn scope(live: bool, config: bool, running: bool) -> Scope {
    if live || config {
        Scope { live, config }
    } else {
        Scope::default_for(running)
    }
}

/// The mediated device UUID of the `index`-th vGPU `attach --gpu` gives the domain `domain`:
/// a name-based (version 5) UUID in the domain's UUID as namespace, so that the same request
/// names the same vGPU every time.
pub(crate) fn derived_uuid(domain: Uuid, index: u32) -> Uuid {
    Uuid::new_v5(&domain, format!("vgpu-{index}").as_bytes())
}

/// What `attach` did.
#[derive(Debug, Serialize)]
struct Attached {
    domain: String,
    id: VgpuHandle,
    kind: HostdevKind,
    live: bool,
    config: bool,
    /// Whether the vGPU was created by this command.
    created: bool,
    /// Whether anything changed (false when the domain already held it).
    changed: bool,
}

/// What `detach` did.
#[derive(Debug, Serialize)]
struct Detached {
    domain: String,
    id: VgpuHandle,
    live: bool,
    config: bool,
    destroyed: bool,
    /// Whether it was attached (false: nothing to detach).
    changed: bool,
    /// When it was not attached: the other domains that hold it.
    held_by: Vec<String>,
}

/// Runs a libvirt command; returns the exit code.
pub(crate) fn run(ctx: &Context<'_>, command: &VmCommand, out: &mut dyn Write) -> Result<u8> {
    let cli = ctx.cli();
    match command {
        VmCommand::Attach {
            domain,
            id,
            gpu,
            type_name,
            index,
            live,
            config,
            display,
            guest_address,
        } => {
            let shape = Shape {
                display: *display,
                guest_address: guest_address.map(guest).transpose()?,
            };
            // The arguments are checked before libvirt is asked anything.
            let existing = id.as_deref().map(|id| ctx.vgpu(id)).transpose()?;
            let conn = connect(cli)?;
            let target = conn.domain(domain)?;
            let scope = scope(*live, *config, target.running);
            let claim = Holder {
                domain: target.name.clone(),
                uuid: target.uuid,
                tenant: conn.tenant(domain)?,
            };
            let done = match (existing, gpu, type_name) {
                (Some(id), None, None) => attach_existing(&conn, ctx, &claim, id, scope, shape)?,
                (None, Some(gpu), Some(type_name)) => attach_new(
                    &conn,
                    ctx,
                    &claim,
                    &target,
                    NewVgpu {
                        gpu,
                        type_name,
                        index: *index,
                        shape,
                    },
                    scope,
                )?,
                _ => anyhow::bail!(vgpu_cli::Refusal::bad_input(
                    "attach takes either ID, or --gpu GPU --type TYPE"
                )),
            };
            // Its type travels with the domain, for the hook of a host it migrates to.
            if done.kind != HostdevKind::PlainVf {
                record_type(&conn, ctx, domain, done.id, scope).with_context(|| {
                    format!(
                        "{} is attached to {domain}, but its type is not recorded in the domain's \
                         metadata",
                        done.id
                    )
                })?;
            }
            // The running domain holds it from now on: its usage counts. A ledger that
            // cannot be written does not undo the attach; the loss is in the audit log.
            if done.changed && done.live {
                if let Err(err) = ctx.manager().usage_begin(&claim, &[done.id]) {
                    ctx.manager().usage_lost("usage-begin", domain, &err);
                }
            }
            let line = format!(
                "{domain}: {} {}{}",
                done.id,
                if done.changed {
                    "attached"
                } else {
                    "already attached"
                },
                if done.created { " (created)" } else { "" }
            );
            render::emit(&Line::new(&done, line), ctx.format(), out)?;
        }
        VmCommand::Detach {
            domain,
            id,
            live,
            config,
            destroy,
            ..
        } => {
            let id = ctx.vgpu(id)?;
            let conn = connect(cli)?;
            let target = conn.domain(domain)?;
            let scope = scope(*live, *config, target.running);
            // Detaching what is not attached changes nothing, as attaching what is attached.
            let changed = match conn.detach(domain, id, scope) {
                Ok(()) => true,
                Err(vgpu_libvirt::Error::NotAttached { .. }) => false,
                Err(err) => {
                    return Err(anyhow::Error::new(err)
                        .context(format!("cannot detach {id} from {domain}")));
                }
            };
            if changed && scope.live {
                if let Err(err) = ctx.manager().usage_end(target.uuid, Some(&[id])) {
                    ctx.manager().usage_lost("usage-end", domain, &err);
                }
            }
            // Once the domain names it in no scope, its tenant holds it no more.
            if changed && !conn.hostdevs(domain)?.iter().any(|a| a.device == id) {
                ctx.manager().unhold(target.uuid, &[id])?;
            }
            if *destroy {
                // Another domain, or another scope of this one, may still name it: the
                // removal policy of every command that takes a device away decides.
                // `--force` is the manager's (`Context::manager`).
                let references = ctx.references()?;
                ctx.manager()
                    .with_domain_references(references)
                    .destroy(id)
                    .with_context(|| format!("{id} is detached from {domain} but not destroyed"))?;
            }
            // What was not attached here may be another domain's: name it, so that a wrong
            // domain name is seen at once.
            let held_by: Vec<String> = if changed {
                Vec::new()
            } else {
                match ctx.references()? {
                    DomainReferences::Known(refs) => refs
                        .get(&id)
                        .into_iter()
                        .flatten()
                        .filter(|d| *d != domain)
                        .cloned()
                        .collect(),
                    DomainReferences::NoLibvirt | DomainReferences::Unanswered { .. } => Vec::new(),
                }
            };
            let line = format!(
                "{domain}: {id} {}{}{}",
                if changed { "detached" } else { "not attached" },
                if held_by.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} holds it: `vgpuctl detach {} {id}`)",
                        held_by.join(", "),
                        held_by[0]
                    )
                },
                if *destroy { " and destroyed" } else { "" }
            );
            let done = Detached {
                domain: domain.clone(),
                id,
                live: scope.live,
                config: scope.config,
                destroyed: *destroy,
                changed,
                held_by,
            };
            render::emit(&Line::new(&done, line), ctx.format(), out)?;
        }
        VmCommand::Owners => {
            let conn = connect(cli)?;
            // Settled, as for `list`: each type has the name every command shows.
            let state = ctx.state()?;
            let owners = conn.owners(&state.inventory)?;
            render::emit(&owners, ctx.format(), out)?;
        }
    }
    Ok(EXIT_OK)
}

/// Records `id`'s type, by name where it has one, in `domain`'s metadata
/// ([`Connection::record_type`]).
fn record_type(
    conn: &Connection,
    ctx: &Context<'_>,
    domain: &str,
    id: VgpuHandle,
    scope: Scope,
) -> Result<()> {
    let inventory = ctx.state()?.inventory;
    let found = inventory
        .gpus
        .iter()
        .find_map(|g| g.vgpus.iter().find(|v| v.id == id).map(|v| (g, v)));
    let Some((gpu, vgpu)) = found else {
        anyhow::bail!(vgpu_cli::Refusal::new(
            vgpu_core::ErrorKind::NotFound,
            format!("{id} is not a vGPU of this host")
        ));
    };
    let name = inventory
        .type_name(gpu.address, &vgpu.type_id)
        .unwrap_or(&vgpu.type_id);
    Ok(conn.record_type(domain, id, name, scope)?)
}

fn connect(cli: &Cli) -> Result<Connection> {
    Connection::open(cli.uri())
        .with_context(|| format!("cannot connect to libvirt at {}", cli.uri()))
}

/// How the guest sees an attached vGPU.
#[derive(Debug, Clone, Copy)]
struct Shape {
    display: bool,
    guest_address: Option<GuestAddress>,
}

/// The guest PCI address `address` names (libvirt's guest PCI domains have 16 bits).
fn guest(address: vgpu_core::model::pci::PciAddress) -> Result<GuestAddress> {
    let domain = u16::try_from(address.domain())
        .with_context(|| format!("guest address {address}: the domain must fit 16 bits"))?;
    Ok(GuestAddress {
        domain,
        bus: address.bus(),
        slot: address.device(),
        function: address.function(),
    })
}

/// Attaches the existing vGPU `id`, when the tenant policy lets the domain hold it
/// (`Manager::admit`).
fn attach_existing(
    conn: &Connection,
    ctx: &Context<'_>,
    claim: &Holder,
    id: VgpuHandle,
    scope: Scope,
    shape: Shape,
) -> Result<Attached> {
    let domain = claim.domain.as_str();
    let inventory = discover(ctx.paths())?;
    let mut hostdev = Hostdev::for_vgpu(&inventory, id)?;
    hostdev.display = shape.display;
    hostdev.guest_address = shape.guest_address;
    let changed = !holds(conn, domain, id, scope)?;
    let manager = ctx.manager();
    manager.admit(claim, &[id])?;
    let attached = conn
        .attach(domain, &hostdev, scope)
        .with_context(|| format!("cannot attach {id} to {domain}"));
    if let Err(err) = attached {
        if let Err(undo) = manager.unhold(claim.uuid, &[id]) {
            tracing::error!(%id, "cannot forget the vGPU after a failed attach: {undo:#}");
        }
        return Err(err);
    }
    Ok(Attached {
        domain: domain.to_owned(),
        id,
        kind: hostdev.kind,
        live: scope.live,
        config: scope.config,
        created: false,
        changed,
    })
}

/// Whether `domain` holds `id` in every scope asked.
fn holds(conn: &Connection, domain: &str, id: VgpuHandle, scope: Scope) -> Result<bool> {
    Ok(conn
        .hostdevs(domain)?
        .iter()
        .any(|a| a.device == id && (!scope.live || a.live) && (!scope.config || a.config)))
}

/// A vGPU `attach --gpu --type` makes.
struct NewVgpu<'a> {
    gpu: &'a str,
    type_name: &'a str,
    index: u32,
    shape: Shape,
}

/// Creates (with a definition that starts at boot) and attaches the `index`-th vGPU of the
/// domain on `gpu`; finds it instead when an earlier run made it. A failed attach destroys the
/// vGPU this run made.
fn attach_new(
    conn: &Connection,
    ctx: &Context<'_>,
    claim: &Holder,
    domain: &vgpu_domain::Domain,
    new: NewVgpu<'_>,
    scope: Scope,
) -> Result<Attached> {
    let paths = ctx.paths();
    let manager = ctx.manager();
    // Settled, so that each type has its one identity at every fill level.
    let inventory = ctx.state()?.inventory;
    let gpu = vgpu_core::discovery::find_gpu(&inventory, new.gpu, paths)?;
    let attached = conn.hostdevs(&domain.name)?;
    let mdev_backend = matches!(
        gpu.backend,
        vgpu_core::model::Backend::Mdev | vgpu_core::model::Backend::VfMdev
    );
    // A vGPU runs on the host when discovery lists it, or, for a plain VF, when the VF is on
    // vfio-pci (plain VFs are assigned whole, discovery lists no vGPU for them).
    let running = |id: VgpuHandle| {
        gpu.vgpus.iter().any(|v| v.id == id)
            || matches!(id, VgpuHandle::Vf(vf) if gpu.backend == vgpu_core::model::Backend::Sriov
                && gpu.vfs.iter().any(|v| v.address == vf && v.driver.as_deref() == Some("vfio-pci")))
    };
    // The vGPU this request names, when it exists already.
    let existing = if mdev_backend {
        let uuid = derived_uuid(domain.uuid, new.index);
        let id = VgpuHandle::Mdev(uuid);
        let in_domain = attached.iter().any(|a| a.device == id);
        (running(id) || in_domain).then_some(id)
    } else {
        // VF-based vGPUs are named by their VF: the domain's index-th hostdev on this GPU.
        let held: Vec<VgpuHandle> = attached
            .iter()
            .map(|a| a.device)
            .filter(|d| matches!(d, VgpuHandle::Vf(vf) if gpu.vfs.iter().any(|v| v.address == *vf)))
            .collect();
        if new.index as usize > held.len() {
            anyhow::bail!(vgpu_core::Error::BadName {
                value: new.index.to_string(),
                expected: "an index at most the number of vGPUs the domain holds on that GPU",
            });
        }
        held.get(new.index as usize).copied()
    };
    // What exists is handed out only when it is the type asked for.
    if let Some(id) = existing {
        let type_id = match gpu.vgpus.iter().find(|v| v.id == id) {
            Some(vgpu) => Some(vgpu.type_id.clone()),
            None => defined_type(&manager, id)?,
        };
        if let Some(type_id) = type_id {
            vgpu_core::plan::capacity::check_handout(gpu, id, &type_id, new.type_name)?;
        }
    }
    let (id, made) = match existing {
        Some(id) if running(id) => (id, Made::Found),
        Some(id) => {
            // In the domain's XML but not on the host (after a reboot without restore):
            // bring it back from its definition.
            manager
                .start(id)
                .with_context(|| format!("{} holds {id}, which cannot be started", domain.name))?;
            (id, Made::Started)
        }
        None => {
            let uuid = mdev_backend.then(|| derived_uuid(domain.uuid, new.index));
            let made = manager
                .create_for(claim, gpu.address, new.type_name, uuid, Some(Start::Auto))
                .with_context(|| {
                    format!("cannot create a {} vGPU on {}", new.type_name, new.gpu)
                })?;
            (made.id, Made::Created)
        }
    };
    let result = attach_existing(conn, ctx, claim, id, scope, new.shape);
    match (result, made) {
        (Ok(mut done), made) => {
            done.created = made == Made::Created;
            done.changed = done.changed || made != Made::Found;
            Ok(done)
        }
        // Undo only what this run did: a vGPU it created goes with its definition, one it
        // started from an existing definition is stopped and stays defined.
        (Err(err), Made::Created) => {
            if let Err(undo) = manager.destroy(id) {
                tracing::error!(%id, "cannot destroy the vGPU after a failed attach: {undo:#}");
            }
            Err(err)
        }
        (Err(err), Made::Started) => {
            if let Err(undo) = manager.stop(id) {
                tracing::error!(%id, "cannot stop the vGPU after a failed attach: {undo:#}");
            }
            Err(err)
        }
        (Err(err), Made::Found) => Err(err),
    }
}

/// The type the definition of `id` gives it, when it has one.
fn defined_type(manager: &Manager, id: VgpuHandle) -> Result<Option<String>> {
    let store = manager.definitions();
    Ok(match id {
        VgpuHandle::Mdev(uuid) => store.mdev(uuid)?.map(|d| d.mdev_type),
        VgpuHandle::Vf(vf) => match store.vf_vgpu(vf)? {
            Some(def) => Some(def.type_id.to_string()),
            None => store
                .binding(vf)?
                .map(|_| vgpu_core::model::PLAIN_VF_TYPE.to_owned()),
        },
    })
}

/// What `attach --gpu` did to the vGPU before attaching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    /// It was running already.
    Found,
    /// It was defined and this run started it.
    Started,
    /// This run created it, with its definition.
    Created,
}
