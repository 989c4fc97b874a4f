//! NVIDIA's management library (NVML), loaded at run time when the driver is installed.
//!
//! sysfs cannot name the vGPUs of a full vendor-VFIO card (`creatable_vgpu_types` is only its
//! header then), state their frame buffer or instances per GPU, list GPU instances, or say
//! what the vGPU scheduler does; NVML can. Everything here is optional: a host without an
//! NVIDIA driver, a host tree under another root, an older driver without a function, or a
//! GPU that does not support one, degrade to what sysfs says, with the reason kept
//! ([`NvmlStatus::reason`](crate::model::nvml::NvmlStatus::reason), [`Unavailable`](crate::model::nvml::Unavailable)). Built without the `nvml` cargo feature, NVML is
//! never loaded and the status says so.
//!
//! `nvml-wrapper` does the loading and the calls; the few NVML functions it does not wrap go
//! through `vgpu-nvml-ext`, over the same loaded library. This crate has no `unsafe`.
//!
//! NVIDIA's live-migration metadata and compatibility verdict are read here too (`migration`).
//!
//! Besides reading, NVML makes a few changes a MIG-backed vGPU needs (`mig_write`): MIG mode,
//! and GPU instances made at a placement and destroyed.

// Without the `nvml` feature nothing reads NVML, so their NVML halves go unused.
#[cfg_attr(not(feature = "nvml"), allow(dead_code))]
pub(crate) mod host_state;
pub(crate) mod mig;
pub(crate) mod mig_write;
mod migration;
#[cfg(feature = "nvml")]
mod read;
#[cfg_attr(not(feature = "nvml"), allow(dead_code))]
pub(crate) mod sched;
pub mod sizes;

pub use host_state::add_nvml_facts;
pub use mig_write::{CreatedGpuInstance, GpuInstancePlacement, MigModeChange, MigModeOutcome};
pub use migration::{RawVgpuMetadata, migration_checks, migration_metadata};
pub use sched::{SchedulerChange, SchedulerRequest};

use std::path::{Path, PathBuf};

use crate::host::paths::HostPaths;
use crate::model::nvml::{Cause, Fact, NvmlGpu, NvmlHost, NvmlStatus, UtilizationSample};
use crate::model::pci::PciAddress;
use crate::model::{Gpu, Warning};

/// The library NVML lives in on every Linux driver install (the unversioned name comes only
/// with development packages).
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

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
    /// Loads NVML for the host at `paths` from the driver's library ([`DEFAULT_LIBRARY`]).
    /// Only the local host (root `/`) has a driver that library talks to; for any other root
    /// NVML is not loaded.
    pub fn load(paths: &HostPaths) -> Self {
        Self::load_with(paths, None)
    }

    /// Loads NVML for the host at `paths`: from `library` when given (a path, or a name the
    /// dynamic loader resolves), whatever the root, since whoever names a library says it
    /// describes that host (a test library for a simulated host does); otherwise as
    /// [`Nvml::load`].
    pub fn load_with(paths: &HostPaths, library: Option<&Path>) -> Self {
        match library {
            Some(library) => Self::load_from(library),
            None if paths.root() != Path::new("/") => Self::absent(format!(
                "the host root is {}, not /: NVML describes only the local driver",
                paths.root().display()
            )),
            None => Self::load_from(Path::new(DEFAULT_LIBRARY)),
        }
    }

    /// Loads NVML from `library` (a path, or a file name the dynamic loader looks up) and
    /// initialises it.
    #[cfg(not(feature = "nvml"))]
    pub fn load_from(library: &Path) -> Self {
        let mut nvml =
            Self::absent("built without NVML support (the `nvml` cargo feature of vgpu-core)");
        nvml.status.library = Some(library.display().to_string());
        nvml
    }

    /// Loads NVML from `library` (a path, or a file name the dynamic loader looks up) and
    /// initialises it.
    #[cfg(feature = "nvml")]
    pub fn load_from(library: &Path) -> Self {
        let name = library.display().to_string();
        match nvml_wrapper::Nvml::builder()
            .lib_path(library.as_os_str())
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
                        library: Some(name),
                    },
                }
            }
            Err(err) => {
                let reason = format!(
                    "cannot load NVML: {}",
                    crate::error::foreign_error_chain(&err)
                );
                tracing::info!("NVML not available, using sysfs only: {reason}");
                let mut nvml = Self::absent(reason);
                nvml.status.library = Some(name);
                nvml
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
                library: None,
            },
        }
    }

    /// Whether NVML was loaded, and why not.
    pub fn status(&self) -> &NvmlStatus {
        &self.status
    }

    /// A fact that cannot be known because NVML is not loaded.
    pub(crate) fn not_loaded<T>(&self) -> Fact<T> {
        Fact::unknown(
            Cause::NotLoaded,
            format!(
                "NVML is not loaded: {}",
                self.status.reason.as_deref().unwrap_or("not initialised")
            ),
        )
    }

    /// The loaded library, if any.
    #[cfg(feature = "nvml")]
    pub(crate) fn wrapper(&self) -> Option<&nvml_wrapper::Nvml> {
        self.nvml.as_ref()
    }

    /// What NVML says about the host: every GPU it manages, each fact with the reason when it
    /// cannot be read. Without NVML, only the status.
    pub fn read(&self) -> NvmlHost {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = &self.nvml {
            return read::host(nvml, &self.status);
        }
        NvmlHost {
            status: self.status.clone(),
            nvml_version: self.not_loaded(),
            gpus: Vec::new(),
            device_count: self.not_loaded(),
            unreadable: Vec::new(),
        }
    }

    /// What NVML says about the GPU at `address`.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn read_gpu(&self, address: PciAddress) -> Fact<NvmlGpu> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = &self.nvml {
            return read::gpu_at(nvml, address);
        }
        self.not_loaded()
    }

    /// The utilisation samples of the vGPUs on the GPU at `address` taken after
    /// `since_us` (microseconds, as [`UtilizationSample::timestamp_us`]; 0 for the latest),
    /// for callers that poll.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn utilization(&self, address: PciAddress, since_us: u64) -> Fact<Vec<UtilizationSample>> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = &self.nvml {
            return read::utilization_at(nvml, address, since_us);
        }
        self.not_loaded()
    }

    /// Fills in what sysfs left unknown about `gpu`'s vGPU types (name, frame buffer,
    /// instances per GPU) from NVML's supported-type list, matching type ids (`nvidia-<id>`
    /// for mdev types, the bare id for vendor-VFIO types). Never overrides what sysfs states.
    /// A GPU NVML does not manage, or a driver that cannot list types, is a warning.
    #[cfg_attr(not(feature = "nvml"), allow(unused_variables))]
    pub fn enrich(&self, gpu: &mut Gpu) -> Vec<Warning> {
        #[cfg(feature = "nvml")]
        if let Some(nvml) = &self.nvml {
            return read::enrich(nvml, gpu);
        }
        Vec::new()
    }
}

/// Where NVML is loaded from for a command: the library named (`--nvml-library`,
/// `VGPU_NVML_LIBRARY`), or the driver's for the local host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvmlSource {
    /// The library to load; `None` for [`DEFAULT_LIBRARY`], on the local host only.
    pub library: Option<PathBuf>,
}

impl NvmlSource {
    /// Loads NVML for the host at `paths` from this source.
    pub fn load(&self, paths: &HostPaths) -> Nvml {
        Nvml::load_with(paths, self.library.as_deref())
    }
}

/// NVML for one host, loaded from its source the first time something needs it: a change
/// that needs no NVML (most do not) never loads the driver's library.
pub(crate) struct NvmlCell {
    paths: HostPaths,
    source: NvmlSource,
    cell: std::sync::OnceLock<Nvml>,
}

impl std::fmt::Debug for NvmlCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlCell")
            .field("source", &self.source)
            .field("loaded", &self.cell.get().map(Nvml::status))
            .finish()
    }
}

impl NvmlCell {
    /// NVML for the host at `paths`, from `source`, not loaded yet.
    pub(crate) fn new(paths: &HostPaths, source: NvmlSource) -> Self {
        Self {
            paths: paths.clone(),
            source,
            cell: std::sync::OnceLock::new(),
        }
    }

    /// NVML, loaded now if it was not.
    pub(crate) fn get(&self) -> &Nvml {
        self.cell.get_or_init(|| self.source.load(&self.paths))
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

    #[test]
    fn read_without_nvml_has_no_gpus_and_says_why() {
        let host = Nvml::absent("no driver").read();
        assert_eq!(
            (host.gpus.len(), host.device_count),
            (
                0,
                Fact::unknown(Cause::NotLoaded, "NVML is not loaded: no driver")
            )
        );
    }

    #[cfg(feature = "nvml")]
    #[test]
    fn load_from_missing_library_names_it() {
        let nvml = Nvml::load_from(Path::new("/nonexistent/libnvidia-ml.so.1"));
        let reason = nvml.status().reason.clone().unwrap_or_default();
        assert!(
            !nvml.status().loaded
                && reason.starts_with("cannot load NVML: ")
                && reason.contains("/nonexistent/libnvidia-ml.so.1"),
            "{reason}"
        );
    }
}
