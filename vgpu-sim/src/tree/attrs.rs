//! File contents and stores: what a read returns and what a write does, with its errno.

use std::fmt::Write as _;

use uuid::Uuid;

use super::{DrvAttr, FileRef, PciAttr, TypeAttr};
use crate::control::KernelOp;
use crate::kernel::{Errno, KResult, Kernel, kstrtoul, store_ul, sysfs_str};
use crate::profile::{PciAddr, VgpuMode};
use crate::uevent::{devpath, parse_synth};

impl Kernel {
    /// The content of a file now.
    pub(crate) fn read(&self, f: &FileRef) -> KResult<Vec<u8>> {
        let s = match f {
            FileRef::Text(t) => t.clone(),
            FileRef::Bin(b) => return Ok(b.clone()),
            FileRef::Control | FileRef::Counters => return Err(libc::EIO),
            FileRef::Uevents => self.uevents.render(),
            FileRef::Generation => self.generation_line(),
            FileRef::NvidiaState(gpu) => return self.nvidia_state(*gpu),
            FileRef::Pci(a, PciAttr::DriverOverride) => {
                let d = self.devs.get(a).ok_or(libc::ENODEV)?;
                let mut v = d
                    .driver_override
                    .clone()
                    .unwrap_or_else(|| b"(null)".to_vec());
                v.push(b'\n');
                return Ok(v);
            }
            FileRef::Pci(a, PciAttr::Config) => {
                return Ok(self.config_space(self.devs.get(a).ok_or(libc::ENODEV)?));
            }
            FileRef::Pci(a, attr) => self.read_pci(*a, *attr)?,
            FileRef::Type(a, id, attr) => {
                let p = self.devs.get(a).ok_or(libc::ENODEV)?;
                let t = self.type_of(p, id).ok_or(libc::ENODEV)?;
                match attr {
                    TypeAttr::Name => format!("{}\n", t.name),
                    TypeAttr::Available => format!("{}\n", self.available(p, t)),
                    TypeAttr::DeviceApi => "vfio-pci\n".to_owned(),
                    TypeAttr::Create => return Err(libc::EACCES),
                    TypeAttr::Description if p.vgpu == Some(VgpuMode::Gvtg) => format!(
                        "low_gm_size: {}MB\nhigh_gm_size: {}MB\nfence: {}\nresolution: {}\nweight: {}\n",
                        t.low_gm_mib,
                        t.high_gm_mib,
                        t.fence,
                        t.max_resolution.as_deref().unwrap_or("1920x1200"),
                        t.weight
                    ),
                    TypeAttr::Description => format!(
                        "num_heads={}, frl_config={}, framebuffer={}M, max_resolution={}, max_instance={}\n",
                        t.heads.unwrap_or(1),
                        t.frl.unwrap_or(60),
                        t.framebuffer_mib,
                        t.max_resolution.as_deref().unwrap_or("1280x1024"),
                        t.max_instances
                    ),
                }
            }
            FileRef::MdevParams(u) => {
                format!("{}\n", self.mdevs.get(u).ok_or(libc::ENODEV)?.params)
            }
            FileRef::MdevRemove(_)
            | FileRef::Driver(..)
            | FileRef::DriversProbe
            | FileRef::Rescan => {
                return Err(libc::EACCES);
            }
            FileRef::BusAutoprobe => format!("{}\n", u8::from(self.bus_autoprobe)),
            FileRef::UnbindLock(a) => {
                format!(
                    "{}\n",
                    u8::from(self.devs.get(a).ok_or(libc::ENODEV)?.unbind_lock)
                )
            }
            FileRef::LmemQuota(a) => {
                format!("{}\n", self.devs.get(a).ok_or(libc::ENODEV)?.lmem_quota)
            }
            FileRef::LmemMaxQuota(a) => format!("{}\n", self.lmem_unprovisioned(*a)?),
            FileRef::NvInfo(a) => {
                let d = self.devs.get(a).ok_or(libc::ENODEV)?;
                format!(
                    "Model: \t\t {}\nIRQ:   \t\t 0\nGPU UUID: \t GPU-{}\nBus Type: \t PCIe\n\
                     DMA Size: \t 47 bits\nBus Location: \t {}\nDevice Minor: \t 0\n",
                    d.label,
                    Uuid::from_u128(u128::from(d.addr.routing_id()) | (0x5eed << 64)),
                    d.addr
                )
            }
        };
        Ok(s.into_bytes())
    }

    fn read_pci(&self, a: PciAddr, attr: PciAttr) -> KResult<String> {
        let d = self.devs.get(&a).ok_or(libc::ENODEV)?;
        let sriov = || d.sriov.as_ref().ok_or(libc::ENOENT);
        Ok(match attr {
            PciAttr::Vendor => format!("{:#06x}\n", d.vendor),
            PciAttr::Device => format!("{:#06x}\n", d.device),
            PciAttr::SubVendor => format!("{:#06x}\n", d.sub_vendor),
            PciAttr::SubDevice => format!("{:#06x}\n", d.sub_device),
            PciAttr::Class => format!("{:#08x}\n", d.class),
            PciAttr::Revision => format!("{:#04x}\n", d.revision),
            PciAttr::Numa => format!("{}\n", d.numa),
            PciAttr::ResetMethod if d.reset_method.is_empty() => String::new(),
            PciAttr::ResetMethod => format!("{}\n", d.reset_method),
            PciAttr::Enable => format!("{}\n", u8::from(d.driver.is_some())),
            PciAttr::Uevent => crate::kernel::pci_vars(d)
                .iter()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect(),
            PciAttr::SriovTotal => {
                sriov()?;
                format!("{}\n", Kernel::total_vfs(d).unwrap_or(0))
            }
            PciAttr::SriovNum => format!("{}\n", sriov()?.1),
            PciAttr::SriovOffset => format!("{}\n", sriov()?.0.offset),
            PciAttr::SriovStride => format!("{}\n", sriov()?.0.stride),
            PciAttr::SriovVfDevice => format!("{:x}\n", sriov()?.0.vf_device),
            PciAttr::SriovAutoprobe => format!("{}\n", u8::from(sriov()?.0.autoprobe)),
            PciAttr::NvCreatable => {
                let mut s = "ID    : vGPU Name\n".to_owned();
                // Ids are canonical decimals, checked when the profile loads.
                for t in self.creatable(d) {
                    let _ = writeln!(s, "{:<5} : {}", t.id, t.name);
                }
                s
            }
            PciAttr::NvCurrent => format!("{}\n", d.nv.current),
            PciAttr::NvParams => format!("{}\n", d.nv.params),
            PciAttr::NvGpuInstance => format!("{}\n", d.nv.gpu_instance.ok_or(libc::ENXIO)?),
            PciAttr::NvPlacement => format!("{}\n", d.nv.placement.ok_or(libc::ENXIO)?),
            PciAttr::Reset | PciAttr::Remove | PciAttr::DriverOverride | PciAttr::Config => {
                return Err(libc::EACCES);
            }
        })
    }

    /// The kernel operation a store stands for (for latency), if any.
    pub(crate) fn op_of(f: &FileRef, data: &[u8]) -> Option<KernelOp> {
        match f {
            FileRef::Pci(_, PciAttr::SriovNum) => Some(Kernel::numvfs_op(data)),
            FileRef::Pci(_, PciAttr::Reset) => Some(KernelOp::Reset),
            FileRef::Pci(_, PciAttr::NvCurrent) => Some(match kstrtoul(data, u64::MAX) {
                Ok(0) => KernelOp::VgpuDestroy,
                _ => KernelOp::VgpuCreate,
            }),
            FileRef::Type(_, _, TypeAttr::Create) => Some(KernelOp::MdevCreate),
            FileRef::MdevRemove(_) => Some(KernelOp::MdevRemove),
            FileRef::Driver(_, DrvAttr::Bind) => Some(KernelOp::Bind),
            FileRef::Driver(_, DrvAttr::Unbind) => Some(KernelOp::Unbind),
            FileRef::DriversProbe => Some(KernelOp::Probe),
            _ => None,
        }
    }

    /// A store to a file: the errno of that store, as sysfs returns it. VFIO devices
    /// register and unregister as the store leaves them.
    pub(crate) fn write(&mut self, f: &FileRef, data: &[u8]) -> Result<(), Errno> {
        let r = self.store(f, data);
        self.sync_vfio();
        r
    }

    /// A store to a file, without registering VFIO devices afterwards (see [`Kernel::write`]).
    pub(crate) fn store(&mut self, f: &FileRef, data: &[u8]) -> Result<(), Errno> {
        match f {
            FileRef::Pci(a, attr) => match attr {
                PciAttr::SriovNum => self.set_numvfs(*a, data),
                PciAttr::SriovAutoprobe => self.set_autoprobe(*a, data),
                PciAttr::DriverOverride => self.set_driver_override(*a, data),
                PciAttr::Reset => self.reset(*a, data),
                PciAttr::Remove => {
                    if store_ul(data, u64::MAX)? == 0 {
                        Ok(())
                    } else {
                        self.remove_device(*a)
                    }
                }
                PciAttr::NvCurrent => self.set_vgpu_type(*a, data),
                PciAttr::NvParams => self.set_vgpu_params(*a, data),
                PciAttr::NvGpuInstance => self.set_gpu_instance(*a, data),
                PciAttr::NvPlacement => self.set_placement(*a, data),
                PciAttr::ResetMethod => self.set_reset_method(*a, data),
                PciAttr::Uevent => self.synth_uevent(*a, data),
                PciAttr::Enable => sysfs_str(data).map(|_| ()),
                _ => Err(libc::EACCES),
            },
            FileRef::Type(a, id, TypeAttr::Create) => self.mdev_create(*a, id, data),
            FileRef::MdevRemove(u) => self.mdev_remove(*u, data),
            FileRef::MdevParams(u) => self.set_mdev_params(*u, data),
            FileRef::Driver(drv, DrvAttr::Bind) => self.bind(drv, sysfs_str(data)?),
            FileRef::Driver(drv, DrvAttr::Unbind) => self.unbind(drv, sysfs_str(data)?),
            FileRef::Driver(drv, DrvAttr::NewId) => self.new_id(drv, data),
            FileRef::Driver(drv, DrvAttr::RemoveId) => self.remove_id(drv, data),
            FileRef::DriversProbe => self.drivers_probe(sysfs_str(data)?),
            FileRef::Rescan => self.rescan(data),
            FileRef::BusAutoprobe => {
                self.set_bus_autoprobe(data);
                Ok(())
            }
            FileRef::UnbindLock(a) => self.set_unbind_lock(*a, data),
            FileRef::LmemQuota(a) => self.set_lmem_quota(*a, data),
            _ => Err(libc::EACCES),
        }
    }

    /// A write to a function's `uevent` (`uevent_store`, `kobject_synth_uevent`): the action
    /// it names is sent as a synthetic event (`SYNTH_UUID`, `SYNTH_ARG_*`); `EINVAL` for
    /// anything else.
    fn synth_uevent(&mut self, addr: PciAddr, data: &[u8]) -> KResult<()> {
        let (action, synth) = parse_synth(data)?;
        let d = self.devs.get(&addr).ok_or(libc::ENODEV)?;
        let path = devpath(&d.path());
        let mut vars = crate::kernel::pci_vars(d);
        vars.extend(synth);
        self.uevents.push(&action, path, "pci", vars);
        Ok(())
    }
}
