//! `vgpuctl nova-config` on the simulated `mixed` host, as it comes and with vGPUs defined,
//! against golden files (`VGPU_REGENERATE=1` rewrites them), and checked by Nova's own parsers
//! (Debian's `python3-nova`, run by `/usr/bin/python3`).

use std::path::Path;
use std::process::{Command, Output};

use vgpu_sim::SimHost;

use crate::common;

const PYTHON: &str = "/usr/bin/python3";

struct Host {
    sim: SimHost,
    state: tempfile::TempDir,
}

impl Host {
    fn new() -> Self {
        Host {
            sim: SimHost::mount_for_test("mixed"),
            state: tempfile::tempdir().unwrap(),
        }
    }

    fn vgpuctl(&self, args: &[&str]) -> Output {
        Command::new(common::vgpuctl_exe())
            .arg("--root")
            .arg(self.sim.root())
            .arg("--state-root")
            .arg(self.state.path())
            .args(args)
            .env_remove("VGPU_ROOT")
            .env_remove("VGPU_STATE_ROOT")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) {
        let out = self.vgpuctl(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }

    /// The T4 and the iGPU get a running vGPU each (a defined, stopped one Nova would count
    /// twice), two L40S VFs are defined as L40S-12Q, the Flex has 2 VFs.
    fn with_definitions() -> Self {
        let host = Host::new();
        host.ok(&["create", "0000:3b:00.0", "--type", "T4-2Q"]);
        host.ok(&["create", "0000:00:02.0", "--type", "i915-GVTg_V5_4"]);
        host.ok(&["define", "0000:5e:00.0", "--type", "L40S-12Q"]);
        host.ok(&["define", "0000:5e:00.0", "--type", "L40S-12Q"]);
        host.ok(&["sriov", "0001:03:00.0", "--vfs", "2", "--define"]);
        host
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The exit code and output of `nova-config` against the golden file `name`, in one assertion.
fn assert_golden(name: &str, out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
    common::assert_golden(name, 0, (0, text(&out.stdout)));
}

/// The default release, Nova 26 to 28, sets managed='yes' on every PCI hostdev: the L40S's
/// vendor-VFIO VFs are not offered, and the reason names the release that can.
#[test]
fn nova_config_of_the_mixed_host_names_what_nova_cannot_use() {
    let host = Host::new();
    let out = host.vgpuctl(&["nova-config"]);
    assert!(text(&out.stdout).contains(
        "#   0000:5e:00.0 (AD102GL [L40S]): this Nova release sets managed='yes' on every PCI \
         hostdev, so libvirt would take the VF from nvidia at the server's start and the server \
         would not start; Nova 31 (2025.1) obeys managed: \"no\": use --nova-release 2025.1\n"
    ));
    assert_golden("nova-config-mixed.txt", &out);
}

#[test]
fn nova_config_of_the_mixed_host_with_definitions() {
    let host = Host::with_definitions();
    assert_golden(
        "nova-config-mixed-defined.txt",
        &host.vgpuctl(&["nova-config", "--nova-release", "2025.1"]),
    );
}

#[test]
fn nova_config_json_of_the_mixed_host_with_definitions() {
    let host = Host::with_definitions();
    assert_golden(
        "nova-config-mixed-defined.json",
        &host.vgpuctl(&["nova-config", "--nova-release", "2025.1", "--json"]),
    );
}

/// Undefined L40S VFs take the one type `hook.toml` maps flavors to, as many as the GPU holds.
#[test]
fn nova_config_offers_the_flavor_type_of_hook_toml_on_untyped_vfs() {
    let host = Host::new();
    let etc = host.state.path().join("etc/vgpu");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        etc.join("hook.toml"),
        "[flavors]\n\"vgpu.l40s-24q\" = \"L40S-24Q\"\n",
    )
    .unwrap();
    let out = host.vgpuctl(&["nova-config", "--nova-release", "epoxy", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let specs: Vec<(&str, &str)> = value["device_spec"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["address"].as_str().unwrap(),
                s["resource_class"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        specs,
        vec![
            ("0000:5e:00.4", "CUSTOM_VGPU_L40S_24Q"),
            ("0000:5e:00.5", "CUSTOM_VGPU_L40S_24Q")
        ]
    );
}

/// Nova's own `PciDeviceSpec` and alias parser accept what `nova-config` writes. Fails (never
/// skips) without Debian's `python3-nova`.
#[test]
fn nova_accepts_the_device_specs_and_aliases_nova_config_writes() {
    let host = Host::with_definitions();
    let out = host.vgpuctl(&["nova-config", "--nova-release", "2025.1"]);
    let conf = host.state.path().join("nova.conf");
    std::fs::write(&conf, &out.stdout).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nova/check_nova_conf.py");
    let checked = Command::new(PYTHON)
        .arg(&script)
        .arg(&conf)
        .output()
        .unwrap_or_else(|err| {
            panic!("{PYTHON}: {err} (scripts/install-deps.sh installs python3-nova)")
        });
    assert!(
        checked.status.success(),
        "Nova refused {}:\n{}\n{}",
        text(&out.stdout),
        text(&checked.stdout),
        text(&checked.stderr)
    );
    assert_eq!(
        text(&checked.stdout).lines().take(1).collect::<Vec<_>>(),
        vec!["device_spec: 4 accepted by nova.pci.devspec.PciDeviceSpec"]
    );
}
