//! Every command, given a bad argument with `--json`, prints one error object whose `kind` is
//! one of the documented kinds, and the right one: scripts branch on it.

use std::path::Path;

use clap::CommandFactory as _;

use crate::common::{T4, UUID, command, host, json, vgpuctl};

/// The kinds docs/json.md documents.
const KINDS: [&str; 10] = [
    "not-found",
    "conflict",
    "no-capacity",
    "busy",
    "permission",
    "bad-input",
    "host-fault",
    "interrupted",
    "policy",
    "usage",
];

/// Every leaf command's name (`create`, `hook install`), from the command line's definition.
fn leaf_commands() -> Vec<String> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let name = format!("{prefix}{}", sub.get_name());
            if sub.has_subcommands() {
                walk(sub, &format!("{name} "), out);
            } else {
                out.push(name);
            }
        }
    }
    let mut names = Vec::new();
    walk(&vgpu_cli::Cli::command(), "", &mut names);
    names.sort();
    names
}

/// The error object a failed `--json` run printed, as (exit code, kind).
fn kind_of(out: &std::process::Output) -> (Option<i32>, serde_json::Value) {
    let value = json(out);
    assert_eq!(
        value
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["error".to_owned(), "kind".to_owned()]),
        "{value}"
    );
    (out.status.code(), value["kind"].clone())
}

#[test]
fn every_command_with_a_bad_argument_prints_its_documented_kind() {
    let h = host("mixed");
    let files = tempfile::tempdir().unwrap();
    let missing = files.path().join("nope.toml");
    let missing = missing.to_str().unwrap();
    let hooks = files.path().join("hooks");
    std::fs::create_dir_all(hooks.join("qemu.d")).unwrap();
    std::fs::write(hooks.join("qemu.d/vgpu"), "#!/bin/sh\n# someone else's\n").unwrap();
    let hooks = hooks.to_str().unwrap();
    let tenants = h.state.path().join("etc/vgpu/tenants.toml");
    let bad_libvirt = "test:///nonexistent-vgpu-test.xml";
    let rows: Vec<(&str, Vec<&str>, &str, i32)> = vec![
        ("assert", vec!["assert", "-f", missing], "bad-input", 1),
        ("apply", vec!["apply", "-f", missing], "bad-input", 1),
        ("attach", vec!["attach", "vm1", "nonexist"], "bad-input", 1),
        ("bind", vec!["bind", "0000:99:00.0"], "not-found", 1),
        ("can-host", vec!["can-host", "-f", missing], "bad-input", 1),
        ("check", vec!["check", "0000:99:00.0"], "not-found", 1),
        ("completions", vec!["completions", "zzz"], "usage", 2),
        (
            "create",
            vec!["create", T4, "--type", "nonexist"],
            "not-found",
            1,
        ),
        (
            "define",
            vec!["define", T4, "--type", "nonexist"],
            "not-found",
            1,
        ),
        ("destroy", vec!["destroy", "nonexist"], "bad-input", 1),
        ("detach", vec!["detach", "vm1", "nonexist"], "bad-input", 1),
        (
            "hook install",
            vec!["hook", "install", "--dir", hooks],
            "conflict",
            1,
        ),
        (
            "hook uninstall",
            vec!["hook", "uninstall", "--dir", hooks],
            "conflict",
            1,
        ),
        (
            "isolation",
            vec!["isolation", "0000:99:00.0"],
            "not-found",
            1,
        ),
        (
            "kubevirt-config",
            vec![
                "kubevirt-config",
                "--node",
                "n1",
                "--kubevirt-version",
                "0.9",
            ],
            "bad-input",
            1,
        ),
        ("list", vec!["list", "0000:99:00.0"], "not-found", 1),
        (
            "metrics",
            vec!["metrics", "--listen", "nonsense"],
            "usage",
            2,
        ),
        (
            "migration-metadata",
            vec!["migration-metadata", "nonexist"],
            "bad-input",
            1,
        ),
        (
            "nova-config",
            vec!["nova-config", "--nova-release", "x"],
            "usage",
            2,
        ),
        (
            "owners",
            vec!["--connect", bad_libvirt, "owners"],
            "bad-input",
            1,
        ),
        (
            "place",
            vec!["place", "--count", "1", "--type", "nonexist"],
            "not-found",
            1,
        ),
        ("plan", vec!["plan", "-f", missing], "bad-input", 1),
        (
            "provision",
            vec!["provision", "--type", "T4-1Q", "0000:99:00.0"],
            "not-found",
            1,
        ),
        (
            "restore",
            vec!["restore", "--device", "0000:99:00.0"],
            "not-found",
            1,
        ),
        ("sched", vec!["sched", "0000:99:00.0"], "not-found", 1),
        (
            "size-mode",
            vec!["size-mode", "0000:99:00.0"],
            "not-found",
            1,
        ),
        (
            "sriov",
            vec!["sriov", "0000:99:00.0", "--vfs", "1"],
            "not-found",
            1,
        ),
        ("start", vec!["start", UUID], "not-found", 1),
        ("stop", vec!["stop", "nonexist"], "bad-input", 1),
        ("top", vec!["top", "--interval", "0"], "usage", 2),
        ("types", vec!["types", "0000:99:00.0"], "not-found", 1),
        ("unbind", vec!["unbind", "0000:99:00.0"], "not-found", 1),
        ("undefine", vec!["undefine", UUID], "not-found", 1),
        (
            "usage",
            vec![
                "usage",
                "--since",
                "2026-12-01T00:00:00Z",
                "--until",
                "2026-11-01T00:00:00Z",
            ],
            "bad-input",
            1,
        ),
    ];

    let mut seen: Vec<(String, Option<i32>, serde_json::Value)> = rows
        .iter()
        .map(|(name, args, _, _)| {
            let mut args = args.clone();
            args.insert(0, "--json");
            let (code, kind) = kind_of(&vgpuctl(&h, &args));
            ((*name).to_owned(), code, kind)
        })
        .collect();
    // `tenants` reads only its file; a broken one is the operator's input.
    std::fs::create_dir_all(tenants.parent().unwrap()).unwrap();
    std::fs::write(&tenants, "[tenant.globex\n").unwrap();
    let (code, kind) = kind_of(&vgpuctl(&h, &["--json", "tenants"]));
    seen.push(("tenants".to_owned(), code, kind));
    std::fs::remove_file(&tenants).unwrap();
    // `watch` takes no argument: a root that is not a host is its bad input.
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::common::vgpuctl_exe())
        .arg("--root")
        .arg(empty.path())
        .arg("--state-root")
        .arg(h.state.path())
        .args(["--json", "watch"])
        .output()
        .unwrap();
    let (code, kind) = kind_of(&out);
    seen.push(("watch".to_owned(), code, kind));
    // The hook's errors are for libvirt, on stderr: nothing on stdout to misread.
    let hook = hook_with_bad_xml(&h);
    seen.push(("hook qemu".to_owned(), hook.0, hook.1));
    seen.sort_by(|a, b| a.0.cmp(&b.0));

    let mut expected: Vec<(String, Option<i32>, serde_json::Value)> = rows
        .iter()
        .map(|(name, _, kind, code)| ((*name).to_owned(), Some(*code), serde_json::json!(kind)))
        .chain([
            (
                "tenants".to_owned(),
                Some(1),
                serde_json::json!("bad-input"),
            ),
            ("watch".to_owned(), Some(1), serde_json::json!("host-fault")),
            ("hook qemu".to_owned(), Some(1), serde_json::Value::Null),
        ])
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let mut commands = leaf_commands();
    commands.retain(|c| c != "help" && !c.ends_with(" help"));
    assert_eq!(
        (
            seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>(),
            seen.iter()
                .filter(|s| !s.2.is_null())
                .all(|s| KINDS.contains(&s.2.as_str().unwrap())),
            seen
        ),
        (commands, true, expected)
    );
}

/// `hook qemu` given XML that is not XML: its exit code, and `null` when stdout is empty.
fn hook_with_bad_xml(h: &crate::common::Host) -> (Option<i32>, serde_json::Value) {
    use std::io::Write as _;
    let mut child = command(
        h,
        &["--json", "hook", "qemu", "vm1", "prepare", "begin", "-"],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    child.stdin.take().unwrap().write_all(b"<x").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "vgpu hook: vm1 prepare: XML: not well-formed: the document does not have a root node\n"
    );
    (
        out.status.code(),
        if out.stdout.is_empty() {
            serde_json::Value::Null
        } else {
            json(&out)
        },
    )
}

/// The README's and docs/json.md's example, word for word.
#[test]
fn json_error_matches_the_documented_example() {
    let h = host("t4-legacy");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let example = |doc: &str| -> String {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let at = text.find("--json destroy nonexist\n").unwrap();
        let line = &text[at..].lines().nth(1).unwrap();
        format!("{line}\n")
    };

    let out = vgpuctl(&h, &["--json", "destroy", "nonexist"]);

    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            example("docs/json.md")
        ),
        (Some(1), example("README.md"), example("README.md"))
    );
}

/// A file the caller named is the caller's: its error names it with the kernel's answer, and
/// no hint sends the reader to `--root`.
#[test]
fn missing_input_file_is_named_without_a_root_hint() {
    let h = host("t4-legacy");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nonexist.xml");
    let file = file.to_str().unwrap();
    let said = |args: &[&str]| crate::common::stderr(&vgpuctl(&h, args));

    assert_eq!(
        [
            said(&["can-host", "-f", file]),
            said(&["plan", "-f", file]),
            said(&["can-host", "-f", file, "--metadata", file]),
        ],
        std::array::from_fn(|_| format!(
            "vgpuctl: error: cannot read {file}: No such file or directory (os error 2)\n"
        ))
    );
}
