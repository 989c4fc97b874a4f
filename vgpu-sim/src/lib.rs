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
//!   `subsystem_*`, `class` (`0x030200`), `revision`, `numa_node`, `driver_override` (reads
//!   `(null)` when unset), `reset`, `reset_method`, `remove`, `uevent` (`pci_uevent`:
//!   `DRIVER`, `PCI_CLASS`, `PCI_ID`, `PCI_SUBSYS_ID`, `PCI_SLOT_NAME`, `MODALIAS`), `config`
//!   (the binary configuration space libvirt's `virpci.c` parses: header, PCI Express
//!   capability, a PF's SR-IOV extended capability; 64 bytes to a reader other than root and
//!   the mount owner, as `pci_read_config` gives readers without `CAP_SYS_ADMIN`; layout in
//!   `tree/config.rs`), and relative links `driver`, `iommu_group`, `subsystem`;
//!   `sys/bus/pci/devices/<addr>` links to it. The root bus directory has an empty `uevent`. `drivers/<drv>/bind` answers
//!   `ENODEV` for an unknown device or one the driver does not match, then `EBUSY` when the
//!   device is bound, then the probe's errno: `ENODEV` when `pci_device_can_probe` refuses (a
//!   VF whose PF has `sriov_drivers_autoprobe` 0 and no `driver_override`), from `vfio-pci`
//!   `EBUSY` on a PF with VFs enabled ("Cannot bind to PF with SR-IOV enabled"), then `EINVAL`
//!   on a device without an IOMMU group. `unbind` answers `ENODEV` unless bound to that driver;
//!   `drivers_probe` binds the first matching driver that probes (drivers in name order; only
//!   `driver_override` when set) and succeeds even when none does: read `driver` back.
//!   `new_id` (`new_id_store`) takes 2 to 7 hex fields (`vendor device [subvendor subdevice
//!   [class mask [driver_data]]]`, as `sscanf("%x ...")` reads them; fewer than 2, or a
//!   `driver_data` other than 0: `EINVAL`), answers `EEXIST` when the driver already matches
//!   those ids (unless all 7 are given), adds a dynamic id and binds every unbound function it
//!   matches, VFs included; `remove_id` removes the first matching dynamic id (`ENODEV` when
//!   none), leaving bound devices bound. `driver_override` keeps the bytes of a write up to its
//!   first NUL, then up to its first newline (a newline first, or nothing, clears it; any other
//!   bytes are kept). `sriov_drivers_autoprobe` parses with `kstrtobool` (first character
//!   `y`/`t`/`1` or `n`/`f`/`0`, or `on`/`off`; else `EINVAL`); the bus's `drivers_autoprobe`
//!   is off only when the first byte written is `0` and gates nothing here (hot-added PCI
//!   functions are probed by `pci_bus_add_device` regardless). Every number a store parses
//!   (`kstrtoul`, `kstrtou16`) answers `EINVAL` when it does not parse or overflows.
//!   `reset` takes `1` (`EINVAL` otherwise), `ENOTTY` once `reset_method` is emptied (an
//!   empty line; `default` restores the supported list, an unsupported method is `EINVAL`).
//!   `remove` / `rescan` hot-remove and restore (a restored function has no `driver_override`,
//!   its VFs disabled and `sriov_drivers_autoprobe` 1); an `unplug` (control interface) is
//!   physical: it waits for no holder and no rescan brings it back.
//! * **SR-IOV** (`sriov_numvfs_store`, `drivers/pci/iov.c`): `EINVAL` for what `kstrtou16`
//!   refuses (a non-number, or above 65535), `ERANGE` above `sriov_totalvfs`, equal value a
//!   no-op, `ENOENT` without a driver with `sriov_configure` (`pci-pf-stub`, `xe`, and `i915`
//!   only when the profile names it in `out_of_tree_drivers`: upstream i915 has none; not
//!   `nvidia`, nor `vfio-pci` without `enable_sriov`), `EBUSY` for non-zero while VFs exist.
//!   A PF's own driver (its profile `driver`) may lower `sriov_totalvfs` while bound
//!   (`driver_max_vfs`; back to the device's maximum on unbind) and enable fewer VFs than
//!   asked (`driver_enables_at_most`; the write succeeds). VFs sit beside their PF, at routing
//!   id `PF + offset + stride * i`, with `physfn`/`virtfnN` links, their own IOMMU groups, and
//!   are probed when `sriov_drivers_autoprobe` is 1: at once, or, with an `async-probe`
//!   latency (profile `async_probe_ms`), that long after the write returned (the VF is listed
//!   with no driver, and NVIDIA's `nvidia/` is not there, until then). `vfio-pci`, `i915` and
//!   `xe` disable VFs when unbound from the PF; `pci-pf-stub` and `nvidia` leave them.
//! * **NVIDIA** (NVIDIA vGPU user guide, `sriov-manage`): the PF rejects `sriov_numvfs` while bound to `nvidia`
//!   (`ENOENT`); `sriov-manage`'s sequence works: write `1` to
//!   `proc/driver/nvidia/gpus/<bdf>/unbindLock` (reads back `1` only on an idle GPU), unbind,
//!   bind `pci-pf-stub` (`new_id`, as the script does, or `driver_override`), write
//!   `sriov_totalvfs`, unbind the stub, `remove_id`, rebind `nvidia` and every VF. While the
//!   lock is held, no vGPU can be created on that GPU (`create` and `current_vgpu_type` answer
//!   `EBUSY`). Unbinding (or removing) a vGPU PF from `nvidia` without the lock waits until the
//!   lock is taken (standing for NVIDIA's vGPU manager letting go of the GPU; see *Writes that
//!   wait*). Deviation, so that a client writing a partial count fails: on `pci-pf-stub` such a
//!   PF takes only `0` or `sriov_totalvfs` (`EINVAL`; the kernel would enable any count,
//!   NVIDIA's vGPU manager supports only the full set). `proc/driver/nvidia/params` lists the
//!   module's parameters, one `Name: value` line each, with `RegistryDwords` and
//!   `RegistryDwordsPerDevice` quoted (empty unless the control line `nvidia-registry` sets
//!   them). Each vendor-VFIO GPU has a vGPU scheduler (best effort at each boot and driver
//!   bind; `vgpu-scheduler` sets it while the GPU holds no vGPU), published in its state file.
//! * **mdev** (`drivers/vfio/mdev`): an mdev parent exists while its vendor driver is bound
//!   (legacy PF, VF of an mdev-on-VF GPU, GVT-g iGPU). `create` takes a 36-character UUID (one
//!   trailing character allowed; `EINVAL` otherwise), `EEXIST` for a duplicate anywhere,
//!   `EUSERS` (NVIDIA) or `ENOSPC` (GVT-g) when `available_instances` is 0. Capacity is per
//!   physical GPU: one NVIDIA type at a time (others read 0), VFs of an mdev-on-VF GPU read 0
//!   or 1; GVT-g mixes types within 512 MiB low / 3072 MiB high graphics memory and 28 fences.
//!   `remove` takes a number (`0` is a no-op). An mdev's `uevent` reads `DRIVER=<its mdev
//!   driver>` (`dev_uevent`; the mdev bus adds no variable). A type has `name` when the vendor driver gives
//!   one (NVIDIA) or the kernel is 6.1 or later (the mdev core's, `GVTg_V5_4` for GVT-g); the
//!   profile's `kernel` (else the release in its command line) decides.
//! * **NVIDIA vendor VFIO** (NVIDIA vGPU user guide, vendor-specific VFIO framework): VFs bound to `nvidia` have
//!   `nvidia/creatable_vgpu_types` (header, then `%-5d : %s` lines of the types creatable now;
//!   only the header when the card is full or the VF is in use), `current_vgpu_type` (an id
//!   creates, `0` destroys; `EPERM` when set and writing an id, or unset and writing `0`;
//!   `EINVAL` for an id not creatable now) and `vgpu_params` (`EBUSY` while a vGPU exists).
//!   `gpu_instance_id` and `placement_id` read `ENXIO` until written and after the vGPU is
//!   destroyed, and refuse writes (`EBUSY`) while the VF holds one. A GPU with a profile
//!   `mig` section in MIG mode (`h200-mig`) lists only MIG-backed types (catalog rows with
//!   `gpu_instance_profile`), each while a GPU instance of its profile runs no vGPU, types of
//!   different profiles side by side; a VF takes one only after `gpu_instance_id` names a free
//!   instance of its profile (`EINVAL` for none or another profile, `EBUSY` for one in use;
//!   `gpu_instance_id` itself takes only an instance of the GPU, `EINVAL` otherwise). Out of
//!   MIG mode only time-sliced types are listed.
//! * **NVIDIA mixed-size mode** (vGPU user guide, vGPU 17, "vGPU placements", Appendix B;
//!   `kernel/placement.rs`): an L40S, L4, A10 or H100 80GB (by its profile `catalog`) is in
//!   `equal` mode at each boot and after leaving `nvidia`; the control line `size-mode`
//!   switches it while it holds no vGPU. Each vGPU on such a GPU takes slots `[id, id +
//!   size)`, `size` its type's frame buffer in GiB, at one of its type's supported ids (the
//!   guide's tables in mixed mode, written as data; `k * size` in equal mode). A VF's
//!   `nvidia/vgpu_params` (and an NVIDIA mdev's `nvidia/vgpu_params`) takes `key=value`
//!   pairs (`EINVAL` otherwise); `vgpu-placement-id=N` is taken when `current_vgpu_type`
//!   creates the vGPU: `EINVAL` when `N` is not a supported id of the type in the GPU's
//!   mode, `ENOSPC` when its slots are another vGPU's (the simulator's choice: NVIDIA does
//!   not document the errno); without it the lowest free supported id. An mdev takes the
//!   lowest free id when created, and its `vgpu_params` moves it at once (same errnos;
//!   `EBUSY` while a simulated process holds its VFIO device), as the simulator has no mdev
//!   start. In mixed mode types of any size share the GPU, up to 32 vGPUs and its VFs; a type
//!   is creatable (and `available_instances` 1) while one of its ids is free. The state
//!   file publishes the mode, the region, each type's ids and each vGPU's placement.
//! * **NVIDIA MIG** (MIG user guide, `nvidia-smi mig -lgip`, `-lgipp`): the simulated driver
//!   owns MIG mode and the GPU instances, each with an id, a profile and a placement (first
//!   memory slice and size). They start as the profile's `mig` section has them. The
//!   control file's MIG lines change them, as NVML does through the driver; a new instance
//!   gets the lowest free id from 1. The GPU-instance profiles and their placements come
//!   from the catalog (`[[gpu_instance_profile]]`). An instance may not overlap another or
//!   pass its profile's instance count (`ENOSPC`). `.vgpu-sim/nvidia/<addr>.json` publishes
//!   each vendor-VFIO GPU's driver state read-only: name, MIG mode, profiles, instances and
//!   the supported types (layout in `tree/nvidia.rs`). The test NVML library reads it.
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
//! * **CPUs and NUMA** (`drivers/base/cpu.c`, `drivers/base/topology.c`, `drivers/base/node.c`):
//!   `sys/devices/system/cpu/{online,possible,present,offline,kernel_max}`, `cpu<N>/` with
//!   `online` (not on CPU 0), `topology/` (one package, die and cluster, one thread per core,
//!   core id = CPU number, as `proc/cpuinfo`), a `node<M>` link and `uevent` (`MODALIAS`);
//!   `sys/devices/system/node/node<M>/` with `cpulist`, `cpumap` and `cpu<N>` links. What
//!   libvirt's `virhostcpu.c` reads.
//! * **Processes** (`fs/proc/base.c`, `fs/proc/fd.c`): `proc/<pid>/comm` and
//!   `proc/<pid>/fd/<n>` (links whose target is what the process opened, as `/dev/vfio/42`)
//!   for the processes the control interface adds (`hold`, `drop`); `proc/` lists their pids.
//!   Looking one up after its process ended is `ENOENT`; reading a file opened before is
//!   `ESRCH`.
//! * **Writes that wait** (`vfio_unregister_group_dev`, NVIDIA's `nv_pci_remove`): a store
//!   that would unregister a VFIO device (unbind its function or an mdev parent, remove an
//!   mdev or a function, remove VFs through `sriov_numvfs`, clear a vendor VF's
//!   `current_vgpu_type`) while a simulated process holds the device's cdev or its IOMMU
//!   group's node (a group counts as holding each of its VFIO devices), or that would take a
//!   vGPU PF from `nvidia` without its `unbindLock`, does not fail: the FUSE request waits
//!   until nothing blocks it, then the store is carried out. Reading `.vgpu-sim/control` lists
//!   the waiting writes (`# waiting <path>: <why>`); the other requests are served meanwhile.
//!   Deviations: a writer killed while waiting gets `EINTR` and its store is dropped (the kernel
//!   would keep it in an uninterruptible wait and carry the store out once released); at most
//!   8 writes wait at once, a ninth answers `EBUSY`; unmounting answers the waiting writes
//!   `ENODEV`.
//! * **Uevents** ([`uevent`]): each change records the events the kernel sends, in its order,
//!   in `.vgpu-sim/uevents` (`<seqnum> <action> <devpath> <subsystem> KEY=VALUE...`): `add`,
//!   `bind`, `unbind`, `remove` of PCI functions (VFs included) and mdevs (bound to the vendor's
//!   mdev driver, `vfio_mdev` before 5.16), `change` with `MDEV_STATE=registered` /
//!   `unregistered` when a parent's driver binds or unbinds, `add`/`remove` of VFIO group
//!   nodes (`vfio`) and cdevs (`vfio-dev`). A write to a device's `uevent` sends that action as
//!   a synthetic event (`SYNTH_UUID`); an unknown action is `EINVAL`. Booting sends none.
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
//! (`fail-next 2 EBUSY */sriov_numvfs`), latency (`latency sriov-enable 1500`; `latency
//! async-probe 300` delays new VFs' probe), hot-unplug (`unplug 0000:3b:00.0`), processes
//! holding files open (`hold 4242 qemu-system-x86 /dev/vfio/42`, `drop 4242`), MIG
//! (`mig-mode 0000:18:00.0 on`, `gpu-instance-add 0000:18:00.0 1g.18gb 2`,
//! `gpu-instance-remove 0000:18:00.0 9`), NVIDIA's size mode (`size-mode 0000:41:00.0
//! mixed`), its vGPU scheduler (`vgpu-scheduler 0000:41:00.0 fixed-share 0`), its registry
//! lines in `proc/driver/nvidia/params` (`nvidia-registry RegistryDwords
//! RMDisableScrubOnFree=1`), `counters-reset`, `uevents-clear`, `clear` (faults,
//! latencies and processes). Reading it
//! shows the pending faults, latencies and waiting writes. `<root>/.vgpu-sim/counters` reads
//! `lookup N\ngetattr N\n...`: the FUSE operations served outside `.vgpu-sim/`, then `inodes
//! N`: the inodes in the table now (each `lookup` takes a reference, `forget` drops it, and the
//! entries of vanished paths that no open file uses are swept, so create/destroy churn leaves it
//! bounded);
//! `<root>/.vgpu-sim/uevents` the uevent log. `<root>/.vgpu-sim/generation` reads `<boot-id>
//! <n>` and a newline: the boot id (`proc/sys/kernel/random/boot_id`, new at each mount) and
//! the state generation, a decimal number from 0 at boot that grows with every change of the
//! simulated state (every store, control line, unplug and asynchronous probe, whether or not
//! it changes a file; never on a read). A reader that caches what it read from the host reads
//! the line again and reads the host again only when the line differs (the test NVML does). [`SimHost`] has the same operations as methods
//! ([`SimHost::hold`], [`SimHost::drop_process`], [`SimHost::uevents`], ...).
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
//! [`libvirtd`] starts a private system `libvirtd` for tests, on the simulated `sys/` if asked.

pub mod control;
mod error;
mod fs;
mod host;
mod kernel;
pub mod libvirtd;
pub mod peer;
mod process;
pub mod profile;
mod shared;
mod tree;
pub mod uevent;
mod vfio;

pub use control::{Counters, FsOp, Hold, KernelOp, LatencyOp};
pub use error::SimError;
pub use host::{SimHost, fuse_for_test, require_fuse};
pub use profile::{PciAddr, Profile};
pub use uevent::Uevent;
