//! `vgpuctl nova-config`: the host read (definitions, `hook.toml`), then
//! `vgpu_report::nova`, which holds the rules, written as `nova.conf` text or JSON.

use std::io::Write;

use anyhow::Result;

use vgpu_core::state::{HookConfig, Store};
use vgpu_report::nova;

use crate::NovaReleaseArg;

/// `vgpuctl nova-config` on the host as capacity sees it, with who holds what where libvirt
/// answers ([`crate::libvirt_facts::foreign_vgpus`] leaves those out; when libvirt does not answer, a
/// warning says so).
pub(crate) fn run(
    ctx: &crate::context::Context<'_>,
    release: NovaReleaseArg,
    out: &mut dyn Write,
) -> Result<u8> {
    let (inventory, facts) = ctx.inventory_and_holders()?;
    let (json, paths, inventory) = (ctx.cli().json, ctx.paths(), &inventory);
    let foreign = &crate::libvirt_facts::foreign_vgpus(&facts);
    let unknown = crate::libvirt_facts::unanswered(&facts);
    let store = Store::new(paths);
    let flavor_types: Vec<String> = HookConfig::load(paths)?.flavors.into_values().collect();
    let mut config = nova::build(
        release.into(),
        inventory,
        &store.mdevs()?,
        &store.vf_vgpus()?,
        &flavor_types,
        foreign,
    );
    if let Some(why) = unknown {
        config.warn(format!(
            "vGPUs that domains outside Nova hold may be offered: {why}"
        ));
    }
    if json {
        crate::render::json(out, &config)?;
    } else {
        let mut text = String::new();
        nova::write_text(&mut text, &config)?;
        out.write_all(text.as_bytes())?;
    }
    Ok(crate::EXIT_OK)
}
