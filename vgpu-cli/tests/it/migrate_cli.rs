//! An incoming domain on two simulated hosts with state roots of their own, the hook run as
//! libvirt runs it (`env -i qemu.d/vgpu NAME migrate begin -`, the XML on stdin): the XML
//! printed names this host's vGPUs, `prepare` then finds them the domain's own, and `release`
//! gives them back. `can-host` makes the same choice and changes nothing.

use std::path::Path;
use std::process::Output;

use proptest::prelude::*;

use crate::common::{
    self, Host, NS, domain_xml, install_hook, json, mdev_domain, mdev_domain_with, pci_source,
    run_hook, stderr, vgpuctl,
};

const GPU_A: &str = "0000:41:00.0";
const GPU_B: &str = "0000:c1:00.0";
const T4: &str = "0000:3b:00.0";
const MDEV: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";

/// Domain `n` asking for `vgpu_type` on the vendor-VFIO VFs `vfs`.
fn vf_domain(n: u32, vgpu_type: &str, vfs: &[&str]) -> String {
    let devices: String = vfs
        .iter()
        .map(|vf| {
            format!(
                "    <hostdev mode='subsystem' type='pci' managed='no'>\n      <source>{}</source>\n      <alias name='hostdev{n}'/>\n    </hostdev>\n",
                pci_source(vf)
            )
        })
        .collect();
    domain_xml(
        n,
        &format!("<vgpu:vgpu xmlns:vgpu=\"{NS}\" type=\"{vgpu_type}\"/>"),
        &devices,
    )
}

/// `vm<n>` started on the host whose hook is in `hooks`, holding `vgpu_type` on `vf`.
fn prepared(hooks: &Path, n: u32, vgpu_type: &str, vf: &str) {
    let out = run_hook(
        hooks,
        &format!("vm{n}"),
        "prepare",
        "begin",
        &vf_domain(n, vgpu_type, &[vf]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn out_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The vendor-VFIO type set on each VF of `gpu` that has one, as `list --json` shows it.
fn typed_vfs(h: &Host, gpu: &str) -> Vec<(String, String)> {
    common::vgpu_types(common::gpu(&common::list(h), gpu))
}

fn records(h: &Host) -> Vec<String> {
    match std::fs::read_dir(h.state.path().join("run/vgpu/hook")) {
        Ok(dir) => dir
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// `virt-xml-validate` (libvirt's own schema) accepts `xml`.
fn assert_valid_domain(xml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("domain.xml");
    std::fs::write(&file, xml).unwrap();
    let out = std::process::Command::new("virt-xml-validate")
        .arg(&file)
        .arg("domain")
        .output()
        .expect("virt-xml-validate runs (Debian package libvirt-clients)");
    assert!(
        out.status.success(),
        "{}{}\n{xml}",
        out_text(&out),
        stderr(&out)
    );
}

/// The L40S VF that the source gave `vm1` is held here by `vm2` with L40S-24Q, so its GPU
/// takes no L40S-12Q (NVIDIA's mixing rule): the VF is rewritten to the other L40S, the same
/// type set there. Libvirt running the hook twice takes no second VF; `prepare` finds the VF
/// the domain's own; a failed migration's `release` gives it back and leaves `vm2`'s alone.
#[test]
fn vendor_vf_held_here_is_rewritten_to_the_other_l40s_with_the_same_type() {
    let dest = common::host("l40s-vendor-vfio");
    let hooks = install_hook(&dest, &[]);
    let held = common::vf("41", 0);
    prepared(hooks.path(), 2, "L40S-24Q", &held);
    let incoming = vf_domain(1, "L40S-12Q", &[&held]);

    let first = run_hook(hooks.path(), "vm1", "migrate", "begin", &incoming);
    let second = run_hook(hooks.path(), "vm1", "migrate", "begin", &incoming);

    let chosen = common::vf("c1", 0);
    let expected = incoming.replace(&pci_source(&held), &pci_source(&chosen));
    assert_eq!(
        (first.status.code(), out_text(&first), stderr(&first)),
        (Some(0), expected.clone(), String::new())
    );
    assert_eq!(out_text(&second), expected);
    assert_eq!(
        typed_vfs(&dest, GPU_B),
        vec![(chosen.clone(), "1153".to_owned())]
    );
    assert_valid_domain(&expected);

    let prepared = run_hook(hooks.path(), "vm1", "prepare", "begin", &expected);
    assert_eq!(prepared.status.code(), Some(0), "{}", stderr(&prepared));
    assert_eq!(typed_vfs(&dest, GPU_B), vec![(chosen, "1153".to_owned())]);

    let released = run_hook(hooks.path(), "vm1", "release", "end", &expected);
    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    assert_eq!(typed_vfs(&dest, GPU_B), Vec::<(String, String)>::new());
    assert_eq!(
        typed_vfs(&dest, GPU_A),
        vec![(held.clone(), "1155".to_owned())]
    );

    // A saved domain restored here is handled as an incoming one.
    let restored = run_hook(hooks.path(), "vm1", "restore", "begin", &incoming);
    assert_eq!(
        (restored.status.code(), out_text(&restored)),
        (Some(0), expected)
    );
    assert_eq!(
        typed_vfs(&dest, GPU_B),
        vec![(common::vf("c1", 0), "1153".to_owned())]
    );
}

/// On the source, `release end migrated` gives back what `prepare` made, as any release does.
#[test]
fn source_release_after_a_migration_gives_the_vf_back() {
    let source = common::host("l40s-vendor-vfio");
    let hooks = install_hook(&source, &[]);
    let vf = common::vf("41", 0);
    let xml = vf_domain(1, "L40S-12Q", &[&vf]);
    prepared(hooks.path(), 1, "L40S-12Q", &vf);
    assert_eq!(typed_vfs(&source, GPU_A).len(), 1);

    let released = common::run_hook_extra(hooks.path(), "vm1", "release", "end", "migrated", &xml);

    assert_eq!(released.status.code(), Some(0), "{}", stderr(&released));
    assert_eq!(typed_vfs(&source, GPU_A), Vec::<(String, String)>::new());
    assert_eq!(records(&source), Vec::<String>::new());
    let audit =
        std::fs::read_to_string(source.state.path().join("var/log/vgpu/audit.jsonl")).unwrap();
    let actions: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| {
            v["action"]
                .as_str()
                .is_some_and(|a| a.starts_with("hook-release"))
        })
        .map(|v| {
            format!(
                "{} {}",
                v["action"].as_str().unwrap(),
                v["result"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        actions,
        vec!["hook-release-migrated started", "hook-release-migrated ok"]
    );
}

/// Nova 2024.1 and later move the mediated devices of the domains they migrate themselves: for
/// a domain with Nova's metadata the hook leaves them, makes nothing and prints nothing.
#[test]
fn mdevs_of_a_nova_domain_are_left_to_nova() {
    let dest = common::host("mixed");
    let hooks = install_hook(&dest, &[]);
    let xml = mdev_domain_with(
        1,
        "<nova:instance xmlns:nova=\"http://openstack.org/xmlns/libvirt/nova/1.1\">\
         <nova:flavor name=\"vgpu.t4\"/></nova:instance>",
        MDEV,
        "GRID T4-2Q",
    );

    let out = run_hook(hooks.path(), "vm1", "migrate", "begin", &xml);

    assert_eq!(
        (out.status.code(), out_text(&out), stderr(&out)),
        (Some(0), String::new(), String::new())
    );
    assert_eq!(common::vgpu_ids(&dest, T4), Vec::<String>::new());
    assert_eq!(records(&dest), Vec::<String>::new());
}

/// A mediated device keeps its UUID where it is free here, and the XML is left as it is;
/// where the UUID is taken, a new one is made and the XML names it, in the hostdev and in what
/// `attach` recorded in the domain's metadata, where the type comes from.
#[test]
fn mdev_keeps_its_uuid_when_free_and_is_renamed_when_not() {
    let free = common::host("mixed");
    let taken = common::host("mixed");
    let free_hooks = install_hook(&free, &[]);
    let taken_hooks = install_hook(&taken, &[]);
    let made = vgpuctl(&taken, &["create", T4, "--type", "T4-2Q", "--uuid", MDEV]);
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let incoming = mdev_domain(1, MDEV, "GRID T4-2Q");

    let kept = run_hook(free_hooks.path(), "vm1", "migrate", "begin", &incoming);
    let renamed = run_hook(taken_hooks.path(), "vm1", "migrate", "begin", &incoming);

    assert_eq!(
        (kept.status.code(), out_text(&kept), stderr(&kept)),
        (Some(0), String::new(), String::new())
    );
    assert_eq!(
        common::vgpu_ids(&free, T4),
        vec![MDEV.to_owned()],
        "the same UUID, made here"
    );
    assert_eq!(renamed.status.code(), Some(0), "{}", stderr(&renamed));
    let ids = common::vgpu_ids(&taken, T4);
    let new: Vec<&String> = ids.iter().filter(|id| *id != MDEV).collect();
    assert_eq!(new.len(), 1, "{ids:?}");
    assert_eq!(
        out_text(&renamed),
        incoming
            .replace(
                &format!("<address uuid='{MDEV}'/>"),
                &format!("<address uuid='{}'/>", new[0])
            )
            .replace(
                &format!("<device id=\"{MDEV}\""),
                &format!("<device id=\"{}\"", new[0])
            )
    );
    assert_valid_domain(&out_text(&renamed));
}

/// A destination whose GPUs lack the type, and one without room: exit 1, one line naming the
/// device, the type and the reason; no record, nothing made.
#[test]
fn destination_without_the_type_or_room_refuses_in_one_line_and_changes_nothing() {
    let lacking = common::host("t4-legacy");
    let lacking_hooks = install_hook(&lacking, &[]);
    let full = common::host("l40s-vendor-vfio");
    let full_hooks = install_hook(&full, &[]);
    prepared(full_hooks.path(), 2, "L40S-48Q", &common::vf("41", 0));
    prepared(full_hooks.path(), 3, "L40S-48Q", &common::vf("c1", 0));
    let vf = common::vf("41", 1);
    let incoming = vf_domain(1, "L40S-12Q", &[&vf]);
    let before = (typed_vfs(&full, GPU_A), typed_vfs(&full, GPU_B));

    let no_type = run_hook(lacking_hooks.path(), "vm1", "migrate", "begin", &incoming);
    let no_room = run_hook(full_hooks.path(), "vm1", "migrate", "begin", &incoming);

    assert_eq!(no_type.status.code(), Some(1));
    assert_eq!(
        stderr(&no_type),
        format!(
            "vgpu hook: vm1 migrate: domain vm1: cannot make {vf} ready (type \"L40S-12Q\" from \
             the domain's metadata): no GPU offers L40S-12Q; no GPU here offers a type of that kind\n"
        )
    );
    assert_eq!(out_text(&no_type), "");
    assert_eq!(records(&lacking), Vec::<String>::new());
    assert_eq!(no_room.status.code(), Some(1));
    // Every GPU's refusal (both hold a 48Q, which rules 12Q out), each named as `create`
    // names it.
    let refusal = |gpu: &str| {
        format!(
            "GPU {gpu} has room for 0 more vGPU(s) of type 1153, not 1: NVIDIA L40S-48Q runs on \
             the GPU or is defined for it, and the type cannot share a GPU with it"
        )
    };
    assert_eq!(
        stderr(&no_room),
        format!(
            "vgpu hook: vm1 migrate: domain vm1: cannot make {vf} ready (type \"L40S-12Q\" from \
             the domain's metadata): no GPU here has room for a vGPU of L40S-12Q: {}; {}\n",
            refusal(GPU_A),
            refusal(GPU_B)
        )
    );
    assert_eq!(out_text(&no_room), "");
    assert_eq!((typed_vfs(&full, GPU_A), typed_vfs(&full, GPU_B)), before);
    assert_eq!(records(&full).len(), 2);
}

/// The kernel refuses the second of an incoming domain's two vGPUs: `migrate begin` exits 1
/// naming that VF and the error, prints no XML, and undoes the first; no record of it is
/// left. Another domain's vGPU on the same GPU stays. Libvirt then cancels the migration.
#[test]
fn failure_making_the_second_vgpu_undoes_the_first() {
    let dest = common::host("l40s-vendor-vfio");
    let hooks = install_hook(&dest, &[]);
    let (first, second, other) = (
        common::vf("41", 0),
        common::vf("41", 1),
        common::vf("41", 2),
    );
    prepared(hooks.path(), 2, "L40S-12Q", &other);
    dest.sim
        .fail_next(1, 5, &format!("*/{second}/nvidia/current_vgpu_type"));

    let out = run_hook(
        hooks.path(),
        "vm1",
        "migrate",
        "begin",
        &vf_domain(1, "L40S-12Q", &[&first, &second]),
    );

    let root = dest.sim.root().display().to_string();
    assert_eq!(
        (
            out.status.code(),
            stderr(&out).replace(&root, "<sim>"),
            out_text(&out),
            typed_vfs(&dest, GPU_A),
            records(&dest)
        ),
        (
            Some(1),
            format!(
                "vgpu hook: vm1 migrate: domain vm1: cannot make {second} ready: cannot write \
                 \"1153\" to <sim>/sys/bus/pci/devices/{second}/nvidia/current_vgpu_type: \
                 Input/output error (os error 5)\n"
            ),
            String::new(),
            vec![(other, "1153".to_owned())],
            vec!["00000000-0000-4000-8000-000000000002".to_owned()]
        )
    );
}

/// `can-host` says what `migrate begin` would choose, exits 0, and changes nothing; refused,
/// it exits 1 with the hook's reason.
#[test]
fn can_host_chooses_as_migrate_begin_and_changes_nothing() {
    let dest = common::host("l40s-vendor-vfio");
    let hooks = install_hook(&dest, &[]);
    let held = common::vf("41", 0);
    prepared(hooks.path(), 2, "L40S-24Q", &held);
    let file = dest.state.path().join("vm1.xml");
    std::fs::write(&file, vf_domain(1, "L40S-12Q", &[&held])).unwrap();
    let refused = dest.state.path().join("vm3.xml");
    std::fs::write(&refused, vf_domain(3, "L40S-9Q", &[&held])).unwrap();
    let before = (
        typed_vfs(&dest, GPU_A),
        typed_vfs(&dest, GPU_B),
        records(&dest),
    );

    let answer = vgpuctl(&dest, &["can-host", "-f", file.to_str().unwrap(), "--json"]);
    let text = vgpuctl(&dest, &["can-host", "-f", file.to_str().unwrap()]);
    let no = vgpuctl(&dest, &["can-host", "-f", refused.to_str().unwrap()]);

    let value = json(&answer);
    assert_eq!(
        (
            answer.status.code(),
            &value["domain"],
            &value["devices"][0]["from"],
            &value["devices"][0]["to"],
            &value["devices"][0]["gpu"],
            &value["devices"][0]["type_id"],
            &value["devices"][0]["type_name"]
        ),
        (
            Some(0),
            &serde_json::json!("vm1"),
            &serde_json::json!(held),
            &serde_json::json!(common::vf("c1", 0)),
            &serde_json::json!(GPU_B),
            &serde_json::json!("1153"),
            &serde_json::json!("NVIDIA L40S-12Q")
        )
    );
    assert!(out_text(&text).ends_with("vm1: can be hosted here (1 vGPU(s))\n"));
    assert_eq!(no.status.code(), Some(1));
    assert!(
        stderr(&no).contains("no GPU offers L40S-9Q"),
        "{}",
        stderr(&no)
    );
    assert_eq!(
        (
            typed_vfs(&dest, GPU_A),
            typed_vfs(&dest, GPU_B),
            records(&dest)
        ),
        before
    );
}

/// What other domains hold on the two L40S: per domain, a GPU (A or B), a VF index, a type.
fn host_states() -> impl Strategy<Value = Vec<(bool, u32, &'static str)>> {
    prop::collection::vec(
        (
            any::<bool>(),
            0u32..4,
            prop::sample::select(vec!["L40S-12Q", "L40S-24Q", "L40S-48Q"]),
        ),
        0..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// On random host states, `can-host` accepts exactly when `migrate begin` does, and
    /// chooses the same VFs.
    #[test]
    fn can_host_agrees_with_migrate_begin(state in host_states(), wanted in 0usize..3) {
        let dest = common::host("l40s-vendor-vfio");
        let hooks = install_hook(&dest, &[]);
        for (n, (on_a, index, kind)) in state.iter().enumerate() {
            let vf = common::vf(if *on_a { "41" } else { "c1" }, *index);
            let n = u32::try_from(n).unwrap() + 10;
            // A domain the host refuses is simply not there.
            run_hook(hooks.path(), &format!("vm{n}"), "prepare", "begin", &vf_domain(n, kind, &[&vf]));
        }
        let kind = ["L40S-12Q", "L40S-24Q", "L40S-48Q"][wanted];
        let vfs = [common::vf("41", 0), common::vf("41", 1)];
        let xml = vf_domain(1, kind, &[&vfs[0], &vfs[1]]);
        let file = dest.state.path().join("vm1.xml");
        std::fs::write(&file, &xml).unwrap();

        let answer = vgpuctl(&dest, &["can-host", "-f", file.to_str().unwrap(), "--json"]);
        let hooked = run_hook(hooks.path(), "vm1", "migrate", "begin", &xml);

        prop_assert_eq!(answer.status.code(), hooked.status.code(), "{}", stderr(&hooked));
        if hooked.status.code() == Some(0) {
            let chosen: Vec<String> = json(&answer)["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["to"].as_str().unwrap().to_owned())
                .collect();
            let printed = out_text(&hooked);
            let printed = if printed.is_empty() { xml.clone() } else { printed };
            for vf in &chosen {
                prop_assert!(printed.contains(&pci_source(vf)), "{vf} not in {printed}");
            }
        }
    }
}

/// The hook reads the type `attach` records (`<vgpu:device>`), from a domain XML as libvirt
/// writes its metadata: only the `<vgpu>` element in the namespace.
#[test]
fn hook_reads_the_type_attach_recorded_in_libvirts_form() {
    let dest = common::host("mixed");
    let hooks = install_hook(&dest, &[]);
    let xml = mdev_domain(1, MDEV, "GRID T4-4Q");

    let out = run_hook(hooks.path(), "vm1", "migrate", "begin", &xml);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list = common::list(&dest);
    assert_eq!(
        common::gpu(&list, T4)["vgpus"][0]["type"],
        serde_json::json!("nvidia-232")
    );
}
