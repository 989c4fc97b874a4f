//! NVIDIA's vGPU scheduler per physical GPU (vGPU user guide, "Scheduling Policies"), and the
//! registry lines of `proc/driver/nvidia/params` (the driver's README, "Configuring the NVIDIA
//! kernel module").

use super::{KResult, Kernel};
use crate::control::{RegistryLine, SchedPolicy};
use crate::profile::{PciAddr, VgpuMode};

/// One GPU's vGPU scheduler: its policy and time slice in nanoseconds (0: the driver's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scheduler {
    pub(crate) policy: SchedPolicy,
    pub(crate) timeslice_ns: u32,
}

/// The lines of `proc/driver/nvidia/params` before the registry's, as a 550-series driver
/// prints them with its defaults.
const PARAMS_HEAD: &str = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\n\
    DeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n\
    InitializeSystemMemoryAllocations: 1\nUsePageAttributeTable: 4294967295\nEnableMSI: 1\n\
    EnablePCIeGen3: 0\nMemoryPoolSize: 0\nKMallocHeapMaxSize: 0\nVMallocHeapMaxSize: 0\n\
    IgnoreMMIOCheck: 0\nTCEBypassMode: 0\nEnableStreamMemOPs: 0\nEnableUserNUMAManagement: 1\n\
    NvLinkDisable: 0\nRmProfilingAdminOnly: 1\nPreserveVideoMemoryAllocations: 0\n\
    EnableS0ixPowerManagement: 0\nS0ixPowerManagementVideoMemoryThreshold: 256\n\
    DynamicPowerManagement: 3\nDynamicPowerManagementVideoMemoryThreshold: 200\n\
    RegisterPCIDriver: 1\nEnablePCIERelaxedOrderingMode: 0\nEnableResizableBar: 0\n\
    EnableGpuFirmware: 18\nEnableGpuFirmwareLogs: 2\nEnableDbgBreakpoint: 0\n";

/// The lines after the registry's.
const PARAMS_TAIL: &str =
    "RmMsg: \"\"\nGpuBlacklist: \"\"\nTemporaryFilePath: \"\"\nExcludedGpus: \"\"\n";

impl Kernel {
    /// The scheduler of GPU `gpu` now: best effort with the default time slice unless set.
    pub(crate) fn scheduler(&self, gpu: PciAddr) -> Scheduler {
        self.sched.get(&gpu).copied().unwrap_or_default()
    }

    /// Sets the scheduler of `gpu`, as the driver does for NVML: `ENODEV` for a device that
    /// is not a vendor-VFIO physical GPU, `EINVAL` for fixed share in mixed-size mode,
    /// `EBUSY` while the GPU holds a vGPU.
    pub(crate) fn set_scheduler(&mut self, gpu: PciAddr, to: Scheduler) -> KResult<()> {
        let d = self.devs.get(&gpu).ok_or(libc::ENODEV)?;
        if d.physfn.is_some() || d.vgpu != Some(VgpuMode::VendorVfio) {
            return Err(libc::ENODEV);
        }
        if to.policy == SchedPolicy::FixedShare && self.mixed_on(gpu) {
            return Err(libc::EINVAL);
        }
        if self.gpu_busy(gpu) {
            return Err(libc::EBUSY);
        }
        self.sched.insert(gpu, to);
        Ok(())
    }

    /// Sets a registry line (`ENODEV` on a host without the `nvidia` driver).
    pub(crate) fn set_registry(&mut self, line: RegistryLine, value: String) -> KResult<()> {
        if !self.drivers.iter().any(|d| d == "nvidia") {
            return Err(libc::ENODEV);
        }
        self.registry.insert(line, value);
        Ok(())
    }

    /// `proc/driver/nvidia/params`: one `Name: value` line per module parameter, the
    /// registry's quoted.
    pub(crate) fn nvidia_params(&self) -> String {
        let value = |line: RegistryLine| self.registry.get(&line).cloned().unwrap_or_default();
        format!(
            "{PARAMS_HEAD}RegistryDwords: \"{}\"\nRegistryDwordsPerDevice: \"{}\"\n{PARAMS_TAIL}",
            value(RegistryLine::Dwords),
            value(RegistryLine::PerDevice)
        )
    }
}
