//! The `nova.conf` sections an OpenStack Nova compute host needs for the vGPUs a host has, from
//! what is discovered and defined, for one Nova release (`vgpuctl nova-config`).
//!
//! - **mediated devices** (Nova makes them itself, through libvirt and mdevctl): `[devices]
//!   enabled_mdev_types` and one `[mdev_<type>] device_addresses` per type. Nova offers one type
//!   per physical GPU, so each GPU's type is the one its vGPUs and mdev definitions have; a GPU
//!   with none or several is named with the reason. Nova's inventory of a parent is its mdevs
//!   plus its `available_instances` (`_get_gpu_inventories`), so an Ampere GPU's mdev parents,
//!   its VFs, are listed only up to the type's instances per GPU.
//!   - Nova 26 (Zed) to 28 (2023.2) read the `[mdev_<type>]` groups only when `enabled_mdev_types`
//!     has two or more types (`_get_supported_vgpu_types`); with one, every parent offers it
//!     (`_get_vgpu_type_per_pgpu`). A single type is therefore paired with a placeholder type
//!     that no device has, on an address no device has.
//!   - Nova 29 (2024.1) and later always read the groups, and take `max_instances`, a cap per
//!     type over the whole host: it is set to the sum of the listed GPUs' capacity.
//!   - Every release counts an mdev that is defined but not started twice: libvirt lists it and
//!     its parent's `available_instances` still includes it. A VF holding one is left out (with
//!     a warning); a GPU whose only parent holds one is not offered.
//! - **VFs** (NVIDIA vendor VFIO, plain SR-IOV), passed through by Nova (2023.1+ PCI in
//!   Placement): one `[pci] device_spec` per VF with `resource_class` and `traits`
//!   `CUSTOM_VGPU_<TYPE>`, and one `[pci] alias` per type for flavors
//!   (`pci_passthrough:alias=<name>:1`). Placement needs one resource class per PF, so a
//!   vendor-VFIO GPU's type is the one its VF definitions (or set types) have, else the one type
//!   of it that `hook.toml` maps flavors to (then its first `max_instances` VFs are listed, and
//!   the hook sets the type at start). A plain VF's type is the GPU's VF profile for its VF
//!   count (`flex170_m2`), from the built-in catalog.
//!   - A vendor-VFIO VF must stay on `nvidia`: its spec says `managed: "no"`. Only Nova 31
//!     (2025.1) and later obey that. Earlier releases write `managed='yes'` on every PCI hostdev
//!     (`LibvirtDriver._set_managed_mode`), so libvirt would detach the VF from `nvidia` when
//!     the server starts, and `vfio-pci` cannot bind it. For them such a GPU is not offered.
//!   - A VF that a libvirt domain Nova does not manage holds is left out, with a warning
//!     naming the domain: Nova would hand it out a second time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

use serde::Serialize;

use crate::model::definition::{MdevDefinition, VfVgpuDefinition};
use crate::model::parse::{name_matches, strip_vendor_prefix};
use crate::model::sizes::SizeMode;
use crate::model::{Backend, Gpu, Inventory, VgpuHandle, pci::PciAddress};

/// The Nova releases whose vGPU inventory code the configuration is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NovaRelease {
    /// Nova 26 (Zed, Debian 12) to 28 (2023.2 Bobcat): `[mdev_<type>]` groups are read only
    /// with two or more enabled types.
    #[serde(rename = "zed")]
    Zed,
    /// Nova 29 (2024.1 Caracal) and 30 (2024.2 Dalmatian): groups are always read;
    /// `max_instances` exists.
    #[serde(rename = "2024.1")]
    Caracal,
    /// Nova 31 (2025.1 Epoxy) and later: as 2024.1, and a `device_spec`'s `managed` tag is
    /// obeyed.
    #[serde(rename = "2025.1")]
    Epoxy,
}

impl NovaRelease {
    /// Its name: `zed`, `2024.1` or `2025.1`.
    pub fn name(self) -> &'static str {
        match self {
            NovaRelease::Zed => "zed",
            NovaRelease::Caracal => "2024.1",
            NovaRelease::Epoxy => "2025.1",
        }
    }

    /// The Nova versions the configuration is valid for, in words.
    pub fn versions(self) -> &'static str {
        match self {
            NovaRelease::Zed => "Nova 26 (Zed) to 28 (2023.2 Bobcat)",
            NovaRelease::Caracal => "Nova 29 (2024.1 Caracal) and 30 (2024.2 Dalmatian)",
            NovaRelease::Epoxy => "Nova 31 (2025.1 Epoxy) and later",
        }
    }

    /// Whether the release obeys a `device_spec`'s `managed: "no"`. Earlier releases write
    /// `managed='yes'` on every PCI hostdev of a KVM guest (`LibvirtDriver._set_managed_mode`
    /// in `nova/virt/libvirt/driver.py`, read in Nova 29.2.0 and 30.0.0; Nova 31.0.0 reads the
    /// tag).
    pub fn obeys_managed(self) -> bool {
        matches!(self, NovaRelease::Epoxy)
    }
}

/// Why a release before 2025.1 cannot use a vendor-VFIO VF: with `managed='yes'` libvirt
/// detaches the VF from `nvidia` when the guest starts, which also drops the vGPU type set on
/// it, and binds it to `vfio-pci`, whose probe of an NVIDIA VF fails (`EINVAL`). The guest
/// does not start.
const MANAGED_YES: &str = "this Nova release sets managed='yes' on every PCI hostdev, so \
     libvirt would take the VF from nvidia at the server's start and the server would not \
     start; Nova 31 (2025.1) obeys managed: \"no\": use --nova-release 2025.1";

/// The type Nova 26 to 28 is given beside a single real type, so that it reads the groups.
const PLACEHOLDER_TYPE: &str = "vgpuctl-placeholder";

/// One `[pci] device_spec` value, with Nova's field names.
#[derive(Debug, Serialize)]
pub struct DeviceSpec {
    vendor_id: String,
    product_id: String,
    address: String,
    resource_class: String,
    traits: String,
    managed: &'static str,
}

/// One `[pci] alias` value.
#[derive(Debug, Serialize)]
pub struct Alias {
    name: String,
    device_type: &'static str,
    resource_class: String,
    traits: String,
}

/// One `[mdev_<type>]` section.
#[derive(Debug, Serialize)]
pub struct MdevGroup {
    #[serde(rename = "type")]
    type_id: String,
    name: Option<String>,
    device_addresses: Vec<PciAddress>,
    /// Nova 29 and later: how many of the type the host holds, the sum over its GPUs.
    max_instances: Option<u32>,
    /// The placeholder type of Nova 26 to 28 (no device has it).
    placeholder: bool,
}

/// A GPU Nova cannot use as the host is configured, and why.
#[derive(Debug, Serialize)]
pub struct Unusable {
    gpu: PciAddress,
    model: Option<String>,
    reason: String,
}

/// Everything `nova-config` prints: serialise it for JSON, or write it with [`write_text`].
#[derive(Debug, Serialize)]
pub struct NovaConfig {
    nova_release: NovaRelease,
    nova_versions: &'static str,
    enabled_mdev_types: Vec<String>,
    mdev: Vec<MdevGroup>,
    device_spec: Vec<DeviceSpec>,
    alias: Vec<Alias>,
    unusable: Vec<Unusable>,
    /// What on the host makes Nova count wrong, and what was left out for it.
    warnings: Vec<String>,
}

impl NovaConfig {
    /// Adds a warning: something on the host that makes Nova count wrong.
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }
}

fn hex(id: Option<u16>) -> String {
    id.map_or_else(String::new, |id| format!("{id:04x}"))
}

/// `CUSTOM_VGPU_<NAME>`: the type name without its vendor prefix, upper case, every other
/// character `_` (Placement's custom resource class and trait grammar, `CUSTOM_[A-Z0-9_]+`).
fn custom_name(type_name: &str) -> String {
    let upper: String = strip_vendor_prefix(type_name)
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

/// Builds the configuration for Nova `release` from `inventory`, the mdev and per-VF vGPU
/// definitions, and the types the hook's flavor map names (`hook.toml`).
/// `foreign` names the vGPUs (VFs and mdevs) that libvirt domains Nova does not manage hold,
/// with a holder each: they are left out, each with a warning, so that Nova does not hand them
/// out a second time (a held mdev lowers its group's `max_instances`, and a VF whose mdev is
/// held is not a parent Nova gets).
pub fn build(
    release: NovaRelease,
    inventory: &Inventory,
    mdev_defs: &[MdevDefinition],
    vf_defs: &[VfVgpuDefinition],
    flavor_types: &[String],
    foreign: &BTreeMap<VgpuHandle, String>,
) -> NovaConfig {
    let foreign_vfs: BTreeMap<PciAddress, String> = foreign
        .iter()
        .filter_map(|(id, domain)| match id {
            VgpuHandle::Vf(vf) => Some((*vf, domain.clone())),
            VgpuHandle::Mdev(_) => None,
        })
        .collect();
    let foreign_vfs = &foreign_vfs;
    let mut nova = NovaConfig {
        nova_release: release,
        nova_versions: release.versions(),
        enabled_mdev_types: Vec::new(),
        mdev: Vec::new(),
        device_spec: Vec::new(),
        alias: Vec::new(),
        unusable: Vec::new(),
        warnings: Vec::new(),
    };
    for gpu in &inventory.gpus {
        let on_gpu = |a: PciAddress| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a);
        if let Some(reason) = several_sizes(gpu, mdev_defs, vf_defs) {
            nova.unusable.push(Unusable {
                gpu: gpu.address,
                model: gpu.model.clone(),
                reason,
            });
            continue;
        }
        let result = match gpu.backend {
            Backend::Mdev | Backend::VfMdev => {
                let defs: Vec<&MdevDefinition> = mdev_defs
                    .iter()
                    .filter(|d| d.parent.parse().is_ok_and(on_gpu))
                    .collect();
                mdev_group(gpu, &defs, foreign).map(|(group, warnings)| {
                    nova.warnings.extend(warnings);
                    add_mdev(&mut nova, group);
                })
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
                if release.obeys_managed() {
                    vendor_vfs(gpu, &typed, flavor_types, foreign_vfs)
                        .map(|specs| add_vfs(&mut nova, specs, foreign_vfs))
                } else {
                    Err(MANAGED_YES.to_owned())
                }
            }
            Backend::Sriov => plain_vfs(gpu).map(|specs| add_vfs(&mut nova, specs, foreign_vfs)),
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
    finish_mdev(&mut nova);
    nova
}

/// Why Nova cannot count `gpu`, when it runs NVIDIA's mixed-size mode and holds or is defined
/// for vGPUs of several types: Nova's inventory is one type per GPU (its resource provider per
/// parent device), so it would offer sizes the GPU's placements cannot give.
fn several_sizes(
    gpu: &Gpu,
    mdev_defs: &[MdevDefinition],
    vf_defs: &[VfVgpuDefinition],
) -> Option<String> {
    if gpu.size_mode != Some(SizeMode::Mixed) {
        return None;
    }
    let on_gpu = |a: PciAddress| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a);
    let mut types: BTreeSet<String> = gpu.vgpus.iter().map(|v| v.type_id.clone()).collect();
    types.extend(
        mdev_defs
            .iter()
            .filter(|d| d.parent.parse().is_ok_and(on_gpu))
            .map(|d| d.mdev_type.clone()),
    );
    types.extend(
        vf_defs
            .iter()
            .filter(|d| d.gpu == gpu.address)
            .map(|d| d.type_id.to_string()),
    );
    if types.len() < 2 {
        return None;
    }
    let names: Vec<String> = types.iter().map(|t| type_name(gpu, t)).collect();
    Some(format!(
        "it runs mixed-size mode with vGPUs of several sizes ({}): Nova counts one type per GPU, \
         so it is left out",
        names.join(", ")
    ))
}

/// The definitions among `defs` whose mdev is not running on `gpu`.
fn stopped<'a>(gpu: &Gpu, defs: &[&'a MdevDefinition]) -> Vec<&'a MdevDefinition> {
    defs.iter()
        .filter(|d| !gpu.vgpus.iter().any(|v| v.id == VgpuHandle::Mdev(d.uuid)))
        .copied()
        .collect()
}

/// The `[mdev_<type>]` group of one mediated-device GPU, and the warnings about it.
fn mdev_group(
    gpu: &Gpu,
    defs: &[&MdevDefinition],
    foreign: &BTreeMap<VgpuHandle, String>,
) -> Result<(MdevGroup, Vec<String>), String> {
    let mut types: BTreeSet<String> = gpu.vgpus.iter().map(|v| v.type_id.clone()).collect();
    types.extend(defs.iter().map(|d| d.mdev_type.clone()));
    let type_id = match types.iter().collect::<Vec<_>>().as_slice() {
        [one] => (*one).clone(),
        [] => {
            return Err(format!(
                "no vGPU type chosen: Nova offers one mdev type per GPU; create a vGPU of the \
                 type it should offer (vgpuctl create {} --type TYPE), which Nova counts once \
                 and may use",
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
    let stopped = stopped(gpu, defs);
    let kind = gpu.types.iter().find(|t| t.id == type_id);
    let mut warnings = Vec::new();
    // The mdevs domains outside Nova hold: Nova must not count them as its own.
    let held_outside: Vec<(&crate::model::Vgpu, &String)> = gpu
        .vgpus
        .iter()
        .filter_map(|v| foreign.get(&v.id).map(|domain| (v, domain)))
        .collect();
    for (vgpu, domain) in &held_outside {
        warnings.push(format!(
            "mdev {} left out: libvirt domain {domain} holds it, and Nova does not manage \
             {domain}",
            vgpu.id
        ));
    }
    let device_addresses = match gpu.backend {
        Backend::VfMdev => {
            let held: Vec<PciAddress> = stopped
                .iter()
                .filter_map(|d| d.parent.parse().ok())
                .chain(held_outside.iter().map(|(v, _)| v.parent))
                .collect();
            for def in &stopped {
                warnings.push(format!(
                    "{}: mdev {} ({}) is defined but not started: Nova counts it twice (libvirt \
                     lists it and the VF's available_instances still includes it), so the VF is \
                     left out and its instance kept for it; start it (vgpuctl start {}) or \
                     undefine it, then run nova-config again",
                    def.parent, def.uuid, def.mdev_type, def.uuid
                ));
            }
            let max = kind
                .and_then(|t| t.max_instances)
                .map_or(gpu.vfs.len(), |m| m as usize)
                .saturating_sub(held.len());
            // The VFs holding the type first, then the free ones, up to the GPU's instances.
            let mut vfs: Vec<PciAddress> = gpu
                .vfs
                .iter()
                .filter(|v| v.vgpu_type.as_deref() == Some(type_id.as_str()))
                .filter(|v| !held.contains(&v.address))
                .map(|v| v.address)
                .collect();
            vfs.extend(
                gpu.vfs
                    .iter()
                    .filter(|v| v.vgpu_type.is_none() && !held.contains(&v.address))
                    .map(|v| v.address),
            );
            vfs.truncate(max);
            vfs
        }
        _ => {
            if !stopped.is_empty() {
                let ids: Vec<String> = stopped.iter().map(|d| d.uuid.to_string()).collect();
                return Err(format!(
                    "mdev {} defined but not started: Nova counts such a device twice (libvirt \
                     lists it and the parent's available_instances still includes it), and the \
                     parent is the whole GPU; start it (vgpuctl start ID) or undefine it",
                    ids.join(", ")
                ));
            }
            vec![gpu.address]
        }
    };
    if device_addresses.is_empty() {
        return Err(if gpu.vfs.is_empty() {
            "it has no VFs enabled to be mdev parents (vgpuctl sriov GPU --vfs N --define)"
                .to_owned()
        } else {
            "none of its VFs is free for Nova".to_owned()
        });
    }
    let capacity = match gpu.backend {
        Backend::VfMdev => u32::try_from(device_addresses.len()).ok(),
        _ => kind
            .and_then(|t| t.max_instances)
            .map(|max| max.saturating_sub(u32::try_from(held_outside.len()).unwrap_or(u32::MAX))),
    };
    Ok((
        MdevGroup {
            name: kind.and_then(|t| t.name.clone()),
            type_id,
            device_addresses,
            max_instances: capacity,
            placeholder: false,
        },
        warnings,
    ))
}

fn add_mdev(nova: &mut NovaConfig, group: MdevGroup) {
    if !nova.enabled_mdev_types.contains(&group.type_id) {
        nova.enabled_mdev_types.push(group.type_id.clone());
    }
    match nova.mdev.iter_mut().find(|g| g.type_id == group.type_id) {
        Some(existing) => {
            existing.device_addresses.extend(group.device_addresses);
            existing.max_instances = existing
                .max_instances
                .zip(group.max_instances)
                .map(|(a, b)| a + b);
        }
        None => nova.mdev.push(group),
    }
}

/// Fits the groups to the release: Nova 26 to 28 get the placeholder beside a single type and
/// no `max_instances` (which they do not have).
fn finish_mdev(nova: &mut NovaConfig) {
    match nova.nova_release {
        NovaRelease::Zed => {
            for group in &mut nova.mdev {
                group.max_instances = None;
            }
            if let ([_], Some(nowhere)) = (
                nova.enabled_mdev_types.as_slice(),
                PciAddress::new(0xffff, 0xff, 0x1f, 7),
            ) {
                nova.enabled_mdev_types.push(PLACEHOLDER_TYPE.to_owned());
                nova.mdev.push(MdevGroup {
                    type_id: PLACEHOLDER_TYPE.to_owned(),
                    name: None,
                    device_addresses: vec![nowhere],
                    max_instances: None,
                    placeholder: true,
                });
            }
        }
        NovaRelease::Caracal | NovaRelease::Epoxy => {}
    }
}

/// Device specs for the VFs of a vendor-VFIO GPU (see the module documentation).
fn vendor_vfs(
    gpu: &Gpu,
    typed: &[(PciAddress, String)],
    flavor_types: &[String],
    foreign: &BTreeMap<PciAddress, String>,
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
                    flavor_types.iter().any(|wanted| {
                        t.id == *wanted
                            || t.name.as_deref().is_some_and(|n| name_matches(n, wanted))
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
            // The VFs other domains hold do not count: `add_vfs` leaves them out, named.
            let mut counted = 0;
            let vfs = gpu
                .vfs
                .iter()
                .map(|v| v.address)
                .take_while(|a| {
                    if foreign.contains_key(a) {
                        return true;
                    }
                    counted += 1;
                    counted <= max
                })
                .collect();
            (one, vfs)
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
    let profile = crate::model::catalog::all().iter().find(|t| {
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

/// Adds `specs`, less the VFs `foreign` domains hold (each named in a warning), with an alias
/// per resource class.
fn add_vfs(nova: &mut NovaConfig, specs: Vec<DeviceSpec>, foreign: &BTreeMap<PciAddress, String>) {
    let specs: Vec<DeviceSpec> = specs
        .into_iter()
        .filter(|spec| {
            let holder = spec
                .address
                .parse::<PciAddress>()
                .ok()
                .and_then(|a| foreign.get(&a));
            if let Some(domain) = holder {
                nova.warnings.push(format!(
                    "{} left out: libvirt domain {domain} holds it, and Nova does not manage \
                     {domain}",
                    spec.address
                ));
            }
            holder.is_none()
        })
        .collect();
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
pub fn write_text(out: &mut dyn Write, nova: &NovaConfig) -> fmt::Result {
    writeln!(
        out,
        "# nova.conf sections for this compute host, from `vgpuctl nova-config`.\n\
         # For {} (--nova-release {}).",
        nova.nova_versions,
        nova.nova_release.name()
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
            if group.placeholder {
                writeln!(
                    out,
                    "# No device has this type or address. With one type, Nova 26 to 28 offer it \
                     on every\n# mdev parent and ignore device_addresses; with two, they read \
                     both groups."
                )?;
            }
            writeln!(out, "device_addresses = {}", addresses.join(", "))?;
            if let Some(max) = group.max_instances {
                writeln!(out, "max_instances = {max}")?;
            }
        }
    }
    if !nova.device_spec.is_empty() {
        writeln!(
            out,
            "\n[pci]\n# Controllers also need [filter_scheduler] pci_in_placement = True.\n\
             report_in_placement = True"
        )?;
        for spec in &nova.device_spec {
            writeln!(
                out,
                "device_spec = {}",
                serde_json::to_string(spec).map_err(|_| fmt::Error)?
            )?;
        }
        for alias in &nova.alias {
            writeln!(
                out,
                "alias = {}",
                serde_json::to_string(alias).map_err(|_| fmt::Error)?
            )?;
        }
    }
    if !nova.warnings.is_empty() {
        writeln!(out, "\n# Warnings:")?;
        for warning in &nova.warnings {
            writeln!(out, "#   {warning}")?;
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

#[cfg(test)]
mod tests;
