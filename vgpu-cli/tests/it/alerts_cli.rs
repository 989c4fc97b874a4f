//! What the alerting rules and the dashboard of `contrib/` watch: the gauges `metrics` adds for
//! them on simulated hosts (a violation made by a stricter `tenants.toml`, a definition left
//! unrealised by a reboot without `restore`), each the answer of the command an operator runs
//! next; and the rules, their unit tests and the dashboard's expressions through `promtool`.

#![allow(clippy::print_stderr)] // a skipped check says so on stderr

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::mixed::{fake_nvml, mixed};
use crate::common::{
    Host, T4, UUID, domain, host, install_hook, json, l40s_vf, reboot, run_hook, stderr, vgpuctl,
};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each series `metrics` prints on `h`, with its value, after `promtool check metrics` found
/// the text clean.
fn metrics(h: &Host, extra: &[&str]) -> BTreeMap<String, String> {
    let mut args = extra.to_vec();
    args.push("metrics");
    let out = vgpuctl(h, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    if let Some(checked) = promtool(&["check", "metrics"], Some(&text)) {
        assert_eq!(
            (checked.status.code(), stderr(&checked)),
            (Some(0), String::new()),
            "{text}"
        );
    }
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| (series.to_owned(), value.to_owned()))
        .collect()
}

/// The series of `all` named `name`.
fn family(all: &BTreeMap<String, String>, name: &str) -> Vec<(String, String)> {
    all.iter()
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .map(|(s, v)| (s.clone(), v.clone()))
        .collect()
}

/// `promtool ARGS`, with `stdin` given; `None` (skip) when promtool is missing, only outside
/// CI.
fn promtool(args: &[&str], stdin: Option<&str>) -> Option<Output> {
    let spawned = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "promtool (scripts/install-deps.sh installs the Debian package prometheus): {err}"
            );
            eprintln!("skipped: promtool (Debian package prometheus): {err}");
            return None;
        }
    };
    let input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        std::io::Write::write_all(&mut { input }, text.as_bytes()).unwrap();
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn metrics_violation_of_a_stricter_policy_is_the_one_tenants_lists() {
    let h = host("mixed");
    let hooks = install_hook(&h, &[]);
    for (n, tenant) in [(1, "acme"), (2, "globex")] {
        let xml = domain(n, tenant, "L40S-12Q", &[l40s_vf(n - 1)]);
        let out = run_hook(hooks.path(), &format!("vm{n}"), "prepare", "begin", &xml);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    // acme becomes exclusive after the fact.
    let dir = h.state.path().join("etc/vgpu");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tenants.toml"),
        "[tenant.acme]\nisolation = \"exclusive\"\n",
    )
    .unwrap();

    let all = metrics(&h, &[]);
    let tenants = json(&vgpuctl(&h, &["tenants", "--json"]));

    let listed: Vec<(String, String)> = tenants["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                format!(
                    "vgpu_tenant_policy_violations{{tenant=\"{}\",rule=\"{}\"}}",
                    v["tenant"].as_str().unwrap(),
                    v["rule"].as_str().unwrap()
                ),
                "1".to_owned(),
            )
        })
        .collect();
    assert_eq!(
        (
            family(&all, "vgpu_tenant_policy_violations"),
            listed.clone()
        ),
        (
            vec![(
                "vgpu_tenant_policy_violations{tenant=\"acme\",rule=\"exclusive\"}".to_owned(),
                "1".to_owned()
            )],
            listed
        )
    );
}

#[test]
fn metrics_without_libvirt_names_the_tenant_tenants_names() {
    let h = host("mixed");
    let hooks = install_hook(&h, &[]);
    let xml = domain(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let out = run_hook(hooks.path(), "vm1", "prepare", "begin", &xml);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let all = metrics(&h, &[]);
    let tenants = json(&vgpuctl(&h, &["tenants", "--json"]));

    let named: Vec<&str> = tenants["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["vgpus"].as_u64() > Some(0))
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(
        (
            family(&all, "vgpu_tenant_vgpus_held"),
            family(&all, "vgpu_framebuffer_bytes"),
            named
        ),
        (
            vec![(
                "vgpu_tenant_vgpus_held{tenant=\"acme\"}".to_owned(),
                "1".to_owned()
            )],
            vec![(
                format!(
                    "vgpu_framebuffer_bytes{{gpu=\"0000:5e:00.0\",vgpu=\"{}\",type=\"1153\",\
                     type_name=\"NVIDIA L40S-12Q\",domain=\"vm1\",tenant=\"acme\"}}",
                    l40s_vf(0)
                ),
                "12884901888".to_owned()
            )],
            vec!["acme"]
        )
    );
}

#[test]
fn metrics_type_available_is_what_types_says() {
    let h = mixed();
    let nvml = fake_nvml();
    let library = nvml.library().to_str().unwrap().to_owned();
    let all = metrics(&h, &["--nvml-library", &library]);
    let types = json(&vgpuctl(
        &h,
        &["--nvml-library", &library, "types", "--json"],
    ));

    let said: Vec<(String, String)> = types["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            let gpu = g["address"].as_str().unwrap().to_owned();
            g["types"].as_array().unwrap().iter().map(move |t| {
                (
                    format!(
                        "vgpu_gpu_type_available{{gpu=\"{gpu}\",type=\"{}\",type_name=\"{}\"}}",
                        t["id"].as_str().unwrap(),
                        t["name"].as_str().unwrap_or_default()
                    ),
                    t["available"].to_string(),
                )
            })
        })
        .collect();
    let mut said = said;
    said.sort();
    let exposed = family(&all, "vgpu_gpu_type_available");
    let t4_2q = exposed
        .iter()
        .find(|(s, _)| s.contains("type=\"nvidia-231\""))
        .cloned();
    assert_eq!(
        (exposed, t4_2q),
        (
            said,
            Some((
                "vgpu_gpu_type_available{gpu=\"0000:3b:00.0\",type=\"nvidia-231\",\
                 type_name=\"GRID T4-2Q\"}"
                    .to_owned(),
                "5".to_owned()
            ))
        )
    );
}

/// The restore and definition gauges of `metrics` on `h`.
fn restore_gauges(h: &Host) -> Vec<(String, String)> {
    let all = metrics(h, &[]);
    [
        "vgpu_restore_last_success",
        "vgpu_restore_this_boot",
        "vgpu_restore_last_run_timestamp_seconds",
    ]
    .into_iter()
    .flat_map(|name| family(&all, name))
    .chain(
        family(&all, "vgpu_definitions_unrealised")
            .into_iter()
            .filter(|(s, _)| s.contains(T4)),
    )
    .collect()
}

/// The restore gauges `metrics` gives after the restore recorded in `h`'s state root.
fn restored(h: &Host, this_boot: &str, unrealised: &str) -> Vec<(String, String)> {
    let path = h.state.path().join("var/lib/vgpu/restore.json");
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ms = run["finished"]["wall_ms"].as_i64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let seconds = (ms as f64 / 1000.0).to_string();
    vec![
        ("vgpu_restore_last_success".to_owned(), "1".to_owned()),
        ("vgpu_restore_this_boot".to_owned(), this_boot.to_owned()),
        (
            "vgpu_restore_last_run_timestamp_seconds".to_owned(),
            seconds,
        ),
        (
            format!("vgpu_definitions_unrealised{{gpu=\"{T4}\"}}"),
            unrealised.to_owned(),
        ),
    ]
}

#[test]
fn metrics_reboot_without_restore_shows_the_definition_unrealised_until_restore() {
    let mut h = host("mixed");
    let create = vgpuctl(
        &h,
        &[
            "create", T4, "--type", "T4-2Q", "--uuid", UUID, "--define", "--auto",
        ],
    );
    assert_eq!(create.status.code(), Some(0), "{}", stderr(&create));
    let never = restore_gauges(&h);
    assert_eq!(vgpuctl(&h, &["restore"]).status.code(), Some(0));
    let before = restore_gauges(&h);
    let expected_before = restored(&h, "1", "0");

    reboot(&mut h);
    let rebooted = restore_gauges(&h);
    let expected_rebooted = restored(&h, "0", "1");
    let listed = json(&vgpuctl(&h, &["list", "--defined", "--json"]));
    let restore = vgpuctl(&h, &["restore"]);
    let after = restore_gauges(&h);
    let expected_after = restored(&h, "1", "0");

    assert_eq!(
        (
            never,
            before,
            rebooted,
            listed["definitions"][0]["active"].clone(),
            restore.status.code(),
            after
        ),
        (
            vec![
                ("vgpu_restore_this_boot".to_owned(), "0".to_owned()),
                (
                    format!("vgpu_definitions_unrealised{{gpu=\"{T4}\"}}"),
                    "0".to_owned()
                )
            ],
            expected_before,
            expected_rebooted,
            serde_json::json!(false),
            Some(0),
            expected_after
        )
    );
}

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    let Some(checked) = promtool(
        &["check", "rules", "contrib/prometheus/vgpu.rules.yml"],
        None,
    ) else {
        return;
    };
    let mut tests: Vec<String> = std::fs::read_dir(repo().join("contrib/prometheus/tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .map(|p| p.strip_prefix(repo()).unwrap().to_str().unwrap().to_owned())
        .collect();
    tests.sort();
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    let tested = promtool(&args, None).unwrap();
    assert_eq!(
        (
            checked.status.code(),
            String::from_utf8_lossy(&checked.stdout).into_owned(),
            tests.len(),
            tested.status.code(),
        ),
        (
            Some(0),
            "Checking contrib/prometheus/vgpu.rules.yml\n  SUCCESS: 16 rules found\n\n".to_owned(),
            1,
            Some(0)
        ),
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        stderr(&tested)
    );
}

/// The metric names `metrics` exposes: those of the golden files, and those left out there
/// for want of a violation, a `restore` or a ledger interval.
fn exposed_names() -> Vec<String> {
    let mut names: Vec<String> = ["metrics-mixed.prom", "metrics-mixed-no-nvml.prom"]
        .into_iter()
        .map(|golden| {
            let path = repo().join("vgpu-cli/tests/golden").join(golden);
            std::fs::read_to_string(path).unwrap()
        })
        .collect::<String>()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .chain(
            [
                "vgpu_tenant_policy_violations",
                "vgpu_restore_last_run_timestamp_seconds",
                "vgpu_restore_last_success",
                "vgpu_tenant_vgpu_seconds_total",
                "vgpu_tenant_framebuffer_byte_seconds_total",
            ]
            .map(str::to_owned),
        )
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The metric names a PromQL expression selects: identifiers not inside a label matcher, a
/// range or a string, that are neither a function, an aggregation nor a keyword.
fn metric_names(expr: &str) -> Vec<String> {
    const NOT_METRICS: [&str; 15] = [
        "sum", "count", "min", "max", "avg", "group", "topk", "bottomk", "quantile", "stddev",
        "stdvar", "and", "or", "unless", "bool",
    ];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let skip_to = |from: usize, close: char| {
        let mut j = from;
        while j < chars.len() && chars[j] != close {
            j += 1;
        }
        j + 1
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_to(i + 1, '"');
        } else if c == '{' {
            i = skip_to(i + 1, '}');
        } else if c == '[' {
            i = skip_to(i + 1, ']');
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) && call {
                i = skip_to(next + 1, ')');
            } else if !call && !NOT_METRICS.contains(&word.as_str()) {
                names.push(word);
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Every `expr` of `value`, depth first.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v.as_str()) {
                    ("expr", Some(expr)) => out.push(expr.to_owned()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn dashboard_expressions_use_only_exposed_metrics_and_pass_promtool() {
    let text = std::fs::read_to_string(repo().join("contrib/grafana/vgpu.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut found = Vec::new();
    exprs(&dashboard["panels"], &mut found);
    // Grafana's variables, as Prometheus would get them.
    let promql: Vec<String> = found
        .iter()
        .map(|e| {
            e.replace("$__rate_interval", "5m")
                .replace("$gpu", ".*")
                .replace("$tenant", ".*")
        })
        .collect();
    let exposed = exposed_names();
    let unknown: Vec<String> = promql
        .iter()
        .flat_map(|e| metric_names(e))
        .filter(|name| !exposed.contains(name))
        .collect();
    let used: std::collections::BTreeSet<String> =
        promql.iter().flat_map(|e| metric_names(e)).collect();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("dashboard.rules.yml");
    let mut yaml = "groups:\n  - name: dashboard\n    rules:\n".to_owned();
    for (n, expr) in promql.iter().enumerate() {
        yaml.push_str(&format!(
            "      - record: dashboard:expr_{n}\n        expr: {}\n",
            serde_json::Value::from(expr.as_str())
        ));
    }
    std::fs::write(&rules, yaml).unwrap();
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()], None)
        .map(|out| (out.status.code(), stderr(&out)));

    assert_eq!(
        (unknown, used.len(), variables, found.len()),
        (
            Vec::<String>::new(),
            13,
            vec!["datasource", "gpu", "tenant"],
            13
        )
    );
    if let Some(checked) = checked {
        assert_eq!(checked, (Some(0), String::new()));
    }
}

#[test]
fn metric_names_leaves_out_functions_labels_and_ranges() {
    assert_eq!(
        metric_names(
            "sum by (tenant) (rate(vgpu_a_total{tenant=~\"x\"}[5m])) and on (gpu) vgpu_b > 0"
        ),
        vec!["vgpu_a_total", "vgpu_b"]
    );
}
