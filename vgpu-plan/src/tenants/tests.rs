#![allow(clippy::unwrap_used)]

use std::path::Path;

use super::*;
use crate::testing::unit::{addr, holding};

const FILE: &str = r#"[tenant.acme]
isolation = "exclusive"
spread = true
max_vgpus = 3
max_framebuffer = "96GiB"

[tenant.globex]
apart_from = ["acme"]

[tenant.initech]
isolation = "hardware"

[tenant.umbrella]
qos = "bounded"

[tenant.""]
max_vgpus = 1
"#;

fn policy() -> Policy {
    Policy::parse(Path::new("tenants.toml"), FILE).unwrap()
}

fn parse_error(text: &str) -> String {
    Policy::parse(Path::new("/etc/vgpu/tenants.toml"), text)
        .unwrap_err()
        .to_string()
}

/// A time-sliced 24 GiB vGPU.
fn sliced(tenant: &str, domain: &str, gpu: &str) -> Holding {
    holding(tenant, domain, gpu, 24576, false)
}

/// A MIG-backed 18 GiB vGPU.
fn mig(tenant: &str, domain: &str, gpu: &str) -> Holding {
    holding(tenant, domain, gpu, 18432, true)
}

const A: &str = "0000:3b:00.0";
const B: &str = "0000:5e:00.0";

fn lines(violations: &[Violation]) -> Vec<String> {
    violations.iter().map(ToString::to_string).collect()
}

#[test]
fn parse_reads_every_key() {
    let policy = policy();
    assert_eq!(
        policy.of(Some("acme")),
        TenantPolicy {
            isolation: Isolation::Exclusive,
            spread: true,
            max_vgpus: Some(3),
            max_framebuffer_mib: Some(96 * 1024),
            apart_from: BTreeSet::new(),
            qos: Qos::BestEffort,
        }
    );
    assert_eq!(policy.of(Some("umbrella")).qos, Qos::Bounded);
    assert_eq!(
        policy.of(Some("globex")).apart_from,
        BTreeSet::from(["acme".to_owned()])
    );
    assert_eq!(policy.of(Some("initech")).isolation, Isolation::Hardware);
    assert_eq!(policy.of(None).max_vgpus, Some(1));
    assert_eq!(policy.of(Some("unnamed")), TenantPolicy::default());
    assert!(policy.apart("acme", "globex") && policy.apart("globex", "acme"));
    assert!(!policy.apart("acme", "initech"));
}

#[test]
fn parse_unknown_key_names_its_position() {
    assert_eq!(
        parse_error("[tenant.acme]\nisolation = \"shared\"\nmax_gpus = 2\n"),
        "/etc/vgpu/tenants.toml:3:1: unknown field `max_gpus`, expected one of `isolation`, \
         `spread`, `max_vgpus`, `max_framebuffer`, `apart_from`, `qos`"
    );
}

#[test]
fn parse_unknown_tenant_in_apart_from_names_its_position() {
    assert_eq!(
        parse_error("[tenant.globex]\napart_from = [\"acme\"]\n"),
        "/etc/vgpu/tenants.toml:2:15: tenant \"globex\" is apart from \"acme\", which this file \
         does not name: expected one of its [tenant.NAME] tables"
    );
}

#[test]
fn parse_bad_size_names_its_position() {
    assert_eq!(
        parse_error("[tenant.acme]\nmax_framebuffer = \"96GB\"\n"),
        "/etc/vgpu/tenants.toml:2:19: max_framebuffer \"96GB\" of tenant \"acme\" is not a \
         size: expected a size such as \"96GiB\" or \"512MiB\""
    );
}

#[test]
fn parse_unknown_isolation_names_its_position() {
    assert_eq!(
        parse_error("[tenant.acme]\nisolation = \"strict\"\n"),
        "/etc/vgpu/tenants.toml:2:13: unknown isolation \"strict\" of tenant \"acme\": expected \
         \"shared\", \"exclusive\" or \"hardware\""
    );
}

#[test]
fn parse_negative_quota_and_self_apart_are_refused() {
    assert_eq!(
        parse_error("[tenant.acme]\nmax_vgpus = -1\n"),
        "/etc/vgpu/tenants.toml:2:13: invalid value: integer `-1`, expected u32"
    );
    assert_eq!(
        parse_error("[tenant.acme]\napart_from = [\"acme\"]\n"),
        "/etc/vgpu/tenants.toml:2:15: tenant \"acme\" cannot be apart from itself"
    );
}

#[test]
fn no_policy_allows_everything() {
    let held = [sliced("acme", "a1", A), sliced("globex", "g1", A)];
    assert_eq!(
        check(&Policy::default(), &held, &[sliced("acme", "a2", A)]),
        []
    );
}

#[test]
fn exclusive_refuses_a_stranger_beside_it_and_it_beside_a_stranger() {
    let policy = policy();
    // A stranger comes to acme's GPU.
    let beside_acme = check(&policy, &[sliced("acme", "a1", A)], &[sliced("", "x", A)]);
    // acme comes to a stranger's GPU.
    let acme_comes = check(&policy, &[sliced("", "x", A)], &[sliced("acme", "a1", A)]);
    let expected = vec![Violation::Exclusive {
        tenant: "acme".to_owned(),
        other: String::new(),
        gpu: addr(A),
    }];
    assert_eq!((beside_acme, acme_comes), (expected.clone(), expected));
    // Another GPU is fine.
    assert_eq!(
        check(&policy, &[sliced("acme", "a1", A)], &[sliced("", "x", B)]),
        []
    );
}

#[test]
fn hardware_refuses_time_sliced_beside_another_tenant_and_allows_mig_backed() {
    let policy = policy();
    assert_eq!(
        lines(&check(
            &policy,
            &[mig("", "x", A)],
            &[sliced("initech", "i1", A)]
        )),
        [
            "hardware: tenant \"initech\" takes only hardware partitions beside other tenants, \
          and 0000:3b:00.0 holds a time-sliced vGPU of \"initech\" beside \"\""
        ]
    );
    assert_eq!(
        check(&policy, &[mig("", "x", A)], &[mig("initech", "i1", A)]),
        []
    );
    // Alone on a GPU, a time-sliced vGPU is the tenant's own GPU.
    assert_eq!(check(&policy, &[], &[sliced("initech", "i1", B)]), []);
    // A stranger coming to initech's time-sliced GPU is refused too.
    assert_eq!(
        check(
            &policy,
            &[sliced("initech", "i1", A)],
            &[sliced("", "x", A)]
        )
        .len(),
        1
    );
}

#[test]
fn spread_refuses_a_second_vgpu_of_the_tenant_on_one_gpu() {
    let policy = policy();
    assert_eq!(
        lines(&check(
            &policy,
            &[sliced("acme", "a1", A)],
            &[sliced("acme", "a2", A)]
        )),
        [
            "spread: tenant \"acme\" has at most one vGPU per GPU, and 0000:3b:00.0 holds 2 of its \
          vGPUs"
        ]
    );
    assert_eq!(
        check(
            &policy,
            &[sliced("acme", "a1", A)],
            &[sliced("acme", "a2", B)]
        ),
        []
    );
}

#[test]
fn apart_from_holds_both_ways_and_is_said_once() {
    let policy = policy();
    let expected = [
        "apart_from: tenant \"globex\" is kept apart from \"acme\", and 0000:5e:00.0 \
                     holds vGPUs of both",
    ];
    // globex comes to acme's GPU, and acme to globex's. (acme is exclusive as well.)
    let globex_comes = check(&policy, &[mig("acme", "a1", B)], &[mig("globex", "g1", B)]);
    let acme_comes = check(&policy, &[mig("globex", "g1", B)], &[mig("acme", "a1", B)]);
    for found in [globex_comes, acme_comes] {
        assert_eq!(
            found.iter().map(Violation::rule).collect::<Vec<_>>(),
            ["exclusive", "apart_from"]
        );
        assert_eq!(lines(&found[1..]), expected);
    }
}

#[test]
fn quotas_count_the_whole_host_with_what_is_handed_out() {
    let policy = policy();
    let held = [
        sliced("acme", "a1", A),
        sliced("acme", "a2", B),
        sliced("acme", "a3", "0000:86:00.0"),
    ];
    assert_eq!(
        lines(&check(
            &policy,
            &held,
            &[sliced("acme", "a4", "0000:af:00.0")]
        )),
        ["max_vgpus: tenant \"acme\" may hold 3 vGPUs, and would hold 4"]
    );
    // 96 GiB: four 24 GiB vGPUs fit, a fifth MiB does not.
    let big = holding("acme", "a1", A, 96 * 1024 + 1, true);
    assert_eq!(
        lines(&check(&policy, &[], &[big])),
        [
            "max_framebuffer: tenant \"acme\" may hold 98304 MiB of frame buffer, and would hold \
          98305 MiB"
        ]
    );
    // The tenant "" (domains without a tenant) has its own quota.
    assert_eq!(
        check(&policy, &[sliced("", "x", A)], &[sliced("", "y", B)])
            .iter()
            .map(Violation::rule)
            .collect::<Vec<_>>(),
        ["max_vgpus"]
    );
}

#[test]
fn a_violation_already_there_refuses_only_what_joins_it() {
    let policy = policy();
    // Made stricter after the fact: acme and a stranger already share A.
    let held = [sliced("acme", "a1", A), sliced("", "x", A)];
    assert_eq!(check(&policy, &held, &[sliced("globex", "g1", B)]), []);
    // Everything as new: what `vgpuctl tenants` lists.
    assert_eq!(
        lines(&check(&policy, &[], &held)),
        [
            "exclusive: tenant \"acme\" shares no GPU, and 0000:3b:00.0 holds vGPUs of \"acme\" \
          and \"\""
        ]
    );
}

#[test]
fn audit_of_quotas_already_crossed_says_holds_not_would_hold() {
    let policy = policy();
    let held = [
        sliced("acme", "a1", A),
        sliced("acme", "a2", B),
        sliced("acme", "a3", "0000:86:00.0"),
        sliced("acme", "a4", "0000:af:00.0"),
        holding("acme", "a5", "0000:d8:00.0", 96 * 1024, true),
    ];

    assert_eq!(
        lines(&audit(&policy, &held)),
        [
            "max_vgpus: tenant \"acme\" may hold 3 vGPUs, and holds 5",
            "max_framebuffer: tenant \"acme\" may hold 98304 MiB of frame buffer, and holds \
             196608 MiB"
        ]
    );
}
