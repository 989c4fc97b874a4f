//! The man pages of `vgpuctl`, section 8 (it administers the host): `vgpuctl.8` and one page per
//! subcommand, nested ones included (`vgpuctl-create.8`, `vgpuctl-hook-install.8`), rendered
//! from the command-line definition by `clap_mangen`; and the file formats of section 5,
//! written by hand: `vgpu-host.toml.5` (the desired state), `vgpu-tenants.toml.5` (the tenant
//! policy), `vgpu-hook.toml.5` (the hook's settings) and `vgpu-usage.toml.5` (the ledger's).
//!
//! Each page has the sections of man-pages(7): NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXIT
//! STATUS, ENVIRONMENT, FILES (the root page), EXAMPLES where there are some, SEE ALSO. The
//! roff is then tidied so that `mandoc -Tlint` and `man --warnings` find nothing (see [`tidy`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_mangen::roff::{Roff, bold, italic, roman};

#[path = "manual.rs"]
mod manual;

/// The file formats' pages, by file name, with `@DATE@` and `@SOURCE@` for the title line's.
const FORMAT_PAGES: [(&str, &str); 4] = [
    ("vgpu-host.toml.5", include_str!("vgpu-host.toml.5")),
    ("vgpu-tenants.toml.5", include_str!("vgpu-tenants.toml.5")),
    ("vgpu-hook.toml.5", include_str!("vgpu-hook.toml.5")),
    ("vgpu-usage.toml.5", include_str!("vgpu-usage.toml.5")),
];

/// The widest input line `mandoc -Tlint` accepts without a note.
const LINE_MAX: usize = 80;

/// Writes the section-8 pages into `dir` (which must exist); returns their paths, `vgpuctl.8`
/// first.
pub(crate) fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut cmd = vgpu_cli::Cli::command().disable_help_subcommand(true);
    // Gives each subcommand its page name (`vgpuctl-create`) and the global options.
    cmd.build();
    let page = Page {
        source: source(&cmd),
        date: date()?,
        environment: environment(&cmd),
    };
    let mut written = Vec::new();
    page.write(&cmd, None, dir, &mut written)?;
    Ok(written)
}

/// Writes the file formats' pages into `dir` (which must exist); returns their paths,
/// `vgpu-host.toml.5` first.
pub(crate) fn write_format_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let cmd = vgpu_cli::Cli::command();
    let (date, source) = (date()?, source(&cmd));
    let mut written = Vec::new();
    for (name, page) in FORMAT_PAGES {
        let text = page.replace("@DATE@", &date).replace("@SOURCE@", &source);
        let path = dir.join(name);
        std::fs::write(&path, tidy(&text))
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The title line's source: `vgpuctl VERSION`.
fn source(cmd: &clap::Command) -> String {
    format!("vgpuctl {}", cmd.get_version().unwrap_or_default())
}

/// The title line's date: `SOURCE_DATE_EPOCH`'s day when set (as Debian's builds set it, from
/// the changelog), so that the pages of one release are the same whenever they are built;
/// today's otherwise.
fn date() -> Result<String> {
    let now = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => {
            let seconds: i64 = epoch
                .trim()
                .parse()
                .with_context(|| format!("SOURCE_DATE_EPOCH={epoch:?} is not whole seconds"))?;
            jiff::Timestamp::from_second(seconds)
                .with_context(|| format!("SOURCE_DATE_EPOCH={epoch:?} is out of range"))?
        }
        Err(_) => jiff::Timestamp::now(),
    };
    Ok(now.strftime("%Y-%m-%d").to_string())
}

/// ENVIRONMENT: every option that an environment variable sets, then `VGPU_LOG`.
fn environment(cmd: &clap::Command) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = cmd
        .get_arguments()
        .filter_map(|arg| {
            let var = arg.get_env()?.to_string_lossy().into_owned();
            let long = arg.get_long()?;
            let help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            let mut chars = help.chars();
            let help: String = chars
                .next()
                .map(|first| first.to_lowercase().chain(chars).collect())
                .unwrap_or_default();
            Some((var, format!("As --{long}: {help}")))
        })
        .collect();
    vars.push((
        "VGPU_LOG".to_owned(),
        "What to log on stderr, as a tracing filter: a level (warn, info, debug, trace) or \
         per-crate levels (vgpu_core=debug). It overrides -v."
            .to_owned(),
    ));
    vars
}

/// What every page shares.
struct Page {
    source: String,
    date: String,
    environment: Vec<(String, String)>,
}

impl Page {
    /// Writes `cmd`'s page, then its subcommands'; `parent` is the page that lists `cmd`.
    fn write(
        &self,
        cmd: &clap::Command,
        parent: Option<&str>,
        dir: &Path,
        written: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
        let man = clap_mangen::Man::new(cmd.clone())
            .title(name.to_uppercase())
            .section("8")
            .date(&self.date)
            .source(&self.source)
            .manual("System Administration");
        let path = dir.join(man.get_filename());
        // Each part comes with roff's preamble (the apostrophe string): the page keeps the first.
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut part = |render: &dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()>| {
            let mut buf = Vec::new();
            render(&mut buf).map(|()| parts.push(buf))
        };
        part(&|w| man.render_title(w))?;
        part(&|w| man.render_name_section(w))?;
        part(&|w| man.render_synopsis_section(w))?;
        if parent.is_none() {
            part(&|w| description(w))?;
        } else {
            part(&|w| man.render_description_section(w))?;
        }
        part(&|w| man.render_options_section(w))?;
        if cmd.has_subcommands() {
            part(&|w| man.render_subcommands_section(w))?;
        }
        let examples = if parent.is_none() {
            manual::EXAMPLES
        } else {
            manual::examples(&name)
        };
        part(&|w| self.tail(parent, &name, examples).to_writer(w))?;
        let preamble = Roff::new().render().into_bytes();
        let mut page = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let body = match part.strip_prefix(preamble.as_slice()) {
                Some(body) if i > 0 => body,
                _ => part,
            };
            page.extend_from_slice(body);
        }
        let page = String::from_utf8(page).context("a page is not UTF-8")?;
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(tidy(&page).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            self.write(sub, Some(&name), dir, written)?;
        }
        Ok(())
    }

    /// EXIT STATUS, ENVIRONMENT, FILES (the root page only), EXAMPLES and SEE ALSO.
    fn tail(&self, parent: Option<&str>, name: &str, examples: &[manual::Example]) -> Roff {
        let mut roff = Roff::new();
        roff.control("SH", ["EXIT STATUS"]);
        for (code, meaning) in vgpu_cli::EXIT_CODES {
            roff.control("TP", [])
                .text([bold(code.to_string())])
                .text([roman(meaning)]);
        }
        roff.control("TP", [])
            .text([bold("128"), roman("+"), italic("N")])
            .text([
                roman("stopped by signal "),
                italic("N"),
                roman(", after undoing what it began"),
            ]);
        roff.control("SH", ["ENVIRONMENT"]);
        for (var, help) in &self.environment {
            roff.control("TP", [])
                .text([bold(var.as_str())])
                .text([roman(help.as_str())]);
        }
        if parent.is_none() {
            roff.control("SH", ["FILES"]);
            for (path, what) in manual::FILES {
                roff.control("TP", [])
                    .text([italic(*path)])
                    .text([roman(*what)]);
            }
            roff.control("PP", []).text([roman(
                "With --state-root DIR (or VGPU_STATE_ROOT) they are under DIR instead of /.",
            )]);
        }
        if !examples.is_empty() {
            roff.control("SH", ["EXAMPLES"]);
            for (i, (what, command)) in examples.iter().enumerate() {
                if i > 0 {
                    roff.control("PP", []);
                }
                roff.text([roman(*what)]);
                roff.control("PP", [])
                    .control("RS", ["4"])
                    .control("EX", []);
                roff.text([roman(*command)]);
                roff.control("EE", []).control("RE", []);
            }
        }
        roff.control("SH", ["SEE ALSO"]);
        let mut see_also: Vec<(&str, &str)> = match parent {
            Some(parent) => vec![(parent, "8")],
            None => Vec::new(),
        };
        if parent.is_none() || matches!(name, "vgpuctl-plan" | "vgpuctl-apply" | "vgpuctl-assert") {
            see_also.extend(manual::SEE_ALSO.iter().copied());
        }
        let mut inlines = Vec::new();
        for (i, (page, section)) in see_also.iter().enumerate() {
            if i > 0 {
                inlines.push(roman(", "));
            }
            inlines.extend([bold(*page), roman(format!("({section})"))]);
        }
        roff.text(inlines);
        roff
    }
}

/// The root page's DESCRIPTION: [`manual::DESCRIPTION`], a paragraph each.
fn description(w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut roff = Roff::new();
    roff.control("SH", ["DESCRIPTION"]);
    for (i, paragraph) in manual::DESCRIPTION.iter().enumerate() {
        if i > 0 {
            roff.control("PP", []);
        }
        roff.text([roman(*paragraph)]);
    }
    roff.to_writer(w)
}

/// Makes a page lint-clean without changing what it shows:
/// - text lines are folded at a space to at most [`LINE_MAX`] bytes (roff fills them again),
///   except between `.EX` and `.EE` or `.nf` and `.fi`, and a line that starts with a blank,
///   where a line is a line;
/// - trailing blanks go;
/// - `.br`, a blank line, `.br` (clap_mangen's gap before a list of values) becomes `.sp`.
pub(crate) fn tidy(page: &str) -> String {
    let page = page.replace("\n.br\n\n.br\n", "\n.sp\n");
    let mut out = String::with_capacity(page.len());
    let mut literal = false;
    for line in page.lines() {
        let line = line.trim_end();
        match line {
            ".EX" | ".nf" => literal = true,
            ".EE" | ".fi" => literal = false,
            _ => {}
        }
        // A line that starts with a blank is set on a line of its own (a table's row).
        if literal || line.starts_with(['.', '\'', ' ']) {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut rest = line;
        while rest.len() > LINE_MAX {
            // The last space that is not escaped (`\ `) at or before the limit; else the first.
            let cut = rest
                .char_indices()
                .filter(|&(i, c)| c == ' ' && i > 0 && !rest[..i].ends_with('\\'))
                .map(|(i, _)| i)
                .take_while(|&i| i <= LINE_MAX)
                .last()
                .or_else(|| {
                    rest.char_indices()
                        .find(|&(i, c)| c == ' ' && i > 0 && !rest[..i].ends_with('\\'))
                        .map(|(i, _)| i)
                });
            let Some(cut) = cut else { break };
            out.push_str(&rest[..cut]);
            out.push('\n');
            rest = rest[cut + 1..].trim_start_matches(' ');
            // A folded line must not begin as a control line.
            if rest.starts_with('.') || rest.starts_with('\'') {
                out.push_str("\\&");
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}
