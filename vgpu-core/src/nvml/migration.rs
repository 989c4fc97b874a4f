//! NVIDIA's live-migration calls: a running vGPU's metadata, and NVML's verdict on another
//! host's vGPU metadata and a GPU here ("vGPU Migration" of the NVML API Reference Guide).
//! `manager::migrate_nvml` builds the source's document and the destination's judgement on
//! them.

use super::Nvml;
use crate::model::migration::Compatibility;
use crate::model::nvml::{EccMode, Fact};
use crate::model::pci::PciAddress;

/// A vGPU's metadata buffer, whole, with the fixed part decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawVgpuMetadata {
    /// The buffer NVML filled.
    pub bytes: Vec<u8>,
    /// The host driver version in it.
    pub host_driver: String,
    /// The guest driver version in it, once the guest reported one.
    pub guest_driver: Option<String>,
}

impl RawVgpuMetadata {
    /// `bytes` with their fixed part decoded; `None` when they are not whole vGPU metadata
    /// (shorter than the opaque section they announce), or when built without NVML, which
    /// knows the layout.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn decode(bytes: Vec<u8>) -> Option<Self> {
        #[cfg(feature = "nvml")]
        if let Some(header) = vgpu_nvml_ext::migration::vgpu_metadata_header(&bytes) {
            return Some(RawVgpuMetadata {
                bytes,
                host_driver: header.host_driver,
                guest_driver: header.guest_driver,
            });
        }
        None
    }
}

impl Nvml {
    /// The ECC mode of the GPU at `address` (`nvmlDeviceGetEccMode`), alone: a migration check
    /// needs only it.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn ecc_mode(&self, address: PciAddress) -> Fact<EccMode> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::ecc_mode_at(nvml, address);
        }
        self.not_loaded()
    }

    /// The metadata of the running vGPU `instance` (`nvmlVgpuInstanceGetMetadata`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn raw_vgpu_metadata(&self, instance: u32) -> Fact<RawVgpuMetadata> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::vgpu_metadata(nvml, instance);
        }
        self.not_loaded()
    }

    /// NVML's verdict on the vGPU of `metadata` (another host's `nvmlVgpuInstanceGetMetadata`)
    /// and the GPU at `address` here (`nvmlDeviceGetVgpuMetadata`, `nvmlGetVgpuCompatibility`).
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn compatibility(&self, address: PciAddress, metadata: &[u8]) -> Fact<Compatibility> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = self.wrapper() {
            return super::read::compatibility(nvml, address, metadata);
        }
        self.not_loaded()
    }
}
