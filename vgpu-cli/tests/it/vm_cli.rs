//! `vgpuctl attach`, `detach`, `owners` and the libvirt check of `destroy`, `undefine` and `stop`,
//! against libvirt's real QEMU driver embedded in each process (`qemu:///embed?root=DIR`, no
//! daemon) and a simulated host (`vgpu-sim`).

use std::process::{Command, Output};

use vgpu_sim::SimHost;

use crate::common;

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const UUID: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";

struct Host {
    sim: SimHost,
    state: tempfile::TempDir,
    libvirt: tempfile::TempDir,
}

impl Host {
    fn uri(&self) -> String {
        vgpu_domain::embedded_uri(self.libvirt.path())
    }

    /// Defines domain `name`.
    fn define(&self, name: &str) {
        self.define_with(name, "");
    }

    /// Defines domain `name` with `devices` in its `<devices>`, with `virsh` in a process of
    /// its own: libvirt embeds its QEMU driver at one root per process, and each test has its
    /// own root.
    fn define_with(&self, name: &str, devices: &str) {
        let xml = self.libvirt.path().join(format!("{name}.xml"));
        std::fs::write(
            &xml,
            format!(
                "<domain type='kvm'><name>{name}</name><memory unit='MiB'>64</memory>\
                 <os><type arch='x86_64' machine='pc'>hvm</type></os>\
                 <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>{devices}</devices>\
                 </domain>"
            ),
        )
        .unwrap();
        let out = common::on_one_cpu("virsh")
            .arg("-c")
            .arg(self.uri())
            .arg("define")
            .arg(&xml)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "virsh define: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn host() -> Host {
    Host {
        sim: SimHost::mount_for_test("mixed"),
        state: tempfile::tempdir().unwrap(),
        libvirt: tempfile::tempdir().unwrap(),
    }
}

fn vgpuctl(host: &Host, args: &[&str]) -> Output {
    common::on_one_cpu(common::vgpuctl_exe())
        .arg("--root")
        .arg(host.sim.root())
        .arg("--state-root")
        .arg(host.state.path())
        .arg("--connect")
        .arg(host.uri())
        .args(args)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT")
        .env_remove("VGPU_CONNECT")
        .output()
        .unwrap()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The persistent XML of domain `vm`, as `virsh dumpxml --inactive` prints it.
fn inactive_xml(host: &Host, vm: &str) -> Vec<u8> {
    common::on_one_cpu("virsh")
        .arg("-c")
        .arg(host.uri())
        .args(["dumpxml", "--inactive", vm])
        .output()
        .unwrap()
        .stdout
}

/// `attach VM --gpu GPU --type TYPE --json`: a vGPU of `type_name` on `gpu` given to `vm`.
fn attach_new(host: &Host, vm: &str, gpu: &str, type_name: &str) -> Output {
    vgpuctl(
        host,
        &["attach", vm, "--gpu", gpu, "--type", type_name, "--json"],
    )
}

/// A host whose domain `vm1` holds a new vGPU of `type_name` on `gpu`, and that vGPU's id.
fn held_by_vm1(gpu: &str, type_name: &str) -> (Host, String) {
    let h = host();
    h.define("vm1");
    let held = json(&attach_new(&h, "vm1", gpu, type_name))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (h, held)
}

fn create(host: &Host, gpu: &str, type_name: &str, uuid: Option<&str>) -> String {
    let mut args = vec!["create", gpu, "--type", type_name, "--json"];
    if let Some(uuid) = uuid {
        args.extend(["--uuid", uuid]);
    }
    json(&vgpuctl(host, &args))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn attach_existing_mdev_to_defined_domain_is_in_its_config() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    let out = vgpuctl(&h, &["attach", "vm1", UUID, "--json"]);
    let owners = json(&vgpuctl(&h, &["owners", "--json"]));
    let held: Vec<(&str, &str, bool, bool)> = owners["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|o| {
            o["holders"].as_array().unwrap().iter().map(move |h| {
                (
                    o["id"].as_str().unwrap(),
                    h["domain"].as_str().unwrap(),
                    h["live"].as_bool().unwrap(),
                    h["config"].as_bool().unwrap(),
                )
            })
        })
        .collect();
    assert_eq!(
        (out.status.code(), &json(&out)["kind"], held),
        (
            Some(0),
            &serde_json::json!("mdev"),
            vec![(UUID, "vm1", false, true)]
        )
    );
}

#[test]
fn attach_of_a_vgpu_another_domain_holds_is_refused_naming_it() {
    let h = host();
    h.define("vm1");
    h.define("vm2");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "vm1", UUID]);
    let out = vgpuctl(&h, &["attach", "vm2", UUID, "--json"]);
    let value = json(&out);
    assert_eq!(
        (
            out.status.code(),
            &value["kind"],
            value["error"].as_str().unwrap().contains("vm1")
        ),
        (Some(1), &serde_json::json!("conflict"), true)
    );
}

#[test]
fn attach_with_gpu_and_type_twice_changes_nothing_the_second_time() {
    let h = host();
    h.define("vm1");
    let first = json(&attach_new(&h, "vm1", T4, "T4-2Q"));
    let second = json(&attach_new(&h, "vm1", T4, "T4-2Q"));
    let list = json(&vgpuctl(&h, &["list", "--json"]));
    let vgpus = common::vgpu_types(common::gpu(&list, T4)).len();
    assert_eq!(
        (
            &first["created"],
            &first["changed"],
            &second["created"],
            &second["changed"],
            first["id"] == second["id"],
            vgpus
        ),
        (
            &serde_json::json!(true),
            &serde_json::json!(true),
            &serde_json::json!(false),
            &serde_json::json!(false),
            true,
            1
        )
    );
}

#[test]
fn attach_with_gpu_of_vendor_vfio_type_attaches_the_vf_unmanaged() {
    let h = host();
    h.define("vm1");
    let out = attach_new(&h, "vm1", L40S, "L40S-24Q");
    let value = json(&out);
    assert_eq!(
        (out.status.code(), &value["kind"], &value["created"]),
        (
            Some(0),
            &serde_json::json!("vendor-vf"),
            &serde_json::json!(true)
        )
    );
}

/// `nova-config` leaves out a VF that a domain Nova does not manage holds, naming the domain,
/// so that Nova does not hand it out again; the other defined VF is offered.
#[test]
fn nova_config_leaves_out_a_vf_a_domain_outside_nova_holds() {
    let (h, held) = held_by_vm1(L40S, "L40S-12Q");
    let free = create(&h, L40S, "L40S-12Q", None);
    vgpuctl(&h, &["define", L40S, "--type", "L40S-12Q"]);

    let out = vgpuctl(&h, &["nova-config", "--nova-release", "2025.1", "--json"]);
    let value = json(&out);

    let specs: Vec<&str> = value["device_spec"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].as_str().unwrap())
        .collect();
    assert_eq!(out.status.code(), Some(0));
    assert!(!specs.contains(&held.as_str()), "{specs:?}");
    assert!(specs.contains(&free.as_str()), "{specs:?}");
    assert_eq!(
        value["warnings"],
        serde_json::json!([format!(
            "{held} left out: libvirt domain vm1 holds it, and Nova does not manage vm1"
        )])
    );
}

#[test]
fn detach_with_destroy_leaves_neither_hostdev_nor_vgpu() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "vm1", UUID]);
    let out = vgpuctl(&h, &["detach", "vm1", UUID, "--destroy", "--json"]);
    let owners = json(&vgpuctl(&h, &["owners", "--json"]));
    let ours = owners["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["id"] == UUID)
        .count();
    assert_eq!(
        (out.status.code(), &json(&out)["destroyed"], ours),
        (Some(0), &serde_json::json!(true), 0)
    );
}

#[test]
fn detach_of_a_vgpu_the_domain_does_not_hold_changes_nothing() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    let out = vgpuctl(&h, &["detach", "vm1", UUID, "--json"]);
    let text = vgpuctl(&h, &["detach", "vm1", UUID]);
    assert_eq!(
        (
            out.status.code(),
            &json(&out)["changed"],
            String::from_utf8(text.stdout).unwrap()
        ),
        (
            Some(0),
            &serde_json::json!(false),
            format!("vm1: {UUID} not attached\n")
        )
    );
}

#[test]
fn detach_from_the_wrong_domain_names_the_domain_that_holds_it() {
    let h = host();
    h.define("vm1");
    h.define("web-1");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "web-1", UUID]);

    let text = vgpuctl(&h, &["detach", "vm1", UUID]);
    let out = vgpuctl(&h, &["detach", "vm1", UUID, "--json"]);

    assert_eq!(
        (
            text.status.code(),
            String::from_utf8(text.stdout).unwrap(),
            out.status.code(),
            &json(&out)["held_by"]
        ),
        (
            Some(0),
            format!("vm1: {UUID} not attached (web-1 holds it: `vgpuctl detach web-1 {UUID}`)\n"),
            Some(0),
            &serde_json::json!(["web-1"])
        )
    );
}

#[test]
fn attach_to_a_domain_that_does_not_exist_is_not_found() {
    let h = host();
    create(&h, T4, "T4-2Q", Some(UUID));
    let out = vgpuctl(&h, &["attach", "nosuch", UUID, "--json"]);
    assert_eq!(
        (out.status.code(), &json(&out)["kind"]),
        (Some(1), &serde_json::json!("not-found"))
    );
}

#[test]
fn destroy_of_a_vgpu_a_domain_holds_is_refused_naming_the_domain() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "vm1", UUID]);
    let out = vgpuctl(&h, &["destroy", UUID, "--json"]);
    let value = json(&out);
    assert_eq!(
        (
            out.status.code(),
            &value["kind"],
            value["error"].as_str().unwrap().to_owned()
        ),
        (
            Some(1),
            &serde_json::json!("busy"),
            format!("cannot destroy {UUID}: {UUID} is in use: libvirt domain(s) vm1 reference it")
        )
    );
}

/// A vGPU that no domain holds, and a domain holding an mdev that is not on the host.
#[test]
fn owners_lists_orphans_and_missing_devices() {
    const ABSENT: &str = "7d0f6a2e-5b3c-4e1d-8a9f-0c1b2d3e4f5a";
    let h = host();
    create(&h, T4, "T4-2Q", Some(UUID));
    h.define_with(
        "vm1",
        &format!(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\
             <source><address uuid='{ABSENT}'/></source></hostdev>"
        ),
    );
    let owners = json(&vgpuctl(&h, &["owners", "--json"]));
    let orphans: Vec<&str> = owners["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["holders"].as_array().unwrap().is_empty())
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    let missing: Vec<(&str, &str)> = owners["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["domain"].as_str().unwrap(), r["device"].as_str().unwrap()))
        .collect();
    assert_eq!((orphans, missing), (vec![UUID], vec![("vm1", ABSENT)]));
}

/// The guest sees the vGPU where `--guest-address` says: libvirt keeps that address.
#[test]
fn attach_with_guest_address_keeps_it_in_the_domain_xml() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    let out = vgpuctl(
        &h,
        &["attach", "vm1", UUID, "--guest-address", "0000:00:09.0"],
    );
    let xml = inactive_xml(&h, "vm1");
    let xml = String::from_utf8_lossy(&xml);
    assert_eq!(
        (
            out.status.code(),
            xml.contains(
                "<address type='pci' domain='0x0000' bus='0x00' slot='0x09' function='0x0'/>"
            )
        ),
        (Some(0), true),
        "{xml}"
    );
}

/// `attach` records the vGPU's type in the domain's metadata, through libvirt, as the hook of
/// a host the domain migrates to reads it back; attaching a second one keeps the first.
#[test]
fn attach_records_the_type_in_the_domains_metadata() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    let vf = create(&h, L40S, "L40S-12Q", None);

    let first = vgpuctl(&h, &["attach", "vm1", UUID]);
    let second = vgpuctl(&h, &["attach", "vm1", &vf]);
    let xml = inactive_xml(&h, "vm1");
    let read = vgpu_domain::xml::domain_in_bytes(&xml).unwrap();

    assert_eq!(
        (first.status.code(), second.status.code()),
        (Some(0), Some(0))
    );
    assert_eq!(
        read.device_types,
        vec![
            (UUID.parse().unwrap(), "GRID T4-2Q".to_owned()),
            (vf.parse().unwrap(), "NVIDIA L40S-12Q".to_owned())
        ],
        "{}",
        String::from_utf8_lossy(&xml)
    );
}

/// `attach --gpu` that starts a defined vGPU and then fails to attach stops it again: its
/// definition stays, so the domain's vGPU can still be started.
#[test]
fn failed_attach_of_a_started_vgpu_keeps_its_definition() {
    let h = host();
    h.define("vm1");
    let first = json(&attach_new(&h, "vm1", T4, "T4-2Q"));
    let id = first["id"].as_str().unwrap().to_owned();
    // The domain references it: only a forced stop takes it away.
    assert_eq!(
        vgpuctl(&h, &["stop", &id, "--force"]).status.code(),
        Some(0)
    );
    // A live attach to a domain that is not running: libvirt refuses.
    let failed = vgpuctl(
        &h,
        &[
            "attach", "vm1", "--gpu", T4, "--type", "T4-2Q", "--live", "--json",
        ],
    );
    let started = vgpuctl(&h, &["start", &id]);
    assert_eq!(
        (
            failed.status.code(),
            &json(&failed)["kind"],
            started.status.code()
        ),
        (Some(1), &serde_json::json!("conflict"), Some(0))
    );
}

#[test]
fn detach_with_destroy_of_a_vgpu_another_domain_names_is_refused_until_forced() {
    let h = host();
    create(&h, T4, "T4-2Q", Some(UUID));
    h.define("vm1");
    vgpuctl(&h, &["attach", "vm1", UUID, "--config"]);
    // Another tool then gives vm2 the same vGPU, behind vgpuctl's back.
    h.define_with(
        "vm2",
        &format!(
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\
             <source><address uuid='{UUID}'/></source></hostdev>"
        ),
    );
    let refused = vgpuctl(&h, &["detach", "vm1", UUID, "--destroy", "--json"]);
    let forced = vgpuctl(&h, &["detach", "vm2", UUID, "--destroy", "--force"]);
    assert_eq!(
        (
            refused.status.code(),
            &json(&refused)["kind"],
            forced.status.code()
        ),
        (Some(1), &serde_json::json!("busy"), Some(0))
    );
}

#[test]
fn attach_with_gpu_of_a_plain_vf_twice_changes_nothing_the_second_time() {
    const FLEX: &str = "0001:03:00.0";
    let h = host();
    h.define("vm1");
    vgpuctl(&h, &["sriov", FLEX, "--vfs", "2"]);
    let first = json(&attach_new(&h, "vm1", FLEX, "vf"));
    let second = attach_new(&h, "vm1", FLEX, "vf");
    assert_eq!(
        (
            &first["kind"],
            second.status.code(),
            &json(&second)["changed"],
            &json(&second)["id"]
        ),
        (
            &serde_json::json!("plain-vf"),
            Some(0),
            &serde_json::json!(false),
            &first["id"]
        )
    );
}

#[test]
fn attach_with_an_index_past_the_domains_vgpus_is_bad_input() {
    let h = host();
    h.define("vm1");
    let out = vgpuctl(
        &h,
        &[
            "attach", "vm1", "--gpu", L40S, "--type", "L40S-24Q", "--index", "1", "--json",
        ],
    );
    assert_eq!(
        (out.status.code(), &json(&out)["kind"]),
        (Some(1), &serde_json::json!("bad-input"))
    );
}

#[test]
fn undefine_of_an_undefined_vgpu_is_not_found() {
    let h = host();
    let out = vgpuctl(&h, &["undefine", UUID, "--json"]);
    assert_eq!(
        (out.status.code(), &json(&out)["kind"]),
        (Some(1), &serde_json::json!("not-found"))
    );
}

/// The domain's index 0 on the T4 is a T4-2Q: asking for a T4-4Q there is refused, naming
/// both types, and changes nothing.
#[test]
fn attach_with_gpu_and_another_type_at_an_index_is_refused_naming_both() {
    let h = host();
    h.define("vm1");
    let first = vgpuctl(&h, &["attach", "vm1", "--gpu", T4, "--type", "T4-2Q"]);
    assert_eq!(first.status.code(), Some(0));
    let owners_before = json(&vgpuctl(&h, &["owners", "--json"]));

    let out = vgpuctl(
        &h,
        &[
            "attach", "vm1", "--gpu", T4, "--type", "T4-4Q", "--index", "0", "--json",
        ],
    );
    let value = json(&out);

    let error = value["error"].as_str().unwrap();
    assert_eq!(
        (
            out.status.code(),
            &value["kind"],
            error.contains("GRID T4-2Q (nvidia-231)") && error.ends_with("not the T4-4Q asked for"),
            json(&vgpuctl(&h, &["owners", "--json"])) == owners_before
        ),
        (Some(1), &serde_json::json!("conflict"), true, true),
        "{error}"
    );
}

/// `stop` takes a vGPU away as `destroy` does: refused while a domain references it.
#[test]
fn stop_of_a_vgpu_a_domain_holds_is_refused_naming_the_domain() {
    let h = host();
    h.define("vm1");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "vm1", UUID]);

    let out = vgpuctl(&h, &["stop", UUID, "--json"]);
    let value = json(&out);

    assert_eq!(
        (
            out.status.code(),
            &value["kind"],
            value["error"].as_str().unwrap().contains(&format!(
                "{UUID} is in use: libvirt domain(s) vm1 reference it"
            ))
        ),
        (Some(1), &serde_json::json!("busy"), true),
        "{value}"
    );
}

/// Every command that takes a device away refuses the same held VF the same way, naming the
/// domain: `sriov` (removing the VFs), `unbind`, `stop` and `destroy`. The VF stays given out.
#[test]
fn every_removal_command_refuses_a_vf_a_domain_holds_naming_the_domain() {
    let h = host();
    h.define("vm1");
    let flex = "0001:03:00.0";
    assert_eq!(
        vgpuctl(&h, &["sriov", flex, "--vfs", "2"]).status.code(),
        Some(0)
    );
    let vf = create(&h, flex, "vf", None);
    assert_eq!(vgpuctl(&h, &["attach", "vm1", &vf]).status.code(), Some(0));
    let held = format!("{vf} is in use: libvirt domain(s) vm1 reference it");

    let answers: Vec<(Option<i32>, bool)> = [
        vec!["sriov", flex, "--vfs", "0"],
        vec!["unbind", &vf],
        vec!["stop", &vf],
        vec!["destroy", &vf],
    ]
    .iter()
    .map(|args| {
        let mut args = args.clone();
        args.push("--json");
        let out = vgpuctl(&h, &args);
        let value = json(&out);
        (
            out.status.code(),
            value["error"].as_str().unwrap_or_default().contains(&held),
        )
    })
    .collect();
    let list = json(&vgpuctl(&h, &["list", flex, "--json"]));

    assert_eq!(answers, vec![(Some(1), true); 4]);
    assert_eq!(list["gpus"][0]["vgpus"][0]["id"], serde_json::json!(vf));
}

/// `apply` leaves a GPU alone when its plan would take away what a domain holds, and says how
/// to free it.
#[test]
fn apply_that_would_take_a_held_vgpu_skips_the_gpu_saying_what_to_do() {
    let h = host();
    h.define("web-1");
    create(&h, T4, "T4-2Q", Some(UUID));
    vgpuctl(&h, &["attach", "web-1", UUID]);
    let file = h.state.path().join("host.toml");
    std::fs::write(
        &file,
        format!("version = 1\n[[configs.default.gpu]]\naddress = \"{T4}\"\ntypes = {{ \"T4-4Q\" = 1 }}\n"),
    )
    .unwrap();

    let out = vgpuctl(&h, &["apply", "-f", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);

    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{T4}: skipped: {UUID} would be taken away, but libvirt domain web-1 (shut off) holds \
             it: this GPU is left as it is (`vgpuctl detach web-1 {UUID}` frees it; stopping the \
             domain does not, its configuration names it)\n"
        )),
        "{stdout}"
    );
}

/// A libvirt that is configured but does not answer: nothing is taken away unless forced.
#[test]
fn stop_while_libvirt_does_not_answer_is_refused_until_forced() {
    let h = host();
    create(&h, T4, "T4-2Q", Some(UUID));
    let silent = "qemu+unix:///system?socket=/nonexistent/libvirt-sock";
    let run = |args: &[&str]| {
        Command::new(common::vgpuctl_exe())
            .arg("--root")
            .arg(h.sim.root())
            .arg("--state-root")
            .arg(h.state.path())
            .arg("--connect")
            .arg(silent)
            .args(args)
            .env_remove("VGPU_CONNECT")
            .output()
            .unwrap()
    };

    let refused = run(&["stop", UUID, "--json"]);
    let forced = run(&["stop", UUID, "--force"]);

    let value = json(&refused);
    assert_eq!(
        (
            refused.status.code(),
            &value["kind"],
            value["error"].as_str().unwrap().contains(&format!(
                "{UUID} is not taken away: libvirt at {silent} does not answer"
            )),
            forced.status.code()
        ),
        (Some(1), &serde_json::json!("busy"), true, Some(0)),
        "{value}"
    );
}

/// Creates the T4-2Q vGPU `UUID` with a definition and gives it to a new domain `vm1`.
fn defined_vgpu_in_vm1(h: &Host) {
    h.define("vm1");
    let created = vgpuctl(
        h,
        &["create", T4, "--type", "T4-2Q", "--uuid", UUID, "--define"],
    );
    assert_eq!(created.status.code(), Some(0), "{created:?}");
    let attached = vgpuctl(h, &["attach", "vm1", UUID]);
    assert_eq!(attached.status.code(), Some(0), "{attached:?}");
}

/// The ids `list --defined --json` shows.
fn defined_ids(h: &Host) -> Vec<String> {
    json(&vgpuctl(h, &["list", "--defined", "--json"]))["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Without its definition the vGPU is gone after the next boot, and the domain with it:
/// `undefine` is refused as `destroy` is, with the same hint, and the definition stays.
#[test]
fn undefine_of_a_vgpu_a_domain_holds_is_refused_naming_the_domain() {
    let h = host();
    defined_vgpu_in_vm1(&h);

    let out = vgpuctl(&h, &["undefine", UUID]);

    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            defined_ids(&h)
        ),
        (
            Some(1),
            format!(
                "vgpuctl: error: cannot undefine {UUID}: {UUID} is in use: libvirt domain(s) vm1 \
                 reference it\nhint: free it first (detach it from the domain), or use --force\n"
            ),
            vec![UUID.to_owned()]
        )
    );
}

/// One removal policy: `destroy` and `undefine` of the same held vGPU give the same exit code,
/// error kind and message, apart from the verb.
#[test]
fn destroy_and_undefine_of_a_vgpu_a_domain_holds_answer_the_same() {
    let h = host();
    defined_vgpu_in_vm1(&h);

    let destroy = vgpuctl(&h, &["destroy", UUID]);
    let undefine = vgpuctl(&h, &["undefine", UUID]);
    let destroy_json = json(&vgpuctl(&h, &["destroy", UUID, "--json"]));
    let undefine_json = json(&vgpuctl(&h, &["undefine", UUID, "--json"]));

    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        (
            destroy.status.code(),
            stderr(&destroy).replacen("cannot destroy", "cannot undefine", 1),
            &destroy_json["kind"],
            destroy_json["error"].as_str().unwrap().replacen(
                "cannot destroy",
                "cannot undefine",
                1
            )
        ),
        (
            undefine.status.code(),
            stderr(&undefine),
            &undefine_json["kind"],
            undefine_json["error"].as_str().unwrap().to_owned()
        )
    );
}

/// `--force` takes the definition away as it takes a vGPU away for `destroy`; the vGPU keeps
/// running.
#[test]
fn undefine_with_force_of_a_vgpu_a_domain_holds_removes_its_definition() {
    let h = host();
    defined_vgpu_in_vm1(&h);

    let out = vgpuctl(&h, &["undefine", UUID, "--force"]);
    let running = json(&vgpuctl(&h, &["list", T4, "--json"]))["gpus"][0]["vgpus"][0]["id"].clone();

    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            defined_ids(&h),
            running
        ),
        (
            Some(0),
            format!("{UUID}: undefined\n"),
            Vec::<String>::new(),
            serde_json::json!(UUID)
        )
    );
}

/// A stopped vGPU that a domain names in its configuration: `destroy` would remove the
/// definition that brings it back, so it is refused as for a running one.
#[test]
fn destroy_of_a_stopped_vgpu_a_domain_holds_is_refused_and_keeps_its_definition() {
    let h = host();
    defined_vgpu_in_vm1(&h);
    let stopped = vgpuctl(&h, &["stop", UUID, "--force"]);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");

    let out = vgpuctl(&h, &["destroy", UUID, "--json"]);
    let value = json(&out);

    assert_eq!(
        (
            out.status.code(),
            &value["kind"],
            value["error"].as_str().unwrap().to_owned(),
            defined_ids(&h)
        ),
        (
            Some(1),
            &serde_json::json!("busy"),
            format!("cannot destroy {UUID}: {UUID} is in use: libvirt domain(s) vm1 reference it"),
            vec![UUID.to_owned()]
        )
    );
}

/// A type has one name: `owners` shows the vGPU's type as `list --defined` does, and its JSON
/// gives the name beside the id.
#[test]
fn owners_and_list_defined_name_a_vgpus_type_the_same() {
    let h = host();
    defined_vgpu_in_vm1(&h);

    let owners = json(&vgpuctl(&h, &["owners", "--json"]));
    let table = vgpuctl(&h, &["owners"]);
    let defined = json(&vgpuctl(&h, &["list", "--defined", "--json"]));

    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    let row = table.lines().find(|l| l.starts_with(UUID)).unwrap();
    let type_cell = row
        .split("  ")
        .filter(|c| !c.is_empty())
        .nth(2)
        .unwrap()
        .trim();
    assert_eq!(
        (
            &owners["vgpus"][0]["id"],
            &owners["vgpus"][0]["type"],
            &owners["vgpus"][0]["type_name"],
            type_cell,
            &defined["definitions"][0]["id"],
            defined["definitions"][0]["what"].as_str().unwrap()
        ),
        (
            &serde_json::json!(UUID),
            &serde_json::json!("nvidia-231"),
            &serde_json::json!("GRID T4-2Q"),
            "GRID T4-2Q",
            &serde_json::json!(UUID),
            "GRID T4-2Q"
        )
    );
}

/// `nova-config` does not count a T4 vGPU that a domain outside Nova holds in its type's
/// `max_instances`, and says so, as for VFs.
#[test]
fn nova_config_leaves_out_an_mdev_a_domain_outside_nova_holds() {
    let (h, held) = held_by_vm1(T4, "T4-2Q");

    let out = vgpuctl(&h, &["nova-config", "--nova-release", "2025.1", "--json"]);
    let value = json(&out);

    let t4 = value["mdev"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["device_addresses"] == serde_json::json!([T4]))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (
            out.status.code(),
            t4["max_instances"].clone(),
            value["warnings"].clone()
        ),
        (
            Some(0),
            serde_json::json!(7),
            serde_json::json!([format!(
                "mdev {held} left out: libvirt domain vm1 holds it, and Nova does not manage vm1"
            )])
        ),
        "{value}"
    );
}

/// `kubevirt-config` does not count a vGPU a domain of the host's libvirt holds (KubeVirt's
/// domains run in its pods), and says so; the other vGPU of the type is counted.
#[test]
fn kubevirt_config_leaves_out_a_vf_a_host_domain_holds() {
    let (h, held) = held_by_vm1(L40S, "L40S-12Q");
    create(&h, L40S, "L40S-12Q", None);

    let out = vgpuctl(&h, &["kubevirt-config", "--node", "node-a", "--json"]);
    let value = json(&out);

    let warnings: Vec<&str> = value["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains(&held))
        .collect();
    assert_eq!(
        (
            out.status.code(),
            value["allocatable"]["nvidia.com/NVIDIA_L40S-12Q"].clone(),
            warnings.len(),
            warnings.first().is_some_and(|w| w.contains("vm1")),
        ),
        (Some(0), serde_json::json!(1), 1, true),
        "{value}"
    );
}
