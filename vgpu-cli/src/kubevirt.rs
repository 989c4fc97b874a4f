//! `vgpuctl kubevirt-config`: the host read (definitions, the node's name, other nodes'
//! outputs), then `vgpu_report::kubevirt`, which holds the rules, written as YAML or JSON.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

use vgpu_core::state::Store;
use vgpu_report::kubevirt::{self, Error, Host, NodeConfig, Options, Version};

use crate::ProviderArg;

/// What the command line asks of `kubevirt-config`.
pub(crate) struct Request<'a> {
    /// `--kubevirt-version`, unchecked.
    pub(crate) version: Option<&'a str>,
    /// `--provider`.
    pub(crate) provider: ProviderArg,
    /// `--node`.
    pub(crate) node: Option<&'a str>,
    /// `--merge`.
    pub(crate) merge: &'a [PathBuf],
}

/// The most another node's output may weigh.
const MERGE_LIMIT: usize = 16 << 20;

/// Another node's `kubevirt-config --json` output, read from `path` (the caller's file: one
/// that cannot be read is bad input, as every file named on the command line).
fn read_other(path: &Path) -> Result<NodeConfig> {
    let text = vgpu_core::state::read_input_text(path, MERGE_LIMIT)?;
    serde_json::from_str(&text).map_err(|err| {
        Error::MergeFile {
            path: path.to_path_buf(),
            reason: format!("not the JSON of kubevirt-config --json: {err}"),
        }
        .into()
    })
}

/// `vgpuctl kubevirt-config` on the host as capacity sees it, with who holds what where libvirt
/// answers ([`crate::libvirt_facts::held_vgpus`] leaves those out; when libvirt does not answer, a
/// warning says so).
pub(crate) fn run(
    ctx: &crate::context::Context<'_>,
    request: &Request<'_>,
    out: &mut dyn Write,
) -> Result<u8> {
    let (inventory, facts) = ctx.inventory_and_holders()?;
    let (json, paths, inventory) = (ctx.cli().json, ctx.paths(), &inventory);
    let held = &crate::libvirt_facts::held_vgpus(&facts);
    let unknown = crate::libvirt_facts::unanswered(&facts);
    let version = match request.version {
        Some(text) => text.parse::<Version>()?,
        None => Version::NEWEST,
    };
    let node = match request.node {
        Some(node) => node.to_owned(),
        None => vgpu_core::host::hostname(paths)?.ok_or_else(|| Error::NoNodeName {
            path: paths.hostname(),
        })?,
    };
    let others = request
        .merge
        .iter()
        .map(|path| read_other(path).map(|config| (path.clone(), config)))
        .collect::<Result<Vec<_>>>()?;
    let store = Store::new(paths);
    let mdev_defs = store.mdevs()?;
    let host = Host {
        node: &node,
        inventory,
        mdev_defs: &mdev_defs,
        held,
        device_name: &vgpu_core::discovery::device_name,
    };
    let options = Options {
        version,
        provider: request.provider.into(),
    };
    let mut config = kubevirt::build(&host, options)?;
    if let Some(why) = unknown {
        config.warnings.push(format!(
            "vGPUs that the host's libvirt domains hold may be counted: {why}"
        ));
    }
    let config = kubevirt::merge::merge(config, &others)?;
    if json {
        crate::render::json(out, &config)?;
    } else {
        let mut text = String::new();
        kubevirt::write_yaml(&mut text, &config)?;
        out.write_all(text.as_bytes())?;
    }
    Ok(crate::EXIT_OK)
}
