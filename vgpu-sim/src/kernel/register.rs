//! VFIO device registration as the kernel does it: which functions and mdevs the kernel state
//! makes VFIO devices, and their registration after every change of state, with the uevents of
//! their nodes (`vfio_register_group_dev`, `vfio_unregister_group_dev`). The registrations
//! themselves are [`crate::vfio::VfioNodes`].

use std::collections::{BTreeMap, BTreeSet};

use super::{Dev, Kernel};
use crate::uevent::devpath;
use crate::vfio::{CDEV_MAJOR, GROUP_MAJOR, VfioChange, VfioKey, cdev_name, is_vfio_pci_driver};

impl Kernel {
    /// The VFIO devices the kernel has now, with their IOMMU groups: functions bound to a
    /// VFIO PCI driver, NVIDIA vendor-VFIO VFs whose `current_vgpu_type` is set (NVIDIA's
    /// driver registers them with VFIO itself) and mdevs. A device without an IOMMU group
    /// registers nothing (`vfio_group_find_or_alloc` fails without `noiommu`).
    fn wanted_vfio(&self) -> BTreeMap<VfioKey, u32> {
        let mut want = BTreeMap::new();
        for d in self.devs.values() {
            let vfio_driver = d.driver.as_deref().is_some_and(is_vfio_pci_driver);
            let vendor_vgpu = d.is_vendor_vf() && d.nv.current != 0;
            if let (true, Some(g)) = (vfio_driver || vendor_vgpu, d.group) {
                want.insert(VfioKey::Pci(d.addr), g);
            }
        }
        for (u, m) in &self.mdevs {
            if let Some(g) = m.group {
                want.insert(VfioKey::Mdev(*u), g);
            }
        }
        want
    }

    /// Registers and unregisters VFIO devices after a change of state, with their uevents:
    /// a device's cdev (`vfio-dev`) goes before its group node (`vfio`) when that is left
    /// empty; a new group's node comes before the cdev.
    pub(crate) fn sync_vfio(&mut self) {
        let want = self.wanted_vfio();
        let groups_before = self.vfio.groups();
        let mut vfio = std::mem::take(&mut self.vfio);
        let changes = vfio.sync(&want, |k| self.vfio_dev_path(k));
        self.vfio = vfio;
        if changes.is_empty() {
            return;
        }
        let groups_after = self.vfio.groups();
        for change in &changes {
            if let VfioChange::Removed(_, d, Some(path)) = change {
                self.cdev_event("remove", path, d.index);
            }
        }
        for g in groups_before.difference(&groups_after) {
            self.group_event("remove", *g);
        }
        let mut announced: BTreeSet<u32> =
            groups_before.intersection(&groups_after).copied().collect();
        for change in &changes {
            if let VfioChange::Added(_, d, path) = change {
                if announced.insert(d.group) {
                    self.group_event("add", d.group);
                }
                if let Some(path) = path {
                    self.cdev_event("add", path, d.index);
                }
            }
        }
    }

    fn cdev_event(&mut self, action: &str, dev_path: &str, index: u32) {
        let name = cdev_name(index);
        self.uevents.push(
            action,
            devpath(&format!("{dev_path}/vfio-dev/{name}")),
            "vfio-dev",
            vec![
                ("MAJOR".to_owned(), CDEV_MAJOR.to_string()),
                ("MINOR".to_owned(), index.to_string()),
                ("DEVNAME".to_owned(), format!("vfio/devices/{name}")),
            ],
        );
    }

    fn group_event(&mut self, action: &str, group: u32) {
        self.uevents.push(
            action,
            format!("/devices/virtual/vfio/{group}"),
            "vfio",
            vec![
                ("MAJOR".to_owned(), GROUP_MAJOR.to_string()),
                ("MINOR".to_owned(), group.to_string()),
                ("DEVNAME".to_owned(), format!("vfio/{group}")),
            ],
        );
    }

    /// The sysfs directory (below the root) of a VFIO device.
    pub(crate) fn vfio_dev_path(&self, key: VfioKey) -> Option<String> {
        match key {
            VfioKey::Pci(a) => self.devs.get(&a).map(Dev::path),
            VfioKey::Mdev(u) => {
                let m = self.mdevs.get(&u)?;
                self.devs
                    .get(&m.parent)
                    .map(|p| format!("{}/{u}", p.path()))
            }
        }
    }
}
