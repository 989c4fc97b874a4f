//! A PCI function as sysfs shows it: `sys/bus/pci/devices/<addr>/`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Object, Result};
use crate::host::paths::HostPaths;
use crate::host::sysfs::{self, SysDir, parse_class, parse_hex_u16};
use crate::model::pci::{PciAddress, SriovCapability};

/// A handle on one PCI function's sysfs directory. Reading through it never caches: each call
/// asks the kernel again.
#[derive(Debug, Clone)]
pub(crate) struct PciDevice {
    address: PciAddress,
    dir: SysDir,
}

fn parse_u32(text: &str) -> Option<u32> {
    text.parse().ok()
}

impl PciDevice {
    /// The function at `address` on the host at `paths`.
    pub(crate) fn new(paths: &HostPaths, address: PciAddress) -> Self {
        Self {
            address,
            dir: SysDir::new(paths.pci_device(&address)),
        }
    }

    /// The function at `address` in `devices`, the device list (`sys/bus/pci/devices`), reached
    /// from it when it is held open.
    pub(crate) fn listed(devices: &SysDir, address: PciAddress) -> Self {
        Self {
            address,
            dir: devices.join(&address.to_string()),
        }
    }

    /// The same function with its directory held open, for a caller about to read many of
    /// its files ([`SysDir::held_open`]).
    pub(crate) fn held_open(self) -> Self {
        Self {
            address: self.address,
            dir: self.dir.held_open(),
        }
    }

    /// Its directory.
    pub(crate) fn dir(&self) -> &SysDir {
        &self.dir
    }

    /// The function at `address`, which must exist ([`Error::NotFound`] otherwise), with its
    /// directory held open ([`Self::held_open`]): for a caller about to read its files while
    /// it stays (a driver change keeps the directory; disabling a VF does not).
    pub(crate) fn existing(paths: &HostPaths, address: PciAddress) -> Result<Self> {
        let device = Self::new(paths, address);
        match device.dir.clone().opened()? {
            Some(dir) => Ok(Self { address, dir }),
            None => Err(Error::NotFound {
                what: Object::PciDevice,
                id: address.to_string(),
                path: device.dir.path().to_path_buf(),
            }),
        }
    }

    /// Its address.
    pub(crate) fn address(&self) -> PciAddress {
        self.address
    }

    /// Its sysfs directory (`sys/bus/pci/devices/<addr>`, a link into `sys/devices`).
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Whether its directory exists; a dangling link does not.
    pub(crate) fn exists(&self) -> bool {
        self.dir.exists()
    }

    /// `vendor`.
    pub(crate) fn vendor_id(&self) -> Result<Option<u16>> {
        self.dir
            .read_parsed("vendor", "a hex id such as 0x10de", parse_hex_u16)
    }

    /// `device`.
    pub(crate) fn device_id(&self) -> Result<Option<u16>> {
        self.dir
            .read_parsed("device", "a hex id such as 0x26b9", parse_hex_u16)
    }

    /// `subsystem_vendor`.
    pub(crate) fn subsystem_vendor_id(&self) -> Result<Option<u16>> {
        self.dir
            .read_parsed("subsystem_vendor", "a hex id", parse_hex_u16)
    }

    /// `subsystem_device`.
    pub(crate) fn subsystem_device_id(&self) -> Result<Option<u16>> {
        self.dir
            .read_parsed("subsystem_device", "a hex id", parse_hex_u16)
    }

    /// `class`: the 24-bit class code.
    pub(crate) fn class(&self) -> Result<Option<u32>> {
        self.dir
            .read_parsed("class", "a class code such as 0x030200", parse_class)
    }

    /// The bound driver's name; `None` when unbound.
    pub(crate) fn driver(&self) -> Result<Option<String>> {
        self.dir.link_name("driver")
    }

    /// `numa_node`; `None` when absent or `-1` (unknown).
    pub(crate) fn numa_node(&self) -> Result<Option<u32>> {
        let node = self
            .dir
            .read_parsed("numa_node", "a NUMA node (-1 or more)", |t| {
                t.parse::<i64>().ok().filter(|n| *n >= -1)
            })?;
        Ok(node.and_then(|n| u32::try_from(n).ok()))
    }

    /// The IOMMU group number; `None` without an IOMMU.
    pub(crate) fn iommu_group(&self) -> Result<Option<u32>> {
        match self.dir.link_name("iommu_group")? {
            None => Ok(None),
            Some(name) => name.parse().map(Some).map_err(|_| {
                sysfs::parse_error(
                    &self.path().join("iommu_group"),
                    &name,
                    "a link to an IOMMU group number",
                )
            }),
        }
    }

    /// The physical function, when this is a VF (`physfn`).
    pub(crate) fn physfn(&self) -> Result<Option<PciAddress>> {
        self.link_address("physfn")
    }

    fn link_address(&self, name: &str) -> Result<Option<PciAddress>> {
        match self.dir.link_name(name)? {
            None => Ok(None),
            Some(target) => target.parse().map(Some).map_err(|_| {
                sysfs::parse_error(&self.path().join(name), &target, "a link to a PCI device")
            }),
        }
    }

    /// The SR-IOV capability; `None` when the device has no `sriov_totalvfs`.
    pub(crate) fn sriov(&self) -> Result<Option<SriovCapability>> {
        let attr = |name: &str, expected, parse| self.dir.read_parsed(name, expected, parse);
        let Some(total_vfs) = attr("sriov_totalvfs", "a VF count", parse_u32)? else {
            return Ok(None);
        };
        Ok(Some(SriovCapability {
            total_vfs,
            num_vfs: attr("sriov_numvfs", "a VF count", parse_u32)?.unwrap_or(0),
            offset: attr("sriov_offset", "a number", parse_u32)?,
            stride: attr("sriov_stride", "a number", parse_u32)?,
            vf_device_id: self.dir.read_parsed(
                "sriov_vf_device",
                "a hex device id",
                parse_hex_u16,
            )?,
            drivers_autoprobe: self
                .dir
                .read_parsed("sriov_drivers_autoprobe", "0 or 1", |t| match t {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                })?,
        }))
    }

    /// The PF's SR-IOV provisioning directory, as Intel's SR-IOV drivers (out-of-tree `i915`,
    /// `xe`) publish it: `drm/card<N>/iov`, with `pf/` and one `vf<M>/` per VF; `None` when
    /// the PF's driver provisions no VF resources.
    pub(crate) fn iov_dir(&self) -> Result<Option<PathBuf>> {
        for card in self.dir.join("drm").names()? {
            if !card.starts_with("card") {
                continue;
            }
            let iov = format!("drm/{card}/iov");
            if self.dir.is_dir(&iov) {
                return Ok(Some(self.path().join(iov)));
            }
        }
        Ok(None)
    }

    /// `name` under the first GT of `function` (`pf`, `vf<M>`) in [`Self::iov_dir`]: `gt/` on
    /// single-tile GPUs, `gt0/` on multi-tile ones (intel-gpu-i915-backports,
    /// `gt/iov/intel_iov_sysfs.c`); `None` when neither has it.
    fn iov_attr(&self, function: &str, name: &str) -> Result<Option<PathBuf>> {
        Ok(self
            .iov_dir()?
            .and_then(|iov| Self::iov_attr_in(&iov, function, name)))
    }

    /// [`Self::iov_attr`] in the provisioning directory `iov` ([`Self::iov_dir`]) found
    /// already.
    fn iov_attr_in(iov: &Path, function: &str, name: &str) -> Option<PathBuf> {
        ["gt", "gt0"]
            .into_iter()
            .map(|gt| iov.join(function).join(gt).join(name))
            .find(|path| sysfs::exists(path))
    }

    /// The local-memory quota file of this PF's VF `m` (from 1): `iov/vf<m>/gt*/lmem_quota`,
    /// in bytes; `None` when the PF has none.
    pub(crate) fn lmem_quota_path(&self, m: usize) -> Result<Option<PathBuf>> {
        self.iov_attr(&format!("vf{m}"), "lmem_quota")
    }

    /// The local-memory quota of this PF's VF `m` (from 1) in bytes; `None` without quotas.
    pub(crate) fn lmem_quota(&self, m: usize) -> Result<Option<u64>> {
        match self.iov_dir()? {
            None => Ok(None),
            Some(iov) => Self::lmem_quota_in(&iov, m),
        }
    }

    /// [`Self::lmem_quota`] in the provisioning directory `iov` ([`Self::iov_dir`]) found
    /// already: for a caller reading every VF's, which looks `iov` up once.
    pub(crate) fn lmem_quota_in(iov: &Path, m: usize) -> Result<Option<u64>> {
        match Self::iov_attr_in(iov, &format!("vf{m}"), "lmem_quota") {
            None => Ok(None),
            Some(path) => sysfs::read_parsed(&path, "a byte count", |t| t.parse().ok()),
        }
    }

    /// The local memory this PF's driver can give its VFs, in bytes: what the first `vfs` VFs'
    /// quotas hold and what is left for one more (`iov/pf/gt*/available/lmem_max_quota`: free
    /// local memory less the PF's spare). `None` when the driver publishes no such total, or a
    /// VF has no quota.
    pub(crate) fn lmem_total(&self, vfs: usize) -> Result<Option<u64>> {
        let Some(iov) = self.iov_dir()? else {
            return Ok(None);
        };
        let Some(path) = Self::iov_attr_in(&iov, "pf", "available/lmem_max_quota") else {
            return Ok(None);
        };
        let Some(mut total) = sysfs::read_parsed(&path, "a byte count", |t| t.parse::<u64>().ok())?
        else {
            return Ok(None);
        };
        for m in 1..=vfs {
            let Some(quota) = Self::lmem_quota_in(&iov, m)? else {
                return Ok(None);
            };
            total = total.saturating_add(quota);
        }
        Ok(Some(total))
    }

    /// The enabled VFs, in `virtfnN` order, named as `devices`, the device list, names them.
    /// Each is reached from this PF's parent directory, held open: the kernel puts a VF's
    /// directory beside its PF's (`pci_iov_add_virtfn` in `drivers/pci/iov.c` gives it the
    /// PF's parent). That is one lookup per VF, where the device list's link leads through
    /// the whole `sys/devices/pci…` path.
    pub(crate) fn virtfn_devices(&self, devices: &SysDir) -> Result<Vec<PciDevice>> {
        Ok(self.beside(&self.virtfns()?, devices))
    }

    /// The functions at `addresses`, this PF's VFs, reached from its parent directory held
    /// open and named as `devices` names them ([`Self::virtfn_devices`]).
    ///
    /// Where the platform put the first VF elsewhere (on s390 and pseries the platform
    /// enumerates VFs and `pci_iov_sysfs_link` only links them), every VF is reached through
    /// the device list instead.
    pub(crate) fn beside(&self, addresses: &[PciAddress], devices: &SysDir) -> Vec<PciDevice> {
        let parent = self.dir.join("..").held_open();
        let is_beside = addresses
            .first()
            .is_none_or(|first| parent.is_dir(&first.to_string()));
        addresses
            .iter()
            .map(|&address| {
                let name = address.to_string();
                let dir = match is_beside {
                    true => parent.join_as(&name, devices.path().join(&name)),
                    false => devices.join(&name),
                };
                Self { address, dir }
            })
            .collect()
    }

    /// The enabled VFs, in `virtfnN` order.
    pub(crate) fn virtfns(&self) -> Result<Vec<PciAddress>> {
        let mut indexed = Vec::new();
        for name in self.dir.names()? {
            let Some(index) = name
                .strip_prefix("virtfn")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(address) = self.link_address(&name)? {
                indexed.push((index, address));
            }
        }
        indexed.sort();
        Ok(indexed.into_iter().map(|(_, address)| address).collect())
    }
}

/// The PCI function `text` names on the host at `paths`: a full address (`0000:3b:00.0`), or
/// the short `bus:device.function` form (`3b:00.0`) when exactly one function of the host has
/// it. An address that is not on the host is returned as it is, for the caller to say so.
pub fn resolve_address(paths: &HostPaths, text: &str) -> Result<PciAddress> {
    let short = match text.parse::<PciAddress>() {
        Ok(address) => return Ok(address),
        Err(crate::model::pci::PciAddressError::NoDomain(short)) => short.to_ascii_lowercase(),
        Err(_) => return Err(Error::bad_name(text, "a PCI address, dddd:bb:dd.f")),
    };
    let devices = paths.pci_devices();
    let matches: Vec<PciAddress> = crate::host::sysfs::dir_names(&devices)?
        .iter()
        .filter_map(|name| name.parse::<PciAddress>().ok())
        .filter(|a| {
            a.to_string()
                .split_once(':')
                .is_some_and(|(_, rest)| rest == short)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Error::NotFound {
            what: Object::PciDevice,
            id: text.to_owned(),
            path: devices,
        }),
        many => Err(Error::Ambiguous {
            name: text.to_owned(),
            candidates: many.to_vec(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::error::{Error, HostError};
    use vgpu_testing::{FakeHost, PciSpec, addr};

    /// Two functions with the short address `03:00.0` in two domains, one `3b:00.0`.
    fn two_domains() -> (FakeHost, HostPaths) {
        let host = FakeHost::new().unwrap();
        for a in ["0000:03:00.0", "0001:03:00.0", "0000:3b:00.0"] {
            host.pci(&PciSpec::new(addr(a), 0x10de, 0x1eb8, 0x030200))
                .unwrap();
        }
        let paths = HostPaths::new(host.root());
        (host, paths)
    }

    #[test]
    fn resolve_address_short_form_of_one_function_is_it() {
        let (_host, paths) = two_domains();
        assert_eq!(
            resolve_address(&paths, "3B:00.0").unwrap(),
            addr("0000:3b:00.0")
        );
    }

    #[test]
    fn resolve_address_short_form_in_two_domains_is_ambiguous_naming_both() {
        let (_host, paths) = two_domains();
        let err = resolve_address(&paths, "03:00.0").unwrap_err();
        assert!(
            matches!(&err, Error::Ambiguous { name, candidates }
                if name == "03:00.0"
                    && *candidates == vec![addr("0000:03:00.0"), addr("0001:03:00.0")]),
            "{err:?}"
        );
    }

    #[test]
    fn resolve_address_short_form_of_no_function_is_not_found_with_the_path() {
        let (_host, paths) = two_domains();
        let err = resolve_address(&paths, "99:00.0").unwrap_err();
        assert!(
            matches!(&err, Error::NotFound { what: Object::PciDevice, path, .. }
                if *path == paths.pci_devices()),
            "{err:?}"
        );
    }

    #[test]
    fn resolve_address_of_no_address_is_bad_input() {
        let (_host, paths) = two_domains();
        let err = resolve_address(&paths, "GPU-1").unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::BadInput);
    }

    /// VFs beside their PF are read there; a VF the platform put elsewhere (linked by
    /// `pci_iov_sysfs_link`, as on s390) is read through the device list.
    #[test]
    fn virtfn_devices_beside_the_pf_or_elsewhere_are_read() {
        let host = FakeHost::new().unwrap();
        let pf = addr("0000:41:00.0");
        host.pci(&PciSpec::new(pf, 0x10de, 0x26b9, 0x030200).sriov(4, 0x26b9))
            .unwrap();
        let vf = addr("0000:41:00.4");
        host.vf(pf, 0, &PciSpec::new(vf, 0x10de, 0x26b9, 0x030200))
            .unwrap();
        let paths = HostPaths::new(host.root());
        let devices = SysDir::new(paths.pci_devices());
        let read = || -> Vec<Option<u16>> {
            PciDevice::new(&paths, pf)
                .virtfn_devices(&devices)
                .unwrap()
                .iter()
                .map(|d| d.vendor_id().unwrap())
                .collect()
        };
        assert_eq!(read(), [Some(0x10de)]);

        let beside = host.device_dir(vf);
        let elsewhere = Path::new("sys/devices/platform/vfs").join(vf.to_string());
        std::fs::create_dir_all(host.root().join("sys/devices/platform/vfs")).unwrap();
        std::fs::rename(host.root().join(&beside), host.root().join(&elsewhere)).unwrap();
        host.remove(Path::new("sys/bus/pci/devices").join(vf.to_string()))
            .unwrap();
        host.link(
            Path::new("sys/bus/pci/devices").join(vf.to_string()),
            &elsewhere,
        )
        .unwrap();
        assert_eq!(read(), [Some(0x10de)]);
    }

    /// A Flex 170 PF whose `drm/card0/iov` has `pf/<gt>` and `vf1/<gt>`, as i915 lays it out
    /// with `gt` ("gt" on single-tile GPUs, "gt0" on multi-tile ones).
    fn flex(gt: &str) -> (FakeHost, PciDevice) {
        let host = FakeHost::new().unwrap();
        let pf = addr("0000:4d:00.0");
        host.pci(&PciSpec::new(pf, 0x8086, 0x56c0, 0x038000))
            .unwrap();
        let iov = host.device_dir(pf).join("drm/card0/iov");
        host.write(iov.join(format!("vf1/{gt}/lmem_quota")), "4294967296\n")
            .unwrap();
        host.write(
            iov.join(format!("pf/{gt}/available/lmem_max_quota")),
            "2147483648\n",
        )
        .unwrap();
        let device = PciDevice::new(&HostPaths::new(host.root()), pf);
        (host, device)
    }

    #[test]
    fn lmem_quota_single_tile_gt_is_read() {
        let (_host, device) = flex("gt");
        assert_eq!(device.lmem_quota(1).unwrap(), Some(4 << 30));
    }

    #[test]
    fn lmem_quota_multi_tile_gt0_is_read() {
        let (_host, device) = flex("gt0");
        assert_eq!(device.lmem_quota(1).unwrap(), Some(4 << 30));
    }

    #[test]
    fn lmem_total_adds_quotas_and_what_is_left() {
        let (_host, device) = flex("gt");
        assert_eq!(device.lmem_total(1).unwrap(), Some(6 << 30));
    }

    #[test]
    fn lmem_total_with_a_vf_lacking_a_quota_is_none() {
        let (_host, device) = flex("gt");
        assert_eq!(device.lmem_total(2).unwrap(), None);
    }

    #[test]
    fn lmem_total_without_iov_is_none() {
        let host = FakeHost::new().unwrap();
        let pf = addr("0000:4d:00.0");
        host.pci(&PciSpec::new(pf, 0x8086, 0x56c0, 0x038000))
            .unwrap();
        let device = PciDevice::new(&HostPaths::new(host.root()), pf);
        assert_eq!(device.lmem_total(0).unwrap(), None);
    }

    #[test]
    fn lmem_quota_not_a_number_is_a_parse_error() {
        let (host, device) = flex("gt");
        let path = device.path().join("drm/card0/iov/vf1/gt/lmem_quota");
        host.write(
            host.device_dir(addr("0000:4d:00.0"))
                .join("drm/card0/iov/vf1/gt/lmem_quota"),
            "lots\n",
        )
        .unwrap();
        assert!(matches!(
            device.lmem_quota(1),
            Err(Error::Host(HostError::Parse { path: p, .. })) if p == path
        ));
    }
}
