//! Placement for a tenant: only GPUs where its new vGPUs keep the tenant policy, and an error
//! naming the rule when too few do; as a property, every pick passes the one check.

use crate::model::holder::{Holder, Tenant};
use std::path::Path;
use uuid::Uuid;

use proptest::prelude::*;

use crate::Error;
use crate::HostState;
use crate::model::definition::Start;
use crate::model::nvml::{ArrMode, Cause, Fact, SchedulerPolicy, SchedulerState};
use crate::model::pci::PciAddress;
use crate::model::sizes::SizeMode;
use crate::place::{Pick, Policy, Tenancy, place, place_for_tenant, plan_picks};
use crate::steps::Step;
use crate::tenants::{self, Holding};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::{addr, by_size, gpu, gpus, holding, host};

const A: &str = "0000:41:00.0";
const B: &str = "0000:81:00.0";

fn two_l40s() -> HostState {
    host(vec![gpu(Model::L40s, A), gpu(Model::L40s, B)])
}

fn tenancy(tenant: &str, policy: &str, held: Vec<Holding>) -> Tenancy {
    Tenancy {
        tenant: Tenant::label(tenant),
        policy: tenants::Policy::parse(Path::new("tenants.toml"), policy).unwrap(),
        held,
    }
}

/// A time-sliced 12 GiB vGPU of `tenant` on `gpu`.
/// A 12 GiB time-sliced vGPU of `tenant` on `gpu`.
fn held(tenant: &str, gpu: &str) -> Holding {
    holding(tenant, "vm", gpu, 12288, false)
}

#[test]
fn an_exclusive_tenant_is_placed_off_a_gpu_another_tenant_holds() {
    let t = tenancy(
        "acme",
        "[tenant.acme]\nisolation = \"exclusive\"\n",
        vec![held("globex", A)],
    );
    let picks = place_for_tenant(&two_l40s(), &by_size(2, 12), Policy::Pack, &t).unwrap();
    assert_eq!(gpus(&picks), [addr(B), addr(B)]);
}

#[test]
fn a_spread_tenant_gets_one_gpu_per_vgpu_even_when_packing() {
    let t = tenancy("acme", "[tenant.acme]\nspread = true\n", Vec::new());
    let picks = place_for_tenant(&two_l40s(), &by_size(2, 12), Policy::Pack, &t).unwrap();
    assert_eq!(gpus(&picks), [addr(A), addr(B)]);
}

#[test]
fn too_few_within_the_policy_is_an_error_naming_the_rule() {
    let t = tenancy("acme", "[tenant.acme]\nmax_vgpus = 1\n", Vec::new());
    let err = place_for_tenant(&two_l40s(), &by_size(2, 12), Policy::Pack, &t).unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            vgpu_model::ErrorKind::Policy,
            "2 vGPU(s) asked for tenant \"acme\", the GPUs the tenant policy allows can take 1: \
             max_vgpus: tenant \"acme\" may hold 1 vGPUs, and would hold 2"
                .to_owned()
        )
    );
    assert!(matches!(err, Error::PolicyPlacement { fits: 1, .. }));
}

/// The placer keeps the tenant policy as `place_for_tenant` does: the same picks, the same
/// refusal.
#[test]
fn placer_for_a_tenant_answers_as_place_for_tenant() {
    let exclusive = tenancy(
        "acme",
        "[tenant.acme]\nisolation = \"exclusive\"\n",
        vec![held("globex", A)],
    );
    let capped = tenancy("acme", "[tenant.acme]\nmax_vgpus = 1\n", Vec::new());
    let mut placer = crate::place::Placer::new(two_l40s());

    let picks = placer
        .place_for_tenant(&by_size(2, 12), Policy::Pack, &exclusive)
        .unwrap();
    let refused = placer
        .place_for_tenant(&by_size(2, 12), Policy::Pack, &capped)
        .unwrap_err();

    assert_eq!(
        picks,
        place_for_tenant(&two_l40s(), &by_size(2, 12), Policy::Pack, &exclusive).unwrap()
    );
    assert_eq!(
        refused.to_string(),
        place_for_tenant(&two_l40s(), &by_size(2, 12), Policy::Pack, &capped)
            .unwrap_err()
            .to_string()
    );
}

/// What a pick would hold for `tenant`, as the hook counts it.
fn as_holding(state: &HostState, tenant: &str, pick: &Pick) -> Holding {
    let ty = state
        .inventory
        .gpus
        .iter()
        .find(|g| g.address == pick.gpu)
        .and_then(|g| g.types.iter().find(|t| t.id == pick.type_id));
    Holding {
        holder: Holder {
            domain: String::new(),
            uuid: Uuid::nil(),
            tenant: Some(tenant).filter(|t| !t.is_empty()).map(Tenant::label),
        },
        gpu: pick.gpu,
        framebuffer_mib: pick.framebuffer_mib.unwrap_or(0),
        hardware: crate::model::kind::DeviceKind::of_type(ty).partitioned_in_hardware(),
        service: tenants::Service::default(),
    }
}

const TENANTS: [&str; 3] = ["acme", "globex", ""];

fn policy_text(isolation: [u8; 2], spread: bool, apart: bool, max: Option<u32>) -> String {
    let class = |n: u8| ["shared", "exclusive", "hardware"][usize::from(n % 3)];
    let mut text = format!(
        "[tenant.acme]\nisolation = \"{}\"\nspread = {spread}\n",
        class(isolation[0])
    );
    if let Some(max) = max {
        text.push_str(&format!("max_vgpus = {max}\n"));
    }
    text.push_str(&format!(
        "\n[tenant.globex]\nisolation = \"{}\"\n",
        class(isolation[1])
    ));
    if apart {
        text.push_str("apart_from = [\"acme\"]\n");
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every pick keeps the policy beside what is held and the earlier picks; a placement that
    /// finds none leaves every GPU with room refused by the check.
    #[test]
    fn every_pick_passes_the_check_and_none_means_every_gpu_is_refused(
        held_on in proptest::collection::vec((0usize..3, 0usize..4), 0..5),
        isolation in proptest::array::uniform2(0u8..3),
        spread in any::<bool>(),
        apart in any::<bool>(),
        max in proptest::option::of(1u32..4),
        count in 1u32..4,
        spread_order in any::<bool>(),
    ) {
        let addresses = ["0000:41:00.0", "0000:61:00.0", "0000:81:00.0", "0000:a1:00.0"];
        let mut state = host(addresses.iter().map(|a| gpu(Model::L40s, a)).collect());
        // Each held vGPU is a 12Q on its own VF: at most 4 per L40S (48 GiB).
        let mut on_gpu = [0u32; 4];
        let mut holdings = Vec::new();
        for (tenant, at) in &held_on {
            if on_gpu[*at] < 4 {
                fleet::record_vgpus(&mut state.inventory, addr(addresses[*at]), "1153", 12288, on_gpu[*at], 1);
                on_gpu[*at] += 1;
                holdings.push(held(TENANTS[*tenant], addresses[*at]));
            }
        }
        state.settle();
        let t = Tenancy {
            tenant: Tenant::label("acme"),
            policy: tenants::Policy::parse(
                Path::new("tenants.toml"),
                &policy_text(isolation, spread, apart, max),
            ).unwrap(),
            held: holdings.clone(),
        };
        let order = if spread_order { Policy::Spread } else { Policy::Pack };
        match place_for_tenant(&state, &by_size(count, 12), order, &t) {
            Ok(picks) => {
                prop_assert_eq!(picks.len(), count as usize);
                let mut so_far = holdings.clone();
                for pick in &picks {
                    let new = as_holding(&state, "acme", pick);
                    prop_assert_eq!(tenants::check(&t.policy, &so_far, std::slice::from_ref(&new)), []);
                    so_far.push(new);
                }
            }
            Err(Error::PolicyPlacement { fits: 0, .. }) => {
                let room: u32 = state
                    .inventory
                    .gpus
                    .iter()
                    .map(|g| crate::capacity::room(&state, g, "1153").available)
                    .sum();
                let every = place(&state, &by_size(room, 12), Policy::Pack).unwrap();
                for pick in &every {
                    let new = as_holding(&state, "acme", pick);
                    prop_assert!(!tenants::check(&t.policy, &holdings, &[new]).is_empty());
                }
            }
            Err(Error::PolicyPlacement { fits, .. }) => {
                prop_assert!(fits < count);
                // The first `fits` are placed within the policy.
                prop_assert!(place_for_tenant(&state, &by_size(fits, 12), order, &t).is_ok());
            }
            Err(Error::NoPlacement { .. }) => {}
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}

/// Two empty L40S whose schedulers NVML read as `a` and `b`.
fn scheduled(a: SchedulerPolicy, b: SchedulerPolicy) -> HostState {
    let mut state = two_l40s();
    for (gpu, policy) in [(A, a), (B, b)] {
        state.schedulers.insert(
            addr(gpu),
            Fact::Value(SchedulerState {
                policy: Some(policy),
                raw_policy: 0,
                arr_mode: ArrMode::Default,
                timeslice_ns: Fact::Value(0),
            }),
        );
    }
    state
}

/// Each pick's GPU and the scheduler it needs first.
fn needs(picks: &[Pick]) -> Vec<(PciAddress, Option<SchedulerPolicy>)> {
    picks.iter().map(|p| (p.gpu, p.needs_scheduler)).collect()
}

fn guaranteed() -> Tenancy {
    tenancy("acme", "[tenant.acme]\nqos = \"guaranteed\"\n", Vec::new())
}

#[test]
fn qos_serving_gpu_is_preferred_to_a_lower_one_a_plan_could_set() {
    let state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::FixedShare);

    let picks = place_for_tenant(&state, &by_size(1, 12), Policy::Pack, &guaranteed()).unwrap();

    assert_eq!(needs(&picks), [(addr(B), None)]);
}

#[test]
fn qos_empty_best_effort_gpu_is_picked_needing_fixed_share() {
    let state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);

    let picks = place_for_tenant(&state, &by_size(2, 12), Policy::Pack, &guaranteed()).unwrap();

    assert_eq!(
        needs(&picks),
        [
            (addr(A), Some(SchedulerPolicy::FixedShare)),
            (addr(A), Some(SchedulerPolicy::FixedShare))
        ]
    );
}

#[test]
fn qos_bounded_needs_the_lowest_scheduler_that_serves_it() {
    let state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);
    let bounded = tenancy("acme", "[tenant.acme]\nqos = \"bounded\"\n", Vec::new());

    let picks = place_for_tenant(&state, &by_size(1, 12), Policy::Pack, &bounded).unwrap();

    assert_eq!(
        needs(&picks),
        [(addr(A), Some(SchedulerPolicy::EqualShare))]
    );
}

#[test]
fn qos_serving_gpu_is_filled_before_one_a_plan_could_set() {
    let state = scheduled(SchedulerPolicy::FixedShare, SchedulerPolicy::BestEffort);

    let picks = place_for_tenant(&state, &by_size(5, 12), Policy::Spread, &guaranteed()).unwrap();

    assert_eq!(
        needs(&picks),
        [
            (addr(A), None),
            (addr(A), None),
            (addr(A), None),
            (addr(A), None),
            (addr(B), Some(SchedulerPolicy::FixedShare))
        ]
    );
}

#[test]
fn qos_best_effort_gpu_holding_a_vgpu_is_refused_naming_the_rule() {
    let mut state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);
    for gpu in [A, B] {
        let made = place(&state, &by_size(1, 12), Policy::Spread).unwrap();
        assert_eq!(made[0].gpu, addr(gpu));
        fleet::record(&mut state.inventory, &made[0]);
    }

    let err = place_for_tenant(&state, &by_size(1, 12), Policy::Pack, &guaranteed()).unwrap_err();

    let Error::PolicyPlacement { violation, .. } = err else {
        panic!("not a policy refusal: {err}");
    };
    assert_eq!(
        violation.to_string(),
        "qos: tenant \"acme\" is guaranteed, which needs a fixed-share scheduler in equal-size \
         mode, and 0000:41:00.0 schedules best-effort"
    );
}

#[test]
fn qos_gpu_whose_scheduler_was_not_read_is_refused() {
    let mut state = two_l40s();
    for gpu in [A, B] {
        state.schedulers.insert(
            addr(gpu),
            Fact::unknown(Cause::NotLoaded, "NVML is not loaded"),
        );
    }

    let err = place_for_tenant(&state, &by_size(1, 12), Policy::Pack, &guaranteed()).unwrap_err();

    assert!(matches!(err, Error::PolicyPlacement { .. }), "{err}");
}

#[test]
fn qos_guaranteed_on_a_mixed_size_gpu_is_refused_as_fixed_share_would_not_serve() {
    let mut state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);
    for gpu in &mut state.inventory.gpus {
        gpu.size_mode = Some(SizeMode::Mixed);
    }

    let err = place_for_tenant(&state, &by_size(1, 12), Policy::Pack, &guaranteed()).unwrap_err();

    assert!(matches!(err, Error::PolicyPlacement { .. }), "{err}");
}

#[test]
fn plan_picks_sets_the_needed_scheduler_before_creating() {
    let state = scheduled(SchedulerPolicy::BestEffort, SchedulerPolicy::BestEffort);
    let picks = place_for_tenant(&state, &by_size(2, 12), Policy::Pack, &guaranteed()).unwrap();

    let plan = plan_picks(&state, &picks, Start::Auto);

    let steps: Vec<&str> = plan.gpus[0].steps.iter().map(step_name).collect();
    assert_eq!(
        (plan.gpus.len(), steps, &plan.gpus[0].steps[0]),
        (
            1,
            vec!["scheduler", "create", "create"],
            &Step::Scheduler {
                policy: SchedulerPolicy::FixedShare,
                timeslice_ms: None
            }
        )
    );
}

fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Scheduler { .. } => "scheduler",
        Step::Create { .. } => "create",
        _ => "other",
    }
}
