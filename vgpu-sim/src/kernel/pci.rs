//! PCI drivers and binding (`drivers/base/bus.c`, `drivers/base/dd.c`,
//! `drivers/pci/pci-driver.c`), dynamic ids (`new_id`, `remove_id`), per-device stores
//! (`driver_override`, `reset_method`, `reset`) and hot-plug (`remove`, `rescan`, unplug), with
//! the uevents each sends.

use super::{Dev, Errno, KResult, Kernel, NvVf, kstrtobool, store_ul, sysfs_str};
use crate::profile::PciAddr;
use crate::uevent::devpath;
use crate::vfio::is_vfio_pci_driver;

/// Drivers whose remove disables SR-IOV on the PF.
const DISABLES_SRIOV_ON_REMOVE: [&str; 3] = ["vfio-pci", "i915", "xe"];

/// `PCI_ANY_ID`.
const PCI_ANY_ID: u32 = !0;

/// A dynamic id added to a driver through `new_id` (`struct pci_device_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DynId {
    vendor: u32,
    device: u32,
    subvendor: u32,
    subdevice: u32,
    class: u32,
    class_mask: u32,
}

impl DynId {
    /// `pci_match_one_device`.
    fn matches(
        &self,
        vendor: u16,
        device: u16,
        subvendor: u16,
        subdevice: u16,
        class: u32,
    ) -> bool {
        let field = |id: u32, v: u16| id == PCI_ANY_ID || id == u32::from(v);
        field(self.vendor, vendor)
            && field(self.device, device)
            && field(self.subvendor, subvendor)
            && field(self.subdevice, subdevice)
            && (self.class ^ class) & self.class_mask == 0
    }

    fn matches_dev(&self, d: &Dev) -> bool {
        self.matches(d.vendor, d.device, d.sub_vendor, d.sub_device, d.class)
    }
}

/// The hex fields of a `new_id` / `remove_id` write, as the kernel's
/// `sscanf(buf, "%x %x ...")` reads them: at most `max`, each after optional white space,
/// each starting with a hex digit (an `0x` prefix is skipped), stopping at the first field
/// that does not; values are truncated to 32 bits; the text ends at a NUL.
pub(crate) fn scan_hex(data: &[u8], max: usize) -> Vec<u32> {
    let data = data.split(|b| *b == 0).next().unwrap_or_default();
    let mut fields = Vec::new();
    let mut i = 0;
    while fields.len() < max {
        while data.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if !data.get(i).is_some_and(u8::is_ascii_hexdigit) {
            break;
        }
        if data[i] == b'0'
            && data
                .get(i + 1)
                .is_some_and(|b| b.eq_ignore_ascii_case(&b'x'))
        {
            i += 2;
        }
        let mut value: u64 = 0;
        while let Some(digit) = data.get(i).and_then(|b| char::from(*b).to_digit(16)) {
            value = value.wrapping_mul(16).wrapping_add(u64::from(digit));
            i += 1;
        }
        fields.push(value as u32);
    }
    fields
}

/// Whether a driver's static id table matches a function (class-based tables, as the
/// vendor drivers' `PCI_CLASS` entries are).
fn static_match(driver: &str, vendor: u16, class: u32) -> bool {
    let base = class >> 16;
    match driver {
        "nvidia" => vendor == 0x10de && base == 0x03,
        "i915" | "xe" => vendor == 0x8086 && base == 0x03,
        "snd_hda_intel" => class >> 8 == 0x0403,
        "pcieport" => class >> 8 == 0x0604,
        _ => false,
    }
}

/// An NVIDIA PF that offers vGPUs: the one the `unbindLock` and `sriov-manage` rules apply to.
pub(crate) fn is_nvidia_vgpu_pf(d: &Dev) -> bool {
    d.vendor == 0x10de && d.vgpu.is_some() && d.physfn.is_none()
}

impl Kernel {
    /// `pci_match_device`: with `driver_override` set, only that driver matches; otherwise
    /// the driver's dynamic ids, then its static table.
    fn driver_matches(&self, driver: &str, d: &Dev) -> bool {
        if let Some(o) = &d.driver_override {
            return o.as_slice() == driver.as_bytes();
        }
        self.dynids
            .get(driver)
            .is_some_and(|ids| ids.iter().any(|id| id.matches_dev(d)))
            || static_match(driver, d.vendor, d.class)
    }

    /// `bind_store` (drivers/base/bus.c): `ENODEV` for no such device or a driver that does not
    /// match it (checked first), then `EBUSY` when the device is bound; then the probe
    /// ([`Kernel::probe_error`]).
    pub(crate) fn bind(&mut self, driver: &str, name: &str) -> KResult<()> {
        let d = self.dev_by_name(name).ok_or(libc::ENODEV)?;
        if !self.driver_matches(driver, d) {
            return Err(libc::ENODEV);
        }
        if d.driver.is_some() {
            return Err(libc::EBUSY);
        }
        if let Some(e) = self.probe_error(driver, d) {
            return Err(e);
        }
        let addr = d.addr;
        self.attach(addr, driver);
        Ok(())
    }

    /// `pci_device_can_probe` (drivers/pci/pci-driver.c): a VF is probed only when its PF
    /// has `sriov_drivers_autoprobe` set or the VF has a `driver_override`.
    fn can_probe(&self, d: &Dev) -> bool {
        let Some(pf) = d.physfn else {
            return true;
        };
        d.driver_override.is_some()
            || self
                .devs
                .get(&pf)
                .and_then(|p| p.sriov.as_ref())
                .is_some_and(|(spec, _)| spec.autoprobe)
    }

    /// Why probing `driver` on a matching, unbound device fails, if it does: `ENODEV` from
    /// `pci_device_probe` when the device cannot be probed; from `vfio-pci` (or a variant
    /// driver) `EBUSY` on a PF with VFs enabled ("Cannot bind to PF with SR-IOV enabled",
    /// `vfio_pci_core_register_device`), then `EINVAL` without an IOMMU group
    /// (`vfio_group_find_or_alloc` without `noiommu`).
    fn probe_error(&self, driver: &str, d: &Dev) -> Option<Errno> {
        let vfs_enabled = d.sriov.as_ref().is_some_and(|(_, n)| *n > 0);
        if !self.can_probe(d) {
            Some(libc::ENODEV)
        } else if is_vfio_pci_driver(driver) && vfs_enabled {
            Some(libc::EBUSY)
        } else if is_vfio_pci_driver(driver) && d.group.is_none() {
            Some(libc::EINVAL)
        } else {
            None
        }
    }

    /// A successful probe: the driver registers what it offers (VFIO devices, an mdev parent:
    /// `change` with `MDEV_STATE=registered`), then the device is bound (`bind`).
    fn attach(&mut self, addr: PciAddr, driver: &str) {
        let Some(d) = self.devs.get_mut(&addr) else {
            return;
        };
        d.driver = Some(driver.to_owned());
        d.unbind_lock = false;
        let parent = d.is_mdev_parent();
        self.sync_vfio();
        if parent {
            self.emit_pci(addr, "change", &[("MDEV_STATE", "registered")]);
        }
        self.emit_pci(addr, "bind", &[]);
    }

    /// `unbind_store`: `ENODEV` unless the device is bound to this driver. (A store that would
    /// take a device a process holds open, or NVIDIA's GPU from its vGPU manager, waits
    /// first: see [`Kernel::blockers`].)
    pub(crate) fn unbind(&mut self, driver: &str, name: &str) -> KResult<()> {
        let d = self.dev_by_name(name).ok_or(libc::ENODEV)?;
        if d.driver.as_deref() != Some(driver) {
            return Err(libc::ENODEV);
        }
        let addr = d.addr;
        self.detach(addr);
        Ok(())
    }

    /// The driver's remove: the mdevs of a parent go (then `change` with
    /// `MDEV_STATE=unregistered`), NVIDIA ends a VF's vGPU, `vfio-pci`, `i915` and `xe` disable
    /// the PF's VFs; then the device is unbound (`unbind`). `pci_iov_remove` puts
    /// `sriov_totalvfs` back to what the device supports.
    pub(crate) fn detach(&mut self, addr: PciAddr) {
        let Some(d) = self.devs.get(&addr) else {
            return;
        };
        let Some(old) = d.driver.clone() else {
            return;
        };
        let parent = d.is_mdev_parent();
        let has_vfs = d.sriov.as_ref().is_some_and(|(_, n)| *n > 0);
        let children: Vec<uuid::Uuid> = self
            .mdevs
            .iter()
            .filter(|(_, m)| m.parent == addr)
            .map(|(u, _)| *u)
            .collect();
        for uuid in children {
            self.remove_mdev(uuid);
        }
        if parent {
            self.emit_pci(addr, "change", &[("MDEV_STATE", "unregistered")]);
        }
        if has_vfs && DISABLES_SRIOV_ON_REMOVE.contains(&old.as_str()) {
            self.disable_vfs(addr);
        }
        if let Some(d) = self.devs.get_mut(&addr) {
            d.driver = None;
            d.nv = NvVf::default();
            d.unbind_lock = false;
        }
        // NVIDIA's mixed-size mode does not outlive the driver (vGPU user guide).
        self.size_mode.remove(&addr);
        self.sched.remove(&addr);
        self.sync_vfio();
        self.emit_pci(addr, "unbind", &[]);
    }

    /// `drivers_probe`: `ENODEV` for an unknown device, success otherwise (bound or not: a
    /// VF that cannot be probed, or a `vfio-pci` probe that fails, leaves it unbound).
    pub(crate) fn drivers_probe(&mut self, name: &str) -> KResult<()> {
        let addr = self.dev_by_name(name).ok_or(libc::ENODEV)?.addr;
        self.probe(addr);
        Ok(())
    }

    /// `device_attach`: the first matching driver whose probe succeeds binds the device (a
    /// probe that fails lets the next one try, `__device_attach_driver`). Drivers are tried
    /// in name order.
    pub(crate) fn probe(&mut self, addr: PciAddr) {
        let Some(d) = self.devs.get(&addr) else {
            return;
        };
        if d.driver.is_some() {
            return;
        }
        let found = self
            .drivers
            .iter()
            .find(|drv| self.driver_matches(drv, d) && self.probe_error(drv, d).is_none())
            .cloned();
        if let Some(drv) = found {
            self.attach(addr, &drv);
        }
    }

    /// `new_id_store` (drivers/pci/pci-driver.c): `vendor device [subvendor subdevice
    /// [class class_mask [driver_data]]]` in hex. Fewer than two fields is `EINVAL`; unless
    /// all seven are given, `EEXIST` when the driver already matches a device with those ids
    /// (subvendor and subdevice any, class 0, as the kernel's probe device has); a
    /// `driver_data` no entry of the driver's table has (anything but 0 here) is `EINVAL`.
    /// The id is added and every unbound device it matches is probed (`driver_attach`, failed
    /// probes ignored).
    pub(crate) fn new_id(&mut self, driver: &str, data: &[u8]) -> KResult<()> {
        let f = scan_hex(data, 7);
        if f.len() < 2 {
            return Err(libc::EINVAL);
        }
        let at = |i: usize, default: u32| f.get(i).copied().unwrap_or(default);
        let id = DynId {
            vendor: f[0],
            device: f[1],
            subvendor: at(2, PCI_ANY_ID),
            subdevice: at(3, PCI_ANY_ID),
            class: at(4, 0),
            class_mask: at(5, 0),
        };
        if f.len() != 7 {
            // The probe device is a `struct pci_dev`: 16-bit ids, 32-bit class.
            let (v, d, sv, sd) = (
                id.vendor as u16,
                id.device as u16,
                id.subvendor as u16,
                id.subdevice as u16,
            );
            let dynamic = self
                .dynids
                .get(driver)
                .is_some_and(|ids| ids.iter().any(|x| x.matches(v, d, sv, sd, id.class)));
            if dynamic || static_match(driver, v, id.class) {
                return Err(libc::EEXIST);
            }
        }
        if at(6, 0) != 0 {
            return Err(libc::EINVAL);
        }
        self.dynids.entry(driver.to_owned()).or_default().push(id);
        let unbound: Vec<PciAddr> = self
            .devs
            .values()
            .filter(|d| d.driver.is_none() && self.driver_matches(driver, d))
            .map(|d| d.addr)
            .collect();
        for addr in unbound {
            let probe_ok = self
                .devs
                .get(&addr)
                .is_some_and(|d| self.probe_error(driver, d).is_none());
            if probe_ok {
                self.attach(addr, driver);
            }
        }
        Ok(())
    }

    /// `remove_id_store`: `vendor device [subvendor subdevice [class class_mask]]` in hex
    /// (fewer than two fields: `EINVAL`); removes the first dynamic id with that vendor and
    /// device whose other fields match (subvendor and subdevice default to any, class and
    /// mask to 0), `ENODEV` when none does. Bound devices stay bound.
    pub(crate) fn remove_id(&mut self, driver: &str, data: &[u8]) -> KResult<()> {
        let f = scan_hex(data, 6);
        if f.len() < 2 {
            return Err(libc::EINVAL);
        }
        let at = |i: usize, default: u32| f.get(i).copied().unwrap_or(default);
        let (subvendor, subdevice, class, mask) =
            (at(2, PCI_ANY_ID), at(3, PCI_ANY_ID), at(4, 0), at(5, 0));
        let ids = self.dynids.get_mut(driver).ok_or(libc::ENODEV)?;
        let i = ids
            .iter()
            .position(|id| {
                id.vendor == f[0]
                    && id.device == f[1]
                    && (subvendor == PCI_ANY_ID || id.subvendor == subvendor)
                    && (subdevice == PCI_ANY_ID || id.subdevice == subdevice)
                    && (id.class ^ class) & mask == 0
            })
            .ok_or(libc::ENODEV)?;
        ids.remove(i);
        Ok(())
    }

    /// The dynamic ids of a driver, as `vendor device` pairs (for tests and the control view).
    #[cfg(test)]
    pub(crate) fn dynids_of(&self, driver: &str) -> Vec<(u32, u32)> {
        self.dynids
            .get(driver)
            .map(|ids| ids.iter().map(|i| (i.vendor, i.device)).collect())
            .unwrap_or_default()
    }

    /// `driver_override_store` (`driver_set_override`): `EINVAL` for a write of
    /// `PAGE_SIZE - 1` bytes or more; the value ends at the first NUL and then at the first
    /// newline; empty (or a newline first) clears it; any other bytes are kept as they are.
    /// Does not unbind.
    pub(crate) fn set_driver_override(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        if data.len() >= 4095 {
            return Err(libc::EINVAL);
        }
        let s = data.split(|b| *b == 0).next().unwrap_or_default();
        let s = s.split(|b| *b == b'\n').next().unwrap_or_default();
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        d.driver_override = (!s.is_empty()).then(|| s.to_vec());
        Ok(())
    }

    /// `drivers_autoprobe_store` (drivers/base/bus.c): off when the first byte is `0`, on for
    /// anything else; never fails. On PCI it gates nothing the simulator does: hot-added
    /// devices are probed by `pci_bus_add_device` whatever it says.
    pub(crate) fn set_bus_autoprobe(&mut self, data: &[u8]) {
        self.bus_autoprobe = data.first() != Some(&b'0');
    }

    /// `sriov_drivers_autoprobe_store`: `kstrtobool` ([`kstrtobool`]), `EINVAL` otherwise.
    pub(crate) fn set_autoprobe(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let v = kstrtobool(data)?;
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        let (spec, _) = d.sriov.as_mut().ok_or(libc::ENOENT)?;
        spec.autoprobe = v;
        Ok(())
    }

    /// `reset_method_store` (drivers/pci/pci.c): an empty line disables every method,
    /// `default` restores the supported ones, otherwise a space-separated list of supported
    /// methods in the order to try them (`EINVAL` for one the device does not support).
    pub(crate) fn set_reset_method(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let s = sysfs_str(data)?.trim();
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        d.reset_method = match s {
            "" => String::new(),
            "default" => d.reset_methods.clone(),
            list => {
                let supported: Vec<&str> = d.reset_methods.split_whitespace().collect();
                let wanted: Vec<&str> = list.split_whitespace().collect();
                if !wanted.iter().all(|m| supported.contains(m)) {
                    return Err(libc::EINVAL);
                }
                wanted.join(" ")
            }
        };
        Ok(())
    }

    /// `reset_store`: value must be 1; `ENOTTY` without a reset method.
    pub(crate) fn reset(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let v = store_ul(data, u64::MAX)?;
        if v != 1 {
            return Err(libc::EINVAL);
        }
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        if d.reset_method.trim().is_empty() {
            return Err(libc::ENOTTY);
        }
        // A GPU reset loses NVIDIA's mixed-size mode (vGPU user guide, "Mixed-Size Mode").
        self.size_mode.remove(&addr);
        Ok(())
    }

    // ----- hot-plug -----

    /// `remove` attribute: the function, its VFs, children and mdevs go away; a rescan finds
    /// the functions (not the VFs) again.
    pub(crate) fn remove_device(&mut self, addr: PciAddr) -> KResult<()> {
        self.take_out(addr, true)
    }

    /// Takes a function out with everything below it, each unbound (`unbind`) and removed
    /// (`remove`), VFs and children first; `rescannable` keeps the non-VF functions for a
    /// rescan, as a new `pci_dev` would find them: no driver, no `driver_override`, VFs
    /// disabled and `sriov_drivers_autoprobe` 1 (`sriov_init`).
    pub(super) fn take_out(&mut self, addr: PciAddr, rescannable: bool) -> KResult<()> {
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        let prefix = format!("{}/", d.dir);
        let mut gone: Vec<PciAddr> = self
            .devs
            .values()
            .filter(|o| o.dir.starts_with(&prefix) || o.physfn == Some(addr))
            .map(|o| o.addr)
            .collect();
        // Deepest first: a bridge's children before the bridge.
        gone.sort_by_key(|a| {
            std::cmp::Reverse(self.devs.get(a).map_or(0, |d| d.dir.matches('/').count()))
        });
        gone.push(addr);
        for a in gone {
            let Some(mut d) = self.remove_function(a) else {
                continue;
            };
            self.size_mode.remove(&a);
            self.sched.remove(&a);
            if rescannable && d.physfn.is_none() {
                d.driver = None;
                d.driver_override = None;
                d.reset_method.clone_from(&d.reset_methods);
                d.nv = NvVf::default();
                d.unbind_lock = false;
                if let Some((spec, cur)) = d.sriov.as_mut() {
                    spec.autoprobe = true;
                    *cur = 0;
                }
                self.removed.insert(a, d);
            }
        }
        Ok(())
    }

    /// Unbinds a function and deletes it (`pci_stop_and_remove_bus_device`): `unbind`, then
    /// `remove`. Returns it as it was when deleted.
    pub(super) fn remove_function(&mut self, addr: PciAddr) -> Option<Dev> {
        self.detach(addr);
        let d = self.devs.get(&addr)?;
        let path = d.path();
        let vars = pci_vars(d);
        let d = self.devs.remove(&addr)?;
        self.sync_vfio();
        self.uevents.push("remove", devpath(&path), "pci", vars);
        Some(d)
    }

    /// `rescan` (bus/pci/rescan): removed functions come back (`add`) and are probed, whatever
    /// the bus's `drivers_autoprobe` says (`pci_bus_add_device` calls `device_attach`).
    pub(crate) fn rescan(&mut self, data: &[u8]) -> KResult<()> {
        if store_ul(data, u64::MAX)? == 0 {
            return Ok(());
        }
        let back: Vec<Dev> = std::mem::take(&mut self.removed).into_values().collect();
        for d in back {
            let addr = d.addr;
            self.devs.insert(addr, d);
            self.emit_pci(addr, "add", &[]);
            self.probe(addr);
        }
        Ok(())
    }

    /// Records a uevent of a PCI function that exists now, with `extra` variables after the
    /// standard ones.
    pub(crate) fn emit_pci(&mut self, addr: PciAddr, action: &str, extra: &[(&str, &str)]) {
        let Some(d) = self.devs.get(&addr) else {
            return;
        };
        let path = devpath(&d.path());
        let mut vars = pci_vars(d);
        vars.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        self.uevents.push(action, path, "pci", vars);
    }
}

/// The variables of a PCI function's uevent: `DRIVER` while bound (`dev_uevent`), then
/// `pci_uevent`'s. Also the content of its `uevent` file.
pub(crate) fn pci_vars(d: &Dev) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    if let Some(drv) = &d.driver {
        vars.push(("DRIVER".to_owned(), drv.clone()));
    }
    for (k, v) in [
        ("PCI_CLASS", format!("{:X}", d.class)),
        ("PCI_ID", format!("{:04X}:{:04X}", d.vendor, d.device)),
        (
            "PCI_SUBSYS_ID",
            format!("{:04X}:{:04X}", d.sub_vendor, d.sub_device),
        ),
        ("PCI_SLOT_NAME", d.addr.to_string()),
        (
            "MODALIAS",
            format!(
                "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc{:02X}sc{:02X}i{:02X}",
                d.vendor,
                d.device,
                d.sub_vendor,
                d.sub_device,
                d.class >> 16,
                (d.class >> 8) & 0xff,
                d.class & 0xff
            ),
        ),
    ] {
        vars.push((k.to_owned(), v));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn kernel(name: &str) -> Kernel {
        Kernel::boot(Profile::builtin(name).expect("builtin profile"))
    }

    #[test]
    fn scan_hex_two_fields() {
        assert_eq!(scan_hex(b"10de 26b9\n", 7), vec![0x10de, 0x26b9]);
    }

    #[test]
    fn scan_hex_0x_prefix_is_skipped() {
        assert_eq!(scan_hex(b"0x10de 0X26b9", 7), vec![0x10de, 0x26b9]);
    }

    #[test]
    fn scan_hex_stops_at_first_non_hex_field() {
        assert_eq!(scan_hex(b"10de,26b9", 7), vec![0x10de]);
    }

    #[test]
    fn scan_hex_joined_digits_are_one_field() {
        assert_eq!(scan_hex(b"10de26b9", 7), vec![0x10de_26b9]);
    }

    #[test]
    fn scan_hex_stops_at_nul() {
        assert_eq!(scan_hex(b"10de\x0026b9", 7), vec![0x10de]);
    }

    #[test]
    fn scan_hex_takes_at_most_max() {
        assert_eq!(scan_hex(b"1 2 3", 2), vec![1, 2]);
    }

    #[test]
    fn new_id_same_id_twice_is_eexist() {
        let mut k = kernel("flex-sriov");
        k.new_id("pci-pf-stub", b"1234 5678").expect("first");
        assert_eq!(k.new_id("pci-pf-stub", b"1234 5678"), Err(libc::EEXIST));
    }

    #[test]
    fn new_id_nonzero_driver_data_is_einval() {
        let mut k = kernel("flex-sriov");
        assert_eq!(
            k.new_id("pci-pf-stub", b"1234 5678 ffffffff ffffffff 0 0 1"),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn remove_id_removes_only_first_match() {
        let mut k = kernel("flex-sriov");
        k.new_id("pci-pf-stub", b"1234 5678 1 1").expect("first");
        k.new_id("pci-pf-stub", b"1234 5678 1 1 0 0 0")
            .expect("second, all fields");
        k.remove_id("pci-pf-stub", b"1234 5678").expect("remove");
        assert_eq!(k.dynids_of("pci-pf-stub"), vec![(0x1234, 0x5678)]);
    }
}
