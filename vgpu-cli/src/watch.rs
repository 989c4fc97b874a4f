//! `vgpuctl watch`: the host's GPU, VF and mediated-device events as they happen, each with the
//! change it made to the inventory, one line (or one JSON object) per event, until SIGINT or
//! SIGTERM.
//!
//! Events come from `vgpu_core::host::UeventSource`: udev's monitor (or the kernel's, where no
//! udev daemon runs) on a real host, the simulator's uevent log on a simulated one. The
//! inventory is read once when the watch starts listening; each event names a device, whose
//! GPU is read again (`vgpu_core::discovery::discover_gpu`) and compared with what was known
//! (`vgpu_core::model::delta::InventoryDelta`). Events that concern no GPU (a NIC's driver binding) are not
//! shown. When several events arrive together (a VF count written, which adds and binds each
//! VF), the first one read carries the whole change and the others none.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context as _, Result};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use serde::Serialize;

use vgpu_core::{
    ErrorKind,
    host::{Uevent, UeventAction, UeventSource},
    model::{Gpu, Warning, delta::InventoryDelta, pci::PciAddress},
};

use crate::EXIT_OK;
use crate::context::Context;
use crate::render::{self, Report};

/// The subsystems watched: PCI functions (GPUs and VFs) and mediated devices.
const SUBSYSTEMS: [&str; 2] = ["pci", "mdev"];

/// How long one wait for an event lasts before the signals are looked at again.
const TICK: Duration = Duration::from_millis(100);

/// One event, what it changed, and the problems met reading its GPU again.
struct Event<'a> {
    event: &'a Uevent,
    gpu: PciAddress,
    delta: &'a InventoryDelta,
    warnings: &'a [Warning],
}

/// One event as `watch --json` prints it.
#[derive(Debug, Serialize)]
struct EventJson<'a> {
    seqnum: u64,
    action: UeventAction,
    subsystem: &'a str,
    device: &'a str,
    devpath: &'a str,
    driver: Option<&'a str>,
    mdev_state: Option<&'a str>,
    gpu: PciAddress,
    delta: &'a InventoryDelta,
    warnings: &'a [Warning],
}

/// SIGINT and SIGTERM, blocked on this thread and read from a signalfd instead, so that the
/// watch ends between two events with its output flushed. The mask is put back on drop.
struct Signals {
    fd: SignalFd,
    previous: SigSet,
}

impl Signals {
    fn block() -> Result<Self> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        let previous = set
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .context("cannot block SIGINT and SIGTERM")?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .context("cannot open a signalfd for SIGINT and SIGTERM")?;
        Ok(Self { fd, previous })
    }

    /// Whether SIGINT or SIGTERM came.
    fn received(&self) -> Result<bool> {
        Ok(self
            .fd
            .read_signal()
            .context("cannot read the signalfd")?
            .is_some())
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        if let Err(errno) = self.previous.thread_set_mask() {
            tracing::error!(%errno, "cannot restore the signal mask");
        }
    }
}

/// What the watch knows of the host: every GPU by address.
type Known = BTreeMap<PciAddress, Gpu>;

impl Serialize for Event<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.event;
        EventJson {
            seqnum: event.seqnum,
            action: event.action,
            subsystem: &event.subsystem,
            device: event.sysname(),
            devpath: &event.devpath,
            driver: event.driver.as_deref(),
            mdev_state: event.mdev_state(),
            gpu: self.gpu,
            delta: self.delta,
            warnings: self.warnings,
        }
        .serialize(serializer)
    }
}

impl Report for Event<'_> {
    fn table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        write_line(out, self.event, self.gpu, self.delta, self.warnings)
    }
}

/// Runs `watch` until SIGINT or SIGTERM; returns the exit code. Each event is one line (one
/// JSON object with `--json`).
pub(crate) fn run(ctx: &Context<'_>, out: &mut dyn Write) -> Result<u8> {
    let paths = ctx.paths();
    let format = ctx.format().streamed();
    let signals = Signals::block()?;
    // Listening first, then reading: a change in between is heard (with no delta), never lost.
    let mut source = UeventSource::open(paths, &SUBSYSTEMS)
        .with_context(|| format!("cannot watch the host at {}", paths.root().display()))?;
    let mut known = read_all(ctx)?;
    writeln!(
        std::io::stderr().lock(),
        "vgpuctl: watching {} uevents of {} GPU(s); SIGINT or SIGTERM ends",
        source.origin(),
        known.len()
    )?;
    while !signals.received()? {
        let Some(event) = source.next(TICK).context("cannot read uevents")? else {
            continue;
        };
        let Some((gpu, delta, warnings)) = apply(ctx, &mut known, &event)? else {
            continue;
        };
        let shown = Event {
            event: &event,
            gpu,
            delta: &delta,
            warnings: &warnings,
        };
        render::emit(&shown, format, out)?;
        out.flush()?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn read_all(ctx: &Context<'_>) -> Result<Known> {
    let inventory = ctx.inventory()?;
    Ok(inventory.gpus.into_iter().map(|g| (g.address, g)).collect())
}

/// Reads again the GPU `event` concerns and records it in `known`; returns the GPU, what
/// changed and the problems met reading it, or `None` when the event concerns no GPU.
fn apply(
    ctx: &Context<'_>,
    known: &mut Known,
    event: &Uevent,
) -> Result<Option<(PciAddress, InventoryDelta, Vec<Warning>)>> {
    let Some(gpu) = affected_gpu(ctx, known, event)? else {
        return Ok(None);
    };
    let (now, warnings) = match vgpu_core::discovery::discover_gpu(ctx.paths(), gpu) {
        Ok((now, warnings)) => (Some(now), warnings),
        Err(err) if err.kind() == ErrorKind::NotFound => (None, Vec::new()),
        Err(err) => return Err(err).with_context(|| format!("cannot read GPU {gpu}")),
    };
    let delta = InventoryDelta::between(known.get(&gpu), now.as_ref());
    match now {
        Some(now) => known.insert(gpu, now),
        None => known.remove(&gpu),
    };
    Ok(Some((gpu, delta, warnings)))
}

/// The GPU an event concerns: the nearest PCI function of its devpath (the device itself, or
/// a mediated device's parent) that is a known GPU or a VF of one; failing that, the GPU the
/// host has that function as (a GPU that appeared, a new VF's PF).
fn affected_gpu(ctx: &Context<'_>, known: &Known, event: &Uevent) -> Result<Option<PciAddress>> {
    let addresses = event.pci_addresses();
    let of = |gpus: &Known, address: PciAddress| {
        gpus.values()
            .find(|g| g.address == address || g.vfs.iter().any(|v| v.address == address))
            .map(|g| g.address)
    };
    if let Some(gpu) = addresses.iter().find_map(|a| of(known, *a)) {
        return Ok(Some(gpu));
    }
    if addresses.is_empty() {
        return Ok(None);
    }
    let now = read_all(ctx)?;
    Ok(addresses.iter().find_map(|a| of(&now, *a)))
}

/// One event for people: action, subsystem, device, driver, GPU, then what changed.
fn write_line(
    out: &mut dyn Write,
    event: &Uevent,
    gpu: PciAddress,
    delta: &InventoryDelta,
    warnings: &[Warning],
) -> std::io::Result<()> {
    let mut changes: Vec<String> = Vec::new();
    changes.extend(
        delta
            .added
            .iter()
            .map(|i| format!("+{} {}", kind(i.kind), i.id)),
    );
    changes.extend(
        delta
            .removed
            .iter()
            .map(|i| format!("-{} {}", kind(i.kind), i.id)),
    );
    changes.extend(delta.changed.iter().map(|c| {
        format!(
            "{} {} {}: {} -> {}",
            kind(c.kind),
            c.id,
            c.field,
            c.from.as_deref().unwrap_or("none"),
            c.to.as_deref().unwrap_or("none")
        )
    }));
    let state = event
        .mdev_state()
        .map_or_else(String::new, |s| format!(" MDEV_STATE={s}"));
    writeln!(
        out,
        "{} {} {} driver={}{state} gpu={gpu}: {}",
        event.action,
        event.subsystem,
        event.sysname(),
        event.driver.as_deref().unwrap_or("none"),
        if changes.is_empty() {
            "no change".to_owned()
        } else {
            changes.join(", ")
        }
    )?;
    for warning in warnings {
        writeln!(out, "  warning: {}: {}", warning.device, warning.message)?;
    }
    Ok(())
}

fn kind(kind: vgpu_core::model::delta::DeltaKind) -> &'static str {
    match kind {
        vgpu_core::model::delta::DeltaKind::Gpu => "gpu",
        vgpu_core::model::delta::DeltaKind::Vf => "vf",
        vgpu_core::model::delta::DeltaKind::Vgpu => "vgpu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(line: &str) -> Uevent {
        Uevent::parse_line(line).expect("a uevent line")
    }

    #[test]
    fn write_line_vf_bind_shows_driver_change() {
        let delta = InventoryDelta {
            changed: vec![vgpu_core::model::delta::DeltaChange {
                kind: vgpu_core::model::delta::DeltaKind::Vf,
                id: "0000:4d:00.1".to_owned(),
                field: "driver",
                from: None,
                to: Some("i915".to_owned()),
            }],
            ..InventoryDelta::default()
        };
        let mut out = Vec::new();
        write_line(
            &mut out,
            &event("8 bind /devices/pci0000:4c/0000:4c:00.0/0000:4d:00.1 pci DRIVER=i915"),
            "0000:4d:00.0".parse().expect("address"),
            &delta,
            &[],
        )
        .expect("written");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "bind pci 0000:4d:00.1 driver=i915 gpu=0000:4d:00.0: vf 0000:4d:00.1 driver: none -> i915\n"
        );
    }

    #[test]
    fn write_line_empty_delta_says_no_change() {
        let mut out = Vec::new();
        write_line(
            &mut out,
            &event(
                "9 change /devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0 pci DRIVER=nvidia MDEV_STATE=registered",
            ),
            "0000:3b:00.0".parse().expect("address"),
            &InventoryDelta::default(),
            &[],
        )
        .expect("written");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "change pci 0000:3b:00.0 driver=nvidia MDEV_STATE=registered gpu=0000:3b:00.0: no change\n"
        );
    }
}
