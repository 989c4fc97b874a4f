//! A VF's local-memory quota set as steps of an operation, each with its undo, and recorded in
//! its PF's SR-IOV definition.

use super::{Operation, Undo};
use crate::backend;
use crate::error::{Error, Object, Result};
use crate::host::driver;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, write_attr};
use crate::model::VgpuHandle;
use crate::model::pci::PciAddress;
use crate::plan::planner::vfs::quota_matches;
use crate::state::store::MIB;

impl Operation<'_> {
    /// Sets the local-memory quota of VF `m` (from 1, in `virtfn` order) of the plain SR-IOV GPU
    /// `pf` to `mib` MiB: `drm/card<N>/iov/vf<m>/gt*/lmem_quota` (intel-gpu-i915-backports,
    /// `gt/iov/intel_iov_sysfs.c`, which takes a byte count); returns the VF's address and
    /// whether its quota changed.
    ///
    /// A quota that already matches `mib` (as the planner matches them: i915 rounds up to
    /// 2 MiB) is left alone. Otherwise the driver changes a quota only while no driver uses
    /// the VF, so a VF on a passthrough driver or held open is refused ([`Error::InUse`],
    /// [`Error::HeldOpen`]) and one on its host driver is unbound for the write and bound to it
    /// again after. Undo goes back step by step, newest first: the VF unbound, the previous
    /// quota written, its driver given back.
    pub(crate) fn set_lmem_quota(
        &mut self,
        pf: PciAddress,
        m: u32,
        mib: u64,
    ) -> Result<(PciAddress, bool)> {
        let bytes = mib
            .checked_mul(MIB)
            .ok_or_else(|| Error::bad_name(&mib.to_string(), "a quota whose bytes fit 64 bits"))?;
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
        let previous = sysfs::read_parsed(&path, "a byte count", |t| t.parse::<u64>().ok())?
            .ok_or_else(|| sysfs::missing(&path))?;
        if quota_matches(previous / MIB, mib) {
            return Ok((vf, false));
        }
        self.check_removable(VgpuHandle::Vf(vf))?;
        if let Some(by) = backend::vf_holder(&paths, vf)? {
            return Err(Error::InUse {
                device: vf.to_string(),
                by,
            });
        }
        let shown = vf.to_string();
        let host_driver = PciDevice::new(&paths, vf).driver()?;
        if let Some(name) = &host_driver {
            let result = driver::set_aside(&paths, vf, name, self.within());
            self.step("unbind", &shown, result, |()| {
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
            let result = driver::restore(&paths, vf, Some(name), self.within())
                .and_then(|()| driver::forget_previous(&paths, vf));
            self.step("bind", &shown, result, |()| {
                Some(Undo::SetAside {
                    address: vf,
                    driver: name.clone(),
                })
            })?;
        }
        Ok((vf, true))
    }

    /// Records in the SR-IOV definition of `pf` that its VF `m` has `mib` MiB of local memory,
    /// so that `restore` gives it that quota after a reboot; undo puts back the definition as
    /// it was. A PF whose VF count has no definition records nothing: its VFs do not come back
    /// at boot either.
    pub(crate) fn define_lmem_quota(&mut self, pf: PciAddress, m: u32, mib: u64) -> Result<()> {
        let Some(mut def) = self.store().sriov_of(pf)? else {
            return Ok(());
        };
        if def.lmem_quota_mib.insert(m, mib) == Some(mib) {
            return Ok(());
        }
        self.define_sriov(&def)
    }
}
