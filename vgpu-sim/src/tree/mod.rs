//! The filesystem view of the kernel model: directory listings, file contents and stores,
//! laid out as sysfs, procfs and devtmpfs lay them out. `device` lists the inside of PCI
//! function directories, `attrs` reads and writes files, `wait` says which writes wait.

mod attrs;
mod config;
mod cpu;
mod device;
mod nvidia;
mod wait;

pub(crate) use config::UNPRIVILEGED_CONFIG_SIZE;

use std::fmt::Write as _;

use uuid::Uuid;

use crate::kernel::{Dev, Kernel};
use crate::profile::{CpuVendor, IommuKind, PciAddr, VgpuMode};
use crate::vfio::{
    CDEV_MAJOR, CONTAINER_MAJOR, CONTAINER_MINOR, GROUP_MAJOR, cdev_name, encode_dev,
};

/// What a regular file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FileRef {
    Text(String),
    Bin(Vec<u8>),
    Control,
    Counters,
    Uevents,
    /// `.vgpu-sim/generation`: the boot id and the state generation.
    Generation,
    /// `.vgpu-sim/nvidia/<addr>.json`: a vendor-VFIO GPU's driver state.
    NvidiaState(PciAddr),
    Pci(PciAddr, PciAttr),
    Type(PciAddr, String, TypeAttr),
    MdevRemove(Uuid),
    /// An NVIDIA mdev's `nvidia/vgpu_params`.
    MdevParams(Uuid),
    Driver(String, DrvAttr),
    DriversProbe,
    Rescan,
    BusAutoprobe,
    UnbindLock(PciAddr),
    NvInfo(PciAddr),
    /// A VF's `lmem_quota` (under its PF's `drm/card<N>/iov/vf<M>/gt0`).
    LmemQuota(PciAddr),
    /// A PF's `lmem_max_quota` (`drm/card<N>/iov/pf/gt0/available`): what is left to give.
    LmemMaxQuota(PciAddr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PciAttr {
    Vendor,
    Device,
    SubVendor,
    SubDevice,
    Class,
    Revision,
    /// `config`: the configuration space, binary.
    Config,
    Numa,
    DriverOverride,
    Reset,
    ResetMethod,
    Remove,
    Enable,
    Uevent,
    SriovTotal,
    SriovNum,
    SriovOffset,
    SriovStride,
    SriovVfDevice,
    SriovAutoprobe,
    NvCreatable,
    NvCurrent,
    NvParams,
    NvGpuInstance,
    NvPlacement,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TypeAttr {
    Name,
    Description,
    Available,
    DeviceApi,
    Create,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrvAttr {
    Bind,
    Unbind,
    NewId,
    RemoveId,
}

/// A directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Dir,
    File(FileRef, u16),
    /// A symlink; its target exactly as `readlink` returns it.
    Link(String),
    /// A character device node: `rdev` as FUSE encodes it ([`encode_dev`]), permission bits.
    CharDev(u32, u16),
}

const RO: u16 = 0o444;
const WO: u16 = 0o200;
const RW: u16 = 0o644;
/// devtmpfs nodes of VFIO groups and device cdevs: `crw-------`.
const DEV_PRIVATE: u16 = 0o600;
/// `/dev/vfio/vfio`: `crw-rw-rw-`.
const DEV_PUBLIC: u16 = 0o666;

/// A `proc/<pid>` name: canonical decimal.
fn parse_pid_dir(name: &str) -> Option<u32> {
    let pid: u32 = name.parse().ok()?;
    (pid.to_string() == name).then_some(pid)
}

/// A relative symlink target from directory `from` to `to` (both below the root), as
/// `kernfs_get_target_path` writes it: up to the nearest common ancestor that is a strict
/// ancestor of `to` (so a link to an ancestor reads `../../../<name>`), then down.
pub(crate) fn rel(from: &str, to: &str) -> String {
    let f: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let t: Vec<&str> = to.split('/').filter(|s| !s.is_empty()).collect();
    let common = f
        .iter()
        .zip(&t)
        .take_while(|(a, b)| a == b)
        .count()
        .min(t.len().saturating_sub(1));
    let mut out = "../".repeat(f.len() - common);
    out.push_str(&t[common..].join("/"));
    out
}

struct Dir {
    path: String,
    entries: Vec<(String, Node)>,
}

impl Dir {
    fn new(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            entries: Vec::new(),
        }
    }
    fn dir(&mut self, name: impl Into<String>) {
        self.entries.push((name.into(), Node::Dir));
    }
    fn file(&mut self, name: impl Into<String>, f: FileRef, mode: u16) {
        self.entries.push((name.into(), Node::File(f, mode)));
    }
    fn text(&mut self, name: impl Into<String>, text: String) {
        self.file(name, FileRef::Text(text), RO);
    }
    /// A symlink to `to` (a path below the root), written relative as the kernel does.
    fn link(&mut self, name: impl Into<String>, to: &str) {
        let target = rel(&self.path, to);
        self.entries.push((name.into(), Node::Link(target)));
    }
    fn chardev(&mut self, name: impl Into<String>, major: u32, minor: u32, mode: u16) {
        self.entries
            .push((name.into(), Node::CharDev(encode_dev(major, minor), mode)));
    }
}

fn acpi_table(sig: &[u8; 4]) -> Vec<u8> {
    let mut t = Vec::with_capacity(48);
    t.extend_from_slice(sig);
    t.extend_from_slice(&48u32.to_le_bytes());
    t.push(1);
    t.push(0);
    t.extend_from_slice(b"VGPSIM");
    t.extend_from_slice(b"VGPUSIM ");
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(b"VGPU");
    t.extend_from_slice(&1u32.to_le_bytes());
    t.resize(48, 0);
    let sum = t.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    t[9] = 0u8.wrapping_sub(sum);
    t
}

fn is_nv_proc(d: &Dev) -> bool {
    d.driver.as_deref() == Some("nvidia") && d.physfn.is_none()
}

impl Kernel {
    /// One entry of a directory: the same answer as searching [`Kernel::list`], faster for
    /// the large directories (devices and their PCI children).
    pub(crate) fn lookup(&self, parent: &[&str], name: &str) -> Option<Node> {
        if let Ok(addr) = name.parse::<PciAddr>() {
            let dev = self.devs.get(&addr).filter(|d| d.addr.to_string() == name);
            match parent {
                ["sys", "bus", "pci", "devices"] => {
                    return dev.map(|d| Node::Link(rel(&parent.join("/"), &d.path())));
                }
                ["sys", "devices", rest @ ..] if !rest.is_empty() => {
                    let joined = rest.join("/");
                    if dev.is_some_and(|d| d.dir.rsplit_once('/').is_some_and(|(p, _)| p == joined))
                    {
                        return Some(Node::Dir);
                    }
                }
                _ => {}
            }
        }
        self.list(parent)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, node)| node)
    }

    /// The entries of the directory at `path` (components below the root), or `None` when
    /// it is not a directory.
    pub(crate) fn list(&self, comps: &[&str]) -> Option<Vec<(String, Node)>> {
        let path = comps.join("/");
        let mut d = Dir::new(&path);
        match comps {
            [] => {
                for n in ["sys", "proc", "dev", ".vgpu-sim"] {
                    d.dir(n);
                }
            }
            [".vgpu-sim"] => {
                d.file("control", FileRef::Control, RW);
                d.file("counters", FileRef::Counters, RO);
                d.file("uevents", FileRef::Uevents, RO);
                d.file("generation", FileRef::Generation, RO);
                d.dir("nvidia");
            }
            [".vgpu-sim", "nvidia"] => {
                for g in self.devs.values().filter(|g| nvidia::published(g)) {
                    d.file(nvidia::file_name(g.addr), FileRef::NvidiaState(g.addr), RO);
                }
            }
            ["sys"] => {
                for n in ["bus", "class", "devices", "firmware", "kernel", "module"] {
                    d.dir(n);
                }
            }
            ["sys", "bus"] => {
                d.dir("mdev");
                d.dir("pci");
            }
            ["sys", "bus", "pci"] => {
                d.dir("devices");
                d.dir("drivers");
                d.file("drivers_autoprobe", FileRef::BusAutoprobe, RW);
                d.file("drivers_probe", FileRef::DriversProbe, WO);
                d.file("rescan", FileRef::Rescan, WO);
            }
            ["sys", "bus", "pci", "devices"] => {
                for dev in self.devs.values() {
                    d.link(dev.addr.to_string(), &dev.path());
                }
            }
            ["sys", "bus", "pci", "drivers"] => {
                for drv in &self.drivers {
                    d.dir(drv.clone());
                }
            }
            ["sys", "bus", "pci", "drivers", drv] => {
                if !self.drivers.iter().any(|x| x == drv) {
                    return None;
                }
                for (n, a) in [
                    ("bind", DrvAttr::Bind),
                    ("new_id", DrvAttr::NewId),
                    ("remove_id", DrvAttr::RemoveId),
                    ("unbind", DrvAttr::Unbind),
                ] {
                    d.file(n, FileRef::Driver((*drv).to_owned(), a), WO);
                }
                for dev in self
                    .devs
                    .values()
                    .filter(|x| x.driver.as_deref() == Some(*drv))
                {
                    d.link(dev.addr.to_string(), &dev.path());
                }
                if *drv != "pcieport" {
                    d.link("module", &format!("sys/module/{}", drv.replace('-', "_")));
                }
            }
            ["sys", "bus", "mdev"] => {
                d.dir("devices");
            }
            ["sys", "bus", "mdev", "devices"] => {
                for (u, m) in &self.mdevs {
                    if let Some(p) = self.devs.get(&m.parent) {
                        d.link(u.to_string(), &format!("{}/{u}", p.path()));
                    }
                }
            }
            ["sys", "class"] => {
                d.dir("drm");
                d.dir("iommu");
                d.dir("mdev_bus");
                d.dir("vfio");
                d.dir("vfio-dev");
            }
            ["sys", "class", "drm"] => {
                for p in self.devs.values().filter(|p| self.has_lmem_quotas(p)) {
                    if let Some(n) = p.drm_card {
                        d.link(format!("card{n}"), &format!("{}/drm/card{n}", p.path()));
                    }
                }
            }
            ["sys", "class", "vfio"] => {
                for g in self.vfio.groups() {
                    d.link(g.to_string(), &format!("sys/devices/virtual/vfio/{g}"));
                }
            }
            ["sys", "class", "vfio-dev"] => {
                for (key, v) in self.vfio.iter() {
                    if let Some(dev) = self.vfio_dev_path(key) {
                        let name = cdev_name(v.index);
                        d.link(name.clone(), &format!("{dev}/vfio-dev/{name}"));
                    }
                }
            }
            ["sys", "class", "mdev_bus"] => {
                for p in self.devs.values().filter(|x| x.is_mdev_parent()) {
                    d.link(p.addr.to_string(), &p.path());
                }
            }
            ["sys", "class", "iommu"] => {
                if let Some(unit) = self.iommu_unit() {
                    d.link(unit, &format!("sys/devices/virtual/iommu/{unit}"));
                }
            }
            ["sys", "devices"] => {
                for root in self.root_buses() {
                    d.dir(root);
                }
                d.dir("system");
                d.dir("virtual");
            }
            ["sys", "devices", "virtual"] => {
                d.dir("iommu");
                d.dir("vfio");
            }
            ["sys", "devices", "virtual", "vfio"] => {
                for g in self.vfio.groups() {
                    d.dir(g.to_string());
                }
            }
            ["sys", "devices", "virtual", "vfio", g] => {
                let g = g.parse::<u32>().ok().filter(|n| n.to_string() == *g)?;
                if !self.vfio.groups().contains(&g) {
                    return None;
                }
                d.text("dev", format!("{GROUP_MAJOR}:{g}\n"));
                d.link("subsystem", "sys/class/vfio");
                d.text(
                    "uevent",
                    format!("MAJOR={GROUP_MAJOR}\nMINOR={g}\nDEVNAME=vfio/{g}\n"),
                );
            }
            ["sys", "devices", "virtual", "iommu"] => {
                if let Some(unit) = self.iommu_unit() {
                    d.dir(unit);
                }
            }
            ["sys", "devices", "virtual", "iommu", unit] => {
                if Some(*unit) != self.iommu_unit() {
                    return None;
                }
                d.text("uevent", String::new());
                d.dir(if self.profile.iommu == IommuKind::Amd {
                    "amd-iommu"
                } else {
                    "intel-iommu"
                });
            }
            ["sys", "devices", "virtual", "iommu", unit, "intel-iommu"]
                if Some(*unit) == self.iommu_unit() =>
            {
                let ecap = if self.profile.interrupt_remapping {
                    "f050da"
                } else {
                    "f050d2"
                };
                d.text("cap", "d2008c40660462\n".to_owned());
                d.text("ecap", format!("{ecap}\n"));
                d.text("version", "1:0\n".to_owned());
            }
            ["sys", "devices", "virtual", "iommu", unit, "amd-iommu"]
                if Some(*unit) == self.iommu_unit() =>
            {
                d.text("cap", "0x00190003\n".to_owned());
                d.text("features", "25bf732fa2295afe:53d\n".to_owned());
            }
            ["sys", "devices", "system"] => {
                d.dir("cpu");
                d.dir("node");
            }
            ["sys", "devices", "system", "cpu", rest @ ..] => self.list_cpus(&mut d, rest)?,
            ["sys", "devices", "system", "node"] => {
                for n in 0..self.profile.numa_nodes {
                    d.dir(format!("node{n}"));
                }
                let last = self.profile.numa_nodes.saturating_sub(1);
                d.text("online", format!("0-{last}\n"));
                d.text("possible", format!("0-{last}\n"));
            }
            ["sys", "devices", "system", "node", node] => {
                let n: u32 = node.strip_prefix("node")?.parse().ok()?;
                if n >= self.profile.numa_nodes {
                    return None;
                }
                let per = self.cpus_per_node();
                d.text("cpulist", format!("{}-{}\n", n * per, n * per + per - 1));
                d.text("cpumap", self.cpu_mask(n * per..n * per + per));
                d.text("uevent", String::new());
                for cpu in (n * per..n * per + per).filter(|c| *c < self.profile.cpus) {
                    d.link(
                        format!("cpu{cpu}"),
                        &format!("sys/devices/system/cpu/cpu{cpu}"),
                    );
                }
            }
            ["sys", "devices", rest @ ..] => return self.list_device_tree(&mut d, rest),
            ["sys", "firmware"] => d.dir("acpi"),
            ["sys", "firmware", "acpi"] => d.dir("tables"),
            ["sys", "firmware", "acpi", "tables"] => {
                for sig in [b"APIC", b"DSDT", b"FACP", b"MCFG"] {
                    d.file(
                        String::from_utf8_lossy(sig),
                        FileRef::Bin(acpi_table(sig)),
                        0o400,
                    );
                }
                match self.profile.iommu {
                    IommuKind::Intel => d.file("DMAR", FileRef::Bin(acpi_table(b"DMAR")), 0o400),
                    IommuKind::Amd => d.file("IVRS", FileRef::Bin(acpi_table(b"IVRS")), 0o400),
                    IommuKind::None => {}
                }
            }
            ["sys", "kernel"] => d.dir("iommu_groups"),
            ["sys", "kernel", "iommu_groups"] => {
                for g in self.groups().keys() {
                    d.dir(g.to_string());
                }
            }
            ["sys", "kernel", "iommu_groups", g] => {
                let g: u32 = g.parse().ok()?;
                self.groups().get(&g)?;
                d.dir("devices");
                d.text(
                    "reserved_regions",
                    "0x00000000fee00000 0x00000000feefffff msi\n".into(),
                );
                let pt = self
                    .profile
                    .cmdline
                    .split_whitespace()
                    .any(|w| w == "iommu=pt");
                d.text("type", if pt { "identity\n" } else { "DMA\n" }.to_owned());
            }
            ["sys", "kernel", "iommu_groups", g, "devices"] => {
                let g: u32 = g.parse().ok()?;
                for (name, target) in self.groups().get(&g)? {
                    d.link(name.clone(), target);
                }
            }
            ["sys", "module"] => {
                for m in self.modules() {
                    d.dir(m);
                }
            }
            ["sys", "module", m] => {
                if !self.modules().iter().any(|x| x == m) {
                    return None;
                }
                d.text("initstate", "live\n".to_owned());
            }
            ["proc"] => {
                d.text("cmdline", format!("{}\n", self.profile.cmdline));
                d.text("cpuinfo", self.cpuinfo());
                d.dir("driver");
                d.dir("sys");
                for pid in self.procs.pids() {
                    d.dir(pid.to_string());
                }
            }
            ["proc", "driver"] => {
                if self.drivers.iter().any(|x| x == "nvidia") {
                    d.dir("nvidia");
                }
            }
            ["proc", "driver", "nvidia"] if self.drivers.iter().any(|x| x == "nvidia") => {
                d.dir("gpus");
                d.text("params", self.nvidia_params());
                d.text(
                    "version",
                    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.05  (vgpu-sim)\n"
                        .to_owned(),
                );
            }
            ["proc", "driver", "nvidia", "gpus"] if self.drivers.iter().any(|x| x == "nvidia") => {
                for g in self.devs.values().filter(|x| is_nv_proc(x)) {
                    d.dir(g.addr.to_string());
                }
            }
            ["proc", "driver", "nvidia", "gpus", bdf] => {
                let g = self.dev_by_name(bdf).filter(|x| is_nv_proc(x))?;
                d.file("information", FileRef::NvInfo(g.addr), RO);
                d.file("unbindLock", FileRef::UnbindLock(g.addr), RW);
            }
            ["proc", "sys"] => d.dir("kernel"),
            ["proc", "sys", "kernel"] => d.dir("random"),
            ["proc", "sys", "kernel", "random"] => {
                d.text("boot_id", format!("{}\n", self.boot_id.hyphenated()));
            }
            ["proc", pid] => {
                let p = self.procs.get(parse_pid_dir(pid)?)?;
                d.text("comm", format!("{}\n", p.comm));
                d.dir("fd");
            }
            ["proc", pid, "fd"] => {
                let p = self.procs.get(parse_pid_dir(pid)?)?;
                for (fd, target) in &p.fds {
                    d.entries.push((fd.to_string(), Node::Link(target.clone())));
                }
            }
            ["dev"] => d.dir("vfio"),
            // devtmpfs: the container, a node per IOMMU group with a VFIO device (minor: the
            // group number), `devices/` while any VFIO device cdev exists.
            ["dev", "vfio"] => {
                d.chardev("vfio", CONTAINER_MAJOR, CONTAINER_MINOR, DEV_PUBLIC);
                for g in self.vfio.groups() {
                    d.chardev(g.to_string(), GROUP_MAJOR, g, DEV_PRIVATE);
                }
                if self.vfio.iter().next().is_some() {
                    d.dir("devices");
                }
            }
            ["dev", "vfio", "devices"] => {
                self.vfio.iter().next()?;
                for (_, v) in self.vfio.iter() {
                    d.chardev(cdev_name(v.index), CDEV_MAJOR, v.index, DEV_PRIVATE);
                }
            }
            _ => return None,
        }
        Some(d.entries)
    }

    fn iommu_unit(&self) -> Option<&'static str> {
        match self.profile.iommu {
            IommuKind::Intel => Some("dmar0"),
            IommuKind::Amd => Some("ivhd0"),
            IommuKind::None => None,
        }
    }

    fn root_buses(&self) -> Vec<String> {
        let mut roots: Vec<String> = self
            .devs
            .values()
            .filter_map(|d| d.dir.split('/').next().map(str::to_owned))
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }

    /// Group number -> (member name, member path).
    fn groups(&self) -> std::collections::BTreeMap<u32, Vec<(String, String)>> {
        let mut out: std::collections::BTreeMap<u32, Vec<(String, String)>> = Default::default();
        for d in self.devs.values() {
            if let Some(g) = d.group {
                out.entry(g)
                    .or_default()
                    .push((d.addr.to_string(), d.path()));
            }
        }
        for (u, m) in &self.mdevs {
            if let (Some(g), Some(p)) = (m.group, self.devs.get(&m.parent)) {
                out.entry(g)
                    .or_default()
                    .push((u.to_string(), format!("{}/{u}", p.path())));
            }
        }
        out
    }

    fn modules(&self) -> Vec<String> {
        let mut m: Vec<String> = ["kvm", "mdev", "vfio", "vfio_iommu_type1", "vfio_pci"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        m.push(match self.profile.cpu_vendor {
            CpuVendor::Intel => "kvm_intel".to_owned(),
            CpuVendor::Amd => "kvm_amd".to_owned(),
        });
        for drv in &self.drivers {
            if drv != "pcieport" {
                m.push(drv.replace('-', "_"));
            }
        }
        if self.devs.values().any(|d| d.vgpu == Some(VgpuMode::Mdev)) {
            m.push("nvidia_vgpu_vfio".to_owned());
        }
        m.sort();
        m.dedup();
        m
    }

    fn cpuinfo(&self) -> String {
        let (vendor, model, flag) = match self.profile.cpu_vendor {
            CpuVendor::Intel => (
                "GenuineIntel",
                "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                "vmx",
            ),
            CpuVendor::Amd => ("AuthenticAMD", "AMD EPYC 9354 32-Core Processor", "svm"),
        };
        let mut s = String::new();
        for cpu in 0..self.profile.cpus {
            let _ = write!(
                s,
                "processor\t: {cpu}\nvendor_id\t: {vendor}\nmodel name\t: {model}\n\
                 physical id\t: 0\ncore id\t\t: {cpu}\ncpu cores\t: {n}\n\
                 flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat \
                 pse36 clflush mmx fxsr sse sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc \
                 nopl xtopology pni pclmulqdq {flag} ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe \
                 popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm avx2\n\n",
                n = self.profile.cpus
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_to_sibling_tree_climbs_to_common_prefix() {
        assert_eq!(
            rel("sys/bus/pci/devices", "sys/devices/pci0000:3a/0000:3a:00.0"),
            "../../../devices/pci0000:3a/0000:3a:00.0"
        );
    }

    fn listed(k: &Kernel, parent: &[&str], name: &str) -> Option<Node> {
        k.list(parent)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, node)| node)
    }

    fn l40s() -> Kernel {
        Kernel::boot(crate::Profile::builtin("l40s-vendor-vfio").expect("profile"))
    }

    #[test]
    fn lookup_pci_devices_link_equals_listing() {
        let k = l40s();
        let parent = ["sys", "bus", "pci", "devices"];
        assert_eq!(
            k.lookup(&parent, "0000:41:00.4"),
            listed(&k, &parent, "0000:41:00.4")
        );
    }

    #[test]
    fn lookup_vf_dir_beside_pf_equals_listing() {
        let k = l40s();
        let parent = ["sys", "devices", "pci0000:40", "0000:40:01.1"];
        assert_eq!(
            k.lookup(&parent, "0000:41:01.0"),
            listed(&k, &parent, "0000:41:01.0")
        );
    }

    #[test]
    fn lookup_device_under_wrong_parent_is_none() {
        let k = l40s();
        assert_eq!(
            k.lookup(&["sys", "devices", "pci0000:c0"], "0000:41:00.4"),
            None
        );
    }

    #[test]
    fn rel_to_ancestor_climbs_past_it_and_names_it() {
        assert_eq!(
            rel(
                "sys/devices/pci0000:40/a/vfio-dev/vfio0",
                "sys/devices/pci0000:40/a"
            ),
            "../../../a"
        );
    }

    #[test]
    fn rel_to_sibling_dir_is_one_up() {
        assert_eq!(
            rel("sys/devices/pci0000:40/a/b", "sys/devices/pci0000:40/a/c"),
            "../c"
        );
    }
}
