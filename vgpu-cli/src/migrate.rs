//! An incoming domain on this host: the hook's `migrate begin` and `restore begin`, which print
//! the domain XML rewritten to name this host's devices, and `vgpuctl can-host`, the same
//! choice made without changing anything (`vgpu_core::manager::migrate`). With the source's
//! metadata (`vgpuctl migration-metadata` there), `can-host` also asks NVML whether each vGPU
//! can move live (`vgpu_core::nvml::migration_checks`).
//!
//! Only the hostdevs that are the hook's are looked at: mediated devices, and VFs of NVIDIA's
//! vendor-specific VFIO (`managed='no'`). A plain VF (`managed='yes'`) is libvirt's own. Nova
//! 2024.1 and later rewrite the mediated devices of the domains they migrate themselves: for a
//! domain with Nova's metadata, mediated devices are left to Nova.

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use vgpu_core::error::NvmlError;
use vgpu_core::manager::{HookDomain, Incoming, IncomingDevice};
use vgpu_core::model::VgpuHandle;
use vgpu_core::model::migration::Arrival;
use vgpu_core::model::migration::{Compatibility, MigrationCheck, MigrationMetadata};
use vgpu_core::model::nvml::Fact;
use vgpu_core::state::HookConfig;
use vgpu_domain::HostdevKind;
use vgpu_domain::xml::{self, DomainXml};

use crate::context::Context;
use crate::render::{Report, Table};
use crate::telemetry::Sampler;

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
        holder: domain.holder(),
        devices: domain.hostdevs.iter().map(|h| h.device).collect(),
        vgpu_type: domain.vgpu_type.clone(),
        flavor: domain.nova_flavor.clone(),
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
        domain = request.holder.domain,
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
    /// NVML's verdict and what must match, for each vGPU of the source's metadata; absent
    /// without `--metadata`.
    #[serde(skip_serializing_if = "Option::is_none")]
    migration: Option<Vec<MigrationCheck>>,
}

/// A value known on one host, or `-`.
fn known<T: ToString>(value: Option<&T>) -> String {
    value.map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// How a fact compares on both hosts: `v` when the same, `source -> here` when not.
fn both<T: ToString + PartialEq>(source: Option<&T>, here: Option<&T>) -> String {
    match source == here {
        true => known(source),
        false => format!("{} -> {}", known(source), known(here)),
    }
}

/// NVML's verdict in a word or a few.
fn verdict(nvml: &Fact<Compatibility>) -> String {
    match nvml {
        Fact::Value(v) if v.live() => "live".to_owned(),
        Fact::Value(v) if v.limits.is_empty() => "not live".to_owned(),
        Fact::Value(v) => {
            let limits: Vec<&str> = v.limits.iter().map(|l| l.describe()).collect();
            format!("limited by {}", limits.join(" and "))
        }
        Fact::Unavailable(_) => "unknown".to_owned(),
    }
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
        if let Some(checks) = &self.migration {
            writeln!(out)?;
            let mut table = Table::new(&["DEVICE", "NVML", "TYPE ID", "ECC", "HOST DRIVER"]);
            for c in checks {
                let ecc = |e: Option<bool>| e.map(|on| if on { "on" } else { "off" });
                table.row(vec![
                    c.from.to_string(),
                    verdict(&c.nvml),
                    both(c.type_id.source.as_ref(), c.type_id.here.as_ref()),
                    both(ecc(c.ecc.source).as_ref(), ecc(c.ecc.here).as_ref()),
                    both(c.host_driver.source.as_ref(), c.host_driver.here.as_ref()),
                ]);
            }
            table.write(out)?;
        }
        let refused = self
            .migration
            .iter()
            .flatten()
            .filter(|c| !c.accepted())
            .count();
        match refused {
            0 => writeln!(
                out,
                "{}: can be hosted here ({} vGPU(s))",
                self.domain,
                self.devices.len()
            ),
            n => writeln!(
                out,
                "{}: cannot move here live ({n} of {} vGPU(s) checked refused)",
                self.domain,
                self.migration.iter().flatten().count()
            ),
        }
    }
}

/// The source's migration metadata in `file`.
fn read_metadata(file: &Path) -> Result<MigrationMetadata> {
    let text = vgpu_core::state::read_input_text(file, METADATA_LIMIT)?;
    serde_json::from_str(&text).map_err(|err| {
        crate::Refusal::bad_input(format!(
            "{} is not migration metadata (`vgpuctl migration-metadata` prints it)",
            file.display()
        ))
        .because(err)
        .into()
    })
}

/// The largest metadata file read: NVML's buffers are at most 64 KiB each, in base64.
const METADATA_LIMIT: usize = 4 * 1024 * 1024;

/// `vgpuctl can-host -f DOMAIN.xml [--metadata FILE]`: the choice `migrate begin` would make
/// here, made without changing anything. A refusal is the error `migrate begin` would fail
/// with. With metadata, the report is printed, and each refusal of NVML or of a fact that
/// must match is the error.
pub(crate) fn can_host(
    ctx: &Context<'_>,
    file: &Path,
    metadata: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8> {
    let bytes = vgpu_core::state::read_input(file, xml::MAX_BYTES)?;
    let domain = xml::domain_in_bytes(&bytes)
        .with_context(|| format!("{} is not a domain XML vgpu reads", file.display()))?;
    let metadata = metadata.map(read_metadata).transpose()?;
    let (request, devices) = request(&domain);
    let config = HookConfig::load(ctx.paths())?;
    let incoming = if devices.is_empty() {
        Incoming::default()
    } else {
        ctx.manager()
            .migrate_domain(&request, &devices, &config, true)?
    };
    let migration = match &metadata {
        Some(metadata) => Some(vgpu_core::nvml::migration_checks(
            ctx.nvml(),
            request.holder.uuid,
            &incoming.arrivals,
            metadata,
        )?),
        None => None,
    };
    let report = CanHost {
        domain: domain.name,
        devices: incoming.arrivals,
        migration,
    };
    crate::render::emit(&report, ctx.format(), out)?;
    let refusals: Vec<String> = report
        .migration
        .iter()
        .flatten()
        .flat_map(|c| c.refusals.iter().map(move |r| format!("{}: {r}", c.from)))
        .collect();
    match refusals.is_empty() {
        true => Ok(crate::EXIT_OK),
        false => anyhow::bail!(crate::Refusal::new(
            vgpu_core::ErrorKind::Conflict,
            format!(
                "{} cannot move here live: {}",
                report.domain,
                refusals.join("; ")
            )
        )),
    }
}

/// `vgpuctl migration-metadata VGPU...`: the NVML migration metadata of running vGPUs, as JSON
/// whatever the output format, for `can-host --metadata` on a destination.
pub(crate) fn metadata(ctx: &Context<'_>, vgpus: &[String], out: &mut dyn Write) -> Result<u8> {
    let paths = ctx.paths();
    let handles = vgpus
        .iter()
        .map(|text| ctx.vgpu(text))
        .collect::<Result<Vec<_>>>()?;
    let mut sampler = Sampler::new(ctx);
    let (inventory, owners, libvirt) = sampler.holdings()?;
    let metadata =
        vgpu_core::nvml::migration_metadata(sampler.nvml(), paths, &inventory, &owners, &handles);
    let metadata = match (metadata, libvirt.reason) {
        // NVML's vGPU may not be found for want of the domain libvirt would have named.
        (Err(err @ vgpu_core::Error::Nvml(NvmlError::NotRunning { .. })), Some(reason))
            if !libvirt.up =>
        {
            return Err(anyhow::Error::from(err).context(format!(
                "libvirt at {} did not answer ({reason}), so no domain is known to hold a vGPU",
                libvirt.uri
            )));
        }
        (metadata, _) => metadata?,
    };
    serde_json::to_writer_pretty(&mut *out, &metadata).context("cannot write the metadata")?;
    writeln!(out).context("cannot write the metadata")?;
    Ok(crate::EXIT_OK)
}
