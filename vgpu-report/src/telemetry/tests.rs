//! The join of inventory, usage and ownership, on in-memory GPUs.

use crate::model::holder::{Holder, Tenant};
use uuid::Uuid;

use super::*;
use crate::model::Vgpu;
use crate::model::nvml::NvmlStatus;
use crate::model::nvml::{Cause, EncoderStats, Fact, NvmlGpu, NvmlVgpu, UtilizationSample, VmId};
use vgpu_plan::testing::fleet::{Model, enable_vfs, gpu};

/// The PCI address `text`; a test's own text, so a bad one is the test's mistake.
fn addr(text: &str) -> crate::model::pci::PciAddress {
    text.parse().expect("a PCI address")
}

const T4: &str = "0000:3b:00.0";
const FLEX: &str = "0001:03:00.0";

fn mdev(n: u128) -> VgpuHandle {
    VgpuHandle::Mdev(Uuid::from_u128(n))
}

/// A T4 with three T4-2Q vGPUs (1, 2, 3), and a Flex 170 with two VFs, the second on
/// `vfio-pci` with a 4 GiB quota.
fn inventory() -> Inventory {
    let mut t4 = gpu(Model::T4, addr(T4), Some(0));
    let t4_2q = t4
        .types
        .iter()
        .find(|t| t.name.as_deref() == Some("GRID T4-2Q"))
        .map(|t| t.id.clone())
        .unwrap_or_default();
    t4.vgpus = [3, 1, 2]
        .into_iter()
        .map(|n| Vgpu {
            placement: None,
            id: mdev(n),
            type_id: t4_2q.clone(),
            parent: addr(T4),
        })
        .collect();
    let mut flex = gpu(Model::Flex170, addr(FLEX), Some(1));
    enable_vfs(&mut flex, 2);
    flex.vfs[1].driver = Some("vfio-pci".to_owned());
    flex.vfs[1].memory_mib = Some(4096);
    // Discovery lists a VF on vfio-pci as a vGPU of type `vf`.
    flex.vfs[1].vgpu_type = Some(crate::model::PLAIN_VF_TYPE.to_owned());
    flex.vgpus.push(Vgpu {
        placement: None,
        id: VgpuHandle::Vf(flex.vfs[1].address),
        type_id: crate::model::PLAIN_VF_TYPE.to_owned(),
        parent: addr(FLEX),
    });
    let idle = gpu(Model::Flex170, addr("0002:03:00.0"), None);
    Inventory {
        gpus: vec![flex, t4, idle],
        warnings: Vec::new(),
    }
}

fn owner(domain: &str, tenant: Option<&str>) -> Holder {
    Holder {
        domain: domain.to_owned(),
        uuid: Uuid::new_v5(&Uuid::NAMESPACE_OID, domain.as_bytes()),
        tenant: tenant.map(Tenant::label),
    }
}

fn used(bytes: u64, sessions: u32) -> VgpuUsage {
    VgpuUsage {
        framebuffer_used_bytes: Some(bytes),
        encoder_sessions: Some(sessions),
        utilization: Utilization {
            sm: Some(0.25),
            memory: Some(0.1),
            encoder: Some(0.0),
            decoder: None,
        },
        matched_by: MatchedBy::MdevUuid,
    }
}

#[test]
fn telemetry_rows_are_sorted_by_gpu_then_id_with_plain_vfs_on_vfio() {
    let found = telemetry(&inventory(), &Usage::new(), &BTreeMap::new());
    let rows: Vec<(String, String, String, Option<u64>)> = found
        .vgpus
        .iter()
        .map(|v| {
            (
                v.gpu.to_string(),
                v.id.to_string(),
                v.type_name.clone().unwrap_or_else(|| v.type_id.clone()),
                v.framebuffer_bytes,
            )
        })
        .collect();
    let t4_2q = (
        T4.to_owned(),
        String::new(),
        "GRID T4-2Q".to_owned(),
        Some(2048 * MIB),
    );
    let t4 = |n: u128| {
        let mut row = t4_2q.clone();
        row.1 = mdev(n).to_string();
        row
    };
    assert_eq!(
        rows,
        vec![
            t4(1),
            t4(2),
            t4(3),
            (
                FLEX.to_owned(),
                "0001:03:00.5".to_owned(),
                "vf".to_owned(),
                Some(4096 * MIB)
            ),
        ]
    );
}

#[test]
fn telemetry_gpus_count_vgpus_per_gpu() {
    let found = telemetry(&inventory(), &Usage::new(), &BTreeMap::new());
    let gpus: Vec<(String, u32)> = found
        .gpus
        .iter()
        .map(|g| (g.gpu.to_string(), g.vgpus))
        .collect();
    assert_eq!(
        gpus,
        vec![
            (T4.to_owned(), 3),
            (FLEX.to_owned(), 1),
            ("0002:03:00.0".to_owned(), 0)
        ]
    );
}

#[test]
fn telemetry_usage_and_owner_fill_the_row() {
    let usage = Usage::from([(mdev(2), used(512 * MIB, 1))]);
    let owners = BTreeMap::from([(mdev(2), owner("web-1", Some("acme")))]);
    let found = telemetry(&inventory(), &usage, &owners);
    let row = found.vgpus.iter().find(|v| v.id == mdev(2));
    assert_eq!(
        row.map(|r| (
            r.domain.as_deref(),
            r.tenant.as_deref(),
            r.framebuffer_used_bytes,
            r.encoder_sessions,
            r.utilization.sm,
            r.matched_by
        )),
        Some((
            Some("web-1"),
            Some("acme"),
            Some(512 * MIB),
            Some(1),
            Some(0.25),
            Some(MatchedBy::MdevUuid)
        ))
    );
}

#[test]
fn telemetry_vgpu_without_usage_or_owner_reports_none() {
    let found = telemetry(&inventory(), &Usage::new(), &BTreeMap::new());
    let row = found.vgpus.iter().find(|v| v.id == mdev(1));
    assert_eq!(
        row.map(|r| (
            r.domain.clone(),
            r.tenant.clone(),
            r.framebuffer_used_bytes,
            r.encoder_sessions,
            r.utilization,
            r.matched_by
        )),
        Some((None, None, None, None, Utilization::default(), None))
    );
}

#[test]
fn telemetry_tenants_are_summed_with_the_tenantless_last() {
    let usage = Usage::from([
        (mdev(1), used(100, 1)),
        (mdev(2), used(200, 2)),
        (mdev(3), used(300, 0)),
    ]);
    let owners = BTreeMap::from([
        (mdev(1), owner("a", Some("acme"))),
        (mdev(2), owner("b", Some("acme"))),
        (mdev(3), owner("c", Some("globex"))),
    ]);
    let found = telemetry(&inventory(), &usage, &owners);
    assert_eq!(
        found.tenants,
        vec![
            TenantUsage {
                tenant: Some("acme".to_owned()),
                vgpus: 2,
                framebuffer_bytes: Some(4096 * MIB),
                framebuffer_used_bytes: Some(300),
                encoder_sessions: Some(3),
            },
            TenantUsage {
                tenant: Some("globex".to_owned()),
                vgpus: 1,
                framebuffer_bytes: Some(2048 * MIB),
                framebuffer_used_bytes: Some(300),
                encoder_sessions: Some(0),
            },
            TenantUsage {
                tenant: None,
                vgpus: 1,
                framebuffer_bytes: Some(4096 * MIB),
                framebuffer_used_bytes: None,
                encoder_sessions: None,
            },
        ]
    );
}

#[test]
fn telemetry_tenant_sum_with_one_unknown_value_is_unknown() {
    let usage = Usage::from([(mdev(1), used(100, 1))]);
    let owners = BTreeMap::from([
        (mdev(1), owner("a", Some("acme"))),
        (mdev(2), owner("b", Some("acme"))),
    ]);
    let found = telemetry(&inventory(), &usage, &owners);
    let acme = found
        .tenants
        .iter()
        .find(|t| t.tenant.as_deref() == Some("acme"));
    assert_eq!(
        acme.map(|t| (t.vgpus, t.framebuffer_used_bytes, t.encoder_sessions)),
        Some((2, None, None))
    );
}

#[test]
fn telemetry_domain_without_tenant_is_summed_as_tenantless() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None))]);
    let found = telemetry(&inventory(), &Usage::new(), &owners);
    let tenants: Vec<(Option<String>, u32)> = found
        .tenants
        .iter()
        .map(|t| (t.tenant.clone(), t.vgpus))
        .collect();
    assert_eq!(tenants, vec![(None, 4)]);
}

#[test]
fn sum_overflow_is_unknown() {
    assert_eq!(sum([Some(u64::MAX), Some(1)].into_iter()), None);
}

/// An NVML GPU at `address` whose every fact is unavailable, running `vgpus`.
pub(crate) fn nvml_gpu(address: &str, vgpus: Vec<NvmlVgpu>) -> NvmlGpu {
    fn no<T>() -> Fact<T> {
        Fact::unknown(Cause::NotSupported, "not supported")
    }
    NvmlGpu {
        address: addr(address),
        index: 0,
        name: no(),
        uuid: no(),
        virtualization_mode: no(),
        host_vgpu_mode: no(),
        mig_mode: no(),
        gpu_instances: no(),
        ecc_mode: no(),
        confidential_computing: no(),
        scheduler: no(),
        scheduler_capabilities: no(),
        supported_types: no(),
        creatable_type_ids: no(),
        vgpus: Fact::Value(vgpus),
        size_mode: Fact::unknown(Cause::NotSupported, "not supported"),
    }
}

/// A loaded NVML reporting `gpus`.
pub(crate) fn nvml_host(gpus: Vec<NvmlGpu>) -> NvmlHost {
    NvmlHost {
        status: NvmlStatus {
            loaded: true,
            driver_version: Some("550.90.05".to_owned()),
            reason: None,
            library: Some("libnvidia-ml.so.1".to_owned()),
        },
        nvml_version: Fact::Value("12.550.90.05".to_owned()),
        gpus,
        device_count: Fact::Value(1),
        unreadable: Vec::new(),
    }
}

/// A running vGPU of NVML type `type_id` in the VM of `domain` (as [`owner`] names it), NVML
/// instance `instance`, whose mdev UUID NVML does not give.
fn running(instance: u32, type_id: u32, domain: &str, used_mib: u64) -> NvmlVgpu {
    NvmlVgpu {
        instance,
        type_id: Fact::Value(type_id),
        uuid: Fact::Value("9e0a5a8e-3f4c-11ef-a1b2-0242ac120002".to_owned()),
        mdev_uuid: Fact::unknown(
            Cause::NotSupported,
            "nvmlVgpuInstanceGetMdevUUID: not supported by this GPU or its mode \
             (NVML_ERROR_NOT_SUPPORTED)",
        ),
        vm_id: Fact::Value(VmId::Uuid(owner(domain, None).uuid.to_string())),
        framebuffer_used_mib: Fact::Value(used_mib),
        framebuffer_mib: Fact::Value(2048),
        encoder: Fact::Value(EncoderStats {
            sessions: 2,
            average_fps: 30,
            average_latency_us: 900,
        }),
        gpu_instance_id: Fact::Value(None),
        utilization: Fact::Value(Some(UtilizationSample {
            instance,
            timestamp_us: 1_700_000_000_000_000,
            sm_percent: 35,
            memory_percent: 12,
            encoder_percent: 0,
            decoder_percent: 150,
        })),
    }
}

/// As [`running`], with NVML giving the mdev UUID of `mdev(n)`.
fn running_mdev(instance: u32, n: u128, domain: &str, used_mib: u64) -> NvmlVgpu {
    NvmlVgpu {
        mdev_uuid: Fact::Value(Uuid::from_u128(n)),
        ..running(instance, t4_2q_id(), domain, used_mib)
    }
}

/// What [`running`] reports, with `used_mib` in use, as matched `by`.
fn reported(used_mib: u64, by: MatchedBy) -> VgpuUsage {
    VgpuUsage {
        framebuffer_used_bytes: Some(used_mib * MIB),
        encoder_sessions: Some(2),
        utilization: Utilization {
            sm: Some(0.35),
            memory: Some(0.12),
            encoder: Some(0.0),
            decoder: Some(1.0),
        },
        matched_by: by,
    }
}

fn t4_2q_id() -> u32 {
    let t4 = gpu(Model::T4, addr(T4), None);
    t4.types
        .iter()
        .find(|t| t.name.as_deref() == Some("GRID T4-2Q"))
        .and_then(|t| crate::model::nvml_type_id(&t.id))
        .unwrap_or_default()
}

const L40S: &str = "0000:41:00.0";

/// An L40S on NVIDIA's vendor-specific VFIO interface whose first VF (`0000:41:00.4`) runs a
/// vGPU of type `type_id`, and that type's NVML id.
fn vendor_vfio_inventory() -> (Inventory, VgpuHandle, u32) {
    let mut l40s = gpu(Model::L40s, addr(L40S), Some(0));
    let ty = l40s.types.first().map(|t| t.id.clone()).unwrap_or_default();
    let vf = l40s.vfs[0].address;
    l40s.vgpus = vec![Vgpu {
        placement: None,
        id: VgpuHandle::Vf(vf),
        type_id: ty.clone(),
        parent: vf,
    }];
    let nvml_id = crate::model::nvml_type_id(&ty).unwrap_or_default();
    (
        Inventory {
            gpus: vec![l40s],
            warnings: Vec::new(),
        },
        VgpuHandle::Vf(vf),
        nvml_id,
    )
}

#[test]
fn usage_from_nvml_mdev_uuid_matches_that_vgpu_without_an_owner() {
    let nvml = nvml_host(vec![nvml_gpu(T4, vec![running_mdev(7, 3, "z", 300)])]);
    assert_eq!(
        usage_from_nvml(&nvml, &inventory(), &BTreeMap::new()),
        Usage::from([(mdev(3), reported(300, MatchedBy::MdevUuid))])
    );
}

#[test]
fn usage_from_nvml_two_of_one_type_in_one_vm_are_each_matched_by_mdev_uuid() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None)), (mdev(2), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(
        T4,
        vec![running_mdev(7, 2, "a", 700), running_mdev(8, 1, "a", 300)],
    )]);
    assert_eq!(
        usage_from_nvml(&nvml, &inventory(), &owners),
        Usage::from([
            (mdev(1), reported(300, MatchedBy::MdevUuid)),
            (mdev(2), reported(700, MatchedBy::MdevUuid)),
        ])
    );
}

#[test]
fn usage_from_nvml_mdev_uuid_of_no_host_vgpu_is_not_attributed_by_vm_and_type() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(T4, vec![running_mdev(7, 99, "a", 300)])]);
    assert_eq!(usage_from_nvml(&nvml, &inventory(), &owners), Usage::new());
}

#[test]
fn usage_from_nvml_mdev_uuid_not_supported_matches_the_vgpu_its_vm_holds() {
    let owners = BTreeMap::from([
        (mdev(1), owner("a", None)),
        (mdev(2), owner("b", Some("acme"))),
    ]);
    let nvml = nvml_host(vec![nvml_gpu(T4, vec![running(7, t4_2q_id(), "b", 300)])]);
    assert_eq!(
        usage_from_nvml(&nvml, &inventory(), &owners),
        Usage::from([(mdev(2), reported(300, MatchedBy::VmAndType))])
    );
}

#[test]
fn usage_from_nvml_mdev_uuid_not_supported_vm_holding_two_of_the_type_is_not_attributed() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None)), (mdev(2), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(T4, vec![running(7, t4_2q_id(), "a", 300)])]);
    assert_eq!(usage_from_nvml(&nvml, &inventory(), &owners), Usage::new());
}

#[test]
fn usage_from_nvml_vm_and_type_skips_the_vgpu_matched_by_mdev_uuid() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None)), (mdev(2), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(
        T4,
        vec![
            running_mdev(7, 1, "a", 300),
            running(8, t4_2q_id(), "a", 700),
        ],
    )]);
    assert_eq!(
        usage_from_nvml(&nvml, &inventory(), &owners),
        Usage::from([
            (mdev(1), reported(300, MatchedBy::MdevUuid)),
            (mdev(2), reported(700, MatchedBy::VmAndType)),
        ])
    );
}

#[test]
fn usage_from_nvml_two_reports_matching_one_vgpu_by_vm_and_type_are_not_attributed() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(
        T4,
        vec![
            running(7, t4_2q_id(), "a", 300),
            running(8, t4_2q_id(), "a", 700),
        ],
    )]);
    assert_eq!(usage_from_nvml(&nvml, &inventory(), &owners), Usage::new());
}

#[test]
fn usage_from_nvml_other_type_or_unknown_vm_is_not_attributed() {
    let owners = BTreeMap::from([(mdev(1), owner("a", None))]);
    let nvml = nvml_host(vec![nvml_gpu(
        T4,
        vec![
            running(7, t4_2q_id() + 1, "a", 300),
            running(8, t4_2q_id(), "z", 300),
        ],
    )]);
    assert_eq!(usage_from_nvml(&nvml, &inventory(), &owners), Usage::new());
}

#[test]
fn usage_from_nvml_vendor_vfio_vgpu_is_matched_by_vm_and_type_whatever_its_mdev_uuid() {
    let (inventory, vf, type_id) = vendor_vfio_inventory();
    let owners = BTreeMap::from([(vf, owner("a", None))]);
    let reported_uuid = NvmlVgpu {
        mdev_uuid: Fact::Value(Uuid::from_u128(5)),
        ..running(7, type_id, "a", 300)
    };
    let nvml = nvml_host(vec![nvml_gpu(L40S, vec![reported_uuid])]);
    assert_eq!(
        usage_from_nvml(&nvml, &inventory, &owners),
        Usage::from([(vf, reported(300, MatchedBy::VmAndType))])
    );
}
