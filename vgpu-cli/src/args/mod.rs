//! The command line's definition: the clap structs and enums of every command and option, and
//! what the dispatch asks of them (`uses_libvirt`, `takes_away`, `force`). Nothing here reads
//! the host; `dispatch` runs what is parsed here.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod values;

pub use values::{NovaReleaseArg, OnOff, PolicyArg, PolicyName, ProviderArg, Shell, SizeModeName};

/// The `--help` heading of the options every command takes, shown after its own.
const GLOBAL: &str = "Global options";

/// Manage vGPUs and SR-IOV virtual functions on a KVM host.
#[derive(Debug, Parser)]
#[command(
    name = "vgpuctl",
    version,
    about = "Manage vGPUs and SR-IOV virtual functions on a KVM host",
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
    /// The libvirt connection (default qemu:///system): for attach, detach, owners, the plan
    /// commands, and the domains that hold a device before destroy, stop, sriov or unbind take
    /// it away (`qemu:///embed?root=DIR` runs libvirt's QEMU driver in-process, without a
    /// daemon). A URI named here must answer before a device is taken away.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "VGPU_CONNECT",
        value_name = "URI"
    )]
    pub connect: Option<String>,
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
    ///
    /// AVAIL is how many more of a type the GPU can take now. LIMIT says what bounds it:
    ///
    ///   max N           the type's maximum per GPU
    ///   holds TYPE      a vGPU of TYPE, running or defined, rules it out
    ///   N reserved      defined vGPUs that are not running hold N places
    ///   free VFs        the VFs that hold nothing, are not given out nor defined
    ///   driver says     the driver's available_instances
    ///   needs a free P  no free GPU instance of MIG profile P
    ///   N free P        N free GPU instances of MIG profile P
    ///   MIG mode off    the type needs a MIG GPU instance; MIG mode is off
    ///   MIG mode on     the type is time-sliced; MIG mode is on
    ///   no NVML         MIG instances cannot be listed without NVML
    ///   N placements    mixed-size mode: N placements of the type are free
    ///   no free placement  mixed-size mode: every placement overlaps a vGPU
    ///   placements unknown  mixed-size mode: NVML does not list placements
    ///   N per GPU       mixed-size mode: the GPU holds its most vGPUs
    ///   not offered     the GPU does not offer the type
    ///
    /// A * after a name: only the built-in catalog names the type.
    #[command(verbatim_doc_comment)]
    Types {
        /// A GPU address (0000:41:00.0, or 41:00.0 when unambiguous).
        gpu: Option<String>,
    },
    /// Check IOMMU, interrupt remapping, VFIO and IOMMU-group isolation.
    Check {
        /// Check only this GPU (and its VFs); exit 3 unless it can be assigned.
        gpu: Option<String>,
    },
    /// Show each tenant's policy (etc/vgpu/tenants.toml) and holdings; exit 3 on a violation.
    Tenants,
    /// Whether this host can take a domain migrated (or restored) from another host: the
    /// vGPU each of its vGPUs would become here, as the libvirt hook's `migrate begin` would
    /// choose it. Changes nothing; exits 0 when the domain would be accepted, 1 naming the
    /// device and the reason when not.
    CanHost {
        /// The domain's XML, as `virsh dumpxml --migratable DOMAIN` prints it on the source.
        #[arg(short = 'f', long = "file", value_name = "DOMAIN.xml")]
        file: PathBuf,
        /// The source's migration metadata (`vgpuctl migration-metadata` there): NVML judges
        /// each vGPU against the GPU it would run on here, and the vGPU type and ECC mode must
        /// match.
        #[arg(long, value_name = "FILE")]
        metadata: Option<PathBuf>,
    },
    /// Print the NVML migration metadata of running vGPUs, for `can-host --metadata` on a
    /// candidate destination. The output is JSON in any format. A VF of NVIDIA's vendor VFIO
    /// is found through the domain libvirt says holds it.
    MigrationMetadata {
        /// The vGPUs, as the domain XML names them: mediated-device UUIDs or VF addresses.
        #[arg(required = true, value_name = "VGPU")]
        vgpus: Vec<String>,
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
        policy: Option<PolicyName>,
        /// With --policy equal-share or fixed-share: the time slice of each vGPU, in
        /// milliseconds (the driver's default otherwise).
        #[arg(long, value_name = "MS", requires = "policy")]
        timeslice: Option<u32>,
        /// With --policy: also record it as the GPU's scheduler, which restore sets again
        /// before it makes the GPU's vGPUs (the driver forgets it when it unloads).
        #[arg(long, requires = "policy")]
        define: bool,
    },
    /// Show the size mode of an NVIDIA GPU's time-sliced vGPUs, or set it: equal (one size
    /// per GPU) or mixed (several sizes, each vGPU at a placement). NVML takes a new mode only
    /// while the GPU holds no vGPU; the driver forgets it at each reboot.
    SizeMode {
        /// The GPU (0000:41:00.0, or 41:00.0 when unambiguous).
        gpu: String,
        /// Set this mode.
        #[arg(value_enum)]
        mode: Option<SizeModeName>,
        /// With a mode: also record it as the GPU's size mode, which restore sets again
        /// before it makes the GPU's vGPUs (the driver forgets it at each reboot).
        #[arg(long, requires = "mode")]
        define: bool,
    },
    /// Print the nova.conf sections an OpenStack Nova compute host needs for this host's vGPUs
    /// (mdev types, PCI device specs and aliases), and the GPUs Nova cannot use, with why.
    NovaConfig {
        /// The Nova release to write for: zed (26) to 2023.2 (28), 2024.1 (29) and 2024.2 (30),
        /// or 2025.1 (31) and later, the first to offer vendor-VFIO VFs.
        #[arg(long, value_enum, default_value = "zed")]
        nova_release: NovaReleaseArg,
    },
    /// Print the KubeVirt CR patch (permitted host devices, mdevs left alone) that lets a
    /// KubeVirt or Harvester cluster see exactly the vGPUs this host made, or Harvester's own
    /// objects.
    KubevirtConfig {
        /// The cluster's KubeVirt release, X.Y (1.0 to 1.9; default 1.9).
        #[arg(long, value_name = "X.Y")]
        kubevirt_version: Option<String>,
        /// Who serves the resources: KubeVirt's own device plugins, NVIDIA's sandbox device
        /// plugin (GPU Operator), or Harvester (its objects instead of the CR).
        #[arg(long, value_enum, default_value = "kubevirt")]
        provider: ProviderArg,
        /// This node's name in the cluster (default: the host's hostname).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Other nodes' `kubevirt-config --json` outputs: print the cluster's union.
        #[arg(long, value_name = "FILE", num_args = 1..)]
        merge: Vec<PathBuf>,
    },
    /// The vGPUs in use with their domain, tenant, frame buffer, encoder sessions and
    /// utilisation, and the sums per tenant: a table refreshed on a terminal (q quits), one
    /// snapshot otherwise.
    Top {
        /// Seconds between refreshes (fractions allowed, at least 0.1).
        #[arg(long, default_value = "2", value_parser = parse_interval, value_name = "SECONDS")]
        interval: Duration,
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
    /// What each tenant (or domain, type, GPU) held over a window, from the usage ledger:
    /// vGPU-seconds, frame-buffer byte-seconds and intervals. An interval crossing a bound is
    /// cut at it.
    Usage {
        /// The window's start: RFC 3339 (2026-11-01T00:00:00Z) or before now (-30d, -12h);
        /// this month's first instant (UTC) by default.
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        since: Option<i64>,
        /// The window's end, as --since; now by default.
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        until: Option<i64>,
        /// The key of each row: tenant, domain, type or gpu.
        #[arg(long, value_name = "KEY", default_value = "tenant")]
        by: vgpu_report::usage::By,
        /// CSV with a header row, for a billing import.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
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
        shell: Shell,
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
        /// Whether to persist it, and whether it comes back at boot.
        #[command(flatten)]
        keep: Keep,
        /// In mixed-size mode, the placement id (first 1-GiB slot) to make it at; `types
        /// --json` lists the free ones. Without it: the free placement that takes the least
        /// room from the GPU's larger types.
        #[arg(long, value_name = "N")]
        placement: Option<u32>,
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
    /// Persist a vGPU without creating it. As `mdevctl define`, it starts only on request
    /// (`vgpuctl start`) unless --auto.
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
        /// Whether to persist it, and whether it comes back at boot.
        #[command(flatten)]
        keep: Keep,
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
        /// Whether to persist it, and whether it comes back at boot.
        #[command(flatten)]
        keep: Keep,
        /// For this tenant: refused (exit 1, kind policy) when the tenant policy
        /// (etc/vgpu/tenants.toml) would not let it hold them.
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
    },
}

impl ChangeCommand {
    /// Its `--force`: `false` for the commands without one. The dispatch reads it here once
    /// and gives it to the manager (`Context::manager`).
    pub fn force(&self) -> bool {
        match self {
            ChangeCommand::Sriov { force, .. }
            | ChangeCommand::Destroy { force, .. }
            | ChangeCommand::Undefine { force, .. }
            | ChangeCommand::Stop { force, .. }
            | ChangeCommand::Bind { force, .. }
            | ChangeCommand::Unbind { force, .. } => *force,
            ChangeCommand::Create { .. }
            | ChangeCommand::Define { .. }
            | ChangeCommand::Start { .. }
            | ChangeCommand::Restore { .. }
            | ChangeCommand::Provision { .. } => false,
        }
    }

    /// Whether it takes a device away under the removal policy, which then needs to know
    /// which libvirt domains reference what: `destroy`, `undefine`, `stop`, `sriov` and
    /// `unbind`, unless forced.
    pub fn takes_away(&self) -> bool {
        let removes = matches!(
            self,
            ChangeCommand::Destroy { .. }
                | ChangeCommand::Undefine { .. }
                | ChangeCommand::Stop { .. }
                | ChangeCommand::Sriov { .. }
                | ChangeCommand::Unbind { .. }
        );
        removes && !self.force()
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
        /// Only GPUs where this tenant's new vGPUs keep the tenant policy (tenants.toml).
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
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
        #[arg(long, default_value = DEFAULT_HOOKS_DIR)]
        dir: PathBuf,
    },
    /// Remove DIR/qemu.d/vgpu if `hook install` wrote it.
    Uninstall {
        /// libvirt's hooks directory.
        #[arg(long, default_value = DEFAULT_HOOKS_DIR)]
        dir: PathBuf,
    },
}

/// The one rule of `--define` for `create`, `bind` and `provision`: what the command makes
/// now is persisted and comes back at boot (`restore`), unless `--manual`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Keep {
    /// Also persist it (mdevctl's store for mediated devices, /etc/vgpu for the rest):
    /// `restore` makes it again at boot.
    #[arg(long)]
    pub define: bool,
    /// With --define: keep the definition, but make it only on request (`vgpuctl start`).
    #[arg(long, requires = "define")]
    pub manual: bool,
    /// With --define: make it at boot, which --define does by default.
    #[arg(long, requires = "define", conflicts_with = "manual", hide = true)]
    pub auto: bool,
}

impl Keep {
    /// The definition's start, when one is kept.
    pub fn start(self) -> Option<vgpu_core::state::Start> {
        use vgpu_core::state::Start;
        self.define.then_some(if self.manual {
            Start::Manual
        } else {
            Start::Auto
        })
    }
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
    /// The libvirt connection URI: `--connect`, or libvirt's system daemon.
    pub fn uri(&self) -> &str {
        self.connect.as_deref().unwrap_or(vgpu_domain::DEFAULT_URI)
    }

    /// The host's paths: `--root`, with `--state-root` for vgpu's own files.
    pub fn paths(&self) -> vgpu_core::HostPaths {
        let paths = vgpu_core::HostPaths::new(&self.root);
        match &self.state_root {
            Some(state) => paths.with_state_root(state),
            None => paths,
        }
    }

    /// Where NVML comes from: `--nvml-library`, or the driver's library on the local host.
    pub fn nvml_source(&self) -> vgpu_core::nvml::NvmlSource {
        vgpu_core::nvml::NvmlSource {
            library: self.nvml_library.clone(),
        }
    }
}

impl Command {
    /// Whether the command needs libvirt: the domain commands ([`VmCommand`]). `vgpuctl` runs
    /// these in `vgpuctl-libvirt` ([`crate::LIBVIRT_HELPER`]) and the others itself. This is
    /// the one list: `vgpuctl` dispatches on it, and [`crate::run_local`] refuses what it names.
    ///
    /// The plan commands, `top`, `metrics` and the changes that take a device away use what
    /// libvirt knows (which domains reference which vGPU) but run without it
    /// ([`crate::libvirt_facts`]).
    pub fn uses_libvirt(&self) -> bool {
        matches!(self, Command::Vm(_))
    }

    /// Its `--force` (a change's, or `detach --destroy --force`): `false` for the commands
    /// without one.
    pub fn force(&self) -> bool {
        match self {
            Command::Change(command) => command.force(),
            Command::Vm(VmCommand::Detach { force, .. }) => *force,
            _ => false,
        }
    }
}

// The values options take.

/// Where libvirt looks for hooks (`SYSCONFDIR/libvirt/hooks`, fixed when libvirt is built).
pub const DEFAULT_HOOKS_DIR: &str = "/etc/libvirt/hooks";

/// The shortest refresh interval `--interval` takes.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Now, in milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Parses `--since` and `--until`: RFC 3339, or a time before now.
pub(crate) fn parse_time(text: &str) -> std::result::Result<i64, String> {
    vgpu_report::usage::parse_time(text, now_ms()).map_err(|err| err.to_string())
}

/// Parses `--interval`: seconds, fractions allowed (`0.5`), at least [`MIN_INTERVAL`].
pub(crate) fn parse_interval(text: &str) -> std::result::Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    let interval = Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if interval < MIN_INTERVAL {
        return Err(format!(
            "{text:?} is shorter than {} s",
            MIN_INTERVAL.as_secs_f64()
        ));
    }
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_interval_takes_fractions_of_a_second() {
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn parse_interval_below_minimum_is_refused() {
        assert_eq!(
            parse_interval("0.01"),
            Err("\"0.01\" is shorter than 0.1 s".to_owned())
        );
    }

    #[test]
    fn parse_interval_negative_is_refused() {
        assert_eq!(
            parse_interval("-1"),
            Err("\"-1\" is not a number of seconds".to_owned())
        );
    }

    fn parsed(args: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("vgpuctl").chain(args.iter().copied()))
            .expect("arguments parse")
            .command
    }

    #[test]
    fn force_is_read_from_each_command_that_has_it() {
        let forced = [
            &["destroy", "0000:4d:00.1", "--force"][..],
            &["sriov", "0000:4d:00.0", "--vfs", "0", "--force"],
            &["bind", "0000:4d:00.1", "--force"],
            &["detach", "vm", "0000:4d:00.1", "--destroy", "--force"],
        ];
        for args in forced {
            assert!(parsed(args).force(), "{args:?}");
        }
        assert!(!parsed(&["destroy", "0000:4d:00.1"]).force());
        assert!(!parsed(&["list"]).force());
    }

    #[test]
    fn takes_away_unless_forced() {
        let takes_away = |args: &[&str]| match parsed(args) {
            Command::Change(command) => command.takes_away(),
            other => panic!("not a change: {other:?}"),
        };
        assert!(takes_away(&["stop", "0000:4d:00.1"]));
        assert!(!takes_away(&["stop", "0000:4d:00.1", "--force"]));
        assert!(!takes_away(&["start", "0000:4d:00.1"]));
    }
}
