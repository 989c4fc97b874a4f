//! The kernel model: PCI functions, drivers, SR-IOV, mdevs and NVIDIA vGPUs, with the rules and
//! errnos of the kernel code named in each function.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use uuid::Uuid;

use crate::control::{Fault, KernelOp, LatencyOp, glob_match};
use crate::process::Processes;
use crate::profile::{DeviceSpec, IommuKind, PciAddr, Profile, SriovSpec, TypeSpec, VgpuMode};
use crate::vfio::{VfioNodes, is_vfio_pci_driver};

/// An errno (positive, as in `libc`).
pub(crate) type Errno = i32;
/// The result of a kernel operation.
pub(crate) type KResult<T> = Result<T, Errno>;

/// Drivers whose `sriov_configure` exists (others answer `ENOENT`). `vfio-pci` has one only
/// with `enable_sriov=1`, off by default.
const SRIOV_DRIVERS: [&str; 3] = ["pci-pf-stub", "i915", "xe"];
/// Drivers whose remove disables SR-IOV on the PF.
const DISABLES_SRIOV_ON_REMOVE: [&str; 3] = ["vfio-pci", "i915", "xe"];
/// Drivers present on every host.
const BASE_DRIVERS: [&str; 3] = ["pci-pf-stub", "pcieport", "vfio-pci"];

/// GVT-g resources available to guests (MiB, MiB, fences).
const GVT_LOW_GM_MIB: u64 = 512;
const GVT_HIGH_GM_MIB: u64 = 3072;
const GVT_FENCES: u64 = 28;

/// NVIDIA vendor-VFIO state of one VF.
#[derive(Clone, Debug, Default)]
pub(crate) struct NvVf {
    pub(crate) current: u32,
    pub(crate) params: String,
}

/// One PCI function.
#[derive(Clone, Debug)]
pub(crate) struct Dev {
    pub(crate) addr: PciAddr,
    /// Directory below `sys/devices`, e.g. `pci0000:3a/0000:3a:00.0/0000:3b:00.0`.
    pub(crate) dir: String,
    pub(crate) vendor: u16,
    pub(crate) device: u16,
    pub(crate) sub_vendor: u16,
    pub(crate) sub_device: u16,
    pub(crate) class: u32,
    pub(crate) numa: i32,
    pub(crate) driver: Option<String>,
    pub(crate) driver_override: Option<String>,
    pub(crate) group: Option<u32>,
    /// The reset methods in use now (`reset_method`), space-separated.
    pub(crate) reset_method: String,
    /// The reset methods the function supports; `reset` and `reset_method` exist only with
    /// some.
    pub(crate) reset_methods: String,
    pub(crate) sriov: Option<(SriovSpec, u16)>,
    pub(crate) physfn: Option<PciAddr>,
    pub(crate) vgpu: Option<VgpuMode>,
    pub(crate) catalog: Option<String>,
    /// The PF whose capacity this function uses (itself for a PF).
    pub(crate) gpu: PciAddr,
    pub(crate) nv: NvVf,
    pub(crate) unbind_lock: bool,
    pub(crate) label: String,
}

impl Dev {
    pub(crate) fn path(&self) -> String {
        format!("sys/devices/{}", self.dir)
    }

    /// Whether this function is an mdev parent now (the vendor driver registered it).
    pub(crate) fn is_mdev_parent(&self) -> bool {
        let drv = self.driver.as_deref();
        match self.vgpu {
            Some(VgpuMode::Mdev) => self.physfn.is_none() && drv == Some("nvidia"),
            Some(VgpuMode::MdevOnVf) => self.physfn.is_some() && drv == Some("nvidia"),
            Some(VgpuMode::Gvtg) => drv == Some("i915"),
            _ => false,
        }
    }

    /// Whether this function has NVIDIA's `nvidia/` vendor-VFIO directory now.
    pub(crate) fn is_vendor_vf(&self) -> bool {
        self.vgpu == Some(VgpuMode::VendorVfio)
            && self.physfn.is_some()
            && self.driver.as_deref() == Some("nvidia")
    }
}

/// One mediated device.
#[derive(Clone, Debug)]
pub(crate) struct Mdev {
    pub(crate) parent: PciAddr,
    pub(crate) type_id: String,
    pub(crate) group: Option<u32>,
}

/// The whole simulated kernel state.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) profile: Profile,
    pub(crate) devs: BTreeMap<PciAddr, Dev>,
    removed: BTreeMap<PciAddr, Dev>,
    pub(crate) mdevs: BTreeMap<Uuid, Mdev>,
    pub(crate) drivers: Vec<String>,
    pub(crate) bus_autoprobe: bool,
    next_group: u32,
    pub(crate) faults: Vec<Fault>,
    pub(crate) latency: BTreeMap<LatencyOp, Duration>,
    /// The registered VFIO devices; [`Kernel::sync_vfio`] after every change of state.
    pub(crate) vfio: VfioNodes,
    /// Simulated processes and the files they hold open (control interface).
    pub(crate) procs: Processes,
}

/// Parses like the kernel's `kstrtoul(buf, 0, ...)`: optional `+`, base from the prefix
/// (`0x` hex, `0` octal), one trailing newline; `EINVAL` for junk, `ERANGE` above `max`.
pub(crate) fn kstrtoul(data: &[u8], max: u64) -> KResult<u64> {
    let s = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(libc::EINVAL);
    }
    let v = u64::from_str_radix(digits, radix).map_err(|_| libc::ERANGE)?;
    if v > max { Err(libc::ERANGE) } else { Ok(v) }
}

/// A number written to a store: every `kstrto*` failure, overflow included, is `EINVAL`, as
/// the stores the simulator models return it (`if (kstrtoul(buf, 0, &val) < 0) return
/// -EINVAL;` in `drivers/pci/pci-sysfs.c`, `iov.c`, `drivers/vfio/mdev/mdev_sysfs.c`).
pub(crate) fn store_ul(data: &[u8], max: u64) -> KResult<u64> {
    kstrtoul(data, max).map_err(|_| libc::EINVAL)
}

/// A sysfs string value: the write minus one trailing newline.
pub(crate) fn sysfs_str(data: &[u8]) -> KResult<&str> {
    let s = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
    Ok(s.strip_suffix('\n').unwrap_or(s))
}

/// Whether a driver's id table matches a device (no dynamic ids).
fn id_match(driver: &str, d: &Dev) -> bool {
    let class = d.class >> 16;
    match driver {
        "nvidia" => d.vendor == 0x10de && class == 0x03,
        "i915" | "xe" => d.vendor == 0x8086 && class == 0x03,
        "snd_hda_intel" => d.class >> 8 == 0x0403,
        "pcieport" => d.class >> 8 == 0x0604,
        _ => false,
    }
}

/// An NVIDIA PF that offers vGPUs: the one the `unbindLock` and `sriov-manage` rules apply to.
fn is_nvidia_vgpu_pf(d: &Dev) -> bool {
    d.vendor == 0x10de && d.vgpu.is_some() && d.physfn.is_none()
}

/// `pci_match_device`: with `driver_override` set, only that driver matches.
fn driver_matches(driver: &str, d: &Dev) -> bool {
    match &d.driver_override {
        Some(o) => o == driver,
        None => id_match(driver, d),
    }
}

impl Kernel {
    /// Boots the kernel on a profile: devices, drivers, boot-time VFs and their probe.
    pub(crate) fn boot(profile: Profile) -> Self {
        let mut drivers: BTreeSet<String> = BASE_DRIVERS.iter().map(|s| (*s).to_owned()).collect();
        let mut devs = BTreeMap::new();
        for spec in &profile.devices {
            if let Some(d) = &spec.driver {
                drivers.insert(d.clone());
            }
            let dev = Self::dev_from_spec(&profile, spec);
            devs.insert(spec.addr, dev);
        }
        let max_group = profile
            .devices
            .iter()
            .filter_map(|d| d.iommu_group)
            .max()
            .unwrap_or(0);
        let mut k = Kernel {
            devs,
            removed: BTreeMap::new(),
            mdevs: BTreeMap::new(),
            drivers: drivers.into_iter().collect(),
            bus_autoprobe: true,
            next_group: max_group + 1,
            faults: Vec::new(),
            latency: BTreeMap::new(),
            vfio: VfioNodes::default(),
            procs: Processes::default(),
            profile,
        };
        let pfs: Vec<(PciAddr, u16)> = k
            .devs
            .values()
            .filter_map(|d| d.sriov.as_ref().map(|(s, _)| (d.addr, s.num_vfs)))
            .filter(|(_, n)| *n > 0)
            .collect();
        for (pf, n) in pfs {
            k.enable_vfs(pf, n);
        }
        k.sync_vfio();
        k
    }

    fn dev_from_spec(profile: &Profile, spec: &DeviceSpec) -> Dev {
        let dir = match spec.bridge {
            Some(b) => format!("pci{:04x}:{:02x}/{b}/{}", b.domain, b.bus, spec.addr),
            None => format!(
                "pci{:04x}:{:02x}/{}",
                spec.addr.domain, spec.addr.bus, spec.addr
            ),
        };
        Dev {
            addr: spec.addr,
            dir,
            vendor: spec.vendor,
            device: spec.device,
            sub_vendor: spec.subsystem_vendor,
            sub_device: spec.subsystem_device,
            class: spec.class,
            numa: spec.numa_node,
            driver: spec.driver.clone(),
            driver_override: spec.driver_override.clone(),
            group: if profile.iommu == IommuKind::None {
                None
            } else {
                spec.iommu_group
            },
            reset_method: spec.reset_method.clone(),
            reset_methods: spec.reset_method.clone(),
            sriov: spec.sriov.clone().map(|s| (s, 0)),
            physfn: None,
            vgpu: spec.vgpu,
            catalog: spec.catalog.clone(),
            gpu: spec.addr,
            nv: NvVf::default(),
            unbind_lock: false,
            label: spec.label.clone(),
        }
    }

    pub(crate) fn has_iommu(&self) -> bool {
        self.profile.iommu != IommuKind::None
    }

    fn alloc_group(&mut self) -> Option<u32> {
        if !self.has_iommu() {
            return None;
        }
        let g = self.next_group;
        self.next_group += 1;
        Some(g)
    }

    pub(crate) fn dev_by_name(&self, name: &str) -> Option<&Dev> {
        let addr: PciAddr = name.parse().ok()?;
        // The kernel compares device names exactly: `0000:3B:00.0` names nothing.
        if addr.to_string() != name {
            return None;
        }
        self.devs.get(&addr)
    }

    /// Types of the catalog a function uses.
    pub(crate) fn types_of(&self, d: &Dev) -> impl Iterator<Item = &TypeSpec> {
        let cat = d.catalog.clone();
        self.profile
            .types
            .iter()
            .filter(move |t| Some(&t.catalog) == cat.as_ref())
    }

    pub(crate) fn type_of(&self, d: &Dev, id: &str) -> Option<&TypeSpec> {
        self.types_of(d).find(|t| t.id == id)
    }

    /// vGPUs in use on a physical GPU: (type id, count).
    fn usage(&self, gpu: PciAddr) -> BTreeMap<String, u32> {
        let mut used = BTreeMap::new();
        for m in self.mdevs.values() {
            if self.devs.get(&m.parent).is_some_and(|p| p.gpu == gpu) {
                *used.entry(m.type_id.clone()).or_insert(0) += 1;
            }
        }
        for d in self.devs.values() {
            if d.gpu == gpu && d.nv.current != 0 {
                *used.entry(d.nv.current.to_string()).or_insert(0) += 1;
            }
        }
        used
    }

    fn gpu_busy(&self, gpu: PciAddr) -> bool {
        !self.usage(gpu).is_empty()
    }

    /// Whether the physical GPU's `unbindLock` is held (no vGPU may be created then).
    fn unbind_locked(&self, gpu: PciAddr) -> bool {
        self.devs.get(&gpu).is_some_and(|g| g.unbind_lock)
    }

    /// `available_instances` of a type on a parent.
    pub(crate) fn available(&self, parent: &Dev, t: &TypeSpec) -> u32 {
        let used = self.usage(parent.gpu);
        let mine = used.get(&t.id).copied().unwrap_or(0);
        let others = used.iter().any(|(id, n)| id != &t.id && *n > 0);
        match parent.vgpu {
            Some(VgpuMode::Mdev) => {
                if others {
                    0
                } else {
                    t.max_instances.saturating_sub(mine)
                }
            }
            Some(VgpuMode::MdevOnVf) => {
                let vf_used = self.mdevs.values().any(|m| m.parent == parent.addr);
                u32::from(!vf_used && !others && mine < t.max_instances)
            }
            Some(VgpuMode::Gvtg) => {
                let (mut low, mut high, mut fence) = (0u64, 0u64, 0u64);
                for m in self.mdevs.values().filter(|m| m.parent == parent.addr) {
                    if let Some(u) = self.type_of(parent, &m.type_id) {
                        low += u.low_gm_mib;
                        high += u.high_gm_mib;
                        fence += u64::from(u.fence);
                    }
                }
                let per = |total: u64, used: u64, each: u64| {
                    total
                        .saturating_sub(used)
                        .checked_div(each)
                        .unwrap_or(u64::MAX)
                };
                let n = per(GVT_LOW_GM_MIB, low, t.low_gm_mib)
                    .min(per(GVT_HIGH_GM_MIB, high, t.high_gm_mib))
                    .min(per(GVT_FENCES, fence, u64::from(t.fence)));
                u32::try_from(n).unwrap_or(u32::MAX)
            }
            Some(VgpuMode::VendorVfio) | None => 0,
        }
    }

    /// Type ids listed by an NVIDIA VF's `creatable_vgpu_types` now.
    pub(crate) fn creatable(&self, vf: &Dev) -> Vec<&TypeSpec> {
        if vf.nv.current != 0 {
            return Vec::new();
        }
        let used = self.usage(vf.gpu);
        self.types_of(vf)
            .filter(|t| {
                let mine = used.get(&t.id).copied().unwrap_or(0);
                let others = used.iter().any(|(id, n)| id != &t.id && *n > 0);
                !others && mine < t.max_instances
            })
            .collect()
    }

    /// The kernel operation a write stands for, for latency injection.
    pub(crate) fn latency_for(&self, op: KernelOp) -> Option<Duration> {
        self.latency.get(&LatencyOp::Kernel(op)).copied()
    }

    /// Takes one pending fault matching `path`, if any.
    pub(crate) fn take_fault(&mut self, path: &str) -> Option<Errno> {
        let f = self
            .faults
            .iter_mut()
            .find(|f| f.remaining > 0 && glob_match(&f.glob, path))?;
        f.remaining -= 1;
        let errno = f.errno;
        self.faults.retain(|f| f.remaining > 0);
        Some(errno)
    }

    // ----- drivers -----

    /// `bind_store` (drivers/base/bus.c): `ENODEV` for no such device or a driver that does not
    /// match it (checked first), then `EBUSY` when the device is bound; then the probe
    /// ([`Kernel::probe_error`]): `ENODEV` when `pci_device_can_probe` says no, `EINVAL` from
    /// `vfio-pci` without an IOMMU group.
    pub(crate) fn bind(&mut self, driver: &str, name: &str) -> KResult<()> {
        let d = self.dev_by_name(name).ok_or(libc::ENODEV)?;
        if !driver_matches(driver, d) {
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
    /// `pci_device_probe` when the device cannot be probed, `EINVAL` from `vfio-pci` (or a
    /// variant driver) on a device without an IOMMU group (`vfio_group_find_or_alloc`
    /// without `noiommu`).
    fn probe_error(&self, driver: &str, d: &Dev) -> Option<Errno> {
        if !self.can_probe(d) {
            Some(libc::ENODEV)
        } else if is_vfio_pci_driver(driver) && d.group.is_none() {
            Some(libc::EINVAL)
        } else {
            None
        }
    }

    fn attach(&mut self, addr: PciAddr, driver: &str) {
        if let Some(d) = self.devs.get_mut(&addr) {
            d.driver = Some(driver.to_owned());
            d.unbind_lock = false;
        }
    }

    /// `unbind_store`: `ENODEV` unless the device is bound to this driver.
    ///
    /// Deviation: the NVIDIA driver lets go of a vGPU-capable PF only while its `unbindLock`
    /// is held, and a GPU with vGPUs cannot take the lock; the real driver's remove blocks
    /// until `nvidia-vgpu-mgr` releases the GPU, the simulator answers `EBUSY` at once.
    pub(crate) fn unbind(&mut self, driver: &str, name: &str) -> KResult<()> {
        let d = self.dev_by_name(name).ok_or(libc::ENODEV)?;
        if d.driver.as_deref() != Some(driver) {
            return Err(libc::ENODEV);
        }
        let addr = d.addr;
        if driver == "nvidia" && is_nvidia_vgpu_pf(d) && (!d.unbind_lock || self.gpu_busy(addr)) {
            return Err(libc::EBUSY);
        }
        self.detach(addr);
        Ok(())
    }

    fn detach(&mut self, addr: PciAddr) {
        // mdev_unregister_parent removes the children; NVIDIA destroys a VF's vGPU.
        self.mdevs.retain(|_, m| m.parent != addr);
        let Some(d) = self.devs.get_mut(&addr) else {
            return;
        };
        let old = d.driver.take();
        d.nv = NvVf::default();
        d.unbind_lock = false;
        let has_vfs = d.sriov.as_ref().is_some_and(|(_, n)| *n > 0);
        if has_vfs
            && old
                .as_deref()
                .is_some_and(|o| DISABLES_SRIOV_ON_REMOVE.contains(&o))
        {
            self.disable_vfs(addr);
        }
    }

    /// `drivers_probe`: `ENODEV` for an unknown device, success otherwise (bound or not: a
    /// VF that cannot be probed, or `vfio-pci` failing without an IOMMU group, leaves it
    /// unbound).
    pub(crate) fn drivers_probe(&mut self, name: &str) -> KResult<()> {
        let addr = self.dev_by_name(name).ok_or(libc::ENODEV)?.addr;
        self.probe(addr);
        Ok(())
    }

    fn probe(&mut self, addr: PciAddr) {
        let Some(d) = self.devs.get(&addr) else {
            return;
        };
        if d.driver.is_some() {
            return;
        }
        // A probe that fails lets the next matching driver try (`__device_attach_driver`).
        let found = self
            .drivers
            .iter()
            .find(|drv| driver_matches(drv, d) && self.probe_error(drv, d).is_none())
            .cloned();
        if let Some(drv) = found {
            self.attach(addr, &drv);
        }
    }

    /// `driver_override_store` (`driver_set_override`): empty clears; does not unbind;
    /// `EINVAL` for a write of `PAGE_SIZE - 1` bytes or more.
    pub(crate) fn set_driver_override(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        if data.len() >= 4095 {
            return Err(libc::EINVAL);
        }
        let s = sysfs_str(data)?;
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        d.driver_override = if s.is_empty() {
            None
        } else {
            Some(s.to_owned())
        };
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
        Ok(())
    }

    // ----- SR-IOV -----

    /// `sriov_numvfs_store` (drivers/pci/iov.c): `EINVAL` for anything `kstrtou16` refuses
    /// (a u16 overflow included), `ERANGE` above `sriov_totalvfs`.
    ///
    /// Deviation: an NVIDIA vGPU PF on `pci-pf-stub` takes only `0` or `sriov_totalvfs`
    /// (`EINVAL` otherwise). The kernel's `pci_sriov_configure_simple` would enable any
    /// count, but NVIDIA's vGPU manager supports only the full set, which is all `sriov-manage`
    /// writes; the simulator refuses the rest so that a client writing a partial count fails.
    pub(crate) fn set_numvfs(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let n = u16::try_from(store_ul(data, u64::from(u16::MAX))?).map_err(|_| libc::EINVAL)?;
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        let Some((spec, cur)) = &d.sriov else {
            return Err(libc::ENOENT);
        };
        if n > spec.total_vfs {
            return Err(libc::ERANGE);
        }
        if n == *cur {
            return Ok(());
        }
        match d.driver.as_deref() {
            Some(drv) if SRIOV_DRIVERS.contains(&drv) => {}
            _ => return Err(libc::ENOENT),
        }
        if is_nvidia_vgpu_pf(d) && n != 0 && n != spec.total_vfs {
            return Err(libc::EINVAL);
        }
        if n == 0 {
            self.disable_vfs(addr);
            return Ok(());
        }
        if *cur != 0 {
            return Err(libc::EBUSY);
        }
        self.enable_vfs(addr, n);
        Ok(())
    }

    /// Whether a write of `data` to `sriov_numvfs` enables (true) or disables VFs.
    pub(crate) fn numvfs_op(data: &[u8]) -> KernelOp {
        match kstrtoul(data, u64::MAX) {
            Ok(0) => KernelOp::SriovDisable,
            _ => KernelOp::SriovEnable,
        }
    }

    fn enable_vfs(&mut self, pf: PciAddr, n: u16) {
        let Some(p) = self.devs.get(&pf) else { return };
        let Some((spec, _)) = p.sriov.clone() else {
            return;
        };
        let parent_dir = p
            .dir
            .rsplit_once('/')
            .map_or(String::new(), |(a, _)| a.to_owned());
        let template = p.clone();
        let mut made = 0u16;
        let mut vfs = Vec::new();
        for i in 0..n {
            let rid = u32::from(pf.routing_id())
                + u32::from(spec.offset)
                + u32::from(spec.stride) * u32::from(i);
            let Ok(rid) = u16::try_from(rid) else { break };
            let addr = pf.with_routing_id(rid);
            if self.devs.contains_key(&addr) {
                break;
            }
            let group = self.alloc_group();
            let vf = Dev {
                addr,
                dir: format!("{parent_dir}/{addr}"),
                device: spec.vf_device,
                driver: None,
                driver_override: None,
                group,
                reset_method: "flr".to_owned(),
                reset_methods: "flr".to_owned(),
                sriov: None,
                physfn: Some(pf),
                nv: NvVf::default(),
                unbind_lock: false,
                label: format!("{} VF {i}", template.label),
                ..template.clone()
            };
            self.devs.insert(addr, vf);
            vfs.push(addr);
            made += 1;
        }
        if let Some((_, cur)) = self.devs.get_mut(&pf).and_then(|p| p.sriov.as_mut()) {
            *cur = made;
        }
        if spec.autoprobe {
            for vf in vfs {
                self.probe(vf);
            }
        }
    }

    fn disable_vfs(&mut self, pf: PciAddr) {
        let vfs: Vec<PciAddr> = self
            .devs
            .values()
            .filter(|d| d.physfn == Some(pf))
            .map(|d| d.addr)
            .collect();
        for vf in vfs {
            self.mdevs.retain(|_, m| m.parent != vf);
            self.devs.remove(&vf);
        }
        if let Some((_, cur)) = self.devs.get_mut(&pf).and_then(|p| p.sriov.as_mut()) {
            *cur = 0;
        }
    }

    /// `sriov_drivers_autoprobe_store`: `0`/`1` (kstrtobool also takes y/n).
    pub(crate) fn set_autoprobe(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let v = parse_bool(data)?;
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        let (spec, _) = d.sriov.as_mut().ok_or(libc::ENOENT)?;
        spec.autoprobe = v;
        Ok(())
    }

    // ----- hot-plug -----

    /// `remove` attribute: the function, its VFs, children and mdevs go away; a rescan finds
    /// the functions (not the VFs) again.
    pub(crate) fn remove_device(&mut self, addr: PciAddr) -> KResult<()> {
        self.take_out(addr, true)
    }

    /// Takes a function out with everything below it; `rescannable` keeps the non-VF
    /// functions for a rescan, as a new `pci_dev` would find them: no driver, no
    /// `driver_override`, VFs disabled and `sriov_drivers_autoprobe` 1 (`sriov_init`).
    fn take_out(&mut self, addr: PciAddr, rescannable: bool) -> KResult<()> {
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        let prefix = format!("{}/", d.dir);
        let mut gone: Vec<PciAddr> = self
            .devs
            .values()
            .filter(|o| o.dir.starts_with(&prefix) || o.physfn == Some(addr))
            .map(|o| o.addr)
            .collect();
        gone.push(addr);
        for a in gone {
            self.mdevs.retain(|_, m| m.parent != a);
            let Some(mut d) = self.devs.remove(&a) else {
                continue;
            };
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

    /// `rescan` (bus/pci/rescan): removed functions come back and are probed.
    pub(crate) fn rescan(&mut self, data: &[u8]) -> KResult<()> {
        if store_ul(data, u64::MAX)? == 0 {
            return Ok(());
        }
        let back: Vec<Dev> = std::mem::take(&mut self.removed).into_values().collect();
        let addrs: Vec<PciAddr> = back.iter().map(|d| d.addr).collect();
        for d in back {
            self.devs.insert(d.addr, d);
        }
        if self.bus_autoprobe {
            for a in addrs {
                self.probe(a);
            }
        }
        Ok(())
    }

    // ----- mdev -----

    /// `create_store` + `mdev_device_create` (drivers/vfio/mdev): `EINVAL` for a bad UUID,
    /// `EEXIST` for a duplicate, `EBUSY` while the GPU's `unbindLock` is held (NVIDIA),
    /// `EUSERS` (NVIDIA) / `ENOSPC` (GVT-g) without capacity.
    pub(crate) fn mdev_create(
        &mut self,
        parent: PciAddr,
        type_id: &str,
        data: &[u8],
    ) -> KResult<()> {
        if data.len() < 36 || data.len() > 37 {
            return Err(libc::EINVAL);
        }
        let text = std::str::from_utf8(&data[..36]).map_err(|_| libc::EINVAL)?;
        let uuid = Uuid::try_parse(text).map_err(|_| libc::EINVAL)?;
        if self.mdevs.contains_key(&uuid) {
            return Err(libc::EEXIST);
        }
        let p = self.devs.get(&parent).ok_or(libc::ENODEV)?;
        if !p.is_mdev_parent() {
            return Err(libc::ENODEV);
        }
        let t = self.type_of(p, type_id).ok_or(libc::ENODEV)?;
        if self.unbind_locked(p.gpu) {
            return Err(libc::EBUSY);
        }
        if self.available(p, t) == 0 {
            return Err(if p.vgpu == Some(VgpuMode::Gvtg) {
                libc::ENOSPC
            } else {
                libc::EUSERS
            });
        }
        let group = self.alloc_group();
        self.mdevs.insert(
            uuid,
            Mdev {
                parent,
                type_id: type_id.to_owned(),
                group,
            },
        );
        Ok(())
    }

    /// `remove_store` of an mdev: `0` does nothing, non-numbers are `EINVAL`.
    pub(crate) fn mdev_remove(&mut self, uuid: Uuid, data: &[u8]) -> KResult<()> {
        if store_ul(data, u64::MAX)? == 0 {
            return Ok(());
        }
        self.mdevs.remove(&uuid).map(|_| ()).ok_or(libc::ENODEV)
    }

    // ----- NVIDIA vendor VFIO -----

    /// `current_vgpu_type` store: an id creates, `0` destroys; `EPERM` when one is already set
    /// or when clearing an unset VF; `EINVAL` for an id not in `creatable_vgpu_types`;
    /// `EBUSY` while the GPU's `unbindLock` is held.
    pub(crate) fn set_vgpu_type(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let id = u32::try_from(store_ul(data, u64::from(u32::MAX))?).map_err(|_| libc::EINVAL)?;
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        if self.unbind_locked(d.gpu) {
            return Err(libc::EBUSY);
        }
        if id == 0 {
            if d.nv.current == 0 {
                return Err(libc::EPERM);
            }
        } else {
            if d.nv.current != 0 {
                return Err(libc::EPERM);
            }
            let key = id.to_string();
            if !self.creatable(d).iter().any(|t| t.id == key) {
                return Err(libc::EINVAL);
            }
        }
        if let Some(d) = self.devs.get_mut(&addr) {
            d.nv.current = id;
        }
        Ok(())
    }

    /// `vgpu_params` store: refused (`EBUSY`) while a vGPU exists on the VF.
    pub(crate) fn set_vgpu_params(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let s = sysfs_str(data)?.to_owned();
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        if d.nv.current != 0 {
            return Err(libc::EBUSY);
        }
        d.nv.params = s;
        Ok(())
    }

    /// `/proc/driver/nvidia/gpus/<bdf>/unbindLock`: taking it (1) succeeds only on an idle
    /// GPU; read it back to know.
    pub(crate) fn set_unbind_lock(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let v = store_ul(data, u64::MAX)?;
        let busy = self.gpu_busy(addr);
        let d = self.devs.get_mut(&addr).ok_or(libc::ENODEV)?;
        d.unbind_lock = v != 0 && !busy;
        Ok(())
    }

    // ----- control -----

    /// Hot-unplug from the control interface: the hardware is gone, no rescan finds it.
    pub(crate) fn unplug(&mut self, addr: PciAddr) -> KResult<()> {
        let r = self.take_out(addr, false);
        self.sync_vfio();
        r
    }
}

/// `kstrtobool`: `1/y/Y/on` true, `0/n/N/off` false.
pub(crate) fn parse_bool(data: &[u8]) -> KResult<bool> {
    let s = sysfs_str(data)?;
    match s {
        "1" | "y" | "Y" | "on" => Ok(true),
        "0" | "n" | "N" | "off" => Ok(false),
        _ => Err(libc::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str) -> Kernel {
        Kernel::boot(Profile::builtin(name).expect("builtin profile"))
    }

    fn addr(s: &str) -> PciAddr {
        s.parse().expect("valid address")
    }

    #[test]
    fn kstrtoul_hex_prefix_parses() {
        assert_eq!(kstrtoul(b"0x10\n", 100), Ok(16));
    }

    #[test]
    fn kstrtoul_negative_is_einval() {
        assert_eq!(kstrtoul(b"-1", 100), Err(libc::EINVAL));
    }

    #[test]
    fn kstrtoul_above_max_is_erange() {
        assert_eq!(kstrtoul(b"70000", u64::from(u16::MAX)), Err(libc::ERANGE));
    }

    #[test]
    fn boot_l40s_enables_32_vfs_bound_to_nvidia() {
        let k = kernel("l40s-vendor-vfio");
        let vfs: Vec<&Dev> = k
            .devs
            .values()
            .filter(|d| d.physfn == Some(addr("0000:41:00.0")))
            .collect();
        assert_eq!(vfs.len(), 32);
        assert_eq!(vfs[0].addr.to_string(), "0000:41:00.4");
        assert_eq!(vfs[31].addr.to_string(), "0000:41:04.3");
        assert!(vfs.iter().all(|v| v.driver.as_deref() == Some("nvidia")));
    }

    #[test]
    fn available_legacy_other_type_in_use_is_zero() {
        let mut k = kernel("t4-legacy");
        let t4 = addr("0000:3b:00.0");
        k.mdev_create(t4, "nvidia-231", b"11111111-2222-3333-4444-555555555555")
            .expect("create");
        let d = &k.devs[&t4];
        let q2 = k.type_of(d, "nvidia-231").expect("type");
        let q1 = k.type_of(d, "nvidia-230").expect("type");
        assert_eq!((k.available(d, q2), k.available(d, q1)), (7, 0));
    }

    #[test]
    fn available_gvtg_mixes_types_by_resources() {
        let mut k = kernel("gvtg");
        let igpu = addr("0000:00:02.0");
        k.mdev_create(
            igpu,
            "i915-GVTg_V5_4",
            b"11111111-2222-3333-4444-555555555555",
        )
        .expect("create");
        let d = &k.devs[&igpu];
        let v8 = k.type_of(d, "i915-GVTg_V5_8").expect("type");
        let v4 = k.type_of(d, "i915-GVTg_V5_4").expect("type");
        assert_eq!((k.available(d, v8), k.available(d, v4)), (6, 3));
    }
}
