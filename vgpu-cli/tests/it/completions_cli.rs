//! `vgpuctl completions SHELL`: the scripts name every subcommand, the shell is checked, and
//! `vgpuctl` writes them itself, without libvirt.

use std::process::{Command, Output};

use clap::CommandFactory;

fn vgpuctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
        .args(args)
        .env_remove("VGPU_ROOT")
        .output()
        .expect("vgpuctl runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("the script is UTF-8")
}

/// The top-level subcommands' names, as `--help` lists them.
fn subcommands() -> Vec<String> {
    vgpu_cli::Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect()
}

#[test]
fn completions_bash_registers_vgpuctl() {
    let output = vgpuctl(&["completions", "bash"]);

    assert_eq!(output.status.code(), Some(0));
    assert!(output.stderr.is_empty());
    assert!(
        stdout(&output)
            .lines()
            .any(|l| l.trim() == "complete -F _vgpuctl -o nosort -o bashdefault -o default vgpuctl")
    );
}

#[test]
fn completions_bash_offers_every_subcommand() {
    let script = stdout(&vgpuctl(&["completions", "bash"]));

    let missing: Vec<String> = subcommands()
        .into_iter()
        .filter(|name| !script.contains(&format!("vgpuctl,{name})")))
        .collect();

    assert_eq!(missing, Vec::<String>::new());
}

#[test]
fn completions_bash_offers_nested_hook_subcommands() {
    let script = stdout(&vgpuctl(&["completions", "bash"]));

    assert!(script.contains("vgpuctl__subcmd__hook,install)"));
}

#[test]
fn completions_zsh_is_a_compdef_offering_every_subcommand() {
    let script = stdout(&vgpuctl(&["completions", "zsh"]));

    let missing: Vec<String> = subcommands()
        .into_iter()
        .filter(|name| !script.contains(&format!("\n'{name}:")))
        .collect();

    assert_eq!(script.lines().next(), Some("#compdef vgpuctl"));
    assert_eq!(missing, Vec::<String>::new());
}

#[test]
fn completions_fish_offers_every_subcommand() {
    let script = stdout(&vgpuctl(&["completions", "fish"]));

    let missing: Vec<String> = subcommands()
        .into_iter()
        .filter(|name| {
            !script.contains(&format!(
                "complete -c vgpuctl -n \"__fish_vgpuctl_needs_command\" -f -a \"{name}\""
            ))
        })
        .collect();

    assert_eq!(missing, Vec::<String>::new());
}

#[test]
fn completions_bash_offers_the_shells_after_completions() {
    let script = stdout(&vgpuctl(&["completions", "bash"]));

    assert!(script.contains(
        "opts=\"-v -h --root --state-root --connect --nvml-library --json --verbose --help bash zsh fish\""
    ));
}

#[test]
fn completions_unknown_shell_exits_2_naming_the_shells() {
    let output = vgpuctl(&["completions", "nosuch"]);

    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(stderr.contains("invalid value 'nosuch' for '<SHELL>'"));
    assert!(stderr.contains("[possible values: bash, zsh, fish]"));
}

#[test]
fn completions_output_is_the_library_script() {
    let output = vgpuctl(&["completions", "zsh"]);
    let mut expected = Vec::new();

    vgpu_cli::completions::write(vgpu_cli::completions::Shell::Zsh, &mut expected)
        .expect("writes to memory");

    assert_eq!(output.stdout, expected);
}

#[test]
fn completions_runs_without_vgpuctl_libvirt() {
    let (_dir, alone) = crate::common::vgpuctl_alone();

    let output = Command::new(&alone)
        .args(["completions", "bash"])
        .output()
        .expect("vgpuctl runs");

    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).starts_with("_vgpuctl() {"));
}
