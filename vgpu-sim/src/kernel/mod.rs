//! The kernel model: PCI functions, drivers, SR-IOV, mdevs and NVIDIA vGPUs, with the rules and
//! errnos of the kernel code named in each function.
//!
//! `pci` holds drivers and binding (`drivers/base/{bus,dd}.c`, `drivers/pci/pci-driver.c`) and
//! hot-plug; `sriov` the VF count (`drivers/pci/iov.c`) and asynchronous VF probes; `vgpu`
//! mdevs and NVIDIA's vendor interface; `register` which devices are VFIO devices, kept in
//! [`VfioNodes`] after every change; `wait` what a store waits for before the kernel carries it
//! out. The simulated processes ([`Processes`]) and the VFIO registrations are the kernel's
//! state, in modules below this one that know nothing of it.

mod mig;
mod pci;
mod placement;
mod register;
mod sched;
mod sriov;
mod vgpu;
mod wait;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::control::{Fault, KernelOp, LatencyOp, RegistryLine, glob_match};
use crate::process::Processes;
use crate::profile::{DeviceSpec, IommuKind, PciAddr, Profile, SriovSpec, TypeSpec, VgpuMode};
use crate::uevent::UeventLog;
use crate::vfio::VfioNodes;

pub(crate) use crate::error::Errno;
pub(crate) use mig::MigState;
pub(crate) use pci::{DynId, pci_vars};
pub(crate) use placement::{Holder, parse_params, placement_size, region, supported_ids};
pub(crate) use sched::Scheduler;

/// The result of a kernel operation.
pub(crate) type KResult<T> = Result<T, Errno>;

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
    /// `gpu_instance_id` as written (`None`: reads `ENXIO`).
    pub(crate) gpu_instance: Option<u32>,
    /// `placement_id` as written (`None`: reads `ENXIO`).
    pub(crate) placement: Option<u32>,
    /// The mixed-size placement id of the running vGPU (`None` without one, or on a GPU
    /// without the mode).
    pub(crate) placed: Option<u32>,
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
    pub(crate) revision: u8,
    pub(crate) numa: i32,
    pub(crate) driver: Option<String>,
    /// `driver_override`: any bytes but NUL and newline (`driver_set_override`).
    pub(crate) driver_override: Option<Vec<u8>>,
    /// The driver the function boots with (the profile's `driver`): the one the SR-IOV
    /// settings `driver_max_vfs` and `driver_enables_at_most` describe.
    pub(crate) home_driver: Option<String>,
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
    /// Local memory in MiB (a PF's profile `local_memory_mib`; VFs copy it).
    pub(crate) lmem_mib: Option<u64>,
    /// The DRM card number of a PF with local memory (`sys/class/drm/card<N>`).
    pub(crate) drm_card: Option<u32>,
    /// A VF's local-memory quota in bytes (`iov/vf<M>/gt0/lmem_quota` of its PF).
    pub(crate) lmem_quota: u64,
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

    /// Whether the function is bound to the driver it boots with.
    fn on_home_driver(&self) -> bool {
        self.driver.is_some() && self.driver == self.home_driver
    }
}

/// One mediated device.
#[derive(Clone, Debug)]
pub(crate) struct Mdev {
    pub(crate) parent: PciAddr,
    pub(crate) type_id: String,
    pub(crate) group: Option<u32>,
    /// Its mixed-size placement id (`None` on a GPU without the mode).
    pub(crate) placement: Option<u32>,
    /// `nvidia/vgpu_params` as written.
    pub(crate) params: String,
}

/// The whole simulated kernel state. Cloned only to try a store out ([`Kernel::blockers`]).
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    pub(crate) profile: Profile,
    pub(crate) devs: BTreeMap<PciAddr, Dev>,
    removed: BTreeMap<PciAddr, Dev>,
    pub(crate) mdevs: BTreeMap<Uuid, Mdev>,
    pub(crate) drivers: Vec<String>,
    /// Dynamic ids added through `new_id`, by driver.
    dynids: BTreeMap<String, Vec<DynId>>,
    pub(crate) bus_autoprobe: bool,
    next_group: u32,
    pub(crate) faults: Vec<Fault>,
    pub(crate) latency: BTreeMap<LatencyOp, Duration>,
    /// Initial probes of new VFs still to run, with when (asynchronous probing).
    pending_probes: Vec<(Instant, PciAddr)>,
    /// The registered VFIO devices; [`Kernel::sync_vfio`] after every change of state.
    pub(crate) vfio: VfioNodes,
    /// Simulated processes and the files they hold open (control interface).
    pub(crate) procs: Processes,
    /// The uevents sent since boot.
    pub(crate) uevents: UeventLog,
    /// MIG mode and GPU instances of each MIG-capable GPU.
    pub(crate) mig: BTreeMap<PciAddr, MigState>,
    /// `/proc/sys/kernel/random/boot_id`: new at each boot, as the kernel's.
    pub(crate) boot_id: Uuid,
    /// The GPUs in mixed-size mode (`true`) or equal mode; equal at every boot.
    pub(crate) size_mode: BTreeMap<PciAddr, bool>,
    /// The vGPU scheduler each GPU was given since its driver bound (best effort otherwise).
    pub(crate) sched: BTreeMap<PciAddr, Scheduler>,
    /// The registry lines of `proc/driver/nvidia/params` (empty unless set).
    pub(crate) registry: BTreeMap<RegistryLine, String>,
    /// The state generation, from 0 at boot: advanced by every change of the state
    /// ([`Kernel::advance`]; `.vgpu-sim/generation` publishes it with the boot id).
    generation: u64,
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

/// `kstrtobool` (`lib/kstrtox.c`): only the first character counts, `y`/`Y`/`t`/`T`/`1`
/// true, `n`/`N`/`f`/`F`/`0` false, and `o` followed by `n` (true) or `f` (false), in either
/// case; anything else, or nothing, is `EINVAL`.
pub(crate) fn kstrtobool(data: &[u8]) -> KResult<bool> {
    match data.first() {
        Some(b'y' | b'Y' | b't' | b'T' | b'1') => Ok(true),
        Some(b'n' | b'N' | b'f' | b'F' | b'0') => Ok(false),
        Some(b'o' | b'O') => match data.get(1) {
            Some(b'n' | b'N') => Ok(true),
            Some(b'f' | b'F') => Ok(false),
            _ => Err(libc::EINVAL),
        },
        _ => Err(libc::EINVAL),
    }
}

impl Kernel {
    /// Boots the kernel on a profile: devices, drivers, boot-time VFs and their probe. The
    /// uevent log starts empty once the host is up.
    pub(crate) fn boot(profile: Profile) -> Self {
        let mut drivers: BTreeSet<String> = BASE_DRIVERS.iter().map(|s| (*s).to_owned()).collect();
        let mut devs = BTreeMap::new();
        for spec in &profile.devices {
            if let Some(d) = &spec.driver {
                drivers.insert(d.clone());
            }
            devs.insert(spec.addr, Self::dev_from_spec(&profile, spec));
        }
        // DRM cards are numbered in address order among the GPUs with local memory.
        for (card, d) in (0u32..).zip(devs.values_mut().filter(|d| d.lmem_mib.is_some())) {
            d.drm_card = Some(card);
        }
        let max_group = profile
            .devices
            .iter()
            .filter_map(|d| d.iommu_group)
            .max()
            .unwrap_or(0);
        let mut latency = BTreeMap::new();
        if profile.async_probe_ms > 0 {
            latency.insert(
                LatencyOp::Kernel(KernelOp::AsyncProbe),
                Duration::from_millis(profile.async_probe_ms),
            );
        }
        let mut k = Kernel {
            devs,
            removed: BTreeMap::new(),
            mdevs: BTreeMap::new(),
            drivers: drivers.into_iter().collect(),
            dynids: BTreeMap::new(),
            bus_autoprobe: true,
            next_group: max_group + 1,
            faults: Vec::new(),
            latency,
            pending_probes: Vec::new(),
            vfio: VfioNodes::default(),
            procs: Processes::default(),
            uevents: UeventLog::default(),
            mig: mig::boot_mig(&profile),
            boot_id: Uuid::new_v4(),
            size_mode: BTreeMap::new(),
            sched: BTreeMap::new(),
            registry: BTreeMap::new(),
            generation: 0,
            profile,
        };
        let pfs: Vec<(PciAddr, u16)> = k
            .devs
            .values()
            .filter_map(|d| d.sriov.as_ref().map(|(s, _)| (d.addr, s.num_vfs)))
            .filter(|(_, n)| *n > 0)
            .collect();
        for (pf, n) in pfs {
            k.enable_vfs(pf, n, Duration::ZERO);
        }
        k.sync_vfio();
        k.uevents.on = true;
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
            revision: spec.revision,
            numa: spec.numa_node,
            driver: spec.driver.clone(),
            driver_override: spec.driver_override.clone().map(String::into_bytes),
            home_driver: spec.driver.clone(),
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
            lmem_mib: spec.local_memory_mib,
            drm_card: None,
            lmem_quota: 0,
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

    /// Whether the kernel is at least `major.minor`.
    pub(crate) fn kernel_at_least(&self, major: u32, minor: u32) -> bool {
        self.profile.kernel_version() >= (major, minor)
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

    /// Whether a simulated process holds mdev `uuid`'s VFIO device (its cdev or its IOMMU
    /// group's node): a VM runs it.
    pub(crate) fn mdev_open(&self, uuid: Uuid) -> bool {
        self.vfio
            .get(crate::vfio::VfioKey::Mdev(uuid))
            .is_some_and(|dev| {
                let nodes = [
                    format!("/dev/vfio/devices/{}", crate::vfio::cdev_name(dev.index)),
                    format!("/dev/vfio/{}", dev.group),
                ];
                !self.procs.holding(&nodes).is_empty()
            })
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
        if self.mixed_on(parent.gpu) {
            let vf_used = self.mdevs.values().any(|m| m.parent == parent.addr);
            let free = self.mixed_room(parent.gpu, t);
            return match parent.vgpu {
                Some(VgpuMode::MdevOnVf) => u32::from(!vf_used && free),
                _ => u32::from(free),
            };
        }
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
        let mig = self.mig_on(vf.gpu);
        if self.mixed_on(vf.gpu) {
            // Mixed-size mode: time-sliced types of any size side by side, each while one of
            // its placements is free.
            return self
                .types_of(vf)
                .filter(|t| self.mixed_room(vf.gpu, t))
                .collect();
        }
        self.types_of(vf)
            .filter(|t| {
                let mine = used.get(&t.id).copied().unwrap_or(0);
                match (&t.gpu_instance_profile, mig) {
                    // MIG-backed types of different profiles share a GPU in MIG mode, each
                    // on a GPU instance of its own.
                    (Some(profile), true) => {
                        mine < t.max_instances && self.free_gpu_instance(vf.gpu, profile)
                    }
                    (Some(_), false) | (None, true) => false,
                    (None, false) => {
                        let others = used.iter().any(|(id, n)| id != &t.id && *n > 0);
                        !others && mine < t.max_instances
                    }
                }
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

    /// Runs the asynchronous probes that are due: called before every look at the state, so
    /// that a reader sees a VF bound once its probe time has passed. A probe run advances the
    /// state generation.
    pub(crate) fn settle(&mut self) {
        if self.pending_probes.is_empty() {
            return;
        }
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_probes)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.pending_probes = later;
        if !due.is_empty() {
            self.advance();
        }
        for (_, addr) in due {
            self.probe(addr);
        }
    }

    /// Advances the state generation: the state is about to change.
    pub(crate) fn advance(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// What `.vgpu-sim/generation` reads: the boot id and the state generation, one line.
    /// It differs after every change of the state and after every boot.
    pub(crate) fn generation_line(&self) -> String {
        format!("{} {}\n", self.boot_id, self.generation)
    }

    /// Hot-unplug from the control interface: the hardware is gone, no rescan finds it.
    pub(crate) fn unplug(&mut self, addr: PciAddr) -> KResult<()> {
        let r = self.take_out(addr, false);
        self.sync_vfio();
        r
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
    fn kstrtobool_only_first_character_counts() {
        assert_eq!(kstrtobool(b"yes please"), Ok(true));
    }

    #[test]
    fn kstrtobool_on_off_need_second_character() {
        assert_eq!(
            (kstrtobool(b"on"), kstrtobool(b"OFF"), kstrtobool(b"o")),
            (Ok(true), Ok(false), Err(libc::EINVAL))
        );
    }

    #[test]
    fn kstrtobool_empty_is_einval() {
        assert_eq!(kstrtobool(b""), Err(libc::EINVAL));
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
    fn boot_sends_no_uevents() {
        assert_eq!(kernel("l40s-vendor-vfio").uevents.render(), "");
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
