//! The man-page generator of `examples/gen-docs`: `vgpuctl.8`, one page per subcommand, each
//! with its own options.

#[path = "../../examples/gen-docs/man.rs"]
mod man;

use std::path::Path;

fn pages() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let written = man::write_man_pages(dir.path()).expect("pages written");
    let names = written
        .iter()
        .map(|p| {
            p.file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    (dir, names)
}

fn page(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).expect("page readable")
}

#[test]
fn man_pages_are_the_root_then_one_per_subcommand() {
    let (_dir, names) = pages();

    assert_eq!(
        names,
        [
            "vgpuctl.8",
            "vgpuctl-list.8",
            "vgpuctl-types.8",
            "vgpuctl-check.8",
            "vgpuctl-tenants.8",
            "vgpuctl-can-host.8",
            "vgpuctl-migration-metadata.8",
            "vgpuctl-sriov.8",
            "vgpuctl-create.8",
            "vgpuctl-destroy.8",
            "vgpuctl-define.8",
            "vgpuctl-undefine.8",
            "vgpuctl-start.8",
            "vgpuctl-stop.8",
            "vgpuctl-bind.8",
            "vgpuctl-unbind.8",
            "vgpuctl-restore.8",
            "vgpuctl-provision.8",
            "vgpuctl-watch.8",
            "vgpuctl-attach.8",
            "vgpuctl-detach.8",
            "vgpuctl-owners.8",
            "vgpuctl-plan.8",
            "vgpuctl-apply.8",
            "vgpuctl-assert.8",
            "vgpuctl-place.8",
            "vgpuctl-sched.8",
            "vgpuctl-size-mode.8",
            "vgpuctl-nova-config.8",
            "vgpuctl-kubevirt-config.8",
            "vgpuctl-top.8",
            "vgpuctl-metrics.8",
            "vgpuctl-isolation.8",
            "vgpuctl-usage.8",
            "vgpuctl-hook.8",
            "vgpuctl-hook-qemu.8",
            "vgpuctl-hook-install.8",
            "vgpuctl-hook-uninstall.8",
            "vgpuctl-completions.8",
        ]
    );
}

#[test]
fn man_pages_files_are_the_pages_written() {
    let (dir, names) = pages();

    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .expect("readable")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut sorted = names;
    sorted.sort();

    assert_eq!(files, sorted);
}

#[test]
fn man_page_root_is_section_8_listing_subcommand_pages() {
    let (dir, _names) = pages();

    let root = page(dir.path(), "vgpuctl.8");

    let title = root.lines().nth(2).expect("a title line");
    let version = env!("CARGO_PKG_VERSION");
    let date = title
        .strip_prefix(".TH VGPUCTL 8 ")
        .and_then(|rest| {
            rest.strip_suffix(&format!(" \"vgpuctl {version}\" \"System Administration\""))
        })
        .expect("title, section, date, source, manual");
    assert!(
        jiff::civil::Date::strptime("%Y-%m-%d", date).is_ok(),
        "{date}"
    );
    assert_eq!(root.matches(".ds Aq").count(), 2);
    assert!(root.contains(
        ".SH NAME\nvgpuctl \\- Manage vGPUs and SR\\-IOV virtual functions on a KVM host\n"
    ));
    assert!(root.contains("vgpuctl\\-create(8)"));
    assert!(root.contains("vgpuctl\\-hook(8)"));
}

#[test]
fn man_page_root_has_the_sections_of_a_man_page() {
    let (dir, _names) = pages();

    let root = page(dir.path(), "vgpuctl.8");

    let sections: Vec<&str> = root
        .lines()
        .filter_map(|l| l.strip_prefix(".SH "))
        .collect();
    assert_eq!(
        sections,
        [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "\"GLOBAL OPTIONS\"",
            "SUBCOMMANDS",
            "\"EXIT STATUS\"",
            "ENVIRONMENT",
            "FILES",
            "EXAMPLES",
            "\"SEE ALSO\""
        ]
    );
    let environment: Vec<&str> = root
        .lines()
        .skip_while(|l| *l != ".SH ENVIRONMENT")
        .take_while(|l| *l != ".SH FILES")
        .filter_map(|l| l.strip_prefix("\\fB").and_then(|l| l.strip_suffix("\\fR")))
        .collect();
    assert_eq!(
        environment,
        [
            "VGPU_ROOT",
            "VGPU_STATE_ROOT",
            "VGPU_CONNECT",
            "VGPU_NVML_LIBRARY",
            "VGPU_LOG"
        ]
    );
    for file in [
        "/etc/mdevctl.d/",
        "/run/vgpu/lock",
        "/var/log/vgpu/audit.jsonl",
        "/etc/vgpu/hook.toml",
    ] {
        assert!(
            root.contains(&format!(".TP\n\\fI{}\\fR\n", file.replace('-', "\\-"))),
            "{file}"
        );
    }
    assert!(root.ends_with(
        ".SH \"SEE ALSO\"\n\\fBvgpu\\-host.toml\\fR(5), \\fBvgpu\\-tenants.toml\\fR(5), \\fBmdevctl\\fR(8),\n\\fBvirsh\\fR(1), \\fBnvidia\\-smi\\fR(1)\n"
    ));
}

/// Every page, `vgpu-host.toml.5` included, passes the two linters an operator's system has:
/// `mandoc -Tlint` (every level, style included) and `man --warnings`.
#[test]
fn man_pages_pass_mandoc_lint_and_man_warnings() {
    let (dir, names) = pages();
    let formats = man::write_format_pages(dir.path()).expect("the section-5 pages written");
    let mut paths: Vec<std::path::PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
    paths.extend(formats);

    let lint = std::process::Command::new("mandoc")
        .arg("-Tlint")
        .args(&paths)
        .output()
        .expect("mandoc runs (Debian package mandoc)");
    assert_eq!(String::from_utf8_lossy(&lint.stdout), "");
    assert_eq!(String::from_utf8_lossy(&lint.stderr), "");
    assert!(lint.status.success());
    for path in &paths {
        let out = std::process::Command::new("man")
            .args(["--warnings", "-E", "UTF-8", "-l"])
            .arg(path)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .expect("man runs (Debian package man-db)");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "",
            "{}",
            path.display()
        );
        assert!(out.status.success(), "{}", path.display());
        assert!(!out.stdout.is_empty(), "{}", path.display());
    }
}

/// The pages' examples are commands vgpuctl takes: each `vgpuctl` line parses.
#[test]
fn man_page_examples_parse() {
    use clap::Parser as _;

    let (dir, names) = pages();
    let mut parsed = 0;

    for name in &names {
        let text = page(dir.path(), name);
        let mut in_example = false;
        for line in text.lines() {
            match line {
                ".EX" => in_example = true,
                ".EE" => in_example = false,
                _ if in_example && line.starts_with("vgpuctl ") => {
                    let words = line.replace("\\-", "-");
                    let argv: Vec<&str> = words.split_whitespace().collect();
                    if let Err(err) = vgpu_cli::Cli::try_parse_from(&argv) {
                        panic!("{name}: {line}: {err}");
                    }
                    parsed += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(parsed, 20);
}

#[test]
fn exit_codes_in_help_are_the_documented_ones() {
    use clap::CommandFactory as _;

    let help = vgpu_cli::Cli::command()
        .get_after_help()
        .expect("the root's after-help")
        .to_string();
    let listed: Vec<String> = vgpu_cli::EXIT_CODES
        .iter()
        .map(|(code, meaning)| format!("{code} {meaning}"))
        .collect();

    assert_eq!(help, format!("Exit codes: {}.", listed.join(", ")));
}

#[test]
fn host_toml_page_is_section_5_with_every_key() {
    let dir = tempfile::tempdir().expect("temporary directory");

    let paths = man::write_format_pages(dir.path()).expect("written");
    let path = &paths[0];

    assert_eq!(*path, dir.path().join("vgpu-host.toml.5"));
    let text = std::fs::read_to_string(path).expect("readable");
    assert!(text.starts_with(".TH VGPU-HOST.TOML 5 "));
    assert!(!text.contains('@'), "a placeholder left");
    for key in [
        "version",
        "all",
        "address",
        "model",
        "vendor",
        "numa",
        "optional",
        "sizes",
        "types",
        "vfs",
        "series",
        "round_up",
        "persistence",
        "vf_driver",
        "scheduler",
        "mig",
        "tenant",
        "size_mode",
    ] {
        assert!(text.contains(&format!("\n.B {key}\n")), "{key}");
    }
}

/// `gen-docs --help` prints its usage and writes nothing; a stray option is a usage error.
#[test]
fn gen_docs_help_prints_usage_and_writes_nothing() {
    let exe = std::env::current_exe().expect("test binary");
    let gen_docs = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE")
        .join("examples/gen-docs");
    let dir = tempfile::tempdir().expect("temporary directory");

    let help = std::process::Command::new(&gen_docs)
        .arg("--help")
        .current_dir(dir.path())
        .output()
        .expect("gen-docs runs (cargo test builds the examples)");
    let stray = std::process::Command::new(&gen_docs)
        .arg("--out")
        .current_dir(dir.path())
        .output()
        .expect("gen-docs runs");

    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).starts_with("usage: gen-docs OUTDIR\n"));
    assert_eq!(stray.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&stray.stderr).starts_with("usage: gen-docs OUTDIR\n"));
    assert_eq!(std::fs::read_dir(dir.path()).expect("readable").count(), 0);
}

#[test]
fn man_page_create_has_its_own_options() {
    let (dir, _names) = pages();

    let create = page(dir.path(), "vgpuctl-create.8");

    assert!(create.contains(".TH VGPUCTL-CREATE 8 "));
    assert!(create.contains("\\fB\\-\\-type\\fR \\fI<TYPE>\\fR"));
    assert!(create.contains("\\fB\\-\\-uuid\\fR \\fI<UUID>\\fR"));
    assert!(create.contains("\n\\fB\\-\\-define\\fR\n"));
    assert!(create.contains("\n\\fB\\-\\-manual\\fR\n"));
}

#[test]
fn man_page_create_lacks_other_subcommands_options() {
    let (dir, _names) = pages();

    let create = page(dir.path(), "vgpuctl-create.8");

    assert!(!create.contains("\\-\\-vfs"));
    assert!(!create.contains("\\-\\-guest\\-address"));
}

#[test]
fn man_page_sriov_has_its_own_options() {
    let (dir, _names) = pages();

    let sriov = page(dir.path(), "vgpuctl-sriov.8");

    assert!(sriov.contains("\\fB\\-\\-vfs\\fR \\fI<VFS>\\fR"));
    assert!(sriov.contains("\\fB\\-\\-autoprobe\\fR \\fI<AUTOPROBE>\\fR"));
    assert!(!sriov.contains("\\-\\-uuid"));
}

#[test]
fn man_page_hook_install_names_its_parent_page() {
    let (dir, _names) = pages();

    let install = page(dir.path(), "vgpuctl-hook-install.8");

    assert!(install.contains("\\fB\\-\\-dir\\fR \\fI<DIR>\\fR"));
    assert!(install.contains(".SH \"SEE ALSO\"\n\\fBvgpuctl\\-hook\\fR(8)\n"));
}

#[test]
fn man_page_stop_has_the_exit_status() {
    let (dir, _names) = pages();

    let stop = page(dir.path(), "vgpuctl-stop.8");

    assert!(stop.contains(".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR\nsuccess\n.TP\n\\fB1\\fR\nerror\n"));
    assert!(stop.contains(".SH \"SEE ALSO\"\n\\fBvgpuctl\\fR(8)\n"));
}

/// `types --help` explains every word the LIMIT column can show: each `Limit`'s cell, with
/// its numbers and names put back as the help's placeholders.
#[test]
fn types_help_explains_every_limit_word() {
    use vgpu_core::model::limit::Limit;

    let out = std::process::Command::new(crate::common::vgpuctl_exe())
        .args(["types", "--help"])
        .output()
        .expect("vgpuctl runs");
    let help = String::from_utf8_lossy(&out.stdout);
    let profile = || "P".to_owned();
    let cells: Vec<String> = [
        Limit::NotOffered,
        Limit::Offer,
        Limit::Max { max: 7 },
        Limit::Definitions { held: 7 },
        Limit::Vfs,
        Limit::Mixing {
            with: "TYPE".to_owned(),
        },
        Limit::GpuInstances {
            profile: profile(),
            free: 0,
        },
        Limit::GpuInstances {
            profile: profile(),
            free: 7,
        },
        Limit::MigOff { profile: profile() },
        Limit::MigOn,
        Limit::MigUnknown { profile: profile() },
        Limit::Placements { free: 7 },
        Limit::Placements { free: 0 },
        Limit::PlacementsUnknown,
        Limit::VgpusPerGpu { max: 7 },
    ]
    .iter()
    .map(|limit| limit.short().replace('7', "N"))
    .collect();

    assert_eq!(out.status.code(), Some(0));
    let missing: Vec<&String> = cells
        .iter()
        .filter(|cell| !help.contains(&format!("\n  {cell:<16}")))
        .collect();
    assert!(missing.is_empty(), "{missing:?} not in:\n{help}");
}

/// The configuration files' pages: section 5, each key the parser takes, and each page's
/// example accepted by vgpuctl's own parser (the example is the file, whole).
#[test]
fn config_file_pages_name_every_key_and_their_examples_parse() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let paths = man::write_format_pages(dir.path()).expect("written");
    let names: Vec<String> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let text = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("readable");
    let example = |name: &str| {
        let text = text(name);
        let start = text.find(".EX\n").expect("an example") + 4;
        let end = text[start..].find(".EE\n").expect("its end") + start;
        text[start..end].replace("\\-", "-")
    };
    let state = tempfile::tempdir().expect("temporary directory");
    let etc = state.path().join("etc/vgpu");
    std::fs::create_dir_all(&etc).expect("etc/vgpu");
    let paths = vgpu_core::HostPaths::new(state.path());
    std::fs::write(etc.join("tenants.toml"), example("vgpu-tenants.toml.5")).expect("written");
    std::fs::write(etc.join("hook.toml"), example("vgpu-hook.toml.5")).expect("written");
    std::fs::write(etc.join("usage.toml"), example("vgpu-usage.toml.5")).expect("written");

    let tenants = vgpu_core::manager::read_policy(&paths).expect("tenants.toml parses");
    let hook = vgpu_core::state::HookConfig::load(&paths).expect("hook.toml parses");
    let usage = vgpu_core::state::usage::UsageConfig::load(&paths).expect("usage.toml parses");

    let keys = |name: &str, keys: &[&str]| {
        let text = text(name);
        keys.iter()
            .filter(|k| !text.contains(&format!("\n.B {k}\n")))
            .map(|k| (*k).to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (
            names,
            keys(
                "vgpu-tenants.toml.5",
                &[
                    "isolation",
                    "spread",
                    "apart_from",
                    "max_vgpus",
                    "max_framebuffer"
                ]
            ),
            keys("vgpu-hook.toml.5", &["[flavors]"]),
            keys("vgpu-usage.toml.5", &["keep_raw_days"]),
            tenants.is_some(),
            hook.flavors.len(),
            usage.keep_raw_days,
        ),
        (
            vec![
                "vgpu-host.toml.5".to_owned(),
                "vgpu-tenants.toml.5".to_owned(),
                "vgpu-hook.toml.5".to_owned(),
                "vgpu-usage.toml.5".to_owned()
            ],
            Vec::<String>::new(),
            Vec::<String>::new(),
            Vec::<String>::new(),
            true,
            2,
            365
        )
    );
}
