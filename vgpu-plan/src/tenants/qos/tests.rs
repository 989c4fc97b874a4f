#![allow(clippy::unwrap_used)]

use crate::model::holder::Tenant;
use std::path::Path;

use crate::model::kind::DeviceKind;
use crate::model::nvml::{ArrMode, Cause, Fact, SchedulerPolicy, SchedulerState};
use crate::model::policy::{Qos, Service, Violation};
use crate::place::{Pick, Policy as PlacePolicy, Tenancy, place_for_tenant};
use crate::tenants::{Holding, Policy, check, service, serving};
use crate::testing::fleet::Model;
use crate::testing::unit::{L40S, addr, by_size, gpu, holding, host};
use crate::{Error, HostState};

const OTHER: &str = "0000:5e:00.0";

fn policy(text: &str) -> Policy {
    Policy::parse(Path::new("tenants.toml"), text).unwrap()
}

fn state(policy: SchedulerPolicy) -> Fact<SchedulerState> {
    Fact::Value(SchedulerState {
        policy: Some(policy),
        raw_policy: 0,
        arr_mode: ArrMode::Default,
        timeslice_ns: Fact::Value(0),
    })
}

fn time_sliced(tenant: &str, gpu: &str, service: Service) -> Holding {
    Holding {
        service,
        ..holding(tenant, "vm", gpu, 12288, false)
    }
}

fn scheduled(policy: Option<SchedulerPolicy>) -> Service {
    Service {
        scheduler: policy,
        equal_size: true,
        sole: false,
    }
}

/// Two L40S: `L40S` with the scheduler `first`, `OTHER` with `second`.
fn two_l40s(first: SchedulerPolicy, second: SchedulerPolicy) -> HostState {
    let mut state = host(vec![gpu(Model::L40s, L40S), gpu(Model::L40s, OTHER)]);
    state.schedulers.insert(addr(L40S), self::state(first));
    state.schedulers.insert(addr(OTHER), self::state(second));
    state
}

fn tenancy(text: &str) -> Tenancy {
    Tenancy {
        tenant: Tenant::label("acme"),
        policy: policy(text),
        held: Vec::new(),
    }
}

fn gpus(picks: &[Pick]) -> Vec<String> {
    picks.iter().map(|p| p.gpu.to_string()).collect()
}

#[test]
fn parse_qos_guaranteed_is_read() {
    let policy = policy("[tenant.acme]\nqos = \"guaranteed\"\n");

    assert_eq!(policy.of(Some("acme")).qos, Qos::Guaranteed);
}

#[test]
fn parse_qos_absent_is_best_effort() {
    let policy = policy("[tenant.acme]\nspread = true\n");

    assert_eq!(policy.of(Some("acme")).qos, Qos::BestEffort);
}

#[test]
fn parse_qos_unknown_is_error_at_its_value() {
    let err = Policy::parse(
        Path::new("/etc/vgpu/tenants.toml"),
        "[tenant.acme]\nqos = \"gold\"\n",
    )
    .unwrap_err();

    assert_eq!(
        err.to_string(),
        "/etc/vgpu/tenants.toml:2:7: unknown qos \"gold\" of tenant \"acme\": expected \
         \"best-effort\", \"bounded\", \"guaranteed\" or \"dedicated\""
    );
}

#[test]
fn service_fixed_share_time_sliced_is_guaranteed() {
    let gpu = gpu(Model::L40s, L40S);
    let ty = gpu.types.iter().find(|t| t.max_instances == Some(4));

    let served = service(
        &gpu,
        DeviceKind::TimeSlicedVgpu,
        ty,
        Some(&state(SchedulerPolicy::FixedShare)),
    );

    assert_eq!(served.class(), Qos::Guaranteed);
}

#[test]
fn service_equal_share_is_bounded() {
    let gpu = gpu(Model::L40s, L40S);
    let ty = gpu.types.iter().find(|t| t.max_instances == Some(4));

    let served = service(
        &gpu,
        DeviceKind::TimeSlicedVgpu,
        ty,
        Some(&state(SchedulerPolicy::EqualShare)),
    );

    assert_eq!(served.class(), Qos::Bounded);
}

#[test]
fn service_unread_scheduler_is_best_effort() {
    let gpu = gpu(Model::L40s, L40S);
    let ty = gpu.types.iter().find(|t| t.max_instances == Some(4));
    let unread = Fact::unknown(Cause::NotLoaded, "NVML is not loaded");

    let served = service(&gpu, DeviceKind::TimeSlicedVgpu, ty, Some(&unread));

    assert_eq!(served.class(), Qos::BestEffort);
}

#[test]
fn service_one_to_one_type_is_dedicated_on_best_effort() {
    let gpu = gpu(Model::L40s, L40S);
    let whole = gpu.types.iter().find(|t| t.max_instances == Some(1));

    let served = service(
        &gpu,
        DeviceKind::TimeSlicedVgpu,
        whole,
        Some(&state(SchedulerPolicy::BestEffort)),
    );

    assert_eq!(served.class(), Qos::Dedicated);
}

#[test]
fn service_plain_vf_of_many_is_not_dedicated() {
    let gpu = gpu(Model::Flex170, L40S);

    let served = service(&gpu, DeviceKind::PlainVf, None, None);

    assert_eq!(served.class(), Qos::BestEffort);
}

#[test]
fn check_guaranteed_on_best_effort_gpu_names_class_gpu_and_scheduler() {
    let policy = policy("[tenant.acme]\nqos = \"guaranteed\"\n");
    let new = time_sliced("acme", L40S, scheduled(Some(SchedulerPolicy::BestEffort)));

    let violations = check(&policy, &[], &[new]);

    assert_eq!(
        violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in \
          equal-size mode, and 0000:41:00.0 schedules best-effort"
        ]
    );
}

#[test]
fn check_bounded_without_scheduler_is_refused_never_assumed() {
    let policy = policy("[tenant.acme]\nqos = \"bounded\"\n");
    let new = time_sliced("acme", L40S, scheduled(None));

    let violations = check(&policy, &[], &[new]);

    assert_eq!(
        violations,
        [Violation::Qos {
            tenant: "acme".to_owned(),
            class: Qos::Bounded,
            gpu: addr(L40S),
            scheduler: None,
            equal_size: true,
        }]
    );
    assert_eq!(
        violations[0].to_string(),
        "qos: tenant \"acme\" is bounded, which needs an equal-share or fixed-share scheduler, \
         and 0000:41:00.0's vGPU scheduler cannot be read"
    );
}

#[test]
fn check_guaranteed_in_mixed_size_mode_says_so() {
    let policy = policy("[tenant.acme]\nqos = \"guaranteed\"\n");
    let mixed = Service {
        scheduler: Some(SchedulerPolicy::FixedShare),
        equal_size: false,
        sole: false,
    };

    let violations = check(&policy, &[], &[time_sliced("acme", L40S, mixed)]);

    assert_eq!(
        violations[0].to_string(),
        "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in \
         equal-size mode, and 0000:41:00.0 schedules fixed-share in mixed-size mode"
    );
}

#[test]
fn check_dedicated_on_shared_type_is_refused() {
    let policy = policy("[tenant.acme]\nqos = \"dedicated\"\n");
    let new = time_sliced("acme", L40S, scheduled(Some(SchedulerPolicy::FixedShare)));

    let violations = check(&policy, &[], &[new]);

    assert_eq!(
        violations[0].to_string(),
        "qos: tenant \"acme\" is dedicated, which needs the only device on its GPU, and \
         0000:41:00.0 (scheduler fixed-share) may hold other devices beside it"
    );
}

#[test]
fn check_bounded_on_fixed_share_keeps_the_policy() {
    let policy = policy("[tenant.acme]\nqos = \"bounded\"\n");
    let new = time_sliced("acme", L40S, scheduled(Some(SchedulerPolicy::FixedShare)));

    assert_eq!(check(&policy, &[], &[new]), []);
}

#[test]
fn check_held_devices_are_not_judged_again() {
    let policy = policy("[tenant.acme]\nqos = \"guaranteed\"\n");
    let held = time_sliced("acme", L40S, scheduled(None));
    let new = time_sliced("acme", OTHER, scheduled(Some(SchedulerPolicy::FixedShare)));

    assert_eq!(check(&policy, &[held], &[new]), []);
}

#[test]
fn place_guaranteed_takes_the_fixed_share_gpu() {
    let state = two_l40s(SchedulerPolicy::BestEffort, SchedulerPolicy::FixedShare);
    let acme = tenancy("[tenant.acme]\nqos = \"guaranteed\"\n");

    let picks = place_for_tenant(&state, &by_size(2, 12), PlacePolicy::Pack, &acme).unwrap();

    assert_eq!(gpus(&picks), [OTHER, OTHER]);
}

#[test]
fn place_bounded_without_a_serving_gpu_a_plan_could_set_names_the_rule() {
    let mut state = two_l40s(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);
    for _ in 0..2 {
        let made = crate::place::place(&state, &by_size(1, 12), PlacePolicy::Spread).unwrap();
        crate::testing::fleet::record(&mut state.inventory, &made[0]);
    }
    let acme = tenancy("[tenant.acme]\nqos = \"bounded\"\n");

    let err = place_for_tenant(&state, &by_size(1, 12), PlacePolicy::Pack, &acme).unwrap_err();

    let Error::PolicyPlacement { violation, .. } = err else {
        panic!("not a policy refusal: {err}");
    };
    assert_eq!(
        violation.to_string(),
        "qos: tenant \"acme\" is bounded, which needs an equal-share or fixed-share scheduler, \
         and 0000:41:00.0 schedules best-effort"
    );
}

/// `state` without the types that are the only device on their GPU (which are dedicated).
fn shared_types_only(mut state: HostState) -> HostState {
    for gpu in &mut state.inventory.gpus {
        gpu.types.retain(|t| t.max_instances != Some(1));
    }
    state
}

#[test]
fn serving_guaranteed_is_the_fixed_share_gpu() {
    let state = shared_types_only(two_l40s(
        SchedulerPolicy::EqualShare,
        SchedulerPolicy::FixedShare,
    ));

    assert_eq!(serving(&state, Qos::Guaranteed), [addr(OTHER)]);
}

#[test]
fn serving_bounded_is_the_equal_share_gpu_not_the_best_effort_one() {
    let state = shared_types_only(two_l40s(
        SchedulerPolicy::EqualShare,
        SchedulerPolicy::BestEffort,
    ));

    assert_eq!(serving(&state, Qos::Bounded), [addr(L40S)]);
}

#[test]
fn serving_bounded_without_a_read_scheduler_is_none() {
    let state = shared_types_only(host(vec![gpu(Model::L40s, L40S)]));

    assert_eq!(serving(&state, Qos::Bounded), []);
}

#[test]
fn serving_dedicated_is_a_gpu_offering_a_one_to_one_type() {
    let state = two_l40s(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);

    assert_eq!(serving(&state, Qos::Dedicated), [addr(L40S), addr(OTHER)]);
}
