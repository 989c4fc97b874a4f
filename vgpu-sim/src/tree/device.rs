//! The inside of a PCI function's directory: attributes, links, SR-IOV, mdev types and
//! devices, NVIDIA's `nvidia/`, `vfio-dev/`.

use uuid::Uuid;

use super::{Dir, FileRef, Node, PciAttr, RO, RW, TypeAttr, WO};
use crate::kernel::{Dev, Kernel};
use crate::profile::VgpuMode;
use crate::vfio::{CDEV_MAJOR, VfioKey, cdev_name, parse_cdev_name};

impl Kernel {
    /// The part of the tree below `sys/devices/<root bus>`.
    pub(super) fn list_device_tree(
        &self,
        d: &mut Dir,
        rest: &[&str],
    ) -> Option<Vec<(String, Node)>> {
        let (root, below) = rest.split_first()?;
        // Find the deepest device directory that prefixes the path.
        let mut found: Option<(&Dev, usize)> = None;
        for i in (1..=below.len()).rev() {
            let Some(dev) = self.dev_by_name(below[i - 1]) else {
                continue;
            };
            let mut want = String::from(*root);
            for c in &below[..i] {
                want.push('/');
                want.push_str(c);
            }
            if dev.dir == want {
                found = Some((dev, i));
                break;
            }
        }
        let (dir_path, inside) = match found {
            Some((dev, i)) => (dev.dir.clone(), Some((dev, &below[i..]))),
            None if below.is_empty() => {
                if !self.root_buses().iter().any(|r| r == root) {
                    return None;
                }
                ((*root).to_owned(), None)
            }
            None => return None,
        };
        match inside {
            None => {
                // The root bus's own device (`pci_bus` root): an empty `uevent`.
                d.text("uevent", String::new());
                self.add_child_devices(d, &dir_path);
                Some(std::mem::take(&mut d.entries))
            }
            Some((dev, [])) => {
                self.add_device_attrs(d, dev);
                self.add_child_devices(d, &dir_path);
                Some(std::mem::take(&mut d.entries))
            }
            Some((dev, sub)) => {
                self.list_inside_device(d, dev, sub)?;
                Some(std::mem::take(&mut d.entries))
            }
        }
    }

    fn add_child_devices(&self, d: &mut Dir, dir_path: &str) {
        for c in self.devs.values() {
            if c.dir.rsplit_once('/').is_some_and(|(p, _)| p == dir_path) {
                d.dir(c.addr.to_string());
            }
        }
    }

    fn add_device_attrs(&self, d: &mut Dir, dev: &Dev) {
        let a = dev.addr;
        for (n, attr) in [
            ("class", PciAttr::Class),
            ("config", PciAttr::Config),
            ("device", PciAttr::Device),
            ("numa_node", PciAttr::Numa),
            ("revision", PciAttr::Revision),
            ("subsystem_device", PciAttr::SubDevice),
            ("subsystem_vendor", PciAttr::SubVendor),
            ("vendor", PciAttr::Vendor),
        ] {
            d.file(n, FileRef::Pci(a, attr), RO);
        }
        d.file(
            "driver_override",
            FileRef::Pci(a, PciAttr::DriverOverride),
            RW,
        );
        d.file("enable", FileRef::Pci(a, PciAttr::Enable), RW);
        d.file("remove", FileRef::Pci(a, PciAttr::Remove), WO);
        d.file("uevent", FileRef::Pci(a, PciAttr::Uevent), RW);
        if !dev.reset_methods.trim().is_empty() {
            d.file("reset", FileRef::Pci(a, PciAttr::Reset), WO);
            d.file("reset_method", FileRef::Pci(a, PciAttr::ResetMethod), RW);
        }
        d.link("subsystem", "sys/bus/pci");
        if let Some(drv) = &dev.driver {
            d.link("driver", &format!("sys/bus/pci/drivers/{drv}"));
        }
        if let Some(g) = dev.group {
            d.link("iommu_group", &format!("sys/kernel/iommu_groups/{g}"));
        }
        if let Some((_, num)) = &dev.sriov {
            for (n, attr, mode) in [
                ("sriov_drivers_autoprobe", PciAttr::SriovAutoprobe, RW),
                ("sriov_numvfs", PciAttr::SriovNum, RW),
                ("sriov_offset", PciAttr::SriovOffset, RO),
                ("sriov_stride", PciAttr::SriovStride, RO),
                ("sriov_totalvfs", PciAttr::SriovTotal, RO),
                ("sriov_vf_device", PciAttr::SriovVfDevice, RO),
            ] {
                d.file(n, FileRef::Pci(a, attr), mode);
            }
            if *num > 0 {
                let mut vfs: Vec<&Dev> =
                    self.devs.values().filter(|v| v.physfn == Some(a)).collect();
                vfs.sort_by_key(|v| v.addr);
                for (i, vf) in vfs.iter().enumerate() {
                    d.link(format!("virtfn{i}"), &vf.path());
                }
            }
        }
        if let Some(pf) = dev.physfn.and_then(|p| self.devs.get(&p)) {
            d.link("physfn", &pf.path());
        }
        if dev.is_mdev_parent() {
            d.dir("mdev_supported_types");
            for (u, _) in self.mdevs.iter().filter(|(_, m)| m.parent == a) {
                d.dir(u.to_string());
            }
        }
        if dev.is_vendor_vf() {
            d.dir("nvidia");
        }
        if self.has_lmem_quotas(dev) {
            d.dir("drm");
        }
        if self.vfio.get(VfioKey::Pci(a)).is_some() {
            d.dir("vfio-dev");
        }
    }

    /// `vfio-dev/` of a VFIO device whose directory is `dev_path`: `sub` is below it.
    fn list_vfio_dev(&self, d: &mut Dir, key: VfioKey, dev_path: &str, sub: &[&str]) -> Option<()> {
        let v = self.vfio.get(key)?;
        match sub {
            [] => d.dir(cdev_name(v.index)),
            [name] if parse_cdev_name(name) == Some(v.index) => {
                let n = v.index;
                d.text("dev", format!("{CDEV_MAJOR}:{n}\n"));
                d.link("device", dev_path);
                d.link("subsystem", "sys/class/vfio-dev");
                d.text(
                    "uevent",
                    format!("MAJOR={CDEV_MAJOR}\nMINOR={n}\nDEVNAME=vfio/devices/vfio{n}\n"),
                );
            }
            _ => return None,
        }
        Some(())
    }

    /// `drm/` of a PF with local-memory quotas: `card<N>/iov/vf<M>/gt0/lmem_quota`, one
    /// `vf<M>` per enabled VF (M from 1), and `card<N>/iov/pf/gt0/available/lmem_max_quota`.
    fn list_drm(&self, d: &mut Dir, dev: &Dev, sub: &[&str]) -> Option<()> {
        let card = format!("card{}", dev.drm_card?);
        let vfs = self.vfs_of(dev.addr);
        let vf = |name: &str| {
            let m: usize = name.strip_prefix("vf")?.parse().ok()?;
            (m >= 1 && name == format!("vf{m}")).then_some(())?;
            vfs.get(m - 1).map(|v| v.addr)
        };
        match sub {
            [] => d.dir(card),
            [c] if *c == card => d.dir("iov"),
            [c, "iov"] if *c == card => {
                d.dir("pf");
                for m in 1..=vfs.len() {
                    d.dir(format!("vf{m}"));
                }
            }
            [c, "iov", "pf"] if *c == card => d.dir("gt0"),
            [c, "iov", "pf", "gt0"] if *c == card => d.dir("available"),
            [c, "iov", "pf", "gt0", "available"] if *c == card => {
                d.file("lmem_max_quota", FileRef::LmemMaxQuota(dev.addr), RO);
            }
            [c, "iov", m] if *c == card => {
                vf(m)?;
                d.dir("gt0");
            }
            [c, "iov", m, "gt0"] if *c == card => {
                d.file("lmem_quota", FileRef::LmemQuota(vf(m)?), RW);
            }
            _ => return None,
        }
        Some(())
    }

    fn list_inside_device(&self, d: &mut Dir, dev: &Dev, sub: &[&str]) -> Option<()> {
        let a = dev.addr;
        match sub {
            ["mdev_supported_types"] if dev.is_mdev_parent() => {
                for t in self.types_of(dev) {
                    d.dir(t.id.clone());
                }
            }
            ["mdev_supported_types", t] if dev.is_mdev_parent() => {
                let t = self.type_of(dev, t)?;
                let id = t.id.clone();
                // NVIDIA's driver has its own `name`; from 6.1 the mdev core gives every
                // type one (the driver's pretty name, else the type's name: GVT-g's
                // `GVTg_V5_4`), before that GVT-g had none.
                if dev.vgpu != Some(VgpuMode::Gvtg) || self.kernel_at_least(6, 1) {
                    d.file("name", FileRef::Type(a, id.clone(), TypeAttr::Name), RO);
                }
                d.file(
                    "available_instances",
                    FileRef::Type(a, id.clone(), TypeAttr::Available),
                    RO,
                );
                d.file("create", FileRef::Type(a, id.clone(), TypeAttr::Create), WO);
                d.file(
                    "description",
                    FileRef::Type(a, id.clone(), TypeAttr::Description),
                    RO,
                );
                d.file("device_api", FileRef::Type(a, id, TypeAttr::DeviceApi), RO);
                d.dir("devices");
            }
            ["mdev_supported_types", t, "devices"] if dev.is_mdev_parent() => {
                let t = self.type_of(dev, t)?;
                for (u, _) in self
                    .mdevs
                    .iter()
                    .filter(|(_, m)| m.parent == a && m.type_id == t.id)
                {
                    d.link(u.to_string(), &format!("{}/{u}", dev.path()));
                }
            }
            ["nvidia"] if dev.is_vendor_vf() => {
                d.file(
                    "creatable_vgpu_types",
                    FileRef::Pci(a, PciAttr::NvCreatable),
                    RO,
                );
                d.file("current_vgpu_type", FileRef::Pci(a, PciAttr::NvCurrent), RW);
                d.file("vgpu_params", FileRef::Pci(a, PciAttr::NvParams), RW);
                d.file(
                    "gpu_instance_id",
                    FileRef::Pci(a, PciAttr::NvGpuInstance),
                    RW,
                );
                d.file("placement_id", FileRef::Pci(a, PciAttr::NvPlacement), RW);
            }
            ["drm", rest @ ..] if self.has_lmem_quotas(dev) => {
                self.list_drm(d, dev, rest)?;
            }
            ["vfio-dev", rest @ ..] => {
                self.list_vfio_dev(d, VfioKey::Pci(a), &dev.path(), rest)?;
            }
            [u, "vfio-dev", rest @ ..] => {
                let uuid = Uuid::try_parse(u).ok()?;
                self.mdevs.get(&uuid).filter(|m| m.parent == a)?;
                if uuid.to_string() != *u {
                    return None;
                }
                let mdev_path = format!("{}/{u}", dev.path());
                self.list_vfio_dev(d, VfioKey::Mdev(uuid), &mdev_path, rest)?;
            }
            [u, "nvidia"] if self.mdev_has_params(dev) => {
                let uuid = Uuid::try_parse(u).ok()?;
                self.mdevs.get(&uuid).filter(|m| m.parent == a)?;
                if uuid.to_string() != *u {
                    return None;
                }
                d.file("vgpu_params", FileRef::MdevParams(uuid), RW);
            }
            [u] => {
                let uuid = Uuid::try_parse(u).ok()?;
                let m = self.mdevs.get(&uuid).filter(|m| m.parent == a)?;
                if uuid.to_string() != *u {
                    return None;
                }
                if self.vfio.get(VfioKey::Mdev(uuid)).is_some() {
                    d.dir("vfio-dev");
                }
                d.link(
                    "mdev_type",
                    &format!("{}/mdev_supported_types/{}", dev.path(), m.type_id),
                );
                d.link("subsystem", "sys/bus/mdev");
                if let Some(g) = m.group {
                    d.link("iommu_group", &format!("sys/kernel/iommu_groups/{g}"));
                }
                d.file("remove", FileRef::MdevRemove(uuid), WO);
                if self.mdev_has_params(dev) {
                    d.dir("nvidia");
                }
                // `dev_uevent` (drivers/base/core.c): the bound driver; the mdev bus adds
                // nothing (`mdev_bus_type` has no `uevent`, drivers/vfio/mdev/mdev_driver.c).
                d.text("uevent", format!("DRIVER={}\n", self.mdev_driver(a)));
            }
            _ => return None,
        }
        Some(())
    }
}
