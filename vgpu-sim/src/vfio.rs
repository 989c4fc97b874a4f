//! VFIO device registrations (`drivers/vfio/vfio_main.c`, `group.c`, `device_cdev.c`): the
//! registered functions and mdevs, and the index `N` of each one's character device `vfio<N>`
//! (`/dev/vfio/devices/vfio<N>`, `<device>/vfio-dev/vfio<N>`). The node numbers and names are
//! here too. Which devices register is the kernel's to say (`kernel/register.rs`); this module
//! knows nothing of the kernel.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::control::glob_match;
use crate::profile::PciAddr;

/// Major number of the VFIO device cdevs (`vfio.device_devt`; dynamic in the kernel).
pub(crate) const CDEV_MAJOR: u32 = 511;
/// Major number of the VFIO group nodes (`vfio.group_devt`; dynamic in the kernel).
pub(crate) const GROUP_MAJOR: u32 = 243;
/// The container `/dev/vfio/vfio`: misc device 10:196 (`VFIO_MINOR`).
pub(crate) const CONTAINER_MAJOR: u32 = 10;
/// See [`CONTAINER_MAJOR`].
pub(crate) const CONTAINER_MINOR: u32 = 196;

/// The kernel's `new_encode_dev`, which FUSE's `rdev` uses (`new_decode_dev` in
/// `fs/fuse/inode.c`): minors up to 2^20 - 1 survive.
pub(crate) fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Whether a PCI driver is a VFIO PCI driver (`vfio-pci` or a variant driver such as
/// `mlx5_vfio_pci`, `nvgrace-gpu-vfio-pci`): its bound devices are VFIO devices.
pub(crate) fn is_vfio_pci_driver(driver: &str) -> bool {
    glob_match("*vfio*pci", driver)
}

/// What a VFIO device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum VfioKey {
    /// A PCI function (bound to a VFIO PCI driver, or an NVIDIA vendor-VFIO VF with a vGPU).
    Pci(PciAddr),
    /// A mediated device.
    Mdev(Uuid),
}

/// One registered VFIO device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VfioDev {
    /// `N` of `vfio<N>`, also the cdev's minor.
    pub(crate) index: u32,
    /// Its IOMMU group (`/dev/vfio/<group>`).
    pub(crate) group: u32,
}

/// The registered VFIO devices. Indexes come from the kernel's `vfio.device_ida`: the lowest
/// free number when a device registers, given back when it unregisters.
#[derive(Clone, Debug, Default)]
pub(crate) struct VfioNodes {
    devices: BTreeMap<VfioKey, VfioDev>,
    /// The sysfs directory each device had when it registered (for its removal event, sent
    /// when the device may be gone already).
    paths: BTreeMap<VfioKey, String>,
}

/// One registration or unregistration made by [`VfioNodes::sync`], with the device's
/// directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum VfioChange {
    /// A device registered.
    Added(VfioKey, VfioDev, Option<String>),
    /// A device unregistered.
    Removed(VfioKey, VfioDev, Option<String>),
}

impl VfioNodes {
    /// Brings the registrations in line with `want` (device -> group): devices no longer
    /// wanted (or now in another group) unregister first, then new ones register in key
    /// order, each taking the lowest free index. Returns what changed, in that order.
    pub(crate) fn sync(
        &mut self,
        want: &BTreeMap<VfioKey, u32>,
        path_of: impl Fn(VfioKey) -> Option<String>,
    ) -> Vec<VfioChange> {
        let mut changes = Vec::new();
        let gone: Vec<VfioKey> = self
            .devices
            .iter()
            .filter(|(k, d)| want.get(k) != Some(&d.group))
            .map(|(k, _)| *k)
            .collect();
        for key in gone {
            if let Some(d) = self.devices.remove(&key) {
                changes.push(VfioChange::Removed(key, d, self.paths.remove(&key)));
            }
        }
        let mut used: BTreeSet<u32> = self.devices.values().map(|d| d.index).collect();
        for (key, group) in want {
            if self.devices.contains_key(key) {
                continue;
            }
            let index = (0..=u32::MAX)
                .find(|i| !used.contains(i))
                .unwrap_or(u32::MAX);
            used.insert(index);
            let dev = VfioDev {
                index,
                group: *group,
            };
            self.devices.insert(*key, dev);
            let path = path_of(*key);
            if let Some(p) = &path {
                self.paths.insert(*key, p.clone());
            }
            changes.push(VfioChange::Added(*key, dev, path));
        }
        changes
    }

    /// The registration of a device, if it is a VFIO device now.
    pub(crate) fn get(&self, key: VfioKey) -> Option<VfioDev> {
        self.devices.get(&key).copied()
    }

    /// Every registered device.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (VfioKey, VfioDev)> + '_ {
        self.devices.iter().map(|(k, d)| (*k, *d))
    }

    /// The IOMMU groups that have a VFIO device (each has `/dev/vfio/<group>`).
    pub(crate) fn groups(&self) -> BTreeSet<u32> {
        self.devices.values().map(|d| d.group).collect()
    }
}

/// `vfio<N>`, the name of the cdev of index `N`.
pub(crate) fn cdev_name(index: u32) -> String {
    format!("vfio{index}")
}

/// The index of a cdev name `vfio<N>` (canonical decimal only).
pub(crate) fn parse_cdev_name(name: &str) -> Option<u32> {
    let n: u32 = name.strip_prefix("vfio")?.parse().ok()?;
    (cdev_name(n) == name).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> VfioKey {
        VfioKey::Pci(format!("0000:3b:00.{n}").parse().expect("valid address"))
    }

    impl VfioNodes {
        fn sync_all(&mut self, want: &BTreeMap<VfioKey, u32>) {
            self.sync(want, |_| None);
        }
    }

    fn indexes(v: &VfioNodes) -> Vec<(VfioKey, u32)> {
        v.iter().map(|(k, d)| (k, d.index)).collect()
    }

    #[test]
    fn encode_dev_small_minor_is_old_layout() {
        assert_eq!(encode_dev(10, 196), (10 << 8) | 196);
    }

    #[test]
    fn encode_dev_minor_above_255_moves_high_bits_up() {
        assert_eq!(encode_dev(511, 0x1234), 0x34 | (511 << 8) | (0x12 << 20));
    }

    #[test]
    fn is_vfio_pci_driver_variant_driver_matches() {
        assert!(is_vfio_pci_driver("mlx5_vfio_pci"));
    }

    #[test]
    fn is_vfio_pci_driver_nvidia_does_not_match() {
        assert!(!is_vfio_pci_driver("nvidia"));
    }

    #[test]
    fn sync_new_devices_take_indexes_in_key_order() {
        let mut v = VfioNodes::default();
        v.sync_all(&BTreeMap::from([(key(1), 7), (key(0), 7)]));
        assert_eq!(indexes(&v), vec![(key(0), 0), (key(1), 1)]);
    }

    #[test]
    fn sync_reuses_lowest_free_index() {
        let mut v = VfioNodes::default();
        v.sync_all(&BTreeMap::from([(key(0), 7), (key(1), 8), (key(2), 9)]));
        v.sync_all(&BTreeMap::from([(key(1), 8), (key(2), 9)]));
        v.sync_all(&BTreeMap::from([(key(1), 8), (key(2), 9), (key(3), 10)]));
        assert_eq!(indexes(&v), vec![(key(1), 1), (key(2), 2), (key(3), 0)]);
    }

    #[test]
    fn sync_group_change_registers_again() {
        let mut v = VfioNodes::default();
        v.sync_all(&BTreeMap::from([(key(0), 7), (key(1), 8)]));
        v.sync_all(&BTreeMap::from([(key(0), 9), (key(1), 8)]));
        assert_eq!(v.get(key(0)), Some(VfioDev { index: 0, group: 9 }));
    }

    #[test]
    fn parse_cdev_name_leading_zero_is_none() {
        assert_eq!(parse_cdev_name("vfio03"), None);
    }

    #[test]
    fn parse_cdev_name_canonical_parses() {
        assert_eq!(parse_cdev_name("vfio12"), Some(12));
    }
}
