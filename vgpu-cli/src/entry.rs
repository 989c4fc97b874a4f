//! What `vgpuctl` and `vgpuctl-libvirt` do around a command: parsing, logging, stdout, the
//! error report and the exit code; and how `vgpuctl` hands the commands that talk to libvirt
//! to `vgpuctl-libvirt`.

use std::io::{self, Write};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::Cli;

/// The executable, installed beside `vgpuctl`, that runs the commands that talk to libvirt
/// ([`crate::Command::uses_libvirt`]): the same command line, linked with libvirt.
pub const LIBVIRT_HELPER: &str = "vgpuctl-libvirt";

/// How the error report reads the errors of a library that one executable links and this
/// crate does not: `vgpuctl-libvirt` links `vgpu-libvirt`, `vgpuctl` none
/// ([`LinkedErrors::NONE`]).
#[derive(Debug, Clone, Copy)]
pub struct LinkedErrors {
    /// The kind of `cause`, when it is such an error.
    pub kind: fn(&(dyn std::error::Error + 'static)) -> Option<vgpu_core::ErrorKind>,
    /// The `vgpu-core` error that `cause` carries, when it is such an error.
    pub core: for<'a> fn(&'a (dyn std::error::Error + 'static)) -> Option<&'a vgpu_core::Error>,
}

impl LinkedErrors {
    /// No library beyond this crate's.
    pub const NONE: LinkedErrors = LinkedErrors {
        kind: no_kind,
        core: no_core,
    };
}

fn no_kind(_: &(dyn std::error::Error + 'static)) -> Option<vgpu_core::ErrorKind> {
    None
}

fn no_core<'a>(_: &'a (dyn std::error::Error + 'static)) -> Option<&'a vgpu_core::Error> {
    None
}

/// Parses the command line, runs it with `run` and reports the outcome: the output, an error
/// chain once on stderr (and as JSON on stdout with `--json`), the exit code. `linked` reads
/// the errors of the libraries only this executable links.
pub fn main(run: fn(&Cli, &mut dyn Write) -> anyhow::Result<u8>, linked: LinkedErrors) -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help and version to stdout with exit 0, usage errors to stderr with 2.
            // With --json a usage error is JSON on stdout too, as every other error is.
            if err.use_stderr() && json_asked() {
                let text = err.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                let message = first.strip_prefix("error: ").unwrap_or(first);
                let value = serde_json::json!({ "error": message, "kind": "usage" });
                let _printed = writeln!(io::stdout().lock(), "{value}");
            }
            let _printed = err.print();
            return ExitCode::from(if err.use_stderr() { 2 } else { 0 });
        }
    };
    init_logging(&cli);
    // `watch`, `top` and `metrics` end on a signal themselves; the others stop between steps.
    if !matches!(
        cli.command,
        crate::Command::Watch | crate::Command::Top { .. } | crate::Command::Metrics { .. }
    ) {
        stop_on_signals();
    }
    // One write(2) per 64 KiB rather than per line: `list --json` on a large host is thousands
    // of lines. Every path below flushes before it returns; streamed lines (apply's progress)
    // flush themselves.
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let result = run(&cli, &mut out);
    let interrupted = vgpu_core::manager::stop_requested();
    let result = match (result, interrupted) {
        // A stopped command exits as a signal-stopped one does: 130 for SIGINT, 143 for
        // SIGTERM, after saying what it did.
        (Ok(_), Some(signal)) => Ok(stopped_code(signal)),
        (other, _) => other,
    };
    match result {
        Ok(code) => match out.flush() {
            Ok(()) => ExitCode::from(code),
            // The reader went away (`vgpuctl list | head`): what it read was complete.
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(code),
            Err(_) => ExitCode::from(crate::EXIT_ERROR),
        },
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            if cli.json {
                // Programs reading --json get the error as JSON too (the text goes to stderr).
                let chain: Vec<String> = err.chain().map(ToString::to_string).collect();
                let kind = crate::error_kind(&err, linked);
                let value = serde_json::json!({ "error": chain.join(": "), "kind": kind });
                // stdout may be the very thing that failed; stderr still says it.
                let _printed = writeln!(out, "{value}");
            }
            // The error report matters more than output a closed stdout could not take.
            let _flushed = out.flush();
            let mut stderr = io::stderr().lock();
            // Nothing more can be done if stderr is gone.
            let _written = crate::write_error(&mut stderr, &err, linked);
            ExitCode::from(interrupted.map_or(crate::EXIT_ERROR, stopped_code))
        }
    }
}

/// The exit code of a command a signal stopped: 128 + the signal.
fn stopped_code(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(crate::EXIT_ERROR)
}

/// Turns the first SIGINT or SIGTERM into [`vgpu_core::manager::request_stop`]: the step in flight
/// finishes, no new one starts, and each unfinished operation is undone. A second signal ends
/// the process at once. The signals are blocked in every thread and taken by one of its own
/// (`sigwait`), so nothing runs in a signal handler.
fn stop_on_signals() {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if let Err(err) = set.thread_block() {
        tracing::warn!("cannot block SIGINT and SIGTERM, so a signal stops at once: {err}");
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("vgpu-signals".to_owned())
        .spawn(move || {
            let mut stopping = false;
            while let Ok(signal) = set.wait() {
                let number = signal as i32;
                if stopping {
                    // Nothing more can be done if stderr is gone.
                    let _written = writeln!(
                        io::stderr().lock(),
                        "vgpuctl: {signal} again: aborted at once; `vgpuctl restore` completes what is defined"
                    );
                    std::process::exit(128 + number);
                }
                stopping = true;
                vgpu_core::manager::request_stop(number);
                let _written = writeln!(
                    io::stderr().lock(),
                    "vgpuctl: {signal}: stopping after the step in flight and undoing what this command did ({signal} again aborts at once)"
                );
            }
        });
    if let Err(err) = spawned {
        tracing::warn!("cannot start the signal thread, so a signal stops at once: {err}");
        let _unblocked = set.thread_unblock();
    }
}

/// Whether the command line asks for JSON: `--json` before any `--`.
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Whether `err` is stdout's reader having gone away (`vgpuctl list | head`).
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<io::Error>())
        .any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

/// [`LIBVIRT_HELPER`] could not be run.
#[derive(Debug)]
pub(crate) struct HelperNotRun(PathBuf);

impl std::fmt::Display for HelperNotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot run {}", self.0.display())
    }
}

/// The dynamic loader could not start [`LIBVIRT_HELPER`]: libvirt's client library is not
/// installed, or not loadable. Only the commands that talk to libvirt need it.
#[derive(Debug)]
pub(crate) struct LibvirtUnloadable {
    /// What the loader said, one line.
    loader: String,
}

impl LibvirtUnloadable {
    /// The loader's refusal in `output` of `helper`, if that is why it failed: exit 127 and the
    /// loader's "error while loading shared libraries" on stderr.
    pub(crate) fn from_output(output: &std::process::Output) -> Option<Self> {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stderr
            .lines()
            .find(|l| l.contains("error while loading shared libraries"))?;
        (output.status.code() == Some(127)).then(|| Self {
            loader: line.trim().to_owned(),
        })
    }
}

impl std::fmt::Display for LibvirtUnloadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "libvirt's client library (libvirt.so.0) is not installed or cannot be loaded: {}",
            self.loader
        )
    }
}

impl std::error::Error for LibvirtUnloadable {}

/// What to do about [`LibvirtUnloadable`].
pub(crate) const LIBVIRT_UNLOADABLE_HINT: &str = "install libvirt's client library (Debian: \
     `apt-get install libvirt0`); only attach, detach, owners and the holders of a device need it";

/// Replaces this process with [`LIBVIRT_HELPER`] from the directory of the running executable,
/// given the same arguments; returns only the error when it cannot be run.
///
/// The helper links libvirt's library, so without it the dynamic loader stops it before
/// `main` (exit 127). A `--version` run first finds that out, so that the error says what to
/// install; it costs one start of the helper.
pub fn exec_libvirt_helper() -> anyhow::Error {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return anyhow::Error::new(err).context(HelperNotRun(LIBVIRT_HELPER.into())),
    };
    let helper = exe.with_file_name(LIBVIRT_HELPER);
    match std::process::Command::new(&helper)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(output) => {
            if let Some(unloadable) = LibvirtUnloadable::from_output(&output) {
                return anyhow::Error::new(unloadable);
            }
        }
        Err(err) => return anyhow::Error::new(err).context(HelperNotRun(helper)),
    }
    let mut args = std::env::args_os();
    // Its usage lines and messages say what was typed.
    let arg0 = args.next().unwrap_or_else(|| "vgpuctl".into());
    let err = std::process::Command::new(&helper)
        .arg0(arg0)
        .args(args)
        .exec();
    anyhow::Error::new(err).context(HelperNotRun(helper))
}

/// Writes `err` with its causes once, and a hint when one applies.
pub fn write_error(
    w: &mut dyn Write,
    err: &anyhow::Error,
    linked: LinkedErrors,
) -> std::io::Result<()> {
    write!(w, "vgpuctl: error: {err}")?;
    for cause in err.chain().skip(1) {
        write!(w, ": {cause}")?;
    }
    writeln!(w)?;
    if let Some(hint) = hint(err, linked) {
        writeln!(w, "hint: {hint}")?;
    }
    Ok(())
}

/// The `vgpu_core::Error` behind `err`, if there is one.
pub fn core_error(err: &anyhow::Error, linked: LinkedErrors) -> Option<&vgpu_core::Error> {
    err.chain().find_map(|cause| core_error_of(cause, linked))
}

/// `cause` as a `vgpu-core` error, or the one an error of a linked library carries.
fn core_error_of<'a>(
    cause: &'a (dyn std::error::Error + 'static),
    linked: LinkedErrors,
) -> Option<&'a vgpu_core::Error> {
    cause
        .downcast_ref::<vgpu_core::Error>()
        .or_else(|| (linked.core)(cause))
}

/// What a caller can do about `err`: the kind of the first typed error in its chain (a
/// library's, or a [`crate::Refusal`] of the command line). An error with none is a failure
/// of the machine `vgpuctl` runs on (stdout, a thread, a signal): `permission` when the
/// kernel said so, `host-fault` otherwise. So every error reported carries a kind.
pub fn error_kind(err: &anyhow::Error, linked: LinkedErrors) -> vgpu_core::ErrorKind {
    use vgpu_core::ErrorKind;
    err.chain()
        .find_map(|cause| typed_kind(cause, linked))
        .unwrap_or_else(|| {
            let io = err.chain().find_map(|c| c.downcast_ref::<std::io::Error>());
            match io.map(std::io::Error::kind) {
                Some(std::io::ErrorKind::PermissionDenied) => ErrorKind::Permission,
                _ => ErrorKind::HostFault,
            }
        })
}

/// The kind of `cause` when it is an error of a type that says one.
fn typed_kind(
    cause: &(dyn std::error::Error + 'static),
    linked: LinkedErrors,
) -> Option<vgpu_core::ErrorKind> {
    use vgpu_core::ErrorKind;
    use vgpu_core::model::GpuLookupError;
    if let Some(err) = cause.downcast_ref::<vgpu_core::Error>() {
        return Some(err.kind());
    }
    if let Some(err) = cause.downcast_ref::<vgpu_core::plan::Error>() {
        return Some(err.kind());
    }
    if let Some(err) = cause.downcast_ref::<vgpu_domain::Error>() {
        return Some(err.kind());
    }
    if let Some(err) = cause.downcast_ref::<vgpu_report::kubevirt::Error>() {
        return Some(err.kind());
    }
    if let Some(refusal) = cause.downcast_ref::<crate::Refusal>() {
        return Some(refusal.kind);
    }
    if let Some(lookup) = cause.downcast_ref::<GpuLookupError>() {
        return Some(match lookup {
            GpuLookupError::NotFound { .. } => ErrorKind::NotFound,
            GpuLookupError::Ambiguous { .. } => ErrorKind::BadInput,
        });
    }
    if cause.is::<vgpu_core::model::name::BadName>()
        || cause.is::<vgpu_core::model::pci::PciAddressError>()
        || cause.is::<vgpu_report::usage::UsageError>()
    {
        return Some(ErrorKind::BadInput);
    }
    (linked.kind)(cause)
}

/// The planning error behind `err`, if any: returned by `vgpu-plan` itself, or carried by a
/// `vgpu-core` error.
fn plan_error(err: &anyhow::Error, linked: LinkedErrors) -> Option<&vgpu_core::plan::Error> {
    err.chain().find_map(|c| {
        c.downcast_ref::<vgpu_core::plan::Error>()
            .or_else(|| match core_error_of(c, linked) {
                Some(vgpu_core::Error::Plan(plan)) => Some(plan),
                _ => None,
            })
    })
}

/// The hint for every error of kind no-capacity.
const NO_CAPACITY: &str = "`vgpuctl types GPU` shows what each GPU can still take";

/// What to do about [`vgpu_core::Error::MigrationTypeUnknown`]: the libvirt hook says it too.
pub(crate) const MIGRATION_TYPE_UNKNOWN_HINT: &str = "name a type in the domain's metadata, map \
     its Nova flavor in hook.toml, or give it with `vgpuctl attach` on the source, which records it";

/// What to do about [`vgpu_core::Error::NoTypeForVf`]: the libvirt hook says it too.
pub(crate) const NO_TYPE_FOR_VF_HINT: &str = "define one with `vgpuctl define`, name one in the \
     domain's metadata, or give the domain a Nova flavor that the hook's [flavors] maps";

fn hint(err: &anyhow::Error, linked: LinkedErrors) -> Option<&'static str> {
    use vgpu_core::error::{HostError, StateError};
    use vgpu_core::{Error, ErrorKind};
    if err.downcast_ref::<LibvirtUnloadable>().is_some() {
        return Some(LIBVIRT_UNLOADABLE_HINT);
    }
    if let Some(kubevirt) = err
        .chain()
        .find_map(|c| c.downcast_ref::<vgpu_report::kubevirt::Error>())
    {
        use vgpu_report::kubevirt::Error as Kubevirt;
        return match kubevirt {
            Kubevirt::Conflict { .. } => Some(
                "give the GPUs of one PCI id one profile across the cluster, or let NVIDIA's or \
                 Harvester's device plugin serve one resource per profile (--provider nvidia or \
                 --provider harvester)",
            ),
            Kubevirt::NoNodeName { .. } => Some("name the node with --node NAME"),
            Kubevirt::MergeFile { .. } => {
                Some("--merge takes what `vgpuctl --json kubevirt-config` printed on each node")
            }
            _ => None,
        };
    }
    if err.downcast_ref::<HelperNotRun>().is_some() {
        return Some(
            "vgpuctl-libvirt, which runs the commands that talk to libvirt, belongs beside \
             vgpuctl (`make install` puts both in BINDIR)",
        );
    }
    if let Some(plan) = plan_error(err, linked) {
        return match plan {
            vgpu_core::plan::Error::WrongType { .. } => {
                Some("ask for the type the vGPU has, or give the domain another vGPU (`--index N`)")
            }
            vgpu_core::plan::Error::NoConfig { .. } => Some("choose a config with -c NAME"),
            vgpu_core::plan::Error::TypeNotOffered { .. } => {
                Some("`vgpuctl types GPU` lists the types a GPU offers, with their room")
            }
            _ if plan.kind() == ErrorKind::NoCapacity => Some(NO_CAPACITY),
            _ => None,
        };
    }
    if let Some(core) = core_error(err, linked) {
        // The hook's error about one of a domain's devices: what to do is the device's.
        let core = match core {
            Error::HookDevice { source, .. } => source.as_ref(),
            other => other,
        };
        let hint = match core {
            Error::HeldOpen { .. } => {
                "shut the guest down (or detach the vGPU) first, or use --force"
            }
            Error::InUse { .. } => "free it first (detach it from the domain), or use --force",
            Error::NotGpu { .. } => "--force binds a device that is not a GPU",
            Error::NotOwned { .. } => "--force gives it to its default driver instead",
            Error::NotFound {
                what: vgpu_core::error::Object::Gpu,
                ..
            }
            | Error::Ambiguous { .. } => "run `vgpuctl list` to see the GPUs on this host",
            Error::UnknownType { .. } => "`vgpuctl types GPU` lists the types a GPU offers",
            Error::NoVfs { .. } => "enable VFs first: `vgpuctl sriov GPU --vfs N`",
            Error::DefinitionExists { .. } => {
                "`vgpuctl undefine ID` removes a definition; `vgpuctl start ID` starts it"
            }
            Error::State(StateError::Locked { .. }) => {
                "another vgpuctl is changing this host; try again when it is done"
            }
            Error::PlanRefused { .. } => "`vgpuctl plan -f FILE` shows every reason",
            // ENOSYS: a file system that serves no files of vgpu's own, such as a simulator's.
            Error::Host(HostError::Update { source, .. })
                if source.kind() == std::io::ErrorKind::Unsupported =>
            {
                "this root takes no files of vgpu's own (a vgpu-sim host serves only sys/, proc/ \
                 and dev/): give --state-root DIR (or VGPU_STATE_ROOT) for etc/, run/ and var/"
            }
            Error::HoldersUnknown { .. } => {
                "start libvirt (`systemctl start libvirtd`), or use --force if no domain uses it"
            }
            Error::PlanStale { .. } => "run the command again: it plans from the host as it is now",
            Error::NoTypeForVf { .. } => NO_TYPE_FOR_VF_HINT,
            Error::MigrationTypeUnknown { .. } => MIGRATION_TYPE_UNKNOWN_HINT,
            Error::Host(HostError::UnbindLockRefused { .. }) => {
                "stop the VMs and processes using the GPU (nvidia-smi shows them), then retry"
            }
            Error::Nvml(vgpu_core::error::NvmlError::NotLoaded { .. }) => {
                "is the NVIDIA vGPU manager installed? --nvml-library names another NVML"
            }
            Error::Nvml(vgpu_core::error::NvmlError::MigModeOff { .. }) => {
                "enable MIG mode (nvidia-smi -i GPU -mig 1, then reset the GPU) and make GPU \
                 instances (nvidia-smi mig -cgi PROFILE)"
            }
            Error::Nvml(vgpu_core::error::NvmlError::NoFreeGpuInstance { .. }) => {
                "make a GPU instance of that profile (nvidia-smi mig -cgi PROFILE), or destroy \
                 a vGPU that uses one"
            }
            Error::Nvml(vgpu_core::error::NvmlError::VgpusRunning { .. }) => {
                "shut down the VMs using the GPU's vGPUs and destroy them first"
            }
            _ => match core.kind() {
                ErrorKind::NoCapacity => NO_CAPACITY,
                ErrorKind::Permission => "run as root",
                ErrorKind::Busy => "the device is in use: free it first, or retry later",
                _ => return None,
            },
        };
        return Some(hint);
    }
    let io = err
        .chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())?;
    match io.kind() {
        std::io::ErrorKind::PermissionDenied => Some("run as root"),
        _ => None,
    }
}

/// Sets up logging to stderr: warnings by default (errors only for the libvirt hook, whose
/// stderr libvirt shows the user), more with `-v`, or as `VGPU_LOG` says.
pub fn init_logging(cli: &Cli) {
    let quiet = matches!(
        cli.command,
        crate::Command::Hook {
            command: crate::HookCommand::Qemu { .. }
        }
    );
    let default = match cli.verbose {
        0 if quiet => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("VGPU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // A second initialisation (in tests) keeps the first subscriber; nothing to report.
    // Colour only for a person: not when stderr is a file, a pipe or journald.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let _already = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .event_format(Prefixed)
        .try_init();
}

/// Log lines as `vgpuctl` writes its errors: `vgpuctl: warning: ...`, then the fields.
struct Prefixed;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Prefixed
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "vgpuctl: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
