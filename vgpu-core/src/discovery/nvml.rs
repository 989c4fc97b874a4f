//! NVIDIA's management library (NVML), loaded at run time when the driver is installed.
//!
//! sysfs cannot name the vGPUs of a full vendor-VFIO card (`creatable_vgpu_types` is only its
//! header then) nor state their frame buffer or instances per GPU; NVML can
//! (`nvmlDeviceGetSupportedVgpus`, `nvmlVgpuTypeGetMaxInstances`). Discovery works without it:
//! a host without an NVIDIA driver, or a host tree under another root, simply has no NVML, and
//! [`NvmlStatus`] says why. Built without the `nvml` cargo feature, NVML is never loaded and
//! the status says so.

use serde::Serialize;

use crate::host::paths::HostPaths;
use crate::model::{Gpu, Warning};

#[cfg(feature = "nvml")]
/// The library NVML lives in on every Linux driver install (the unversioned name comes only
/// with development packages).
const LIBRARY: &str = "libnvidia-ml.so.1";

/// Whether NVML was used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmlStatus {
    /// True when NVML was loaded and initialised.
    pub loaded: bool,
    /// The driver version NVML reports.
    pub driver_version: Option<String>,
    /// Why NVML is not used, when it is not.
    pub reason: Option<String>,
}

/// NVML, if it could be loaded, with its status.
pub struct Nvml {
    #[cfg(feature = "nvml")]
    nvml: Option<nvml_wrapper::Nvml>,
    status: NvmlStatus,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("status", &self.status)
            .finish()
    }
}

impl Nvml {
    /// Loads NVML for the host at `paths`. Only the local host (root `/`) has a driver NVML can
    /// talk to; for any other root NVML is not loaded.
    pub fn load(paths: &HostPaths) -> Self {
        if paths.root() != std::path::Path::new("/") {
            return Self::absent(format!(
                "the host root is {}, not /: NVML describes only the local driver",
                paths.root().display()
            ));
        }
        Self::load_local()
    }

    #[cfg(not(feature = "nvml"))]
    fn load_local() -> Self {
        Self::absent("built without NVML support (the `nvml` cargo feature of vgpu-core)")
    }

    #[cfg(feature = "nvml")]
    fn load_local() -> Self {
        match nvml_wrapper::Nvml::builder()
            .lib_path(std::ffi::OsStr::new(LIBRARY))
            .init()
        {
            Ok(nvml) => {
                let driver_version = nvml.sys_driver_version().ok();
                Self {
                    nvml: Some(nvml),
                    status: NvmlStatus {
                        loaded: true,
                        driver_version,
                        reason: None,
                    },
                }
            }
            Err(err) => {
                let reason = format!("cannot load NVML: {}", crate::error::error_chain(&err));
                tracing::info!("NVML not available, using sysfs only: {reason}");
                Self::absent(reason)
            }
        }
    }

    /// No NVML, for `reason`.
    pub fn absent(reason: impl Into<String>) -> Self {
        Self {
            #[cfg(feature = "nvml")]
            nvml: None,
            status: NvmlStatus {
                loaded: false,
                driver_version: None,
                reason: Some(reason.into()),
            },
        }
    }

    /// Whether NVML was loaded, and why not.
    pub fn status(&self) -> &NvmlStatus {
        &self.status
    }

    /// Without NVML support there is nothing to fill in.
    #[cfg(not(feature = "nvml"))]
    pub fn enrich(&self, _gpu: &mut Gpu) -> Vec<Warning> {
        Vec::new()
    }

    /// Fills in what sysfs left unknown about `gpu`'s vGPU types (name, frame buffer, instances
    /// per GPU) from NVML's supported-type list, matching type ids (`nvidia-<id>` for mdev
    /// types, the bare id for vendor-VFIO types). Never overrides what sysfs states.
    #[cfg(feature = "nvml")]
    pub fn enrich(&self, gpu: &mut Gpu) -> Vec<Warning> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        if gpu.vendor_id != Some(crate::model::NVIDIA_VENDOR_ID) || gpu.types.is_empty() {
            return Vec::new();
        }
        let warn = |err: nvml_wrapper::error::NvmlError| Warning {
            device: gpu.address.to_string(),
            message: format!("NVML: {}", crate::error::error_chain(&err)),
        };
        let device = match nvml.device_by_pci_bus_id(gpu.address.to_string()) {
            Ok(device) => device,
            Err(err) => return vec![warn(err)],
        };
        let supported = match device.vgpu_supported_types() {
            Ok(types) => types,
            Err(err) => return vec![warn(err)],
        };
        for nvml_type in supported {
            let id = nvml_type.id();
            let Some(ty) = gpu.types.iter_mut().find(|t| {
                t.id.trim_start_matches("nvidia-").parse::<u64>().ok() == Some(u64::from(id))
            }) else {
                continue;
            };
            if ty.name.is_none() {
                ty.name = nvml_type.name().ok();
            }
            if ty.framebuffer_mib.is_none() {
                ty.framebuffer_mib = nvml_type
                    .framebuffer_size()
                    .ok()
                    .map(|bytes| bytes / (1024 * 1024));
            }
            if ty.max_instances.is_none() {
                ty.max_instances = nvml_type.max_instances().ok();
                ty.recount();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_for_other_root_is_absent_with_reason() {
        let nvml = Nvml::load(&HostPaths::new("/tmp/host"));
        assert_eq!(
            nvml.status().reason.as_deref(),
            Some("the host root is /tmp/host, not /: NVML describes only the local driver")
        );
    }

    #[cfg(feature = "nvml")]
    #[test]
    fn load_without_driver_says_which_library_is_missing() {
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            return; // an NVIDIA driver is installed here: NVML may load.
        }
        let nvml = Nvml::load(&HostPaths::default());
        let reason = nvml.status().reason.clone().unwrap_or_default();
        assert!(
            !nvml.status().loaded
                && reason.starts_with("cannot load NVML: ")
                && reason.contains("libnvidia-ml.so.1"),
            "{reason}"
        );
    }
}
