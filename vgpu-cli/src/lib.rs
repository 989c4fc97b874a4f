//! The `vgpuctl` command line: argument parsing, commands and their two renderings (tables for
//! people, `--json` for programs).
//!
//! Commands write to a `&mut dyn Write` so that tests can check their output against golden
//! files. Exit codes: [`EXIT_OK`], [`EXIT_ERROR`], [`EXIT_USAGE`], [`EXIT_CHECK_FAILED`],
//! [`EXIT_CHANGES_PENDING`].
//!
//! Two executables share this command line. `vgpuctl` (`src/main.rs`) calls only `run_local`.
//! For the commands that need libvirt (`Command::uses_libvirt`) it execs `vgpuctl-libvirt`
//! (crate `vgpu-cli-libvirt`, which links libvirt and runs the domain commands) from its own
//! directory, with the same arguments; the others ask it only what libvirt knows
//! ([`libvirt_facts`]). This crate does not depend on libvirt. Each command builds one struct
//! and renders it either as a table
//! (`render::*_table`) or as JSON (`render::json`). `plans` shows `apply`'s progress with
//! indicatif bars on a terminal, lines otherwise. The `/metrics` server uses hyper's `http1`
//! connection and hyper-util's `GracefulShutdown` rather than axum, whose router, extractors and
//! tower layers earn nothing for one route. `top` redraws the snapshot's own rendering in
//! crossterm's alternate screen, so a script's snapshot and a person's screen are one table.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use vgpu_core::checks::Status;
use vgpu_core::{HostPaths, manager::DomainReferences};

use libvirt_facts::FactsSource;

pub mod completions;
mod entry;
mod hook;
mod isolation;
pub mod libvirt_facts;
mod list;
mod mutate;
mod nova;
mod plans;
pub mod render;
mod sched;
mod telemetry;
mod top;
mod watch;

pub use entry::{
    LIBVIRT_HELPER, LinkedErrors, core_error, error_kind, exec_libvirt_helper, init_logging, main,
    write_error,
};
pub use hook::DEFAULT_HOOKS_DIR;
pub use mutate::{emit, handle};
pub use plans::PolicyArg;

/// Success.
pub const EXIT_OK: u8 = 0;
/// An error: the host could not be read, or a named device does not exist.
pub const EXIT_ERROR: u8 = 1;
/// The command line was wrong.
pub const EXIT_USAGE: u8 = 2;
/// `check` found a failure (a failed host check, or a device that is not isolated).
pub const EXIT_CHECK_FAILED: u8 = 3;
/// `plan` found changes to make (the host does not match the config yet).
pub const EXIT_CHANGES_PENDING: u8 = 4;

/// A switch given as `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// The `--help` heading of the options every command takes, shown after its own.
const GLOBAL: &str = "Global options";

/// Manage vGPUs and SR-IOV virtual functions on a KVM host.
#[derive(Debug, Parser)]
#[command(
    name = "vgpuctl",
    version,
    about,
    after_help = "Exit codes: 0 success, 1 error, 2 usage, 3 check found a failure, 4 plan found changes pending."
)]
pub struct Cli {
    /// Read the host laid out under DIR instead of / (a test tree or a vgpu-sim mount).
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "VGPU_ROOT",
        value_name = "DIR",
        default_value = "/"
    )]
    pub root: PathBuf,
    /// Keep definitions, the lock and the audit log (etc/, run/, var/) under DIR instead of
    /// under --root (a simulated host serves only sys/, proc/ and dev/).
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "VGPU_STATE_ROOT", value_name = "DIR")]
    pub state_root: Option<PathBuf>,
    /// The libvirt connection: for attach, detach, owners, the plan commands, and the domains
    /// that hold a device before destroy, stop, sriov or unbind take it away
    /// (`qemu:///embed?root=DIR` runs libvirt's QEMU driver in-process, without a daemon).
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "VGPU_CONNECT",
        value_name = "URI",
        default_value = vgpu_domain::DEFAULT_URI
    )]
    pub connect: String,
    /// Load NVML (NVIDIA's management library) from PATH instead of the driver's
    /// libnvidia-ml.so.1. A library named here is used whatever --root says: a driver
    /// installed elsewhere, or a test library describing a simulated host.
    #[arg(long, global = true,
        help_heading = GLOBAL, env = "VGPU_NVML_LIBRARY", value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true,
        help_heading = GLOBAL)]
    pub json: bool,
    /// Log more (-v info, -vv debug, -vvv trace); VGPU_LOG overrides.
    #[arg(short, long, global = true,
        help_heading = GLOBAL, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List GPU physical functions, their VFs, vGPU types and vGPUs.
    List {
        /// Only this GPU (0000:41:00.0, or 41:00.0 when unambiguous).
        gpu: Option<String>,
        /// Every definition instead, running or not (as `mdevctl list --defined`).
        #[arg(long, conflicts_with = "gpu")]
        defined: bool,
        /// Also a line per vGPU: its id, type and the device it sits on.
        #[arg(long)]
        vgpus: bool,
    },
    /// Show the vGPU types of every GPU, or of one.
    Types {
        /// A GPU address (0000:41:00.0, or 41:00.0 when unambiguous).
        gpu: Option<String>,
    },
    /// Check IOMMU, interrupt remapping, VFIO and IOMMU-group isolation.
    Check {
        /// Check only this GPU (and its VFs); exit 3 unless it can be assigned.
        gpu: Option<String>,
    },
    /// Changes to the host: VF counts, vGPUs, definitions, driver bindings.
    #[command(flatten)]
    Change(ChangeCommand),
    /// Print GPU, VF and mediated-device events (add, remove, bind, unbind, change) as they
    /// happen, each with the change it made to the inventory, until SIGINT or SIGTERM.
    Watch,
    /// The commands that talk to libvirt about domains.
    #[command(flatten)]
    Vm(VmCommand),
    /// Desired-state files and placement.
    #[command(flatten)]
    Plans(PlanCommand),
    /// Show the vGPU scheduler of an NVIDIA GPU (policy, time slice, what it supports), or
    /// set it with --policy. NVML takes a new policy only while no vGPU runs on the GPU.
    Sched {
        /// The GPU (0000:41:00.0, or 41:00.0 when unambiguous).
        gpu: String,
        /// Set this policy: best-effort, equal-share or fixed-share.
        #[arg(long, value_enum)]
        policy: Option<sched::PolicyName>,
        /// With --policy equal-share or fixed-share: the time slice of each vGPU, in
        /// milliseconds (the driver's default otherwise).
        #[arg(long, value_name = "MS", requires = "policy")]
        timeslice: Option<u32>,
    },
    /// Print the nova.conf sections an OpenStack Nova compute host needs for this host's vGPUs
    /// (mdev types, PCI device specs and aliases), and the GPUs Nova cannot use, with why.
    NovaConfig {
        /// The Nova release to write for: zed (26) to 2023.2 (28), or 2024.1 (29) and later.
        #[arg(long, value_enum, default_value = "zed")]
        nova_release: nova::NovaRelease,
    },
    /// The vGPUs in use with their domain, tenant, frame buffer, encoder sessions and
    /// utilisation, and the sums per tenant: a table refreshed on a terminal (q quits), one
    /// snapshot otherwise.
    Top {
        /// Seconds between refreshes (fractions allowed, at least 0.1).
        #[arg(long, default_value = "2", value_parser = top::parse_interval, value_name = "SECONDS")]
        interval: std::time::Duration,
    },
    /// The same telemetry in Prometheus's text exposition format: once to stdout, or served at
    /// http://ADDR/metrics until SIGINT or SIGTERM (port 0 picks a free port; the address
    /// bound is printed on stderr).
    Metrics {
        /// Serve on this address (`127.0.0.1:9400`, `[::1]:9400`); nothing is served without it.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// For each kind of device each GPU can give a VM now (whole GPU, MIG-backed vGPU,
    /// time-sliced vGPU, plain VF): memory, compute, performance, fault, administrative,
    /// cryptographic, economic and operational isolation, the facts behind each, and the risk
    /// that remains.
    Isolation {
        /// Only this GPU.
        gpu: Option<String>,
    },
    /// The libvirt QEMU hook that makes a domain's vGPUs when it starts and takes them back
    /// when it stops, and its installation.
    Hook {
        /// What to do.
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Print the completion script of a shell for vgpuctl: `source <(vgpuctl completions bash)`.
    Completions {
        /// The shell.
        shell: completions::Shell,
    },
}

/// The commands that change the host (`mutate`).
#[derive(Debug, Subcommand)]
pub enum ChangeCommand {
    /// Set the number of SR-IOV VFs of a GPU (NVIDIA GPUs: all or none).
    Sriov {
        /// The GPU's PCI address.
        gpu: String,
        /// How many VFs to enable (0 disables them).
        #[arg(long)]
        vfs: u32,
        /// Change the count even when VFs hold vGPUs or are bound to vfio-pci.
        #[arg(long)]
        force: bool,
        /// Whether VFs enabled from now on are bound to a driver.
        #[arg(long, value_enum)]
        autoprobe: Option<OnOff>,
        /// Also persist the count, so that `restore` sets it after a reboot.
        #[arg(long)]
        define: bool,
    },
    /// Create a vGPU of a type on a GPU: a mediated device or a VF-based vGPU.
    Create {
        /// Which vGPU.
        #[command(flatten)]
        vgpu: VgpuArgs,
        /// Also persist it (mdevctl's store for mediated devices, /etc/vgpu for VFs).
        #[arg(long)]
        define: bool,
        /// With --define: start it at boot (`restore`).
        #[arg(long, requires = "define")]
        auto: bool,
    },
    /// Stop a vGPU and remove its definition. Refused while a process holds its VFIO device
    /// open or a libvirt domain references it (checked when libvirt answers at --connect).
    Destroy {
        /// A mediated device UUID or a VF address.
        id: String,
        /// Destroy it even then.
        #[arg(long)]
        force: bool,
    },
    /// Persist a vGPU without creating it.
    Define {
        /// Which vGPU.
        #[command(flatten)]
        vgpu: VgpuArgs,
        /// Start it at boot (`restore`).
        #[arg(long)]
        auto: bool,
    },
    /// Remove a vGPU's definition (a running vGPU keeps running). Refused while a process
    /// holds its VFIO device open or a libvirt domain references it, as `destroy` is.
    Undefine {
        /// A mediated device UUID or a VF address.
        id: String,
        /// Remove it even then.
        #[arg(long)]
        force: bool,
    },
    /// Start a defined vGPU.
    Start {
        /// A mediated device UUID or a VF address.
        id: String,
    },
    /// Stop a running vGPU, keeping its definition. Refused while a process holds its VFIO
    /// device open or a libvirt domain references it, as `destroy` is.
    Stop {
        /// A mediated device UUID or a VF address.
        id: String,
        /// Stop it even then.
        #[arg(long)]
        force: bool,
    },
    /// Bind a PCI function to a driver (vfio-pci by default) with driver_override.
    Bind {
        /// The function's PCI address.
        address: vgpu_core::model::pci::PciAddress,
        /// The driver.
        #[arg(long, default_value = "vfio-pci")]
        driver: String,
        /// Also persist the binding.
        #[arg(long)]
        define: bool,
        /// With --define: bind at boot (`restore`).
        #[arg(long, requires = "define")]
        auto: bool,
        /// Bind a device that is neither a GPU nor a VF of one, or one a process holds open.
        #[arg(long)]
        force: bool,
    },
    /// Give a PCI function back to the driver it had before `bind`.
    Unbind {
        /// The function's PCI address.
        address: vgpu_core::model::pci::PciAddress,
        /// Reprobe a device `vgpuctl bind` did not bind (it goes to its default driver), and
        /// unbind it even while a process holds its VFIO device open.
        #[arg(long)]
        force: bool,
    },
    /// Bring the host back to its definitions: VF counts, bindings, auto-start vGPUs.
    Restore {
        /// Only what concerns this PCI device (udev's %k, as `contrib/udev/60-vgpu.rules`
        /// passes it): a GPU's VF count and what is defined on it and its VFs, or what is
        /// defined on a VF or mdev parent. Nothing defined there: nothing to do, exit 0.
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
    },
    /// Fill GPUs with vGPUs of one type, enabling VFs first if asked: all GPUs in parallel,
    /// each GPU's steps in order.
    Provision {
        /// The GPUs (PCI addresses); none with --all.
        #[arg(required_unless_present = "all")]
        gpus: Vec<String>,
        /// Every GPU on the host.
        #[arg(long, conflicts_with = "gpus")]
        all: bool,
        /// The type, as for `create`.
        #[arg(long = "type", value_name = "TYPE")]
        type_name: String,
        /// Enable this many VFs on each GPU first.
        #[arg(long)]
        vfs: Option<u32>,
        /// vGPUs per GPU (default: as many as fit).
        #[arg(long)]
        count: Option<u32>,
        /// Also persist each vGPU, as `create --define` does.
        #[arg(long)]
        define: bool,
        /// With --define: start them at boot (`restore`).
        #[arg(long, requires = "define")]
        auto: bool,
    },
}

impl ChangeCommand {
    /// Whether it takes a device away under the removal policy, which then needs to know
    /// which libvirt domains reference what: `destroy`, `undefine`, `stop`, `sriov` and
    /// `unbind`, unless forced.
    pub fn takes_away(&self) -> bool {
        matches!(
            self,
            ChangeCommand::Destroy { force: false, .. }
                | ChangeCommand::Undefine { force: false, .. }
                | ChangeCommand::Stop { force: false, .. }
                | ChangeCommand::Sriov { force: false, .. }
                | ChangeCommand::Unbind { force: false, .. }
        )
    }
}

/// The commands about libvirt domains (`vm`).
#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Give a vGPU to a libvirt domain: an existing one (ID), or a new one made on GPU
    /// (defined, started at boot) and named after the domain, so running it again changes
    /// nothing.
    Attach {
        /// The domain's name.
        domain: String,
        /// The vGPU: a mediated device UUID or a VF address.
        #[arg(conflicts_with_all = ["gpu", "type_name"], required_unless_present = "gpu")]
        id: Option<String>,
        /// Make the vGPU on this GPU.
        #[arg(long, requires = "type_name")]
        gpu: Option<String>,
        /// With --gpu: the type, as for `create`.
        #[arg(long = "type", value_name = "TYPE", requires = "gpu")]
        type_name: Option<String>,
        /// With --gpu: which of the domain's vGPUs on that GPU this is (0 for the first).
        #[arg(long, default_value_t = 0, requires = "gpu")]
        index: u32,
        /// Change the running domain (default: when it runs).
        #[arg(long)]
        live: bool,
        /// Change the persistent configuration (default: always).
        #[arg(long)]
        config: bool,
        /// Give a mediated device a display (display='on').
        #[arg(long)]
        display: bool,
        /// The PCI address the guest sees it at (dddd:bb:ss.f); libvirt picks one otherwise.
        #[arg(long, value_name = "ADDRESS")]
        guest_address: Option<vgpu_core::model::pci::PciAddress>,
    },
    /// Take a vGPU away from a libvirt domain.
    Detach {
        /// The domain's name.
        domain: String,
        /// The vGPU: a mediated device UUID or a VF address.
        id: String,
        /// Change the running domain (default: when it runs).
        #[arg(long)]
        live: bool,
        /// Change the persistent configuration (default: always).
        #[arg(long)]
        config: bool,
        /// Then destroy the vGPU and its definition (refused while another domain names it or
        /// a process holds it open).
        #[arg(long)]
        destroy: bool,
        /// With --destroy: destroy it even then.
        #[arg(long, requires = "destroy")]
        force: bool,
    },
    /// Which libvirt domain holds which vGPU (live, in its configuration, or both), the vGPUs
    /// no domain holds, and the devices domains name that are not on this host. Each type is
    /// named as `list` names it.
    Owners,
}

/// The desired-state and placement commands (`plans`).
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Show what bringing the host to a config of a desired-state file (host.toml, or
    /// vgpu-device-manager YAML) would change, per GPU. Exit 0 when the host matches, 4 when
    /// changes are pending, 1 when the config cannot be applied here.
    Plan {
        /// The desired-state file (`.yaml`/`.yml`: vgpu-device-manager's format).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// The config (default: the one named `default`, or the only one).
        #[arg(short = 'c', long = "config", value_name = "NAME")]
        config: Option<String>,
    },
    /// Bring the host to a config: all GPUs at once, each GPU's steps in order and undone if
    /// one fails. Running it again changes nothing.
    Apply {
        /// The desired-state file.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// The config.
        #[arg(short = 'c', long = "config", value_name = "NAME")]
        config: Option<String>,
        /// Only show the plan.
        #[arg(long)]
        dry_run: bool,
    },
    /// Exit 0 when the host matches a config, 1 naming each difference.
    Assert {
        /// The desired-state file.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// The config.
        #[arg(short = 'c', long = "config", value_name = "NAME")]
        config: Option<String>,
    },
    /// Choose GPUs (and VFs) for new vGPUs of one size or type; with --apply, create them.
    Place {
        /// How many vGPUs.
        #[arg(long)]
        count: u32,
        /// Their frame buffer (12GiB, 512MiB).
        #[arg(
            long,
            value_name = "SIZE",
            required_unless_present = "type_name",
            conflicts_with = "type_name"
        )]
        framebuffer: Option<String>,
        /// Their type, as for `create`.
        #[arg(long = "type", value_name = "TYPE")]
        type_name: Option<String>,
        /// Only GPUs on this NUMA node.
        #[arg(long, value_name = "NODE")]
        numa: Option<u32>,
        /// pack fills partly used GPUs first; spread balances.
        #[arg(long, value_enum, default_value = "pack")]
        policy: PolicyArg,
        /// With --framebuffer: the NVIDIA series (A, B, C, Q).
        #[arg(long, default_value_t = 'Q')]
        series: char,
        /// With --framebuffer: take the next larger type when none has that size.
        #[arg(long)]
        round_up: bool,
        /// Create the vGPUs (defined, started at boot), each GPU's as one operation.
        #[arg(long)]
        apply: bool,
    },
}

/// The `hook` subcommands.
#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// Run as libvirt runs /etc/libvirt/hooks/qemu.d/*: DOMAIN OP SUBOP EXTRA, the domain XML
    /// on stdin. `prepare begin` makes the domain's vGPUs (exit 1 and one line on stderr when
    /// one cannot be made, after undoing the rest); `release end` takes back what it made;
    /// anything else exits 0 at once.
    Qemu {
        /// The domain's name.
        #[arg(allow_hyphen_values = true)]
        domain: String,
        /// The operation (prepare, start, started, stopped, release, migrate, ...).
        #[arg(allow_hyphen_values = true)]
        op: String,
        /// The sub-operation (begin, end).
        #[arg(allow_hyphen_values = true)]
        subop: String,
        /// What libvirt passes last (`-`).
        #[arg(allow_hyphen_values = true, num_args = 0..)]
        extra: Vec<String>,
    },
    /// Install DIR/qemu.d/vgpu, a script that runs this vgpuctl as the hook with this
    /// --root and --state-root. Other hooks are left alone.
    Install {
        /// libvirt's hooks directory.
        #[arg(long, default_value = hook::DEFAULT_HOOKS_DIR)]
        dir: PathBuf,
    },
    /// Remove DIR/qemu.d/vgpu if `hook install` wrote it.
    Uninstall {
        /// libvirt's hooks directory.
        #[arg(long, default_value = hook::DEFAULT_HOOKS_DIR)]
        dir: PathBuf,
    },
}

/// A vGPU to create or define.
#[derive(Debug, clap::Args)]
pub struct VgpuArgs {
    /// The GPU's PCI address.
    pub gpu: String,
    /// The type: id (nvidia-231, 1152), name (GRID T4-2Q, T4-2Q), or `vf` for a whole VF.
    #[arg(long = "type", value_name = "TYPE")]
    pub type_name: String,
    /// The mediated device's UUID (a random one otherwise).
    #[arg(long)]
    pub uuid: Option<uuid::Uuid>,
}

impl Cli {
    /// Where NVML comes from: `--nvml-library`, or the driver's library on the local host.
    pub fn nvml_source(&self) -> vgpu_core::nvml::NvmlSource {
        vgpu_core::nvml::NvmlSource {
            library: self.nvml_library.clone(),
        }
    }
}

/// The manager for a command: the host at `paths`, NVML from where `cli` says.
pub fn manager(cli: &Cli, paths: &HostPaths) -> vgpu_core::Manager {
    vgpu_core::Manager::new(paths, mutate::command_line()).with_nvml(cli.nvml_source())
}

impl Command {
    /// Whether the command needs libvirt: the domain commands ([`VmCommand`]). `vgpuctl` runs
    /// these in `vgpuctl-libvirt` ([`LIBVIRT_HELPER`]) and the others itself. This is the one
    /// list: `vgpuctl` dispatches on it, and [`run_local`] refuses what it names.
    ///
    /// The plan commands, `top`, `metrics` and the changes that take a device away use what
    /// libvirt knows (which domains reference which vGPU) but run without it
    /// ([`libvirt_facts`]).
    pub fn uses_libvirt(&self) -> bool {
        matches!(self, Command::Vm(_))
    }
}

/// Where the host and `vgpu`'s own files are: `--root`, and `--state-root` when given.
pub fn host_paths(cli: &Cli) -> HostPaths {
    let paths = HostPaths::new(&cli.root);
    match &cli.state_root {
        Some(state) => paths.with_state_root(state),
        None => paths,
    }
}

/// Runs `cli`, a command that does not need libvirt ([`Command::uses_libvirt`]), writing its
/// output to `out`, with libvirt's facts from `facts`; returns the exit code. Fails for a
/// command that needs libvirt.
///
/// `vgpuctl` calls it with [`libvirt_facts::from_helper`]. `vgpuctl-libvirt` calls it with the
/// facts of the libvirt it links, and runs the domain commands itself. This crate does not
/// depend on libvirt's binding, so `vgpuctl` cannot link libvirt and runs on a host without
/// libvirt's library. Loading libvirt and the fifty libraries it needs also took 8 of the
/// 10 ms of CPU `vgpuctl --version` took.
pub fn run_local(cli: &Cli, out: &mut dyn Write, facts: FactsSource) -> Result<u8> {
    if cli.command.uses_libvirt() {
        anyhow::bail!("this command talks to libvirt: {LIBVIRT_HELPER} runs it");
    }
    let paths = host_paths(cli);
    // Every command that shows a GPU's types shows capacity's answer (`vgpu_core::plan::capacity::room`).
    let discover_with_nvml = || -> Result<(vgpu_core::model::Inventory, vgpu_core::nvml::Nvml)> {
        let nvml = cli.nvml_source().load(&paths);
        let state = manager(cli, &paths)
            .capacity_state(&nvml)
            .with_context(|| format!("cannot read the host at {}", cli.root.display()))?;
        Ok((state.inventory, nvml))
    };
    let discover = || -> Result<(vgpu_core::model::Inventory, vgpu_core::model::nvml::NvmlStatus)> {
        let (inventory, nvml) = discover_with_nvml()?;
        Ok((inventory, nvml.status().clone()))
    };
    match &cli.command {
        Command::List {
            gpu,
            defined,
            vgpus,
        } => {
            let nvml = cli.nvml_source().load(&paths);
            let state = manager(cli, &paths)
                .capacity_state(&nvml)
                .with_context(|| format!("cannot read the host at {}", cli.root.display()))?;
            if *defined {
                list::defined(cli.json, &state, out)?;
                return Ok(EXIT_OK);
            }
            let mut inventory = state.inventory;
            if let Some(name) = gpu {
                let address = vgpu_core::discovery::find_gpu(&inventory, name, &paths)?.address;
                inventory.gpus.retain(|g| g.address == address);
            }
            if cli.json {
                let facts = nvml.read();
                let list = render::ListJson {
                    gpus: inventory
                        .gpus
                        .iter()
                        .map(|gpu| render::GpuJson {
                            gpu,
                            nvml: facts.gpu(gpu.address),
                        })
                        .collect(),
                    warnings: &inventory.warnings,
                    nvml: nvml.status(),
                };
                render::json(out, &list)?;
            } else {
                render::list_table(out, &inventory, nvml.status())?;
                if *vgpus {
                    list::vgpus(&inventory, out)?;
                }
            }
            Ok(EXIT_OK)
        }
        Command::Sched {
            gpu,
            policy,
            timeslice,
        } => match policy {
            None => {
                let (inventory, nvml) = discover_with_nvml()?;
                sched::show(
                    cli,
                    vgpu_core::discovery::find_gpu(&inventory, gpu, &paths)?,
                    &nvml,
                    out,
                )
            }
            Some(policy) => {
                let request = vgpu_core::nvml::SchedulerRequest {
                    policy: (*policy).into(),
                    timeslice_ms: *timeslice,
                };
                sched::set(cli, &paths, gpu, request, out)
            }
        },
        Command::Types { gpu } => {
            let (inventory, _nvml) = discover()?;
            let gpus = match gpu {
                Some(name) => vec![vgpu_core::discovery::find_gpu(&inventory, name, &paths)?],
                None => inventory.gpus.iter().collect(),
            };
            if cli.json {
                let rows: Vec<render::TypesJson<'_>> = gpus
                    .iter()
                    .map(|g| render::TypesJson {
                        address: g.address,
                        backend: g.backend,
                        types: &g.types,
                    })
                    .collect();
                render::json(out, &render::TypesListJson { gpus: rows })?;
            } else {
                render::types_table(out, &gpus)?;
            }
            Ok(EXIT_OK)
        }
        // The commands that take devices away: the core's removal policy is told which
        // domains reference what.
        Command::Change(command) if command.takes_away() => {
            let references = libvirt_facts::references_now(&mut *facts(cli), &paths)?;
            mutate::run(cli, &paths, command, references, out)
        }
        Command::Change(command) => {
            mutate::run(cli, &paths, command, DomainReferences::NoLibvirt, out)
        }
        Command::Plans(command) => plans::run(cli, &paths, command, &mut *facts(cli), out),
        Command::Top { interval } => top::run(cli, &paths, *interval, facts(cli), out),
        Command::Metrics { listen } => telemetry::run(cli, &paths, *listen, facts(cli), out),
        Command::Watch => watch::run(cli.json, &paths, out),
        Command::Vm(_) => anyhow::bail!("this command talks to libvirt: {LIBVIRT_HELPER} runs it"),
        Command::Hook { command } => hook::run(cli, &paths, command, out),
        Command::Completions { shell } => completions::write(*shell, out).map(|()| EXIT_OK),
        Command::Isolation { gpu } => isolation::run(cli, &paths, gpu.as_deref(), out),
        Command::NovaConfig { nova_release } => {
            let (inventory, _nvml) = discover()?;
            nova::run(cli.json, *nova_release, &paths, &inventory, out)?;
            Ok(EXIT_OK)
        }
        Command::Check { gpu } => {
            let inventory = vgpu_core::discover(&paths).with_context(|| {
                format!("cannot discover GPUs on the host at {}", cli.root.display())
            })?;
            let mut report = vgpu_core::checks::check_host(&paths, &inventory);
            if let Some(name) = gpu {
                let target = vgpu_core::discovery::find_gpu(&inventory, name, &paths)?;
                let mine: Vec<_> = std::iter::once(target.address)
                    .chain(target.vfs.iter().map(|v| v.address))
                    .collect();
                report.devices.retain(|d| mine.contains(&d.address));
            } else {
                // Host-wide, a device that shares its group is a warning (iommu-groups), not a
                // failure of the host.
            }
            if cli.json {
                render::json(out, &report)?;
            } else {
                render::check_table(out, &report, &inventory.warnings)?;
            }
            let failed = if gpu.is_some() {
                report.worst() == Status::Fail
            } else {
                report.checks.iter().any(|c| c.status == Status::Fail)
            };
            Ok(if failed { EXIT_CHECK_FAILED } else { EXIT_OK })
        }
    }
}
