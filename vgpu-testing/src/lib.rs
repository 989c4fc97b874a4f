//! Fake host trees for vgpu's tests, examples and benchmarks: a dev-dependency, never a
//! dependency of the library or the command line.
//!
//! [`FakeHost`] lays files and links out as the kernel does: devices live under
//! `sys/devices/pci<domain>:<bus>/…`, `sys/bus/pci/devices/<addr>` are relative links to them,
//! VFs sit beside their PF with `physfn`/`virtfnN` links, and `driver`, `iommu_group` and
//! `mdev_type` are relative links, so code under test resolves them exactly as on a real host.
//! [`scenarios`] builds the hosts the tests talk about.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use uuid::Uuid;

use vgpu_core::HostPaths;
use vgpu_model::pci::PciAddress;

/// A host tree under a directory, removed on drop when it is a temporary one.
#[derive(Debug)]
pub struct FakeHost {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

/// What a PCI function looks like.
#[derive(Debug, Clone)]
pub struct PciSpec {
    /// Its address.
    pub address: PciAddress,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// 24-bit class code.
    pub class: u32,
    /// Bound driver.
    pub driver: Option<String>,
    /// NUMA node (`-1` for unknown).
    pub numa_node: i32,
    /// IOMMU group, `None` without an IOMMU.
    pub iommu_group: Option<u32>,
    /// The bridge it sits behind, `None` for the root bus.
    pub parent: Option<PciAddress>,
    /// `(sriov_totalvfs, VF device id)` for an SR-IOV PF.
    pub sriov: Option<(u32, u16)>,
}

impl PciSpec {
    /// A function with the given ids and class, unbound, NUMA unknown, no IOMMU group.
    pub fn new(address: PciAddress, vendor: u16, device: u16, class: u32) -> Self {
        Self {
            address,
            vendor,
            device,
            class,
            driver: None,
            numa_node: -1,
            iommu_group: None,
            parent: None,
            sriov: None,
        }
    }

    /// Bound to `driver`.
    pub fn driver(mut self, driver: &str) -> Self {
        self.driver = Some(driver.to_owned());
        self
    }

    /// On NUMA node `node`.
    pub fn numa(mut self, node: i32) -> Self {
        self.numa_node = node;
        self
    }

    /// In IOMMU group `group`.
    pub fn group(mut self, group: u32) -> Self {
        self.iommu_group = Some(group);
        self
    }

    /// Behind bridge `bridge`.
    pub fn behind(mut self, bridge: PciAddress) -> Self {
        self.parent = Some(bridge);
        self
    }

    /// An SR-IOV PF supporting `total` VFs of device id `vf_device`.
    pub fn sriov(mut self, total: u32, vf_device: u16) -> Self {
        self.sriov = Some((total, vf_device));
        self
    }
}

/// What an mdev type directory holds.
#[derive(Debug, Clone)]
pub struct TypeSpec {
    /// `name`, absent on some kernels.
    pub name: Option<String>,
    /// `description`.
    pub description: Option<String>,
    /// `available_instances`.
    pub available: u32,
    /// `device_api`.
    pub device_api: String,
}

impl TypeSpec {
    /// A `vfio-pci` type with this name, description and availability.
    pub fn new(name: Option<&str>, description: &str, available: u32) -> Self {
        Self {
            name: name.map(str::to_owned),
            description: Some(description.to_owned()),
            available,
            device_api: "vfio-pci".to_owned(),
        }
    }
}

/// Parses an address known to be valid in a fixture; a typo in a fixture is a test bug.
///
/// # Panics
/// When `text` is not a PCI address.
pub fn addr(text: &str) -> PciAddress {
    match text.parse() {
        Ok(address) => address,
        Err(err) => panic!("fixture address {text:?}: {err}"),
    }
}

/// Polls `done` until it returns true or `timeout` passes; false on timeout. The interval
/// grows from 1 ms to 5 ms: tests that kill a process at a point see that point within 5 ms.
pub fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(1);
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(interval.min(deadline - now));
        interval = (interval * 2).min(Duration::from_millis(5));
    }
}
/// The relative path from directory `from` to `to` (both absolute, inside one tree).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for part in &to[common..] {
        out.push(part);
    }
    out
}

impl FakeHost {
    /// An empty host in a new temporary directory.
    pub fn new() -> io::Result<Self> {
        let temp = tempfile::tempdir()?;
        let mut host = Self::at(temp.path())?;
        host._temp = Some(temp);
        Ok(host)
    }

    /// An empty host under `root` (created if needed, kept on drop).
    pub fn at(root: &Path) -> io::Result<Self> {
        let host = Self {
            root: root.to_path_buf(),
            _temp: None,
        };
        for dir in [
            "sys/bus/pci/devices",
            "sys/bus/pci/drivers",
            "sys/bus/mdev/devices",
            "sys/class/mdev_bus",
            "sys/class/iommu",
            "sys/kernel/iommu_groups",
            "sys/firmware/acpi/tables",
            "sys/module",
            "proc",
            "dev",
        ] {
            fs::create_dir_all(root.join(dir))?;
        }
        Ok(host)
    }

    /// The host's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// [`HostPaths`] for this host.
    pub fn paths(&self) -> HostPaths {
        HostPaths::new(&self.root)
    }

    /// Writes `content` to `rel` (relative to the root), creating directories.
    pub fn write(&self, rel: impl AsRef<Path>, content: impl AsRef<[u8]>) -> io::Result<()> {
        let path = self.root.join(rel);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        fs::write(path, content)
    }

    /// Makes `link` (relative to the root) a relative symlink to `target` (relative to the root).
    pub fn link(&self, link: impl AsRef<Path>, target: impl AsRef<Path>) -> io::Result<()> {
        let link = self.root.join(link);
        let target = self.root.join(target);
        let dir = link.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir)?;
        if fs::symlink_metadata(&link).is_ok() {
            fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink(relative(&dir, &target), link)
    }

    /// Removes `rel` (file, link or directory tree).
    pub fn remove(&self, rel: impl AsRef<Path>) -> io::Result<()> {
        let path = self.root.join(rel);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
            Ok(_) => fs::remove_file(path),
            Err(err) => Err(err),
        }
    }

    /// The device directory of `address` relative to the root (under `sys/devices`).
    pub fn device_dir(&self, address: PciAddress) -> PathBuf {
        let link = self
            .root
            .join("sys/bus/pci/devices")
            .join(address.to_string());
        match fs::read_link(&link) {
            Ok(target) => {
                let resolved = Path::new("sys/bus/pci/devices").join(target);
                normalize(&resolved)
            }
            Err(_) => PathBuf::from(format!("sys/devices/pci{:04x}:00", address.domain()))
                .join(address.to_string()),
        }
    }

    /// Adds a PCI function.
    pub fn pci(&self, spec: &PciSpec) -> io::Result<()> {
        let parent = match spec.parent {
            Some(bridge) => self.device_dir(bridge),
            None => PathBuf::from(format!(
                "sys/devices/pci{:04x}:{:02x}",
                spec.address.domain(),
                spec.address.bus()
            )),
        };
        self.place(spec, &parent.join(spec.address.to_string()))
    }

    fn place(&self, spec: &PciSpec, dir: &Path) -> io::Result<()> {
        let name = spec.address.to_string();
        self.write(dir.join("vendor"), format!("0x{:04x}\n", spec.vendor))?;
        self.write(dir.join("device"), format!("0x{:04x}\n", spec.device))?;
        self.write(
            dir.join("subsystem_vendor"),
            format!("0x{:04x}\n", spec.vendor),
        )?;
        self.write(dir.join("subsystem_device"), "0x0000\n")?;
        self.write(dir.join("class"), format!("0x{:06x}\n", spec.class))?;
        self.write(dir.join("numa_node"), format!("{}\n", spec.numa_node))?;
        self.write(dir.join("driver_override"), "(null)\n")?;
        self.link(Path::new("sys/bus/pci/devices").join(&name), dir)?;
        if let Some(driver) = &spec.driver {
            self.bind(spec.address, driver)?;
        }
        if let Some(group) = spec.iommu_group {
            self.join_group(spec.address, group)?;
        }
        if let Some((total, vf_device)) = spec.sriov {
            self.write(dir.join("sriov_totalvfs"), format!("{total}\n"))?;
            self.write(dir.join("sriov_numvfs"), "0\n")?;
            self.write(dir.join("sriov_offset"), "4\n")?;
            self.write(dir.join("sriov_stride"), "1\n")?;
            self.write(dir.join("sriov_vf_device"), format!("{vf_device:x}\n"))?;
            self.write(dir.join("sriov_drivers_autoprobe"), "1\n")?;
        }
        Ok(())
    }

    /// Binds `address` to `driver` (the `driver` link and the driver's back link).
    pub fn bind(&self, address: PciAddress, driver: &str) -> io::Result<()> {
        let dir = self.device_dir(address);
        let driver_dir = Path::new("sys/bus/pci/drivers").join(driver);
        fs::create_dir_all(self.root.join(&driver_dir))?;
        self.link(dir.join("driver"), &driver_dir)?;
        self.link(driver_dir.join(address.to_string()), &dir)
    }

    /// Puts `address` in IOMMU group `group`.
    pub fn join_group(&self, address: PciAddress, group: u32) -> io::Result<()> {
        let dir = self.device_dir(address);
        let group_dir = Path::new("sys/kernel/iommu_groups").join(group.to_string());
        fs::create_dir_all(self.root.join(group_dir.join("devices")))?;
        self.link(dir.join("iommu_group"), &group_dir)?;
        self.link(group_dir.join("devices").join(address.to_string()), &dir)
    }

    /// Enables VF `index` of `pf` with the given spec (placed beside the PF, as the kernel does),
    /// and updates the PF's `sriov_numvfs`.
    pub fn vf(&self, pf: PciAddress, index: u32, spec: &PciSpec) -> io::Result<()> {
        let pf_dir = self.device_dir(pf);
        let parent = pf_dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let vf_dir = parent.join(spec.address.to_string());
        self.place(spec, &vf_dir)?;
        self.link(vf_dir.join("physfn"), &pf_dir)?;
        self.link(pf_dir.join(format!("virtfn{index}")), &vf_dir)?;
        let count = fs::read_dir(self.root.join(&pf_dir))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("virtfn"))
            .count();
        self.write(pf_dir.join("sriov_numvfs"), format!("{count}\n"))
    }

    /// Adds mdev type `id` to `parent` (and registers `parent` in `sys/class/mdev_bus`).
    pub fn mdev_type(&self, parent: PciAddress, id: &str, spec: &TypeSpec) -> io::Result<()> {
        let dir = self.device_dir(parent);
        let type_dir = dir.join("mdev_supported_types").join(id);
        if let Some(name) = &spec.name {
            self.write(type_dir.join("name"), format!("{name}\n"))?;
        }
        if let Some(description) = &spec.description {
            let text = if description.ends_with('\n') {
                description.clone()
            } else {
                format!("{description}\n")
            };
            self.write(type_dir.join("description"), text)?;
        }
        self.write(
            type_dir.join("available_instances"),
            format!("{}\n", spec.available),
        )?;
        self.write(
            type_dir.join("device_api"),
            format!("{}\n", spec.device_api),
        )?;
        self.write(type_dir.join("create"), "")?;
        fs::create_dir_all(self.root.join(type_dir.join("devices")))?;
        self.link(
            Path::new("sys/class/mdev_bus").join(parent.to_string()),
            &dir,
        )
    }

    /// Adds an existing mdev of type `type_id` on `parent`, in IOMMU group `group`.
    pub fn mdev(
        &self,
        parent: PciAddress,
        uuid: Uuid,
        type_id: &str,
        group: u32,
    ) -> io::Result<()> {
        let dir = self.device_dir(parent);
        let mdev_dir = dir.join(uuid.to_string());
        let type_dir = dir.join("mdev_supported_types").join(type_id);
        self.write(mdev_dir.join("remove"), "")?;
        self.link(mdev_dir.join("mdev_type"), &type_dir)?;
        self.link(type_dir.join("devices").join(uuid.to_string()), &mdev_dir)?;
        self.link(
            Path::new("sys/bus/mdev/devices").join(uuid.to_string()),
            &mdev_dir,
        )?;
        let group_dir = Path::new("sys/kernel/iommu_groups").join(group.to_string());
        fs::create_dir_all(self.root.join(group_dir.join("devices")))?;
        self.link(mdev_dir.join("iommu_group"), &group_dir)
    }

    /// Gives VF `vf` NVIDIA's vendor-VFIO attributes: the creatable types and the current one.
    pub fn nvidia_vf(
        &self,
        vf: PciAddress,
        creatable: &[(u32, &str)],
        current: u32,
    ) -> io::Result<()> {
        let dir = self.device_dir(vf).join("nvidia");
        let mut table = String::from("ID    : vGPU Name\n");
        for (id, name) in creatable {
            table.push_str(&format!("{id:<5} : {name}\n"));
        }
        self.write(dir.join("creatable_vgpu_types"), table)?;
        self.write(dir.join("current_vgpu_type"), format!("{current}\n"))?;
        self.write(dir.join("vgpu_params"), "\n")
    }

    /// A working Intel VT-d host: DMAR table, `dmar0` with interrupt remapping,
    /// `intel_iommu=on iommu=pt`, vmx, VFIO loaded.
    pub fn intel_iommu_host(&self) -> io::Result<()> {
        self.write("sys/firmware/acpi/tables/DMAR", b"DMAR")?;
        self.write("sys/class/iommu/dmar0/intel-iommu/ecap", "f020df\n")?;
        self.write(
            "proc/cmdline",
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro intel_iommu=on iommu=pt\n",
        )?;
        self.cpu("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr vmx ssse3 sse4_1 sse4_2")?;
        self.vfio()
    }

    /// A working AMD-Vi host: IVRS table, `ivhd0`, svm, VFIO loaded.
    pub fn amd_iommu_host(&self) -> io::Result<()> {
        self.write("sys/firmware/acpi/tables/IVRS", b"IVRS")?;
        fs::create_dir_all(self.root.join("sys/class/iommu/ivhd0"))?;
        self.write(
            "proc/cmdline",
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt\n",
        )?;
        self.cpu("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr svm sse4a")?;
        self.vfio()
    }

    /// `proc/cpuinfo` with one processor and these flags.
    pub fn cpu(&self, flags: &str) -> io::Result<()> {
        self.write(
            "proc/cpuinfo",
            format!("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {flags}\n\n"),
        )
    }

    /// VFIO loaded: `dev/vfio/vfio`, the `vfio-pci` driver and module.
    pub fn vfio(&self) -> io::Result<()> {
        self.write("dev/vfio/vfio", "")?;
        fs::create_dir_all(self.root.join("sys/bus/pci/drivers/vfio-pci"))?;
        fs::create_dir_all(self.root.join("sys/module/vfio_pci"))
    }
}

/// Resolves `..` components lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The hosts the tests and demos talk about, built with real ids, names and descriptions.
pub mod disk;
pub mod fake_nvml;
pub mod scenarios;
pub mod udevd;
