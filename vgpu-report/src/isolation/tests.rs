//! One test per rule, on in-memory GPUs and check reports.

use uuid::Uuid;

use super::*;
use crate::model::checks::{Check, DeviceIsolation, GroupMember, Status as CheckStatus};
use crate::model::{Gpu, MigBacking, Vgpu, VgpuHandle};
use vgpu_plan::testing::fleet::{Model, enable_vfs, gpu};

/// The PCI address `text`; a test's own text, so a bad one is the test's mistake.
fn addr(text: &str) -> crate::model::pci::PciAddress {
    text.parse().expect("a PCI address")
}

const T4: &str = "0000:3b:00.0";
const L40S: &str = "0000:5e:00.0";
const FLEX: &str = "0001:03:00.0";

fn host_check(id: &'static str, status: CheckStatus) -> Check {
    Check {
        id,
        status,
        summary: format!("{id} is {status}"),
        remedy: None,
    }
}

/// Host checks with interrupt remapping as given and the rest passing.
fn checks(remapping: CheckStatus, devices: Vec<DeviceIsolation>) -> CheckReport {
    CheckReport {
        checks: vec![
            host_check("iommu-enabled", CheckStatus::Pass),
            host_check("interrupt-remapping", remapping),
            host_check("vfio", CheckStatus::Pass),
        ],
        devices,
    }
}

fn alone(address: &str, group: u32) -> DeviceIsolation {
    DeviceIsolation {
        address: addr(address),
        iommu_group: Some(group),
        isolated: true,
        blockers: Vec::new(),
        companions: Vec::new(),
        problems: Vec::new(),
        ready: true,
    }
}

/// Every function of `gpus` alone in a group of its own.
fn isolated(gpus: &[&Gpu]) -> Vec<DeviceIsolation> {
    gpus.iter()
        .flat_map(|g| std::iter::once(g.address).chain(g.vfs.iter().map(|v| v.address)))
        .zip(10..)
        .map(|(a, group)| alone(&a.to_string(), group))
        .collect()
}

fn nvml(address: &str, facts: NvmlFacts) -> NvmlHostFacts {
    NvmlHostFacts {
        gpus: BTreeMap::from([(addr(address), facts)]),
        missing: "NVML is not loaded".to_owned(),
        driver_params: None,
    }
}

fn no_nvml() -> NvmlHostFacts {
    NvmlHostFacts {
        gpus: BTreeMap::new(),
        missing: "NVML is not loaded".to_owned(),
        driver_params: None,
    }
}

fn known(scheduler: &str, cc: bool) -> NvmlFacts {
    NvmlFacts {
        mig_enabled: Ok(false),
        scheduler: Ok(scheduler.to_owned()),
        timeslice: Ok("default".to_owned()),
        ecc_enabled: Ok(true),
        confidential_computing: Ok(cc),
    }
}

fn report_of(gpus: Vec<Gpu>, checks: &CheckReport, nvml: &NvmlHostFacts) -> IsolationReport {
    let inventory = Inventory {
        gpus,
        warnings: Vec::new(),
    };
    isolation_report(&inventory, checks, nvml)
}

/// The assessment of `dimension` for `kind` on the report's first GPU.
fn assessment(report: &IsolationReport, kind: DeviceKind, dimension: Dimension) -> Assessment {
    report.gpus[0]
        .kinds
        .iter()
        .find(|k| k.kind == kind)
        .and_then(|k| k.dimensions.iter().find(|d| d.dimension == dimension))
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} {dimension} in {report:?}"))
}

fn status(report: &IsolationReport, kind: DeviceKind, dimension: Dimension) -> Status {
    assessment(report, kind, dimension).status
}

fn idle_t4() -> Gpu {
    gpu(Model::T4, addr(T4), Some(0))
}

fn t4_report(remapping: CheckStatus, nvml: &NvmlHostFacts) -> IsolationReport {
    let t4 = idle_t4();
    let checks = checks(remapping, isolated(&[&t4]));
    report_of(vec![t4], &checks, nvml)
}

fn kinds_of(gpu: Gpu) -> Vec<DeviceKind> {
    let checks = checks(CheckStatus::Pass, isolated(&[&gpu]));
    report_of(vec![gpu], &checks, &no_nvml()).gpus[0]
        .kinds
        .iter()
        .map(|k| k.kind)
        .collect()
}

#[test]
fn kinds_idle_t4_gives_passthrough_and_time_sliced() {
    assert_eq!(
        kinds_of(idle_t4()),
        vec![DeviceKind::Passthrough, DeviceKind::TimeSlicedVgpu]
    );
}

#[test]
fn kinds_t4_with_a_vgpu_gives_time_sliced_only() {
    let mut t4 = idle_t4();
    t4.vgpus.push(Vgpu {
        placement: None,
        id: VgpuHandle::Mdev(Uuid::from_u128(1)),
        type_id: t4.types[0].id.clone(),
        parent: t4.address,
    });
    assert_eq!(kinds_of(t4), vec![DeviceKind::TimeSlicedVgpu]);
}

#[test]
fn kinds_l40s_with_vfs_on_gives_time_sliced_only() {
    assert_eq!(
        kinds_of(gpu(Model::L40s, addr(L40S), None)),
        vec![DeviceKind::TimeSlicedVgpu]
    );
}

#[test]
fn kinds_flex_gives_passthrough_with_vfs_off_and_plain_vfs_with_vfs_on() {
    let off = gpu(Model::Flex170, addr(FLEX), None);
    let mut on = off.clone();
    enable_vfs(&mut on, 2);
    assert_eq!(
        (kinds_of(off), kinds_of(on)),
        (vec![DeviceKind::Passthrough], vec![DeviceKind::PlainVf])
    );
}

#[test]
fn kinds_mig_backed_type_gives_mig_vgpu() {
    let mut l40s = gpu(Model::L40s, addr(L40S), None);
    let mut mig_type = l40s.types[0].clone();
    mig_type.id = "1201".to_owned();
    mig_type.name = Some("NVIDIA A100-1-5C".to_owned());
    mig_type.mig = Some(one_slice());
    l40s.types = vec![mig_type];
    assert_eq!(kinds_of(l40s), vec![DeviceKind::MigVgpu]);
}

#[test]
fn passthrough_without_interrupt_remapping_memory_and_fault_not_provided() {
    let report = t4_report(CheckStatus::Fail, &no_nvml());
    assert_eq!(
        [Dimension::Memory, Dimension::Fault].map(|d| status(&report, DeviceKind::Passthrough, d)),
        [Status::NotProvided, Status::NotProvided]
    );
}

#[test]
fn passthrough_without_interrupt_remapping_says_interrupts_can_be_forged() {
    let report = t4_report(CheckStatus::Fail, &no_nvml());
    let memory = assessment(&report, DeviceKind::Passthrough, Dimension::Memory);
    assert_eq!(
        memory.residual_risk,
        "Interrupt remapping is not confirmed (interrupt-remapping is fail): a guest can forge \
         interrupts (MSI writes) to the host. The GPU's memory keeps what a guest left in it \
         until the GPU is reset or cleared before the next tenant."
    );
}

#[test]
fn passthrough_with_every_check_passing_provides_memory_on_named_facts() {
    let report = t4_report(CheckStatus::Pass, &no_nvml());
    let memory = assessment(&report, DeviceKind::Passthrough, Dimension::Memory);
    let facts: Vec<(&str, Option<&str>, Source)> = memory
        .facts
        .iter()
        .map(|f| (f.name, f.value.as_deref(), f.source))
        .collect();
    assert_eq!(
        (memory.status, facts),
        (
            Status::Provided,
            vec![
                ("iommu-enabled", Some("pass"), Source::Check),
                ("interrupt-remapping", Some("pass"), Source::Check),
                ("iommu-group", Some("isolated"), Source::Check),
            ]
        )
    );
}

#[test]
fn passthrough_sharing_its_group_names_the_exposed_neighbour() {
    let t4 = idle_t4();
    let mut device = alone(T4, 31);
    device.isolated = false;
    device.blockers.push(GroupMember {
        address: addr("0000:3b:00.1"),
        driver: Some("snd_hda_intel".to_owned()),
        class: Some(0x040300),
    });
    let report = report_of(
        vec![t4],
        &checks(CheckStatus::Pass, vec![device]),
        &no_nvml(),
    );
    let memory = assessment(&report, DeviceKind::Passthrough, Dimension::Memory);
    let group = memory.facts.iter().find(|f| f.name == "iommu-group");
    assert_eq!(
        (memory.status, group.and_then(|g| g.detail.clone())),
        (
            Status::NotProvided,
            Some("0000:3b:00.0 shares group 31 with 0000:3b:00.1 (snd_hda_intel)".to_owned())
        )
    );
}

#[test]
fn passthrough_group_that_could_not_be_read_is_unknown() {
    let t4 = idle_t4();
    let mut device = alone(T4, 31);
    device.isolated = false;
    device
        .problems
        .push("cannot read sys/kernel/iommu_groups/31/devices: EIO".to_owned());
    let report = report_of(
        vec![t4],
        &checks(CheckStatus::Pass, vec![device]),
        &no_nvml(),
    );
    assert_eq!(
        status(&report, DeviceKind::Passthrough, Dimension::Memory),
        Status::Unknown
    );
}

#[test]
fn time_sliced_performance_and_fault_are_shared() {
    let report = t4_report(CheckStatus::Pass, &nvml(T4, known("equal-share", false)));
    let fault = assessment(&report, DeviceKind::TimeSlicedVgpu, Dimension::Fault);
    assert_eq!(
        (
            status(&report, DeviceKind::TimeSlicedVgpu, Dimension::Performance),
            fault.status,
            fault.residual_risk
        ),
        (
            Status::NotProvided,
            Status::NotProvided,
            "Time-sliced vGPUs share one GPU's faults: a hang, an uncorrectable error or a reset \
             of the GPU stops every vGPU on it. ECC is on: memory errors are corrected or reported."
                .to_owned()
        )
    );
}

#[test]
fn time_sliced_without_nvml_compute_and_cryptographic_are_unknown() {
    let report = t4_report(CheckStatus::Pass, &no_nvml());
    assert_eq!(
        [Dimension::Compute, Dimension::Cryptographic].map(|d| status(
            &report,
            DeviceKind::TimeSlicedVgpu,
            d
        )),
        [Status::Unknown, Status::Unknown]
    );
}

#[test]
fn time_sliced_unknown_scheduler_names_nvml_reason() {
    let report = t4_report(CheckStatus::Pass, &no_nvml());
    let compute = assessment(&report, DeviceKind::TimeSlicedVgpu, Dimension::Compute);
    let scheduler = compute.facts.iter().find(|f| f.name == "vgpu-scheduler");
    assert_eq!(
        scheduler.map(|f| (f.value.clone(), f.source, f.detail.clone())),
        Some((None, Source::Nvml, Some("NVML is not loaded".to_owned())))
    );
}

#[test]
fn time_sliced_fixed_share_makes_compute_and_performance_partial() {
    let report = t4_report(CheckStatus::Pass, &nvml(T4, known("fixed-share", false)));
    assert_eq!(
        [Dimension::Compute, Dimension::Performance].map(|d| status(
            &report,
            DeviceKind::TimeSlicedVgpu,
            d
        )),
        [Status::Partial, Status::Partial]
    );
}

#[test]
fn time_sliced_best_effort_compute_not_provided() {
    let report = t4_report(CheckStatus::Pass, &nvml(T4, known("best-effort", false)));
    assert_eq!(
        status(&report, DeviceKind::TimeSlicedVgpu, Dimension::Compute),
        Status::NotProvided
    );
}

#[test]
fn time_sliced_on_the_pf_memory_is_partial() {
    let report = t4_report(CheckStatus::Pass, &no_nvml());
    assert_eq!(
        status(&report, DeviceKind::TimeSlicedVgpu, Dimension::Memory),
        Status::Partial
    );
}

#[test]
fn time_sliced_on_isolated_vfs_memory_is_provided() {
    let l40s = gpu(Model::L40s, addr(L40S), None);
    let checks = checks(CheckStatus::Pass, isolated(&[&l40s]));
    let report = report_of(vec![l40s], &checks, &no_nvml());
    assert_eq!(
        status(&report, DeviceKind::TimeSlicedVgpu, Dimension::Memory),
        Status::Provided
    );
}

#[test]
fn cryptographic_follows_confidential_computing_mode() {
    let on = t4_report(CheckStatus::Pass, &nvml(T4, known("equal-share", true)));
    let off = t4_report(CheckStatus::Pass, &nvml(T4, known("equal-share", false)));
    assert_eq!(
        (
            status(&on, DeviceKind::Passthrough, Dimension::Cryptographic),
            status(&off, DeviceKind::Passthrough, Dimension::Cryptographic)
        ),
        (Status::Provided, Status::NotProvided)
    );
}

#[test]
fn cryptographic_off_says_the_administrator_can_read_data_in_use() {
    let off = t4_report(CheckStatus::Pass, &nvml(T4, known("equal-share", false)));
    assert_eq!(
        assessment(&off, DeviceKind::TimeSlicedVgpu, Dimension::Cryptographic).residual_risk,
        "The host administrator can read data in use: the GPU does not run in \
         confidential-computing mode."
    );
}

#[test]
fn cryptographic_of_a_gpu_nvml_does_not_report_is_unknown() {
    let flex = gpu(Model::Flex170, addr(FLEX), None);
    let checks = checks(CheckStatus::Pass, isolated(&[&flex]));
    let report = report_of(vec![flex], &checks, &nvml(T4, known("equal-share", true)));
    let crypto = assessment(&report, DeviceKind::Passthrough, Dimension::Cryptographic);
    assert_eq!(
        (crypto.status, crypto.facts[0].detail.clone()),
        (
            Status::Unknown,
            Some("not an NVIDIA GPU: NVML does not report it".to_owned())
        )
    );
}

fn one_slice() -> MigBacking {
    MigBacking {
        slices: 1,
        gpu_instance_profile: "1g.5gb".to_owned(),
    }
}

fn mig_report(mig_enabled: Result<bool, String>) -> IsolationReport {
    let mut a100 = gpu(Model::L40s, addr(L40S), None);
    let mut mig_type = a100.types[0].clone();
    mig_type.name = Some("NVIDIA A100-1-5C".to_owned());
    mig_type.mig = Some(one_slice());
    a100.types = vec![mig_type];
    let checks = checks(CheckStatus::Pass, isolated(&[&a100]));
    let facts = NvmlFacts {
        mig_enabled,
        ..known("equal-share", false)
    };
    report_of(vec![a100], &checks, &nvml(L40S, facts))
}

#[test]
fn mig_mode_on_provides_memory_and_compute() {
    let report = mig_report(Ok(true));
    assert_eq!(
        [Dimension::Memory, Dimension::Compute, Dimension::Fault].map(|d| status(
            &report,
            DeviceKind::MigVgpu,
            d
        )),
        [Status::Provided, Status::Provided, Status::Partial]
    );
}

#[test]
fn mig_mode_unknown_makes_memory_and_compute_unknown() {
    let report = mig_report(Err("nvmlDeviceGetMigMode: not supported".to_owned()));
    assert_eq!(
        [Dimension::Memory, Dimension::Compute].map(|d| status(&report, DeviceKind::MigVgpu, d)),
        [Status::Unknown, Status::Unknown]
    );
}

fn flex_with_vfs(quota: Option<u64>) -> IsolationReport {
    let mut flex = gpu(Model::Flex170, addr(FLEX), None);
    enable_vfs(&mut flex, 2);
    for vf in &mut flex.vfs {
        vf.memory_mib = quota;
    }
    let checks = checks(CheckStatus::Pass, isolated(&[&flex]));
    report_of(vec![flex], &checks, &no_nvml())
}

#[test]
fn plain_vf_with_memory_quota_provides_memory() {
    let report = flex_with_vfs(Some(8192));
    let memory = assessment(&report, DeviceKind::PlainVf, Dimension::Memory);
    let quota = memory.facts.iter().find(|f| f.name == "vf-memory-quota");
    assert_eq!(
        (memory.status, quota.and_then(|q| q.value.clone())),
        (Status::Provided, Some("8192 MiB".to_owned()))
    );
}

#[test]
fn plain_vf_without_memory_quota_memory_is_partial() {
    assert_eq!(
        status(&flex_with_vfs(None), DeviceKind::PlainVf, Dimension::Memory),
        Status::Partial
    );
}

#[test]
fn plain_vf_performance_is_shared_and_compute_unknown() {
    let report = flex_with_vfs(Some(8192));
    assert_eq!(
        [Dimension::Performance, Dimension::Compute].map(|d| status(
            &report,
            DeviceKind::PlainVf,
            d
        )),
        [Status::NotProvided, Status::Unknown]
    );
}

#[test]
fn report_every_kind_has_the_eight_dimensions_in_order() {
    let report = t4_report(CheckStatus::Pass, &no_nvml());
    let dimensions: Vec<Vec<Dimension>> = report.gpus[0]
        .kinds
        .iter()
        .map(|k| k.dimensions.iter().map(|d| d.dimension).collect())
        .collect();
    assert_eq!(
        dimensions,
        vec![Dimension::ALL.to_vec(), Dimension::ALL.to_vec()]
    );
}

#[test]
fn worse_ranks_not_provided_over_unknown_over_partial() {
    assert_eq!(
        [
            rules_worse(Status::Partial, Status::Unknown),
            rules_worse(Status::NotProvided, Status::Unknown),
            rules_worse(Status::Provided, Status::Partial),
        ],
        [Status::Unknown, Status::NotProvided, Status::Partial]
    );
}

fn rules_worse(a: Status, b: Status) -> Status {
    super::rules::worse(a, b)
}

#[test]
fn nvml_facts_of_a_gpu_read_mode_scheduler_ecc_and_cc() {
    use crate::model::nvml::{
        ArrMode, EccMode, Fact as Nv, MigMode, SchedulerPolicy, SchedulerState,
    };
    let mut gpu = crate::telemetry::tests::nvml_gpu(L40S, Vec::new());
    gpu.mig_mode = Nv::Value(MigMode {
        current: true,
        pending: true,
    });
    gpu.scheduler = Nv::Value(SchedulerState {
        policy: Some(SchedulerPolicy::FixedShare),
        raw_policy: 3,
        arr_mode: ArrMode::Default,
        timeslice_ns: Nv::Value(0),
    });
    gpu.ecc_mode = Nv::Value(EccMode {
        current: false,
        pending: true,
    });
    assert_eq!(
        NvmlFacts::of(&gpu),
        NvmlFacts {
            mig_enabled: Ok(true),
            scheduler: Ok("fixed-share".to_owned()),
            timeslice: Ok("default".to_owned()),
            ecc_enabled: Ok(false),
            confidential_computing: Err("not supported".to_owned()),
        }
    );
}

#[test]
fn nvml_host_facts_without_nvml_say_why_it_is_missing() {
    use crate::model::nvml::{Cause, Fact as NvmlFact, NvmlStatus};
    let not_loaded = || NvmlFact::unknown(Cause::NotLoaded, "NVML is not loaded: no driver");
    let host = NvmlHost {
        status: NvmlStatus {
            loaded: false,
            driver_version: None,
            reason: Some("no driver".to_owned()),
            library: None,
        },
        nvml_version: not_loaded(),
        gpus: Vec::new(),
        device_count: NvmlFact::unknown(Cause::NotLoaded, "NVML is not loaded: no driver"),
        unreadable: Vec::new(),
    };
    assert_eq!(
        NvmlHostFacts::of(&host),
        NvmlHostFacts {
            gpus: BTreeMap::new(),
            missing: "NVML is not loaded: no driver".to_owned(),
            driver_params: None,
        }
    );
}

#[test]
fn ranges_joins_consecutive_groups() {
    assert_eq!(
        super::facts::ranges(&[173, 142, 143, 5, 3, 4, 9]),
        "3-5, 9, 142-143, 173"
    );
}

#[test]
fn passthrough_companion_on_a_host_driver_is_named_in_the_group_fact() {
    let t4 = idle_t4();
    let mut device = alone(T4, 31);
    device.companions.push(GroupMember {
        address: addr("0000:3b:00.1"),
        driver: Some("snd_hda_intel".to_owned()),
        class: Some(0x040300),
    });
    let report = report_of(
        vec![t4],
        &checks(CheckStatus::Pass, vec![device]),
        &no_nvml(),
    );
    let memory = assessment(&report, DeviceKind::Passthrough, Dimension::Memory);
    let group = memory.facts.iter().find(|f| f.name == "iommu-group");
    assert_eq!(
        (memory.status, group.and_then(|g| g.detail.clone())),
        (
            Status::Provided,
            Some("group 31; assign 0000:3b:00.1 (snd_hda_intel) with it".to_owned())
        )
    );
}

fn t4_nvidia(params: Option<&str>) -> NvidiaReport {
    let mut facts = nvml(T4, known("equal-share", false));
    facts.driver_params = params.map(crate::model::driver_params::parse_registry);
    let report = report_of(
        vec![idle_t4()],
        &checks(CheckStatus::Pass, Vec::new()),
        &facts,
    );
    report.gpus[0].nvidia.clone().unwrap()
}

#[test]
fn nvidia_scrub_disabled_is_a_finding_with_its_risk() {
    let scrub = t4_nvidia(Some("RegistryDwords: \"RMDisableScrubOnFree=1\"\n")).scrub;

    assert_eq!(
        (
            scrub.status,
            scrub.fact.value.as_deref(),
            scrub.fact.detail.as_deref(),
            scrub.residual_risk.as_str()
        ),
        (
            Status::NotProvided,
            Some("off"),
            Some("RMDisableScrubOnFree in RegistryDwords"),
            "frame buffer is not cleared when a vGPU is freed"
        )
    );
}

#[test]
fn nvidia_scrub_unset_is_the_driver_default_without_a_guarantee() {
    let scrub = t4_nvidia(Some(
        "RegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\n",
    ))
    .scrub;

    assert_eq!(
        (scrub.status, scrub.residual_risk.as_str()),
        (
            Status::Partial,
            "scrub on free (driver default); NVIDIA does not document a guarantee"
        )
    );
}

#[test]
fn nvidia_scrub_without_params_is_unknown() {
    let scrub = t4_nvidia(None).scrub;

    assert_eq!((scrub.status, scrub.fact.value), (Status::Unknown, None));
}

#[test]
fn nvidia_facts_name_scheduler_timeslice_and_size_mode() {
    let facts = t4_nvidia(None).facts;

    assert_eq!(
        facts
            .iter()
            .map(|f| format!("{}={}", f.name, f.value.as_deref().unwrap_or("?")))
            .collect::<Vec<_>>(),
        [
            "vgpu-scheduler=equal-share",
            "vgpu-timeslice=default",
            "size-mode=equal"
        ]
    );
}

#[test]
fn nvidia_report_absent_for_other_vendors() {
    let flex = gpu(Model::Flex170, addr(FLEX), Some(0));

    let report = report_of(
        vec![flex],
        &checks(CheckStatus::Pass, Vec::new()),
        &no_nvml(),
    );

    assert_eq!(report.gpus[0].nvidia, None);
}
