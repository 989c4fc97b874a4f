//! `vgpuctl` without libvirt. At build time: `vgpu-cli` does not depend on libvirt's binding,
//! as `cargo tree` shows. At run time, on a host without libvirt's library: each command runs
//! in a private mount namespace where `libvirt.so.0` cannot be loaded (an empty file is mounted
//! over it), so `vgpuctl-libvirt` dies in the dynamic loader, as on a host without the package.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

/// The file the dynamic loader takes libvirt from, as `ldd` shows it for `vgpuctl-libvirt`.
fn libvirt_library() -> String {
    let ldd = Command::new("ldd").arg(helper()).output().unwrap();
    String::from_utf8_lossy(&ldd.stdout)
        .lines()
        .find(|l| l.contains("libvirt.so"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap()
        .to_owned()
}

/// Runs `program args` with libvirt's library unloadable and `/run/libvirt` empty, or holding
/// a libvirt socket's name when `socket`.
fn without_libvirt(program: &Path, args: &[String], socket: bool) -> Output {
    let mut script = format!(
        "set -e; mount --bind /dev/null {}; mkdir -p /run/libvirt; \
         mount -t tmpfs none /run/libvirt; ",
        libvirt_library()
    );
    if socket {
        script.push_str("touch /run/libvirt/libvirt-sock; ");
    }
    script.push_str("exec \"$@\"");
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(program)
        .args(args)
        .output()
        .unwrap()
}

/// `vgpuctl` on `h` with `args`, without libvirt.
fn vgpuctl_without(h: &Host, args: &[&str], socket: bool) -> Output {
    let mut all = vec![
        "--root".to_owned(),
        h.sim.root().to_str().unwrap().to_owned(),
        "--state-root".to_owned(),
        h.state.path().to_str().unwrap().to_owned(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    without_libvirt(vgpuctl_exe(), &all, socket)
}

const T4S: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"T4\"\ntypes = { \"T4-1Q\" = 2 }\n";

/// A `t4-legacy` host and its desired-state file.
fn t4_host() -> (Host, String) {
    let h = host("t4-legacy");
    let file = h.state.path().join("host.toml");
    std::fs::write(&file, T4S).unwrap();
    let file = file.to_str().unwrap().to_owned();
    (h, file)
}

fn out(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The packages in `package`'s tree of normal dependencies (`cargo tree -e normal`), itself
/// included, by name.
fn normal_dependencies(package: &str) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let tree = Command::new(cargo)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(tree.status.success(), "{tree:?}");
    String::from_utf8(tree.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn cargo_tree_of_vgpu_cli_has_neither_libvirt_binding() {
    let deps = normal_dependencies("vgpu-cli");

    let has = |name: &str| deps.iter().any(|d| d == name);
    assert_eq!(
        (
            has("vgpu-cli"),
            has("vgpu-core"),
            has("vgpu-domain"),
            has("vgpu-libvirt"),
            has("virt"),
            has("virt-sys"),
        ),
        (true, true, true, false, false, false),
        "{deps:?}"
    );
}

#[test]
fn cargo_tree_of_the_helper_has_the_libvirt_binding() {
    let deps = normal_dependencies("vgpu-cli-libvirt");

    let has = |name: &str| deps.iter().any(|d| d == name);
    assert_eq!(
        (
            has("vgpu-cli"),
            has("vgpu-libvirt"),
            has("virt"),
            has("virt-sys")
        ),
        (true, true, true, true),
        "{deps:?}"
    );
}

#[test]
fn the_helper_really_cannot_load_libvirt_there() {
    let output = without_libvirt(helper(), &["--version".to_owned()], false);
    assert_eq!(
        (
            output.status.code(),
            stderr(&output).contains("error while loading shared libraries")
        ),
        (Some(127), true)
    );
}

#[test]
fn plan_apply_assert_place_top_metrics_and_destroy_run_without_libvirt() {
    let (h, file) = t4_host();

    let plan = vgpuctl_without(&h, &["plan", "-f", &file], false);
    let apply = vgpuctl_without(&h, &["--json", "apply", "-f", &file], false);
    let assert = vgpuctl_without(&h, &["assert", "-f", &file], false);
    let place = vgpuctl_without(
        &h,
        &["--json", "place", "--count", "1", "--type", "T4-1Q"],
        false,
    );
    let top = vgpuctl_without(&h, &["--json", "top"], false);
    let metrics = vgpuctl_without(&h, &["metrics"], false);
    let id = vgpu_ids(&h, T4)[0].clone();
    let destroy = vgpuctl_without(&h, &["destroy", &id], false);

    let picks = json(&place)["picks"].as_array().unwrap().len();
    let outcomes: Vec<serde_json::Value> = json(&apply)["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["outcome"].clone())
        .collect();
    assert_eq!(
        (
            (plan.status.code(), stderr(&plan)),
            (apply.status.code(), outcomes),
            (assert.status.code(), out(&assert)),
            (place.status.code(), picks),
            (top.status.code(), json(&top)["libvirt"]["up"].clone()),
            (
                metrics.status.code(),
                out(&metrics).contains("\nvgpu_libvirt_up")
            ),
            (destroy.status.code(), stderr(&destroy)),
            vgpu_ids(&h, T4).len(),
        ),
        (
            (Some(4), String::new()),
            (Some(0), vec![serde_json::json!("applied"); 2]),
            (Some(0), "the host matches config \"default\"\n".to_owned()),
            (Some(0), 1),
            (Some(0), serde_json::json!(false)),
            (Some(0), false),
            (Some(0), String::new()),
            1
        )
    );
}

/// A libvirt socket says a daemon may hold vGPUs, but libvirt's library cannot be loaded to
/// ask it: `plan` says so once and plans, `destroy` refuses until forced.
#[test]
fn with_a_socket_but_no_library_plan_warns_once_and_destroy_needs_force() {
    let (h, file) = t4_host();
    assert_eq!(vgpuctl(&h, &["apply", "-f", &file]).status.code(), Some(0));
    let id = vgpu_ids(&h, T4)[0].clone();

    let plan = vgpuctl_without(&h, &["plan", "-f", &file], true);
    let refused = vgpuctl_without(&h, &["--json", "destroy", &id], true);
    let forced = vgpuctl_without(&h, &["destroy", &id, "--force"], true);

    let warning = stderr(&plan);
    assert_eq!(
        (
            plan.status.code(),
            warning.matches("vgpuctl: warning: ").count(),
            warning.starts_with(
                "vgpuctl: warning: libvirt at qemu:///system did not answer, so vGPUs its \
                 domains hold are not known: "
            ),
            warning.contains("error while loading shared libraries"),
            refused.status.code(),
            json(&refused)["kind"].clone(),
            forced.status.code(),
            vgpu_ids(&h, T4).len(),
        ),
        (
            Some(0),
            1,
            true,
            true,
            Some(1),
            serde_json::json!("busy"),
            Some(0),
            1
        )
    );
}
