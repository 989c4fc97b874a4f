//! Helpers shared by the `vgpuctl` tests: a simulated host, `vgpuctl` with `vgpuctl-libvirt`
//! beside it, golden files.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use vgpu_sim::SimHost;

pub(crate) mod mixed;

pub(crate) const T4: &str = "0000:3b:00.0";
pub(crate) const FLEX: &str = "0000:4d:00.0";
pub(crate) const UUID: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
pub(crate) const UUID_PEER: &str = "7d0f6a2e-5b3c-4e1d-8a9f-0c1b2d3e4f5a";

pub(crate) struct Host {
    pub(crate) sim: SimHost,
    pub(crate) state: tempfile::TempDir,
}

pub(crate) fn host(profile: &str) -> Host {
    let sim = SimHost::mount_for_test(profile);
    let state = tempfile::tempdir().unwrap();
    Host { sim, state }
}

/// A reboot: the simulator mounted fresh from its profile (VFs off), the state root's `etc/`
/// and `var/` kept and its `run/` emptied, as a tmpfs is.
pub(crate) fn reboot(h: &mut Host) {
    h.sim = vgpu_sim::SimHost::mount_for_test(&h.sim.profile_name());
    std::fs::remove_dir_all(h.state.path().join("run")).unwrap();
}

/// `vgpuctl`, with `vgpuctl-libvirt` built beside it ([`helper`]).
pub(crate) fn vgpuctl_exe() -> &'static Path {
    helper();
    Path::new(env!("CARGO_BIN_EXE_vgpuctl"))
}

/// `vgpuctl` in a directory of its own, without `vgpuctl-libvirt` beside it: a hard link
/// beside the build, not a copy. A copy is a file open for writing, which a process another
/// test forks at that moment inherits until it execs; running the copy then fails with
/// `ETXTBSY`.
pub(crate) fn vgpuctl_alone() -> (tempfile::TempDir, std::path::PathBuf) {
    let built = vgpuctl_exe();
    let alone = tempfile::tempdir_in(built.parent().unwrap()).unwrap();
    let exe = alone.path().join("vgpuctl");
    std::fs::hard_link(built, &exe).unwrap();
    (alone, exe)
}

/// `vgpuctl-libvirt`, beside `vgpuctl`, where `vgpuctl` runs it from.
///
/// It is the binary of another package (`vgpu-cli-libvirt`, which depends on this one), so
/// `cargo test -p vgpu-cli` does not build it. The first call in a test binary builds it with
/// the cargo that runs the tests, in `vgpuctl`'s profile and target directory. So it is never
/// older than its sources.
pub(crate) fn helper() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let vgpuctl = Path::new(env!("CARGO_BIN_EXE_vgpuctl"));
        let profile_dir = vgpuctl.parent().unwrap();
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(other) => other,
            None => panic!("{}: no profile directory", vgpuctl.display()),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let built = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "vgpu-cli-libvirt",
                "--bin",
                "vgpuctl-libvirt",
            ])
            .args(["--profile", profile, "--target-dir"])
            .arg(profile_dir.parent().unwrap())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "cargo build -p vgpu-cli-libvirt: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let helper = vgpuctl.with_file_name("vgpuctl-libvirt");
        assert!(helper.is_file(), "{} was not built", helper.display());
        helper
    })
}

/// `program` pinned to one CPU, the same for every call: for a process that opens libvirt's
/// embedded QEMU driver (`qemu:///embed`), or runs one that does.
///
/// libvirt caches QEMU's capabilities under the embed root with the CPUID it read. Leaf 0x1f
/// names the CPU the reading process ran on, so a process on another CPU takes the cache as
/// stale and probes QEMU again, which takes seconds.
pub(crate) fn on_one_cpu(program: impl AsRef<std::ffi::OsStr>) -> Command {
    static CPU: OnceLock<usize> = OnceLock::new();
    let cpu = CPU.get_or_init(|| {
        let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        (0..nix::sched::CpuSet::count())
            .find(|&cpu| allowed.is_set(cpu).unwrap_or(false))
            .unwrap()
    });
    let mut cmd = Command::new("taskset");
    cmd.arg("--cpu-list").arg(cpu.to_string()).arg(program);
    cmd
}

pub(crate) fn command(host: &Host, args: &[&str]) -> Command {
    on_host(Command::new(vgpuctl_exe()), host, args)
}

/// `vgpuctl ARGS` on `host`, run by `cmd`.
fn on_host(mut cmd: Command, host: &Host, args: &[&str]) -> Command {
    cmd.arg("--root")
        .arg(host.sim.root())
        .arg("--state-root")
        .arg(host.state.path());
    cmd.args(args)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT");
    cmd
}

pub(crate) fn vgpuctl(host: &Host, args: &[&str]) -> Output {
    command(host, args).output().unwrap()
}

/// [`vgpuctl`] on one CPU ([`on_one_cpu`]): for a command that opens libvirt's embedded driver.
pub(crate) fn vgpuctl_on_one_cpu(host: &Host, args: &[&str]) -> Output {
    on_host(on_one_cpu(vgpuctl_exe()), host, args)
        .output()
        .unwrap()
}

pub(crate) fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn list(host: &Host) -> serde_json::Value {
    json(&vgpuctl(host, &["list", "--json"]))
}

pub(crate) fn gpu<'a>(list: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    list["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == address)
        .unwrap()
}

/// `(id, type id)` of each vGPU of `gpu`, one GPU of `list --json`, in the order it gives them.
pub(crate) fn vgpu_types(gpu: &serde_json::Value) -> Vec<(String, String)> {
    gpu["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_owned(),
                v["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `(memory_mib, driver)` of each VF of the Flex 170, as `list --json` has them.
pub(crate) fn flex_vfs(h: &Host) -> Vec<(serde_json::Value, serde_json::Value)> {
    let list = list(h);
    gpu(&list, FLEX)["vfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vf| (vf["memory_mib"].clone(), vf["driver"].clone()))
        .collect()
}

pub(crate) fn vgpu_ids(host: &Host, address: &str) -> Vec<String> {
    let list = list(host);
    gpu(&list, address)["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Checks a command's exit code against `expected_code` and its output against the golden file
/// `name`, in one assertion. With `VGPU_REGENERATE` set, rewrites the file and checks only the
/// exit code, which is pinned here, not regenerated.
pub(crate) fn assert_golden(name: &str, expected_code: u8, (code, actual): (u8, String)) {
    let path = golden_path(name);
    if std::env::var_os("VGPU_REGENERATE").is_some() {
        std::fs::write(&path, &actual).expect("write golden file");
        assert_eq!(
            code, expected_code,
            "exit code of the command behind {name}"
        );
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (run with VGPU_REGENERATE=1)", path.display()));
    assert_eq!(
        (code, actual),
        (expected_code, expected),
        "exit code or output differs from {}",
        path.display()
    );
}

/// The types of the first GPU of `types --json` output, without the fields that move with
/// what the GPU holds (available, in use, limit) or with where a name was read: what a GPU
/// supports, which no partition changes.
pub(crate) fn supported_types(types: &Output) -> Vec<serde_json::Value> {
    json(types)["gpus"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut t = t.clone();
            for moving in ["available", "in_use", "limit", "name_source"] {
                t.as_object_mut().unwrap().remove(moving);
            }
            t
        })
        .collect()
}

/// The libvirt hook `vgpuctl hook install` writes for `host`, with the global options
/// `global` (`--nvml-library`) passed on, in a temporary directory of its own.
pub(crate) fn install_hook(host: &Host, global: &[&str]) -> tempfile::TempDir {
    let hooks = tempfile::tempdir().unwrap();
    let mut args = global.to_vec();
    args.extend(["hook", "install", "--dir", hooks.path().to_str().unwrap()]);
    let out = vgpuctl(host, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    hooks
}

/// Runs the hook installed in `hooks` as libvirt does: `env -i qemu.d/vgpu NAME OP SUBOP -`,
/// the domain XML on stdin.
pub(crate) fn run_hook(hooks: &Path, name: &str, op: &str, subop: &str, xml: &str) -> Output {
    run_hook_extra(hooks, name, op, subop, "-", xml)
}

/// [`run_hook`] with libvirt's last argument `extra` (`migrated` on a migration's source).
pub(crate) fn run_hook_extra(
    hooks: &Path,
    name: &str,
    op: &str,
    subop: &str,
    extra: &str,
    xml: &str,
) -> Output {
    use std::io::Write;
    let mut child = Command::new(hooks.join("qemu.d/vgpu"))
        .args([name, op, subop, extra])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The hook may exit without reading all of a refused document, closing the pipe.
    let _written = stdin.write_all(xml.as_bytes());
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// The vGPU metadata element's namespace.
pub(crate) const NS: &str = "https://example.invalid/vgpu/1";

/// The PCI address of VF `index` of the PF at bus `bus` (VF offset 4, stride 1).
pub(crate) fn vf(bus: &str, index: u32) -> String {
    let function = 4 + index;
    format!("0000:{bus}:{:02x}.{}", function / 8, function % 8)
}

/// The L40S's VF `index`.
pub(crate) fn l40s_vf(index: u32) -> String {
    vf("5e", index)
}

/// The `<address>` of a hostdev's `<source>` naming the PCI device at `address`.
pub(crate) fn pci_source(address: &str) -> String {
    let (domain, rest) = address.split_once(':').unwrap();
    let (bus, rest) = rest.split_once(':').unwrap();
    let (slot, function) = rest.split_once('.').unwrap();
    format!("<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>")
}

/// A `<hostdev>` naming the PCI device at `address`.
pub(crate) fn hostdev(address: &str) -> String {
    format!(
        "    <hostdev mode='subsystem' type='pci' managed='no'><source>{}</source></hostdev>\n",
        pci_source(address)
    )
}

/// Domain number `n`, named `vm<n>`, of `tenant`, asking for `vgpu_type` on each of `vfs`.
pub(crate) fn domain(n: u32, tenant: &str, vgpu_type: &str, vfs: &[String]) -> String {
    let devices: String = vfs.iter().map(|a| hostdev(a)).collect();
    format!(
        "<domain type='kvm'>\n  <name>vm{n}</name>\n  \
         <uuid>00000000-0000-4000-8000-{n:012x}</uuid>\n  <metadata><vgpu:vgpu \
         xmlns:vgpu=\"{NS}\" type=\"{vgpu_type}\" tenant=\"{tenant}\"/></metadata>\n  \
         <memory unit='KiB'>65536</memory>\n  <devices>\n{devices}  </devices>\n</domain>\n"
    )
}

/// A `<hostdev>` naming the mediated device `uuid`.
pub(crate) fn mdev_hostdev(uuid: &str) -> String {
    format!(
        "    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>\
         <source><address uuid='{uuid}'/></source></hostdev>\n"
    )
}

/// A domain the schema accepts, named `vm<n>`, with `metadata` and `devices` as given.
pub(crate) fn domain_xml(n: u32, metadata: &str, devices: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>vm{n}</name>\n  \
         <uuid>00000000-0000-4000-8000-{n:012x}</uuid>\n  <metadata>{metadata}</metadata>\n  \
         <memory unit='KiB'>65536</memory>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n  \
         <devices>\n{devices}  </devices>\n</domain>\n"
    )
}

/// Domain `n` with the mediated device `uuid`, whose type only `attach`'s record names.
pub(crate) fn mdev_domain(n: u32, uuid: &str, type_name: &str) -> String {
    mdev_domain_with(n, "", uuid, type_name)
}

/// [`mdev_domain`], with `metadata` (Nova's, say) before `attach`'s record.
pub(crate) fn mdev_domain_with(n: u32, metadata: &str, uuid: &str, type_name: &str) -> String {
    domain_xml(
        n,
        &format!(
            "{metadata}<vgpu:vgpu xmlns:vgpu=\"{NS}\"><device id=\"{uuid}\" type=\"{type_name}\"/></vgpu:vgpu>"
        ),
        &mdev_hostdev(uuid),
    )
}
