//! `vgpuctl nova-config`: the `nova.conf` sections an OpenStack Nova compute host needs for the
//! vGPUs this host has, from what is discovered and defined.
//!
//! - **mediated devices** (Nova makes them itself, through libvirt and mdevctl): `[devices]
//!   enabled_mdev_types` and one `[mdev_<type>] device_addresses` per type. Nova offers one type
//!   per physical GPU, so each GPU's type is the one its vGPUs and mdev definitions have; a GPU
//!   with none or several is named with the reason. An Ampere GPU's mdev parents are its VFs:
//!   only as many are listed as the type's instances per GPU, since Nova counts one per VF.
//! - **VFs** (NVIDIA vendor VFIO, plain SR-IOV), passed through by Nova (2023.1+ PCI in
//!   Placement): one `[pci] device_spec` per VF with `resource_class` and `traits`
//!   `CUSTOM_VGPU_<TYPE>`, and one `[pci] alias` per type for flavors
//!   (`pci_passthrough:alias=<name>:1`). Placement needs one resource class per PF, so a
//!   vendor-VFIO GPU's type is the one its VF definitions (or set types) have, else the one type
//!   of it that `hook.toml` maps flavors to (then its first `max_instances` VFs are listed, and
//!   the hook sets the type at start). A plain VF's type is the GPU's VF profile for its VF
//!   count (`flex170_m2`), from the built-in catalog.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use vgpu_core::{Backend, Definitions, Gpu, HookConfig, HostPaths, Inventory, PciAddress};

/// One `[pci] device_spec` value, with Nova's field names.
#[derive(Debug, Serialize)]
pub(crate) struct DeviceSpec {
    vendor_id: String,
    product_id: String,
    address: String,
    resource_class: String,
    traits: String,
    managed: &'static str,
}

/// One `[pci] alias` value.
#[derive(Debug, Serialize)]
pub(crate) struct Alias {
    name: String,
    device_type: &'static str,
    resource_class: String,
    traits: String,
}

/// One `[mdev_<type>]` section.
#[derive(Debug, Serialize)]
pub(crate) struct MdevGroup {
    #[serde(rename = "type")]
    type_id: String,
    name: Option<String>,
    device_addresses: Vec<PciAddress>,
}

/// A GPU Nova cannot use as the host is configured, and why.
#[derive(Debug, Serialize)]
pub(crate) struct Unusable {
    gpu: PciAddress,
    model: Option<String>,
    reason: String,
}

/// Everything `nova-config` prints: the table and the `--json` rendering of one struct.
#[derive(Debug, Default, Serialize)]
pub(crate) struct NovaConfig {
    enabled_mdev_types: Vec<String>,
    mdev: Vec<MdevGroup>,
    device_spec: Vec<DeviceSpec>,
    alias: Vec<Alias>,
    unusable: Vec<Unusable>,
}

fn hex(id: Option<u16>) -> String {
    id.map_or_else(String::new, |id| format!("{id:04x}"))
}

/// `CUSTOM_VGPU_<NAME>`: the type name without its vendor prefix, upper case, every other
/// character `_` (Placement's custom resource class and trait grammar, `CUSTOM_[A-Z0-9_]+`).
fn custom_name(type_name: &str) -> String {
    let bare = type_name
        .strip_prefix("NVIDIA ")
        .or_else(|| type_name.strip_prefix("GRID "))
        .unwrap_or(type_name);
    let upper: String = bare
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("CUSTOM_VGPU_{upper}")
}

/// The alias name of a resource class: `vgpu-l40s-12q` for `CUSTOM_VGPU_L40S_12Q`.
fn alias_name(resource_class: &str) -> String {
    resource_class
        .trim_start_matches("CUSTOM_")
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// The name of type `id` on `gpu`, or the id when it has none.
fn type_name(gpu: &Gpu, id: &str) -> String {
    gpu.types
        .iter()
        .find(|t| t.id == id)
        .and_then(|t| t.name.clone())
        .unwrap_or_else(|| id.to_owned())
}

/// Builds the configuration for `inventory` with `definitions` and the hook's `config`.
pub(crate) fn build(
    inventory: &Inventory,
    definitions: &Definitions,
    config: &HookConfig,
) -> Result<NovaConfig> {
    let mdev_defs = definitions.mdevs()?;
    let vf_defs = definitions.vf_vgpus()?;
    let mut nova = NovaConfig::default();
    for gpu in &inventory.gpus {
        let on_gpu = |a: PciAddress| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a);
        let result = match gpu.backend {
            Backend::Mdev | Backend::VfMdev => {
                let mut types: BTreeSet<String> =
                    gpu.vgpus.iter().map(|v| v.type_id.clone()).collect();
                types.extend(
                    mdev_defs
                        .iter()
                        .filter(|d| d.parent.parse().is_ok_and(on_gpu))
                        .map(|d| d.mdev_type.clone()),
                );
                mdev_group(gpu, &types).map(|group| add_mdev(&mut nova, group))
            }
            Backend::NvidiaVfio => {
                let mut typed: Vec<(PciAddress, String)> = Vec::new();
                for vf in &gpu.vfs {
                    let defined = vf_defs.iter().find(|d| d.vf == vf.address);
                    if let Some(id) = defined
                        .map(|d| d.type_id.to_string())
                        .or(vf.vgpu_type.clone())
                    {
                        typed.push((vf.address, id));
                    }
                }
                vendor_vfs(gpu, &typed, config).map(|specs| add_vfs(&mut nova, specs))
            }
            Backend::Sriov => plain_vfs(gpu).map(|specs| add_vfs(&mut nova, specs)),
            Backend::None => Err(
                "it offers no vGPUs (no vGPU interface): Nova can pass it through whole with a \
                 [pci] device_spec of its own and an alias of device_type type-PCI"
                    .to_owned(),
            ),
        };
        if let Err(reason) = result {
            nova.unusable.push(Unusable {
                gpu: gpu.address,
                model: gpu.model.clone(),
                reason,
            });
        }
    }
    Ok(nova)
}

fn mdev_group(gpu: &Gpu, types: &BTreeSet<String>) -> Result<MdevGroup, String> {
    let type_id = match types.iter().collect::<Vec<_>>().as_slice() {
        [one] => (*one).clone(),
        [] => {
            return Err(format!(
                "no vGPU type chosen: Nova offers one mdev type per GPU; define a vGPU of the type \
                 it should offer (vgpuctl define {} --type TYPE)",
                gpu.address
            ));
        }
        many => {
            let list: Vec<&str> = many.iter().map(|t| t.as_str()).collect();
            return Err(format!(
                "its vGPUs and definitions have several types ({}); Nova offers one per GPU",
                list.join(", ")
            ));
        }
    };
    let device_addresses = match gpu.backend {
        Backend::VfMdev => {
            let max = gpu
                .types
                .iter()
                .find(|t| t.id == type_id)
                .and_then(|t| t.max_instances)
                .map_or(gpu.vfs.len(), |m| m as usize);
            // The VFs holding the type first, then the others, up to the GPU's instances.
            let mut vfs: Vec<PciAddress> = gpu
                .vfs
                .iter()
                .filter(|v| v.vgpu_type.as_deref() == Some(type_id.as_str()))
                .map(|v| v.address)
                .collect();
            vfs.extend(
                gpu.vfs
                    .iter()
                    .filter(|v| v.vgpu_type.is_none())
                    .map(|v| v.address),
            );
            vfs.truncate(max);
            vfs
        }
        _ => vec![gpu.address],
    };
    if device_addresses.is_empty() {
        return Err(
            "it has no VFs enabled to be mdev parents (vgpuctl sriov GPU --vfs N --define)"
                .to_owned(),
        );
    }
    Ok(MdevGroup {
        name: gpu
            .types
            .iter()
            .find(|t| t.id == type_id)
            .and_then(|t| t.name.clone()),
        type_id,
        device_addresses,
    })
}

fn add_mdev(nova: &mut NovaConfig, group: MdevGroup) {
    if !nova.enabled_mdev_types.contains(&group.type_id) {
        nova.enabled_mdev_types.push(group.type_id.clone());
    }
    match nova.mdev.iter_mut().find(|g| g.type_id == group.type_id) {
        Some(existing) => existing.device_addresses.extend(group.device_addresses),
        None => nova.mdev.push(group),
    }
}

/// Device specs for the VFs of a vendor-VFIO GPU (see the module documentation).
fn vendor_vfs(
    gpu: &Gpu,
    typed: &[(PciAddress, String)],
    config: &HookConfig,
) -> Result<Vec<DeviceSpec>, String> {
    let types: BTreeSet<&str> = typed.iter().map(|(_, t)| t.as_str()).collect();
    let (type_id, vfs): (String, Vec<PciAddress>) = match types
        .iter()
        .collect::<Vec<_>>()
        .as_slice()
    {
        [one] => (
            (**one).to_owned(),
            typed.iter().map(|(vf, _)| *vf).collect(),
        ),
        [] => {
            let mapped: BTreeSet<&str> = gpu
                .types
                .iter()
                .filter(|t| {
                    config.flavors.values().any(|wanted| {
                        t.id == *wanted || t.name.as_deref().is_some_and(|n| names_match(n, wanted))
                    })
                })
                .map(|t| t.id.as_str())
                .collect();
            let one = match mapped.iter().collect::<Vec<_>>().as_slice() {
                [one] => (**one).to_owned(),
                [] => {
                    return Err(format!(
                        "no VF has a vGPU type: define them (vgpuctl define {} --type TYPE, once per \
                         VF Nova may use), or map a flavor to one of its types in hook.toml",
                        gpu.address
                    ));
                }
                many => {
                    let list: Vec<&str> = many.iter().map(|t| **t).collect();
                    return Err(format!(
                        "hook.toml maps flavors to several of its types ({}); Nova's PCI in \
                         Placement needs one resource class per GPU: define the VFs instead",
                        list.join(", ")
                    ));
                }
            };
            let max = gpu
                .types
                .iter()
                .find(|t| t.id == one)
                .and_then(|t| t.max_instances)
                .map_or(gpu.vfs.len(), |m| m as usize);
            (one, gpu.vfs.iter().take(max).map(|v| v.address).collect())
        }
        many => {
            let list: Vec<&str> = many.iter().map(|t| **t).collect();
            return Err(format!(
                "its VFs hold or are defined with several types ({}); Nova's PCI in Placement needs \
                 one resource class per GPU",
                list.join(", ")
            ));
        }
    };
    let class = custom_name(&type_name(gpu, &type_id));
    let product = gpu
        .sriov
        .as_ref()
        .and_then(|s| s.vf_device_id)
        .or(gpu.device_id);
    Ok(vfs
        .into_iter()
        .map(|vf| spec(gpu, product, vf, &class, "no"))
        .collect())
}

fn names_match(name: &str, wanted: &str) -> bool {
    let bare = |s: &str| {
        s.strip_prefix("NVIDIA ")
            .or_else(|| s.strip_prefix("GRID "))
            .unwrap_or(s)
            .to_ascii_lowercase()
    };
    bare(name) == bare(wanted)
}

/// Device specs for the VFs of a plain SR-IOV GPU, named after its VF profile.
fn plain_vfs(gpu: &Gpu) -> Result<Vec<DeviceSpec>, String> {
    if gpu.vfs.is_empty() {
        return Err(format!(
            "it has no VFs enabled (vgpuctl sriov {} --vfs N --define)",
            gpu.address
        ));
    }
    let product = gpu
        .sriov
        .as_ref()
        .and_then(|s| s.vf_device_id)
        .or(gpu.device_id);
    let device = gpu.device_id.map(|d| format!("(0x{d:04x})"));
    let count = u32::try_from(gpu.vfs.len()).unwrap_or(u32::MAX);
    let profile = vgpu_core::catalog().iter().find(|t| {
        t.interface == "sriov-vf"
            && t.max_instances == count
            && device.as_deref().is_some_and(|d| t.gpu.ends_with(d))
    });
    let name = match profile {
        Some(profile) => profile.name.clone(),
        None => format!("{}_{}_VF", hex(gpu.vendor_id), hex(product)),
    };
    let class = custom_name(&name);
    Ok(gpu
        .vfs
        .iter()
        .map(|vf| spec(gpu, product, vf.address, &class, "yes"))
        .collect())
}

fn spec(
    gpu: &Gpu,
    product: Option<u16>,
    vf: PciAddress,
    class: &str,
    managed: &'static str,
) -> DeviceSpec {
    DeviceSpec {
        vendor_id: hex(gpu.vendor_id),
        product_id: hex(product),
        address: vf.to_string(),
        resource_class: class.to_owned(),
        traits: class.to_owned(),
        managed,
    }
}

fn add_vfs(nova: &mut NovaConfig, specs: Vec<DeviceSpec>) {
    for spec in &specs {
        if !nova
            .alias
            .iter()
            .any(|a| a.resource_class == spec.resource_class)
        {
            nova.alias.push(Alias {
                name: alias_name(&spec.resource_class),
                device_type: "type-VF",
                resource_class: spec.resource_class.clone(),
                traits: spec.traits.clone(),
            });
        }
    }
    nova.device_spec.extend(specs);
}

/// Writes the configuration as `nova.conf` text: the sections, then what is left out and why as
/// comments.
pub(crate) fn write_text(out: &mut dyn Write, nova: &NovaConfig) -> Result<()> {
    writeln!(
        out,
        "# nova.conf sections for this compute host, from `vgpuctl nova-config`."
    )?;
    if !nova.enabled_mdev_types.is_empty() {
        writeln!(
            out,
            "\n[devices]\nenabled_mdev_types = {}",
            nova.enabled_mdev_types.join(", ")
        )?;
        for group in &nova.mdev {
            let addresses: Vec<String> = group
                .device_addresses
                .iter()
                .map(ToString::to_string)
                .collect();
            writeln!(out, "\n[mdev_{}]", group.type_id)?;
            if let Some(name) = &group.name {
                writeln!(out, "# {name}")?;
            }
            writeln!(out, "device_addresses = {}", addresses.join(", "))?;
        }
    }
    if !nova.device_spec.is_empty() {
        writeln!(
            out,
            "\n[pci]\n# Controllers also need [filter_scheduler] pci_in_placement = True.\n\
             report_in_placement = True"
        )?;
        for spec in &nova.device_spec {
            writeln!(out, "device_spec = {}", serde_json::to_string(spec)?)?;
        }
        for alias in &nova.alias {
            writeln!(out, "alias = {}", serde_json::to_string(alias)?)?;
        }
    }
    if !nova.unusable.is_empty() {
        writeln!(out, "\n# Not offered to Nova:")?;
        for gpu in &nova.unusable {
            writeln!(
                out,
                "#   {} ({}): {}",
                gpu.gpu,
                gpu.model.as_deref().unwrap_or("unknown model"),
                gpu.reason
            )?;
        }
    }
    Ok(())
}

/// Runs `nova-config` on the host at `paths`.
pub(crate) fn run(
    json: bool,
    paths: &HostPaths,
    inventory: &Inventory,
    out: &mut dyn Write,
) -> Result<()> {
    let nova = build(
        inventory,
        &Definitions::new(paths),
        &HookConfig::load(paths)?,
    )?;
    if json {
        crate::render::json(out, &nova)?;
    } else {
        write_text(out, &nova)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_name_strips_vendor_and_upper_cases() {
        assert_eq!(custom_name("NVIDIA L40S-12Q"), "CUSTOM_VGPU_L40S_12Q");
    }

    #[test]
    fn alias_name_is_the_class_in_lower_case_with_dashes() {
        assert_eq!(alias_name("CUSTOM_VGPU_FLEX170_M2"), "vgpu-flex170-m2");
    }
}
