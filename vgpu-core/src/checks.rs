//! IOMMU and DMA-remapping checks: can this host assign its GPUs to guests, and if not, what to
//! fix (`Documentation/driver-api/vfio.rst`; `docs/host-interfaces.md`).
//!
//! Each check is a [`Check`] with a stable id. Unlike `virt-host-validate`, a missing IOMMU is a
//! failure, and interrupt remapping, group isolation and VFIO are checked too.

use crate::error::Result;
use crate::error::error_chain;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, PROC_LIMIT, read_attr, read_bounded};
use crate::model::driver_params::{Registry, SCRUB_KEY, parse_registry};
use crate::model::pci::PciAddress;
use crate::model::{Inventory, NVIDIA_VENDOR_ID};

pub use crate::model::checks::{Check, DeviceIsolation, GroupMember, Report, Status};

/// What the kernel command line says about IOMMUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IommuCmdline {
    /// `intel_iommu=` value.
    pub intel_iommu: Option<String>,
    /// `amd_iommu=` value.
    pub amd_iommu: Option<String>,
    /// `iommu=` value (`pt`, `off`, ...).
    pub iommu: Option<String>,
    /// `iommu.passthrough=` value.
    pub iommu_passthrough: Option<String>,
    /// `intremap=` value.
    pub intremap: Option<String>,
}

/// Parses `/proc/cmdline` for the IOMMU parameters; the last occurrence wins, as in the kernel.
pub(crate) fn parse_iommu_cmdline(cmdline: &str) -> IommuCmdline {
    let mut out = IommuCmdline::default();
    for word in cmdline.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let slot = match key {
            "intel_iommu" => &mut out.intel_iommu,
            "amd_iommu" => &mut out.amd_iommu,
            "iommu" => &mut out.iommu,
            "iommu.passthrough" => &mut out.iommu_passthrough,
            "intremap" => &mut out.intremap,
            _ => continue,
        };
        *slot = Some(value.to_owned());
    }
    out
}

fn has_option(value: &Option<String>, option: &str) -> bool {
    value
        .as_deref()
        .is_some_and(|v| v.split(',').any(|o| o == option))
}

/// Whether `cpuinfo` shows hardware virtualisation: `Some(true)` for `vmx`/`svm` in a `flags`
/// line, `Some(false)` when flags lack both, `None` when there is no `flags` line (not x86).
pub(crate) fn cpuinfo_has_virtualization(cpuinfo: &str) -> Option<bool> {
    let flags = cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "flags").then_some(value)
    })?;
    Some(flags.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// Whether an Intel `ecap` register value (hex) has interrupt remapping (bit 3).
pub(crate) fn ecap_has_interrupt_remapping(ecap: &str) -> Option<bool> {
    let digits = ecap.trim().trim_start_matches("0x");
    u64::from_str_radix(digits, 16)
        .ok()
        .map(|v| v & (1 << 3) != 0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Firmware {
    Intel,
    Amd,
    Arm,
}

/// The facts the host checks are derived from, read once.
struct HostFacts {
    firmware: Option<Firmware>,
    units: Result<Vec<String>>,
    cmdline: Result<IommuCmdline>,
    groups: Result<Vec<String>>,
}

/// Runs every host check, and the isolation check of every GPU function in `inventory`.
pub fn check_host(paths: &HostPaths, inventory: &Inventory) -> Report {
    let devices: Vec<DeviceIsolation> = inventory
        .gpus
        .iter()
        .flat_map(|gpu| std::iter::once(gpu.address).chain(gpu.vfs.iter().map(|vf| vf.address)))
        .map(|address| isolation(paths, address))
        .collect();
    let facts = read_facts(paths);
    let mut checks = vec![
        cpu_virtualization(paths),
        iommu_firmware(&facts),
        iommu_enabled(&facts),
        iommu_cmdline(&facts),
        interrupt_remapping(paths, &facts),
        iommu_groups(&facts, &devices),
        vfio(paths),
    ];
    checks.extend(scrub_on_free(paths, inventory));
    Report { checks, devices }
}

/// The NVIDIA driver's registry settings (`proc/driver/nvidia/params`); `None` when the file
/// does not exist (the driver is not loaded).
pub fn nvidia_registry(paths: &HostPaths) -> Result<Option<Registry>> {
    let text = read_bounded(&paths.nvidia_params(), PROC_LIMIT)?;
    Ok(text.as_deref().map(parse_registry))
}

/// `scrub-on-free`, on a host whose NVIDIA driver is loaded: a warning naming each NVIDIA GPU
/// whose freed vGPUs' frame buffer the driver does not clear (`RMDisableScrubOnFree`).
fn scrub_on_free(paths: &HostPaths, inventory: &Inventory) -> Option<Check> {
    const ID: &str = "scrub-on-free";
    let nvidia: Vec<PciAddress> = inventory
        .gpus
        .iter()
        .filter(|g| g.vendor_id == Some(NVIDIA_VENDOR_ID))
        .map(|g| g.address)
        .collect();
    if nvidia.is_empty() {
        return None;
    }
    let registry = match nvidia_registry(paths) {
        Ok(Some(registry)) => registry,
        Ok(None) => return None,
        Err(err) => {
            return Some(Check::new(
                ID,
                Status::Warn,
                format!(
                    "the NVIDIA driver's parameters cannot be read: {}",
                    error_chain(&err)
                ),
                None,
            ));
        }
    };
    let off: Vec<String> = nvidia
        .iter()
        .filter(|gpu| registry.scrub_disabled(**gpu).0)
        .map(ToString::to_string)
        .collect();
    if off.is_empty() {
        return Some(Check::new(
            ID,
            Status::Pass,
            "the NVIDIA driver clears a freed vGPU's frame buffer (its default)",
            None,
        ));
    }
    Some(Check::new(
        ID,
        Status::Warn,
        format!(
            "{SCRUB_KEY} is set: frame buffer is not cleared when a vGPU is freed on {}",
            off.join(", ")
        ),
        Some("remove RMDisableScrubOnFree from the nvidia module's NVreg_RegistryDwords"),
    ))
}

impl HostFacts {
    /// The active IOMMU units; empty when they could not be listed (`iommu-enabled` reports
    /// that error).
    fn units(&self) -> &[String] {
        self.units.as_deref().unwrap_or_default()
    }
}

fn read_facts(paths: &HostPaths) -> HostFacts {
    let tables = paths.acpi_tables();
    let firmware = if sysfs::exists(&tables.join("DMAR")) {
        Some(Firmware::Intel)
    } else if sysfs::exists(&tables.join("IVRS")) {
        Some(Firmware::Amd)
    } else if sysfs::exists(&tables.join("IORT")) {
        Some(Firmware::Arm)
    } else {
        None
    };
    let cmdline = read_attr(&paths.cmdline()).and_then(|text| {
        text.map(|t| parse_iommu_cmdline(&t))
            .ok_or_else(|| sysfs::missing(&paths.cmdline()))
    });
    HostFacts {
        firmware,
        units: sysfs::dir_names(&paths.iommu_class()),
        cmdline,
        groups: pci_groups(paths),
    }
}

/// The IOMMU groups that hold at least one PCI function. Mediated devices get emulated
/// groups of their own even without an IOMMU, so a group alone proves nothing.
fn pci_groups(paths: &HostPaths) -> Result<Vec<String>> {
    let root = paths.iommu_groups();
    let mut groups = Vec::new();
    for group in sysfs::dir_names(&root)? {
        let members = sysfs::dir_names(&root.join(&group).join("devices"))?;
        if members.iter().any(|m| m.parse::<PciAddress>().is_ok()) {
            groups.push(group);
        }
    }
    Ok(groups)
}

fn cpu_virtualization(paths: &HostPaths) -> Check {
    const ID: &str = "cpu-virtualization";
    match read_bounded(&paths.cpuinfo(), PROC_LIMIT) {
        Ok(Some(text)) => match cpuinfo_has_virtualization(&text) {
            Some(true) => Check::new(
                ID,
                Status::Pass,
                "CPU has hardware virtualisation (vmx/svm)",
                None,
            ),
            Some(false) => Check::new(
                ID,
                Status::Fail,
                "CPU flags show neither vmx nor svm",
                Some("enable Intel VT-x or AMD-V (SVM) in the firmware setup"),
            ),
            None => Check::new(
                ID,
                Status::Warn,
                "cpuinfo has no flags line; cannot tell whether virtualisation is on",
                Some("check that /dev/kvm exists"),
            ),
        },
        Ok(None) => Check::new(
            ID,
            Status::Warn,
            format!("{} is missing", paths.cpuinfo().display()),
            None,
        ),
        Err(err) => Check::new(ID, Status::Warn, error_chain(&err), None),
    }
}

fn iommu_firmware(facts: &HostFacts) -> Check {
    const ID: &str = "iommu-firmware";
    match facts.firmware {
        Some(Firmware::Intel) => Check::new(
            ID,
            Status::Pass,
            "ACPI DMAR table present (Intel VT-d)",
            None,
        ),
        Some(Firmware::Amd) => {
            Check::new(ID, Status::Pass, "ACPI IVRS table present (AMD-Vi)", None)
        }
        Some(Firmware::Arm) => {
            Check::new(ID, Status::Pass, "ACPI IORT table present (Arm SMMU)", None)
        }
        None => Check::new(
            ID,
            Status::Fail,
            "no DMAR, IVRS or IORT ACPI table: the firmware does not expose an IOMMU",
            Some("enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware setup"),
        ),
    }
}

fn cmdline_disables(cmdline: &IommuCmdline) -> Option<&'static str> {
    if has_option(&cmdline.intel_iommu, "off") {
        Some("intel_iommu=off")
    } else if has_option(&cmdline.amd_iommu, "off") {
        Some("amd_iommu=off")
    } else if has_option(&cmdline.iommu, "off") {
        Some("iommu=off")
    } else {
        None
    }
}

fn iommu_enabled(facts: &HostFacts) -> Check {
    const ID: &str = "iommu-enabled";
    let units = match &facts.units {
        Ok(units) => units,
        Err(err) => return Check::new(ID, Status::Warn, error_chain(err), None),
    };
    if !units.is_empty() {
        let summary = format!("{} IOMMU unit(s) active: {}", units.len(), units.join(", "));
        return Check::new(ID, Status::Pass, summary, None);
    }
    let cmdline = facts.cmdline.as_ref().ok();
    let remedy = match (facts.firmware, cmdline) {
        (_, Some(c)) if cmdline_disables(c).is_some() => {
            format!("remove {} from the kernel command line", cmdline_disables(c).unwrap_or_default())
        }
        (Some(Firmware::Intel), Some(c)) if !has_option(&c.intel_iommu, "on") => {
            "add intel_iommu=on to the kernel command line and reboot".to_owned()
        }
        (None, _) => "enable VT-d/AMD-Vi in the firmware setup, then reboot".to_owned(),
        _ => "check the kernel log (dmesg | grep -i -e DMAR -e AMD-Vi) for why the IOMMU did not start".to_owned(),
    };
    Check {
        id: ID,
        status: Status::Fail,
        summary: "no IOMMU is active (sys/class/iommu is empty)".to_owned(),
        remedy: Some(remedy),
    }
}

fn iommu_cmdline(facts: &HostFacts) -> Check {
    const ID: &str = "iommu-cmdline";
    let cmdline = match &facts.cmdline {
        Ok(cmdline) => cmdline,
        Err(err) => return Check::new(ID, Status::Warn, error_chain(err), None),
    };
    if let Some(disabling) = cmdline_disables(cmdline) {
        let remedy = format!("remove {disabling} from the kernel command line");
        return Check::new(
            ID,
            Status::Fail,
            format!("the kernel command line disables the IOMMU ({disabling})"),
            Some(&remedy),
        );
    }
    let mut set: Vec<String> = [
        ("intel_iommu", &cmdline.intel_iommu),
        ("amd_iommu", &cmdline.amd_iommu),
        ("iommu", &cmdline.iommu),
        ("iommu.passthrough", &cmdline.iommu_passthrough),
    ]
    .iter()
    .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={v}")))
    .collect();
    if facts.firmware == Some(Firmware::Intel) && !has_option(&cmdline.intel_iommu, "on") {
        if facts.units().is_empty() {
            return Check::new(
                ID,
                Status::Fail,
                "intel_iommu=on is missing and the kernel left the IOMMU off",
                Some("add intel_iommu=on to the kernel command line and reboot"),
            );
        }
        set.push("(intel_iommu on by kernel default)".to_owned());
    }
    let summary = if set.is_empty() {
        "no IOMMU parameters; kernel defaults apply".to_owned()
    } else {
        set.join(" ")
    };
    Check::new(ID, Status::Pass, summary, None)
}

fn interrupt_remapping(paths: &HostPaths, facts: &HostFacts) -> Check {
    const ID: &str = "interrupt-remapping";
    let unsafe_path = paths
        .module("vfio_iommu_type1")
        .join("parameters/allow_unsafe_interrupts");
    let unsafe_allowed = match read_attr(&unsafe_path) {
        Ok(value) => value.is_some_and(|v| v.trim() == "Y" || v.trim() == "1"),
        Err(err) => {
            return Check::new(ID, Status::Warn, error_chain(&err), None);
        }
    };
    if facts.units().is_empty() {
        return Check::new(
            ID,
            Status::Fail,
            "no active IOMMU, so no interrupt remapping",
            Some("enable the IOMMU first (see iommu-enabled)"),
        );
    }
    if facts
        .cmdline
        .as_ref()
        .is_ok_and(|c| has_option(&c.intremap, "off"))
    {
        return Check::new(
            ID,
            Status::Fail,
            "interrupt remapping is disabled by intremap=off",
            Some("remove intremap=off from the kernel command line"),
        );
    }
    let dmar_units: Vec<&String> = facts
        .units()
        .iter()
        .filter(|u| u.starts_with("dmar"))
        .collect();
    let mut lacking = Vec::new();
    for unit in &dmar_units {
        let path = paths.iommu_class().join(unit).join("intel-iommu/ecap");
        match read_attr(&path) {
            Ok(Some(ecap)) => match ecap_has_interrupt_remapping(&ecap) {
                Some(true) => {}
                Some(false) => lacking.push(unit.to_string()),
                None => {
                    let err = sysfs::parse_error(&path, &ecap, "a hex register value");
                    return Check::new(ID, Status::Warn, error_chain(&err), None);
                }
            },
            Ok(None) => {
                return Check::new(
                    ID,
                    Status::Warn,
                    format!("{} is missing", path.display()),
                    None,
                );
            }
            Err(err) => return Check::new(ID, Status::Warn, error_chain(&err), None),
        }
    }
    if !lacking.is_empty() {
        let (status, remedy) = if unsafe_allowed {
            (
                Status::Warn,
                "use hardware with interrupt remapping; allow_unsafe_interrupts lets guests inject interrupts",
            )
        } else {
            (
                Status::Fail,
                "use hardware whose IOMMU remaps interrupts, or (unsafe) set vfio_iommu_type1.allow_unsafe_interrupts=1",
            )
        };
        let summary = format!(
            "IOMMU unit(s) without interrupt remapping (ecap bit 3 clear): {}",
            lacking.join(", ")
        );
        return Check::new(ID, status, summary, Some(remedy));
    }
    if unsafe_allowed {
        return Check::new(
            ID,
            Status::Warn,
            "interrupt remapping is available but vfio_iommu_type1.allow_unsafe_interrupts is on",
            Some("remove allow_unsafe_interrupts=1 from the vfio_iommu_type1 options"),
        );
    }
    let summary = if dmar_units.is_empty() {
        format!(
            "{} remap interrupts (intremap not disabled)",
            facts.units().join(", ")
        )
    } else {
        format!(
            "every DMAR unit remaps interrupts ({})",
            dmar_units
                .iter()
                .map(|u| u.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Check::new(ID, Status::Pass, summary, None)
}

fn iommu_groups(facts: &HostFacts, devices: &[DeviceIsolation]) -> Check {
    const ID: &str = "iommu-groups";
    let groups = match &facts.groups {
        Ok(groups) => groups,
        Err(err) => return Check::new(ID, Status::Warn, error_chain(err), None),
    };
    if groups.is_empty() {
        return Check::new(
            ID,
            Status::Fail,
            "no IOMMU group holds a PCI device (sys/kernel/iommu_groups has none)",
            Some("enable the IOMMU (see iommu-enabled)"),
        );
    }
    let shared: Vec<String> = devices
        .iter()
        .filter(|d| !d.isolated)
        .map(|d| d.address.to_string())
        .collect();
    if shared.is_empty() {
        let summary = format!(
            "{} groups with PCI devices; all {} GPU function(s) isolated",
            groups.len(),
            devices.len()
        );
        return Check::new(ID, Status::Pass, summary, None);
    }
    Check::new(
        ID,
        Status::Warn,
        format!(
            "GPU function(s) sharing their IOMMU group with other devices: {}",
            shared.join(", ")
        ),
        Some(
            "move the card to a slot behind an ACS-capable port, or bind the blocking devices to vfio-pci and assign them to the same guest",
        ),
    )
}

fn vfio(paths: &HostPaths) -> Check {
    const ID: &str = "vfio";
    let container = paths.vfio_container();
    if !sysfs::exists(&container) {
        return Check::new(
            ID,
            Status::Fail,
            format!("{} is missing: VFIO is not loaded", container.display()),
            Some("modprobe vfio-pci (and add it to /etc/modules-load.d)"),
        );
    }
    let driver = sysfs::is_dir(&paths.pci_drivers().join("vfio-pci"))
        || sysfs::is_dir(&paths.module("vfio_pci"));
    if !driver {
        return Check::new(
            ID,
            Status::Warn,
            "VFIO is present but the vfio-pci driver is not loaded",
            Some("modprobe vfio-pci"),
        );
    }
    Check::new(ID, Status::Pass, "VFIO and vfio-pci are loaded", None)
}

fn is_bridge(class: u32) -> bool {
    matches!(class >> 8, 0x0600 | 0x0604)
}

/// Whether the GPU function at `address` can be assigned on its own: every other member of its IOMMU group is a
/// bridge or held by a passthrough driver (`Documentation/driver-api/vfio.rst`).
pub fn isolation(paths: &HostPaths, address: PciAddress) -> DeviceIsolation {
    let mut result = DeviceIsolation {
        address,
        iommu_group: None,
        isolated: false,
        blockers: Vec::new(),
        companions: Vec::new(),
        problems: Vec::new(),
        ready: false,
    };
    let device = PciDevice::new(paths, address);
    let group = match device.iommu_group() {
        Ok(Some(group)) => group,
        Ok(None) => return result,
        Err(err) => {
            result.problems.push(error_chain(&err));
            return result;
        }
    };
    result.iommu_group = Some(group);
    let members_dir = paths.iommu_groups().join(group.to_string()).join("devices");
    let names = match sysfs::dir_names_required(&members_dir) {
        Ok(names) => names,
        Err(err) => {
            result.problems.push(error_chain(&err));
            return result;
        }
    };
    for name in names {
        let member = match name.parse::<PciAddress>() {
            Ok(member) => member,
            Err(_) => {
                let err = sysfs::parse_error(&members_dir.join(&name), &name, "a PCI address");
                result.problems.push(error_chain(&err));
                continue;
            }
        };
        if member == address {
            continue;
        }
        let other = PciDevice::new(paths, member);
        let driver = other.driver().unwrap_or_else(|err| {
            result.problems.push(error_chain(&err));
            None
        });
        let class = other.class().unwrap_or_else(|err| {
            result.problems.push(error_chain(&err));
            None
        });
        let info = GroupMember {
            address: member,
            driver,
            class,
        };
        if member.same_slot(&address) {
            result.companions.push(info);
        } else if !(info.class.is_some_and(is_bridge)
            || info
                .driver
                .as_deref()
                .is_none_or(crate::host::driver::is_passthrough_driver))
        {
            result.blockers.push(info);
        }
    }
    result.isolated = result.blockers.is_empty() && result.problems.is_empty();
    result.ready = result.isolated
        && result.companions.iter().all(|c| {
            c.driver
                .as_deref()
                .is_none_or(crate::host::driver::is_passthrough_driver)
        });
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_last_occurrence_wins() {
        assert_eq!(
            parse_iommu_cmdline("intel_iommu=off quiet intel_iommu=on")
                .intel_iommu
                .as_deref(),
            Some("on")
        );
    }

    #[test]
    fn cmdline_comma_options_are_split() {
        let cmdline = parse_iommu_cmdline("intel_iommu=on,sm_on iommu=pt");
        assert!(has_option(&cmdline.intel_iommu, "on"));
    }

    #[test]
    fn cpuinfo_with_vmx_is_true() {
        assert_eq!(
            cpuinfo_has_virtualization("processor\t: 0\nflags\t\t: fpu vme vmx sse\n"),
            Some(true)
        );
    }

    #[test]
    fn cpuinfo_without_flags_is_none() {
        assert_eq!(
            cpuinfo_has_virtualization("processor\t: 0\nFeatures\t: fp asimd\n"),
            None
        );
    }

    #[test]
    fn ecap_real_value_has_interrupt_remapping() {
        assert_eq!(ecap_has_interrupt_remapping("f020df"), Some(true));
    }

    #[test]
    fn ecap_without_bit_3_lacks_interrupt_remapping() {
        assert_eq!(ecap_has_interrupt_remapping("f020d7"), Some(false));
    }

    #[test]
    fn ecap_garbage_is_none() {
        assert_eq!(ecap_has_interrupt_remapping("zz"), None);
    }
}
