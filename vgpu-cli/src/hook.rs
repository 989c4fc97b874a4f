//! `vgpuctl hook`: the libvirt QEMU hook (`hook qemu`, run by libvirt as
//! `/etc/libvirt/hooks/qemu.d/vgpu DOMAIN OP SUBOP EXTRA` with the domain XML on stdin,
//! <https://libvirt.org/hooks.html>), and its installation.
//!
//! The hook only reads argv and stdin here; the work is `vgpu_core::Manager::prepare_domain`
//! and `release_domain`. It never calls libvirt (libvirt holds the domain's lock while its hooks
//! run) and needs no environment: libvirt runs hooks with almost none, so `hook install` writes
//! `--root`, `--state-root` and `--nvml-library` into the script it installs.
//!
//! `migrate begin` and `restore begin` (an incoming domain) print the domain XML rewritten to
//! name this host's vGPUs, or nothing when none is named otherwise ([`crate::migrate`]); a
//! failure cancels the migration. `release end migrated` is audited as a migration's.
//!
//! libvirt shows the user what a failing `prepare` hook wrote to stderr, so a failure is one
//! line there and exit status 1, which aborts the start. `release` failures are reported the
//! same way with exit status 0: libvirt ignores it there. `started` and `stopped` open and
//! close the domain's usage intervals, and exit 0 even when the ledger cannot be written.
//! Every other operation exits 0 at once.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use vgpu_core::{manager::HookDomain, state::HookConfig};
use vgpu_domain::xml::{self, DomainXml};

use crate::context::Context;
use crate::render::{self, Line};
use crate::{EXIT_ERROR, EXIT_OK, HookCommand};

/// The script's name under `qemu.d/`.
const SCRIPT_NAME: &str = "vgpu";

/// The line that marks a script as installed by `vgpuctl hook install`.
const MARKER: &str = "# Installed by `vgpuctl hook install`";

/// Runs a `hook` subcommand; returns the exit code.
pub(crate) fn run(ctx: &Context<'_>, command: &HookCommand, out: &mut dyn Write) -> Result<u8> {
    match command {
        HookCommand::Qemu {
            domain,
            op,
            subop,
            extra,
        } => Ok(qemu(ctx, domain, op, subop, extra, out)),
        HookCommand::Install { dir } => install(ctx, dir, out),
        HookCommand::Uninstall { dir } => uninstall(ctx, dir, out),
    }
}

/// The hook itself. Errors are one line on stderr, with what to do about it where the library's
/// facts leave that to the caller (a VF with no vGPU type).
fn qemu(
    ctx: &Context<'_>,
    name: &str,
    op: &str,
    subop: &str,
    extra: &[String],
    out: &mut dyn Write,
) -> u8 {
    let (result, failure) = match (op, subop) {
        // An incoming domain (a migration, or a saved one restored): what is printed replaces
        // its XML; a failure cancels it.
        ("migrate" | "restore", "begin") => (incoming(ctx, out), EXIT_ERROR),
        ("prepare", "begin") => (prepare(ctx), EXIT_ERROR),
        ("started", "begin") => (usage(ctx, name, Usage::Begin), EXIT_OK),
        ("stopped", "end") => (usage(ctx, name, Usage::End), EXIT_OK),
        // libvirt 10.5.0 and later say `migrated` on the source of a migration that succeeded.
        ("release", "end") => (
            release(ctx, extra.first().is_some_and(|e| e == "migrated")),
            EXIT_OK,
        ),
        _ => return EXIT_OK,
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(err) => {
            let chain: Vec<String> = err.chain().map(ToString::to_string).collect();
            // The device's error, under the domain's (`HookDevice`) where it has one.
            let device_error = match crate::core_error(&err, crate::LinkedErrors::NONE) {
                Some(vgpu_core::Error::HookDevice { source, .. }) => Some(source.as_ref()),
                other => other,
            };
            let hint = match device_error {
                Some(vgpu_core::Error::NoTypeForVf { .. }) => {
                    format!(" (hint: {})", crate::entry::NO_TYPE_FOR_VF_HINT)
                }
                Some(vgpu_core::Error::MigrationTypeUnknown { .. }) => {
                    format!(" (hint: {})", crate::entry::MIGRATION_TYPE_UNKNOWN_HINT)
                }
                _ => String::new(),
            };
            // Nothing more can be done when stderr is gone; the audit log has the details.
            let _written = writeln!(
                std::io::stderr(),
                "vgpu hook: {name} {op}: {}{hint}",
                chain.join(": ")
            );
            failure
        }
    }
}

/// Reads the domain XML from stdin, at most `xml::MAX_BYTES`.
fn read_domain() -> Result<DomainXml> {
    Ok(xml::domain_in_bytes(&read_stdin()?)?)
}

/// Stdin's bytes, up to one more than `xml::MAX_BYTES` (which the parser then refuses).
fn read_stdin() -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let bound = u64::try_from(xml::MAX_BYTES).unwrap_or(u64::MAX) + 1;
    std::io::stdin()
        .lock()
        .take(bound)
        .read_to_end(&mut bytes)
        .context("cannot read the domain XML from stdin")?;
    Ok(bytes)
}

/// `migrate begin` and `restore begin`: the XML, rewritten to name this host's vGPUs, on
/// stdout ([`crate::migrate::hook`]).
fn incoming(ctx: &Context<'_>, out: &mut dyn Write) -> Result<()> {
    let bytes = read_stdin()?;
    let text = std::str::from_utf8(&bytes).context("the domain XML is not UTF-8")?;
    crate::migrate::hook(ctx, text, out)
}

fn prepare(ctx: &Context<'_>) -> Result<()> {
    let domain = read_domain()?;
    let config = HookConfig::load(ctx.paths())?;
    let request = HookDomain {
        holder: domain.holder(),
        devices: domain.hostdevs.iter().map(|h| h.device).collect(),
        vgpu_type: domain.vgpu_type,
        flavor: domain.nova_flavor,
    };
    let prepared = ctx.manager().prepare_domain(&request, &config)?;
    tracing::info!(
        domain = request.holder.domain,
        made = prepared.made.len(),
        adopted = prepared.adopted.len(),
        "prepared"
    );
    Ok(())
}

/// The usage ledger's side of `started` and `stopped`.
#[derive(Debug, Clone, Copy)]
enum Usage {
    Begin,
    End,
}

/// Opens (`started`) or closes (`stopped`) the domain's usage intervals. The domain runs
/// either way: a ledger that cannot be written is said in the audit log and on stderr, and
/// the hook exits 0.
fn usage(ctx: &Context<'_>, name: &str, what: Usage) -> Result<()> {
    let domain = read_domain()?;
    let manager = ctx.manager();
    let (action, recorded) = match what {
        Usage::Begin => {
            let devices: Vec<_> = domain.hostdevs.iter().map(|h| h.device).collect();
            (
                "usage-begin",
                manager.usage_begin(&domain.holder(), &devices),
            )
        }
        Usage::End => ("usage-end", manager.usage_end(domain.uuid, None)),
    };
    match recorded {
        Ok(intervals) => {
            tracing::debug!(domain = name, intervals = intervals.len(), action, "usage");
            Ok(())
        }
        Err(err) => {
            manager.usage_lost(action, name, &err);
            Err(err.into())
        }
    }
}

fn release(ctx: &Context<'_>, migrated: bool) -> Result<()> {
    let domain = read_domain()?;
    // A `stopped` whose record was lost (a full disk) is closed here, late rather than never.
    if let Err(err) = ctx.manager().usage_end(domain.uuid, None) {
        ctx.manager().usage_lost("usage-end", &domain.name, &err);
    }
    let released = if migrated {
        ctx.manager()
            .release_migrated_domain(domain.uuid, &domain.name)?
    } else {
        ctx.manager().release_domain(domain.uuid, &domain.name)?
    };
    for left in &released.left {
        tracing::info!(device = %left.made.handle(), reason = left.reason, "left as it is");
    }
    match released.failed.as_slice() {
        [] => Ok(()),
        [(made, err), rest @ ..] => bail!(crate::Refusal::new(
            err.kind(),
            format!(
                "cannot take back {}{}: {}",
                made.handle(),
                if rest.is_empty() {
                    String::new()
                } else {
                    format!(" (and {} more)", rest.len())
                },
                err.chain()
            )
        )),
    }
}

/// What `hook install` and `hook uninstall` did.
#[derive(Debug, Serialize)]
struct Installed {
    path: PathBuf,
    changed: bool,
}

/// `s` quoted for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script `hook install` writes: it runs this `vgpuctl` with the host and state roots (and
/// the NVML library) it was installed with.
fn script(
    exe: &Path,
    root: &Path,
    state_root: Option<&Path>,
    nvml_library: Option<&Path>,
) -> String {
    let mut args = String::new();
    if root != Path::new("/") {
        args.push_str(&format!(" --root {}", quote(&root.to_string_lossy())));
    }
    if let Some(state) = state_root {
        args.push_str(&format!(
            " --state-root {}",
            quote(&state.to_string_lossy())
        ));
    }
    if let Some(library) = nvml_library {
        args.push_str(&format!(
            " --nvml-library {}",
            quote(&library.to_string_lossy())
        ));
    }
    format!(
        "#!/bin/sh\n{MARKER}; `vgpuctl hook uninstall` removes it.\n\
         # libvirt runs it as: {SCRIPT_NAME} DOMAIN OP SUBOP EXTRA, with the domain XML on stdin.\n\
         exec {}{args} hook qemu \"$@\"\n",
        quote(&exe.to_string_lossy())
    )
}

fn script_path(dir: &Path) -> PathBuf {
    dir.join("qemu.d").join(SCRIPT_NAME)
}

/// Reads an existing script at `path`: `None` when there is none, an error when it is not ours.
fn existing(path: &Path) -> Result<Option<String>> {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if !text.lines().any(|l| l.starts_with(MARKER)) {
                bail!(crate::Refusal::new(
                    vgpu_core::ErrorKind::Conflict,
                    format!(
                        "{} exists and was not installed by vgpuctl: remove it or rename it first",
                        path.display()
                    )
                ));
            }
            Ok(Some(text))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn install(ctx: &Context<'_>, dir: &Path, out: &mut dyn Write) -> Result<u8> {
    let cli = ctx.cli();
    let exe = std::env::current_exe()
        .and_then(fs::canonicalize)
        .context("cannot find this vgpuctl's own path")?;
    let absolute = |p: &Path| {
        std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
    };
    let root = absolute(&cli.root)?;
    let state_root = cli.state_root.as_deref().map(absolute).transpose()?;
    let nvml_library = cli.nvml_library.as_deref().map(absolute).transpose()?;
    let text = script(&exe, &root, state_root.as_deref(), nvml_library.as_deref());
    let path = script_path(dir);
    let current = existing(&path)?;
    let executable = fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o111 == 0o111);
    let changed = current.as_deref() != Some(text.as_str()) || !executable;
    if changed {
        let parent = dir.join("qemu.d");
        fs::create_dir_all(&parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        let temp = parent.join(format!(".{SCRIPT_NAME}.tmp-{}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&temp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.set_permissions(fs::Permissions::from_mode(0o755))?;
                f.sync_all()
            })
            .and_then(|()| fs::rename(&temp, &path));
        if let Err(err) = written {
            // The hidden temporary file is all that could be left; the error says why.
            let _removed = fs::remove_file(&temp);
            return Err(err).with_context(|| format!("cannot write {}", path.display()));
        }
    }
    let line = if changed {
        format!(
            "installed {} (libvirt reads its hooks when it starts: restart libvirtd or virtqemud if this is its first QEMU hook)",
            path.display()
        )
    } else {
        format!("{} is installed and up to date", path.display())
    };
    render::emit(
        &Line::new(&Installed { path, changed }, line),
        ctx.format(),
        out,
    )?;
    Ok(EXIT_OK)
}

fn uninstall(ctx: &Context<'_>, dir: &Path, out: &mut dyn Write) -> Result<u8> {
    let path = script_path(dir);
    let changed = match existing(&path)? {
        Some(_) => {
            fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            true
        }
        None => false,
    };
    let line = match changed {
        true => format!("removed {}", path.display()),
        false => format!("{} is not installed", path.display()),
    };
    render::emit(
        &Line::new(&Installed { path, changed }, line),
        ctx.format(),
        out,
    )?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_with_default_root_names_only_the_state_root() {
        assert_eq!(
            script(
                Path::new("/usr/bin/vgpuctl"),
                Path::new("/"),
                Some(Path::new("/srv/it's")),
                None
            ),
            "#!/bin/sh\n# Installed by `vgpuctl hook install`; `vgpuctl hook uninstall` removes it.\n\
             # libvirt runs it as: vgpu DOMAIN OP SUBOP EXTRA, with the domain XML on stdin.\n\
             exec '/usr/bin/vgpuctl' --state-root '/srv/it'\\''s' hook qemu \"$@\"\n"
        );
    }

    #[test]
    fn script_with_nvml_library_passes_it_on() {
        assert_eq!(
            script(
                Path::new("/usr/bin/vgpuctl"),
                Path::new("/"),
                None,
                Some(Path::new("/opt/nvidia/libnvidia-ml.so.1"))
            ),
            "#!/bin/sh\n# Installed by `vgpuctl hook install`; `vgpuctl hook uninstall` removes it.\n\
             # libvirt runs it as: vgpu DOMAIN OP SUBOP EXTRA, with the domain XML on stdin.\n\
             exec '/usr/bin/vgpuctl' --nvml-library '/opt/nvidia/libnvidia-ml.so.1' hook qemu \"$@\"\n"
        );
    }
}
