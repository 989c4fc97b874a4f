//! QoS classes (`qos` in `etc/vgpu/tenants.toml`) on a simulated `mixed` host whose L40S's
//! scheduler the test NVML serves: the hook as libvirt runs it and `place --tenant` give the
//! same answer, a refusal names the class, the GPU and its scheduler, and without NVML a class
//! above best effort is refused.

use std::process::Output;

use vgpu_testing::fake_nvml::FakeNvml;

use crate::common::{self, Host, domain, host, install_hook, l40s_vf, reboot, run_hook, stderr};

/// The simulated `mixed` host's L40S.
const L40S: &str = "0000:5e:00.0";

/// The test NVML's data for the L40S, with NVML's scheduler policy `policy`
/// (`NVML_VGPU_SCHEDULER_POLICY_*`: 1 best effort, 2 equal share, 3 fixed share).
fn data(policy: u32) -> String {
    format!(
        "[[gpu]]\npci = \"{L40S}\"\nscheduler = {{ policy = {policy}, arr_mode = 0, \
         timeslice_ns = 0 }}\n"
    )
}

struct Qos {
    host: Host,
    /// The test NVML, when the host has one.
    nvml: Option<FakeNvml>,
    hooks: tempfile::TempDir,
}

impl Qos {
    /// The `mixed` host with `policy` as its tenants.toml, the L40S's scheduler NVML's
    /// `scheduler` (none: no NVML), and the hook installed with that NVML.
    fn new(policy: &str, scheduler: Option<u32>) -> Self {
        let host = host("mixed");
        let dir = host.state.path().join("etc/vgpu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tenants.toml"), policy).unwrap();
        let nvml = scheduler.map(|p| FakeNvml::on_sim(&data(p), host.sim.root()).unwrap());
        let global = Self::global_of(nvml.as_ref());
        let global: Vec<&str> = global.iter().map(String::as_str).collect();
        let hooks = install_hook(&host, &global);
        Qos { host, nvml, hooks }
    }

    /// The `mixed` host with `policy` as its tenants.toml and the test NVML serving the
    /// simulator's own scheduler (the data gives none), the hook installed with that NVML.
    fn live(policy: &str) -> Self {
        let host = host("mixed");
        let dir = host.state.path().join("etc/vgpu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tenants.toml"), policy).unwrap();
        let nvml =
            FakeNvml::on_sim(&format!("[[gpu]]\npci = \"{L40S}\"\n"), host.sim.root()).unwrap();
        let global = Self::global_of(Some(&nvml));
        let global: Vec<&str> = global.iter().map(String::as_str).collect();
        let hooks = install_hook(&host, &global);
        Qos {
            host,
            nvml: Some(nvml),
            hooks,
        }
    }

    /// `vgpuctl sched GPU ARGS...` with this NVML.
    fn sched(&self, gpu: &str, rest: &[&str]) -> Output {
        let mut args = Self::global_of(self.nvml.as_ref());
        args.push("sched".to_owned());
        args.push(gpu.to_owned());
        args.extend(rest.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::vgpuctl(&self.host, &args)
    }

    fn global_of(nvml: Option<&FakeNvml>) -> Vec<String> {
        match nvml {
            Some(nvml) => vec![
                "--nvml-library".to_owned(),
                nvml.library().to_str().unwrap().to_owned(),
            ],
            None => Vec::new(),
        }
    }

    /// `prepare begin` of domain `vm<n>` of `tenant` with an L40S-12Q on VF `index`.
    fn start(&self, n: u32, tenant: &str, index: u32) -> (Option<i32>, String) {
        let xml = domain(n, tenant, "L40S-12Q", &[l40s_vf(index)]);
        let out = run_hook(
            self.hooks.path(),
            &format!("vm{n}"),
            "prepare",
            "begin",
            &xml,
        );
        let state = self.host.state.path().to_str().unwrap();
        (out.status.code(), stderr(&out).replace(state, "<state>"))
    }

    /// `vgpuctl place --count 1 --type L40S-12Q --tenant TENANT --json` with this NVML.
    fn place(&self, tenant: &str) -> Output {
        let mut args = Self::global_of(self.nvml.as_ref());
        args.extend(
            [
                "place", "--count", "1", "--type", "L40S-12Q", "--tenant", tenant, "--json",
            ]
            .map(str::to_owned),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::vgpuctl(&self.host, &args)
    }

    /// The type id on the L40S's VF `index` now (`0`: none).
    fn vf_type(&self, index: u32) -> String {
        let path = format!(
            "sys/bus/pci/devices/{}/nvidia/current_vgpu_type",
            l40s_vf(index)
        );
        std::fs::read_to_string(self.host.sim.root().join(path))
            .unwrap()
            .trim()
            .to_owned()
    }
}

/// The one line the hook writes when it refuses `vm<n>` of `tenant` for `rule`.
fn refused(n: u32, tenant: &str, rule: &str) -> (Option<i32>, String) {
    (
        Some(1),
        format!(
            "vgpu hook: vm{n} prepare: domain \"vm{n}\" of tenant \"{tenant}\": refused by \
             <state>/etc/vgpu/tenants.toml: {rule}\n"
        ),
    )
}

/// `place`'s JSON error: its kind and its message's last clause.
fn place_refusal(out: &Output) -> (Option<i32>, String, String) {
    let json = common::json(out);
    let error = json["error"].as_str().unwrap_or_default();
    let rule = error.rsplit_once(" take 0: ").map_or(error, |(_, r)| r);
    (
        out.status.code(),
        json["kind"].as_str().unwrap_or_default().to_owned(),
        rule.to_owned(),
    )
}

const OK: (Option<i32>, String) = (Some(0), String::new());

#[test]
fn guaranteed_on_fixed_share_gpu_starts_through_hook_and_place_picks_it() {
    let q = Qos::new("[tenant.acme]\nqos = \"guaranteed\"\n", Some(3));

    let placed = common::json(&q.place("acme"));
    let started = q.start(1, "acme", 0);

    assert_eq!(
        (
            placed["picks"][0]["gpu"].as_str(),
            started,
            q.vf_type(0) != "0"
        ),
        (Some(L40S), OK, true)
    );
}

#[test]
fn guaranteed_on_empty_best_effort_gpu_is_refused_by_hook_and_placed_needing_fixed_share() {
    let q = Qos::new("[tenant.acme]\nqos = \"guaranteed\"\n", Some(1));
    let rule = format!(
        "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in equal-size \
         mode, and {L40S} schedules best-effort"
    );

    let placed = common::json(&q.place("acme"));
    let started = q.start(1, "acme", 0);

    assert_eq!(
        (
            placed["picks"][0]["gpu"].as_str(),
            placed["picks"][0]["needs_scheduler"].as_str(),
            started,
            q.vf_type(0)
        ),
        (
            Some(L40S),
            Some("fixed-share"),
            refused(1, "acme", &rule),
            "0".to_owned()
        )
    );
}

#[test]
fn guaranteed_on_best_effort_gpu_holding_a_vgpu_is_refused_alike_by_hook_and_place() {
    let q = Qos::new("[tenant.acme]\nqos = \"guaranteed\"\n", Some(1));
    assert_eq!(q.start(1, "globex", 0), OK);
    let rule = format!(
        "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in equal-size \
         mode, and {L40S} schedules best-effort"
    );

    let placed = place_refusal(&q.place("acme"));
    let started = q.start(2, "acme", 1);

    assert_eq!(
        (placed, started, q.vf_type(1)),
        (
            (Some(1), "policy".to_owned(), rule.clone()),
            refused(2, "acme", &rule),
            "0".to_owned()
        )
    );
}

#[test]
fn place_apply_for_guaranteed_sets_fixed_share_on_the_simulator_then_makes_the_vgpu() {
    let q = Qos::live("[tenant.acme]\nqos = \"guaranteed\"\n");
    let mut args = Qos::global_of(q.nvml.as_ref());
    args.extend(
        [
            "place", "--count", "1", "--type", "L40S-12Q", "--tenant", "acme", "--apply",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let out = common::vgpuctl(&q.host, &args);

    assert_eq!(
        (out.status.code(), sim_policy(&q.host), q.vf_type(0) != "0"),
        (Some(0), "fixed-share".to_owned(), true),
        "{}",
        stderr(&out)
    );
}

#[test]
fn place_table_notes_the_scheduler_a_pick_needs() {
    let q = Qos::new("[tenant.acme]\nqos = \"bounded\"\n", Some(1));
    let mut args = Qos::global_of(q.nvml.as_ref());
    args.extend(
        [
            "place", "--count", "1", "--type", "L40S-12Q", "--tenant", "acme",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let out = common::vgpuctl(&q.host, &args);

    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().last(),
        Some(
            format!(
                "note: {L40S} needs its vGPU scheduler set to equal-share first (`place --apply` \
                 sets it; so does `vgpuctl sched {L40S} --policy equal-share`)"
            )
            .as_str()
        )
    );
}

#[test]
fn bounded_on_equal_share_gpu_starts() {
    let q = Qos::new("[tenant.acme]\nqos = \"bounded\"\n", Some(2));

    assert_eq!(q.start(1, "acme", 0), OK);
}

#[test]
fn dedicated_on_shared_type_is_refused_naming_the_scheduler() {
    let q = Qos::new("[tenant.acme]\nqos = \"dedicated\"\n", Some(3));

    assert_eq!(
        q.start(1, "acme", 0),
        refused(
            1,
            "acme",
            &format!(
                "qos: tenant \"acme\" is dedicated, which needs the only device on its GPU, and \
                 {L40S} (scheduler fixed-share) may hold other devices beside it"
            )
        )
    );
}

#[test]
fn best_effort_tenant_starts_without_nvml() {
    let q = Qos::new("[tenant.acme]\nqos = \"best-effort\"\n", None);

    assert_eq!(q.start(1, "acme", 0), OK);
}

#[test]
fn bounded_without_nvml_is_refused_never_assumed() {
    let q = Qos::new("[tenant.acme]\nqos = \"bounded\"\n", None);

    assert_eq!(
        q.start(1, "acme", 0),
        refused(
            1,
            "acme",
            &format!(
                "qos: tenant \"acme\" is bounded, which needs an equal-share or fixed-share \
                 scheduler, and {L40S}'s vGPU scheduler cannot be read"
            )
        )
    );
}

#[test]
fn guaranteed_refused_then_started_once_sched_sets_fixed_share_on_the_simulator() {
    let q = Qos::live("[tenant.acme]\nqos = \"guaranteed\"\n");
    let before = q.start(1, "acme", 0);

    let set = q.sched("5e:00.0", &["--policy", "fixed-share"]);
    let after = q.start(2, "acme", 1);

    assert_eq!(
        (before, set.status.code(), after, q.vf_type(1) != "0"),
        (
            refused(
                1,
                "acme",
                &format!(
                    "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in \
                     equal-size mode, and {L40S} schedules best-effort"
                )
            ),
            Some(0),
            OK,
            true
        )
    );
}

#[test]
fn sched_change_while_the_gpu_holds_a_vgpu_is_refused_by_the_simulator() {
    let q = Qos::live("[tenant.acme]\nqos = \"best-effort\"\n");
    assert_eq!(q.start(1, "acme", 0), OK);

    let set = q.sched("5e:00.0", &["--policy", "fixed-share"]);
    let state = std::fs::read_to_string(
        q.host
            .sim
            .root()
            .join(format!(".vgpu-sim/nvidia/{L40S}.json")),
    )
    .unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();

    assert_eq!(
        (set.status.code(), state["scheduler"]["policy"].as_str()),
        (Some(1), Some("best-effort"))
    );
}

/// `vgpuctl --nvml-library NVML ARGS...` on `h`.
fn with_nvml(h: &Host, nvml: &FakeNvml, args: &[&str]) -> Output {
    let mut all = vec!["--nvml-library", nvml.library().to_str().unwrap()];
    all.extend_from_slice(args);
    common::vgpuctl(h, &all)
}

/// The L40S's scheduler policy as the simulator publishes it.
fn sim_policy(h: &Host) -> String {
    let text = std::fs::read_to_string(h.sim.root().join(format!(".vgpu-sim/nvidia/{L40S}.json")))
        .unwrap();
    let state: serde_json::Value = serde_json::from_str(&text).unwrap();
    state["scheduler"]["policy"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn restore_after_reboot_sets_the_defined_scheduler_before_the_vgpus() {
    let data = format!("[[gpu]]\npci = \"{L40S}\"\n");
    let mut h = host("mixed");
    let nvml = FakeNvml::on_sim(&data, h.sim.root()).unwrap();
    let set = with_nvml(
        &h,
        &nvml,
        &["sched", "5e:00.0", "--policy", "fixed-share", "--define"],
    );
    let defined = common::vgpuctl(&h, &["define", L40S, "--type", "L40S-12Q", "--auto"]);
    reboot(&mut h);
    let nvml = FakeNvml::on_sim(&data, h.sim.root()).unwrap();
    let after_boot = sim_policy(&h);

    let listed = |h: &Host| {
        let out = with_nvml(h, &nvml, &["--json", "list", "--defined"]);
        common::json(&out)["definitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["kind"] == "scheduler")
            .cloned()
    };
    let before = listed(&h);
    let restored = with_nvml(&h, &nvml, &["restore", "--json"]);
    let after = listed(&h);
    let steps: Vec<(String, String)> = common::json(&restored)["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] == "scheduler" || s["action"] == "vf-vgpu")
        .map(|s| {
            (
                s["action"].as_str().unwrap().to_owned(),
                s["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();

    assert_eq!(
        (
            set.status.code(),
            defined.status.code(),
            after_boot,
            restored.status.code(),
            steps,
            sim_policy(&h)
        ),
        (
            Some(0),
            Some(0),
            "best-effort".to_owned(),
            Some(0),
            vec![
                ("scheduler".to_owned(), "created".to_owned()),
                ("vf-vgpu".to_owned(), "created".to_owned())
            ],
            "fixed-share".to_owned()
        )
    );
    // `list --defined` shows the definition, active once restore set it.
    let shown = |active: bool| {
        serde_json::json!({"kind": "scheduler", "id": L40S, "on": L40S, "what": "fixed-share",
                           "start": null, "active": active})
    };
    assert_eq!((before, after), (Some(shown(false)), Some(shown(true))));
}

#[test]
fn sched_define_refused_by_nvml_records_no_definition() {
    let q = Qos::live("[tenant.acme]\nqos = \"best-effort\"\n");
    assert_eq!(q.start(1, "acme", 0), OK);

    let set = q.sched("5e:00.0", &["--policy", "fixed-share", "--define"]);

    assert_eq!(
        (
            set.status.code(),
            q.host
                .state
                .path()
                .join("etc/vgpu/sched")
                .join(format!("{L40S}.json"))
                .exists()
        ),
        (Some(1), false)
    );
}

#[test]
fn tenants_json_names_each_class_and_the_gpus_serving_it_now() {
    let q = Qos::new(
        "[tenant.acme]\nqos = \"guaranteed\"\n[tenant.globex]\nqos = \"bounded\"\n",
        Some(3),
    );
    let mut args = Qos::global_of(q.nvml.as_ref());
    args.extend(["tenants", "--json"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let report = common::json(&common::vgpuctl(&q.host, &args));

    let rows: Vec<(String, String, serde_json::Value)> = report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tenant"].as_str().unwrap_or_default().to_owned(),
                t["policy"]["qos"].as_str().unwrap_or_default().to_owned(),
                t["qos_gpus"].clone(),
            )
        })
        .collect();
    // The L40S serves both by its fixed-share scheduler; the Intel GPU and the T4 by a type
    // that is the only device on its GPU (GVTg_V5_1, T4-16Q), which is dedicated.
    let serving = serde_json::json!(["0000:00:02.0", "0000:3b:00.0", L40S]);
    assert_eq!(
        rows,
        [
            ("acme".to_owned(), "guaranteed".to_owned(), serving.clone()),
            ("globex".to_owned(), "bounded".to_owned(), serving)
        ]
    );
}

/// `vgpuctl --json plan -f host.toml` for an L40S-12Q of tenant acme on the L40S, the entry's
/// `scheduler` line `scheduler` (empty: none): exit code, kind, error.
fn plan_for_acme(q: &Qos, scheduler: &str) -> (Option<i32>, serde_json::Value, String) {
    let file = q.host.state.path().join("host.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\n[[configs.default.gpu]]\naddress = \"{L40S}\"\n\
             types = {{ \"L40S-12Q\" = 1 }}\ntenant = \"acme\"\n{scheduler}"
        ),
    )
    .unwrap();
    let mut args = Qos::global_of(q.nvml.as_ref());
    args.extend(["--json", "plan", "-f", file.to_str().unwrap()].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::vgpuctl(&q.host, &args);
    let json = common::json(&out);
    let state = q.host.state.path().to_str().unwrap();
    (
        out.status.code(),
        json["kind"].clone(),
        json["error"]
            .as_str()
            .unwrap_or_default()
            .replace(state, "<state>"),
    )
}

#[test]
fn plan_for_a_guaranteed_tenant_is_refused_unless_its_entry_sets_fixed_share() {
    let q = Qos::live("[tenant.acme]\nqos = \"guaranteed\"\n");

    let refused = plan_for_acme(&q, "");
    let sets = plan_for_acme(&q, "scheduler = { policy = \"fixed-share\" }\n");

    assert_eq!(
        refused,
        (
            Some(1),
            serde_json::json!("policy"),
            format!(
                "domain \"default (apply)\" of tenant \"acme\": refused by \
                 <state>/etc/vgpu/tenants.toml: qos: tenant \"acme\" is guaranteed, which needs \
                 a fixed-share scheduler in equal-size mode, and {L40S} schedules best-effort"
            )
        )
    );
    // The plan sets the scheduler before it makes the vGPU: changes to make, none refused.
    assert_eq!((sets.0, sets.1), (Some(4), serde_json::Value::Null));
}
