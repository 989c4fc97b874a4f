//! The one place that knows where the host's kernel interfaces live.

use std::path::{Path, PathBuf};

use crate::model::pci::PciAddress;

/// Where a host's `sys/`, `proc/`, `dev/`, `etc/`, `run/` and `var/` trees are.
///
/// Every path `vgpu` touches is derived from one root: `/` on a real host, a temporary tree in
/// tests, or a mounted `vgpu-sim` host. No other code spells `/sys`. The state trees (`etc/`,
/// `run/`, `var/`: definitions, the lock, the audit log) may live under a root of their own,
/// since a simulated kernel serves only `sys/`, `proc/` and `dev/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    root: PathBuf,
    state_root: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        Self::new("/")
    }
}

impl HostPaths {
    /// A host laid out under `root`, state included.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            state_root: root.clone(),
            root,
        }
    }

    /// The same host with its `etc/`, `run/` and `var/` under `state_root`.
    pub fn with_state_root(mut self, state_root: impl Into<PathBuf>) -> Self {
        self.state_root = state_root.into();
        self
    }

    /// The root of `etc/`, `run/` and `var/`.
    pub fn state_root(&self) -> &Path {
        &self.state_root
    }

    /// The root every other path is derived from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/sys`.
    pub fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    /// `<root>/proc`.
    pub fn proc(&self) -> PathBuf {
        self.root.join("proc")
    }

    /// `<root>/dev`.
    pub fn dev(&self) -> PathBuf {
        self.root.join("dev")
    }

    /// `<state root>/etc`.
    pub fn etc(&self) -> PathBuf {
        self.state_root.join("etc")
    }

    /// `<state root>/run`.
    pub fn run(&self) -> PathBuf {
        self.state_root.join("run")
    }

    /// `<state root>/var`.
    pub fn var(&self) -> PathBuf {
        self.state_root.join("var")
    }

    /// `<state root>/etc/vgpu/tenants.toml`: the tenant policy.
    pub fn tenants_toml(&self) -> PathBuf {
        self.etc().join("vgpu/tenants.toml")
    }

    /// `<state root>/etc/vgpu/hook.toml`: the libvirt hook's configuration.
    pub fn hook_toml(&self) -> PathBuf {
        self.etc().join("vgpu/hook.toml")
    }

    /// `<state root>/etc/vgpu/usage.toml`: the usage ledger's configuration.
    pub fn usage_toml(&self) -> PathBuf {
        self.etc().join("vgpu/usage.toml")
    }

    /// `sys/bus/pci/devices`: one link per PCI function.
    pub fn pci_devices(&self) -> PathBuf {
        self.sys().join("bus/pci/devices")
    }

    /// `sys/bus/pci/devices/<addr>`.
    pub fn pci_device(&self, address: &PciAddress) -> PathBuf {
        self.pci_devices().join(address.to_string())
    }

    /// `sys/bus/pci/drivers`.
    pub fn pci_drivers(&self) -> PathBuf {
        self.sys().join("bus/pci/drivers")
    }

    /// `sys/class/mdev_bus`: one link per mediated-device parent.
    pub fn mdev_bus(&self) -> PathBuf {
        self.sys().join("class/mdev_bus")
    }

    /// `sys/bus/mdev/devices`: one link per mediated device.
    pub fn mdev_devices(&self) -> PathBuf {
        self.sys().join("bus/mdev/devices")
    }

    /// `sys/kernel/iommu_groups`.
    pub fn iommu_groups(&self) -> PathBuf {
        self.sys().join("kernel/iommu_groups")
    }

    /// `sys/class/iommu`: one entry per active IOMMU unit (`dmarN`, `ivhdN`).
    pub fn iommu_class(&self) -> PathBuf {
        self.sys().join("class/iommu")
    }

    /// `sys/firmware/acpi/tables`.
    pub fn acpi_tables(&self) -> PathBuf {
        self.sys().join("firmware/acpi/tables")
    }

    /// `sys/module/<name>`.
    pub fn module(&self, name: &str) -> PathBuf {
        self.sys().join("module").join(name)
    }

    /// `proc/cmdline`.
    pub fn cmdline(&self) -> PathBuf {
        self.proc().join("cmdline")
    }

    /// `proc/sys/kernel/hostname`: the host's name, which a cluster names its node by.
    pub fn hostname(&self) -> PathBuf {
        self.proc().join("sys/kernel/hostname")
    }

    /// `proc/driver/nvidia/params`: the NVIDIA kernel module's parameters, with its registry
    /// settings.
    pub fn nvidia_params(&self) -> PathBuf {
        self.proc().join("driver/nvidia/params")
    }

    /// `proc/cpuinfo`.
    pub fn cpuinfo(&self) -> PathBuf {
        self.proc().join("cpuinfo")
    }

    /// `run/udev/control` under the root (not the state root): the socket `systemd-udevd`
    /// listens on while it runs.
    pub fn udev_control(&self) -> PathBuf {
        self.root.join("run/udev/control")
    }

    /// `.vgpu-sim/uevents`: on a host simulated by `vgpu-sim`, the log of the uevents its
    /// kernel sent.
    pub fn sim_uevents(&self) -> PathBuf {
        self.root.join(".vgpu-sim/uevents")
    }

    /// `dev/vfio/vfio`, the VFIO container device.
    pub fn vfio_container(&self) -> PathBuf {
        self.dev().join("vfio/vfio")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_root_is_slash() {
        assert_eq!(
            HostPaths::default().pci_devices(),
            PathBuf::from("/sys/bus/pci/devices")
        );
    }

    #[test]
    fn pci_device_joins_address_under_root() {
        let paths = HostPaths::new("/tmp/host");
        let addr = PciAddress::new(1, 0x41, 0, 0).map(|a| paths.pci_device(&a));
        assert_eq!(
            addr,
            Some(PathBuf::from("/tmp/host/sys/bus/pci/devices/0001:41:00.0"))
        );
    }
}
