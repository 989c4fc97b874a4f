//! The values options take: the enums clap parses, each with what it stands for in the
//! library.

use vgpu_core::{model::nvml::SchedulerPolicy, plan::place::Policy};
use vgpu_report::kubevirt::Provider;
use vgpu_report::nova::NovaRelease;

/// A switch given as `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// A scheduler policy on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyName {
    /// Round robin over the vGPUs with work.
    BestEffort,
    /// An equal share to each running vGPU.
    EqualShare,
    /// A fixed share to each vGPU, by its type.
    FixedShare,
}

impl From<PolicyName> for SchedulerPolicy {
    fn from(name: PolicyName) -> Self {
        match name {
            PolicyName::BestEffort => SchedulerPolicy::BestEffort,
            PolicyName::EqualShare => SchedulerPolicy::EqualShare,
            PolicyName::FixedShare => SchedulerPolicy::FixedShare,
        }
    }
}

/// `place --policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// Fill partly used GPUs first (best fit).
    Pack,
    /// Balance vGPUs across GPUs.
    Spread,
}

impl From<PolicyArg> for Policy {
    fn from(arg: PolicyArg) -> Self {
        match arg {
            PolicyArg::Pack => Policy::Pack,
            PolicyArg::Spread => Policy::Spread,
        }
    }
}

/// A shell `vgpuctl completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// bash (bash-completion loads it from /usr/share/bash-completion/completions/vgpuctl).
    Bash,
    /// zsh (a `_vgpuctl` file in a directory of `$fpath`).
    Zsh,
    /// fish (`vgpuctl.fish` in a `vendor_completions.d` directory).
    Fish,
}

impl Shell {
    /// The file name the shell looks the script up by.
    pub fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "vgpuctl",
            Shell::Zsh => "_vgpuctl",
            Shell::Fish => "vgpuctl.fish",
        }
    }

    pub(crate) fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// `--nova-release`: the Nova releases `vgpu_report::nova` writes for, with the names and
/// aliases an operator types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NovaReleaseArg {
    /// Nova 26 (Zed, Debian 12) to 28 (2023.2 Bobcat): `[mdev_<type>]` groups are read only
    /// with two or more enabled types.
    #[value(name = "zed", alias = "26", alias = "2023.1", alias = "2023.2")]
    Zed,
    /// Nova 29 (2024.1 Caracal) and 30 (2024.2 Dalmatian): groups are always read;
    /// `max_instances` exists; vendor-VFIO VFs cannot be offered (managed='yes').
    #[value(
        name = "2024.1",
        alias = "caracal",
        alias = "29",
        alias = "2024.2",
        alias = "dalmatian",
        alias = "30"
    )]
    Caracal,
    /// Nova 31 (2025.1 Epoxy) and later: as 2024.1, and vendor-VFIO VFs with managed: "no".
    #[value(name = "2025.1", alias = "epoxy", alias = "31")]
    Epoxy,
}

impl From<NovaReleaseArg> for NovaRelease {
    fn from(arg: NovaReleaseArg) -> Self {
        match arg {
            NovaReleaseArg::Zed => NovaRelease::Zed,
            NovaReleaseArg::Caracal => NovaRelease::Caracal,
            NovaReleaseArg::Epoxy => NovaRelease::Epoxy,
        }
    }
}

/// `--provider`: who serves the resources on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderArg {
    /// KubeVirt's own device plugins (virt-handler).
    Kubevirt,
    /// NVIDIA's sandbox device plugin (GPU Operator): NVIDIA entries are external.
    Nvidia,
    /// Harvester: its SRIOVGPUDevice and VGPUDevice objects instead of the CR.
    Harvester,
}

impl From<ProviderArg> for Provider {
    fn from(arg: ProviderArg) -> Self {
        match arg {
            ProviderArg::Kubevirt => Provider::Kubevirt,
            ProviderArg::Nvidia => Provider::Nvidia,
            ProviderArg::Harvester => Provider::Harvester,
        }
    }
}

/// A size mode on the command line (`vgpuctl size-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SizeModeName {
    /// One vGPU type, so one size, per GPU.
    Equal,
    /// Time-sliced types of several sizes on one GPU, each vGPU at a placement.
    Mixed,
}

impl From<SizeModeName> for vgpu_core::model::sizes::SizeMode {
    fn from(name: SizeModeName) -> Self {
        match name {
            SizeModeName::Equal => Self::Equal,
            SizeModeName::Mixed => Self::Mixed,
        }
    }
}
