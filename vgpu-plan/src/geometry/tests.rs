//! MIG geometry turned into steps, on Hopper's placement table.

use std::collections::{BTreeMap, BTreeSet};

use crate::HostState;
use crate::capacity::MigFacts;
use crate::desired::{Location, MigGeometry, MigRequest};
use crate::geometry;
use crate::model::nvml::GpuInstancePlacement;
use crate::model::nvml::MigProfile;
use crate::steps::{Refusal, Step};
use crate::testing::fleet::Model;
use crate::testing::unit::{addr, gpu, host};

const H200: &str = "0000:18:00.0";

fn at(start: u32, size: u32) -> GpuInstancePlacement {
    GpuInstancePlacement { start, size }
}

/// Hopper's profiles: 1g (id 19) at 0-6, 2g (14) at 0, 2, 4, 3g (9) at 0, 4, 7g (0) at 0.
fn hopper(instances: &[(u32, &str, u32)], used: &[u32]) -> MigFacts {
    let table = [
        ("1g.18gb", 19, (0..7).map(|s| at(s, 1)).collect::<Vec<_>>()),
        ("2g.35gb", 14, vec![at(0, 2), at(2, 2), at(4, 2)]),
        ("3g.71gb", 9, vec![at(0, 4), at(4, 4)]),
        ("7g.141gb", 0, vec![at(0, 8)]),
    ];
    let size = |profile: &str| match profile {
        "1g.18gb" => 1,
        "2g.35gb" => 2,
        "3g.71gb" => 4,
        _ => 8,
    };
    MigFacts {
        mig_on: true,
        reset_pending: false,
        instances: instances
            .iter()
            .map(|(id, p, _)| (*id, (*p).to_owned()))
            .collect(),
        placements: instances
            .iter()
            .map(|(id, p, start)| (*id, at(*start, size(p))))
            .collect(),
        profiles: table
            .into_iter()
            .map(|(name, id, placements)| (name.to_owned(), MigProfile { id, placements }))
            .collect(),
        used: used.iter().copied().collect::<BTreeSet<u32>>(),
    }
}

fn state(facts: MigFacts) -> HostState {
    let mut host = host(vec![gpu(Model::L40s, H200)]);
    host.mig.insert(addr(H200), facts);
    host
}

fn request(wanted: &[(&str, u32)]) -> MigRequest {
    MigRequest {
        geometry: MigGeometry::Instances(
            wanted
                .iter()
                .map(|(p, n)| ((*p).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
        ),
        at: Location { line: 1, column: 1 },
        implied: false,
    }
}

fn steps(host: &HostState, wanted: &MigRequest) -> Result<Vec<Step>, Vec<Refusal>> {
    let gpu = &host.inventory.gpus[0];
    geometry::plan(
        host,
        gpu,
        wanted,
        geometry::UnderVgpus::Stay { config: "parted" },
    )
    .map(|g| g.steps)
    .map_err(|r| r.into_iter().map(|r| r.refusal).collect())
}

fn create(profile: &str, profile_id: u32, start: u32) -> Step {
    Step::CreateGpuInstance {
        profile: profile.to_owned(),
        profile_id: Some(profile_id),
        start: Some(start),
    }
}

#[test]
fn seven_1g_keep_the_two_there_destroy_the_2g_and_make_five() {
    let host = state(hopper(
        &[(9, "1g.18gb", 4), (10, "1g.18gb", 5), (3, "2g.35gb", 0)],
        &[],
    ));

    assert_eq!(
        steps(&host, &request(&[("1g.18gb", 7)])),
        Ok(vec![
            Step::DestroyGpuInstance {
                id: 3,
                profile: "2g.35gb".to_owned(),
                start: 0
            },
            create("1g.18gb", 19, 0),
            create("1g.18gb", 19, 1),
            create("1g.18gb", 19, 2),
            create("1g.18gb", 19, 3),
            create("1g.18gb", 19, 6),
        ])
    );
}

#[test]
fn the_geometry_there_already_gives_no_step() {
    let host = state(hopper(&[(1, "3g.71gb", 0), (2, "3g.71gb", 4)], &[1]));

    assert_eq!(steps(&host, &request(&[("3g.71gb", 2)])), Ok(vec![]));
}

#[test]
fn an_instance_a_vgpu_runs_on_is_kept_before_a_free_one() {
    let host = state(hopper(&[(9, "1g.18gb", 4), (10, "1g.18gb", 5)], &[10]));

    assert_eq!(
        steps(&host, &request(&[("1g.18gb", 1)])),
        Ok(vec![Step::DestroyGpuInstance {
            id: 9,
            profile: "1g.18gb".to_owned(),
            start: 4
        }])
    );
}

#[test]
fn removing_an_instance_a_vgpu_runs_on_is_refused() {
    let host = state(hopper(&[(3, "2g.35gb", 0)], &[3]));

    assert_eq!(
        steps(&host, &request(&[("1g.18gb", 1)])),
        Err(vec![Refusal::MigUnderVgpus {
            config: "parted".to_owned(),
            instances: vec![(3, "2g.35gb".to_owned())],
            vgpus: vec![]
        }])
    );
}

#[test]
fn a_3g_beside_a_kept_1g_at_slice_0_goes_to_slice_4() {
    let host = state(hopper(&[(5, "1g.18gb", 0)], &[5]));

    assert_eq!(
        steps(&host, &request(&[("1g.18gb", 1), ("3g.71gb", 1)])),
        Ok(vec![create("3g.71gb", 9, 4)])
    );
}

#[test]
fn a_geometry_that_does_not_fit_is_refused() {
    let host = state(hopper(&[], &[]));

    assert_eq!(
        steps(&host, &request(&[("3g.71gb", 2), ("1g.18gb", 1)])),
        Err(vec![Refusal::MigNoFit {
            why: "the GPU instances do not fit together on the GPU".to_owned()
        }])
    );
}

#[test]
fn a_pending_mode_change_is_refused() {
    let mut facts = hopper(&[], &[]);
    facts.reset_pending = true;

    assert_eq!(
        steps(&state(facts), &request(&[("1g.18gb", 1)])),
        Err(vec![Refusal::MigResetPending])
    );
}

#[test]
fn mig_off_is_turned_on_then_each_instance_made_where_apply_chooses() {
    let mut facts = hopper(&[], &[]);
    facts.mig_on = false;
    facts.profiles.clear();

    assert_eq!(
        steps(&state(facts), &request(&[("1g.18gb", 2)])),
        Ok(vec![
            Step::MigMode { on: true },
            Step::CreateGpuInstance {
                profile: "1g.18gb".to_owned(),
                profile_id: None,
                start: None
            },
            Step::CreateGpuInstance {
                profile: "1g.18gb".to_owned(),
                profile_id: None,
                start: None
            },
        ])
    );
}

#[test]
fn disabled_destroys_every_instance_then_turns_mig_off() {
    let host = state(hopper(&[(9, "1g.18gb", 4), (3, "2g.35gb", 0)], &[]));
    let off = MigRequest {
        geometry: MigGeometry::Disabled,
        ..request(&[])
    };

    assert_eq!(
        steps(&host, &off),
        Ok(vec![
            Step::DestroyGpuInstance {
                id: 3,
                profile: "2g.35gb".to_owned(),
                start: 0
            },
            Step::DestroyGpuInstance {
                id: 9,
                profile: "1g.18gb".to_owned(),
                start: 4
            },
            Step::MigMode { on: false },
        ])
    );
}

#[test]
fn a_profile_the_gpu_lacks_is_refused_with_those_it_has() {
    let host = state(hopper(&[], &[]));

    assert_eq!(
        steps(&host, &request(&[("4g.71gb", 1)])),
        Err(vec![Refusal::MigProfileUnknown {
            profile: "4g.71gb".to_owned(),
            offered: vec![
                "1g.18gb".to_owned(),
                "2g.35gb".to_owned(),
                "3g.71gb".to_owned(),
                "7g.141gb".to_owned()
            ]
        }])
    );
}
