//! `vgpu-core`: discovery, lifecycle and IOMMU checks for vGPUs and SR-IOV virtual functions on
//! KVM hosts.
//!
//! # The kernel model
//!
//! A GPU physical function (PF) is a PCI function (`sys/bus/pci/devices/<dddd:bb:dd.f>`) of
//! class `0x03xxxx` (display) or `0x12xxxx` (accelerator). It offers virtual GPUs through one
//! of four interfaces ([`Backend`]):
//!
//! - **mediated devices on the PF** (`mdev_supported_types/` under the PF): NVIDIA up to
//!   Turing, Intel GVT-g. Writing a UUID to a type's `create` makes a vGPU;
//! - **mediated devices on SR-IOV VFs**: NVIDIA Ampere; each VF holds at most one vGPU, so
//!   capacity is counted per physical GPU, never by summing VFs;
//! - **NVIDIA's vendor-specific VFIO interface** on VFs (`nvidia/current_vgpu_type`): Ada,
//!   Hopper, Blackwell with vGPU 17+;
//! - **plain SR-IOV VFs** (`sriov_numvfs`), each assigned whole: Intel Flex, AMD MxGPU.
//!
//! Devices are assigned to guests through VFIO, whose unit of isolation is the IOMMU group:
//! [`checks`] verifies the firmware tables, the kernel, interrupt remapping and each group.
//!
//! # Paths
//!
//! Every path is derived from one [`HostPaths`] root, so the same code runs against `/`, a test
//! tree, or a simulated host. Nothing here prints, and nothing panics on sysfs content: reads are
//! bounded, parses are checked, and problems with one device become warnings about that device.

#![forbid(unsafe_code)]

pub mod audit;
pub mod catalog;
pub mod checks;
pub mod driver;
mod error;
pub mod inventory;
pub mod lifecycle;
pub mod lock;
pub mod manager;
pub mod mdev;
pub mod nvidia;
pub mod nvml;
pub mod parse;
mod paths;
mod pci;
pub mod pci_device;
pub mod provision;
mod serde_hex;
pub mod sriov;
pub mod store;
mod sysfs;
#[cfg(feature = "test-support")]
pub mod testing;

pub use error::{Error, Result};
pub use inventory::{
    Backend, Gpu, Inventory, Vf, Vgpu, VgpuHandle, VgpuType, Warning, discover, discover_gpu,
};
pub use paths::HostPaths;
pub use pci::{PciAddress, PciAddressError};
