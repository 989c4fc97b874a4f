//! What libvirt knows that commands other than the domain commands use: which domains
//! reference which vGPU, and each domain's tenant ([`vgpu_domain::Owners`]).
//!
//! libvirt is an optional source of facts, as NVML is. `vgpuctl` does not link libvirt: it asks
//! `vgpuctl-libvirt owners --json` ([`from_helper`]), and `vgpuctl-libvirt` asks libvirt itself
//! (its own [`Facts`]). Three answers are possible ([`LibvirtFacts`]):
//!
//! | answer | when | what the commands do |
//! |---|---|---|
//! | absent | no URI was named (`--connect`, `VGPU_CONNECT`), and libvirt is not installed: no socket in `/run/libvirt`, no domain in `/etc/libvirt/qemu` | no domain holds anything; nothing said |
//! | answered | libvirt answered | its domains hold what they reference |
//! | unanswered | libvirt, or `vgpuctl-libvirt`, did not answer (its library missing, the daemon down, a remote host unreachable) | one warning; removals are refused until it answers or `--force` |
//!
//! A libvirt that is installed but not running (its socket or a domain's XML is there) does
//! not answer: its domains may hold devices. So does a URI that was named. A host without
//! libvirt's library has no local libvirt daemon either, so its socket is absent and
//! `vgpuctl-libvirt` is never run there. libvirt's files are looked for on this machine and
//! under `--state-root`, which stands for the host's `/` on a simulated host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use vgpu_core::{
    HostPaths,
    manager::DomainReferences,
    model::{Inventory, VgpuHandle},
};
use vgpu_domain::Owners;

use crate::{Cli, LIBVIRT_HELPER};

/// What a command learned from libvirt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibvirtFacts {
    /// This host has no libvirt: no domain can reference a device.
    Absent,
    /// libvirt answered.
    Answered(Owners),
    /// libvirt is there, or may be, but did not answer.
    Unanswered {
        /// The connection URI tried.
        uri: String,
        /// Why it did not answer.
        reason: String,
    },
}

/// A source of [`LibvirtFacts`]; asked again for every sample of `top` and `metrics`.
pub trait Facts: Send {
    /// What libvirt says now about the vGPUs of `inventory`.
    fn owners(&mut self, inventory: &Inventory) -> LibvirtFacts;
}

/// How an executable gets its [`Facts`]: [`from_helper`] in `vgpuctl`, libvirt itself in
/// `vgpuctl-libvirt`.
pub type FactsSource = fn(&Cli) -> Box<dyn Facts>;

/// Whether this host has no libvirt, so no domain can hold a device: no URI was named, and
/// neither a libvirt socket nor a QEMU domain's XML is on this machine or under the state root.
pub fn libvirt_absent(cli: &Cli) -> bool {
    if cli.connect.is_some() {
        return false;
    }
    let paths = cli.paths();
    let places = [
        (PathBuf::from("/run"), PathBuf::from("/etc")),
        (PathBuf::from("/var/run"), PathBuf::from("/etc")),
        (paths.run(), paths.etc()),
    ];
    !places.iter().any(|(run, etc)| libvirt_installed(run, etc))
}

/// Whether libvirt's daemon socket is under `run` or a QEMU domain is defined under `etc`.
fn libvirt_installed(run: &Path, etc: &Path) -> bool {
    let socket = ["libvirt/libvirt-sock", "libvirt/virtqemud-sock"]
        .iter()
        .any(|s| run.join(s).exists());
    let domains = std::fs::read_dir(etc.join("libvirt/qemu")).is_ok_and(|entries| {
        entries
            .filter_map(std::result::Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "xml"))
    });
    socket || domains
}

/// Facts from `vgpuctl-libvirt owners --json`, run from this executable's directory with the
/// same host, state root and URI; libvirt absent without running it when no local libvirt
/// socket exists.
pub fn from_helper(cli: &Cli) -> Box<dyn Facts> {
    Box::new(Helper {
        root: cli.root.clone(),
        state_root: cli.state_root.clone(),
        uri: cli.uri().to_owned(),
        absent: libvirt_absent(cli),
    })
}

struct Helper {
    root: PathBuf,
    state_root: Option<PathBuf>,
    uri: String,
    /// Whether this host has no libvirt ([`libvirt_absent`]), found once.
    absent: bool,
}

impl Facts for Helper {
    fn owners(&mut self, _: &Inventory) -> LibvirtFacts {
        if self.absent {
            return LibvirtFacts::Absent;
        }
        match self.ask() {
            Ok(owners) => LibvirtFacts::Answered(owners),
            Err(reason) => LibvirtFacts::Unanswered {
                uri: self.uri.clone(),
                reason,
            },
        }
    }
}

impl Helper {
    /// Runs the helper; the owners it printed, or why there are none.
    fn ask(&self) -> Result<Owners, String> {
        let exe = std::env::current_exe()
            .map_err(|err| format!("cannot find {LIBVIRT_HELPER}: {err}"))?;
        let helper = exe.with_file_name(LIBVIRT_HELPER);
        let mut command = Command::new(&helper);
        command.arg("--root").arg(&self.root);
        if let Some(state) = &self.state_root {
            command.arg("--state-root").arg(state);
        }
        command.args(["--connect", &self.uri, "--json", "owners"]);
        let output = command
            .output()
            .map_err(|err| format!("cannot run {}: {err}", helper.display()))?;
        if output.status.success() {
            return serde_json::from_slice(&output.stdout).map_err(|err| {
                format!(
                    "{} printed what is not an owners report: {err}",
                    helper.display()
                )
            });
        }
        if let Some(unloadable) = crate::entry::LibvirtUnloadable::from_output(&output) {
            return Err(format!(
                "{unloadable} ({})",
                crate::entry::LIBVIRT_UNLOADABLE_HINT
            ));
        }
        // Its own errors are JSON on stdout; the dynamic loader's (exit 127) are text on
        // stderr.
        let said = serde_json::from_slice::<serde_json::Value>(&output.stdout)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).trim().to_owned());
        Err(format!(
            "{} failed ({}): {said}",
            helper.display(),
            output.status
        ))
    }
}

/// The core's removal policy input for `facts`: each device with the domains that reference
/// it, live or in their configuration, sorted.
pub(crate) fn domain_references(facts: &LibvirtFacts) -> DomainReferences {
    match facts {
        LibvirtFacts::Absent => DomainReferences::NoLibvirt,
        LibvirtFacts::Unanswered { uri, reason } => DomainReferences::Unanswered {
            uri: uri.clone(),
            reason: reason.clone(),
        },
        LibvirtFacts::Answered(owners) => {
            let mut refs: BTreeMap<VgpuHandle, Vec<String>> = BTreeMap::new();
            for owned in &owners.vgpus {
                refs.entry(owned.id)
                    .or_default()
                    .extend(owned.holders.iter().map(|h| h.holder.domain.clone()));
            }
            for reference in &owners.missing {
                refs.entry(reference.device)
                    .or_default()
                    .push(reference.domain.clone());
            }
            for domains in refs.values_mut() {
                domains.sort();
                domains.dedup();
            }
            DomainReferences::Known(refs)
        }
    }
}

/// The core's removal policy input for the host at `paths`, with `facts` asked now: each
/// device with the domains that reference it.
///
/// # Errors
///
/// When the host cannot be read.
pub fn references_now(
    facts: &mut dyn Facts,
    paths: &HostPaths,
) -> anyhow::Result<DomainReferences> {
    let inventory = vgpu_core::discover(paths)?;
    Ok(domain_references(&facts.owners(&inventory)))
}

/// The vGPUs that a libvirt domain `counts` holds, each with the first such domain.
fn held_by(
    facts: &LibvirtFacts,
    counts: fn(&vgpu_domain::Hold) -> bool,
) -> BTreeMap<VgpuHandle, String> {
    let LibvirtFacts::Answered(owners) = facts else {
        return BTreeMap::new();
    };
    owners
        .vgpus
        .iter()
        .filter_map(|owned| {
            let holder = owned.holders.iter().find(|h| counts(h))?;
            Some((owned.id, holder.holder.domain.clone()))
        })
        .collect()
}

/// The vGPUs (VFs and mdevs) that libvirt domains Nova does not manage hold, each with the
/// first such domain (`nova-config` leaves them out).
pub(crate) fn foreign_vgpus(facts: &LibvirtFacts) -> BTreeMap<VgpuHandle, String> {
    held_by(facts, |h| !h.nova)
}

/// The vGPUs that any libvirt domain on the host holds, each with the first (`kubevirt-config`
/// leaves them out: KubeVirt's domains run in its pods, not in the host's libvirt).
pub(crate) fn held_vgpus(facts: &LibvirtFacts) -> BTreeMap<VgpuHandle, String> {
    held_by(facts, |_| true)
}

/// Why libvirt could not say who holds what, when it did not answer: the warning a report
/// that leaves held vGPUs out gives instead.
pub(crate) fn unanswered(facts: &LibvirtFacts) -> Option<String> {
    match facts {
        LibvirtFacts::Unanswered { uri, reason } => {
            Some(format!("libvirt at {uri} did not answer: {reason}"))
        }
        LibvirtFacts::Absent | LibvirtFacts::Answered(_) => None,
    }
}
