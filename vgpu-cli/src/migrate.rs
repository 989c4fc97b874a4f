//! An incoming domain on this host: the hook's `migrate begin` and `restore begin`, which print
//! the domain XML rewritten to name this host's devices, and `vgpuctl can-host`, the same
//! choice made without changing anything (`vgpu_core::manager::migrate`).
//!
//! Only the hostdevs that are the hook's are looked at: mediated devices, and VFs of NVIDIA's
//! vendor-specific VFIO (`managed='no'`). A plain VF (`managed='yes'`) is libvirt's own. Nova
//! 2024.1 and later rewrite the mediated devices of the domains they migrate themselves: for a
//! domain with Nova's metadata, mediated devices are left to Nova.

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::manager::{Arrival, HookDomain, Incoming, IncomingDevice};
use vgpu_core::model::VgpuHandle;
use vgpu_core::state::HookConfig;
use vgpu_domain::HostdevKind;
use vgpu_domain::xml::{self, DomainXml};

use crate::context::Context;
use crate::render::{Report, Table};

/// The hook's request for `domain`, and the devices of it that are the hook's.
fn request(domain: &DomainXml) -> (HookDomain, Vec<IncomingDevice>) {
    let devices = domain
        .hostdevs
        .iter()
        .filter(|h| match h.kind {
            HostdevKind::VendorVf => true,
            HostdevKind::Mdev if domain.nova => {
                tracing::debug!(
                    domain = domain.name,
                    device = %h.device,
                    "left to Nova, which moves the mediated devices of its domains itself"
                );
                false
            }
            HostdevKind::Mdev => true,
            HostdevKind::PlainVf => false,
        })
        .map(|h| IncomingDevice {
            id: h.device,
            type_name: domain
                .device_types
                .iter()
                .find(|(id, _)| *id == h.device)
                .map(|(_, name)| name.clone()),
        })
        .collect();
    let hook = HookDomain {
        uuid: domain.uuid,
        name: domain.name.clone(),
        devices: domain.hostdevs.iter().map(|h| h.device).collect(),
        vgpu_type: domain.vgpu_type.clone(),
        flavor: domain.nova_flavor.clone(),
        tenant: domain
            .tenant
            .as_ref()
            .map(|t| t.name.clone())
            .unwrap_or_default(),
    };
    (hook, devices)
}

/// The moves an incoming domain's XML needs: each device that is named otherwise here.
fn moves(incoming: &Incoming) -> Vec<(VgpuHandle, VgpuHandle)> {
    incoming
        .arrivals
        .iter()
        .filter(|a| a.rewritten())
        .map(|a| (a.from, a.to))
        .collect()
}

/// The hook's `migrate begin` and `restore begin`: makes this host's vGPUs for the domain
/// `text` describes and writes the XML that names them to `out`, or nothing when no device is
/// named otherwise (libvirt then keeps its own).
pub(crate) fn hook(ctx: &Context<'_>, text: &str, out: &mut dyn Write) -> Result<()> {
    let domain = xml::domain(text)?;
    let (request, devices) = request(&domain);
    if devices.is_empty() {
        return Ok(());
    }
    let config = HookConfig::load(ctx.paths())?;
    let incoming = ctx
        .manager()
        .migrate_domain(&request, &devices, &config, false)?;
    tracing::info!(
        domain = request.name,
        devices = incoming.arrivals.len(),
        rewritten = incoming.arrivals.iter().filter(|a| a.rewritten()).count(),
        "incoming"
    );
    let moves = moves(&incoming);
    if moves.is_empty() {
        return Ok(());
    }
    let rewritten = xml::rewrite_sources(text, &moves)?;
    out.write_all(rewritten.as_bytes())
        .context("cannot write the domain XML to stdout")?;
    Ok(())
}

/// What `can-host` prints.
#[derive(Debug, Serialize)]
struct CanHost {
    domain: String,
    devices: Vec<Arrival>,
}

impl Report for CanHost {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut table = Table::new(&["DEVICE", "HERE", "GPU", "TYPE", "FROM"]);
        for a in &self.devices {
            table.row(vec![
                a.from.to_string(),
                a.to.to_string(),
                a.gpu.to_string(),
                vgpu_core::model::type_label(&a.type_id, a.type_name.as_deref()).to_owned(),
                a.type_from.clone(),
            ]);
        }
        table.write(out)?;
        writeln!(
            out,
            "{}: can be hosted here ({} vGPU(s))",
            self.domain,
            self.devices.len()
        )
    }
}

/// `vgpuctl can-host -f DOMAIN.xml`: the choice `migrate begin` would make here, made without
/// changing anything. A refusal is the error `migrate begin` would fail with.
pub(crate) fn can_host(ctx: &Context<'_>, file: &Path, out: &mut dyn Write) -> Result<u8> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let domain = xml::domain_in_bytes(&bytes)
        .with_context(|| format!("{} is not a domain XML vgpu reads", file.display()))?;
    let (request, devices) = request(&domain);
    let config = HookConfig::load(ctx.paths())?;
    let incoming = if devices.is_empty() {
        Incoming::default()
    } else {
        ctx.manager()
            .migrate_domain(&request, &devices, &config, true)?
    };
    crate::render::emit(
        &CanHost {
            domain: domain.name,
            devices: incoming.arrivals,
        },
        ctx.format(),
        out,
    )?;
    Ok(crate::EXIT_OK)
}
