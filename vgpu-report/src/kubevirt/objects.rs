//! The objects `kubevirt-config` prints, with the field names of their APIs: the KubeVirt CR's
//! `spec.configuration` (`kubevirt.io/v1`, `pkg/virt-operator` API types) and Harvester's
//! `SRIOVGPUDevice` and `VGPUDevice` (`devices.harvesterhci.io/v1beta1`, harvester/pcidevices).
//! Each reads back what it writes, so another node's output can be merged.

use serde::{Deserialize, Serialize};

/// The KubeVirt CR, as much of it as the patch sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeVirt {
    /// `kubevirt.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `KubeVirt`.
    pub kind: String,
    /// The CR's name and namespace.
    pub metadata: Metadata,
    /// `spec`.
    pub spec: Spec,
}

/// An object's name, and namespace where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec` of the KubeVirt CR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// `spec.configuration`.
    pub configuration: Configuration,
}

/// `spec.configuration` (`v1.KubeVirtConfiguration`): how KubeVirt leaves mdevs alone, and
/// the devices it permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// Before KubeVirt 1.8: the feature gate `DisableMDEVConfiguration`.
    #[serde(
        rename = "developerConfiguration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub developer: Option<DeveloperConfiguration>,
    /// KubeVirt 1.8 and later: `{enabled: false}`.
    #[serde(
        rename = "mediatedDevicesConfiguration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub mediated: Option<MediatedDevicesConfiguration>,
    /// `permittedHostDevices`.
    #[serde(rename = "permittedHostDevices")]
    pub permitted: PermittedHostDevices,
}

/// `v1.DeveloperConfiguration`, its feature gates only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeveloperConfiguration {
    /// `featureGates`.
    #[serde(rename = "featureGates")]
    pub feature_gates: Vec<String>,
}

/// `v1.MediatedDevicesConfiguration`, its `enabled` only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediatedDevicesConfiguration {
    /// Whether virt-handler makes and removes mdevs.
    pub enabled: bool,
}

/// `v1.PermittedHostDevices`. Both lists are always written: a merge patch replaces each whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermittedHostDevices {
    /// `mediatedDevices`.
    #[serde(rename = "mediatedDevices")]
    pub mediated: Vec<MediatedHostDevice>,
    /// `pciHostDevices`.
    #[serde(rename = "pciHostDevices")]
    pub pci: Vec<PciHostDevice>,
}

impl PermittedHostDevices {
    /// Both lists in the one order every output has (by resource name, then selector), each
    /// entry once.
    pub fn sort(&mut self) {
        self.mediated
            .sort_by(|a, b| (&a.resource, &a.selector).cmp(&(&b.resource, &b.selector)));
        self.mediated.dedup();
        self.pci
            .sort_by(|a, b| (&a.resource, &a.selector).cmp(&(&b.resource, &b.selector)));
        self.pci.dedup();
    }
}

/// `v1.MediatedHostDevice`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediatedHostDevice {
    /// The mdev type's `name` file, or its id where it has none.
    #[serde(rename = "mdevNameSelector")]
    pub selector: String,
    /// The extended resource VMs ask for.
    #[serde(rename = "resourceName")]
    pub resource: String,
    /// `true` when a device plugin other than KubeVirt's serves the resource.
    #[serde(
        rename = "externalResourceProvider",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external: Option<bool>,
}

/// `v1.PciHostDevice`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciHostDevice {
    /// `vendor:device`, lower-case hexadecimal, as the function's `uevent` `PCI_ID` says.
    #[serde(rename = "pciVendorSelector")]
    pub selector: String,
    /// The extended resource VMs ask for.
    #[serde(rename = "resourceName")]
    pub resource: String,
    /// `true` when a device plugin other than KubeVirt's serves the resource.
    #[serde(
        rename = "externalResourceProvider",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external: Option<bool>,
}

/// A Harvester object: `SRIOVGPUDevice` or `VGPUDevice`, cluster-scoped, named
/// `<node>-<address without : and .>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvesterObject {
    /// `devices.harvesterhci.io/v1beta1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `SRIOVGPUDevice` or `VGPUDevice`.
    pub kind: String,
    /// Its name.
    pub metadata: Metadata,
    /// What Harvester makes of the device.
    pub spec: HarvesterSpec,
}

/// The spec of a Harvester GPU object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvesterSpec {
    /// The function's PCI address.
    pub address: String,
    /// The node it is on.
    #[serde(rename = "nodeName")]
    pub node_name: String,
    /// SR-IOV on (a PF), or the vGPU type set (a VF).
    pub enabled: bool,
    /// A VF's vGPU type, by name.
    #[serde(
        rename = "vGPUTypeName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub vgpu_type_name: Option<String>,
    /// A VF's PF.
    #[serde(
        rename = "parentGPUDeviceAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub parent: Option<String>,
}
