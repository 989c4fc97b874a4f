//! The usage ledger through the libvirt hook exactly as libvirt runs it (`started begin`,
//! `stopped end`), on simulated hosts: two tenants' known durations in JSON and CSV, 64 hooks
//! at once, a reboot between `started` and `stopped`, and a full state disk.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vgpu_testing::disk::{Tmpfs, copy_tree};

use crate::common::{Host, domain, host, install_hook, json, l40s_vf, run_hook, stderr, vgpuctl};

/// An L40S-12Q's frame buffer.
const L40S_12Q_BYTES: u64 = 12 << 30;

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A wall-clock time strictly after `ms` (the clock moves on; polled, never slept blind).
fn after(ms: i64) -> i64 {
    let mut now = now_ms();
    assert!(
        vgpu_testing::wait_for(Duration::from_secs(5), || {
            now = now_ms();
            now > ms
        }),
        "the clock did not move"
    );
    now
}

fn rfc3339(ms: i64) -> String {
    vgpu_core::model::usage::rfc3339(ms)
}

/// Runs the hook's `op subop` for domain `n` and asserts it exits 0 silently.
fn hook(hooks: &Path, n: u32, xml: &str, op: &str, subop: &str) {
    let out = run_hook(hooks, &format!("vm{n}"), op, subop, xml);
    assert_eq!(
        (out.status.code(), stderr(&out)),
        (Some(0), String::new()),
        "vm{n} {op} {subop}"
    );
}

/// The hook's whole life of a domain start: `prepare`, `start`, `started`.
fn start(hooks: &Path, n: u32, xml: &str) {
    for (op, subop) in [
        ("prepare", "begin"),
        ("start", "begin"),
        ("started", "begin"),
    ] {
        hook(hooks, n, xml, op, subop);
    }
}

/// And of its end: `stopped`, `release`.
fn stop(hooks: &Path, n: u32, xml: &str) {
    for (op, subop) in [("stopped", "end"), ("release", "end")] {
        hook(hooks, n, xml, op, subop);
    }
}

fn usage(h: &Host, args: &[&str]) -> Output {
    let mut all = vec!["usage"];
    all.extend_from_slice(args);
    vgpuctl(h, &all)
}

/// Two tenants run at once; a window inside both intervals gives each exactly its length,
/// in JSON and in CSV, and a window around them counts each interval once.
#[test]
fn two_tenants_are_billed_the_window_their_vgpus_ran_in_json_and_csv() {
    let h = host("mixed");
    let hooks = install_hook(&h, &[]);
    let acme = domain(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    let globex = domain(2, "globex", "L40S-12Q", &[l40s_vf(1)]);
    let before = now_ms();
    start(hooks.path(), 1, &acme);
    start(hooks.path(), 2, &globex);
    let since = after(now_ms());
    let until = after(since);
    stop(hooks.path(), 1, &acme);
    stop(hooks.path(), 2, &globex);
    let end = after(now_ms());

    let window = ["--since", &rfc3339(since), "--until", &rfc3339(until)];
    let out = usage(&h, &[&window[..], &["--by", "tenant", "--json"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ms = u64::try_from(until - since).unwrap();
    let row = |tenant: &str| {
        serde_json::json!({
            "tenant": tenant,
            "vgpu_seconds": ms as f64 / 1000.0,
            "framebuffer_byte_seconds": u128::from(L40S_12Q_BYTES) * u128::from(ms) / 1000,
            "intervals": 1,
            "estimated": 0,
            "open": 0,
        })
    };
    assert_eq!(
        json(&out),
        serde_json::json!({
            "since": rfc3339(since),
            "until": rfc3339(until),
            "by": "tenant",
            "rows": [row("acme"), row("globex")],
        })
    );

    let csv = usage(&h, &[&window[..], &["--by", "domain", "--csv"]].concat());
    let line = |name: &str| {
        format!(
            "{name},{}.{:03},{},1,0,0\n",
            ms / 1000,
            ms % 1000,
            u128::from(L40S_12Q_BYTES) * u128::from(ms) / 1000
        )
    };
    assert_eq!(
        (csv.status.code(), String::from_utf8(csv.stdout).unwrap()),
        (
            Some(0),
            format!(
                "domain,vgpu_seconds,framebuffer_byte_seconds,intervals,estimated,open\n{}{}",
                line("vm1"),
                line("vm2")
            )
        )
    );

    // Around everything: each interval once, as long as it ran, and no longer.
    let all = usage(
        &h,
        &[
            "--since",
            &rfc3339(before),
            "--until",
            &rfc3339(end),
            "--by",
            "type",
            "--json",
        ],
    );
    let rows = json(&all)["rows"].clone();
    let seconds = rows[0]["vgpu_seconds"].as_f64().unwrap();
    assert_eq!(
        (
            rows.as_array().unwrap().len(),
            rows[0]["type"].as_str(),
            rows[0]["intervals"].as_u64(),
            seconds > 2.0 * (ms as f64) / 1000.0
                && seconds <= 2.0 * ((end - before) as f64) / 1000.0,
        ),
        (1, Some("1153"), Some(2), true),
        "{rows}"
    );
}

#[test]
fn usage_refuses_a_bad_time_and_an_empty_window() {
    let h = host("mixed");
    let bad = usage(&h, &["--since", "yesterday"]);
    let empty = usage(
        &h,
        &[
            "--since",
            "2026-12-01T00:00:00Z",
            "--until",
            "2026-11-01T00:00:00Z",
        ],
    );
    assert_eq!(
        (
            bad.status.code(),
            stderr(&bad).lines().next().map(str::to_owned),
            empty.status.code(),
            stderr(&empty),
        ),
        (
            Some(2),
            Some("error: invalid value 'yesterday' for '--since <TIME>': not an RFC 3339 time (2026-11-01T00:00:00Z) or a time before now (-30d, -12h, -90m, -45s, -2w)".to_owned()),
            Some(1),
            "vgpuctl: error: the window is empty: 2026-12-01T00:00:00.000Z is not before \
             2026-11-01T00:00:00.000Z\n"
                .to_owned()
        ),
        "{}\n{}",
        stderr(&bad),
        stderr(&empty)
    );
}

/// The simulated `l40s-vendor-vfio` host's VF `index` of 64: 32 on each L40S.
fn l40s_pair_vf(index: u32) -> String {
    crate::common::vf(if index < 32 { "41" } else { "c1" }, index % 32)
}

/// 64 domains start and stop at once, each with its own VF: exactly 64 intervals, each
/// closed once.
#[test]
fn sixty_four_hooks_at_once_record_sixty_four_intervals() {
    let h = host("l40s-vendor-vfio");
    let hooks = install_hook(&h, &[]);
    let domains: Vec<String> = (0..64)
        .map(|n| domain(n + 1, "acme", "L40S-1Q", &[l40s_pair_vf(n)]))
        .collect();
    let all_at_once = |life: fn(&Path, u32, &str)| {
        std::thread::scope(|s| {
            for (n, xml) in (1..).zip(&domains) {
                let hooks = hooks.path();
                s.spawn(move || life(hooks, n, xml));
            }
        });
    };
    all_at_once(start);
    all_at_once(stop);

    let out = usage(&h, &["--since", "-1d", "--by", "domain", "--json"]);
    let rows = json(&out)["rows"].as_array().unwrap().clone();
    let counted: Vec<(String, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["domain"].as_str().unwrap().to_owned(),
                r["intervals"].as_u64().unwrap(),
                r["estimated"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut expected: Vec<(String, u64, u64)> =
        (1..=64).map(|n| (format!("vm{n}"), 1, 0)).collect();
    expected.sort();
    // One record per interval in the raw log, none torn.
    let records: usize = std::fs::read_dir(h.state.path().join("var/lib/vgpu/usage/raw"))
        .unwrap()
        .map(|f| {
            std::fs::read_to_string(f.unwrap().path())
                .unwrap()
                .lines()
                .count()
        })
        .sum();
    assert_eq!((counted, records), (expected, 64));
}

/// The usage counters of `metrics`, checked clean by Prometheus's own `promtool`.
fn counters(h: &Host) -> Vec<(String, String)> {
    let out = vgpuctl(h, &["metrics"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) runs");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert_eq!(
        (checked.status.code(), stderr(&checked)),
        (Some(0), String::new()),
        "{text}"
    );
    text.lines()
        .filter(|l| l.starts_with("vgpu_") && l.contains("_total"))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.to_owned())
        })
        .collect()
}

/// Power is lost while a domain runs: at the next boot `restore` closes its interval at the
/// last time the host was known to run (a metrics scrape), marked estimated, and the
/// counters do not go back.
#[test]
fn a_reboot_between_started_and_stopped_closes_the_interval_as_estimated() {
    let mut h = host("mixed");
    let hooks = install_hook(&h, &[]);
    let acme = domain(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    start(hooks.path(), 1, &acme);
    after(now_ms());
    let scraped = counters(&h);
    crate::common::reboot(&mut h);
    let restored = vgpuctl(&h, &["restore"]);
    let rebooted = counters(&h);
    // libvirt runs `stopped` and `release` for the domain it finds dead; nothing is left to
    // close. (The simulator's new boot has a root of its own: the hook is installed again.)
    let hooks = install_hook(&h, &[]);
    stop(hooks.path(), 1, &acme);
    let out = usage(&h, &["--since", "-1d", "--json"]);
    let row = &json(&out)["rows"][0];
    assert_eq!(
        (
            restored.status.code(),
            scraped
                .iter()
                .map(|(series, _)| series.as_str())
                .collect::<Vec<_>>(),
            rebooted == scraped,
            row["tenant"].as_str(),
            row["intervals"].as_u64(),
            row["estimated"].as_u64(),
        ),
        (
            Some(0),
            vec![
                "vgpu_tenant_vgpu_seconds_total{tenant=\"acme\"}",
                "vgpu_tenant_framebuffer_byte_seconds_total{tenant=\"acme\"}",
                "vgpu_usage_ledger_records_skipped_total",
            ],
            true,
            Some("acme"),
            Some(1),
            Some(1)
        ),
        "{scraped:?} {rebooted:?}"
    );
}

/// The usage directory on a full file system: `started` and `stopped` still exit 0, the
/// loss is in the audit log, and the interval recorded before is still reported.
#[test]
fn a_full_state_disk_stops_no_domain_and_harms_nothing_written() {
    let h = host("mixed");
    let hooks = install_hook(&h, &[]);
    let acme = domain(1, "acme", "L40S-12Q", &[l40s_vf(0)]);
    start(hooks.path(), 1, &acme);
    stop(hooks.path(), 1, &acme);
    let before = json(&usage(&h, &["--since", "-1d", "--json"]))["rows"].clone();
    let globex = domain(2, "globex", "L40S-12Q", &[l40s_vf(1)]);
    hook(hooks.path(), 2, &globex, "prepare", "begin");

    let dir = h.state.path().join("var/lib/vgpu/usage");
    let saved = tempfile::tempdir().unwrap();
    copy_tree(&dir, saved.path()).unwrap();
    let mut disk = Tmpfs::mount(&dir, "64k").expect("a tmpfs (root is needed)");
    copy_tree(saved.path(), &dir).unwrap();
    disk.fill().unwrap();

    let started = run_hook(hooks.path(), "vm2", "started", "begin", &globex);
    let stopped = run_hook(hooks.path(), "vm2", "stopped", "end", &globex);
    let during = json(&usage(&h, &["--since", "-1d", "--json"]))["rows"].clone();
    drop(disk);
    let audit = std::fs::read_to_string(h.state.path().join("var/log/vgpu/audit.jsonl")).unwrap();
    let lost: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("usage not recorded"))
        .map(|l| {
            let entry: serde_json::Value = serde_json::from_str(l).unwrap();
            if entry["action"] == "usage-begin" {
                "usage-begin"
            } else {
                "other"
            }
        })
        .collect();
    assert_eq!(
        (
            started.status.code(),
            stopped.status.code(),
            stderr(&started).contains("usage not recorded")
                || stderr(&started).contains("No space left on device"),
            lost.first().copied(),
            during,
        ),
        (Some(0), Some(0), true, Some("usage-begin"), before)
    );
}

/// A running domain's interval is open: marked `*` in the text, counted in `open` in JSON and
/// CSV; `--by type` shows the type's name in the text as in JSON and CSV.
#[test]
fn a_running_domains_usage_is_marked_open_and_by_type_names_the_type() {
    let h = host("mixed");
    let hooks = install_hook(&h, &[]);
    start(
        hooks.path(),
        1,
        &domain(1, "acme", "L40S-12Q", &[l40s_vf(0)]),
    );

    let text = usage(&h, &["--by", "type"]);
    let value = json(&usage(&h, &["--by", "type", "--json"]));
    let csv = String::from_utf8(usage(&h, &["--by", "type", "--csv"]).stdout).unwrap();

    let text = String::from_utf8(text.stdout).unwrap();
    let row = text.lines().nth(2).unwrap_or_default().to_owned();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (
            text.lines()
                .nth(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>()),
            cells.get(1..3).map(<[&str]>::to_vec),
            [3, 4].map(|i| cells.get(i).is_some_and(|c| c.ends_with('*'))),
            text.lines().last().map(str::to_owned),
            value["rows"][0]["open"].clone(),
            csv.lines().nth(1).map(|l| l.ends_with(",1,0,1")),
        ),
        (
            Some(vec![
                "TYPE",
                "NAME",
                "VGPU",
                "SECONDS",
                "FB",
                "BYTE",
                "SECONDS",
                "INTERVALS",
                "ESTIMATED"
            ]),
            Some(vec!["NVIDIA", "L40S-12Q"]),
            [true, true],
            Some(
                "* still held: a running domain's interval is open, so this grows until it stops."
                    .to_owned()
            ),
            serde_json::json!(1),
            Some(true),
        ),
        "{text}"
    );
}
