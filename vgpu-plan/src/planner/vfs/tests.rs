//! Plain SR-IOV sizes that are not the driver's equal share: a local-memory quota per VF, and
//! the refusals (more than the local memory, a driver without quotas, a VF in a guest's hands).

use std::collections::BTreeMap;

use crate::HostState;
use crate::desired::Location;
use crate::model::VgpuHandle;
use crate::model::definition::SriovDefinition;
use crate::model::pci::PciAddress;
use crate::planner::plan;
use crate::steps::{Refusal, Refused, Step};
use crate::testing::fleet::{self, Model};
use crate::testing::unit::addr;
use crate::testing::unit::{FLEX, gpu, host, toml, vf};

const FLEX_ENTRY: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"default\"\n";

/// A Flex 170 with `quotas` VFs enabled, each holding that quota in MiB, defined to that
/// count, whose driver can give the VFs `memory` MiB (`None`: a driver without quotas).
fn flex(quotas: &[u64], memory: Option<u64>) -> HostState {
    let mut flex = gpu(Model::Flex170, FLEX);
    fleet::enable_vfs(&mut flex, quotas.len() as u32);
    for (vf, quota) in flex.vfs.iter_mut().zip(quotas) {
        vf.memory_mib = memory.map(|_| *quota);
    }
    let mut state = host(vec![flex]);
    if !quotas.is_empty() {
        state.definitions.sriov.push(SriovDefinition {
            pf: addr(FLEX),
            num_vfs: quotas.len() as u32,
            drivers_autoprobe: None,
            lmem_quota_mib: BTreeMap::new(),
        });
    }
    if let Some(memory) = memory {
        state.local_memory_mib.insert(addr(FLEX), memory);
    }
    state
}

fn quota(index: u32, from_mib: Option<u64>, to_mib: u64) -> Step {
    Step::Quota {
        vf: index + 1,
        address: Some(vf(FLEX, index)),
        from_mib,
        to_mib,
    }
}

#[test]
fn plan_sizes_below_the_equal_share_enable_vfs_then_set_each_quota() {
    let state = flex(&[], Some(16384));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        (
            plan.gpus[0].vf_memory_mib.clone(),
            plan.gpus[0].steps.clone()
        ),
        (
            vec![2048; 4],
            vec![
                Step::Vfs { from: 0, to: 4 },
                quota(0, None, 2048),
                quota(1, None, 2048),
                quota(2, None, 2048),
                quota(3, None, 2048)
            ]
        )
    );
}

#[test]
fn plan_sizes_at_the_equal_share_need_no_quota() {
    let state = flex(&[], Some(16384));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"8x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![Step::Vfs { from: 0, to: 8 }]);
}

#[test]
fn plan_mixed_sizes_on_enabled_vfs_lower_quotas_before_raising_one() {
    let state = flex(&[5461, 5461, 5461], Some(16384));
    let desired = toml(&format!(
        "{FLEX_ENTRY}sizes = [\"8GiB\", \"4GiB\", \"4GiB\"]\n"
    ));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            quota(1, Some(5461), 4096),
            quota(2, Some(5461), 4096),
            quota(0, Some(5461), 8192)
        ]
    );
}

#[test]
fn plan_mixed_sizes_with_vfio_pci_want_each_size() {
    let state = flex(&[], Some(16384));
    let desired = toml(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nsizes = [\"8GiB\", \"2x4GiB\"]\n",
    );

    let plan = plan(&state, &desired);

    let wants: Vec<(Option<u64>, u32)> = plan.gpus[0]
        .want
        .iter()
        .map(|w| (w.framebuffer_mib, w.count))
        .collect();
    let creates = plan.gpus[0]
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Create { .. }))
        .count();
    assert_eq!(
        (wants, plan.gpus[0].vf_memory_mib.clone(), creates),
        (
            vec![(Some(8192), 1), (Some(4096), 2)],
            vec![8192, 4096, 4096],
            3
        )
    );
}

#[test]
fn plan_quotas_as_asked_are_no_change() {
    let state = flex(&[2048, 2048, 2048, 2048], Some(16384));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert!(plan.matches());
}

#[test]
fn plan_quota_rounded_up_to_2mib_by_the_driver_matches() {
    let state = flex(&[1024, 1024], Some(16384));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"2x1023MiB\"\n"));

    let plan = plan(&state, &desired);

    assert!(plan.matches());
}

#[test]
fn plan_one_wrong_quota_changes_that_vf_only() {
    let state = flex(&[2048, 4096, 2048, 2048], Some(16384));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![quota(1, Some(4096), 2048)]);
}

#[test]
fn plan_vf_sizes_past_local_memory_are_not_enough_memory() {
    let state = flex(&[], Some(16384));
    let desired = toml(&format!(
        "{FLEX_ENTRY}sizes = [\"8GiB\", \"8GiB\", \"4GiB\"]\n"
    ));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals,
        vec![Refused {
            refusal: Refusal::NotEnoughMemory {
                asked_mib: 20480,
                memory_mib: 16384
            },
            message: "the VFs asked for take 20 GiB of local memory, it has 16 GiB".to_owned(),
            at: Some(Location {
                line: 6,
                column: 26
            })
        }]
    );
}

#[test]
fn plan_local_memory_from_the_driver_wins_over_the_model_table() {
    // A Flex 170 with ECC on: its driver gives the VFs 16000 MiB, not the nominal 16 GiB.
    let state = flex(&[], Some(16000));
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"8x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].refusal,
        Refusal::TooMany {
            type_name: "2 GiB VF".to_owned(),
            asked: 8,
            max: 7
        }
    );
}

#[test]
fn plan_quota_on_a_gpu_without_quota_files_is_no_quotas() {
    let state = flex(&[], None);
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        (
            plan.gpus[0].refusals[0].refusal.clone(),
            plan.gpus[0].refusals[0].message.as_str(),
            plan.blocked()
        ),
        (
            Refusal::NoQuotas {
                vfs: 4,
                share_mib: 4096
            },
            "its driver sets no per-VF local-memory quotas (no drm/card*/iov), so each of 4 VFs \
             gets an equal share, 4 GiB: ask for 4x4GiB or give vfs = 4",
            true
        )
    );
}

#[test]
fn plan_equal_share_on_a_gpu_without_quota_files_is_a_vf_count() {
    let state = flex(&[], None);
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x4GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(plan.gpus[0].steps, vec![Step::Vfs { from: 0, to: 4 }]);
}

fn bound_vf0(state: &mut HostState) -> PciAddress {
    let vf0 = vf(FLEX, 0);
    state.inventory.gpus[0].vfs[0].driver = Some("vfio-pci".to_owned());
    vf0
}

const FLEX_ON_VFIO: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"vfio-pci\"\n";

#[test]
fn plan_quota_of_a_vf_on_vfio_pci_is_refused_naming_it() {
    let mut state = flex(&[4096, 4096, 4096, 4096], Some(16384));
    let vf0 = bound_vf0(&mut state);
    let desired = toml(&format!("{FLEX_ON_VFIO}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        (
            plan.gpus[0].refusals[0].refusal.clone(),
            plan.gpus[0].steps.clone(),
            plan.blocked()
        ),
        (
            Refusal::QuotaInUse {
                vf: vf0,
                by: "vfio-pci".to_owned(),
                found_mib: 4096,
                wanted_mib: 2048
            },
            Vec::new(),
            false
        )
    );
}

#[test]
fn plan_quota_of_a_vf_held_open_names_the_holder() {
    let mut state = flex(&[4096, 4096, 4096, 4096], Some(16384));
    let vf0 = bound_vf0(&mut state);
    state.holds.insert(
        VgpuHandle::Vf(vf0),
        crate::capacity::Hold {
            by: "process 4242 (qemu-system-x86)".to_owned(),
            frees: "stop the process".to_owned(),
        },
    );
    let desired = toml(&format!("{FLEX_ON_VFIO}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals[0].message,
        format!(
            "VF {vf0} has 4 GiB of local memory, not 2 GiB, but process 4242 (qemu-system-x86) \
             holds it: a quota changes only while no guest has the VF"
        )
    );
}

#[test]
fn plan_vf_given_back_from_vfio_pci_first_then_gets_its_quota() {
    let mut state = flex(&[4096, 4096, 4096, 4096], Some(16384));
    let vf0 = bound_vf0(&mut state);
    let desired = toml(&format!("{FLEX_ENTRY}sizes = \"4x2GiB\"\n"));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Destroy {
                id: VgpuHandle::Vf(vf0),
                type_id: crate::model::PLAIN_VF_TYPE.to_owned(),
                type_name: None
            },
            quota(0, Some(4096), 2048),
            quota(1, Some(4096), 2048),
            quota(2, Some(4096), 2048),
            quota(3, Some(4096), 2048)
        ]
    );
}
