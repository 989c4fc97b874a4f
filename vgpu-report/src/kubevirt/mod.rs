//! What a KubeVirt cluster needs to see the vGPUs a host made (`vgpuctl kubevirt-config`): a
//! patch of the KubeVirt CR, or Harvester's own objects, and what the node will count.
//!
//! - **Leave the mdevs alone.** virt-handler deletes every mdev it did not ask for
//!   (kubevirt/kubevirt#9037). The patch turns that off: `mediatedDevicesConfiguration:
//!   {enabled: false}` from KubeVirt 1.8 (kubevirt/kubevirt#16220, which deprecates the
//!   gate), the feature gate `DisableMDEVConfiguration` before (kubevirt/kubevirt#9250).
//! - **Permit what the host holds.** `permittedHostDevices.mediatedDevices` has one entry per
//!   mdev type the host holds or has defined. Its `mdevNameSelector` is the type's `name` file
//!   as sysfs has it (the type id where there is none), which virt-handler compares with
//!   spaces as `_` on both sides (`pkg/virt-handler/device-manager/mediated_device.go`).
//!   `pciHostDevices` has whole GPUs and plain VFs on `vfio-pci`, and, from KubeVirt 1.9
//!   (kubevirt/kubevirt PR 16890), NVIDIA vendor-VFIO VFs that hold a type. Its
//!   `pciVendorSelector` is the function's own `vendor:device`, lower-case: the kernel's
//!   `uevent` `PCI_ID` and the `vendor` and `device` files say the same (`pci_uevent` in
//!   `drivers/pci/pci-driver.c`).
//! - **Names** follow NVIDIA's kubevirt-gpu-device-plugin ([`names`]), and each is checked
//!   against the extended-resource grammar.
//! - **What counts** (`allocatable`): each mdev of a type, each typed vendor-VFIO VF, each
//!   passthrough function. A vGPU a host libvirt domain holds is left out with a warning:
//!   KubeVirt's domains run in its pods, so a domain the host's libvirt lists is not KubeVirt's.
//! - **Providers** ([`Provider`]): KubeVirt's own device plugins; NVIDIA's sandbox device
//!   plugin of the GPU Operator (NVIDIA entries `externalResourceProvider: true`); or Harvester,
//!   which reverts sysfs changes it did not make, so its objects are printed instead
//!   ([`harvester`]).
//! - **A cluster** ([`merge`]): a merge patch replaces each list whole, so the nodes' outputs
//!   are merged into one, and a PCI id that would be two resources is refused.

use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::definition::MdevDefinition;
use crate::model::{Backend, ErrorKind, Gpu, Inventory, NameSource, VgpuHandle, pci::PciAddress};

pub mod harvester;
pub mod merge;
pub mod names;
pub mod objects;

use objects::{
    Configuration, DeveloperConfiguration, KubeVirt, MediatedDevicesConfiguration,
    MediatedHostDevice, Metadata, PciHostDevice, PermittedHostDevices, Spec,
};

/// A KubeVirt release, `1.Y`: what its configuration can say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    minor: u8,
}

impl Version {
    /// The newest release the rules here are written for.
    pub const NEWEST: Version = Version { minor: 9 };
    /// The oldest.
    pub const OLDEST: Version = Version { minor: 0 };

    /// Whether `mediatedDevicesConfiguration.enabled` exists (1.8 and later).
    pub fn has_mdev_switch(self) -> bool {
        self.minor >= 8
    }

    /// Whether KubeVirt's own PCI plugin counts `nvidia`-bound VFs with a vGPU type (1.9 and
    /// later).
    pub fn counts_vendor_vfio(self) -> bool {
        self.minor >= 9
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl FromStr for Version {
    type Err = Error;

    /// `1.Y` (a `v` before it and a patch release after it are taken), for a release from
    /// [`Version::OLDEST`] to [`Version::NEWEST`].
    fn from_str(text: &str) -> Result<Self, Error> {
        let unknown = || Error::UnknownVersion {
            given: text.to_owned(),
        };
        let bare = text.strip_prefix('v').unwrap_or(text);
        let parts: Vec<&str> = bare.split('.').collect();
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let minor_text = match parts.as_slice() {
            ["1", minor] => *minor,
            ["1", minor, patch] if digits(patch) => *minor,
            _ => return Err(unknown()),
        };
        let minor: u8 = minor_text.parse().map_err(|_| unknown())?;
        let version = Version { minor };
        if !digits(minor_text) || minor.to_string() != minor_text || version > Version::NEWEST {
            return Err(unknown());
        }
        Ok(version)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Who serves the resources on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// KubeVirt's own device plugins (virt-handler): one resource per selector.
    Kubevirt,
    /// NVIDIA's sandbox device plugin (GPU Operator, kubevirt-gpu-device-plugin): NVIDIA
    /// entries are `externalResourceProvider: true`, one per profile.
    Nvidia,
    /// Harvester's pcidevices controller: its objects, not the CR.
    Harvester,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::Kubevirt => "kubevirt",
            Provider::Nvidia => "nvidia",
            Provider::Harvester => "harvester",
        })
    }
}

/// Why no configuration was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A KubeVirt release the rules here are not written for.
    #[error(
        "KubeVirt {given:?} is not a release known here ({} to {})",
        Version::OLDEST,
        Version::NEWEST
    )]
    UnknownVersion {
        /// What was given.
        given: String,
    },
    /// A resource name outside Kubernetes' extended-resource grammar.
    #[error("resource name {name:?} is not a Kubernetes extended resource name: {why}")]
    BadResourceName {
        /// The name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A node name that is not a DNS-1123 subdomain.
    #[error("node name {name:?} {why}")]
    BadNodeName {
        /// The name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// No node name given and none on the host.
    #[error("no node name: {} does not exist", path.display())]
    NoNodeName {
        /// The host's hostname file.
        path: PathBuf,
    },
    /// One PCI id would be two resources, which KubeVirt's own device plugin cannot serve.
    #[error(
        "PCI id {selector} would be two resources, {first} ({first_node}) and {second} \
         ({second_node}): KubeVirt's own device plugin counts every function of one PCI id as \
         one resource"
    )]
    Conflict {
        /// The `vendor:device`.
        selector: String,
        /// One resource.
        first: String,
        /// The node it is on.
        first_node: String,
        /// The other.
        second: String,
        /// The node it is on.
        second_node: String,
    },
    /// Another node's output could not be read as one.
    #[error("{}: {reason}", path.display())]
    MergeFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// What a caller can do about it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Conflict { .. } => ErrorKind::Conflict,
            Error::UnknownVersion { .. }
            | Error::BadResourceName { .. }
            | Error::BadNodeName { .. }
            | Error::NoNodeName { .. }
            | Error::MergeFile { .. } => ErrorKind::BadInput,
        }
    }
}

/// What `kubevirt-config` reads of one host.
pub struct Host<'a> {
    /// The node's name in the cluster.
    pub node: &'a str,
    /// What discovery found.
    pub inventory: &'a Inventory,
    /// The mdev definitions (mdevctl's), whose types are permitted before they are started.
    pub mdev_defs: &'a [MdevDefinition],
    /// The vGPUs that libvirt domains on the host hold, with one domain each.
    pub held: &'a BTreeMap<VgpuHandle, String>,
    /// The pci.ids name of a `vendor`, `device` pair (a VF's own name).
    pub device_name: &'a dyn Fn(u16, u16) -> Option<String>,
}

/// What to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The cluster's KubeVirt release.
    pub version: Version,
    /// Who serves the resources.
    pub provider: Provider,
}

/// Everything `kubevirt-config` prints for one node, or for a cluster once merged: serialise it
/// for JSON, or write it with [`write_yaml`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node.
    pub node: String,
    /// Who serves the resources.
    pub provider: Provider,
    /// The KubeVirt release written for; `None` for Harvester.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt_version: Option<Version>,
    /// The CR patch; `None` for Harvester.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt: Option<KubeVirt>,
    /// Harvester's objects; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harvester: Option<Vec<objects::HarvesterObject>>,
    /// What this node will count, per resource; `None` for Harvester.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<BTreeMap<String, u32>>,
    /// What was left out, and why.
    pub warnings: Vec<String>,
}

/// One resource on one kind of device, with what the node counts of it.
#[derive(Debug)]
struct Offer {
    mdev: bool,
    selector: String,
    resource: String,
    count: u32,
    nvidia: bool,
}

/// `vendor:device`, lower-case, as `PCI_ID` names a function.
fn pci_id(vendor: u16, device: u16) -> String {
    format!("{vendor:04x}:{device:04x}")
}

/// The `mdev_type/name` of type `type_id` on `gpu` as sysfs has it; the id where there is none.
fn mdev_selector(gpu: &Gpu, type_id: &str) -> String {
    gpu.types
        .iter()
        .find(|t| t.id == type_id && t.name_source == Some(NameSource::Sysfs))
        .and_then(|t| t.name.clone())
        .unwrap_or_else(|| type_id.to_owned())
}

/// Whether `parent` (a definition's) is `gpu` or one of its VFs.
fn on_gpu(gpu: &Gpu, parent: &str) -> bool {
    parent
        .parse::<PciAddress>()
        .is_ok_and(|a| a == gpu.address || gpu.vfs.iter().any(|v| v.address == a))
}

/// The node's name, checked: a DNS-1123 subdomain, as Kubernetes names nodes.
pub fn check_node_name(name: &str) -> Result<(), Error> {
    names::check_subdomain(name).map_err(|why| Error::BadNodeName {
        name: name.to_owned(),
        why,
    })
}

/// Builds the configuration of `host` for `options`. Fails on a name outside Kubernetes'
/// grammar, and, with KubeVirt's own plugins, on a PCI id that would be two resources.
pub fn build(host: &Host<'_>, options: Options) -> Result<NodeConfig, Error> {
    check_node_name(host.node)?;
    let mut warnings = Vec::new();
    if options.provider == Provider::Harvester {
        let objects = harvester::objects(host, &mut warnings);
        return Ok(NodeConfig {
            node: host.node.to_owned(),
            provider: options.provider,
            kubevirt_version: None,
            kubevirt: None,
            harvester: Some(objects),
            allocatable: None,
            warnings,
        });
    }
    let mut offers = Vec::new();
    for gpu in &host.inventory.gpus {
        offers_of(host, gpu, options, &mut offers, &mut warnings);
    }
    let mut permitted = PermittedHostDevices::default();
    let mut allocatable = BTreeMap::new();
    for offer in offers {
        names::check_resource_name(&offer.resource)?;
        *allocatable.entry(offer.resource.clone()).or_insert(0) += offer.count;
        let external = (options.provider == Provider::Nvidia && offer.nvidia).then_some(true);
        // Each offer is an entry; `sort` keeps one of each.
        if offer.mdev {
            permitted.mediated.push(MediatedHostDevice {
                selector: offer.selector,
                resource: offer.resource,
                external,
            });
        } else {
            permitted.pci.push(PciHostDevice {
                selector: offer.selector,
                resource: offer.resource,
                external,
            });
        }
    }
    permitted.sort();
    if options.provider == Provider::Kubevirt {
        let entries: Vec<(&PciHostDevice, &str)> =
            permitted.pci.iter().map(|e| (e, host.node)).collect();
        merge::check_conflicts(&entries)?;
    }
    let configuration = configuration(options.version, permitted, &mut warnings);
    Ok(NodeConfig {
        node: host.node.to_owned(),
        provider: options.provider,
        kubevirt_version: Some(options.version),
        kubevirt: Some(KubeVirt {
            api_version: "kubevirt.io/v1".to_owned(),
            kind: "KubeVirt".to_owned(),
            metadata: Metadata {
                name: "kubevirt".to_owned(),
                namespace: Some("kubevirt".to_owned()),
            },
            spec: Spec { configuration },
        }),
        harvester: None,
        allocatable: Some(allocatable),
        warnings,
    })
}

/// `spec.configuration` for `version`: mdevs left alone by the field or by the gate, never
/// both.
fn configuration(
    version: Version,
    permitted: PermittedHostDevices,
    warnings: &mut Vec<String>,
) -> Configuration {
    if version.has_mdev_switch() {
        Configuration {
            developer: None,
            mediated: Some(MediatedDevicesConfiguration { enabled: false }),
            permitted,
        }
    } else {
        warnings.push(
            "developerConfiguration.featureGates is replaced whole by a merge patch: add the \
             cluster's other feature gates to it before applying"
                .to_owned(),
        );
        Configuration {
            developer: Some(DeveloperConfiguration {
                feature_gates: vec!["DisableMDEVConfiguration".to_owned()],
            }),
            mediated: None,
            permitted,
        }
    }
}

/// The offers of one GPU, and the warnings about what it leaves out.
fn offers_of(
    host: &Host<'_>,
    gpu: &Gpu,
    options: Options,
    offers: &mut Vec<Offer>,
    warnings: &mut Vec<String>,
) {
    let Some(vendor) = gpu.vendor_id else {
        warnings.push(format!(
            "{}: left out: its vendor id is unknown",
            gpu.address
        ));
        return;
    };
    let Some(domain) = names::vendor_domain(vendor) else {
        warnings.push(format!(
            "{}: left out: no resource-name domain is known for vendor {vendor:04x}",
            gpu.address
        ));
        return;
    };
    let nvidia = vendor == crate::model::NVIDIA_VENDOR_ID;
    let held = |handle: VgpuHandle| {
        host.held
            .get(&handle)
            .map(|domain| held_note(handle, domain))
    };
    let mut notes = Vec::new();
    if gpu.driver.as_deref() == Some("vfio-pci") {
        if let Some(device) = gpu.device_id {
            let name = gpu.model.clone().unwrap_or_else(|| pci_id(vendor, device));
            offers.push(Offer {
                mdev: false,
                selector: pci_id(vendor, device),
                resource: names::passthrough_resource(domain, &name),
                count: 1,
                nvidia,
            });
        }
    }
    let vf_device = gpu
        .sriov
        .as_ref()
        .and_then(|s| s.vf_device_id)
        .or(gpu.device_id);
    match gpu.backend {
        Backend::Mdev | Backend::VfMdev => {
            let mut types: Vec<&str> = gpu.vgpus.iter().map(|v| v.type_id.as_str()).collect();
            types.extend(
                host.mdev_defs
                    .iter()
                    .filter(|d| on_gpu(gpu, &d.parent))
                    .map(|d| d.mdev_type.as_str()),
            );
            types.sort_by_cached_key(|t| crate::model::type_order(t));
            types.dedup();
            for type_id in types {
                let name = host
                    .inventory
                    .type_name(gpu.address, type_id)
                    .unwrap_or(type_id);
                let mut count = 0;
                for vgpu in gpu.vgpus.iter().filter(|v| v.type_id == type_id) {
                    match held(vgpu.id) {
                        Some(note) => notes.push(note),
                        None => count += 1,
                    }
                }
                let stopped = host
                    .mdev_defs
                    .iter()
                    .filter(|d| on_gpu(gpu, &d.parent) && d.mdev_type == type_id)
                    .filter(|d| !gpu.vgpus.iter().any(|v| v.id == VgpuHandle::Mdev(d.uuid)))
                    .count();
                if stopped > 0 {
                    notes.push(format!(
                        "{}: {stopped} mdev(s) of {name} defined but not started: KubeVirt \
                         counts them once they run (restart virt-handler then)",
                        gpu.address
                    ));
                }
                offers.push(Offer {
                    mdev: true,
                    selector: mdev_selector(gpu, type_id),
                    resource: names::profile_resource(domain, name),
                    count,
                    nvidia,
                });
            }
        }
        Backend::NvidiaVfio => {
            let counted =
                options.version.counts_vendor_vfio() || options.provider == Provider::Nvidia;
            let mut left_out = Vec::new();
            for vf in &gpu.vfs {
                let (Some(type_id), Some(device)) = (vf.vgpu_type.as_deref(), vf_device) else {
                    continue;
                };
                if !counted {
                    left_out.push(vf.address.to_string());
                    continue;
                }
                let count = match held(VgpuHandle::Vf(vf.address)) {
                    Some(note) => {
                        notes.push(note);
                        0
                    }
                    None => 1,
                };
                let name = host
                    .inventory
                    .type_name(vf.address, type_id)
                    .unwrap_or(type_id);
                offers.push(Offer {
                    mdev: false,
                    selector: pci_id(vendor, device),
                    resource: names::profile_resource(domain, name),
                    count,
                    nvidia,
                });
            }
            if !left_out.is_empty() {
                notes.push(format!(
                    "{}: VFs {} left out: KubeVirt {} counts only functions on vfio-pci, and \
                     these vendor-VFIO VFs stay on nvidia (1.9 counts them)",
                    gpu.address,
                    left_out.join(", "),
                    options.version
                ));
            }
        }
        Backend::Sriov => {
            for vf in gpu.guest_vfs() {
                let Some(device) = vf_device else { continue };
                let count = match held(VgpuHandle::Vf(vf.address)) {
                    Some(note) => {
                        notes.push(note);
                        0
                    }
                    None => 1,
                };
                let name =
                    (host.device_name)(vendor, device).unwrap_or_else(|| pci_id(vendor, device));
                offers.push(Offer {
                    mdev: false,
                    selector: pci_id(vendor, device),
                    resource: names::passthrough_resource(domain, &name),
                    count,
                    nvidia,
                });
            }
        }
        Backend::None => {}
    }
    warnings.extend(notes);
}

/// The warning about a vGPU a host libvirt domain holds.
pub(crate) fn held_note(handle: VgpuHandle, domain: &str) -> String {
    format!(
        "{handle} not counted: libvirt domain {domain} on the host holds it, and KubeVirt's \
         plugin would hand it out a second time"
    )
}

/// Writes `config` as YAML: the warnings as comments, then the CR patch, or Harvester's
/// objects as documents of one stream.
pub fn write_yaml(out: &mut dyn Write, config: &NodeConfig) -> Result<(), YamlError> {
    for warning in &config.warnings {
        writeln!(out, "# warning: {warning}")?;
    }
    if let Some(kubevirt) = &config.kubevirt {
        out.write_str(&serde_yaml_ng::to_string(kubevirt)?)?;
    }
    if let Some(objects) = &config.harvester {
        for object in objects {
            writeln!(out, "---")?;
            out.write_str(&serde_yaml_ng::to_string(object)?)?;
        }
    }
    Ok(())
}

/// Why YAML could not be written.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The serialiser refused a value.
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// The writer refused.
    #[error("writing YAML")]
    Write(#[from] fmt::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_of_1_9_is_the_newest() {
        assert_eq!("1.9".parse::<Version>(), Ok(Version::NEWEST));
    }

    #[test]
    fn version_with_v_and_patch_release_is_taken() {
        assert_eq!(
            "v1.7.3".parse::<Version>().map(|v| v.to_string()),
            Ok("1.7".to_owned())
        );
    }

    #[test]
    fn version_1_10_is_unknown() {
        assert_eq!(
            "1.10".parse::<Version>(),
            Err(Error::UnknownVersion {
                given: "1.10".to_owned()
            })
        );
    }

    #[test]
    fn version_2_0_is_unknown() {
        assert!("2.0".parse::<Version>().is_err());
    }

    #[test]
    fn version_with_leading_zero_is_unknown() {
        assert!("1.08".parse::<Version>().is_err());
    }

    #[test]
    fn version_without_minor_is_unknown() {
        assert!("1".parse::<Version>().is_err());
    }

    #[test]
    fn version_1_7_has_the_gate_and_not_vendor_vfio() {
        let v: Version = "1.7".parse().unwrap_or(Version::NEWEST);
        assert_eq!(
            (v.has_mdev_switch(), v.counts_vendor_vfio()),
            (false, false)
        );
    }

    #[test]
    fn error_kind_of_a_conflict_is_conflict() {
        let err = Error::Conflict {
            selector: "10de:26b9".to_owned(),
            first: "nvidia.com/A".to_owned(),
            first_node: "a".to_owned(),
            second: "nvidia.com/B".to_owned(),
            second_node: "b".to_owned(),
        };
        assert_eq!(err.kind(), ErrorKind::Conflict);
    }
}
