//! The `<hostdev>` elements that assign vGPUs to domains, and the vGPUs of an inventory that
//! can be assigned.

use serde::Serialize;
use vgpu_model::pci::PciAddress;
use vgpu_model::{Backend, Inventory, PLAIN_VF_TYPE, VgpuHandle};

use crate::error::{Error, Result};

/// How a vGPU is assigned to a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostdevKind {
    /// A mediated device: `<hostdev type='mdev' model='vfio-pci'>`.
    Mdev,
    /// A VF holding an NVIDIA vendor-VFIO vGPU: `<hostdev type='pci' managed='no'>`, since
    /// the VF must stay on NVIDIA's driver, which does the VFIO part itself.
    VendorVf,
    /// A plain SR-IOV VF assigned whole: `<hostdev type='pci' managed='yes'>`, libvirt binding
    /// it to `vfio-pci` while the guest runs.
    PlainVf,
}

/// Where a hostdev sits on the guest's PCI bus (`<address type='pci' …/>` of the hostdev).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct GuestAddress {
    /// PCI domain in the guest.
    pub domain: u16,
    /// Bus.
    pub bus: u8,
    /// Slot.
    pub slot: u8,
    /// Function.
    pub function: u8,
}

/// Which of a domain's configurations an attach or detach changes.
///
/// `live` is the running guest (`VIR_DOMAIN_AFFECT_LIVE`), `config` the persistent
/// definition used at its next start (`VIR_DOMAIN_AFFECT_CONFIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Scope {
    /// The running guest.
    pub live: bool,
    /// The persistent definition.
    pub config: bool,
}

impl Scope {
    /// Both configurations of a running domain, the persistent one of a domain that is not
    /// running (where libvirt refuses `live`).
    pub fn default_for(running: bool) -> Scope {
        Scope {
            live: running,
            config: true,
        }
    }
}

/// A vGPU as a domain's `<hostdev>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hostdev {
    /// The vGPU.
    pub device: VgpuHandle,
    /// How it is assigned; must agree with `device` (an mdev UUID for [`HostdevKind::Mdev`], a
    /// PCI address otherwise).
    pub kind: HostdevKind,
    /// Whether the mdev's display is used (`display='on'`); mdevs only.
    pub display: bool,
    /// Where the guest sees it; libvirt picks a free slot when `None`.
    pub guest_address: Option<GuestAddress>,
}

/// A hostdev a domain holds, in one or both of its configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Attached {
    /// The device.
    pub device: VgpuHandle,
    /// Its kind, as the domain XML states it.
    pub kind: HostdevKind,
    /// In the running guest.
    pub live: bool,
    /// In the persistent definition.
    pub config: bool,
}

/// A vGPU of the host, as assignment sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostVgpu {
    pub(crate) id: VgpuHandle,
    pub(crate) gpu: PciAddress,
    pub(crate) type_id: String,
    pub(crate) kind: HostdevKind,
}

/// Every vGPU of `inventory` a guest can be given: its mediated devices, the VFs holding an
/// NVIDIA vendor-VFIO type, and the VFs of plain SR-IOV GPUs bound to `vfio-pci`.
pub(crate) fn host_vgpus(inventory: &Inventory) -> Vec<HostVgpu> {
    let mut found = Vec::new();
    for gpu in &inventory.gpus {
        for vgpu in &gpu.vgpus {
            let kind = match vgpu.id {
                VgpuHandle::Mdev(_) => HostdevKind::Mdev,
                VgpuHandle::Vf(_) if gpu.backend == Backend::NvidiaVfio => HostdevKind::VendorVf,
                VgpuHandle::Vf(_) => continue,
            };
            found.push(HostVgpu {
                id: vgpu.id,
                gpu: gpu.address,
                type_id: vgpu.type_id.clone(),
                kind,
            });
        }
        for vf in gpu.guest_vfs() {
            found.push(HostVgpu {
                id: VgpuHandle::Vf(vf.address),
                gpu: gpu.address,
                type_id: PLAIN_VF_TYPE.to_owned(),
                kind: HostdevKind::PlainVf,
            });
        }
    }
    found
}

impl Hostdev {
    /// The hostdev for vGPU `id` of `inventory`: a mediated device is a
    /// [`HostdevKind::Mdev`], a VF holding an NVIDIA vendor-VFIO type (its GPU's backend is
    /// [`Backend::NvidiaVfio`]) a [`HostdevKind::VendorVf`], a VF of a plain SR-IOV GPU
    /// ([`Backend::Sriov`]) bound to `vfio-pci` a [`HostdevKind::PlainVf`]. The display is off
    /// and libvirt picks the guest address.
    ///
    /// # Errors
    ///
    /// [`Error::NotAVgpu`] for anything else: a device not in the inventory, an empty VF, a VF
    /// carrying a mediated device (assign the mdev), a plain VF not bound to `vfio-pci`.
    pub fn for_vgpu(inventory: &Inventory, id: VgpuHandle) -> Result<Hostdev> {
        let vgpu = host_vgpus(inventory)
            .into_iter()
            .find(|v| v.id == id)
            .ok_or_else(|| Error::NotAVgpu {
                device: id.to_string(),
            })?;
        Ok(Hostdev {
            device: id,
            kind: vgpu.kind,
            display: false,
            guest_address: None,
        })
    }

    /// The `<hostdev>` element, as libvirt's domain XML format has it
    /// (<https://libvirt.org/formatdomain.html#host-device-assignment>):
    ///
    /// - mdev: `<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='off'>` with
    ///   `<source><address uuid='…'/></source>`;
    /// - [`HostdevKind::VendorVf`]: `<hostdev mode='subsystem' type='pci' managed='no'>`,
    ///   [`HostdevKind::PlainVf`]: the same with `managed='yes'`, each with
    ///   `<source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source>`;
    ///
    /// followed by `<address type='pci' …/>` when a guest address is set.
    pub fn to_xml(&self) -> String {
        let head = match self.kind {
            HostdevKind::Mdev => format!(
                "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='{}'>",
                if self.display { "on" } else { "off" }
            ),
            HostdevKind::VendorVf => {
                "<hostdev mode='subsystem' type='pci' managed='no'>".to_owned()
            }
            HostdevKind::PlainVf => {
                "<hostdev mode='subsystem' type='pci' managed='yes'>".to_owned()
            }
        };
        let source = source_address(self.device);
        let guest = self.guest_address.map_or_else(String::new, |a| {
            format!(
                "<address type='pci' domain='{:#06x}' bus='{:#04x}' slot='{:#04x}' function='{:#x}'/>",
                a.domain, a.bus, a.slot, a.function
            )
        });
        format!("{head}<source>{source}</source>{guest}</hostdev>")
    }
}

/// The `<address>` of a hostdev's `<source>` that names `device`, as libvirt writes it.
pub(crate) fn source_address(device: VgpuHandle) -> String {
    match device {
        VgpuHandle::Mdev(uuid) => format!("<address uuid='{uuid}'/>"),
        VgpuHandle::Vf(address) => format!(
            "<address domain='{:#06x}' bus='{:#04x}' slot='{:#04x}' function='{:#x}'/>",
            address.domain(),
            address.bus(),
            address.device(),
            address.function()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;
    use vgpu_model::{Gpu, Vf, Vgpu};

    const MDEV: Uuid = Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000001);

    fn address(text: &str) -> PciAddress {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn gpu(addr: &str, backend: Backend) -> Gpu {
        Gpu::new(address(addr), backend)
    }

    fn vf(addr: &str, driver: &str) -> Vf {
        Vf {
            address: address(addr),
            driver: Some(driver.to_owned()),
            iommu_group: None,
            vgpu_type: None,
            memory_mib: None,
        }
    }

    fn inventory() -> Inventory {
        let mut t4 = gpu("0000:3b:00.0", Backend::Mdev);
        t4.vgpus.push(Vgpu {
            placement: None,
            id: VgpuHandle::Mdev(MDEV),
            type_id: "nvidia-222".to_owned(),
            parent: address("0000:3b:00.0"),
        });
        let mut l40s = gpu("0000:41:00.0", Backend::NvidiaVfio);
        l40s.vfs.push(vf("0000:41:00.4", "nvidia"));
        l40s.vfs.push(vf("0000:41:00.5", "nvidia"));
        l40s.vgpus.push(Vgpu {
            placement: None,
            id: VgpuHandle::Vf(address("0000:41:00.4")),
            type_id: "1145".to_owned(),
            parent: address("0000:41:00.0"),
        });
        let mut flex = gpu("0000:4d:00.0", Backend::Sriov);
        flex.vfs.push(vf("0000:4d:00.1", "vfio-pci"));
        flex.vfs.push(vf("0000:4d:00.2", "i915"));
        Inventory {
            gpus: vec![t4, l40s, flex],
            warnings: Vec::new(),
        }
    }

    fn kind_of(id: VgpuHandle) -> Result<HostdevKind> {
        Hostdev::for_vgpu(&inventory(), id).map(|h| h.kind)
    }

    #[test]
    fn for_vgpu_mdev_is_mdev() {
        assert_eq!(
            kind_of(VgpuHandle::Mdev(MDEV)).ok(),
            Some(HostdevKind::Mdev)
        );
    }

    #[test]
    fn for_vgpu_vendor_vfio_vf_is_vendor_vf() {
        assert_eq!(
            kind_of(VgpuHandle::Vf(address("0000:41:00.4"))).ok(),
            Some(HostdevKind::VendorVf)
        );
    }

    #[test]
    fn for_vgpu_sriov_vf_on_vfio_pci_is_plain_vf() {
        assert_eq!(
            kind_of(VgpuHandle::Vf(address("0000:4d:00.1"))).ok(),
            Some(HostdevKind::PlainVf)
        );
    }

    #[test]
    fn for_vgpu_sriov_vf_on_host_driver_is_not_a_vgpu() {
        assert!(matches!(
            kind_of(VgpuHandle::Vf(address("0000:4d:00.2"))),
            Err(Error::NotAVgpu { device }) if device == "0000:4d:00.2"
        ));
    }

    #[test]
    fn for_vgpu_empty_vendor_vf_is_not_a_vgpu() {
        assert!(matches!(
            kind_of(VgpuHandle::Vf(address("0000:41:00.5"))),
            Err(Error::NotAVgpu { .. })
        ));
    }

    #[test]
    fn for_vgpu_unknown_mdev_is_not_a_vgpu() {
        assert!(matches!(
            kind_of(VgpuHandle::Mdev(Uuid::nil())),
            Err(Error::NotAVgpu { .. })
        ));
    }

    #[test]
    fn host_vgpus_lists_every_kind_with_gpu_and_type() {
        let found: Vec<(String, String, String, HostdevKind)> = host_vgpus(&inventory())
            .into_iter()
            .map(|v| (v.id.to_string(), v.gpu.to_string(), v.type_id, v.kind))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    MDEV.to_string(),
                    "0000:3b:00.0".to_owned(),
                    "nvidia-222".to_owned(),
                    HostdevKind::Mdev
                ),
                (
                    "0000:41:00.4".to_owned(),
                    "0000:41:00.0".to_owned(),
                    "1145".to_owned(),
                    HostdevKind::VendorVf
                ),
                (
                    "0000:4d:00.1".to_owned(),
                    "0000:4d:00.0".to_owned(),
                    "vf".to_owned(),
                    HostdevKind::PlainVf
                ),
            ]
        );
    }

    #[test]
    fn to_xml_mdev_without_guest_address() {
        let hostdev = Hostdev {
            device: VgpuHandle::Mdev(MDEV),
            kind: HostdevKind::Mdev,
            display: false,
            guest_address: None,
        };
        assert_eq!(
            hostdev.to_xml(),
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='off'><source><address uuid='c0ffee00-0000-4000-8000-000000000001'/></source></hostdev>"
        );
    }

    #[test]
    fn to_xml_mdev_with_display_and_guest_address() {
        let hostdev = Hostdev {
            device: VgpuHandle::Mdev(MDEV),
            kind: HostdevKind::Mdev,
            display: true,
            guest_address: Some(GuestAddress {
                domain: 0,
                bus: 0,
                slot: 5,
                function: 0,
            }),
        };
        assert_eq!(
            hostdev.to_xml(),
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='on'><source><address uuid='c0ffee00-0000-4000-8000-000000000001'/></source><address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/></hostdev>"
        );
    }

    #[test]
    fn to_xml_vendor_vf_is_unmanaged_pci() {
        let hostdev = Hostdev {
            device: VgpuHandle::Vf(address("0000:41:00.4")),
            kind: HostdevKind::VendorVf,
            display: false,
            guest_address: None,
        };
        assert_eq!(
            hostdev.to_xml(),
            "<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/></source></hostdev>"
        );
    }

    #[test]
    fn to_xml_plain_vf_is_managed_pci() {
        let hostdev = Hostdev {
            device: VgpuHandle::Vf(address("0001:4d:1f.7")),
            kind: HostdevKind::PlainVf,
            display: false,
            guest_address: None,
        };
        assert_eq!(
            hostdev.to_xml(),
            "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0001' bus='0x4d' slot='0x1f' function='0x7'/></source></hostdev>"
        );
    }

    #[test]
    fn to_xml_is_read_back_by_the_parser() {
        let hostdev = Hostdev {
            device: VgpuHandle::Vf(address("0000:41:00.4")),
            kind: HostdevKind::VendorVf,
            display: false,
            guest_address: None,
        };
        let xml = format!("<domain><devices>{}</devices></domain>", hostdev.to_xml());
        let found = crate::xml::hostdevs(&xml)
            .map(|v| v.iter().map(|h| (h.device, h.kind)).collect::<Vec<_>>());
        assert_eq!(found.ok(), Some(vec![(hostdev.device, hostdev.kind)]));
    }

    #[test]
    fn scope_default_for_stopped_is_config_only() {
        assert_eq!(
            Scope::default_for(false),
            Scope {
                live: false,
                config: true
            }
        );
    }

    #[test]
    fn scope_default_for_running_is_both() {
        assert_eq!(
            Scope::default_for(true),
            Scope {
                live: true,
                config: true
            }
        );
    }
}
