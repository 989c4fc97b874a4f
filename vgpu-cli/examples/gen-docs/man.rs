//! The man pages of `vgpuctl`, section 8 (it administers the host): `vgpuctl.8` and one page per
//! subcommand, nested ones included (`vgpuctl-create.8`, `vgpuctl-hook-install.8`), rendered
//! from the command-line definition by `clap_mangen`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_mangen::roff::{Roff, bold, roman};

/// Writes the man pages into `dir` (which must exist); returns their paths, `vgpuctl.8` first.
pub(crate) fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut cmd = vgpu_cli::Cli::command().disable_help_subcommand(true);
    // Gives each subcommand its page name (`vgpuctl-create`) and the global options.
    cmd.build();
    let page = Page {
        source: format!("vgpuctl {}", cmd.get_version().unwrap_or_default()),
        exit_status: cmd.get_after_help().map(ToString::to_string),
    };
    let mut written = Vec::new();
    page.write(&cmd, None, dir, &mut written)?;
    Ok(written)
}

/// What every page has: the `.TH` source, and the exit codes (the root's after-help text).
struct Page {
    source: String,
    exit_status: Option<String>,
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
        // No date: the pages of one version are the same whenever they are built.
        let man = clap_mangen::Man::new(cmd.clone())
            .section("8")
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
        part(&|w| man.render_description_section(w))?;
        part(&|w| man.render_options_section(w))?;
        if cmd.has_subcommands() {
            part(&|w| man.render_subcommands_section(w))?;
        }
        let mut roff = Roff::new();
        if let Some(exit_status) = &self.exit_status {
            roff.control("SH", ["EXIT STATUS"])
                .text([roman(exit_status.as_str())]);
        }
        let mut see_also = vec![bold(parent.unwrap_or("mdevctl")), roman("(8)")];
        if parent.is_none() {
            see_also.extend([roman(", "), bold("virsh"), roman("(1)")]);
        }
        roff.control("SH", ["SEE ALSO"]).text(see_also);
        part(&|w| roff.to_writer(w))?;
        let preamble = Roff::new().render().into_bytes();
        let mut page = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let body = match part.strip_prefix(preamble.as_slice()) {
                Some(body) if i > 0 => body,
                _ => part,
            };
            page.extend_from_slice(body);
        }
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(&page)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        let name = cmd.get_display_name().unwrap_or(cmd.get_name());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            self.write(sub, Some(name), dir, written)?;
        }
        Ok(())
    }
}
