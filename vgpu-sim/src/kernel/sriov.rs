//! SR-IOV (`drivers/pci/iov.c`): `sriov_numvfs`, the drivers that configure it, the
//! driver-lowered `sriov_totalvfs`, partial enables, and VFs whose probe runs after the write.

use std::time::{Duration, Instant};

use super::pci::is_nvidia_vgpu_pf;
use super::{Dev, KResult, Kernel, NvVf, kstrtoul, store_ul};
use crate::control::KernelOp;
use crate::profile::PciAddr;

impl Kernel {
    /// Whether `driver` has `sriov_configure`: `pci-pf-stub` (`pci_sriov_configure_simple`)
    /// and `xe` always, `i915` only as Intel's out-of-tree build (the profile's
    /// `out_of_tree_drivers`); not `nvidia`, nor `vfio-pci` without `enable_sriov`.
    fn has_sriov_configure(&self, driver: &str) -> bool {
        match driver {
            "pci-pf-stub" | "xe" => true,
            "i915" => self.profile.out_of_tree_drivers.iter().any(|d| d == "i915"),
            _ => false,
        }
    }

    /// `sriov_totalvfs` now (`pci_sriov_get_totalvfs`): what the device's own driver lowered
    /// it to while bound (`pci_sriov_set_totalvfs`), else what the device supports.
    pub(crate) fn total_vfs(d: &Dev) -> Option<u16> {
        let (spec, _) = d.sriov.as_ref()?;
        Some(match spec.driver_max_vfs {
            Some(max) if d.on_home_driver() => max.min(spec.total_vfs),
            _ => spec.total_vfs,
        })
    }

    /// `sriov_numvfs_store` (drivers/pci/iov.c): `EINVAL` for anything `kstrtou16` refuses
    /// (a u16 overflow included), `ERANGE` above `sriov_totalvfs` (as the bound driver set it),
    /// success for the current count, `ENOENT` without a driver that has `sriov_configure`,
    /// `EBUSY` for non-zero while VFs exist. The device's own driver may enable fewer than
    /// asked (`driver_enables_at_most`): the write still succeeds, `sriov_numvfs` says how
    /// many. A new VF's probe runs `async-probe` milliseconds later when that latency is set.
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
        if n > Self::total_vfs(d).unwrap_or(0) {
            return Err(libc::ERANGE);
        }
        if n == *cur {
            return Ok(());
        }
        match d.driver.as_deref() {
            Some(drv) if self.has_sriov_configure(drv) => {}
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
        let n = match spec.driver_enables_at_most {
            Some(most) if d.on_home_driver() => n.min(most),
            _ => n,
        };
        let delay = self.latency_for(KernelOp::AsyncProbe).unwrap_or_default();
        self.enable_vfs(addr, n, delay);
        Ok(())
    }

    /// Whether a write of `data` to `sriov_numvfs` enables (true) or disables VFs.
    pub(crate) fn numvfs_op(data: &[u8]) -> KernelOp {
        match kstrtoul(data, u64::MAX) {
            Ok(0) => KernelOp::SriovDisable,
            _ => KernelOp::SriovEnable,
        }
    }

    /// Adds `n` VFs beside the PF (`add` each) and, with `sriov_drivers_autoprobe` on, probes
    /// each: at once without `probe_delay`, else that much later ([`Kernel::settle`]).
    pub(super) fn enable_vfs(&mut self, pf: PciAddr, n: u16, probe_delay: Duration) {
        let Some(p) = self.devs.get(&pf) else { return };
        let Some((spec, _)) = p.sriov.clone() else {
            return;
        };
        let parent_dir = p
            .dir
            .rsplit_once('/')
            .map_or(String::new(), |(a, _)| a.to_owned());
        let template = p.clone();
        // The driver gives each enabled VF an equal share of local memory.
        let share = p.lmem_mib.unwrap_or(0) * 1024 * 1024 / u64::from(n.max(1));
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
                home_driver: None,
                group,
                reset_method: "flr".to_owned(),
                reset_methods: "flr".to_owned(),
                sriov: None,
                physfn: Some(pf),
                nv: NvVf::default(),
                unbind_lock: false,
                label: format!("{} VF {i}", template.label),
                drm_card: None,
                lmem_quota: share,
                ..template.clone()
            };
            self.devs.insert(addr, vf);
            vfs.push(addr);
            made += 1;
        }
        if let Some((_, cur)) = self.devs.get_mut(&pf).and_then(|p| p.sriov.as_mut()) {
            *cur = made;
        }
        // `pci_iov_add_virtfn`, VF by VF: `add`, then the probe (`pci_bus_add_device`).
        let at = Instant::now() + probe_delay;
        for vf in vfs {
            self.emit_pci(vf, "add", &[]);
            if !spec.autoprobe {
                continue;
            }
            if probe_delay.is_zero() {
                self.probe(vf);
            } else {
                self.pending_probes.push((at, vf));
            }
        }
    }

    /// Whether `pf` has per-VF local-memory quotas now: it has local memory and is bound to
    /// a driver that provisions VFs (Intel's out-of-tree `i915`, or `xe`).
    pub(crate) fn has_lmem_quotas(&self, pf: &Dev) -> bool {
        pf.drm_card.is_some()
            && pf
                .driver
                .as_deref()
                .is_some_and(|d| matches!(d, "i915" | "xe") && self.has_sriov_configure(d))
    }

    /// The VFs of `pf` in VF order (`vf1` first).
    pub(crate) fn vfs_of(&self, pf: PciAddr) -> Vec<&Dev> {
        let mut vfs: Vec<&Dev> = self
            .devs
            .values()
            .filter(|v| v.physfn == Some(pf))
            .collect();
        vfs.sort_by_key(|v| v.addr);
        vfs
    }

    /// Local memory of `pf` no VF's quota holds, in bytes (`iov/pf/gt0/available/
    /// lmem_max_quota`; i915 also keeps a spare for the PF, which the simulator does not).
    pub(crate) fn lmem_unprovisioned(&self, pf: PciAddr) -> KResult<u64> {
        let p = self.devs.get(&pf).ok_or(libc::ENODEV)?;
        let total = p.lmem_mib.unwrap_or(0) * 1024 * 1024;
        let given: u64 = self.vfs_of(pf).iter().map(|v| v.lmem_quota).sum();
        Ok(total.saturating_sub(given))
    }

    /// A store to `iov/vf<M>/gt0/lmem_quota` (Intel's i915 SR-IOV provisioning): `EINVAL`
    /// for anything but a byte count, `EBUSY` while the VF is bound to a driver, `EDQUOT`
    /// when the VFs' quotas together would exceed local memory (i915's `pf_provision_lmem`
    /// releases the VF's old quota, then refuses more than is free).
    pub(crate) fn set_lmem_quota(&mut self, vf: PciAddr, data: &[u8]) -> KResult<()> {
        let bytes = store_ul(data, u64::MAX)?;
        let d = self.devs.get(&vf).ok_or(libc::ENODEV)?;
        if d.driver.is_some() {
            return Err(libc::EBUSY);
        }
        let pf = d.physfn.ok_or(libc::ENODEV)?;
        let total = d.lmem_mib.unwrap_or(0) * 1024 * 1024;
        let others: u64 = self
            .vfs_of(pf)
            .iter()
            .filter(|v| v.addr != vf)
            .map(|v| v.lmem_quota)
            .sum();
        if others.saturating_add(bytes) > total {
            return Err(libc::EDQUOT);
        }
        if let Some(d) = self.devs.get_mut(&vf) {
            d.lmem_quota = bytes;
        }
        Ok(())
    }

    /// Removes every VF of `pf` (`sriov_del_vfs`, in order): each is unbound and deleted.
    pub(super) fn disable_vfs(&mut self, pf: PciAddr) {
        let vfs: Vec<PciAddr> = self
            .devs
            .values()
            .filter(|d| d.physfn == Some(pf))
            .map(|d| d.addr)
            .collect();
        for vf in vfs {
            self.remove_function(vf);
        }
        if let Some((_, cur)) = self.devs.get_mut(&pf).and_then(|p| p.sriov.as_mut()) {
            *cur = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn flex(edit: impl FnOnce(&mut crate::profile::SriovSpec)) -> (Kernel, PciAddr) {
        let mut p = Profile::builtin("flex-sriov").expect("builtin");
        let pf: PciAddr = "0000:4d:00.0".parse().expect("address");
        let dev = p.devices.iter_mut().find(|d| d.addr == pf).expect("flex");
        edit(dev.sriov.as_mut().expect("sriov"));
        (Kernel::boot(p), pf)
    }

    #[test]
    fn total_vfs_lowered_while_on_own_driver() {
        let (k, pf) = flex(|s| s.driver_max_vfs = Some(7));
        assert_eq!(Kernel::total_vfs(&k.devs[&pf]), Some(7));
    }

    #[test]
    fn total_vfs_back_to_device_total_after_unbind() {
        let (mut k, pf) = flex(|s| s.driver_max_vfs = Some(7));
        k.unbind("i915", "0000:4d:00.0").expect("unbind");
        assert_eq!(Kernel::total_vfs(&k.devs[&pf]), Some(16));
    }

    #[test]
    fn set_numvfs_partial_enable_succeeds_with_fewer() {
        let (mut k, pf) = flex(|s| s.driver_enables_at_most = Some(3));
        k.set_numvfs(pf, b"8").expect("write succeeds");
        assert_eq!(k.devs[&pf].sriov.as_ref().map(|(_, n)| *n), Some(3));
    }
}
