//! Entry points for the fuzz targets of the repository's `fuzz/` crate (feature `fuzzing`): the
//! crate's private parsers of sysfs text and of definition files, called unchanged, so that a
//! fuzz target runs exactly the code discovery and the store run. Each function is a thin
//! wrapper; values whose types are private are returned as `impl Debug`.
//!
//! Not part of the API: nothing outside `fuzz/` uses it, and it changes with the parsers.

use std::fmt::Debug;
use std::path::Path;

use uuid::Uuid;

use crate::error::Result;
use crate::model::pci::PciAddress;
use crate::parse;
use crate::state::format;
use crate::state::store::{BindingDefinition, MdevDefinition, SriovDefinition, VfVgpuDefinition};

pub use crate::parse::ParseError;

/// An NVIDIA mdev type's `description` (`num_heads=4, frl_config=60, ...`).
pub fn nvidia_description(
    text: &str,
) -> std::result::Result<impl Debug + PartialEq + use<>, ParseError> {
    parse::parse_nvidia_description(text)
}

/// An Intel GVT-g type's `description`, and the frame buffer discovery derives from it.
pub fn gvtg_description(
    text: &str,
) -> std::result::Result<(impl Debug + PartialEq + use<>, Option<u64>), ParseError> {
    parse::parse_gvtg_description(text).map(|d| {
        let framebuffer = d.framebuffer_mib();
        (d, framebuffer)
    })
}

/// The instance count in a GVT-g type id (`i915-GVTg_V5_4`).
pub fn gvtg_type_instances(type_id: &str) -> Option<u32> {
    parse::gvtg_type_instances(type_id)
}

/// A VF's `nvidia/creatable_vgpu_types`, as `(id, name)` pairs.
pub fn creatable_vgpu_types(text: &str) -> std::result::Result<Vec<(u32, String)>, ParseError> {
    parse::parse_creatable_types(text)
        .map(|types| types.into_iter().map(|t| (t.id, t.name)).collect())
}

/// An NVIDIA vGPU type name (`NVIDIA A40-2Q`, `A100-1-5C`), and the frame buffer it states in
/// MiB.
pub fn nvidia_type_name(name: &str) -> Option<(impl Debug + PartialEq + use<>, u64)> {
    parse::parse_nvidia_type_name(name).map(|t| {
        let framebuffer = t.framebuffer_mib;
        (t, framebuffer)
    })
}

/// The name without its `NVIDIA ` or `GRID ` prefix.
pub fn strip_vendor_prefix(name: &str) -> &str {
    parse::strip_vendor_prefix(name)
}

/// mdevctl's file for `def`, as the store writes it to `path`.
pub fn encode_mdev(path: &Path, def: &MdevDefinition) -> Result<Vec<u8>> {
    format::encode_mdev(path, def)
}

/// The definition of mdev `uuid` under `parent` in mdevctl's file `text`, read from `path`.
pub fn decode_mdev(path: &Path, uuid: Uuid, parent: &str, text: &str) -> Result<MdevDefinition> {
    format::decode_mdev(path, uuid, parent, text)
}

/// `etc/vgpu/sriov/<pf>.json` for `def`.
pub fn encode_sriov(path: &Path, def: &SriovDefinition) -> Result<Vec<u8>> {
    format::encode_sriov(path, def)
}

/// The SR-IOV definition of `pf` in `text`.
pub fn decode_sriov(path: &Path, pf: PciAddress, text: &str) -> Result<SriovDefinition> {
    format::decode_sriov(path, pf, text)
}

/// `etc/vgpu/vf-vgpus/<vf>.json` for `def`.
pub fn encode_vf_vgpu(path: &Path, def: &VfVgpuDefinition) -> Result<Vec<u8>> {
    format::encode_vf_vgpu(path, def)
}

/// The vGPU definition of `vf` in `text`.
pub fn decode_vf_vgpu(path: &Path, vf: PciAddress, text: &str) -> Result<VfVgpuDefinition> {
    format::decode_vf_vgpu(path, vf, text)
}

/// `etc/vgpu/bindings/<address>.json` for `def`.
pub fn encode_binding(path: &Path, def: &BindingDefinition) -> Result<Vec<u8>> {
    format::encode_binding(path, def)
}

/// The binding definition of `address` in `text`.
pub fn decode_binding(path: &Path, address: PciAddress, text: &str) -> Result<BindingDefinition> {
    format::decode_binding(path, address, text)
}
