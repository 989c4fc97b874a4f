//! A VF's local-memory quota set as steps of an operation, each with its undo.

use super::{Operation, Undo};
use crate::backend;
use crate::error::{Error, Object, Result};
use crate::host::driver;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, write_attr};
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;

impl Operation<'_> {
    /// Sets the local-memory quota of VF `m` (from 1, in `virtfn` order) of the plain SR-IOV GPU
    /// `pf` to `bytes`: `drm/card<N>/iov/vf<m>/gt*/lmem_quota` (intel-gpu-i915-backports,
    /// `gt/iov/intel_iov_sysfs.c`, which takes a byte count); returns the VF's address.
    ///
    /// The driver changes a quota only while no driver uses the VF, so a VF on a passthrough
    /// driver or held open is refused ([`Error::InUse`], [`Error::HeldOpen`]) and one on its
    /// host driver is unbound for the write and bound to it again after. Undo goes back step
    /// by step, newest first: the VF unbound, the previous quota written, its driver given
    /// back. A quota that already is `bytes` is left alone.
    pub(crate) fn set_lmem_quota(
        &mut self,
        pf: PciAddress,
        m: u32,
        bytes: u64,
    ) -> Result<PciAddress> {
        let paths = self.paths().clone();
        let device = PciDevice::existing(&paths, pf)?;
        let index = m as usize;
        let vfs = device.virtfns()?;
        let Some(vf) = index.checked_sub(1).and_then(|i| vfs.get(i)).copied() else {
            return Err(Error::NotFound {
                what: Object::PciDevice,
                id: format!("VF {m} of {pf}"),
                path: device
                    .path()
                    .join(format!("virtfn{}", index.saturating_sub(1))),
            });
        };
        let Some(path) = device.lmem_quota_path(index)? else {
            let iov = device.iov_dir()?;
            return Err(sysfs::missing(&match iov {
                Some(iov) => iov.join(format!("vf{m}/gt/lmem_quota")),
                None => device.path().join("drm"),
            }));
        };
        self.check_released(VgpuHandle::Vf(vf))?;
        if let Some(by) = backend::vf_holder(&paths, vf)? {
            return Err(Error::InUse {
                device: vf.to_string(),
                by,
            });
        }
        let previous = sysfs::read_parsed(&path, "a byte count", |t| t.parse::<u64>().ok())?
            .ok_or_else(|| sysfs::missing(&path))?;
        if previous == bytes {
            return Ok(vf);
        }
        let shown = vf.to_string();
        let host_driver = PciDevice::new(&paths, vf).driver()?;
        if let Some(name) = &host_driver {
            let result = driver::unbind(&paths, vf, self.within());
            self.step("unbind", &shown, result, |_| {
                Some(Undo::Driver {
                    address: vf,
                    previous: Some(name.clone()),
                })
            })?;
        }
        let result = write_attr(&path, &bytes.to_string());
        self.step("lmem-quota", &shown, result, |()| {
            Some(Undo::LmemQuota {
                vf,
                path: path.clone(),
                bytes: previous,
            })
        })?;
        if let Some(name) = &host_driver {
            let result = driver::restore(&paths, vf, Some(name), self.within());
            self.step("bind", &shown, result, |()| {
                Some(Undo::Driver {
                    address: vf,
                    previous: None,
                })
            })?;
        }
        Ok(vf)
    }
}
