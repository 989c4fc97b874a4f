//! `vgpuctl nova-config`: the host read (definitions, `hook.toml`), then
//! `vgpu_report::nova`, which holds the rules, written as `nova.conf` text or JSON.

use std::io::Write;

use anyhow::Result;

use vgpu_core::{
    HostPaths,
    model::Inventory,
    state::{HookConfig, Store},
};
use vgpu_report::nova::{self, NovaRelease};

/// `--nova-release`: the Nova releases `vgpu_report::nova` writes for, with the names and
/// aliases an operator types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NovaReleaseArg {
    /// Nova 26 (Zed, Debian 12) to 28 (2023.2 Bobcat): `[mdev_<type>]` groups are read only
    /// with two or more enabled types.
    #[value(name = "zed", alias = "26", alias = "2023.1", alias = "2023.2")]
    Zed,
    /// Nova 29 (2024.1 Caracal) and later: groups are always read; `max_instances` exists.
    #[value(
        name = "2024.1",
        alias = "caracal",
        alias = "29",
        alias = "2024.2",
        alias = "2025.1"
    )]
    Caracal,
}

impl From<NovaReleaseArg> for NovaRelease {
    fn from(arg: NovaReleaseArg) -> Self {
        match arg {
            NovaReleaseArg::Zed => NovaRelease::Zed,
            NovaReleaseArg::Caracal => NovaRelease::Caracal,
        }
    }
}

/// Runs `nova-config` on the host at `paths`.
pub(crate) fn run(
    json: bool,
    release: NovaReleaseArg,
    paths: &HostPaths,
    inventory: &Inventory,
    out: &mut dyn Write,
) -> Result<()> {
    let store = Store::new(paths);
    let flavor_types: Vec<String> = HookConfig::load(paths)?.flavors.into_values().collect();
    let config = nova::build(
        release.into(),
        inventory,
        &store.mdevs()?,
        &store.vf_vgpus()?,
        &flavor_types,
    );
    if json {
        crate::render::json(out, &config)?;
    } else {
        let mut text = String::new();
        nova::write_text(&mut text, &config)?;
        out.write_all(text.as_bytes())?;
    }
    Ok(())
}
