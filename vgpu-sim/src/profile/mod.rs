//! Host profiles: the hardware a simulated host starts with, as TOML data files.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

use crate::error::SimError;

mod mig;

pub use mig::{GpuInstanceProfileSpec, GpuInstanceSpec, MigSpec};
pub(crate) use mig::{PlacedInstance, overlaps, place, remaining};

/// The built-in profiles, embedded so the binary works from any directory.
const BUILTIN: &[(&str, &str)] = &[
    ("t4-legacy", include_str!("../../profiles/t4-legacy.toml")),
    (
        "a40-vf-mdev",
        include_str!("../../profiles/a40-vf-mdev.toml"),
    ),
    (
        "l40s-vendor-vfio",
        include_str!("../../profiles/l40s-vendor-vfio.toml"),
    ),
    ("gvtg", include_str!("../../profiles/gvtg.toml")),
    ("flex-sriov", include_str!("../../profiles/flex-sriov.toml")),
    ("mixed", include_str!("../../profiles/mixed.toml")),
    ("large", include_str!("../../profiles/large.toml")),
    (
        "a40x8-vf-mdev",
        include_str!("../../profiles/a40x8-vf-mdev.toml"),
    ),
    ("no-iommu", include_str!("../../profiles/no-iommu.toml")),
    ("h200-mig", include_str!("../../profiles/h200-mig.toml")),
    ("mixed-size", include_str!("../../profiles/mixed-size.toml")),
];

const CATALOG: &str = include_str!("../../profiles/catalog.toml");

/// A PCI address `dddd:bb:ss.f` with its 16-bit domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI segment (domain).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Slot (device) number, 0..32.
    pub slot: u8,
    /// Function number, 0..8.
    pub function: u8,
}

impl PciAddr {
    /// The routing id `bus << 8 | devfn` used by SR-IOV offset/stride arithmetic.
    pub fn routing_id(self) -> u16 {
        (u16::from(self.bus) << 8) | (u16::from(self.slot) << 3) | u16::from(self.function)
    }

    /// The address with the same domain and the given routing id.
    pub fn with_routing_id(self, rid: u16) -> Self {
        let [bus, devfn] = rid.to_be_bytes();
        Self {
            domain: self.domain,
            bus,
            slot: devfn >> 3,
            function: devfn & 7,
        }
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.slot, self.function
        )
    }
}

/// A string that is not a PCI address `dddd:bb:ss.f`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a PCI address (dddd:bb:ss.f): {0:?}")]
pub struct BadPciAddr(pub String);

impl FromStr for PciAddr {
    type Err = BadPciAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPciAddr(s.to_owned());
        let (domain, rest) = s.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (slot, function) = rest.split_once('.').ok_or_else(bad)?;
        let hex = |t: &str, len: usize| {
            if t.len() == len && t.bytes().all(|b| b.is_ascii_hexdigit()) {
                u16::from_str_radix(t, 16).map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        let domain = hex(domain, 4)?;
        let bus = u8::try_from(hex(bus, 2)?).map_err(|_| bad())?;
        let slot = u8::try_from(hex(slot, 2)?).map_err(|_| bad())?;
        let function = u8::try_from(hex(function, 1)?).map_err(|_| bad())?;
        if slot > 0x1f || function > 7 {
            return Err(bad());
        }
        Ok(Self {
            domain,
            bus,
            slot,
            function,
        })
    }
}

impl<'de> Deserialize<'de> for PciAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Which IOMMU the firmware and kernel expose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IommuKind {
    /// Intel VT-d: ACPI `DMAR`, `sys/class/iommu/dmar0`.
    #[default]
    Intel,
    /// AMD-Vi: ACPI `IVRS`, `sys/class/iommu/ivhd0`.
    Amd,
    /// No active IOMMU: no table, no groups.
    None,
}

/// How a GPU offers virtual GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VgpuMode {
    /// NVIDIA legacy mdev: the PF is the mdev parent.
    Mdev,
    /// NVIDIA mdev on SR-IOV VFs: each VF bound to `nvidia` is an mdev parent.
    MdevOnVf,
    /// NVIDIA vendor-specific VFIO: VFs carry `nvidia/current_vgpu_type`.
    VendorVfio,
    /// Intel GVT-g: the iGPU is an mdev parent with `i915-GVTg_V5_*` types.
    Gvtg,
}

/// CPU vendor, which decides the virtualisation flag in `proc/cpuinfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CpuVendor {
    /// `GenuineIntel`, flag `vmx`.
    #[default]
    Intel,
    /// `AuthenticAMD`, flag `svm`.
    Amd,
}

/// SR-IOV capability of a physical function.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SriovSpec {
    /// `sriov_totalvfs`.
    pub total_vfs: u16,
    /// `sriov_offset` (routing-id offset of VF 0).
    pub offset: u16,
    /// `sriov_stride`.
    pub stride: u16,
    /// `sriov_vf_device`.
    pub vf_device: u16,
    /// `sriov_drivers_autoprobe` at boot.
    #[serde(default = "yes")]
    pub autoprobe: bool,
    /// VFs enabled at boot.
    #[serde(default)]
    pub num_vfs: u16,
    /// The `sriov_totalvfs` the device's own driver (its `driver` at boot) sets when it probes
    /// the PF (`pci_sriov_set_totalvfs`, as i915's `max_vfs` does); any other driver, and no
    /// driver, show `total_vfs` (`pci_iov_remove` resets it on unbind). At most `total_vfs`.
    #[serde(default)]
    pub driver_max_vfs: Option<u16>,
    /// The most VFs the device's own driver enables per `sriov_numvfs` write: asked for more,
    /// its `sriov_configure` enables this many and the write succeeds ("only %d enabled").
    /// Other drivers (`pci-pf-stub`) enable what is asked.
    #[serde(default)]
    pub driver_enables_at_most: Option<u16>,
}

fn yes() -> bool {
    true
}

fn default_reset_method() -> String {
    "flr bus".to_owned()
}

fn minus_one() -> i32 {
    -1
}

/// One PCI function of the host.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Address.
    pub addr: PciAddr,
    /// Free text for humans.
    #[serde(default)]
    pub label: String,
    /// The product name NVIDIA's driver gives the GPU (`NVIDIA H200`); absent, `NVIDIA `
    /// and the label.
    #[serde(default)]
    pub product: Option<String>,
    /// Upstream bridge (its directory contains this device's).
    #[serde(default)]
    pub bridge: Option<PciAddr>,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Subsystem vendor id.
    #[serde(default)]
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    #[serde(default)]
    pub subsystem_device: u16,
    /// 24-bit class code.
    pub class: u32,
    /// Revision id (`revision`, byte 8 of `config`).
    #[serde(default)]
    pub revision: u8,
    /// NUMA node, -1 for unknown.
    #[serde(default = "minus_one")]
    pub numa_node: i32,
    /// Driver bound at boot.
    #[serde(default)]
    pub driver: Option<String>,
    /// `driver_override` at boot.
    #[serde(default)]
    pub driver_override: Option<String>,
    /// IOMMU group (ignored when the profile has no IOMMU).
    #[serde(default)]
    pub iommu_group: Option<u32>,
    /// `reset_method` (empty: the device cannot be reset, `reset` is absent).
    #[serde(default = "default_reset_method")]
    pub reset_method: String,
    /// Virtual GPU interface.
    #[serde(default)]
    pub vgpu: Option<VgpuMode>,
    /// Type catalog name (`t4`, `a40`, `l40s`, `gvtg`), required with `vgpu`.
    #[serde(default)]
    pub catalog: Option<String>,
    /// SR-IOV capability.
    #[serde(default)]
    pub sriov: Option<SriovSpec>,
    /// MIG mode and the GPU instances of an NVIDIA vendor-VFIO GPU at boot (`nvidia-smi mig
    /// -cgi` made them before); the control file's MIG lines change them afterwards.
    #[serde(default)]
    pub mig: Option<MigSpec>,
    /// Device local memory in MiB (Intel discrete GPUs). With it, a PF whose SR-IOV driver is
    /// Intel's out-of-tree `i915` or `xe` has per-VF quotas,
    /// `drm/card<N>/iov/vf<M>/gt0/lmem_quota`.
    #[serde(default)]
    pub local_memory_mib: Option<u64>,
}

/// One virtual GPU type of a catalog.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeSpec {
    /// Catalog this row belongs to.
    pub catalog: String,
    /// mdev type id (`nvidia-231`, `i915-GVTg_V5_4`) or vendor-VFIO numeric id (`1145`).
    pub id: String,
    /// Type name (`GRID T4-2Q`).
    pub name: String,
    /// NVIDIA frame buffer in MiB.
    #[serde(default)]
    pub framebuffer_mib: u64,
    /// NVIDIA max instances per physical GPU.
    #[serde(default)]
    pub max_instances: u32,
    /// NVIDIA display heads.
    #[serde(default)]
    pub heads: Option<u32>,
    /// Max resolution.
    #[serde(default)]
    pub max_resolution: Option<String>,
    /// NVIDIA frame rate limiter.
    #[serde(default)]
    pub frl: Option<u32>,
    /// GVT-g low graphics memory in MiB.
    #[serde(default)]
    pub low_gm_mib: u64,
    /// GVT-g high graphics memory in MiB.
    #[serde(default)]
    pub high_gm_mib: u64,
    /// GVT-g fence registers.
    #[serde(default)]
    pub fence: u32,
    /// GVT-g scheduler weight.
    #[serde(default)]
    pub weight: u32,
    /// For a MIG-backed NVIDIA type, the GPU-instance profile it runs on (`1g.18gb`).
    #[serde(default)]
    pub gpu_instance_profile: Option<String>,
}

#[derive(Deserialize)]
struct CatalogFile {
    #[serde(rename = "type")]
    types: Vec<TypeSpec>,
    #[serde(default, rename = "gpu_instance_profile")]
    gpu_instance_profiles: Vec<GpuInstanceProfileSpec>,
}

/// A simulated host: firmware, kernel command line, CPUs and PCI functions.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile name.
    pub name: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
    /// IOMMU kind.
    #[serde(default)]
    pub iommu: IommuKind,
    /// Whether the IOMMU supports interrupt remapping (Intel `ecap` bit 3).
    #[serde(default = "yes")]
    pub interrupt_remapping: bool,
    /// CPU vendor.
    #[serde(default)]
    pub cpu_vendor: CpuVendor,
    /// Number of logical CPUs in `proc/cpuinfo`.
    #[serde(default = "four")]
    pub cpus: u32,
    /// Number of NUMA nodes.
    #[serde(default = "one")]
    pub numa_nodes: u32,
    /// `proc/cmdline` (without the newline).
    pub cmdline: String,
    /// PCI functions.
    #[serde(rename = "device")]
    pub devices: Vec<DeviceSpec>,
    /// Kernel release (`6.8.0-45-generic`); absent, the release in `cmdline`'s
    /// `BOOT_IMAGE=...vmlinuz-<release>`, else 6.8. Its major and minor decide what the
    /// kernel offers: mdev types have `name` from 6.1, mdevs bind to `vfio_mdev` before 5.16.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Drivers that are a vendor's out-of-tree build rather than the kernel's own. Only
    /// `i915` is known: Intel's backported i915 has `sriov_configure` (Flex SR-IOV), upstream
    /// i915 has none (`sriov_numvfs` answers `ENOENT`; SR-IOV upstream is `xe`'s).
    #[serde(default)]
    pub out_of_tree_drivers: Vec<String>,
    /// Milliseconds between a new VF's appearance and its driver probe (asynchronous
    /// probing, `PROBE_PREFER_ASYNCHRONOUS`): the `sriov_numvfs` write returns before the VFs
    /// are bound. The control line `latency async-probe <millis>` changes it. At most 60 000.
    #[serde(default)]
    pub async_probe_ms: u64,
    /// vGPU types, filled from the embedded catalog for the catalogs the devices name.
    #[serde(skip)]
    pub types: Vec<TypeSpec>,
    /// GPU-instance profiles, filled from the embedded catalog for the catalogs the devices
    /// name.
    #[serde(skip)]
    pub gpu_instance_profiles: Vec<GpuInstanceProfileSpec>,
}

/// Drivers the simulator has an out-of-tree build of (see [`Profile::out_of_tree_drivers`]).
const OUT_OF_TREE: [&str; 1] = ["i915"];

/// The kernel version of a release string (`6.8.0-45-generic` -> (6, 8)).
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn four() -> u32 {
    4
}

fn one() -> u32 {
    1
}

impl Profile {
    /// The kernel version (major, minor): [`Profile::kernel`], else the release in the
    /// command line's `vmlinuz-<release>`, else (6, 8).
    pub fn kernel_version(&self) -> (u32, u32) {
        let from_cmdline = || {
            self.cmdline
                .split_whitespace()
                .find_map(|w| w.strip_prefix("BOOT_IMAGE="))
                .and_then(|image| image.rsplit_once("vmlinuz-"))
                .and_then(|(_, release)| parse_release(release))
        };
        self.kernel
            .as_deref()
            .and_then(parse_release)
            .or_else(from_cmdline)
            .unwrap_or((6, 8))
    }

    /// Names of the built-in profiles.
    pub fn names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in profile by name.
    ///
    /// # Errors
    /// [`SimError::UnknownProfile`] for an unknown name.
    pub fn builtin(name: &str) -> Result<Self, SimError> {
        let (_, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| SimError::UnknownProfile(name.to_owned()))?;
        Self::from_toml(text, Path::new(&format!("<builtin>/{name}.toml")))
    }

    /// A profile from a TOML file (the types come from the embedded catalog).
    ///
    /// # Errors
    /// [`SimError::ProfileRead`] or [`SimError::ProfileInvalid`].
    pub fn from_path(path: &Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ProfileRead {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// A profile from TOML text; `origin` names it in errors.
    ///
    /// # Errors
    /// [`SimError::ProfileInvalid`] when the text does not parse or is inconsistent.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self, SimError> {
        let invalid = |reason: String| SimError::ProfileInvalid {
            path: origin.to_owned(),
            reason,
        };
        let mut profile: Profile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let catalog: CatalogFile =
            toml::from_str(CATALOG).map_err(|e| invalid(format!("embedded catalog: {e}")))?;
        let mut seen = BTreeSet::new();
        let mut wanted = BTreeSet::new();
        for dev in &profile.devices {
            if !seen.insert(dev.addr) {
                return Err(invalid(format!("device {} listed twice", dev.addr)));
            }
            if let Some(bridge) = dev.bridge {
                if !profile
                    .devices
                    .iter()
                    .any(|d| d.addr == bridge && d.bridge.is_none())
                {
                    return Err(invalid(format!(
                        "device {}: bridge {bridge} is not a top-level device of the profile",
                        dev.addr
                    )));
                }
            }
            match (&dev.vgpu, &dev.catalog) {
                (Some(_), Some(c)) => {
                    if !catalog.types.iter().any(|t| &t.catalog == c) {
                        return Err(invalid(format!(
                            "device {}: unknown catalog {c:?}",
                            dev.addr
                        )));
                    }
                    wanted.insert(c.clone());
                }
                (Some(_), None) => {
                    return Err(invalid(format!(
                        "device {}: vgpu needs a catalog",
                        dev.addr
                    )));
                }
                _ => {}
            }
            if let Some(mig) = &dev.mig {
                if dev.vgpu != Some(VgpuMode::VendorVfio) {
                    return Err(invalid(format!(
                        "device {}: mig needs vgpu = \"vendor-vfio\"",
                        dev.addr
                    )));
                }
                let mut ids = BTreeSet::new();
                if let Some(gi) = mig.gpu_instances.iter().find(|gi| !ids.insert(gi.id)) {
                    return Err(invalid(format!(
                        "device {}: GPU instance {} listed twice",
                        dev.addr, gi.id
                    )));
                }
                if !mig.enabled && !mig.gpu_instances.is_empty() {
                    return Err(invalid(format!(
                        "device {}: GPU instances need MIG mode on",
                        dev.addr
                    )));
                }
            }
            if let Some(s) = &dev.sriov {
                if s.num_vfs > s.total_vfs
                    || s.stride == 0
                    || s.driver_max_vfs.is_some_and(|m| m > s.total_vfs)
                {
                    return Err(invalid(format!("device {}: bad sriov section", dev.addr)));
                }
            }
        }
        if let Some(k) = &profile.kernel {
            if parse_release(k).is_none() {
                return Err(invalid(format!(
                    "kernel {k:?} is not a release such as 6.8.0-45-generic"
                )));
            }
        }
        if let Some(d) = profile
            .out_of_tree_drivers
            .iter()
            .find(|d| !OUT_OF_TREE.contains(&d.as_str()))
        {
            return Err(invalid(format!(
                "out_of_tree_drivers: no out-of-tree build of {d:?} is modelled (known: {})",
                OUT_OF_TREE.join(", ")
            )));
        }
        if profile.async_probe_ms > 60_000 {
            return Err(invalid(format!(
                "async_probe_ms {} is above 60000",
                profile.async_probe_ms
            )));
        }
        // Vendor-VFIO type ids are the numbers `current_vgpu_type` takes and
        // `creatable_vgpu_types` prints (`%-5d`): canonical, non-zero decimals.
        let numeric: BTreeSet<&String> = profile
            .devices
            .iter()
            .filter(|d| d.vgpu == Some(VgpuMode::VendorVfio))
            .filter_map(|d| d.catalog.as_ref())
            .collect();
        if let Some(t) = catalog
            .types
            .iter()
            .find(|t| numeric.contains(&t.catalog) && !is_vendor_vfio_id(&t.id))
        {
            return Err(invalid(format!(
                "catalog {:?}: vendor-VFIO type id {:?} is not a non-zero decimal number",
                t.catalog, t.id
            )));
        }
        profile.types = catalog
            .types
            .into_iter()
            .filter(|t| wanted.contains(&t.catalog))
            .collect();
        profile.gpu_instance_profiles = catalog
            .gpu_instance_profiles
            .into_iter()
            .filter(|p| wanted.contains(&p.catalog))
            .collect();
        profile.place_gpu_instances().map_err(invalid)?;
        Ok(profile)
    }
}

/// Whether `id` is a vendor-VFIO type id: a canonical non-zero decimal `u32` (`1145`).
fn is_vendor_vfio_id(id: &str) -> bool {
    id.parse::<u32>()
        .is_ok_and(|n| n != 0 && n.to_string() == id)
}

/// Where a profile comes from, for the command line: a built-in name or a file path.
pub fn resolve(name_or_path: &str) -> Result<Profile, SimError> {
    if Profile::names().contains(&name_or_path) {
        Profile::builtin(name_or_path)
    } else {
        Profile::from_path(&PathBuf::from(name_or_path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addr_parse_with_domain_roundtrips() {
        let a: PciAddr = "0001:3b:1f.7".parse().expect("valid");
        assert_eq!(
            a,
            PciAddr {
                domain: 1,
                bus: 0x3b,
                slot: 0x1f,
                function: 7
            }
        );
        assert_eq!(a.to_string(), "0001:3b:1f.7");
    }

    #[test]
    fn pci_addr_parse_without_domain_fails() {
        assert_eq!(
            "3b:00.0".parse::<PciAddr>(),
            Err(BadPciAddr("3b:00.0".into()))
        );
    }

    #[test]
    fn pci_addr_parse_slot_out_of_range_fails() {
        assert!("0000:3b:20.0".parse::<PciAddr>().is_err());
    }

    #[test]
    fn pci_addr_with_routing_id_crosses_bus() {
        let pf: PciAddr = "0000:41:00.0".parse().expect("valid");
        assert_eq!(
            pf.with_routing_id(pf.routing_id() + 4 + 255).to_string(),
            "0000:42:00.3"
        );
    }

    #[test]
    fn profile_builtin_every_name_loads() {
        for name in Profile::names() {
            assert!(Profile::builtin(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn profile_builtin_unknown_name_fails() {
        assert!(
            matches!(Profile::builtin("nope"), Err(SimError::UnknownProfile(n)) if n == "nope")
        );
    }

    #[test]
    fn is_vendor_vfio_id_decimal_passes() {
        assert!(is_vendor_vfio_id("1145"));
    }

    #[test]
    fn is_vendor_vfio_id_mdev_style_fails() {
        assert!(!is_vendor_vfio_id("nvidia-558"));
    }

    #[test]
    fn is_vendor_vfio_id_zero_fails() {
        assert!(!is_vendor_vfio_id("0"));
    }

    #[test]
    fn is_vendor_vfio_id_leading_zero_fails() {
        assert!(!is_vendor_vfio_id("01145"));
    }

    #[test]
    fn profile_from_toml_vendor_vfio_with_mdev_type_ids_fails() {
        let text = "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=0x10de\n\
                    device=2\nclass=0x030200\nvgpu='vendor-vfio'\ncatalog='t4'\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("vendor-VFIO type id")
        ));
    }

    #[test]
    fn kernel_version_from_cmdline_release() {
        let p = Profile::builtin("a40-vf-mdev").expect("builtin");
        assert_eq!(p.kernel_version(), (5, 15));
    }

    #[test]
    fn kernel_version_key_wins_over_cmdline() {
        let mut p = Profile::builtin("a40-vf-mdev").expect("builtin");
        p.kernel = Some("6.1.0-18-amd64".into());
        assert_eq!(p.kernel_version(), (6, 1));
    }

    #[test]
    fn kernel_version_without_any_is_6_8() {
        let mut p = Profile::builtin("a40-vf-mdev").expect("builtin");
        p.cmdline = "ro quiet".into();
        assert_eq!(p.kernel_version(), (6, 8));
    }

    #[test]
    fn profile_from_toml_unknown_out_of_tree_driver_fails() {
        let text = "name='x'\ncmdline=''\nout_of_tree_drivers=['xe']\n[[device]]\n\
                    addr='0000:01:00.0'\nvendor=1\ndevice=2\nclass=0x030000\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("out-of-tree")
        ));
    }

    #[test]
    fn profile_from_toml_driver_max_vfs_above_total_fails() {
        let text = "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=1\n\
                    device=2\nclass=0x030000\nsriov={total_vfs=4,offset=1,stride=1,\
                    vf_device=2,driver_max_vfs=5}\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("bad sriov")
        ));
    }

    #[test]
    fn profile_from_toml_mig_without_vendor_vfio_fails() {
        let text = "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=0x10de\n\
                    device=2\nclass=0x030200\nvgpu='mdev'\ncatalog='t4'\nmig={enabled=true}\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("mig needs")
        ));
    }

    #[test]
    fn profile_from_toml_gpu_instance_twice_fails() {
        let text = "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=0x10de\n\
                    device=2\nclass=0x030200\nvgpu='vendor-vfio'\ncatalog='h200x'\n\
                    mig={enabled=true,gpu_instances=[{id=1,profile='1g.18gb'},\
                    {id=1,profile='1g.18gb'}]}\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("listed twice")
        ));
    }

    #[test]
    fn profile_from_toml_unknown_catalog_fails() {
        let text = "name='x'\ncmdline=''\n[[device]]\naddr='0000:01:00.0'\nvendor=1\ndevice=2\n\
                    class=0x030000\nvgpu='mdev'\ncatalog='nope'\n";
        assert!(matches!(
            Profile::from_toml(text, Path::new("x.toml")),
            Err(SimError::ProfileInvalid { reason, .. }) if reason.contains("unknown catalog")
        ));
    }
}
