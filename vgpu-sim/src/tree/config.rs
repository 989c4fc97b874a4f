//! A PCI function's `config` (`pci_read_config`, `drivers/pci/pci-sysfs.c`): its configuration
//! space, 4096 bytes as a PCI Express function has, built from the same state as `vendor`,
//! `device`, `class`, `revision`, `subsystem_*` and the SR-IOV files.
//!
//! Layout (PCI Local Bus 3.0 §6.1, PCI-to-PCI Bridge 1.2 §3.2, PCI Express Base §7.5 and
//! §9.3.3 for SR-IOV), what libvirt's `src/util/virpci.c` reads from it:
//! * the header: ids, command (memory space and bus master while a driver is bound; a VF's
//!   memory-space bit is hard-wired to 0), status with the capability-list bit, revision, class,
//!   header type (1 for a PCI bridge, bit 7 when another function shares the slot), for an
//!   endpoint the subsystem ids at 0x2c, for a bridge its primary, secondary and subordinate
//!   bus numbers, capabilities pointer 0x40, interrupt pin INTA except on VFs;
//! * at 0x40 the PCI Express capability (version 2): a root port (type 4) for a bridge on the
//!   root bus, a root-complex integrated endpoint (type 9) for another function there (the
//!   iGPU), an endpoint (type 0) below a bridge; Function Level Reset in Device Capabilities
//!   when `reset_method` supports `flr`; link capabilities and status 16 GT/s x16 (port number
//!   the slot on a root port);
//! * for a bridge, at 0x80 the subsystem vendor capability (id 0x0d) with its subsystem ids;
//! * at 0x100, for a PF, the SR-IOV extended capability: TotalVFs and InitialVFs as the device
//!   has them, NumVFs, VF Enable and VF MSE while VFs exist, the function dependency link,
//!   First VF Offset, VF Stride, VF Device ID, supported page sizes 0x553 and system page
//!   size 1 (4 KiB). Other functions have no extended capability (a zero header).
//!
//! Deviations: BARs, expansion ROM and interrupt line read 0 (the simulator has no resources);
//! the link is 16 GT/s x16 on every device. A reader without `CAP_SYS_ADMIN` gets the first 64
//! bytes only (`pci_read_config`); the FUSE layer applies that cut.

use crate::kernel::{Dev, Kernel};

/// Bytes of a PCI Express function's configuration space.
pub(crate) const CONFIG_SIZE: usize = 4096;
/// What `pci_read_config` gives a reader without `CAP_SYS_ADMIN`.
pub(crate) const UNPRIVILEGED_CONFIG_SIZE: usize = 64;

const PCIE_CAP: usize = 0x40;
const SSVID_CAP: usize = 0x80;
const SRIOV_CAP: usize = 0x100;

/// Link speed code of 16 GT/s (PCI Express Base §7.5.3.6).
const LINK_SPEED_16GT: u32 = 4;
const LINK_WIDTH: u32 = 16;

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn is_bridge(d: &Dev) -> bool {
    d.class >> 8 == 0x0604
}

impl Kernel {
    /// The configuration space of `d` now.
    pub(crate) fn config_space(&self, d: &Dev) -> Vec<u8> {
        let mut b = vec![0u8; CONFIG_SIZE];
        let bridge = is_bridge(d);
        let vf = d.physfn.is_some();
        put16(&mut b, 0x00, d.vendor);
        put16(&mut b, 0x02, d.device);
        let command: u16 = match (d.driver.is_some(), vf) {
            (false, _) => 0,
            (true, false) => 0x0006,
            (true, true) => 0x0004,
        };
        put16(&mut b, 0x04, command);
        put16(&mut b, 0x06, 0x0010);
        b[0x08] = d.revision;
        b[0x09..0x0c].copy_from_slice(&d.class.to_le_bytes()[..3]);
        let multi = !vf
            && self.devs.values().any(|o| {
                o.addr != d.addr
                    && o.physfn.is_none()
                    && (o.addr.domain, o.addr.bus, o.addr.slot)
                        == (d.addr.domain, d.addr.bus, d.addr.slot)
            });
        b[0x0e] = u8::from(bridge) | if multi { 0x80 } else { 0 };
        if bridge {
            let (secondary, subordinate) = self.buses_below(d);
            b[0x18] = d.addr.bus;
            b[0x19] = secondary;
            b[0x1a] = subordinate;
        } else {
            put16(&mut b, 0x2c, d.sub_vendor);
            put16(&mut b, 0x2e, d.sub_device);
        }
        b[0x34] = PCIE_CAP as u8;
        b[0x3d] = u8::from(!vf);

        let on_root_bus = d.dir.matches('/').count() <= 1;
        let port_type: u16 = match (bridge, on_root_bus) {
            (true, _) => 4,
            (false, true) => 9,
            (false, false) => 0,
        };
        b[PCIE_CAP] = 0x10;
        b[PCIE_CAP + 1] = if bridge { SSVID_CAP as u8 } else { 0 };
        let slot_implemented = if bridge { 0x0100 } else { 0 };
        put16(
            &mut b,
            PCIE_CAP + 2,
            0x0002 | (port_type << 4) | slot_implemented,
        );
        let flr = d.reset_methods.split_whitespace().any(|m| m == "flr");
        put32(&mut b, PCIE_CAP + 4, 0x1 | (u32::from(flr) << 28));
        if port_type != 9 {
            let port = if bridge { u32::from(d.addr.slot) } else { 0 };
            let link = LINK_SPEED_16GT | (LINK_WIDTH << 4);
            put32(&mut b, PCIE_CAP + 0x0c, (port << 24) | link);
            put16(&mut b, PCIE_CAP + 0x12, link as u16);
        }
        if bridge {
            b[SSVID_CAP] = 0x0d;
            put16(&mut b, SSVID_CAP + 4, d.sub_vendor);
            put16(&mut b, SSVID_CAP + 6, d.sub_device);
        }
        if let Some((spec, num)) = &d.sriov {
            put32(&mut b, SRIOV_CAP, 0x0010 | (1 << 16));
            put16(&mut b, SRIOV_CAP + 0x08, if *num > 0 { 0x0009 } else { 0 });
            put16(&mut b, SRIOV_CAP + 0x0c, spec.total_vfs);
            put16(&mut b, SRIOV_CAP + 0x0e, spec.total_vfs);
            put16(&mut b, SRIOV_CAP + 0x10, *num);
            b[SRIOV_CAP + 0x12] = d.addr.function;
            put16(&mut b, SRIOV_CAP + 0x14, spec.offset);
            put16(&mut b, SRIOV_CAP + 0x16, spec.stride);
            put16(&mut b, SRIOV_CAP + 0x1a, spec.vf_device);
            put32(&mut b, SRIOV_CAP + 0x1c, 0x553);
            put32(&mut b, SRIOV_CAP + 0x20, 1);
        }
        b
    }

    /// A bridge's secondary and subordinate bus numbers: the lowest bus of the functions
    /// directly below it and the highest of all below it (0 and 0 when there are none).
    fn buses_below(&self, bridge: &Dev) -> (u8, u8) {
        let prefix = format!("{}/", bridge.dir);
        let below = || {
            self.devs
                .values()
                .filter(|o| o.dir.starts_with(&prefix) && o.addr.domain == bridge.addr.domain)
        };
        let direct = below()
            .filter(|o| !o.dir[prefix.len()..].contains('/'))
            .map(|o| o.addr.bus)
            .min();
        let deepest = below().map(|o| o.addr.bus).max();
        (direct.unwrap_or(0), deepest.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::Kernel;
    use crate::profile::{PciAddr, Profile};

    fn config(profile: &str, addr: &str) -> Vec<u8> {
        let k = Kernel::boot(Profile::builtin(profile).expect("profile"));
        let a: PciAddr = addr.parse().expect("address");
        k.config_space(&k.devs[&a])
    }

    #[test]
    fn config_l40s_pf_header_matches_sysfs_ids() {
        let c = config("l40s-vendor-vfio", "0000:41:00.0");
        assert_eq!(
            &c[..0x10],
            &[
                0xde, 0x10, 0xb9, 0x26, 0x06, 0x00, 0x10, 0x00, 0x00, 0x00, 0x02, 0x03, 0x00, 0x00,
                0x00, 0x00
            ]
        );
    }

    #[test]
    fn config_l40s_pf_subsystem_ids_at_0x2c() {
        let c = config("l40s-vendor-vfio", "0000:41:00.0");
        assert_eq!(&c[0x2c..0x30], &[0xde, 0x10, 0x51, 0x18]);
    }

    #[test]
    fn config_l40s_pf_pcie_endpoint_with_flr_and_link() {
        let c = config("l40s-vendor-vfio", "0000:41:00.0");
        assert_eq!(
            (c[0x34], &c[0x40..0x48], &c[0x4c..0x50], &c[0x52..0x54]),
            (
                0x40,
                &[0x10, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x10][..],
                &[0x04, 0x01, 0x00, 0x00][..],
                &[0x04, 0x01][..]
            )
        );
    }

    #[test]
    fn config_l40s_pf_sriov_capability_with_32_vfs_enabled() {
        let c = config("l40s-vendor-vfio", "0000:41:00.0");
        assert_eq!(
            &c[0x100..0x124],
            &[
                0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x20, 0x00,
                0x20, 0x00, 0x20, 0x00, 0x00, 0x00, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0xb9, 0x26,
                0x53, 0x05, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00
            ]
        );
    }

    #[test]
    fn config_vf_has_no_interrupt_pin_nor_memory_enable() {
        let c = config("l40s-vendor-vfio", "0000:41:00.4");
        assert_eq!(
            (c[0x04], c[0x3d], &c[0x100..0x104]),
            (0x04, 0, &[0u8; 4][..])
        );
    }

    #[test]
    fn config_root_port_is_type_1_header_with_bus_numbers() {
        let c = config("l40s-vendor-vfio", "0000:40:01.1");
        assert_eq!(
            (c[0x0e], &c[0x18..0x1b], c[0x42], c[0x4f]),
            (0x01, &[0x40, 0x41, 0x41][..], 0x42, 0x01)
        );
    }

    #[test]
    fn config_igpu_is_root_complex_integrated_without_link() {
        let c = config("gvtg", "0000:00:02.0");
        assert_eq!((c[0x42], &c[0x4c..0x50]), (0x92, &[0u8; 4][..]));
    }

    #[test]
    fn config_gpu_with_audio_function_is_multifunction() {
        let c = config("mixed", "0000:af:00.0");
        assert_eq!(c[0x0e], 0x80);
    }

    #[test]
    fn config_is_4096_bytes() {
        assert_eq!(config("t4-legacy", "0000:3b:00.0").len(), 4096);
    }
}
