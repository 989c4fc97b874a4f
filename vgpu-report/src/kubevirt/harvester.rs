//! Harvester's own objects for a host (`devices.harvesterhci.io/v1beta1`, harvester/pcidevices):
//! Harvester reverts sysfs changes it did not make, so on Harvester the host is driven through
//! them.
//!
//! | object | one per | spec |
//! |---|---|---|
//! | `SRIOVGPUDevice` | NVIDIA PF with VFs enabled | `address`, `nodeName`, `enabled: true` |
//! | `VGPUDevice` | VF holding a vGPU type | as above, `vGPUTypeName`, `parentGPUDeviceAddress` |
//!
//! Whole GPUs and plain VFs are Harvester's `PCIDevice` objects, which its controller makes
//! itself. Mdevs on a PF (Turing, Intel GVT-g) have no Harvester object.

use super::{Host, held_note, objects::HarvesterObject, objects::HarvesterSpec, objects::Metadata};
use crate::model::{Backend, VgpuHandle, pci::PciAddress};

/// The API group and version of the objects.
const API_VERSION: &str = "devices.harvesterhci.io/v1beta1";

/// Harvester's name for the object of `address` on `node`: `<node>-<address without : and .>`.
pub fn object_name(node: &str, address: PciAddress) -> String {
    format!("{node}-{}", address.to_string().replace([':', '.'], ""))
}

fn object(kind: &str, node: &str, address: PciAddress, spec: HarvesterSpec) -> HarvesterObject {
    HarvesterObject {
        api_version: API_VERSION.to_owned(),
        kind: kind.to_owned(),
        metadata: Metadata {
            name: object_name(node, address),
            namespace: None,
        },
        spec,
    }
}

/// The objects of `host`, and warnings for what they leave out.
pub(crate) fn objects(host: &Host<'_>, warnings: &mut Vec<String>) -> Vec<HarvesterObject> {
    let mut out = Vec::new();
    for gpu in &host.inventory.gpus {
        if gpu.driver.as_deref() == Some("vfio-pci") {
            warnings.push(format!(
                "{}: passed through whole: Harvester's own PCIDevice object serves it",
                gpu.address
            ));
        }
        match gpu.backend {
            Backend::NvidiaVfio | Backend::VfMdev if !gpu.vfs.is_empty() => {
                out.push(object(
                    "SRIOVGPUDevice",
                    host.node,
                    gpu.address,
                    HarvesterSpec {
                        address: gpu.address.to_string(),
                        node_name: host.node.to_owned(),
                        enabled: true,
                        vgpu_type_name: None,
                        parent: None,
                    },
                ));
                for vf in &gpu.vfs {
                    let Some(type_id) = vf.vgpu_type.as_deref() else {
                        continue;
                    };
                    if let Some(domain) = host.held.get(&VgpuHandle::Vf(vf.address)) {
                        warnings.push(held_note(VgpuHandle::Vf(vf.address), domain));
                        continue;
                    }
                    let name = host
                        .inventory
                        .type_name(vf.address, type_id)
                        .unwrap_or(type_id);
                    out.push(object(
                        "VGPUDevice",
                        host.node,
                        vf.address,
                        HarvesterSpec {
                            address: vf.address.to_string(),
                            node_name: host.node.to_owned(),
                            enabled: true,
                            vgpu_type_name: Some(name.to_owned()),
                            parent: Some(gpu.address.to_string()),
                        },
                    ));
                }
            }
            Backend::Mdev if !gpu.vgpus.is_empty() => warnings.push(format!(
                "{}: its mdevs sit on the PF, and Harvester has no object for them",
                gpu.address
            )),
            Backend::Sriov if gpu.guest_vfs().next().is_some() => warnings.push(format!(
                "{}: its VFs on vfio-pci are Harvester's own PCIDevice objects",
                gpu.address
            )),
            _ => {}
        }
    }
    out
}
