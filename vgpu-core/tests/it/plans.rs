//! Plans carried out on the simulator: every profile, a fault half-way (the host is left as it
//! was), a second apply (no change), a guest holding a vGPU, vgpu-device-manager's format, and
//! bad input (nothing applied).

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::{Path, PathBuf};
use vgpu_testing::addr;

use tempfile::TempDir;
use uuid::Uuid;
use vgpu_core::{
    Error, ErrorKind, HostPaths, Manager, discover,
    manager::{ApplyOutcome, ApplyReport},
    model::VgpuHandle,
    plan::planner::plan,
    plan::{
        desired::{DesiredFile, Format},
        steps::{Plan, Step},
    },
    state::Start,
};
use vgpu_sim::SimHost;

/// A mounted profile, its state trees in a temporary directory.
struct Host {
    sim: SimHost,
    _state: TempDir,
    paths: HostPaths,
}

fn mount(profile: &str) -> Host {
    let sim = SimHost::mount_for_test(profile);
    let state = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(sim.root()).with_state_root(state.path());
    Host {
        sim,
        _state: state,
        paths,
    }
}

fn manager(host: &Host) -> Manager {
    Manager::new(&host.paths, "test")
}

fn plan_of(host: &Host, text: &str, config: Option<&str>) -> Plan {
    let file = DesiredFile::parse("host.toml", Format::HostToml, text).unwrap();
    let state = manager(host).host_state().unwrap();
    plan(&state, file.config(config).unwrap())
}

fn plan_file(host: &Host, path: &Path, config: Option<&str>) -> Plan {
    let file = vgpu_core::state::read_desired(path).unwrap();
    let state = manager(host).host_state().unwrap();
    plan(&state, file.config(config).unwrap())
}

fn apply(host: &Host, plan: &Plan) -> vgpu_core::Result<ApplyReport> {
    manager(host).apply(plan, None)
}

fn outcomes(report: &ApplyReport) -> Vec<(String, ApplyOutcome)> {
    report
        .gpus
        .iter()
        .map(|g| (g.gpu.to_string(), g.outcome))
        .collect()
}

/// `(gpu, type id, count)` of every vGPU type in use; plain VFs on vfio-pci as type `vf`.
fn in_use(host: &Host) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    for gpu in discover(&host.paths).unwrap().gpus {
        // A plain VF on vfio-pci is a vGPU of type `vf`, as the others are of theirs.
        for t in gpu.types.iter().filter(|t| t.in_use > 0) {
            out.push((gpu.address.to_string(), t.id.clone(), t.in_use));
        }
    }
    out
}

fn row(gpu: &str, type_id: &str, count: u32) -> (String, String, u32) {
    (gpu.to_owned(), type_id.to_owned(), count)
}

fn audit_lines(host: &Host) -> usize {
    std::fs::read_to_string(host.paths.var().join("log/vgpu/audit.jsonl"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

const ALL_12GIB: &str =
    "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"12GiB\"\n";

#[test]
fn apply_t4_legacy_fills_both_t4s() {
    let host = mount("t4-legacy");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"T4\"\nsizes = \"4x4GiB\"\n",
        None,
    );

    let report = apply(&host, &plan).unwrap();

    assert_eq!(
        (outcomes(&report).len(), in_use(&host)),
        (
            2,
            vec![
                row("0000:3b:00.0", "nvidia-232", 4),
                row("0000:d8:00.0", "nvidia-232", 4)
            ]
        )
    );
}

#[test]
fn apply_a40_vf_mdev_puts_one_vgpu_per_vf() {
    let host = mount("a40-vf-mdev");
    let plan = plan_of(&host, ALL_12GIB, None);

    apply(&host, &plan).unwrap();

    assert_eq!(in_use(&host), vec![row("0000:41:00.0", "nvidia-563", 4)]);
}

#[test]
fn apply_l40s_vendor_vfio_fills_both_cards() {
    let host = mount("l40s-vendor-vfio");
    let plan = plan_of(&host, ALL_12GIB, None);

    apply(&host, &plan).unwrap();

    assert_eq!(
        in_use(&host),
        vec![
            row("0000:41:00.0", "1153", 4),
            row("0000:c1:00.0", "1153", 4)
        ]
    );
}

#[test]
fn apply_gvtg_mixes_types() {
    let host = mount("gvtg");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\ntypes = { \"i915-GVTg_V5_4\" = 2, \"i915-GVTg_V5_8\" = 2 }\n",
        None,
    );

    apply(&host, &plan).unwrap();

    assert_eq!(
        in_use(&host),
        vec![
            row("0000:00:02.0", "i915-GVTg_V5_4", 2),
            row("0000:00:02.0", "i915-GVTg_V5_8", 2)
        ]
    );
}

#[test]
fn apply_flex_sriov_enables_vfs_and_binds_them() {
    let host = mount("flex-sriov");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nvendor = \"intel\"\nsizes = \"8x2GiB\"\n",
        None,
    );

    apply(&host, &plan).unwrap();

    let sriov = manager(&host).definitions().sriov().unwrap();
    assert_eq!(
        (
            in_use(&host),
            sriov.iter().map(|d| d.num_vfs).collect::<Vec<_>>()
        ),
        (vec![row("0000:4d:00.0", "vf", 8)], vec![8])
    );
}

#[test]
fn apply_mixed_example_reaches_every_interface() {
    let host = mount("mixed");
    let plan = plan_file(&host, &example("host.toml"), None);

    let report = apply(&host, &plan).unwrap();

    assert_eq!(
        (report.succeeded(), in_use(&host)),
        (
            true,
            vec![
                row("0000:00:02.0", "i915-GVTg_V5_4", 2),
                row("0000:3b:00.0", "nvidia-232", 2),
                row("0000:5e:00.0", "1153", 4),
                row("0001:03:00.0", "vf", 8)
            ]
        )
    );
}

#[test]
fn apply_large_fills_eight_cards() {
    let host = mount("large");
    let plan = plan_of(&host, ALL_12GIB, None);

    apply(&host, &plan).unwrap();

    assert_eq!(in_use(&host).iter().map(|r| r.2).sum::<u32>(), 32);
}

#[test]
fn apply_no_iommu_still_makes_mdevs() {
    let host = mount("no-iommu");
    let plan = plan_of(&host, ALL_12GIB.replace("12GiB", "16GiB").as_str(), None);

    apply(&host, &plan).unwrap();

    assert_eq!(in_use(&host), vec![row("0000:3b:00.0", "nvidia-234", 1)]);
}

#[test]
fn apply_twice_changes_nothing_the_second_time() {
    let host = mount("mixed");
    let first = plan_file(&host, &example("host.toml"), None);
    apply(&host, &first).unwrap();
    let lines = audit_lines(&host);
    let second = plan_file(&host, &example("host.toml"), None);

    let report = apply(&host, &second).unwrap();

    assert_eq!(
        (
            second.changes(),
            report
                .gpus
                .iter()
                .all(|g| g.outcome == ApplyOutcome::Unchanged),
            audit_lines(&host)
        ),
        (0, true, lines)
    );
}

#[test]
fn assert_before_differs_and_after_matches() {
    let host = mount("t4-legacy");
    let text =
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nsizes = \"2GiB\"\n";
    let before = plan_of(&host, text, None);
    apply(&host, &before).unwrap();

    let after = plan_of(&host, text, None);

    assert_eq!(
        (before.matches(), before.changes(), after.matches()),
        (false, 16, true)
    );
}

#[test]
fn apply_fault_half_way_leaves_the_host_as_it_was() {
    let host = mount("l40s-vendor-vfio");
    let manager = manager(&host);
    manager
        .create(addr("0000:41:00.0"), "L40S-24Q", None, Some(Start::Auto))
        .unwrap();
    manager
        .create(addr("0000:41:00.0"), "L40S-24Q", None, Some(Start::Auto))
        .unwrap();
    let vgpus_before = in_use(&host);
    let definitions_before = manager.definitions().vf_vgpus().unwrap();
    // What NVML would say the card supports: with two 24Q on it, its VFs list no 12Q.
    let mut state = manager.host_state().unwrap();
    state.supported_types.insert(
        "0000:41:00.0".parse().unwrap(),
        vec![vgpu_core::plan::capacity::KnownType {
            id: "1153".to_owned(),
            name: "NVIDIA L40S-12Q".to_owned(),
            framebuffer_mib: None,
            max_instances: None,
            source: vgpu_core::model::NameSource::Nvml,
        }],
    );
    let file = DesiredFile::parse(
        "host.toml",
        Format::HostToml,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:41:00.0\"\nsizes = \"4x12GiB\"\n",
    )
    .unwrap();
    let plan = plan(&state, file.config(None).unwrap());
    // The third new vGPU goes on the third VF: its type write fails, after two were destroyed
    // and two made.
    host.sim
        .fail_next(1, libc_eio(), "*/0000:41:00.6/nvidia/current_vgpu_type");

    let report = apply(&host, &plan).unwrap();

    assert_eq!(
        (
            report.gpus[0].outcome,
            report.gpus[0].kind,
            in_use(&host),
            manager.definitions().vf_vgpus().unwrap()
        ),
        (
            ApplyOutcome::Failed,
            Some(ErrorKind::HostFault),
            vgpus_before,
            definitions_before
        )
    );
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn apply_fault_half_way_restarts_the_same_mdevs() {
    let host = mount("t4-legacy");
    let manager = manager(&host);
    let made = manager
        .create(
            addr("0000:3b:00.0"),
            "T4-8Q",
            Some(Uuid::from_u128(1)),
            Some(Start::Manual),
        )
        .unwrap();
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:3b:00.0\"\nsizes = \"4x4GiB\"\n",
        None,
    );
    host.sim.fail_next(1, libc_eio(), "*nvidia-232/create");

    apply(&host, &plan).unwrap();

    let gpu = &discover(&host.paths).unwrap().gpus[0];
    assert_eq!(
        (
            gpu.vgpus
                .iter()
                .map(|v| (v.id, v.type_id.clone()))
                .collect::<Vec<_>>(),
            manager
                .definitions()
                .mdevs()
                .unwrap()
                .iter()
                .map(|d| (d.uuid, d.mdev_type.clone(), d.start))
                .collect::<Vec<_>>()
        ),
        (
            vec![(made.id, "nvidia-233".to_owned())],
            vec![(Uuid::from_u128(1), "nvidia-233".to_owned(), Start::Manual)]
        )
    );
}

#[test]
fn apply_skips_gpu_whose_vgpu_a_guest_holds_and_does_the_others() {
    let host = mount("t4-legacy");
    let held = manager(&host)
        .create(addr("0000:3b:00.0"), "T4-8Q", None, None)
        .unwrap();
    let VgpuHandle::Mdev(uuid) = held.id else {
        panic!("a T4 vGPU is a mediated device");
    };
    let group = std::fs::read_link(
        host.sim
            .root()
            .join(format!("sys/bus/mdev/devices/{uuid}/iommu_group")),
    )
    .unwrap();
    let node = format!("/dev/vfio/{}", group.file_name().unwrap().to_string_lossy());
    host.sim.hold(4242, "qemu-system-x86", &node).unwrap();
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"T4\"\nsizes = \"1x4GiB\"\n",
        None,
    );

    let report = apply(&host, &plan).unwrap();

    assert_eq!(
        (
            plan.gpus[0].refusals[0].message.clone(),
            outcomes(&report),
            in_use(&host)
        ),
        (
            format!(
                "{uuid} would be taken away, but process 4242 (qemu-system-x86) holds it: this GPU is left \
                 as it is (stop process 4242, or take it from the guest at once with --force)"
            ),
            vec![
                ("0000:3b:00.0".to_owned(), ApplyOutcome::Skipped),
                ("0000:d8:00.0".to_owned(), ApplyOutcome::Applied)
            ],
            vec![
                row("0000:3b:00.0", "nvidia-233", 1),
                row("0000:d8:00.0", "nvidia-232", 1)
            ]
        )
    );
}

#[test]
fn apply_device_manager_example_on_t4_legacy() {
    let host = mount("t4-legacy");
    let plan = plan_file(&host, &example("vgpu-device-manager.yaml"), Some("split"));

    apply(&host, &plan).unwrap();

    assert_eq!(
        in_use(&host),
        vec![
            row("0000:3b:00.0", "nvidia-232", 4),
            row("0000:d8:00.0", "nvidia-233", 2)
        ]
    );
}

#[test]
fn apply_device_manager_config_replaces_the_previous_one() {
    let host = mount("t4-legacy");
    let yaml = example("vgpu-device-manager.yaml");
    apply(&host, &plan_file(&host, &yaml, Some("split"))).unwrap();
    let plan = plan_file(&host, &yaml, Some("T4-1Q"));

    apply(&host, &plan).unwrap();

    assert_eq!(
        in_use(&host),
        vec![
            row("0000:3b:00.0", "nvidia-230", 16),
            row("0000:d8:00.0", "nvidia-230", 16)
        ]
    );
}

#[test]
fn apply_unknown_type_applies_nothing() {
    let host = mount("t4-legacy");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:3b:00.0\"\nsizes = \"1x4GiB\"\n[[configs.default.gpu]]\naddress = \"0000:d8:00.0\"\ntypes = { \"T4-99Q\" = 1 }\n",
        None,
    );

    let err = apply(&host, &plan).unwrap_err();

    assert_eq!(
        (err.kind(), err.to_string(), in_use(&host), audit_lines(&host)),
        (
            ErrorKind::BadInput,
            "the plan of config \"default\" cannot be applied: host.toml:8:11: 0000:d8:00.0: no vGPU type \"T4-99Q\"; it offers GRID T4-1B, GRID T4-2B, GRID T4-2B4, GRID T4-1A, GRID T4-2A, GRID T4-4A, GRID T4-8A, GRID T4-16A, GRID T4-1Q, GRID T4-2Q, GRID T4-4Q, GRID T4-8Q, GRID T4-16Q, GRID T4-1B4, GRID T4-4C, GRID T4-8C, GRID T4-16C".to_owned(),
            Vec::new(),
            0
        )
    );
}

#[test]
fn apply_unknown_gpu_address_applies_nothing() {
    let host = mount("t4-legacy");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\nmodel = \"T4\"\nsizes = \"1x4GiB\"\n[[configs.default.gpu]]\naddress = \"0000:99:00.0\"\nsizes = \"1x4GiB\"\n",
        None,
    );

    let err = apply(&host, &plan).unwrap_err();

    assert_eq!(
        (
            matches!(err, Error::PlanRefused { refused: 1, .. }),
            in_use(&host)
        ),
        (true, Vec::new())
    );
}

#[test]
fn apply_stale_plan_is_refused_for_that_gpu() {
    let host = mount("t4-legacy");
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:3b:00.0\"\nsizes = \"1x4GiB\"\n",
        None,
    );
    manager(&host)
        .create(addr("0000:3b:00.0"), "T4-4Q", None, None)
        .unwrap();

    let report = apply(&host, &plan).unwrap();

    assert_eq!(
        (report.gpus[0].kind, report.gpus[0].error.clone()),
        (
            Some(ErrorKind::Conflict),
            Some("GPU 0000:3b:00.0 changed since it was planned (1 vGPUs, planned with 0): plan again".to_owned())
        )
    );
}

#[test]
fn apply_plan_steps_are_in_destroy_then_create_order() {
    let host = mount("t4-legacy");
    manager(&host)
        .create(
            addr("0000:3b:00.0"),
            "T4-8Q",
            Some(Uuid::from_u128(3)),
            None,
        )
        .unwrap();

    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:3b:00.0\"\nsizes = \"1x4GiB\"\n",
        None,
    );

    assert_eq!(
        plan.gpus[0].steps,
        vec![
            Step::Destroy {
                id: VgpuHandle::Mdev(Uuid::from_u128(3)),
                type_id: "nvidia-233".to_owned(),
                type_name: Some("GRID T4-8Q".to_owned())
            },
            Step::Create {
                type_id: Some("nvidia-232".to_owned()),
                type_name: Some("GRID T4-4Q".to_owned()),
                start: Start::Auto,
                placement: None
            }
        ]
    );
}

#[test]
fn apply_nvidia_gpu_without_vfs_enables_them_then_creates_by_name() {
    let host = mount("l40s-vendor-vfio");
    manager(&host)
        .set_vfs(addr("0000:41:00.0"), 0, None, false)
        .unwrap();
    let plan = plan_of(
        &host,
        "version = 1\n[configs.default]\n[[configs.default.gpu]]\naddress = \"0000:41:00.0\"\nsizes = \"1x24GiB\"\n",
        None,
    );

    let report = apply(&host, &plan).unwrap();

    let sriov = manager(&host).definitions().sriov().unwrap();
    assert_eq!(
        (
            plan.gpus[0].steps.clone(),
            report.succeeded(),
            in_use(&host),
            sriov
                .iter()
                .map(|d| (d.pf.to_string(), d.num_vfs))
                .collect::<Vec<_>>()
        ),
        (
            vec![
                Step::Vfs { from: 0, to: 32 },
                Step::Create {
                    type_id: None,
                    type_name: Some("NVIDIA L40S-24Q".to_owned()),
                    start: Start::Auto,
                    placement: None
                }
            ],
            true,
            vec![row("0000:41:00.0", "1155", 1)],
            vec![("0000:41:00.0".to_owned(), 32)]
        )
    );
}
