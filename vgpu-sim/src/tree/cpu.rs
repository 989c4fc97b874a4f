//! `sys/devices/system/cpu` (`drivers/base/cpu.c`, `drivers/base/topology.c`,
//! `Documentation/ABI/stable/sysfs-devices-system-cpu`, `Documentation/admin-guide/cputopology.rst`):
//! what libvirt's `src/util/virhostcpu.c` reads to count CPUs and their topology.
//!
//! The profile's CPUs are all present and online, one package, die and cluster, one thread per core,
//! core ids equal to CPU numbers (as `proc/cpuinfo` says), split between NUMA nodes in equal
//! ranges as `sys/devices/system/node/node<N>/cpulist` says. CPU 0 has no `online` (x86 CPU 0
//! cannot be taken offline). Each CPU's `uevent` has the `MODALIAS` of `cpu_uevent`
//! (`drivers/base/cpu.c`; on x86 `arch_print_cpu_modalias`) with the vendor, family and model
//! of the profile's CPU model and, a deviation, no feature list.

use std::fmt::Write as _;
use std::ops::Range;

use super::Dir;
use crate::kernel::Kernel;
use crate::profile::CpuVendor;

/// `nr_cpu_ids` of a kernel built with `CONFIG_NR_CPUS=8192` (Debian, Ubuntu), less one.
const KERNEL_MAX: u32 = 8191;

impl Kernel {
    /// CPUs per NUMA node (the nodes' `cpulist` ranges).
    pub(super) fn cpus_per_node(&self) -> u32 {
        (self.profile.cpus / self.profile.numa_nodes.max(1)).max(1)
    }

    /// A cpumask as `cpumap_print_to_pagebuf` prints it: hex, 32-bit words separated by
    /// commas, as wide as the number of possible CPUs.
    pub(super) fn cpu_mask(&self, cpus: Range<u32>) -> String {
        let n = self.profile.cpus.max(1);
        let words = n.div_ceil(32);
        let mut out = String::new();
        for w in (0..words).rev() {
            let mut word: u32 = 0;
            for bit in 0..32 {
                let cpu = w * 32 + bit;
                if cpu < n && cpus.contains(&cpu) {
                    word |= 1 << bit;
                }
            }
            let digits = if w == words - 1 {
                (n - w * 32).div_ceil(4) as usize
            } else {
                8
            };
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "{word:0digits$x}");
        }
        out.push('\n');
        out
    }

    fn cpu_list(first: u32, last: u32) -> String {
        if first == last {
            format!("{first}\n")
        } else {
            format!("{first}-{last}\n")
        }
    }

    /// The entries below `sys/devices/system/cpu`; `rest` is the path below it.
    pub(super) fn list_cpus(&self, d: &mut Dir, rest: &[&str]) -> Option<()> {
        let n = self.profile.cpus;
        let all = Self::cpu_list(0, n.saturating_sub(1));
        let cpu = |name: &str| {
            let c: u32 = name.strip_prefix("cpu")?.parse().ok()?;
            (c < n && name == format!("cpu{c}")).then_some(c)
        };
        match rest {
            [] => {
                for c in 0..n {
                    d.dir(format!("cpu{c}"));
                }
                d.text("kernel_max", format!("{KERNEL_MAX}\n"));
                d.text("offline", "\n".to_owned());
                d.text("online", all.clone());
                d.text("possible", all.clone());
                d.text("present", all);
            }
            [name] => {
                let c = cpu(name)?;
                if c > 0 {
                    d.text("online", "1\n".to_owned());
                }
                d.dir("topology");
                let node = c / self.cpus_per_node();
                if node < self.profile.numa_nodes {
                    d.link(
                        format!("node{node}"),
                        &format!("sys/devices/system/node/node{node}"),
                    );
                }
                let (ven, fam, model) = match self.profile.cpu_vendor {
                    CpuVendor::Intel => (0, 0x6, 0x6a),
                    CpuVendor::Amd => (2, 0x19, 0x11),
                };
                d.text(
                    "uevent",
                    format!(
                        "MODALIAS=cpu:type:x86,ven{ven:04X}fam{fam:04X}mod{model:04X}:feature:\n"
                    ),
                );
            }
            [name, "topology"] => {
                let c = cpu(name)?;
                let own = Self::cpu_list(c, c);
                let all = Self::cpu_list(0, n.saturating_sub(1));
                for (file, text) in [
                    ("cluster_cpus", self.cpu_mask(0..n)),
                    ("cluster_cpus_list", all.clone()),
                    ("cluster_id", "0\n".to_owned()),
                    ("core_cpus", self.cpu_mask(c..c + 1)),
                    ("core_cpus_list", own.clone()),
                    ("core_id", format!("{c}\n")),
                    ("core_siblings", self.cpu_mask(0..n)),
                    ("core_siblings_list", all.clone()),
                    ("die_cpus", self.cpu_mask(0..n)),
                    ("die_cpus_list", all.clone()),
                    ("die_id", "0\n".to_owned()),
                    ("package_cpus", self.cpu_mask(0..n)),
                    ("package_cpus_list", all.clone()),
                    ("physical_package_id", "0\n".to_owned()),
                    ("thread_siblings", self.cpu_mask(c..c + 1)),
                    ("thread_siblings_list", own.clone()),
                ] {
                    d.text(file, text);
                }
            }
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::Kernel;
    use crate::profile::Profile;

    fn kernel(cpus: u32) -> Kernel {
        let mut p = Profile::builtin("l40s-vendor-vfio").expect("profile");
        p.cpus = cpus;
        Kernel::boot(p)
    }

    #[test]
    fn cpu_mask_of_16_cpus_is_four_digits() {
        assert_eq!(kernel(16).cpu_mask(8..16), "ff00\n");
    }

    #[test]
    fn cpu_mask_of_40_cpus_is_two_words() {
        assert_eq!(kernel(40).cpu_mask(32..33), "01,00000000\n");
    }
}
