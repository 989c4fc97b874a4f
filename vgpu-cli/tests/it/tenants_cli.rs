//! The tenant policy (`etc/vgpu/tenants.toml`) through the libvirt hook exactly as libvirt
//! runs it, on simulated hosts: each rule in both directions where it has two, quotas crossed
//! by a domain's second vGPU, a broken policy file refusing every vGPU domain, and 16 domains
//! of two tenants kept apart starting at once.

use crate::common;

use std::path::Path;
use std::process::Output;

use crate::common::{Host, NS, domain, host, install_hook, l40s_vf, run_hook, stderr, vf};

/// The simulated `mixed` host's L40S (vendor-specific VFIO, 32 VFs).
const L40S: &str = "0000:5e:00.0";
/// The simulated `h200-mig` host's H200 (MIG mode, two free `1g.18gb` instances).
const H200: &str = "0000:18:00.0";
struct Tenants {
    host: Host,
    hooks: tempfile::TempDir,
}

impl Tenants {
    /// `profile` with `policy` as its tenants.toml and the hook installed with `global`.
    fn new(profile: &str, policy: &str, global: &[&str]) -> Self {
        let host = host(profile);
        let dir = host.state.path().join("etc/vgpu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tenants.toml"), policy).unwrap();
        let hooks = install_hook(&host, global);
        Tenants { host, hooks }
    }

    /// `prepare begin` of domain `n`.
    fn start(&self, n: u32, tenant: &str, vgpu_type: &str, vfs: &[String]) -> Output {
        let xml = domain(n, tenant, vgpu_type, vfs);
        run_hook(
            self.hooks.path(),
            &format!("vm{n}"),
            "prepare",
            "begin",
            &xml,
        )
    }

    /// The hook's exit code and stderr, with the state root shown as `<state>`.
    fn outcome(&self, out: &Output) -> (Option<i32>, String) {
        let state = self.host.state.path().to_str().unwrap();
        (out.status.code(), stderr(out).replace(state, "<state>"))
    }

    /// The type id on `vf` now (`0`: none).
    fn vf_type(&self, vf: &str) -> String {
        let path = Path::new("sys/bus/pci/devices")
            .join(vf)
            .join("nvidia/current_vgpu_type");
        std::fs::read_to_string(self.host.sim.root().join(path))
            .unwrap()
            .trim()
            .to_owned()
    }
}

/// The one line a refusal of `vm<n>` writes.
fn refused(n: u32, tenant: &str, rule: &str) -> (Option<i32>, String) {
    (
        Some(1),
        format!(
            "vgpu hook: vm{n} prepare: domain \"vm{n}\" of tenant \"{tenant}\": refused by \
             <state>/etc/vgpu/tenants.toml: {rule}\n"
        ),
    )
}

const OK: (Option<i32>, String) = (Some(0), String::new());

#[test]
fn exclusive_keeps_a_stranger_off_its_gpu_and_itself_off_a_strangers() {
    let policy = "[tenant.acme]\nisolation = \"exclusive\"\n";
    let exclusive = format!(
        "exclusive: tenant \"acme\" shares no GPU, and {L40S} holds vGPUs of \"acme\" and \
         \"globex\""
    );
    // The stranger comes second.
    let t = Tenants::new("mixed", policy, &[]);
    let first = t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let second = t.start(2, "globex", "L40S-12Q", &[l40s_vf(1)]);
    assert_eq!(
        (
            t.outcome(&first),
            t.outcome(&second),
            t.vf_type(&l40s_vf(1))
        ),
        (OK, refused(2, "globex", &exclusive), "0".to_owned())
    );
    // The exclusive tenant comes second.
    let t = Tenants::new("mixed", policy, &[]);
    t.start(1, "globex", "L40S-12Q", &[l40s_vf(0)]);
    let second = t.start(2, "acme", "L40S-12Q", &[l40s_vf(1)]);
    assert_eq!(t.outcome(&second), refused(2, "acme", &exclusive));
}

#[test]
fn hardware_refuses_a_time_sliced_vgpu_beside_another_tenant() {
    let t = Tenants::new("mixed", "[tenant.initech]\nisolation = \"hardware\"\n", &[]);
    t.start(1, "globex", "L40S-12Q", &[l40s_vf(0)]);
    let second = t.start(2, "initech", "L40S-12Q", &[l40s_vf(1)]);
    assert_eq!(
        t.outcome(&second),
        refused(
            2,
            "initech",
            &format!(
                "hardware: tenant \"initech\" takes only hardware partitions beside other \
                 tenants, and {L40S} holds a time-sliced vGPU of \"initech\" beside \"globex\""
            )
        )
    );
}

#[test]
fn hardware_allows_a_mig_backed_vgpu_beside_another_tenant() {
    let t = Tenants::new(
        "h200-mig",
        "[tenant.initech]\nisolation = \"hardware\"\n",
        &[],
    );
    // The test NVML reads this host's simulator; the hook is given its library.
    let data = include_str!("../../../vgpu-nvml-fake/data/h200-mig.toml");
    let fake = vgpu_testing::fake_nvml::FakeNvml::on_sim(data, t.host.sim.root()).unwrap();
    let library = fake.library().to_str().unwrap().to_owned();
    let hooks = install_hook(&t.host, &["--nvml-library", &library]);
    let start = |n: u32, tenant: &str, index: u32| {
        let xml = domain(n, tenant, "H200X-1-18C", &[vf("18", index)]);
        run_hook(hooks.path(), &format!("vm{n}"), "prepare", "begin", &xml)
    };
    let first = start(1, "globex", 0);
    let second = start(2, "initech", 1);
    let types = (t.vf_type(&vf("18", 0)), t.vf_type(&vf("18", 1)));
    assert_eq!((t.outcome(&first), t.outcome(&second)), (OK, OK), "{H200}");
    // Both hold the MIG-backed type, each on a GPU instance of its own.
    assert!(types.0 == types.1 && types.0 != "0", "{types:?}");
}

#[test]
fn spread_refuses_two_of_a_tenants_vgpus_on_one_gpu_leaving_nothing_made() {
    let t = Tenants::new("mixed", "[tenant.acme]\nspread = true\n", &[]);
    let out = t.start(1, "acme", "L40S-12Q", &[l40s_vf(0), l40s_vf(1)]);
    assert_eq!(
        (
            t.outcome(&out),
            t.vf_type(&l40s_vf(0)),
            t.vf_type(&l40s_vf(1))
        ),
        (
            refused(
                1,
                "acme",
                &format!(
                    "spread: tenant \"acme\" has at most one vGPU per GPU, and {L40S} holds 2 of \
                     its vGPUs"
                )
            ),
            "0".to_owned(),
            "0".to_owned()
        )
    );
}

#[test]
fn apart_from_holds_both_ways() {
    let policy = "[tenant.acme]\n\n[tenant.globex]\napart_from = [\"acme\"]\n";
    let apart = format!(
        "apart_from: tenant \"globex\" is kept apart from \"acme\", and {L40S} holds vGPUs of \
         both"
    );
    for (first, second) in [("acme", "globex"), ("globex", "acme")] {
        let t = Tenants::new("mixed", policy, &[]);
        t.start(1, first, "L40S-12Q", &[l40s_vf(0)]);
        let out = t.start(2, second, "L40S-12Q", &[l40s_vf(1)]);
        assert_eq!(t.outcome(&out), refused(2, second, &apart), "{first} first");
    }
}

#[test]
fn quotas_refuse_the_domain_whose_second_vgpu_crosses_them() {
    // max_vgpus: one domain with two vGPUs, nothing left made.
    let t = Tenants::new("mixed", "[tenant.acme]\nmax_vgpus = 1\n", &[]);
    let out = t.start(1, "acme", "L40S-12Q", &[l40s_vf(0), l40s_vf(1)]);
    assert_eq!(
        (t.outcome(&out), t.vf_type(&l40s_vf(0))),
        (
            refused(
                1,
                "acme",
                "max_vgpus: tenant \"acme\" may hold 1 vGPUs, and would hold 2"
            ),
            "0".to_owned()
        )
    );
    // max_framebuffer: a second domain crossing it.
    let t = Tenants::new("mixed", "[tenant.acme]\nmax_framebuffer = \"12GiB\"\n", &[]);
    let first = t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let second = t.start(2, "acme", "L40S-12Q", &[l40s_vf(1)]);
    assert_eq!(
        (t.outcome(&first), t.outcome(&second)),
        (
            OK,
            refused(
                2,
                "acme",
                "max_framebuffer: tenant \"acme\" may hold 12288 MiB of frame buffer, and would \
                 hold 24576 MiB"
            )
        )
    );
}

#[test]
fn a_broken_policy_file_refuses_every_vgpu_domain_naming_the_file() {
    let t = Tenants::new("mixed", "[tenant.acme]\nisolation = \"strict\"\n", &[]);
    let vgpu_domain = t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let no_devices = t.start(2, "acme", "L40S-12Q", &[]);
    assert_eq!(
        (
            t.outcome(&vgpu_domain),
            t.outcome(&no_devices),
            t.vf_type(&l40s_vf(0))
        ),
        (
            (
                Some(1),
                "vgpu hook: vm1 prepare: <state>/etc/vgpu/tenants.toml:2:13: unknown isolation \
                 \"strict\" of tenant \"acme\": expected \"shared\", \"exclusive\" or \
                 \"hardware\"\n"
                    .to_owned()
            ),
            OK,
            "0".to_owned()
        )
    );
}

#[test]
fn sixteen_domains_of_two_tenants_kept_apart_starting_at_once_never_share_a_gpu() {
    let policy = "[tenant.acme]\n\n[tenant.globex]\napart_from = [\"acme\"]\n";
    let t = Tenants::new("mixed", policy, &[]);
    let outs: Vec<(u32, &str, Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16u32)
            .map(|n| {
                let tenant = if n % 2 == 0 { "acme" } else { "globex" };
                let t = &t;
                scope.spawn(move || (n, tenant, t.start(n + 1, tenant, "L40S-1Q", &[l40s_vf(n)])))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let started: Vec<&str> = outs
        .iter()
        .filter(|(_, _, out)| out.status.success())
        .map(|(_, tenant, _)| *tenant)
        .collect();
    // One tenant holds the L40S, all eight of its domains started; the other's eight were
    // refused by the rule.
    assert_eq!(started.len(), 8, "{started:?}");
    assert!(started.iter().all(|t| *t == started[0]), "{started:?}");
    for (n, tenant, out) in &outs {
        if !out.status.success() {
            assert!(
                stderr(out).contains(&format!(
                    "vm{} prepare: domain \"vm{}\" of tenant \"{tenant}\": refused by",
                    n + 1,
                    n + 1
                )) && stderr(out).contains("apart_from: tenant \"globex\" is kept apart"),
                "{}",
                stderr(out)
            );
        }
    }
}

/// Defines domain `name` of `tenant` on the embedded libvirt at `uri`, with `virsh` in a
/// process of its own (libvirt embeds its QEMU driver at one root per process).
fn define(uri: &str, dir: &Path, name: &str, tenant: &str) {
    let xml = dir.join(format!("{name}.xml"));
    std::fs::write(
        &xml,
        format!(
            "<domain type='kvm'><name>{name}</name><memory unit='MiB'>64</memory>\
             <metadata><vgpu:vgpu xmlns:vgpu=\"{NS}\" tenant=\"{tenant}\"/></metadata>\
             <os><type arch='x86_64' machine='pc'>hvm</type></os>\
             <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"
        ),
    )
    .unwrap();
    let out = common::on_one_cpu("virsh")
        .args(["-c", uri, "define"])
        .arg(&xml)
        .output()
        .unwrap();
    assert!(out.status.success(), "virsh define: {}", stderr(&out));
}

#[test]
fn attach_refuses_what_the_policy_forbids_as_kind_policy_and_detach_frees_the_gpu() {
    let t = Tenants::new("mixed", "[tenant.acme]\nisolation = \"exclusive\"\n", &[]);
    let libvirt = tempfile::tempdir().unwrap();
    let uri = vgpu_domain::embedded_uri(libvirt.path());
    define(&uri, libvirt.path(), "vm-a", "acme");
    define(&uri, libvirt.path(), "vm-g", "globex");
    let attach = |domain: &str| {
        common::vgpuctl_on_one_cpu(
            &t.host,
            &[
                "--connect",
                &uri,
                "attach",
                domain,
                "--gpu",
                L40S,
                "--type",
                "L40S-12Q",
                "--json",
            ],
        )
    };
    let globex = attach("vm-g");
    let vf = common::json(&globex)["id"].as_str().unwrap().to_owned();
    let acme = attach("vm-a");
    let refusal = common::json(&acme);
    // Nothing was made for vm-a: the policy refused before `create` set a VF's type.
    let made = (0..4).filter(|i| t.vf_type(&l40s_vf(*i)) != "0").count();
    let audit = std::fs::read_to_string(t.host.state.path().join("var/log/vgpu/audit.jsonl"));
    let started = audit
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|entry| entry["action"] == "start" && entry["result"] == "ok")
        .count();
    assert_eq!(
        (
            globex.status.code(),
            acme.status.code(),
            refusal["kind"].as_str(),
            made,
            started
        ),
        (Some(0), Some(1), Some("policy"), 1, 1),
        "{refusal}"
    );
    assert!(
        refusal["error"].as_str().unwrap().contains(&format!(
            "domain \"vm-a\" of tenant \"acme\": refused by {}/etc/vgpu/tenants.toml: exclusive: \
             tenant \"acme\" shares no GPU, and {L40S} holds vGPUs of \"acme\" and \"globex\"",
            t.host.state.path().display()
        )),
        "{refusal}"
    );
    // Once vm-g lets its vGPU go, acme may have the GPU.
    let detach = common::vgpuctl_on_one_cpu(
        &t.host,
        &["--connect", &uri, "detach", "vm-g", &vf, "--destroy"],
    );
    assert_eq!(detach.status.code(), Some(0), "{}", stderr(&detach));
    assert_eq!(attach("vm-a").status.code(), Some(0));
}

#[test]
fn tenants_lists_holdings_and_a_violation_made_by_a_stricter_policy_exiting_3() {
    let t = Tenants::new("mixed", "", &[]);
    assert_eq!(
        t.outcome(&t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)])),
        OK
    );
    assert_eq!(
        t.outcome(&t.start(2, "globex", "L40S-12Q", &[l40s_vf(1)])),
        OK
    );
    // acme becomes exclusive after the fact.
    let policy = t.host.state.path().join("etc/vgpu/tenants.toml");
    std::fs::write(&policy, "[tenant.acme]\nisolation = \"exclusive\"\n").unwrap();
    let out = common::vgpuctl(&t.host, &["tenants", "--json"]);
    let report = common::json(&out);
    let row = |tenant: &str| {
        let row = report["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tenant"] == tenant)
            .unwrap()
            .clone();
        (
            row["policy"]["isolation"].clone(),
            row["vgpus"].clone(),
            row["framebuffer_bytes"].clone(),
            row["gpus"].clone(),
            row["domains"].clone(),
        )
    };
    assert_eq!(
        (
            out.status.code(),
            row("acme"),
            row("globex"),
            report["violations"].clone()
        ),
        (
            Some(3),
            (
                serde_json::json!("exclusive"),
                serde_json::json!(1),
                serde_json::json!(12u64 << 30),
                serde_json::json!([L40S]),
                serde_json::json!(["vm1"])
            ),
            (
                serde_json::json!("shared"),
                serde_json::json!(1),
                serde_json::json!(12u64 << 30),
                serde_json::json!([L40S]),
                serde_json::json!(["vm2"])
            ),
            serde_json::json!([{"rule": "exclusive", "tenant": "acme", "other": "globex", "gpu": L40S}])
        )
    );
    // The table says the same in words.
    let table = common::vgpuctl(&t.host, &["tenants"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).ends_with(&format!(
            "violation: exclusive: tenant \"acme\" shares no GPU, and {L40S} holds vGPUs of \
             \"acme\" and \"globex\"\n"
        )),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
}

#[test]
fn place_for_a_tenant_picks_what_the_hook_then_allows_and_refuses_with_kind_policy() {
    let t = Tenants::new("mixed", "[tenant.acme]\nisolation = \"exclusive\"\n", &[]);
    assert_eq!(
        t.outcome(&t.start(1, "globex", "L40S-12Q", &[l40s_vf(0)])),
        OK
    );
    let place = |tenant: &str| {
        common::vgpuctl(
            &t.host,
            &[
                "place", "--count", "1", "--type", "L40S-12Q", "--tenant", tenant, "--json",
            ],
        )
    };
    // acme is exclusive and the one L40S holds globex's vGPU.
    let acme = place("acme");
    let refusal = common::json(&acme);
    assert_eq!(
        (acme.status.code(), refusal["kind"].as_str()),
        (Some(1), Some("policy")),
        "{refusal}"
    );
    assert!(
        refusal["error"].as_str().unwrap().ends_with(&format!(
            "1 vGPU(s) asked for tenant \"acme\", the GPUs the tenant policy allows can take 0: \
             exclusive: tenant \"acme\" shares no GPU, and {L40S} holds vGPUs of \"acme\" and \
             \"globex\""
        )),
        "{refusal}"
    );
    // globex may share: the pick is a VF of the L40S, and the hook then gives it globex's domain.
    let globex = common::json(&place("globex"));
    let pick = &globex["picks"][0];
    let vf = pick["vf"].as_str().unwrap().to_owned();
    assert_eq!(pick["gpu"].as_str(), Some(L40S), "{globex}");
    assert_eq!(
        t.outcome(&t.start(2, "globex", "L40S-12Q", std::slice::from_ref(&vf))),
        OK
    );
}

/// `provision --tenant` asks the hook's check before it makes anything: globex may not fill
/// the L40S acme holds, and acme may; without `--tenant` nothing is checked.
#[test]
fn provision_for_a_tenant_keeps_the_policy_and_makes_nothing_when_refused() {
    let policy = "[tenant.acme]\n\n[tenant.globex]\napart_from = [\"acme\"]\n";
    let t = Tenants::new("mixed", policy, &[]);
    t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let provision = |tenant: &str| {
        crate::common::vgpuctl(
            &t.host,
            &[
                "provision",
                L40S,
                "--type",
                "L40S-12Q",
                "--count",
                "1",
                "--tenant",
                tenant,
            ],
        )
    };
    let refused = provision("globex");
    let vf1_after_refusal = t.vf_type(&l40s_vf(1));
    let allowed = provision("acme");
    assert_eq!(
        (
            refused.status.code(),
            stderr(&refused).contains(&format!(
                "refused by {}/etc/vgpu/tenants.toml: apart_from: tenant \"globex\" is kept apart from \"acme\", and {L40S} holds vGPUs of both",
                t.host.state.path().display()
            )),
            vf1_after_refusal,
            allowed.status.code(),
            t.vf_type(&l40s_vf(1)) != "0",
        ),
        (Some(1), true, "0".to_owned(), Some(0), true),
        "{}",
        stderr(&refused)
    );
}

/// A plan entry's `tenant =` is asked of the policy before `apply` makes anything: globex's
/// entry may not fill the L40S acme holds, acme's may.
#[test]
fn apply_of_an_entry_for_a_tenant_keeps_the_policy() {
    let policy = "[tenant.acme]\n\n[tenant.globex]\napart_from = [\"acme\"]\n";
    let t = Tenants::new("mixed", policy, &[]);
    t.start(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let apply = |tenant: &str| {
        let file = t.host.state.path().join(format!("{tenant}.toml"));
        std::fs::write(
            &file,
            format!(
                "version = 1\n[[configs.default.gpu]]\naddress = \"{L40S}\"\n\
                 types = {{ \"L40S-12Q\" = 2 }}\ntenant = \"{tenant}\"\n"
            ),
        )
        .unwrap();
        crate::common::vgpuctl(&t.host, &["apply", "-f", file.to_str().unwrap()])
    };
    let refused = apply("globex");
    let vf1_after_refusal = t.vf_type(&l40s_vf(1));
    let allowed = apply("acme");
    assert_eq!(
        (
            refused.status.code(),
            stderr(&refused).contains(
                "apart_from: tenant \"globex\" is kept apart from \"acme\", and 0000:5e:00.0 holds vGPUs of both"
            ),
            vf1_after_refusal,
            allowed.status.code(),
            t.vf_type(&l40s_vf(1)) != "0",
        ),
        (Some(1), true, "0".to_owned(), Some(0), true),
        "{}",
        stderr(&refused)
    );
}

/// `plan`, `assert`, `apply --dry-run` and `apply` ask the one tenant-policy verdict: an entry
/// whose tenant may hold one vGPU and asks two is refused by each alike, naming the rule and
/// the tenant, and nothing is made.
#[test]
fn plan_assert_and_apply_refuse_alike_what_the_tenant_policy_forbids() {
    let t = Tenants::new("mixed", "[tenant.globex]\nmax_vgpus = 1\n", &[]);
    let file = t.host.state.path().join("host.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\n[[configs.default.gpu]]\naddress = \"{L40S}\"\n\
             types = {{ \"L40S-12Q\" = 2 }}\ntenant = \"globex\"\n"
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(["-f", file, "--json"]);
        let out = crate::common::vgpuctl(&t.host, &args);
        let state = t.host.state.path().to_str().unwrap();
        let value = crate::common::json(&out);
        (
            out.status.code(),
            value["kind"].clone(),
            value["error"]
                .as_str()
                .unwrap_or_default()
                .replace(state, "<state>"),
        )
    };

    let seen = [
        run(&["plan"]),
        run(&["assert"]),
        run(&["apply", "--dry-run"]),
        run(&["apply"]),
    ];

    let refusal = (
        Some(1),
        serde_json::json!("policy"),
        "domain \"default (apply)\" of tenant \"globex\": refused by \
         <state>/etc/vgpu/tenants.toml: max_vgpus: tenant \"globex\" may hold 1 vGPUs, and \
         would hold 2"
            .to_owned(),
    );
    assert_eq!(
        (seen, t.vf_type(&l40s_vf(0))),
        (
            [refusal.clone(), refusal.clone(), refusal.clone(), refusal],
            "0".to_owned()
        )
    );
}
