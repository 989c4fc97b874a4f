//! A simulated KVM host whose `sys/`, `proc/` and `dev/` behave like the kernel's, served
//! over FUSE, so that `vgpu`, `mdevctl` and shell scripts run unchanged against it.
//!
//! # The kernel model
//!
//! This crate is an independent model of the kernel interfaces described in
//! `docs/host-interfaces.md` (PCI and SR-IOV, mdev, NVIDIA, Intel, IOMMU; each with the kernel
//! or vendor document it follows); it shares no code with `vgpu-core`, so it can catch that
//! crate's mistakes.
//!
//! * **PCI** (`drivers/pci/pci-sysfs.c`, `drivers/base/bus.c`): every function has a directory
//!   under `sys/devices/pci<dddd>:<bb>/[<bridge>/]<addr>` with `vendor`, `device`,
//!   `subsystem_*`, `class` (`0x030200`), `numa_node`, `driver_override` (reads `(null)` when
//!   unset), `reset`, `reset_method`, `remove`, and relative links `driver`, `iommu_group`,
//!   `subsystem`; `sys/bus/pci/devices/<addr>` links to it. `drivers/<drv>/bind` answers
//!   `ENODEV` for an unknown device or one the driver does not match, then `EBUSY` when the
//!   device is bound, then the probe's errno: `ENODEV` when `pci_device_can_probe` refuses (a
//!   VF whose PF has `sriov_drivers_autoprobe` 0 and no `driver_override`), `EINVAL` from
//!   `vfio-pci` on a device without an IOMMU group. `unbind` answers `ENODEV` unless bound to
//!   that driver; `drivers_probe` binds the first matching driver that probes (only
//!   `driver_override` when set) and succeeds even when none does. Every number a store
//!   parses (`kstrtoul`, `kstrtou16`) answers `EINVAL` when it does not parse or overflows.
//!   `reset` takes `1` (`EINVAL` otherwise), `ENOTTY` once `reset_method` is emptied (an
//!   empty line; `default` restores the supported list, an unsupported method is `EINVAL`). `remove` /
//!   `rescan` hot-remove and restore (a restored function has no `driver_override`, its VFs
//!   disabled and `sriov_drivers_autoprobe` 1); an `unplug` (control interface) is physical
//!   and no rescan brings it back.
//! * **SR-IOV** (`sriov_numvfs_store`, `drivers/pci/iov.c`): `EINVAL` for what `kstrtou16`
//!   refuses (a non-number, or above 65535), `ERANGE` above `sriov_totalvfs`, equal value a
//!   no-op, `ENOENT` without a driver with `sriov_configure` (`pci-pf-stub`, `i915`, `xe`;
//!   not `nvidia`, nor `vfio-pci` without `enable_sriov`), `EBUSY` for non-zero while VFs
//!   exist. VFs sit beside their PF, at routing id `PF + offset + stride * i`, with
//!   `physfn`/`virtfnN` links, their own IOMMU groups, and are probed when
//!   `sriov_drivers_autoprobe` is 1. `vfio-pci`, `i915` and `xe` disable VFs when unbound
//!   from the PF; `pci-pf-stub` and `nvidia` leave them.
//! * **NVIDIA** (NVIDIA vGPU user guide, `sriov-manage`): the PF rejects `sriov_numvfs` while bound to `nvidia`
//!   (`ENOENT`); `sriov-manage`'s sequence works: write `1` to
//!   `proc/driver/nvidia/gpus/<bdf>/unbindLock` (reads back `1` only on an idle GPU), unbind,
//!   bind `pci-pf-stub`, write `sriov_totalvfs`, rebind `nvidia`. While the lock is held, no
//!   vGPU can be created on that GPU (`create` and `current_vgpu_type` answer `EBUSY`).
//!   Deviations, so that a client skipping a step fails: unbinding `nvidia` from a vGPU PF
//!   without the lock answers `EBUSY` (the real driver blocks until `nvidia-vgpu-mgr` lets
//!   go), and on `pci-pf-stub` such a PF takes only `0` or `sriov_totalvfs` (`EINVAL`; the
//!   kernel would enable any count, NVIDIA's vGPU manager supports only the full set).
//! * **mdev** (`drivers/vfio/mdev`): an mdev parent exists while its vendor driver is bound
//!   (legacy PF, VF of an mdev-on-VF GPU, GVT-g iGPU). `create` takes a 36-character UUID (one
//!   trailing character allowed; `EINVAL` otherwise), `EEXIST` for a duplicate anywhere,
//!   `EUSERS` (NVIDIA) or `ENOSPC` (GVT-g) when `available_instances` is 0. Capacity is per
//!   physical GPU: one NVIDIA type at a time (others read 0), VFs of an mdev-on-VF GPU read 0
//!   or 1; GVT-g mixes types within 512 MiB low / 3072 MiB high graphics memory and 28 fences.
//!   `remove` takes a number (`0` is a no-op).
//! * **NVIDIA vendor VFIO** (NVIDIA vGPU user guide, vendor-specific VFIO framework): VFs bound to `nvidia` have
//!   `nvidia/creatable_vgpu_types` (header, then `%-5d : %s` lines of the types creatable now;
//!   only the header when the card is full or the VF is in use), `current_vgpu_type` (an id
//!   creates, `0` destroys; `EPERM` when set and writing an id, or unset and writing `0`;
//!   `EINVAL` for an id not creatable now) and `vgpu_params` (`EBUSY` while a vGPU exists).
//! * **IOMMU**: `sys/firmware/acpi/tables/DMAR` or `IVRS`, `sys/class/iommu/dmar0` or `ivhd0`
//!   (`intel-iommu/ecap` bit 3 = interrupt remapping), `sys/kernel/iommu_groups/<n>/devices`;
//!   the `no-iommu` profile has none of them (so `vfio-pci` binds nothing there; its mdevs
//!   have no group either, where the kernel would give them an emulated one);
//!   `sys/module/vfio_pci`.
//! * **VFIO devices** (`Documentation/driver-api/vfio.rst`, `drivers/vfio/vfio_main.c`,
//!   `group.c`, `device_cdev.c`): a function bound to `vfio-pci` (or a `*vfio*pci` variant
//!   driver), an NVIDIA vendor-VFIO VF whose `current_vgpu_type` is not 0 (NVIDIA's driver
//!   registers it with VFIO) and an mdev are VFIO devices, when they have an IOMMU group.
//!   Each has `<device>/vfio-dev/vfio<N>/` (`dev` reads `511:<N>`, `uevent`, links `device`
//!   and `subsystem`), `sys/class/vfio-dev/vfio<N>` and `dev/vfio/devices/vfio<N>` (character
//!   device 511:N, mode 0600). `N` is the lowest free index when the device registers (bound
//!   to the driver, vGPU type set, mdev created) and is given back when it unregisters
//!   (unbound, type back to 0, mdev removed, VF disabled, function removed or unplugged). Every
//!   IOMMU group with a VFIO device has `dev/vfio/<group>` (character device 243:`<group>`,
//!   mode 0600; the kernel allocates the minor, the simulator uses the group number) and
//!   `sys/class/vfio/<group>` (`dev` reads `243:<group>`). `dev/vfio/vfio` (the container,
//!   10:196, mode 0666) is always there; `dev/vfio/devices/` only while a cdev is, as
//!   devtmpfs removes empty directories. To find the nodes of a PCI function `<bdf>` (or an
//!   mdev: `sys/bus/mdev/devices/<uuid>` instead of `sys/bus/pci/devices/<bdf>`): the group
//!   node is `dev/vfio/` + the last component of `sys/bus/pci/devices/<bdf>/iommu_group`, the
//!   cdev is `dev/vfio/devices/` + the one entry of `sys/bus/pci/devices/<bdf>/vfio-dev/`.
//! * **Processes** (`fs/proc/base.c`, `fs/proc/fd.c`): `proc/<pid>/comm` and
//!   `proc/<pid>/fd/<n>` (links whose target is what the process opened, as `/dev/vfio/42`)
//!   for the processes the control interface adds (`hold`, `drop`); `proc/` lists their pids.
//!   Looking one up after its process ended is `ENOENT`; reading a file opened before is
//!   `ESRCH`.
//!
//! Nothing is cached by the kernel (zero entry and attribute lifetimes, direct I/O): every read
//! sees the current state and every write returns the errno of that write. A store sees at
//! most 4096 bytes of one write and the writer a short count, as kernfs does. Writes to a file
//! whose device has gone answer `ENODEV`; opening a file for an access it lacks (write to a
//! read-only attribute) answers `EACCES`, as kernfs does.
//!
//! # Control interface
//!
//! `<root>/.vgpu-sim/control` takes commands (grammar in [`control`]): injected failures
//! (`fail-next 2 EBUSY */sriov_numvfs`), latency (`latency sriov-enable 1500`), hot-unplug
//! (`unplug 0000:3b:00.0`), processes holding files open (`hold 4242 qemu-system-x86
//! /dev/vfio/42`, `drop 4242`), `counters-reset`, `clear` (faults, latencies and processes).
//! Reading it shows the pending faults and latencies. `<root>/.vgpu-sim/counters` reads
//! `lookup N\ngetattr N\n...`: the FUSE operations served outside `.vgpu-sim/`. [`SimHost`]
//! has the same operations as methods ([`SimHost::hold`], [`SimHost::drop_process`], ...).
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> Result<(), vgpu_sim::SimError> {
//! let host = vgpu_sim::SimHost::mount(vgpu_sim::Profile::builtin("mixed")?)?;
//! let numvfs = host.root().join("sys/bus/pci/devices/0001:03:00.0/sriov_numvfs");
//! std::fs::write(&numvfs, "4").expect("i915 configures SR-IOV");
//! # Ok(())
//! # }
//! ```
//!
//! Persistent stores (`/etc/mdevctl.d`, libvirt) are not simulated: pass your own directories.

pub mod control;
mod error;
mod fs;
mod host;
mod kernel;
pub mod peer;
mod process;
pub mod profile;
mod tree;
mod vfio;

pub use control::{Counters, FsOp, Hold, KernelOp, LatencyOp};
pub use error::SimError;
pub use host::{SimHost, fuse_for_test, require_fuse};
pub use profile::{PciAddr, Profile};
