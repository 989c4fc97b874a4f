//! The control interface: faults, latency, hot-unplug and counters.
//!
//! Grammar of `<root>/.vgpu-sim/control` (one command per line, `#` starts a comment):
//!
//! ```text
//! fail-next <count> <errno> <path-glob>   next <count> writes to matching paths fail with <errno>
//! latency <op> <millis>                   add <millis> to every <op> (0 removes it)
//! unplug <dddd:bb:ss.f>                   hot-unplug a PCI function (with its VFs and mdevs)
//! hold <pid> <comm> <target>              process <pid> opens <target>: proc/<pid>/fd/<n>
//! drop <pid>                              process <pid> exits: proc/<pid> goes away
//! mig-mode <dddd:bb:ss.f> on|off          turn a GPU's MIG mode on or off
//! gpu-instance-add <addr> <profile> <start>  make a GPU instance (`nvidia-smi mig -cgi`)
//! gpu-instance-remove <addr> <id>         destroy a GPU instance (`nvidia-smi mig -dgi`)
//! size-mode <dddd:bb:ss.f> equal|mixed   NVIDIA's vGPU size mode (`nvidia-smi vgpu -shm 0|1`)
//! vgpu-scheduler <addr> <policy> <ns>     a GPU's vGPU scheduler and time slice (NVML's set)
//! nvidia-registry <line> [<value>]        a registry line of `proc/driver/nvidia/params`
//! counters-reset                          zero all operation counters
//! uevents-clear                           empty the uevent log (`.vgpu-sim/uevents`)
//! clear                                   drop every pending fault, latency and process
//! ```
//!
//! `<errno>` is a name (`EBUSY`, `EIO`, ...) or a number from 1 to 133 ([`MAX_ERRNO`]). At most
//! [`MAX_FAULTS`] faults may be pending. `<millis>` is at most 60 000 ([`MAX_LATENCY`]).
//! `<path-glob>` is matched against the
//! canonical path below the root (symlinks resolved, as the kernel hands them to the
//! filesystem), e.g. `sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/sriov_numvfs`; `*`
//! matches any run of characters including `/`, `?` one character. `<op>` is a kernel
//! operation (`sriov-enable`, `sriov-disable`, `mdev-create`, `mdev-remove`, `vgpu-create`,
//! `vgpu-destroy`, `bind`, `unbind`, `probe`, `reset`) or a filesystem operation (`lookup`,
//! `getattr`, `readlink`, `open`, `read`, `write`, `readdir`): the write or request takes
//! that much longer. `async-probe` is different: it is how long after a `sriov_numvfs` write
//! each new VF's driver probe runs (the write returns at once, the VFs are there but not yet
//! bound; a profile's `async_probe_ms` sets it at boot, `clear` drops it).
//!
//! `hold` gives process `<pid>` (1 to [`MAX_PID`]; created with name `<comm>` when new) one
//! more open file: the lowest free descriptor from 3, a link `proc/<pid>/fd/<n>` whose target
//! is `<target>` literally, as the kernel shows it (`/dev/vfio/42`,
//! `/dev/vfio/devices/vfio3`, `anon_inode:[vfio-device]`; it need not exist). `<comm>` is 1
//! to [`MAX_COMM_LEN`] bytes without whitespace or control characters and must match the
//! name of an existing process; `<target>` is 1 to [`MAX_TARGET_LEN`] bytes without
//! whitespace or control characters, an absolute path or a `<kind>:<name>` pseudo-file. At
//! most [`MAX_HELD_FDS`] descriptors are held by all processes together. `drop` ends a
//! process with all its descriptors.
//!
//! The MIG lines are what NVIDIA's driver does when NVML asks: the test NVML library writes
//! them here and reads the outcome back from `.vgpu-sim/nvidia/<addr>.json`. They apply to a
//! GPU whose profile has `[device.mig]` (`ENODEV` otherwise). `mig-mode` is refused with
//! `EBUSY` for a change while the GPU has GPU instances or vGPUs. `gpu-instance-add` takes a
//! profile name as `nvidia-smi mig -lgip` prints it without `MIG ` (`1g.18gb`) and the first
//! memory slice of one of its placements (`nvidia-smi mig -lgipp`); the simulator gives the
//! instance the lowest free id from 1. It is refused with `EOPNOTSUPP` with MIG mode off,
//! `EINVAL` for a profile the GPU lacks or a start that is not one of its placements, and
//! `ENOSPC` when the instance would overlap another or pass the profile's instance count.
//! `gpu-instance-remove` is refused with `EBUSY` while a vGPU runs on the instance, and with
//! `EINVAL` for an unknown id.
//!
//! `size-mode` is what NVIDIA's driver does for `nvmlDeviceSetVgpuHeterogeneousMode`: `mixed`
//! turns on mixed-size (heterogeneous) mode, in which time-sliced vGPUs of several sizes
//! share the GPU, each at a placement id (see `vgpu_params`); `equal` turns it off. Every GPU
//! boots in `equal`, and a GPU unbound from `nvidia` (or removed) loses the mode. It applies
//! to a physical GPU with the mode (an L40S, L4, A10 or H100 80GB, by its profile `catalog`:
//! `ENODEV` for any other device) and is refused with `EBUSY` for a change while the GPU
//! holds a vGPU, on its VFs or its mdevs. Asking for the mode the GPU has changes nothing.
//!
//! `vgpu-scheduler` is what NVIDIA's driver does for `nvmlDeviceSetVgpuSchedulerState`:
//! `<policy>` is `best-effort`, `equal-share` or `fixed-share`, `<ns>` the time slice in
//! nanoseconds (`0` for the driver's default, else [`MIN_TIMESLICE_NS`] to
//! [`MAX_TIMESLICE_NS`]). It applies to a vendor-VFIO physical GPU (`ENODEV` otherwise), is
//! refused with `EBUSY` while the GPU holds a vGPU, and with `EINVAL` for `fixed-share` in
//! mixed-size mode (the vGPU user guide: fixed share needs equal-size vGPUs). Every GPU boots
//! with `best-effort` and `0`, and a GPU unbound from `nvidia` loses its scheduler, as the
//! driver keeps it only while loaded.
//!
//! `nvidia-registry` sets the value of `RegistryDwords` or `RegistryDwordsPerDevice` in
//! `proc/driver/nvidia/params`, standing for the module options the driver was loaded with
//! (`NVreg_RegistryDwords`); without `<value>` the line is emptied. A value is at most
//! [`MAX_REGISTRY_LEN`] bytes of printable ASCII without quotes. It is refused with `ENODEV`
//! on a host without the `nvidia` driver. It stays set until changed, like a module option.
//!
//! A write with an unknown command, a malformed line, an errno, latency, pid, name or target
//! out of range, more faults or descriptors than fit, or a `hold` naming an existing process
//! by another name fails with `EINVAL` and applies none of its lines; one that unplugs an
//! absent device fails with `ENODEV`, one that drops an absent process with `ESRCH`, also
//! applying none. Lines are checked in order against the state the earlier ones leave.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::SimError;
use crate::profile::PciAddr;

mod counters;
mod words;

pub use counters::Counters;
pub(crate) use counters::LiveCounters;
pub use words::{
    Hold, MAX_TIMESLICE_NS, MIN_TIMESLICE_NS, RegistryLine, SchedPolicy, check_comm, check_pid,
    check_target,
};
use words::{
    check_profile, check_registry_value, parse_instance_id, parse_pid, parse_policy,
    parse_registry_line, parse_slice, parse_timeslice,
};

/// The largest errno Linux defines (`EHWPOISON`); injected errnos are 1 to this.
pub const MAX_ERRNO: i32 = 133;
/// The most latency one operation can be given.
pub const MAX_LATENCY: Duration = Duration::from_millis(60_000);
/// The most faults that can be pending at once.
pub const MAX_FAULTS: usize = 1024;
/// The largest pid (`PID_MAX_LIMIT` on 64-bit kernels).
pub const MAX_PID: u32 = 4_194_304;
/// The longest process name (`TASK_COMM_LEN` less its NUL).
pub const MAX_COMM_LEN: usize = 15;
/// The longest `hold` target (`PATH_MAX` less its NUL).
pub const MAX_TARGET_LEN: usize = 4095;
/// The most descriptors all simulated processes can hold together.
pub const MAX_HELD_FDS: usize = 4096;
/// The longest value of an NVIDIA registry line.
pub const MAX_REGISTRY_LEN: usize = 1024;

/// A kernel operation that latency can be added to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelOp {
    /// A non-zero write to `sriov_numvfs` (once per PF).
    SriovEnable,
    /// A zero write to `sriov_numvfs`.
    SriovDisable,
    /// A write to an mdev type's `create`.
    MdevCreate,
    /// A write to an mdev's `remove`.
    MdevRemove,
    /// A non-zero write to an NVIDIA VF's `current_vgpu_type`.
    VgpuCreate,
    /// A zero write to an NVIDIA VF's `current_vgpu_type`.
    VgpuDestroy,
    /// A write to `drivers/<drv>/bind`.
    Bind,
    /// A write to `drivers/<drv>/unbind`.
    Unbind,
    /// A write to `drivers_probe`.
    Probe,
    /// A write to a device's `reset`.
    Reset,
    /// The asynchronous initial probe of a VF a `sriov_numvfs` write added: it runs this long
    /// after the write (which does not wait for it).
    AsyncProbe,
}

/// A filesystem operation, as served to the kernel's FUSE client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FsOp {
    /// Name lookup in a directory.
    Lookup,
    /// Attribute read (`stat`).
    Getattr,
    /// Attribute change (truncation on `O_TRUNC`).
    Setattr,
    /// Symlink read.
    Readlink,
    /// File open.
    Open,
    /// File read.
    Read,
    /// File write.
    Write,
    /// Directory listing.
    Readdir,
}

impl FsOp {
    /// Every operation, in counter order.
    pub const ALL: [FsOp; 8] = [
        FsOp::Lookup,
        FsOp::Getattr,
        FsOp::Setattr,
        FsOp::Readlink,
        FsOp::Open,
        FsOp::Read,
        FsOp::Write,
        FsOp::Readdir,
    ];

    /// The name used in the control grammar and the counters file.
    pub fn name(self) -> &'static str {
        match self {
            FsOp::Lookup => "lookup",
            FsOp::Getattr => "getattr",
            FsOp::Setattr => "setattr",
            FsOp::Readlink => "readlink",
            FsOp::Open => "open",
            FsOp::Read => "read",
            FsOp::Write => "write",
            FsOp::Readdir => "readdir",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An operation latency can be added to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LatencyOp {
    /// A kernel operation.
    Kernel(KernelOp),
    /// A filesystem operation.
    Fs(FsOp),
}

const KERNEL_OPS: [(&str, KernelOp); 11] = [
    ("sriov-enable", KernelOp::SriovEnable),
    ("sriov-disable", KernelOp::SriovDisable),
    ("mdev-create", KernelOp::MdevCreate),
    ("mdev-remove", KernelOp::MdevRemove),
    ("vgpu-create", KernelOp::VgpuCreate),
    ("vgpu-destroy", KernelOp::VgpuDestroy),
    ("bind", KernelOp::Bind),
    ("unbind", KernelOp::Unbind),
    ("probe", KernelOp::Probe),
    ("reset", KernelOp::Reset),
    ("async-probe", KernelOp::AsyncProbe),
];

impl FromStr for LatencyOp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((_, op)) = KERNEL_OPS.iter().find(|(n, _)| *n == s) {
            return Ok(LatencyOp::Kernel(*op));
        }
        FsOp::ALL
            .iter()
            .find(|op| op.name() == s)
            .map(|op| LatencyOp::Fs(*op))
            .ok_or_else(|| format!("unknown operation {s:?}"))
    }
}

impl fmt::Display for LatencyOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LatencyOp::Fs(op) => f.write_str(op.name()),
            LatencyOp::Kernel(k) => {
                let name = KERNEL_OPS
                    .iter()
                    .find(|(_, op)| op == k)
                    .map_or("?", |(n, _)| *n);
                f.write_str(name)
            }
        }
    }
}

/// A pending injected failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Writes left to fail.
    pub remaining: u32,
    /// The errno they fail with.
    pub errno: i32,
    /// The path glob (see the module doc).
    pub glob: String,
}

/// One parsed control command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `fail-next <count> <errno> <glob>`.
    FailNext(Fault),
    /// `latency <op> <millis>`.
    Latency(LatencyOp, Duration),
    /// `unplug <addr>`.
    Unplug(PciAddr),
    /// `hold <pid> <comm> <target>`.
    Hold(Hold),
    /// `drop <pid>`.
    Drop(u32),
    /// `mig-mode <addr> on|off`.
    MigMode(PciAddr, bool),
    /// `gpu-instance-add <addr> <profile> <start>`.
    GpuInstanceAdd(PciAddr, String, u32),
    /// `gpu-instance-remove <addr> <id>`.
    GpuInstanceRemove(PciAddr, u32),
    /// `size-mode <addr> equal|mixed`: `true` for mixed.
    SizeMode(PciAddr, bool),
    /// `vgpu-scheduler <addr> <policy> <ns>`.
    Scheduler(PciAddr, SchedPolicy, u32),
    /// `nvidia-registry <line> [<value>]`.
    Registry(RegistryLine, String),
    /// `counters-reset`.
    CountersReset,
    /// `uevents-clear`.
    UeventsClear,
    /// `clear`.
    Clear,
}

const ERRNOS: [(&str, i32); 23] = [
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("EINVAL", libc::EINVAL),
    ("ENOSPC", libc::ENOSPC),
    ("ERANGE", libc::ERANGE),
    ("ENOTTY", libc::ENOTTY),
    ("ENOSYS", libc::ENOSYS),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("EUSERS", libc::EUSERS),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ENOTSUP", libc::ENOTSUP),
    ("ENOLCK", libc::ENOLCK),
    ("ESRCH", libc::ESRCH),
];

/// Whether `errno` is one Linux defines (1 to [`MAX_ERRNO`]).
pub fn is_valid_errno(errno: i32) -> bool {
    (1..=MAX_ERRNO).contains(&errno)
}

/// The errno for a name such as `EBUSY`, or a number from 1 to [`MAX_ERRNO`].
pub fn errno_from_name(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return is_valid_errno(n).then_some(n);
    }
    ERRNOS.iter().find(|(n, _)| *n == s).map(|(_, e)| *e)
}

/// The name of an errno, or its number.
pub fn errno_name(errno: i32) -> String {
    ERRNOS
        .iter()
        .find(|(_, e)| *e == errno)
        .map_or_else(|| errno.to_string(), |(n, _)| (*n).to_owned())
}

/// Parses the text written to the control file: every line or none.
///
/// # Errors
/// [`SimError::Control`] naming the first bad line.
pub fn parse_commands(text: &str) -> Result<Vec<Command>, SimError> {
    let mut out = Vec::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |reason: String| SimError::Control {
            line: line.to_owned(),
            reason,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let cmd = match words.as_slice() {
            ["fail-next", count, errno, glob] => {
                let remaining = count
                    .parse::<u32>()
                    .map_err(|_| bad(format!("bad count {count:?}")))?;
                let errno = errno_from_name(errno).ok_or_else(|| {
                    bad(format!("bad errno {errno:?} (a name or 1 to {MAX_ERRNO})"))
                })?;
                Command::FailNext(Fault {
                    remaining,
                    errno,
                    glob: (*glob).to_owned(),
                })
            }
            ["latency", op, millis] => {
                let op = op.parse::<LatencyOp>().map_err(bad)?;
                let delay = millis
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_millis)
                    .filter(|d| *d <= MAX_LATENCY)
                    .ok_or_else(|| {
                        bad(format!(
                            "bad millis {millis:?} (0 to {})",
                            MAX_LATENCY.as_millis()
                        ))
                    })?;
                Command::Latency(op, delay)
            }
            ["unplug", addr] => Command::Unplug(addr.parse().map_err(|e| bad(format!("{e}")))?),
            ["hold", pid, comm, target] => {
                let pid = parse_pid(pid).map_err(bad)?;
                Command::Hold(Hold::new(pid, comm, target).map_err(bad)?)
            }
            ["drop", pid] => Command::Drop(parse_pid(pid).map_err(bad)?),
            ["mig-mode", addr, mode] => Command::MigMode(
                addr.parse().map_err(|e| bad(format!("{e}")))?,
                match *mode {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(format!("bad MIG mode {mode:?} (on or off)"))),
                },
            ),
            ["gpu-instance-add", addr, profile, start] => Command::GpuInstanceAdd(
                addr.parse().map_err(|e| bad(format!("{e}")))?,
                check_profile(profile).map_err(bad)?,
                parse_slice(start).map_err(bad)?,
            ),
            ["gpu-instance-remove", addr, id] => Command::GpuInstanceRemove(
                addr.parse().map_err(|e| bad(format!("{e}")))?,
                parse_instance_id(id).map_err(bad)?,
            ),
            ["size-mode", addr, mode] => Command::SizeMode(
                addr.parse().map_err(|e| bad(format!("{e}")))?,
                match *mode {
                    "mixed" => true,
                    "equal" => false,
                    _ => return Err(bad(format!("bad size mode {mode:?} (equal or mixed)"))),
                },
            ),
            ["vgpu-scheduler", addr, policy, ns] => Command::Scheduler(
                addr.parse().map_err(|e| bad(format!("{e}")))?,
                parse_policy(policy).map_err(bad)?,
                parse_timeslice(ns).map_err(bad)?,
            ),
            ["nvidia-registry", which] => {
                Command::Registry(parse_registry_line(which).map_err(bad)?, String::new())
            }
            ["nvidia-registry", which, value] => Command::Registry(
                parse_registry_line(which).map_err(bad)?,
                check_registry_value(value).map_err(bad)?,
            ),
            ["counters-reset"] => Command::CountersReset,
            ["uevents-clear"] => Command::UeventsClear,
            ["clear"] => Command::Clear,
            _ => {
                return Err(bad(
                    "unknown command or wrong number of arguments".to_owned()
                ));
            }
        };
        out.push(cmd);
    }
    Ok(out)
}

/// Whether `path` matches `glob` (`*` any run including `/`, `?` one character).
pub fn glob_match(glob: &str, path: &str) -> bool {
    let g = glob.as_bytes();
    let p = path.as_bytes();
    let (mut gi, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while pi < p.len() {
        match g.get(gi) {
            Some(b'*') => {
                star = Some((gi, pi));
                gi += 1;
            }
            Some(&c) if c == b'?' || c == p[pi] => {
                gi += 1;
                pi += 1;
            }
            _ => match star {
                Some((sg, sp)) => {
                    gi = sg + 1;
                    pi = sp + 1;
                    star = Some((sg, sp + 1));
                }
                None => return false,
            },
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_match_star_crosses_slash() {
        assert!(glob_match(
            "*/0000:3b:00.0/sriov_numvfs",
            "sys/devices/pci0000:3a/0000:3b:00.0/sriov_numvfs"
        ));
    }

    #[test]
    fn glob_match_other_file_fails() {
        assert!(!glob_match(
            "*/sriov_numvfs",
            "sys/devices/pci0000:3a/0000:3b:00.0/reset"
        ));
    }

    #[test]
    fn glob_match_question_mark_matches_one_char() {
        assert!(glob_match("a?c", "abc"));
    }

    #[test]
    fn parse_commands_fail_next_parses() {
        let cmds = parse_commands("fail-next 2 EBUSY */create\n").expect("valid");
        assert_eq!(
            cmds,
            vec![Command::FailNext(Fault {
                remaining: 2,
                errno: libc::EBUSY,
                glob: "*/create".into()
            })]
        );
    }

    #[test]
    fn parse_commands_mig_lines_parse() {
        let gpu: PciAddr = "0000:18:00.0".parse().expect("address");
        assert_eq!(
            parse_commands(
                "mig-mode 0000:18:00.0 on\ngpu-instance-add 0000:18:00.0 1g.18gb+me 6\n\
                 gpu-instance-remove 0000:18:00.0 3"
            )
            .expect("valid"),
            vec![
                Command::MigMode(gpu, true),
                Command::GpuInstanceAdd(gpu, "1g.18gb+me".to_owned(), 6),
                Command::GpuInstanceRemove(gpu, 3),
            ]
        );
    }

    #[test]
    fn parse_commands_size_mode_parses() {
        let gpu: PciAddr = "0000:41:00.0".parse().expect("address");
        assert_eq!(
            parse_commands("size-mode 0000:41:00.0 mixed\nsize-mode 0000:41:00.0 equal")
                .expect("valid"),
            vec![Command::SizeMode(gpu, true), Command::SizeMode(gpu, false)]
        );
    }

    #[test]
    fn parse_commands_vgpu_scheduler_parses() {
        let gpu: PciAddr = "0000:41:00.0".parse().expect("address");
        assert_eq!(
            parse_commands("vgpu-scheduler 0000:41:00.0 fixed-share 2000000").expect("valid"),
            vec![Command::Scheduler(gpu, SchedPolicy::FixedShare, 2_000_000)]
        );
    }

    #[test]
    fn parse_commands_vgpu_scheduler_timeslice_below_1ms_fails() {
        assert!(parse_commands("vgpu-scheduler 0000:41:00.0 equal-share 999999").is_err());
    }

    #[test]
    fn parse_commands_vgpu_scheduler_unknown_policy_fails() {
        assert!(parse_commands("vgpu-scheduler 0000:41:00.0 round-robin 0").is_err());
    }

    #[test]
    fn parse_commands_nvidia_registry_without_value_empties_it() {
        assert_eq!(
            parse_commands("nvidia-registry RegistryDwordsPerDevice").expect("valid"),
            vec![Command::Registry(RegistryLine::PerDevice, String::new())]
        );
    }

    #[test]
    fn parse_commands_nvidia_registry_value_with_quote_fails() {
        assert!(parse_commands("nvidia-registry RegistryDwords RmMsg=\"x\"").is_err());
    }

    #[test]
    fn parse_commands_nvidia_registry_other_line_fails() {
        assert!(parse_commands("nvidia-registry RmMsg x").is_err());
    }

    #[test]
    fn parse_commands_size_mode_other_word_fails() {
        assert!(parse_commands("size-mode 0000:41:00.0 on").is_err());
    }

    #[test]
    fn parse_commands_mig_mode_other_than_on_or_off_fails() {
        assert!(parse_commands("mig-mode 0000:18:00.0 yes").is_err());
    }

    #[test]
    fn parse_commands_gpu_instance_id_64_fails() {
        assert!(parse_commands("gpu-instance-remove 0000:18:00.0 64").is_err());
    }

    #[test]
    fn parse_commands_gpu_instance_add_start_64_fails() {
        assert!(parse_commands("gpu-instance-add 0000:18:00.0 1g.18gb 64").is_err());
    }

    #[test]
    fn parse_commands_gpu_instance_add_id_before_profile_fails() {
        assert!(parse_commands("gpu-instance-add 0000:18:00.0 11 1g.18gb").is_err());
    }

    #[test]
    fn parse_commands_latency_parses() {
        let cmds = parse_commands("latency sriov-enable 1500").expect("valid");
        assert_eq!(
            cmds,
            vec![Command::Latency(
                LatencyOp::Kernel(KernelOp::SriovEnable),
                Duration::from_millis(1500)
            )]
        );
    }

    #[test]
    fn parse_commands_async_probe_latency_parses() {
        assert_eq!(
            parse_commands("latency async-probe 200").expect("valid"),
            vec![Command::Latency(
                LatencyOp::Kernel(KernelOp::AsyncProbe),
                Duration::from_millis(200)
            )]
        );
    }

    #[test]
    fn parse_commands_uevents_clear_parses() {
        assert_eq!(
            parse_commands("uevents-clear").expect("valid"),
            vec![Command::UeventsClear]
        );
    }

    #[test]
    fn parse_commands_unknown_command_fails() {
        assert!(matches!(
            parse_commands("frobnicate"),
            Err(SimError::Control { .. })
        ));
    }

    #[test]
    fn parse_commands_bad_errno_fails() {
        assert!(parse_commands("fail-next 1 EWHAT *").is_err());
    }

    #[test]
    fn parse_commands_errno_zero_fails() {
        assert!(parse_commands("fail-next 1 0 *").is_err());
    }

    #[test]
    fn parse_commands_errno_above_133_fails() {
        assert!(parse_commands("fail-next 1 134 *").is_err());
    }

    #[test]
    fn parse_commands_errno_133_parses() {
        assert_eq!(
            parse_commands("fail-next 1 133 *").expect("valid"),
            vec![Command::FailNext(Fault {
                remaining: 1,
                errno: 133,
                glob: "*".into()
            })]
        );
    }

    #[test]
    fn parse_commands_latency_above_60000_fails() {
        assert!(parse_commands("latency bind 60001").is_err());
    }

    #[test]
    fn parse_commands_latency_60000_parses() {
        assert_eq!(
            parse_commands("latency bind 60000").expect("valid"),
            vec![Command::Latency(
                LatencyOp::Kernel(KernelOp::Bind),
                MAX_LATENCY
            )]
        );
    }

    #[test]
    fn parse_commands_hold_parses() {
        assert_eq!(
            parse_commands("hold 4242 qemu-system-x86 /dev/vfio/42").expect("valid"),
            vec![Command::Hold(Hold {
                pid: 4242,
                comm: "qemu-system-x86".into(),
                target: "/dev/vfio/42".into()
            })]
        );
    }

    #[test]
    fn parse_commands_drop_parses() {
        assert_eq!(
            parse_commands("drop 4242").expect("valid"),
            vec![Command::Drop(4242)]
        );
    }

    #[test]
    fn parse_commands_hold_extra_word_fails() {
        assert!(parse_commands("hold 1 qemu /dev/vfio/1 (deleted)").is_err());
    }
}
