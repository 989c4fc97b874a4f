//! The libvirt hook run exactly as libvirt runs it: the script `vgpuctl hook install` writes,
//! with an empty environment, `DOMAIN OP SUBOP -` as arguments and the domain XML on stdin,
//! against a simulated host (`vgpu-sim`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vgpu_sim::SimHost;

use crate::common::{self, mdev_hostdev};

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const FLEX: &str = "0001:03:00.0";
/// The L40S's first VF, where `vgpuctl define` puts its first vGPU.
const VF: &str = "0000:5e:00.4";
const VF_SOURCE: &str = "domain='0x0000' bus='0x5e' slot='0x00' function='0x4'";
const MDEV: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
const VM1: &str = "c08a5023-faee-4249-9aff-ae9ddf28150e";
const VM2: &str = "5b0e64d1-8f0c-4c55-9a51-7e3f1c2d4b6a";
const NS: &str = "https://example.invalid/vgpu/1";
const EIO: i32 = 5;

struct Host {
    sim: SimHost,
    state: tempfile::TempDir,
    hooks: tempfile::TempDir,
}

impl Host {
    fn new(profile: &str) -> Self {
        let host = Host {
            sim: SimHost::mount_for_test(profile),
            state: tempfile::tempdir().unwrap(),
            hooks: tempfile::tempdir().unwrap(),
        };
        let dir = host.hooks.path().to_str().unwrap().to_owned();
        let out = host.vgpuctl(&["hook", "install", "--dir", &dir]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        host
    }

    fn vgpuctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_vgpuctl"))
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

    fn script(&self) -> PathBuf {
        self.hooks.path().join("qemu.d/vgpu")
    }

    /// Runs the installed hook as libvirt does: `env -i qemu.d/vgpu NAME OP SUBOP -`.
    fn hook(&self, name: &str, op: &str, subop: &str, xml: &str) -> Output {
        common::run_hook(self.hooks.path(), name, op, subop, xml)
    }

    fn prepare(&self, xml: &str) -> Output {
        self.hook("vm1", "prepare", "begin", xml)
    }

    fn release(&self, xml: &str) -> Output {
        self.hook("vm1", "release", "end", xml)
    }

    fn sys(&self, rel: &str) -> PathBuf {
        self.sim.root().join("sys/bus/pci/devices").join(rel)
    }

    fn vf_type(&self, vf: &str) -> String {
        std::fs::read_to_string(self.sys(&format!("{vf}/nvidia/current_vgpu_type")))
            .unwrap()
            .trim()
            .to_owned()
    }

    fn mdev_running(&self, uuid: &str) -> bool {
        self.sim
            .root()
            .join("sys/bus/mdev/devices")
            .join(uuid)
            .exists()
    }

    fn record(&self, domain: &str) -> PathBuf {
        self.state.path().join("run/vgpu/hook").join(domain)
    }

    fn write_config(&self, text: &str) {
        let dir = self.state.path().join("etc/vgpu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hook.toml"), text).unwrap();
    }

    /// stderr with this host's temporary paths shown as `<sim>` and `<state>`.
    fn stderr(&self, out: &Output) -> String {
        text(&out.stderr)
            .replace(self.sim.root().to_str().unwrap(), "<sim>")
            .replace(self.state.path().to_str().unwrap(), "<state>")
    }

    fn ok(&self, args: &[&str]) {
        let out = self.vgpuctl(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A domain's XML as libvirt hands it to hooks.
fn domain_xml(uuid: &str, metadata: &str, devices: &str) -> String {
    format!(
        "<domain type='kvm' id='1'>\n  <name>vm1</name>\n  <uuid>{uuid}</uuid>\n  \
         <metadata>{metadata}</metadata>\n  <memory unit='KiB'>65536</memory>\n  \
         <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n{devices}  </devices>\n</domain>\n"
    )
}

fn pci_hostdev(source: &str, managed: &str) -> String {
    format!(
        "    <hostdev mode='subsystem' type='pci' managed='{managed}'>\
         <source><address {source}/></source></hostdev>\n"
    )
}

fn vgpu_metadata(type_name: &str) -> String {
    format!("<vgpu:vgpu xmlns:vgpu=\"{NS}\" type=\"{type_name}\"/>")
}

fn nova_metadata(flavor: &str) -> String {
    format!(
        "<nova:instance xmlns:nova=\"http://openstack.org/xmlns/libvirt/nova/1.1\">\
         <nova:name>server-1</nova:name><nova:flavor name=\"{flavor}\"><nova:vcpus>4</nova:vcpus>\
         </nova:flavor></nova:instance>"
    )
}

fn vf_domain(metadata: &str) -> String {
    domain_xml(VM1, metadata, &pci_hostdev(VF_SOURCE, "no"))
}

fn exists(path: &Path) -> bool {
    path.exists()
}

#[test]
fn prepare_starts_a_defined_mdev_and_records_it() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    let out = h.prepare(&domain_xml(VM1, "", &mdev_hostdev(MDEV)));
    assert_eq!(
        (
            out.status.code(),
            text(&out.stdout),
            h.stderr(&out),
            h.mdev_running(MDEV),
            std::fs::read_to_string(h.record(VM1)).unwrap()
        ),
        (
            Some(0),
            String::new(),
            String::new(),
            true,
            format!(
                "{{\"version\":1,\"domain\":\"vm1\",\"made\":[{{\"kind\":\"mdev\",\"uuid\":\"{MDEV}\"}}]}}\n"
            )
        )
    );
}

#[test]
fn release_removes_the_mdev_it_started_and_keeps_its_definition() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    let xml = domain_xml(VM1, "", &mdev_hostdev(MDEV));
    h.prepare(&xml);
    let out = h.release(&xml);
    let defined = h.state.path().join("etc/mdevctl.d").join(T4).join(MDEV);
    assert_eq!(
        (
            out.status.code(),
            h.mdev_running(MDEV),
            exists(&defined),
            exists(&h.record(VM1))
        ),
        (Some(0), false, true, false)
    );
}

#[test]
fn prepare_starts_a_defined_mdev_on_a_vf_of_an_ampere_gpu() {
    let h = Host::new("a40-vf-mdev");
    let list: serde_json::Value =
        serde_json::from_slice(&h.vgpuctl(&["list", "--json"]).stdout).unwrap();
    let a40 = list["gpus"][0]["address"].as_str().unwrap().to_owned();
    h.ok(&["define", &a40, "--type", "A40-2Q", "--uuid", MDEV]);
    let out = h.prepare(&domain_xml(VM1, "", &mdev_hostdev(MDEV)));
    assert_eq!((out.status.code(), h.mdev_running(MDEV)), (Some(0), true));
}

#[test]
fn prepare_sets_the_vf_type_its_definition_names() {
    let h = Host::new("mixed");
    h.ok(&["define", L40S, "--type", "L40S-12Q"]);
    let out = h.prepare(&vf_domain(""));
    assert_eq!(
        (out.status.code(), h.stderr(&out), h.vf_type(VF)),
        (Some(0), String::new(), "1153".to_owned())
    );
}

#[test]
fn prepare_sets_the_vf_type_the_domain_metadata_names() {
    let h = Host::new("mixed");
    let out = h.prepare(&vf_domain(&vgpu_metadata("L40S-24Q")));
    assert_eq!(
        (out.status.code(), h.stderr(&out), h.vf_type(VF)),
        (Some(0), String::new(), "1155".to_owned())
    );
}

#[test]
fn prepare_sets_the_vf_type_hook_toml_maps_the_nova_flavor_to() {
    let h = Host::new("mixed");
    h.write_config("[flavors]\n\"vgpu.l40s-12q\" = \"NVIDIA L40S-12Q\"\n");
    let out = h.prepare(&vf_domain(&nova_metadata("vgpu.l40s-12q")));
    assert_eq!(
        (out.status.code(), h.stderr(&out), h.vf_type(VF)),
        (Some(0), String::new(), "1153".to_owned())
    );
}

/// The L40S holds 4 L40S-12Q; 4 definitions that are not running hold all of them.
#[test]
fn prepare_leaves_room_for_defined_vgpus_that_are_not_running() {
    let h = Host::new("mixed");
    for _ in 0..4 {
        h.ok(&["define", L40S, "--type", "L40S-12Q"]);
    }
    let xml = domain_xml(
        VM1,
        &vgpu_metadata("L40S-12Q"),
        &pci_hostdev(
            "domain='0x0000' bus='0x5e' slot='0x01' function='0x0'",
            "no",
        ),
    );
    let out = h.prepare(&xml);
    assert_eq!(
        (out.status.code(), h.stderr(&out), h.vf_type("0000:5e:01.0")),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make 0000:5e:01.0 ready (type \"L40S-12Q\" from the domain's metadata): GPU {L40S} has room for 0 more vGPU(s) of type 1153, not 1 (4 held for defined vGPUs)\n"
            ),
            "0".to_owned()
        )
    );
}

#[test]
fn release_clears_the_vf_type_it_set_and_keeps_the_definition() {
    let h = Host::new("mixed");
    h.ok(&["define", L40S, "--type", "L40S-12Q"]);
    h.prepare(&vf_domain(""));
    let out = h.release(&vf_domain(""));
    let defined = h.state.path().join(format!("etc/vgpu/vf-vgpus/{VF}.json"));
    assert_eq!(
        (out.status.code(), h.vf_type(VF), exists(&defined)),
        (Some(0), "0".to_owned(), true)
    );
}

#[test]
fn prepare_binds_a_plain_vf_its_binding_definition_names_and_release_gives_it_back() {
    let h = Host::new("mixed");
    h.ok(&["sriov", FLEX, "--vfs", "2"]);
    h.ok(&["create", FLEX, "--type", "vf", "--define"]);
    h.ok(&["stop", "0001:03:00.1"]);
    let xml = domain_xml(
        VM1,
        "",
        &pci_hostdev(
            "domain='0x0001' bus='0x03' slot='0x00' function='0x1'",
            "yes",
        ),
    );
    let driver = || {
        std::fs::read_link(h.sys("0001:03:00.1/driver"))
            .map(|l| l.file_name().unwrap().to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let prepared = h.prepare(&xml);
    let during = driver();
    let released = h.release(&xml);
    assert_eq!(
        (
            prepared.status.code(),
            during,
            released.status.code(),
            driver()
        ),
        (Some(0), "vfio-pci".to_owned(), Some(0), "i915".to_owned())
    );
}

#[test]
fn a_forced_vf_count_change_leaves_no_domain_holding_the_vfs_it_took() {
    let h = Host::new("mixed");
    h.ok(&["sriov", FLEX, "--vfs", "2"]);
    h.ok(&["create", FLEX, "--type", "vf", "--define"]);
    h.ok(&["stop", "0001:03:00.1"]);
    let hostdev = "domain='0x0001' bus='0x03' slot='0x00' function='0x1'";
    let prepared = h.prepare(&domain_xml(VM1, "", &pci_hostdev(hostdev, "yes")));
    let record = || std::fs::read_to_string(h.record(VM1));
    let listed_before = record().unwrap().contains("0001:03:00.1");

    let unforced = h.vgpuctl(&["sriov", FLEX, "--vfs", "0"]);
    let forced = h.vgpuctl(&["sriov", FLEX, "--vfs", "0", "--force"]);

    assert_eq!(
        (
            prepared.status.code(),
            listed_before,
            unforced.status.code(),
            forced.status.code(),
            record().unwrap().contains("0001:03:00.1")
        ),
        (Some(0), true, Some(1), Some(0), false),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
}

#[test]
fn failure_in_the_middle_of_prepare_leaves_nothing_behind() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    h.sim.fail_next(1, EIO, "*/current_vgpu_type");
    let devices = mdev_hostdev(MDEV) + &pci_hostdev(VF_SOURCE, "no");
    let out = h.prepare(&domain_xml(VM1, &vgpu_metadata("L40S-12Q"), &devices));
    assert_eq!(
        (
            out.status.code(),
            h.stderr(&out),
            h.mdev_running(MDEV),
            h.vf_type(VF),
            exists(&h.record(VM1))
        ),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make {VF} ready: cannot write \"1153\" to \
                 <sim>/sys/bus/pci/devices/{VF}/nvidia/current_vgpu_type: Input/output error (os error 5)\n"
            ),
            false,
            "0".to_owned(),
            false
        )
    );
}

#[test]
fn release_after_a_later_owner_took_the_vf_leaves_it_alone() {
    let h = Host::new("mixed");
    let metadata = vgpu_metadata("L40S-12Q");
    h.prepare(&vf_domain(&metadata));
    // vm1 stopped; vm2 starts with the same VF before vm1's release runs.
    let vm2 = domain_xml(VM2, &metadata, &pci_hostdev(VF_SOURCE, "no"));
    let taken = h.hook("vm2", "prepare", "begin", &vm2);
    let late = h.release(&vf_domain(&metadata));
    assert_eq!(
        (
            taken.status.code(),
            late.status.code(),
            h.vf_type(VF),
            exists(&h.record(VM1)),
            exists(&h.record(VM2))
        ),
        (Some(0), Some(0), "1153".to_owned(), false, true)
    );
}

#[test]
fn release_leaves_a_vf_a_process_holds_open() {
    let h = Host::new("mixed");
    let xml = vf_domain(&vgpu_metadata("L40S-12Q"));
    h.prepare(&xml);
    let cdev = std::fs::read_dir(h.sys(&format!("{VF}/vfio-dev")))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let node = format!("/dev/vfio/devices/{}", cdev.to_string_lossy());
    h.sim.hold(4242, "qemu-system-x86", &node).unwrap();
    let out = h.release(&xml);
    assert_eq!(
        (out.status.code(), h.vf_type(VF), exists(&h.record(VM1))),
        (Some(0), "1153".to_owned(), false)
    );
}

#[test]
fn release_leaves_a_vgpu_that_was_running_before_prepare() {
    let h = Host::new("mixed");
    h.ok(&["create", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    let xml = domain_xml(VM1, "", &mdev_hostdev(MDEV));
    let prepared = h.prepare(&xml);
    let released = h.release(&xml);
    assert_eq!(
        (
            prepared.status.code(),
            released.status.code(),
            h.mdev_running(MDEV)
        ),
        (Some(0), Some(0), true)
    );
}

#[test]
fn other_operations_exit_0_without_reading_the_xml() {
    let h = Host::new("mixed");
    let out = h.hook("vm1", "start", "begin", "not xml");
    // `started` reads the XML for the usage ledger, and still never stops a domain.
    let started = h.hook("vm1", "started", "begin", "not xml");
    assert_eq!(
        (
            out.status.code(),
            text(&out.stdout),
            text(&out.stderr),
            started.status.code(),
            text(&started.stderr).starts_with("vgpu hook: vm1 started: "),
        ),
        (Some(0), String::new(), String::new(), Some(0), true)
    );
}

#[test]
fn devices_on_gpus_the_hook_does_not_manage_are_left_to_libvirt() {
    let h = Host::new("mixed");
    let devices = pci_hostdev(
        "domain='0x0000' bus='0xaf' slot='0x00' function='0x0'",
        "yes",
    ) + &pci_hostdev(
        "domain='0x0000' bus='0x3a' slot='0x00' function='0x0'",
        "yes",
    ) + &pci_hostdev(
        "domain='0x0000' bus='0x99' slot='0x00' function='0x0'",
        "yes",
    );
    let out = h.prepare(&domain_xml(VM1, "", &devices));
    assert_eq!(
        (out.status.code(), h.stderr(&out), exists(&h.record(VM1))),
        (Some(0), String::new(), false)
    );
}

/// Runs `prepare` on `xml` and returns its exit code and stderr, and whether it left a record.
fn refused(h: &Host, xml: &str) -> (Option<i32>, String, bool) {
    let out = h.prepare(xml);
    (out.status.code(), h.stderr(&out), exists(&h.record(VM1)))
}

#[test]
fn malformed_xml_is_one_line_and_exit_1() {
    let h = Host::new("mixed");
    assert_eq!(
        refused(&h, "<domain><name>vm1</name>"),
        (
            Some(1),
            "vgpu hook: vm1 prepare: XML: not well-formed: the root node was opened but never closed\n"
                .to_owned(),
            false
        )
    );
}

#[test]
fn entity_expansion_is_refused() {
    let h = Host::new("mixed");
    let xml = "<!DOCTYPE domain [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;'>]>\
               <domain><name>&b;</name></domain>";
    assert_eq!(
        refused(&h, xml),
        (
            Some(1),
            "vgpu hook: vm1 prepare: XML: has a DTD or markup declaration (<!DOCTYPE, <!ENTITY), which is refused\n"
                .to_owned(),
            false
        )
    );
}

#[test]
fn xml_larger_than_the_bound_is_refused() {
    let h = Host::new("mixed");
    let xml = format!("<domain>{}</domain>", " ".repeat(5 << 20));
    assert_eq!(
        refused(&h, &xml),
        (
            Some(1),
            "vgpu hook: vm1 prepare: XML: 4194305 bytes, more than the 4194304 read\n".to_owned(),
            false
        )
    );
}

#[test]
fn release_with_malformed_xml_says_so_and_exits_0() {
    let h = Host::new("mixed");
    let out = h.release("<domain>");
    assert_eq!(
        (out.status.code(), h.stderr(&out)),
        (
            Some(0),
            "vgpu hook: vm1 release: XML: not well-formed: the root node was opened but never closed\n"
                .to_owned()
        )
    );
}

#[test]
fn mdev_neither_running_nor_defined_is_refused() {
    let h = Host::new("mixed");
    assert_eq!(
        refused(&h, &domain_xml(VM1, "", &mdev_hostdev(MDEV))),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make {MDEV} ready: {MDEV} is neither running nor defined (no definition under <state>/etc/mdevctl.d)\n"
            ),
            false
        )
    );
}

#[test]
fn vf_with_no_type_from_any_source_is_refused() {
    let h = Host::new("mixed");
    assert_eq!(
        refused(&h, &vf_domain("")),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make {VF} ready: no vGPU type for VF {VF}: \
                 it has no definition, and the domain's metadata names neither a type \
                 (<vgpu:vgpu type=\"…\"/>) nor a Nova flavor to map in <state>/etc/vgpu/hook.toml \
                 (hint: define one with `vgpuctl define`, name one in the domain's metadata, or give \
                 the domain a Nova flavor that the hook's [flavors] maps)\n"
            ),
            false
        )
    );
}

#[test]
fn nova_flavor_without_a_mapping_is_refused() {
    let h = Host::new("mixed");
    h.write_config("[flavors]\n\"vgpu.other\" = \"L40S-12Q\"\n");
    assert_eq!(
        refused(&h, &vf_domain(&nova_metadata("m1.large"))),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make {VF} ready: Nova flavor \"m1.large\" has no vGPU type in <state>/etc/vgpu/hook.toml ([flavors])\n"
            ),
            false
        )
    );
}

#[test]
fn hook_toml_with_an_unknown_key_is_refused() {
    let h = Host::new("mixed");
    h.write_config("[flavors]\n\"vgpu.l40s-12q\" = \"L40S-12Q\"\n[defaults]\ntype = \"L40S-1Q\"\n");
    assert_eq!(
        refused(&h, &vf_domain(&nova_metadata("vgpu.l40s-12q"))),
        (
            Some(1),
            "vgpu hook: vm1 prepare: <state>/etc/vgpu/hook.toml:3:2: unknown field `defaults`, expected `flavors`\n"
                .to_owned(),
            false
        )
    );
}

#[test]
fn hook_toml_type_the_gpu_does_not_offer_is_refused_and_nothing_is_made() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    h.write_config("[flavors]\n\"vgpu.big\" = \"L40S-96Q\"\n");
    let devices = mdev_hostdev(MDEV) + &pci_hostdev(VF_SOURCE, "no");
    let (code, stderr, recorded) =
        refused(&h, &domain_xml(VM1, &nova_metadata("vgpu.big"), &devices));
    assert_eq!(
        (
            code,
            stderr.lines().count(),
            stderr.starts_with(&format!(
                "vgpu hook: vm1 prepare: domain vm1: cannot make {VF} ready (type \"L40S-96Q\" for Nova flavor \"vgpu.big\" in <state>/etc/vgpu/hook.toml): GPU {L40S} offers no vGPU type \"L40S-96Q\"; it offers: "
            )),
            recorded,
            h.mdev_running(MDEV)
        ),
        (Some(1), 1, true, false, false),
        "{stderr}"
    );
}

#[test]
fn install_twice_changes_nothing_and_uninstall_leaves_other_hooks() {
    let h = Host::new("mixed");
    let dir = h.hooks.path().to_str().unwrap().to_owned();
    let other = h.hooks.path().join("qemu.d/other");
    std::fs::write(&other, "#!/bin/sh\nexit 0\n").unwrap();
    let again = h.vgpuctl(&["hook", "install", "--dir", &dir, "--json"]);
    let removed = h.vgpuctl(&["hook", "uninstall", "--dir", &dir, "--json"]);
    let value =
        |out: &Output| -> serde_json::Value { serde_json::from_slice(&out.stdout).unwrap() };
    assert_eq!(
        (
            value(&again)["changed"].clone(),
            value(&removed)["changed"].clone(),
            exists(&h.script()),
            exists(&other)
        ),
        (
            serde_json::json!(false),
            serde_json::json!(true),
            false,
            true
        )
    );
}

#[test]
fn install_over_a_script_it_did_not_write_is_refused() {
    let h = Host::new("mixed");
    std::fs::write(h.script(), "#!/bin/sh\nexit 0\n").unwrap();
    let dir = h.hooks.path().to_str().unwrap().to_owned();
    let out = h.vgpuctl(&["hook", "install", "--dir", &dir]);
    assert_eq!(
        (
            out.status.code(),
            std::fs::read_to_string(h.script()).unwrap()
        ),
        (Some(1), "#!/bin/sh\nexit 0\n".to_owned())
    );
}

/// Without libvirt, the hook's record is what says a domain holds a vGPU: `destroy`, `undefine`
/// and `stop` are refused (kind busy, naming the domain and the record) until forced.
#[test]
fn removal_without_libvirt_is_refused_while_the_hooks_record_holds_the_vgpu() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-4Q", "--uuid", MDEV]);
    let prepared = h.prepare(&domain_xml(VM1, "", &mdev_hostdev(MDEV)));
    let refused = |command: &str| {
        let out = h.vgpuctl(&["--json", command, MDEV]);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            out.status.code(),
            value["kind"].clone(),
            value["error"]
                .as_str()
                .unwrap()
                .replace(h.state.path().to_str().unwrap(), "<state>"),
        )
    };

    let seen = [refused("destroy"), refused("undefine"), refused("stop")];
    let running_after_refusals = h.mdev_running(MDEV);
    let forced = h.vgpuctl(&["destroy", MDEV, "--force"]);
    // The record no longer lists what is gone: the same UUID made again is nobody's.
    let record = std::fs::read_to_string(h.record(VM1));
    let again = h.vgpuctl(&["create", T4, "--type", "T4-4Q", "--uuid", MDEV]);
    let destroyed_again = h.vgpuctl(&["destroy", MDEV]);

    let said = |command: &str| {
        (
            Some(1),
            serde_json::json!("busy"),
            format!(
                "cannot {command} {MDEV}: {MDEV} is in use: the libvirt hook gave it to domain \
                 \"vm1\" (<state>/run/vgpu/hook/{VM1} says so until the domain's release)"
            ),
        )
    };
    assert_eq!(
        (
            prepared.status.code(),
            seen,
            running_after_refusals,
            forced.status.code(),
            record.unwrap().contains(MDEV),
            (again.status.code(), destroyed_again.status.code()),
            h.mdev_running(MDEV)
        ),
        (
            Some(0),
            [said("destroy"), said("undefine"), said("stop")],
            true,
            Some(0),
            false,
            (Some(0), Some(0)),
            false
        )
    );
}

#[test]
fn a_forced_destroy_forgets_a_vgpu_another_tool_removed() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-4Q", "--uuid", MDEV]);
    let prepared = h.prepare(&domain_xml(VM1, "", &mdev_hostdev(MDEV)));
    // Another tool removes the device and its definition; the hook's record still lists it.
    let remove = h
        .sim
        .root()
        .join(format!("sys/bus/mdev/devices/{MDEV}/remove"));
    std::fs::write(remove, "1").unwrap();
    let definition = h.state.path().join(format!("etc/mdevctl.d/{T4}/{MDEV}"));
    std::fs::remove_file(definition).unwrap();
    let record = || std::fs::read_to_string(h.record(VM1));

    let listed_before = record().unwrap().contains(MDEV);
    let unforced = h.vgpuctl(&["destroy", MDEV]);
    let forced = h.vgpuctl(&["destroy", MDEV, "--force"]);

    assert_eq!(
        (
            prepared.status.code(),
            listed_before,
            unforced.status.code(),
            forced.status.code(),
            record().unwrap().contains(MDEV)
        ),
        (Some(0), true, Some(1), Some(0), false),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
}

/// A libvirt that is installed but not running (a domain's XML under etc/libvirt/qemu), or a
/// URI named with --connect that does not answer, may have domains that hold a vGPU: removal
/// is refused as "does not answer" until forced.
#[test]
fn removal_is_refused_when_an_installed_or_named_libvirt_does_not_answer() {
    let h = Host::new("mixed");
    h.ok(&["create", T4, "--type", "T4-4Q", "--uuid", MDEV]);
    let refused = |args: &[&str]| {
        let out = h.vgpuctl(args);
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let error = value["error"].as_str().unwrap().to_owned();
        (out.status.code(), value["kind"].clone(), error)
    };
    let nobody = "qemu:///system?socket=/nonexistent/libvirt-sock";

    let named = refused(&["--json", "--connect", nobody, "destroy", MDEV]);
    let domains = h.state.path().join("etc/libvirt/qemu");
    std::fs::create_dir_all(&domains).unwrap();
    std::fs::write(domains.join("vm1.xml"), "<domain/>\n").unwrap();
    let installed = refused(&["--json", "destroy", MDEV]);
    let still_there = h.mdev_running(MDEV);
    let forced = h.vgpuctl(&["destroy", MDEV, "--force"]);

    let starts = |seen: &(Option<i32>, serde_json::Value, String), uri: &str| {
        (
            seen.0,
            seen.1.clone(),
            seen.2.starts_with(&format!(
                "cannot destroy {MDEV}: {MDEV} is not taken away: libvirt at {uri} does not answer ("
            )),
        )
    };
    assert_eq!(
        (
            starts(&named, nobody),
            starts(&installed, "qemu:///system"),
            still_there,
            forced.status.code(),
            h.mdev_running(MDEV)
        ),
        (
            (Some(1), serde_json::json!("busy"), true),
            (Some(1), serde_json::json!("busy"), true),
            true,
            Some(0),
            false
        ),
        "{named:?} {installed:?}"
    );
}

/// The planner counts the hook's records as holders too: without libvirt, a plan that would
/// replace a vGPU the hook gave a domain skips that GPU naming the record, and `apply` leaves
/// the vGPU running, as `destroy` would refuse it.
#[test]
fn apply_without_libvirt_skips_a_gpu_whose_vgpu_the_hooks_record_holds() {
    let h = Host::new("mixed");
    h.ok(&["define", T4, "--type", "T4-4Q", "--uuid", MDEV]);
    h.prepare(&domain_xml(VM1, "", &mdev_hostdev(MDEV)));
    let file = h.state.path().join("host.toml");
    std::fs::write(
        &file,
        format!("version = 1\n[[configs.default.gpu]]\naddress = \"{T4}\"\ntypes = {{ \"T4-2Q\" = 1 }}\n"),
    )
    .unwrap();

    let out = h.vgpuctl(&["apply", "-f", file.to_str().unwrap()]);

    let stdout = text(&out.stdout).replace(h.state.path().to_str().unwrap(), "<state>");
    assert_eq!(
        (
            out.status.code(),
            stdout.contains(&format!(
                "{T4}: skipped: {MDEV} would be taken away, but domain \"vm1\" by the libvirt \
                 hook's record <state>/run/vgpu/hook/{VM1} holds it: this GPU is left as it is \
                 (stopping domain \"vm1\" releases it; `--force` on a removal takes it anyway)\n"
            )),
            h.mdev_running(MDEV)
        ),
        (Some(1), true, true),
        "{stdout}"
    );
}
