//! Plans that set Intel SR-IOV VFs' local-memory quotas, carried out on the simulated Flex 170
//! (`drm/card0/iov/vf<M>/gt0/lmem_quota`): the values read back, a second apply, `assert`
//! before and after, a fault on the second VF's quota (undone), a VF a guest holds (skipped),
//! and a GPU whose driver has no quotas (refused). Then the quotas across a reboot: recorded
//! in the SR-IOV definition, set again by `restore` before the VFs are bound to `vfio-pci`,
//! a definition without quotas, a fault on a quota write, a VF a guest already has.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use crate::common;

use std::collections::BTreeMap;

use crate::common::{addr, audit, manager, paths, reboot, record};
use vgpu_core::{
    ErrorKind,
    manager::{ApplyOutcome, ApplyReport, RestoreOutcome, RestoreQuota, RestoreReport},
    plan::planner::plan,
    plan::{
        desired::{DesiredFile, Format},
        steps::{Plan, Refusal, Step},
    },
    state::SriovDefinition,
};
use vgpu_sim::{Profile, SimHost};

const FLEX: &str = "0000:4d:00.0";
const GIB: u64 = 1 << 30;
/// `EIO`, as the simulator injects it.
const EIO: i32 = 5;

fn plan_of(host: &SimHost, text: &str) -> Plan {
    let file = DesiredFile::parse("host.toml", Format::HostToml, text).unwrap();
    let state = manager(host).host_state().unwrap();
    plan(&state, file.config(None).unwrap())
}

fn apply(host: &SimHost, plan: &Plan) -> ApplyReport {
    manager(host).apply(plan, None).unwrap()
}

fn flex_entry(driver: &str, sizes: &str) -> String {
    format!(
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"{driver}\"\nsizes = {sizes}\n"
    )
}

/// Every enabled VF's `lmem_quota` in bytes, read from sysfs, `vf1` first.
fn quotas(host: &SimHost) -> Vec<u64> {
    let iov = host.root().join("sys/class/drm/card0/iov");
    let mut out = Vec::new();
    for m in 1.. {
        let path = iov.join(format!("vf{m}/gt0/lmem_quota"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            break;
        };
        out.push(text.trim().parse().unwrap());
    }
    out
}

/// Each VF's driver, `virtfn0` first.
fn vf_drivers(host: &SimHost) -> Vec<Option<String>> {
    common::gpu(host, FLEX)
        .vfs
        .iter()
        .map(|v| v.driver.clone())
        .collect()
}

fn i915(count: usize) -> Vec<Option<String>> {
    vec![Some("i915".to_owned()); count]
}

#[test]
fn apply_vfs_below_the_equal_share_sets_each_quota_then_binds() {
    let host = SimHost::mount_for_test("flex-sriov");
    let plan = plan_of(&host, &flex_entry("vfio-pci", "\"4x2GiB\""));

    let report = apply(&host, &plan);

    assert_eq!(
        (report.succeeded(), quotas(&host), vf_drivers(&host)),
        (true, vec![2 * GIB; 4], vec![Some("vfio-pci".to_owned()); 4])
    );
}

#[test]
fn apply_mixed_sizes_sets_quotas_in_vf_order() {
    let host = SimHost::mount_for_test("flex-sriov");
    let plan = plan_of(
        &host,
        &flex_entry("default", "[\"8GiB\", \"4GiB\", \"4GiB\"]"),
    );

    let report = apply(&host, &plan);

    assert_eq!(
        (report.succeeded(), quotas(&host), vf_drivers(&host)),
        (true, vec![8 * GIB, 4 * GIB, 4 * GIB], i915(3))
    );
}

#[test]
fn apply_mixed_sizes_on_enabled_vfs_lowers_before_raising() {
    let host = SimHost::mount_for_test("flex-sriov");
    manager(&host).set_vfs(addr(FLEX), 3, None, true).unwrap();
    let plan = plan_of(
        &host,
        &flex_entry("default", "[\"8GiB\", \"4GiB\", \"4GiB\"]"),
    );

    let report = apply(&host, &plan);

    assert_eq!(
        (report.succeeded(), quotas(&host)),
        (true, vec![8 * GIB, 4 * GIB, 4 * GIB])
    );
}

#[test]
fn apply_quotas_twice_changes_nothing_the_second_time() {
    let host = SimHost::mount_for_test("flex-sriov");
    let text = flex_entry("vfio-pci", "\"4x2GiB\"");
    apply(&host, &plan_of(&host, &text));
    let records = audit(&paths(&host)).len();
    let second = plan_of(&host, &text);

    let report = apply(&host, &second);

    assert_eq!(
        (
            second.changes(),
            report.gpus[0].outcome,
            audit(&paths(&host)).len()
        ),
        (0, ApplyOutcome::Unchanged, records)
    );
}

#[test]
fn assert_before_lacks_quotas_and_after_matches() {
    let host = SimHost::mount_for_test("flex-sriov");
    let text = flex_entry("default", "\"4x2GiB\"");
    let before = plan_of(&host, &text);
    apply(&host, &before);

    let after = plan_of(&host, &text);

    let quota_steps = before.gpus[0]
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Quota { .. }))
        .count();
    assert_eq!(
        (before.matches(), quota_steps, after.matches()),
        (false, 4, true)
    );
}

#[test]
fn plan_wrong_quota_is_one_step_naming_the_vf_wanted_and_found() {
    let host = SimHost::mount_for_test("flex-sriov");
    apply(&host, &plan_of(&host, &flex_entry("default", "\"4x2GiB\"")));

    let plan = plan_of(
        &host,
        &flex_entry("default", "[\"2GiB\", \"4GiB\", \"2GiB\", \"2GiB\"]"),
    );

    assert_eq!(
        plan.gpus[0].steps,
        vec![Step::Quota {
            vf: 2,
            address: Some(addr("0000:4d:00.2")),
            from_mib: Some(2048),
            to_mib: 4096
        }]
    );
}

#[test]
fn apply_fault_on_the_second_quota_puts_the_first_back() {
    let host = SimHost::mount_for_test("flex-sriov");
    manager(&host).set_vfs(addr(FLEX), 4, None, true).unwrap();
    let plan = plan_of(&host, &flex_entry("default", "\"4x2GiB\""));
    host.fail_next(1, EIO, "*/iov/vf2/gt0/lmem_quota");

    let report = apply(&host, &plan);

    let undone = audit(&paths(&host))
        .into_iter()
        .filter(|r| r.0 == "undo-lmem-quota")
        .collect::<Vec<_>>();
    assert_eq!(
        (
            report.gpus[0].outcome,
            report.gpus[0].kind,
            quotas(&host),
            vf_drivers(&host),
            undone
        ),
        (
            ApplyOutcome::Failed,
            Some(ErrorKind::HostFault),
            vec![4 * GIB; 4],
            i915(4),
            vec![record("undo-lmem-quota", "0000:4d:00.1", "ok")]
        )
    );
}

#[test]
fn apply_fault_on_the_second_quota_after_enabling_puts_the_vf_count_back() {
    let host = SimHost::mount_for_test("flex-sriov");
    let plan = plan_of(&host, &flex_entry("vfio-pci", "\"4x2GiB\""));
    host.fail_next(1, EIO, "*/iov/vf2/gt0/lmem_quota");

    let report = apply(&host, &plan);

    assert_eq!(
        (
            report.gpus[0].outcome,
            common::gpu(&host, FLEX).sriov.map(|s| s.num_vfs),
            manager(&host).definitions().sriov().unwrap()
        ),
        (ApplyOutcome::Failed, Some(0), Vec::new())
    );
}

#[test]
fn apply_skips_gpu_whose_vf_on_vfio_pci_would_change_quota() {
    let host = SimHost::mount_for_test("flex-sriov");
    apply(
        &host,
        &plan_of(&host, &flex_entry("vfio-pci", "\"4x4GiB\"")),
    );
    let plan = plan_of(&host, &flex_entry("vfio-pci", "\"4x2GiB\""));

    let report = apply(&host, &plan);

    assert_eq!(
        (
            plan.gpus[0].refusals[0].refusal.clone(),
            report.gpus[0].outcome,
            quotas(&host)
        ),
        (
            Refusal::QuotaInUse {
                vf: addr("0000:4d:00.1"),
                by: "vfio-pci".to_owned(),
                found_mib: 4096,
                wanted_mib: 2048
            },
            ApplyOutcome::Skipped,
            vec![4 * GIB; 4]
        )
    );
}

#[test]
fn plan_quota_on_a_flex_without_quota_files_is_refused() {
    let mut profile = Profile::builtin("flex-sriov").unwrap();
    for device in &mut profile.devices {
        device.local_memory_mib = None;
    }
    let host = SimHost::mount_profile_for_test(profile);

    let plan = plan_of(&host, &flex_entry("default", "\"4x2GiB\""));

    assert_eq!(
        (plan.gpus[0].refusals[0].refusal.clone(), plan.blocked()),
        (
            Refusal::NoQuotas {
                vfs: 4,
                share_mib: 4096
            },
            true
        )
    );
}

#[test]
fn apply_mixed_desktops_example_gives_the_flex_one_large_vf() {
    let host = SimHost::mount_for_test("mixed");
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/host.toml");
    let file = vgpu_core::state::read_desired(&example).unwrap();
    let state = manager(&host).host_state().unwrap();
    let plan = plan(&state, file.config(Some("desktops")).unwrap());

    let report = apply(&host, &plan);

    assert_eq!(
        (report.succeeded(), quotas(&host)),
        (true, vec![8 * GIB, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB])
    );
}

// ---- across a reboot ----

/// The Flex 170 as one 8 GiB VF and four 2 GiB ones for guests, kept at boot.
const DESKTOPS: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"vfio-pci\"\nsizes = [\"8GiB\", \"4x2GiB\"]\n";
/// The driver's equal share of the Flex 170's 16 GiB among 5 VFs, in bytes.
const SHARE_OF_5: u64 = 16 * GIB / 5;
const VF1: &str = "0000:4d:00.1";
const IN_USE_TEXT: &str = "0000:4d:00.1 is in use: it is bound to vfio-pci";

fn vfio(count: usize) -> Vec<Option<String>> {
    vec![Some("vfio-pci".to_owned()); count]
}

/// The Flex 170 applied as `DESKTOPS`, then rebooted: VFs off, the definitions kept.
fn desktops_rebooted() -> SimHost {
    let host = SimHost::mount_for_test("flex-sriov");
    assert!(apply(&host, &plan_of(&host, DESKTOPS)).succeeded());
    reboot(host)
}

/// `(action, device, outcome, quota)` of every restore step.
fn steps(report: &RestoreReport) -> Vec<(&str, String, RestoreOutcome, Option<RestoreQuota>)> {
    report
        .steps
        .iter()
        .map(|s| (s.action, s.device.clone(), s.outcome, s.quota))
        .collect()
}

fn quota_step(
    vf: u32,
    outcome: RestoreOutcome,
    to_mib: u64,
) -> (&'static str, String, RestoreOutcome, Option<RestoreQuota>) {
    (
        "quota",
        format!("0000:4d:00.{vf}"),
        outcome,
        Some(RestoreQuota {
            vf,
            from_mib: Some(SHARE_OF_5 >> 20),
            to_mib,
        }),
    )
}

/// `(device, outcome, error)` of the steps named `action`.
fn outcomes(report: &RestoreReport, action: &str) -> Vec<(String, RestoreOutcome, Option<String>)> {
    report
        .steps
        .iter()
        .filter(|s| s.action == action)
        .map(|s| (s.device.clone(), s.outcome, s.error.clone()))
        .collect()
}

#[test]
fn apply_quota_plan_records_each_quota_in_the_sriov_definition() {
    let host = SimHost::mount_for_test("flex-sriov");

    apply(&host, &plan_of(&host, DESKTOPS));

    assert_eq!(
        manager(&host).definitions().sriov().unwrap(),
        vec![SriovDefinition {
            pf: addr(FLEX),
            num_vfs: 5,
            drivers_autoprobe: None,
            lmem_quota_mib: BTreeMap::from([(1, 8192), (2, 2048), (3, 2048), (4, 2048), (5, 2048)]),
        }]
    );
}

#[test]
fn apply_fault_on_a_quota_puts_the_sriov_definition_back() {
    let host = SimHost::mount_for_test("flex-sriov");
    manager(&host).set_vfs(addr(FLEX), 4, None, true).unwrap();
    let before = manager(&host).definitions().sriov().unwrap();
    host.fail_next(1, EIO, "*/iov/vf2/gt0/lmem_quota");

    apply(&host, &plan_of(&host, &flex_entry("default", "\"4x2GiB\"")));

    assert_eq!(manager(&host).definitions().sriov().unwrap(), before);
}

#[test]
fn restore_after_reboot_gives_each_vf_its_quota_then_binds_it() {
    let host = desktops_rebooted();

    let report = manager(&host).restore().unwrap();

    assert_eq!(
        (report.failed(), quotas(&host), vf_drivers(&host)),
        (
            0,
            vec![8 * GIB, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB],
            vfio(5)
        )
    );
}

#[test]
fn restore_after_reboot_then_plan_has_no_changes() {
    let host = desktops_rebooted();
    manager(&host).restore().unwrap();

    let plan = plan_of(&host, DESKTOPS);

    assert_eq!((plan.changes(), plan.matches()), (0, true));
}

#[test]
fn restore_after_reboot_lowers_quotas_before_raising_and_before_binding() {
    let host = desktops_rebooted();

    let report = manager(&host).restore().unwrap();

    let created = RestoreOutcome::Created;
    let mut expected = vec![("sriov", FLEX.to_owned(), created, None)];
    expected.extend((2..=5).map(|vf| quota_step(vf, created, 2048)));
    expected.push(quota_step(1, created, 8192));
    expected.extend((1..=5).map(|vf| ("bind", format!("0000:4d:00.{vf}"), created, None)));
    assert_eq!(steps(&report), expected);
}

#[test]
fn restore_twice_leaves_quotas_unchanged_the_second_time() {
    let host = desktops_rebooted();
    manager(&host).restore().unwrap();

    let second = manager(&host).restore().unwrap();

    let quota_outcomes: Vec<RestoreOutcome> = second
        .steps
        .iter()
        .filter(|s| s.action == "quota")
        .map(|s| s.outcome)
        .collect();
    assert_eq!(
        (quota_outcomes, quotas(&host)),
        (
            vec![RestoreOutcome::Unchanged; 5],
            vec![8 * GIB, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB]
        )
    );
}

#[test]
fn restore_audits_each_quota_written() {
    let host = desktops_rebooted();

    manager(&host).restore().unwrap();

    let written: Vec<_> = audit(&paths(&host))
        .into_iter()
        .filter(|r| r.0 == "lmem-quota")
        .collect();
    let vf = |m: u32| record("lmem-quota", &format!("0000:4d:00.{m}"), "ok");
    // The apply before the reboot wrote them in the same order.
    let once = [vf(2), vf(3), vf(4), vf(5), vf(1)];
    assert_eq!(written, [once.clone(), once].concat());
}

#[test]
fn restore_of_a_definition_without_quotas_gives_the_equal_share() {
    let host = SimHost::mount_for_test("flex-sriov");
    let file = paths(&host).etc().join(format!("vgpu/sriov/{FLEX}.json"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        "{\n  \"version\": 1,\n  \"num_vfs\": 4,\n  \"drivers_autoprobe\": null\n}\n",
    )
    .unwrap();

    let report = manager(&host).restore().unwrap();

    assert_eq!(
        (steps(&report), quotas(&host), vf_drivers(&host)),
        (
            vec![("sriov", FLEX.to_owned(), RestoreOutcome::Created, None)],
            vec![4 * GIB; 4],
            i915(4)
        )
    );
}

#[test]
fn restore_fault_on_a_quota_fails_that_vf_and_leaves_it_off_vfio_pci() {
    let host = desktops_rebooted();
    host.fail_next(1, EIO, "*/iov/vf1/gt0/lmem_quota");

    let report = manager(&host).restore().unwrap();

    let mut drivers = i915(1);
    drivers.extend(vfio(4));
    assert_eq!(
        (
            report.failed(),
            report
                .steps
                .iter()
                .find(|s| s.device == VF1)
                .map(|s| s.kind),
            outcomes(&report, "bind")[0].clone(),
            quotas(&host),
            vf_drivers(&host)
        ),
        (
            2,
            Some(Some(ErrorKind::HostFault)),
            (
                VF1.to_owned(),
                RestoreOutcome::Failed,
                Some(format!(
                    "{VF1} is defined as VF 1 with 8 GiB of local memory but holds 3276 MiB"
                ))
            ),
            vec![SHARE_OF_5, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB],
            drivers
        )
    );
}

/// After the reboot something (a udev rule, an operator) enabled the VFs and gave VF 1 to
/// vfio-pci before `restore` ran.
fn desktops_rebooted_with_vf1_on_vfio_pci() -> SimHost {
    let host = desktops_rebooted();
    let manager = manager(&host);
    manager.set_vfs(addr(FLEX), 5, None, false).unwrap();
    manager.bind(addr(VF1), "vfio-pci", None, false).unwrap();
    host
}

#[test]
fn restore_vf_on_vfio_pci_is_not_requotaed_and_the_rest_are() {
    let host = desktops_rebooted_with_vf1_on_vfio_pci();

    let report = manager(&host).restore().unwrap();

    let quota_of_vf1 = outcomes(&report, "quota")
        .into_iter()
        .find(|(device, ..)| device == VF1);
    assert_eq!(
        (
            quota_of_vf1,
            outcomes(&report, "bind")[0].1,
            quotas(&host),
            vf_drivers(&host)
        ),
        (
            Some((
                VF1.to_owned(),
                RestoreOutcome::Failed,
                Some(IN_USE_TEXT.to_owned())
            )),
            RestoreOutcome::Failed,
            vec![SHARE_OF_5, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB],
            vfio(5)
        )
    );
}

#[test]
fn restore_vf_held_open_is_not_requotaed() {
    let host = desktops_rebooted_with_vf1_on_vfio_pci();
    let group = std::fs::read_link(
        host.root()
            .join(format!("sys/bus/pci/devices/{VF1}/iommu_group")),
    )
    .unwrap();
    let node = format!("/dev/vfio/{}", group.file_name().unwrap().to_string_lossy());
    host.hold(4242, "qemu-system-x86", &node).unwrap();

    let report = manager(&host).restore().unwrap();

    let quota_of_vf1 = report
        .steps
        .iter()
        .find(|s| s.action == "quota" && s.device == VF1)
        .map(|s| (s.outcome, s.kind, s.error.clone()));
    assert_eq!(
        (quota_of_vf1, quotas(&host)[0]),
        (
            Some((
                RestoreOutcome::Failed,
                Some(ErrorKind::Busy),
                Some(format!(
                    "{VF1} is open by process 4242 (qemu-system-x86) through {node}"
                ))
            )),
            SHARE_OF_5
        )
    );
}

#[test]
fn set_vfs_defining_the_same_count_keeps_the_recorded_quotas() {
    let host = SimHost::mount_for_test("flex-sriov");
    apply(&host, &plan_of(&host, DESKTOPS));
    let before = manager(&host).definitions().sriov().unwrap();

    manager(&host).set_vfs(addr(FLEX), 5, None, true).unwrap();

    assert_eq!(manager(&host).definitions().sriov().unwrap(), before);
}

#[test]
fn set_vfs_defining_another_count_drops_the_recorded_quotas() {
    let host = SimHost::mount_for_test("flex-sriov");
    apply(
        &host,
        &plan_of(&host, &flex_entry("default", "[\"8GiB\", \"4x2GiB\"]")),
    );

    manager(&host).set_vfs(addr(FLEX), 4, None, true).unwrap();

    assert_eq!(
        (manager(&host).definitions().sriov().unwrap(), quotas(&host)),
        (
            vec![SriovDefinition {
                pf: addr(FLEX),
                num_vfs: 4,
                drivers_autoprobe: None,
                lmem_quota_mib: BTreeMap::new(),
            }],
            vec![4 * GIB; 4]
        )
    );
}
