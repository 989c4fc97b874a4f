//! Host discovery: every GPU physical function, its VFs, vGPU types and vGPUs.
//!
//! Discovery reads sysfs only (plus the built-in [`catalog`] for facts sysfs
//! does not state). A device whose files are broken is still listed, with what could be read,
//! and each problem becomes a [`Warning`] naming the device and the path: one broken device
//! never hides the others.

pub(crate) use crate::model::catalog::{self, set_name};

pub use crate::host::pci_device::resolve_address;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, HostError, Object, Result};
use crate::host::mdev::MdevParent;
use crate::host::nvidia::NvidiaVf;
use crate::host::paths::HostPaths;
use crate::host::pci_device::PciDevice;
use crate::host::sysfs::{self, SysDir};
use crate::model::pci::PciAddress;
use crate::model::{
    Backend, Gpu, GpuLookupError, Inventory, NVIDIA_VENDOR_ID, NameSource, Vf, Vgpu, VgpuHandle,
    VgpuType, Warning,
};
use crate::parse::{
    CreatableType, gvtg_type_instances, parse_gvtg_description, parse_nvidia_description,
    parse_nvidia_type_name,
};

/// Collects per-device problems while discovery carries on.
struct Warnings(Vec<Warning>);

impl Warnings {
    fn push(&mut self, device: impl ToString, err: &Error) {
        let warning = Warning {
            device: device.to_string(),
            message: err.chain(),
        };
        tracing::warn!(device = %warning.device, "{}", warning.message);
        self.0.push(warning);
    }

    /// The value, or `None` after recording the error against `device`.
    fn ok<T>(&mut self, device: PciAddress, result: Result<Option<T>>) -> Option<T> {
        match result {
            Ok(value) => value,
            Err(err) => {
                self.push(device, &err);
                None
            }
        }
    }

    fn list<T>(&mut self, device: PciAddress, result: Result<Vec<T>>) -> Vec<T> {
        self.ok(device, result.map(Some)).unwrap_or_default()
    }
}

fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 16, 0x03 | 0x12)
}

/// Discovers every GPU physical function on the host at `paths`.
///
/// Fails only when the PCI device list itself cannot be read; problems with single devices
/// become [`Inventory::warnings`].
pub fn discover(paths: &HostPaths) -> Result<Inventory> {
    let devices_dir = paths.pci_devices();
    // Every device is looked up from the device list, held open.
    let devices = SysDir::new(&devices_dir).held_open();
    let names = devices.names_required()?;
    let mut warnings = Warnings(Vec::new());
    let mdev_parents: BTreeSet<PciAddress> = sysfs::dir_names(&paths.mdev_bus())?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    let mut candidates = Vec::new();
    for name in names {
        let address = match name.parse::<PciAddress>() {
            Ok(address) => address,
            Err(_) => {
                let err = sysfs::parse_error(&devices_dir.join(&name), &name, "a PCI address");
                warnings.push(&name, &err);
                continue;
            }
        };
        let device = PciDevice::listed(&devices, address);
        if !device.exists() {
            let err = Error::from(HostError::DanglingLink {
                path: device.path().to_path_buf(),
            });
            warnings.push(address, &err);
            continue;
        }
        if warnings.ok(address, device.physfn()).is_some() {
            continue;
        }
        let class = warnings.ok(address, device.class());
        let is_gpu = class.is_some_and(is_gpu_class) || mdev_parents.contains(&address);
        if is_gpu {
            candidates.push(Candidate {
                device,
                class,
                before: std::mem::take(&mut warnings.0),
            });
        }
    }
    let trailing = warnings.0;
    let mut gpus = Vec::with_capacity(candidates.len());
    let mut all = Vec::new();
    let read = read_gpus(&devices, &candidates);
    for (candidate, (gpu, found)) in candidates.into_iter().zip(read) {
        all.extend(candidate.before);
        all.extend(found);
        gpus.push(gpu);
    }
    all.extend(trailing);
    Ok(Inventory {
        gpus,
        warnings: all,
    })
}

/// A GPU physical function found in the device list, with the warnings met before it.
struct Candidate {
    device: PciDevice,
    class: Option<u32>,
    before: Vec<Warning>,
}

/// Reads every candidate, in their order, on up to one thread per CPU: the GPUs of a host
/// share nothing, and each is hundreds of sysfs reads.
fn read_gpus(devices: &SysDir, candidates: &[Candidate]) -> Vec<(Gpu, Vec<Warning>)> {
    let read_one = |candidate: &Candidate| {
        let mut warnings = Warnings(Vec::new());
        let gpu = read_gpu(devices, &candidate.device, candidate.class, &mut warnings);
        (gpu, warnings.0)
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(candidates.len());
    let mut read: Vec<Option<(Gpu, Vec<Warning>)>> = candidates.iter().map(|_| None).collect();
    if workers > 1 {
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let work = || {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(candidate) = candidates.get(i) else {
                        return done;
                    };
                    done.push((i, read_one(candidate)));
                }
            };
            let threads: Vec<_> = (0..workers)
                .filter_map(|_| {
                    std::thread::Builder::new()
                        .name("vgpu-discover".to_owned())
                        .spawn_scoped(scope, work)
                        .ok()
                })
                .collect();
            for thread in threads {
                // A thread that panicked leaves its GPUs unread; they are read below.
                for (i, gpu) in thread.join().unwrap_or_default() {
                    read[i] = Some(gpu);
                }
            }
        });
    }
    // Read here what no thread did (none could be started, or one panicked).
    read.into_iter()
        .zip(candidates)
        .map(|(gpu, candidate)| gpu.unwrap_or_else(|| read_one(candidate)))
        .collect()
}

/// Reads one GPU physical function, with the problems met; fails when `address` is not a
/// GPU PF on this host.
#[tracing::instrument(level = "trace", skip_all)]
pub fn discover_gpu(paths: &HostPaths, address: PciAddress) -> Result<(Gpu, Vec<Warning>)> {
    let devices = SysDir::new(paths.pci_devices()).held_open();
    let device = PciDevice::listed(&devices, address);
    let not_gpu = || Error::NotFound {
        what: Object::Gpu,
        id: address.to_string(),
        path: paths.pci_devices(),
    };
    if !device.exists() || device.physfn()?.is_some() {
        return Err(not_gpu());
    }
    let class = device.class()?;
    let parent = sysfs::exists(&paths.mdev_bus().join(address.to_string()));
    if !(class.is_some_and(is_gpu_class) || parent) {
        return Err(not_gpu());
    }
    let mut warnings = Warnings(Vec::new());
    let gpu = read_gpu(&devices, &device, class, &mut warnings);
    Ok((gpu, warnings.0))
}

/// The GPU of `inventory` named by `name` ([`Inventory::gpu`]: a full address, or the
/// `bus:device.function` part when only one GPU has it). Not found names where the host lists
/// PCI devices (`paths`), as [`discover_gpu`]'s error does.
pub fn find_gpu<'a>(inventory: &'a Inventory, name: &str, paths: &HostPaths) -> Result<&'a Gpu> {
    inventory.gpu(name).map_err(|lookup| match lookup {
        GpuLookupError::NotFound { name } => no_gpu(name, paths),
        GpuLookupError::Ambiguous { name, candidates } => Error::Ambiguous { name, candidates },
    })
}

/// The address of the GPU `text` names on the host at `paths`, as [`find_gpu`] reads names:
/// a full address as it is (whether it is a GPU is the caller's to check; the manager's
/// methods do), or the `bus:device.function` part when one GPU has it, which discovers the
/// host's GPUs to match it against.
pub fn resolve_gpu(paths: &HostPaths, text: &str) -> Result<PciAddress> {
    if let Ok(address) = text.parse::<PciAddress>() {
        return Ok(address);
    }
    find_gpu(&discover(paths)?, text, paths).map(|gpu| gpu.address)
}

/// The GPU of `inventory` at `address`; not found names where the host lists PCI devices.
pub(crate) fn gpu_at<'a>(
    inventory: &'a Inventory,
    address: PciAddress,
    paths: &HostPaths,
) -> Result<&'a Gpu> {
    inventory
        .gpus
        .iter()
        .find(|g| g.address == address)
        .ok_or_else(|| no_gpu(address.to_string(), paths))
}

fn no_gpu(name: String, paths: &HostPaths) -> Error {
    Error::NotFound {
        what: Object::Gpu,
        id: name,
        path: paths.pci_devices(),
    }
}

/// What was read of one VF, for its [`Vf`].
struct VfRead {
    address: PciAddress,
    driver: Result<Option<String>>,
    iommu_group: Result<Option<u32>>,
}

/// What one VF's NVIDIA vendor interface says, read while the VF's directory is held open:
/// the type it holds, and unless it holds one, what it can take.
struct NvidiaRead {
    current: Result<Option<u32>>,
    creatable: Result<Vec<CreatableType>>,
}

impl NvidiaRead {
    fn of(nvidia: &NvidiaVf) -> Self {
        let current = nvidia.current_type();
        // A type that cannot be read is a warning; what the VF can take still counts.
        let creatable = match current {
            Ok(Some(_)) => Ok(Vec::new()),
            _ => nvidia.creatable_types(),
        };
        Self { current, creatable }
    }
}

/// Reads the GPU physical function `device`, whose VFs are found in `devices`, the PCI device
/// list.
fn read_gpu(
    devices: &SysDir,
    device: &PciDevice,
    class: Option<u32>,
    warnings: &mut Warnings,
) -> Gpu {
    let device = device.clone().held_open();
    let address = device.address();
    let vendor_id = warnings.ok(address, device.vendor_id());
    let device_id = warnings.ok(address, device.device_id());
    let (vendor, model) = pci_names(vendor_id, device_id);
    let sriov = warnings.ok(address, device.sriov());
    let vf_devices = warnings.list(address, device.virtfn_devices(devices));
    // Intel's SR-IOV drivers publish each VF's local memory under the PF's `drm/`; looked up
    // once, not once per VF.
    let iov = warnings.ok(address, device.iov_dir());

    let pf_parent = MdevParent::of(&device);
    let pf_is_parent = pf_parent.is_parent();
    // One pass over the VFs, each VF's directory held open while its files are read and closed
    // before the next one's is opened: descriptors stay few however many VFs and GPUs are read
    // at once. The types of VF parents are added up as they are met (a VF parent makes the
    // backend `VfMdev`), their warnings kept for where the backend's types come.
    let mut vf_types = MdevTally::default();
    let mut type_warnings = Warnings(Vec::new());
    let mut nvidia_vfs: Vec<(PciAddress, NvidiaRead)> = Vec::new();
    let mut vf_reads = Vec::with_capacity(vf_devices.len());
    for vf in vf_devices {
        let vf = vf.held_open();
        let vf_address = vf.address();
        let parent = MdevParent::of(&vf);
        if !pf_is_parent && parent.is_parent() {
            vf_types.add(vf_address, &parent, &mut type_warnings);
        }
        if let Some(nvidia) = warnings.ok(vf_address, NvidiaVf::of_device(&vf)) {
            nvidia_vfs.push((vf_address, NvidiaRead::of(&nvidia)));
        }
        vf_reads.push(VfRead {
            address: vf_address,
            driver: vf.driver(),
            iommu_group: vf.iommu_group(),
        });
    }
    let backend = if pf_is_parent {
        Backend::Mdev
    } else if vf_types.parents > 0 {
        Backend::VfMdev
    } else if !nvidia_vfs.is_empty() {
        Backend::NvidiaVfio
    } else if sriov.as_ref().is_some_and(|s| s.total_vfs > 0) {
        Backend::Sriov
    } else {
        Backend::None
    };

    warnings.0.append(&mut type_warnings.0);
    let (types, vgpus) = match backend {
        Backend::Mdev => {
            let mut pf_types = MdevTally::default();
            pf_types.add(address, &pf_parent, warnings);
            pf_types.finish()
        }
        Backend::VfMdev => vf_types.finish(),
        Backend::NvidiaVfio => nvidia_types(address, nvidia_vfs, warnings),
        Backend::Sriov | Backend::None => (Vec::new(), Vec::new()),
    };
    let mut types = types;
    if vendor_id == Some(NVIDIA_VENDOR_ID) {
        name_from_catalog(&mut types, backend, model.as_deref());
    }

    let mut vfs: Vec<Vf> = vf_reads
        .into_iter()
        .enumerate()
        .map(|(i, vf)| {
            let vgpu_type = vgpus
                .iter()
                .find(|v| v.id == VgpuHandle::Vf(vf.address) || v.parent == vf.address)
                .map(|v| v.type_id.clone());
            Vf {
                address: vf.address,
                driver: warnings.ok(vf.address, vf.driver),
                iommu_group: warnings.ok(vf.address, vf.iommu_group),
                vgpu_type,
                memory_mib: iov
                    .as_deref()
                    .and_then(|iov| warnings.ok(address, PciDevice::lmem_quota_in(iov, i + 1)))
                    .map(|bytes| bytes / (1024 * 1024)),
            }
        })
        .collect();
    let (types, vgpus) = match backend {
        Backend::Sriov if vendor_id != Some(NVIDIA_VENDOR_ID) => plain_vf_type(address, &mut vfs),
        _ => (types, vgpus),
    };

    Gpu {
        size_mode: None,
        address,
        vendor_id,
        device_id,
        subsystem_vendor_id: warnings.ok(address, device.subsystem_vendor_id()),
        subsystem_device_id: warnings.ok(address, device.subsystem_device_id()),
        class,
        vendor,
        model,
        driver: warnings.ok(address, device.driver()),
        numa_node: warnings.ok(address, device.numa_node()),
        iommu_group: warnings.ok(address, device.iommu_group()),
        backend,
        sriov,
        vfs,
        types,
        vgpus,
    }
}

/// The pci.ids name of a PCI `vendor`, `device` pair (`GA104GL [RTX A4000]`), as `list` shows
/// a GPU's model; `None` when pci.ids does not know it.
pub fn device_name(vendor: u16, device: u16) -> Option<String> {
    pci_names(Some(vendor), Some(device)).1
}

fn pci_names(vendor_id: Option<u16>, device_id: Option<u16>) -> (Option<String>, Option<String>) {
    let vendor = vendor_id.and_then(|vid| {
        pci_ids::Vendors::iter()
            .find(|v| v.id() == vid)
            .map(|v| v.name().to_owned())
    });
    let model = vendor_id
        .zip(device_id)
        .and_then(|(vid, pid)| pci_ids::Device::from_vid_pid(vid, pid))
        .map(|d| d.name().to_owned());
    (vendor, model)
}

/// What the parents of one physical GPU say about one type, added up.
#[derive(Default)]
struct TypeTally {
    name: Option<String>,
    description: Option<String>,
    device_api: Option<String>,
    offered: u32,
    in_use: u32,
}

/// Frame buffer and instances per GPU, from the most specific source that states them:
/// the NVIDIA or GVT-g description, the NVIDIA type-name grammar, the GVT-g type id, the
/// catalog.
fn type_facts(id: &str, tally: &TypeTally) -> (Option<u64>, Option<u32>) {
    let nvidia = tally
        .description
        .as_deref()
        .and_then(|d| parse_nvidia_description(d).ok());
    let gvtg = tally
        .description
        .as_deref()
        .and_then(|d| parse_gvtg_description(d).ok());
    let known = tally.name.as_deref().and_then(catalog::by_name);
    let framebuffer = nvidia
        .as_ref()
        .and_then(|d| d.framebuffer_mib)
        .or_else(|| gvtg.as_ref().and_then(|d| d.framebuffer_mib()))
        .or_else(|| {
            tally
                .name
                .as_deref()
                .and_then(parse_nvidia_type_name)
                .map(|n| n.framebuffer_mib)
        })
        .or_else(|| known.map(|k| k.framebuffer_mib));
    let max = nvidia
        .and_then(|d| d.max_instance)
        .or_else(|| gvtg_type_instances(id))
        .or_else(|| known.map(|k| k.max_instances));
    (framebuffer, max)
}

fn finish_type(id: String, tally: TypeTally) -> VgpuType {
    let (framebuffer_mib, max_instances) = type_facts(&id, &tally);
    let mig = tally.name.as_deref().and_then(crate::parse::mig_backing);
    // Parents each report what they could take; the physical GPU can take no more than its
    // per-GPU maximum less what it already holds (an A40's 32 VFs still hold 24 A40-2Q).
    let mut ty = VgpuType {
        placements: None,
        placement_size: None,
        id,
        name_source: tally.name.as_ref().map(|_| NameSource::Sysfs),
        name: tally.name,
        framebuffer_mib,
        max_instances,
        available: 0,
        limit: None,
        in_use: tally.in_use,
        device_api: tally.device_api,
        description: tally.description,
        mig,
        offered: tally.offered,
    };
    ty.recount();
    ty
}

/// Warns about a description in a known vendor format with a field that does not parse, so
/// that a capacity figure silently missing from it does not go unnoticed.
fn check_description(
    text: &str,
    path: &std::path::Path,
    parent: PciAddress,
    warnings: &mut Warnings,
) {
    let failed = match (parse_nvidia_description(text), parse_gvtg_description(text)) {
        (Err(err @ crate::parse::ParseError::Field { .. }), _)
        | (_, Err(err @ crate::parse::ParseError::Field { .. })) => err,
        _ => return,
    };
    warnings.push(
        parent,
        &HostError::Format {
            path: path.to_path_buf(),
            source: failed,
        }
        .into(),
    );
}

fn sorted_types(tallies: BTreeMap<String, TypeTally>) -> Vec<VgpuType> {
    let mut types: Vec<VgpuType> = tallies
        .into_iter()
        .map(|(id, t)| finish_type(id, t))
        .collect();
    types.sort_by_cached_key(|t| crate::model::type_order(&t.id));
    types
}

/// The types and vGPUs of one physical GPU's mdev parents, added up parent by parent.
#[derive(Default)]
struct MdevTally {
    tallies: BTreeMap<String, TypeTally>,
    vgpus: Vec<Vgpu>,
    parents: usize,
}

impl MdevTally {
    /// Adds what `parent` (at `address`) offers and holds.
    fn add(&mut self, address: PciAddress, parent: &MdevParent, warnings: &mut Warnings) {
        self.parents += 1;
        // The parent's children name its mdevs and their types: the kernel links each one into
        // `mdev_supported_types/<type>/devices/` too, so one listing of the parent counts
        // what every type holds (`Documentation/driver-api/vfio-mediated-device.rst`).
        let devices = parent.devices();
        let in_use = |type_id: &str| match &devices {
            Ok(mdevs) => mdevs.iter().filter(|m| m.type_id == type_id).count(),
            Err(_) => 0,
        };
        for mdev_type in warnings.list(address, parent.types()) {
            let count = u32::try_from(in_use(mdev_type.id())).unwrap_or(u32::MAX);
            let tally = self.tallies.entry(mdev_type.id().to_owned()).or_default();
            // A type's name, description and device_api are the same on every parent of one
            // GPU (every VF of an A40 offers the same types): read once, on the first parent
            // that has them.
            if tally.name.is_none() {
                tally.name = warnings.ok(address, mdev_type.name());
            }
            if tally.description.is_none() {
                tally.description = warnings.ok(address, mdev_type.description());
                if let Some(text) = &tally.description {
                    check_description(
                        text,
                        &mdev_type.path().join("description"),
                        address,
                        warnings,
                    );
                }
            }
            if tally.device_api.is_none() {
                tally.device_api = warnings.ok(address, mdev_type.device_api());
            }
            let available = match mdev_type.available_instances() {
                Ok(Some(n)) => n,
                Ok(None) => {
                    warnings.push(
                        address,
                        &sysfs::missing(&mdev_type.path().join("available_instances")),
                    );
                    0
                }
                Err(err) => {
                    warnings.push(address, &err);
                    0
                }
            };
            tally.offered = tally.offered.saturating_add(available);
            tally.in_use = tally.in_use.saturating_add(count);
        }
        for mdev in warnings.list(address, devices) {
            self.vgpus.push(Vgpu {
                placement: None,
                id: VgpuHandle::Mdev(mdev.uuid),
                type_id: mdev.type_id,
                parent: address,
            });
        }
    }

    fn finish(mut self) -> (Vec<VgpuType>, Vec<Vgpu>) {
        self.vgpus.sort_by_key(|v| (v.parent, v.id));
        (sorted_types(self.tallies), self.vgpus)
    }
}

fn nvidia_types(
    pf: PciAddress,
    vfs: Vec<(PciAddress, NvidiaRead)>,
    warnings: &mut Warnings,
) -> (Vec<VgpuType>, Vec<Vgpu>) {
    let mut tallies: BTreeMap<String, TypeTally> = BTreeMap::new();
    let mut vgpus = Vec::new();
    for (address, vf) in vfs {
        match warnings.ok(address, vf.current) {
            Some(current) => {
                let id = current.to_string();
                tallies.entry(id.clone()).or_default().in_use += 1;
                vgpus.push(Vgpu {
                    placement: None,
                    id: VgpuHandle::Vf(address),
                    type_id: id,
                    parent: pf,
                });
            }
            None => {
                for creatable in warnings.list(address, vf.creatable) {
                    let tally = tallies.entry(creatable.id.to_string()).or_default();
                    tally.name.get_or_insert(creatable.name);
                    tally.offered += 1;
                }
            }
        }
    }
    (sorted_types(tallies), vgpus)
}

/// Names the types sysfs left unnamed (a vendor-VFIO type in use on every VF it can be on:
/// no free VF lists it) from the built-in catalog, by type id, interface and GPU model.
fn name_from_catalog(types: &mut [VgpuType], backend: Backend, model: Option<&str>) {
    let Some(interface) = catalog::interface_of(backend) else {
        return;
    };
    for ty in types.iter_mut().filter(|t| t.name.is_none()) {
        if let Some(row) = catalog::by_id(&ty.id, interface, model) {
            set_name(ty, row.name.clone(), NameSource::Catalog);
        }
    }
}

/// A plain SR-IOV GPU's VFs as vGPUs of type [`PLAIN_VF_TYPE`](crate::model::PLAIN_VF_TYPE):
/// each VF on a passthrough driver is one given out, each other VF one that can be. The type's
/// frame buffer is the VFs' local memory where every VF has the same quota.
fn plain_vf_type(pf: PciAddress, vfs: &mut [Vf]) -> (Vec<VgpuType>, Vec<Vgpu>) {
    if vfs.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut vgpus = Vec::new();
    for vf in vfs.iter_mut() {
        if vf
            .driver
            .as_deref()
            .is_some_and(crate::host::driver::is_passthrough_driver)
        {
            vf.vgpu_type = Some(crate::model::PLAIN_VF_TYPE.to_owned());
            vgpus.push(Vgpu {
                placement: None,
                id: VgpuHandle::Vf(vf.address),
                type_id: crate::model::PLAIN_VF_TYPE.to_owned(),
                parent: pf,
            });
        }
    }
    let in_use = u32::try_from(vgpus.len()).unwrap_or(u32::MAX);
    let total = u32::try_from(vfs.len()).unwrap_or(u32::MAX);
    let first = vfs[0].memory_mib;
    let framebuffer_mib = first.filter(|_| vfs.iter().all(|vf| vf.memory_mib == first));
    let mut ty = VgpuType {
        placements: None,
        placement_size: None,
        id: crate::model::PLAIN_VF_TYPE.to_owned(),
        name: None,
        name_source: None,
        framebuffer_mib,
        max_instances: Some(total),
        available: 0,
        limit: None,
        in_use,
        device_api: Some("vfio-pci".to_owned()),
        description: None,
        mig: None,
        offered: total - in_use,
    };
    ty.recount();
    (vec![ty], vgpus)
}
