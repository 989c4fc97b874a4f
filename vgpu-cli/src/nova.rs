//! `vgpuctl nova-config`: the host read (definitions, `hook.toml`), then
//! `vgpu_report::nova`, which holds the rules, written as `nova.conf` text or JSON.

use std::io::Write;

use anyhow::Result;

use vgpu_core::state::{HookConfig, Store};
use vgpu_report::nova::{self, NovaRelease};

/// `--nova-release`: the Nova releases `vgpu_report::nova` writes for, with the names and
/// aliases an operator types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NovaReleaseArg {
    /// Nova 26 (Zed, Debian 12) to 28 (2023.2 Bobcat): `[mdev_<type>]` groups are read only
    /// with two or more enabled types.
    #[value(name = "zed", alias = "26", alias = "2023.1", alias = "2023.2")]
    Zed,
    /// Nova 29 (2024.1 Caracal) and 30 (2024.2 Dalmatian): groups are always read;
    /// `max_instances` exists; vendor-VFIO VFs cannot be offered (managed='yes').
    #[value(
        name = "2024.1",
        alias = "caracal",
        alias = "29",
        alias = "2024.2",
        alias = "dalmatian",
        alias = "30"
    )]
    Caracal,
    /// Nova 31 (2025.1 Epoxy) and later: as 2024.1, and vendor-VFIO VFs with managed: "no".
    #[value(name = "2025.1", alias = "epoxy", alias = "31")]
    Epoxy,
}

impl From<NovaReleaseArg> for NovaRelease {
    fn from(arg: NovaReleaseArg) -> Self {
        match arg {
            NovaReleaseArg::Zed => NovaRelease::Zed,
            NovaReleaseArg::Caracal => NovaRelease::Caracal,
            NovaReleaseArg::Epoxy => NovaRelease::Epoxy,
        }
    }
}

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
