//! Who holds which vGPU: every vGPU of the host mapped to the domains whose live or
//! persistent configuration references it, and the references to devices the host does not
//! have as vGPUs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;
use vgpu_model::pci::PciAddress;
use vgpu_model::{Inventory, VgpuHandle};

use crate::hostdev::{Attached, host_vgpus};
use crate::xml::Tenant;
pub use vgpu_model::holder::Holder;

/// A domain (a guest), defined, running, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Domain {
    /// Its name.
    pub name: String,
    /// Its UUID.
    pub uuid: Uuid,
    /// Whether it runs.
    pub running: bool,
}

/// Who holds which vGPU: the answer of `vgpu_libvirt::Connection::owners`, and what
/// `vgpuctl-libvirt owners --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owners {
    /// Every vGPU of the inventory, by GPU then id, with the domains that hold it (none for an
    /// orphan).
    pub vgpus: Vec<Owned>,
    /// Hostdevs (mdev or PCI) that domains reference but that are not vGPUs on the host (a
    /// mediated device that no longer exists, a VF that is empty or gone, or a PCI device
    /// assigned whole), by domain then device.
    pub missing: Vec<Reference>,
}

/// One vGPU of the host and its holders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owned {
    /// The vGPU.
    pub id: VgpuHandle,
    /// Its physical GPU.
    pub gpu: PciAddress,
    /// Its type id (`nvidia-222`, `1145`, `vf` for a plain VF).
    #[serde(rename = "type")]
    pub type_id: String,
    /// Its type's name, as the inventory given to [`Owners::build`] states it
    /// ([`Inventory::type_name`]); `None` when no source names it.
    pub type_name: Option<String>,
    /// The domains that reference it, by name; empty for an orphan.
    pub holders: Vec<Hold>,
}

/// A domain that references a vGPU, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The domain and its tenant: the one a domain's metadata names (its live XML when it
    /// runs, else its persistent XML).
    #[serde(flatten)]
    pub holder: Holder,
    /// Whether the domain runs.
    pub running: bool,
    /// Referenced by the running guest.
    pub live: bool,
    /// Referenced by the persistent definition.
    pub config: bool,
    /// Whether Nova manages the domain (its metadata has `<nova:instance>`).
    #[serde(default)]
    pub nova: bool,
}

/// A device a domain references that is not a vGPU on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// The domain's name.
    pub domain: String,
    /// The device.
    pub device: VgpuHandle,
    /// Referenced by the running guest.
    pub live: bool,
    /// Referenced by the persistent definition.
    pub config: bool,
}

/// What one domain holds.
#[derive(Debug, Clone)]
pub struct DomainDevices {
    /// The domain.
    pub domain: Domain,
    /// Its hostdevs, live and persistent merged per device.
    pub devices: Vec<Attached>,
    /// The tenant its metadata names.
    pub tenant: Option<Tenant>,
    /// Whether Nova manages it (its metadata has `<nova:instance>`).
    pub nova: bool,
}

impl Owners {
    /// Maps every vGPU of `inventory` to the domains that hold it; the hostdevs that are not
    /// vGPUs of `inventory` are its `missing`.
    pub fn build(inventory: &Inventory, domains: &[DomainDevices]) -> Owners {
        let mut vgpus: Vec<Owned> = host_vgpus(inventory)
            .into_iter()
            .map(|v| Owned {
                id: v.id,
                gpu: v.gpu,
                type_name: inventory.type_name(v.gpu, &v.type_id).map(str::to_owned),
                type_id: v.type_id,
                holders: Vec::new(),
            })
            .collect();
        vgpus.sort_by_key(|v| (v.gpu, v.id));
        let index: BTreeMap<VgpuHandle, usize> =
            vgpus.iter().enumerate().map(|(i, v)| (v.id, i)).collect();

        let mut missing = Vec::new();
        for entry in domains {
            for device in &entry.devices {
                match index.get(&device.device) {
                    Some(&i) => vgpus[i].holders.push(Hold {
                        holder: Holder {
                            domain: entry.domain.name.clone(),
                            uuid: entry.domain.uuid,
                            tenant: entry.tenant.clone(),
                        },
                        running: entry.domain.running,
                        live: device.live,
                        config: device.config,
                        nova: entry.nova,
                    }),
                    None => missing.push(Reference {
                        domain: entry.domain.name.clone(),
                        device: device.device,
                        live: device.live,
                        config: device.config,
                    }),
                }
            }
        }
        for vgpu in &mut vgpus {
            vgpu.holders.sort_by(|a, b| {
                (&a.holder.domain, a.holder.uuid).cmp(&(&b.holder.domain, b.holder.uuid))
            });
        }
        missing.sort_by(|a, b| (&a.domain, a.device).cmp(&(&b.domain, b.device)));
        Owners { vgpus, missing }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostdev::HostdevKind;
    use vgpu_model::{Backend, Gpu, Vgpu};

    const A: Uuid = Uuid::from_u128(0xa);
    const B: Uuid = Uuid::from_u128(0xb);
    const GONE: Uuid = Uuid::from_u128(0xdead);

    fn address(text: &str) -> PciAddress {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn inventory() -> Inventory {
        let parent = address("0000:3b:00.0");
        let vgpus = [B, A]
            .into_iter()
            .map(|id| Vgpu {
                placement: None,
                id: VgpuHandle::Mdev(id),
                type_id: "nvidia-222".to_owned(),
                parent,
            })
            .collect();
        Inventory {
            gpus: vec![Gpu {
                vgpus,
                ..Gpu::new(parent, Backend::Mdev)
            }],
            warnings: Vec::new(),
        }
    }

    fn domain(name: &str, running: bool, devices: &[(Uuid, bool, bool)]) -> DomainDevices {
        DomainDevices {
            domain: Domain {
                name: name.to_owned(),
                uuid: Uuid::from_u128(name.len() as u128),
                running,
            },
            devices: devices
                .iter()
                .map(|&(id, live, config)| Attached {
                    device: VgpuHandle::Mdev(id),
                    kind: HostdevKind::Mdev,
                    live,
                    config,
                })
                .collect(),
            tenant: None,
            nova: false,
        }
    }

    #[test]
    fn build_orphan_has_no_holders_and_vgpus_are_sorted() {
        let owners = Owners::build(&inventory(), &[]);
        assert_eq!(
            owners
                .vgpus
                .iter()
                .map(|v| (v.id, v.holders.len()))
                .collect::<Vec<_>>(),
            vec![(VgpuHandle::Mdev(A), 0), (VgpuHandle::Mdev(B), 0)]
        );
    }

    #[test]
    fn build_holders_are_sorted_by_domain() {
        let owners = Owners::build(
            &inventory(),
            &[
                domain("zeta", true, &[(A, true, false)]),
                domain("alpha", false, &[(A, false, true)]),
            ],
        );
        assert_eq!(
            owners.vgpus[0].holders,
            vec![
                Hold {
                    holder: Holder {
                        domain: "alpha".to_owned(),
                        uuid: Uuid::from_u128(5),
                        tenant: None,
                    },
                    running: false,
                    live: false,
                    config: true,
                    nova: false,
                },
                Hold {
                    holder: Holder {
                        domain: "zeta".to_owned(),
                        uuid: Uuid::from_u128(4),
                        tenant: None,
                    },
                    running: true,
                    live: true,
                    config: false,
                    nova: false,
                },
            ]
        );
    }

    #[test]
    fn build_reference_to_absent_device_is_missing() {
        let owners = Owners::build(&inventory(), &[domain("vm", false, &[(GONE, false, true)])]);
        assert_eq!(
            owners.missing,
            vec![Reference {
                domain: "vm".to_owned(),
                device: VgpuHandle::Mdev(GONE),
                live: false,
                config: true
            }]
        );
    }
}
