//! `vgpuctl top`: the vGPUs in use with their domain, tenant, frame buffer, encoder sessions
//! and utilisation, and the sums per tenant, as a table redrawn every `--interval` on a
//! terminal until `q` (or Esc, or Ctrl-C); one snapshot when stdout is not a terminal.
//!
//! The live screen is the snapshot's own table, drawn on the terminal's alternate screen in
//! raw mode (crossterm), so what a script reads and what a person watches are one rendering.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};

use crate::EXIT_OK;
use crate::context::Context;
use crate::render::{self, Format, Report, Table};
use crate::telemetry::{Sampler, Snapshot};

/// `vgpuctl top`.
pub(crate) fn run(ctx: &Context<'_>, interval: Duration, out: &mut dyn Write) -> Result<u8> {
    let mut sampler = Sampler::new(ctx);
    let terminal = io::stdout().is_terminal() && io::stdin().is_terminal();
    if ctx.format() == Format::Table && terminal {
        live(&mut sampler, interval)?;
    } else {
        render::emit(&sampler.sample()?, ctx.format(), out)?;
    }
    Ok(EXIT_OK)
}

/// `top` for a script: the live screen's table, once.
impl Report for Snapshot {
    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(screen(self).as_bytes())
    }
}

/// Text for a terminal: control characters (from a domain's name or metadata) become `?`.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{} MiB", b / (1024 * 1024)))
}

fn percent(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_owned(), |r| format!("{:.0}%", r * 100.0))
}

fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| printable(&v.to_string()))
}

/// The snapshot as text: the vGPU table, the tenant sums, and where the facts came from.
pub(crate) fn screen(snapshot: &Snapshot) -> String {
    let t = &snapshot.telemetry;
    let mut vgpus = Table::new(&[
        "GPU", "VGPU", "TYPE", "DOMAIN", "TENANT", "FB", "FB USED", "ENC", "SM", "MEM", "ENC%",
        "DEC%",
    ]);
    for v in &t.vgpus {
        let u = &v.utilization;
        vgpus.row(vec![
            v.gpu.to_string(),
            v.id.to_string(),
            printable(v.type_name.as_deref().unwrap_or(&v.type_id)),
            or_dash(v.domain.as_deref()),
            or_dash(v.tenant.as_deref()),
            mib(v.framebuffer_bytes),
            mib(v.framebuffer_used_bytes),
            or_dash(v.encoder_sessions),
            percent(u.sm),
            percent(u.memory),
            percent(u.encoder),
            percent(u.decoder),
        ]);
    }
    let mut tenants = Table::new(&["TENANT", "VGPUS", "FB", "FB USED", "ENC"]);
    for sum in &t.tenants {
        tenants.row(vec![
            or_dash(sum.tenant.as_deref()),
            sum.vgpus.to_string(),
            mib(sum.framebuffer_bytes),
            mib(sum.framebuffer_used_bytes),
            or_dash(sum.encoder_sessions),
        ]);
    }
    let mut out = Vec::new();
    if t.vgpus.is_empty() {
        out.extend_from_slice(b"no vGPUs in use\n");
    } else if let Err(err) = vgpus
        .write(&mut out)
        .and_then(|()| writeln!(out))
        .and_then(|()| tenants.write(&mut out))
    {
        // Writing to memory cannot fail; say so on the screen if it ever does.
        return format!("cannot render the table: {err}\n");
    }
    let nvml = match (&snapshot.nvml.loaded, &snapshot.nvml.reason) {
        (true, _) => format!(
            "NVML: loaded (driver {})",
            snapshot.nvml.driver_version.as_deref().unwrap_or("unknown")
        ),
        (false, reason) => format!("NVML: not loaded: {}", reason.as_deref().unwrap_or("")),
    };
    let libvirt = if snapshot.libvirt.up {
        format!("libvirt: {}", snapshot.libvirt.uri)
    } else {
        format!(
            "libvirt: not reachable at {}: {}",
            snapshot.libvirt.uri,
            snapshot.libvirt.reason.as_deref().unwrap_or("")
        )
    };
    let mut text = String::from_utf8_lossy(&out).into_owned();
    text.push('\n');
    text.push_str(&printable(&nvml));
    text.push('\n');
    text.push_str(&printable(&libvirt));
    text.push('\n');
    text
}

/// Puts the terminal back as it was when dropped: main screen, cursor shown, cooked mode.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(err) = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show) {
            tracing::warn!("cannot leave the alternate screen: {err}");
        }
        if let Err(err) = terminal::disable_raw_mode() {
            tracing::warn!("cannot leave raw mode: {err}");
        }
    }
}

/// Draws `text` from the top left, clipped to the terminal.
fn draw(text: &str) -> io::Result<()> {
    let (columns, rows) = terminal::size()?;
    let mut stdout = io::stdout().lock();
    queue!(
        stdout,
        cursor::MoveTo(0, 0),
        terminal::Clear(terminal::ClearType::All)
    )?;
    for (i, line) in text.lines().take(usize::from(rows)).enumerate() {
        let clipped: String = line.chars().take(usize::from(columns)).collect();
        if i > 0 {
            stdout.write_all(b"\r\n")?;
        }
        stdout.write_all(clipped.as_bytes())?;
    }
    stdout.flush()
}

fn wants_quit(event: &Event) -> bool {
    let Event::Key(key) = event else {
        return false;
    };
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// The live table, until the user quits.
fn live(sampler: &mut Sampler, interval: Duration) -> Result<()> {
    terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
    let _restore = Restore;
    execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)
        .context("cannot switch to the alternate screen")?;
    loop {
        let body = match sampler.sample() {
            Ok(snapshot) => screen(&snapshot),
            // A host that cannot be read now may be readable at the next refresh.
            Err(err) => format!("cannot read the host: {err:#}\n"),
        };
        let text = format!(
            "vgpuctl top: every {} s, q quits\n\n{body}",
            interval.as_secs_f64()
        );
        draw(&text).context("cannot draw on the terminal")?;
        let next = Instant::now() + interval;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if event::poll(left).context("cannot read the terminal")? {
                let event = event::read().context("cannot read the terminal")?;
                if wants_quit(&event) {
                    return Ok(());
                }
                if matches!(event, Event::Resize(..)) {
                    draw(&text).context("cannot draw on the terminal")?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_replaces_escape_sequences() {
        assert_eq!(printable("acme\u{1b}[2J"), "acme?[2J");
    }

    #[test]
    fn wants_quit_on_q_and_ctrl_c_only() {
        let key = |code, modifiers| {
            Event::Key(event::KeyEvent::new_with_kind(
                code,
                modifiers,
                KeyEventKind::Press,
            ))
        };
        assert_eq!(
            [
                key(KeyCode::Char('q'), KeyModifiers::NONE),
                key(KeyCode::Char('c'), KeyModifiers::CONTROL),
                key(KeyCode::Char('c'), KeyModifiers::NONE),
                key(KeyCode::Enter, KeyModifiers::NONE),
            ]
            .map(|e| wants_quit(&e)),
            [true, true, false, false]
        );
    }
}
