//! Plans that set Intel SR-IOV VFs' local-memory quotas, carried out on the simulated Flex 170
//! (`drm/card0/iov/vf<M>/gt0/lmem_quota`): the values read back, a second apply, `assert`
//! before and after, a fault on the second VF's quota (undone), a VF a guest holds (skipped),
//! and a GPU whose driver has no quotas (refused).

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod common;

use common::{addr, audit, manager, paths, record};
use vgpu_core::{
    ApplyOutcome, ApplyReport, DesiredFile, ErrorKind, Format, Plan, Refusal, Step, plan,
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
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(manager(host).apply(plan, None))
        .unwrap()
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
    manager(&host).set_vfs(FLEX, 3, None, true).unwrap();
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
    manager(&host).set_vfs(FLEX, 4, None, true).unwrap();
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
    let file = DesiredFile::read(&example).unwrap();
    let state = manager(&host).host_state().unwrap();
    let plan = plan(&state, file.config(Some("desktops")).unwrap());

    let report = apply(&host, &plan);

    assert_eq!(
        (report.succeeded(), quotas(&host)),
        (true, vec![8 * GIB, 2 * GIB, 2 * GIB, 2 * GIB, 2 * GIB])
    );
}
