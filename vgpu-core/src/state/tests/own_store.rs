//! `vgpu`'s own store (`etc/vgpu/`): SR-IOV counts, vendor-VFIO types on VFs, bindings.

use super::*;

use crate::error::StateError;

// ---- our store: SR-IOV ----

#[test]
fn define_sriov_writes_versioned_json() {
    let (_dir, paths) = host();
    let def = SriovDefinition {
        pf: addr("0000:41:00.0"),
        num_vfs: 4,
        drivers_autoprobe: Some(false),
        lmem_quota_mib: BTreeMap::new(),
    };
    Store::new(&paths).define_sriov(&def).unwrap();
    let written =
        fs::read_to_string(paths.root().join("etc/vgpu/sriov/0000:41:00.0.json")).unwrap();
    assert_eq!(
        written,
        "{\n  \"version\": 1,\n  \"num_vfs\": 4,\n  \"drivers_autoprobe\": false\n}\n"
    );
}

#[test]
fn sriov_defined_reads_back_sorted() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let second = SriovDefinition {
        pf: addr("0001:01:00.0"),
        num_vfs: 16,
        drivers_autoprobe: None,
        lmem_quota_mib: BTreeMap::new(),
    };
    let first = SriovDefinition {
        pf: addr("0000:41:00.0"),
        num_vfs: 4,
        drivers_autoprobe: Some(true),
        lmem_quota_mib: BTreeMap::new(),
    };
    store.define_sriov(&second).unwrap();
    store.define_sriov(&first).unwrap();
    assert_eq!(store.sriov().unwrap(), vec![first, second]);
}

#[test]
fn sriov_version_2_is_definition_error() {
    let (_dir, paths) = host();
    let path = paths.root().join("etc/vgpu/sriov/0000:41:00.0.json");
    put(&path, r#"{"version": 2, "num_vfs": 4, "vfs": []}"#);
    let err = Store::new(&paths).sriov().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: format version 2 is not supported (this vgpu reads 1)",
            path.display()
        )
    );
}

#[test]
fn sriov_without_version_is_definition_error() {
    let (_dir, paths) = host();
    let path = paths.root().join("etc/vgpu/sriov/0000:41:00.0.json");
    put(&path, r#"{"num_vfs": 4}"#);
    let err = Store::new(&paths).sriov().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: no \"version\" field: not a vgpu definition",
            path.display()
        )
    );
}

#[test]
fn sriov_unknown_field_is_json_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/sriov/0000:41:00.0.json"),
        r#"{"version": 1, "num_vfs": 4, "drivers_autoprobe": null, "numa": 0}"#,
    );
    let err = Store::new(&paths).sriov().unwrap_err();
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
}

#[test]
fn sriov_non_address_name_is_definition_error() {
    let (_dir, paths) = host();
    let path = paths.root().join("etc/vgpu/sriov/gpu0.json");
    put(&path, r#"{"version": 1, "num_vfs": 4}"#);
    let err = Store::new(&paths).sriov().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: the name is not a canonical PCI address with .json \
             (dddd:bb:dd.f.json)",
            path.display()
        )
    );
}

#[test]
fn sriov_non_canonical_address_name_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/sriov/00000000:41:00.0.json"),
        r#"{"version": 1, "num_vfs": 4}"#,
    );
    let err = Store::new(&paths).sriov().unwrap_err();
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn sriov_of_undefined_is_none() {
    let (_dir, paths) = host();
    assert_eq!(
        Store::new(&paths).sriov_of(addr("0000:41:00.0")).unwrap(),
        None
    );
}

#[test]
fn undefine_sriov_defined_returns_true_then_false() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let pf = addr("0000:41:00.0");
    store
        .define_sriov(&SriovDefinition {
            pf,
            num_vfs: 4,
            drivers_autoprobe: None,
            lmem_quota_mib: BTreeMap::new(),
        })
        .unwrap();
    let first = store.undefine_sriov(pf).unwrap();
    let second = store.undefine_sriov(pf).unwrap();
    assert_eq!((first, second), (true, false));
}

// ---- our store: SR-IOV local-memory quotas ----

const FLEX_SRIOV: &str = "etc/vgpu/sriov/0000:4d:00.0.json";
/// An SR-IOV definition as written before quotas were recorded.
const SRIOV_WITHOUT_QUOTAS: &str =
    "{\n  \"version\": 1,\n  \"num_vfs\": 5,\n  \"drivers_autoprobe\": null\n}\n";

fn flex_with_quotas(quotas: &[(u32, u64)]) -> SriovDefinition {
    SriovDefinition {
        pf: addr("0000:4d:00.0"),
        num_vfs: 5,
        drivers_autoprobe: None,
        lmem_quota_mib: quotas.iter().copied().collect(),
    }
}

#[test]
fn define_sriov_with_quotas_writes_them_by_vf_number() {
    let (_dir, paths) = host();
    Store::new(&paths)
        .define_sriov(&flex_with_quotas(&[(1, 8192), (2, 2048)]))
        .unwrap();
    let written = fs::read_to_string(paths.root().join(FLEX_SRIOV)).unwrap();
    assert_eq!(
        written,
        "{\n  \"version\": 1,\n  \"num_vfs\": 5,\n  \"drivers_autoprobe\": null,\n  \
         \"lmem_quota_mib\": {\n    \"1\": 8192,\n    \"2\": 2048\n  }\n}\n"
    );
}

#[test]
fn sriov_with_quotas_reads_back_as_written() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let def = flex_with_quotas(&[(1, 8192), (2, 2048), (5, 2048)]);
    store.define_sriov(&def).unwrap();
    assert_eq!(store.sriov_of(def.pf).unwrap(), Some(def));
}

#[test]
fn sriov_file_without_quotas_reads_as_none() {
    let (_dir, paths) = host();
    put(&paths.root().join(FLEX_SRIOV), SRIOV_WITHOUT_QUOTAS);
    let read = Store::new(&paths).sriov_of(addr("0000:4d:00.0")).unwrap();
    assert_eq!(read, Some(flex_with_quotas(&[])));
}

#[test]
fn sriov_file_without_quotas_writes_back_byte_identical() {
    let (_dir, paths) = host();
    let path = paths.root().join(FLEX_SRIOV);
    put(&path, SRIOV_WITHOUT_QUOTAS);
    let store = Store::new(&paths);
    let read = store.sriov_of(addr("0000:4d:00.0")).unwrap().unwrap();
    store.define_sriov(&read).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), SRIOV_WITHOUT_QUOTAS);
}

#[test]
fn sriov_quota_past_num_vfs_is_definition_error() {
    let (_dir, paths) = host();
    let path = paths.root().join(FLEX_SRIOV);
    put(
        &path,
        r#"{"version": 1, "num_vfs": 5, "drivers_autoprobe": null, "lmem_quota_mib": {"6": 2048}}"#,
    );
    let err = Store::new(&paths).sriov().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: lmem_quota_mib names VF 6, not one of the 5 VFs (1 to 5)",
            path.display()
        )
    );
}

#[test]
fn sriov_quota_for_vf_0_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join(FLEX_SRIOV),
        r#"{"version": 1, "num_vfs": 5, "drivers_autoprobe": null, "lmem_quota_mib": {"0": 2048}}"#,
    );
    let err = Store::new(&paths).sriov().unwrap_err();
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn sriov_quota_not_a_vf_number_is_json_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join(FLEX_SRIOV),
        r#"{"version": 1, "num_vfs": 5, "drivers_autoprobe": null, "lmem_quota_mib": {"vf1": 2048}}"#,
    );
    let err = Store::new(&paths).sriov().unwrap_err();
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
}

#[test]
fn define_sriov_quota_of_zero_is_refused_and_writes_nothing() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_sriov(&flex_with_quotas(&[(1, 0)]))
        .unwrap_err();
    assert_eq!(
        (err.to_string(), paths.root().join(FLEX_SRIOV).exists()),
        (
            format!(
                "invalid definition {}: lmem_quota_mib of VF 1 is 0 MiB, not a quota \
                 (1 MiB to 16 EiB)",
                paths.root().join(FLEX_SRIOV).display()
            ),
            false
        )
    );
}

// ---- our store: vendor-VFIO types on VFs ----

#[test]
fn define_vf_vgpu_writes_versioned_json() {
    let (_dir, paths) = host();
    let def = VfVgpuDefinition {
        placement: None,
        vf: addr("0000:41:00.4"),
        gpu: addr("0000:41:00.0"),
        type_id: 1151,
        type_name: None,
        start: Start::Auto,
    };
    Store::new(&paths).define_vf_vgpu(&def).unwrap();
    let written =
        fs::read_to_string(paths.root().join("etc/vgpu/vf-vgpus/0000:41:00.4.json")).unwrap();
    assert_eq!(
        written,
        "{\n  \"version\": 1,\n  \"gpu\": \"0000:41:00.0\",\n  \"type_id\": 1151,\n  \
         \"start\": \"auto\"\n}\n"
    );
}

#[test]
fn vf_vgpu_defined_reads_back() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let def = VfVgpuDefinition {
        placement: None,
        vf: addr("0000:41:00.4"),
        gpu: addr("0000:41:00.0"),
        type_id: 1151,
        type_name: None,
        start: Start::Manual,
    };
    store.define_vf_vgpu(&def).unwrap();
    assert_eq!(store.vf_vgpu(def.vf).unwrap(), Some(def));
}

#[test]
fn vf_vgpus_unknown_start_is_json_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/vf-vgpus/0000:41:00.4.json"),
        r#"{"version": 1, "gpu": "0000:41:00.0", "type_id": 1151, "start": "yes"}"#,
    );
    let err = Store::new(&paths).vf_vgpus().unwrap_err();
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
}

#[test]
fn vf_vgpus_bad_gpu_address_is_json_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/vf-vgpus/0000:41:00.4.json"),
        r#"{"version": 1, "gpu": "41:00.0", "type_id": 1151, "start": "auto"}"#,
    );
    let err = Store::new(&paths).vf_vgpus().unwrap_err();
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
}

#[test]
fn undefine_vf_vgpu_undefined_returns_false() {
    let (_dir, paths) = host();
    assert!(
        !Store::new(&paths)
            .undefine_vf_vgpu(addr("0000:41:00.4"))
            .unwrap()
    );
}

// ---- our store: bindings ----

#[test]
fn define_binding_writes_versioned_json() {
    let (_dir, paths) = host();
    let def = BindingDefinition {
        address: addr("0000:00:02.1"),
        driver: "vfio-pci".to_owned(),
        previous_driver: None,
        start: Start::Auto,
    };
    Store::new(&paths).define_binding(&def).unwrap();
    let written =
        fs::read_to_string(paths.root().join("etc/vgpu/bindings/0000:00:02.1.json")).unwrap();
    assert_eq!(
        written,
        "{\n  \"version\": 1,\n  \"driver\": \"vfio-pci\",\n  \"previous_driver\": null,\n  \
         \"start\": \"auto\"\n}\n"
    );
}

#[test]
fn binding_defined_reads_back() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let def = BindingDefinition {
        address: addr("0000:00:02.1"),
        driver: "vfio-pci".to_owned(),
        previous_driver: Some("i915".to_owned()),
        start: Start::Manual,
    };
    store.define_binding(&def).unwrap();
    assert_eq!(store.binding(def.address).unwrap(), Some(def));
}

#[test]
fn define_binding_driver_with_slash_is_refused() {
    let (_dir, paths) = host();
    let def = BindingDefinition {
        address: addr("0000:00:02.1"),
        driver: "../../unbind".to_owned(),
        previous_driver: None,
        start: Start::Auto,
    };
    let err = Store::new(&paths).define_binding(&def).unwrap_err();
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn bindings_driver_dotdot_in_file_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/bindings/0000:00:02.1.json"),
        r#"{"version": 1, "driver": "..", "previous_driver": null, "start": "auto"}"#,
    );
    let err = Store::new(&paths).bindings().unwrap_err();
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn bindings_lenient_returns_good_definitions_and_each_error() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let good = BindingDefinition {
        address: addr("0000:00:02.1"),
        driver: "vfio-pci".to_owned(),
        previous_driver: Some("i915".to_owned()),
        start: Start::Auto,
    };
    store.define_binding(&good).unwrap();
    put(
        &paths.root().join("etc/vgpu/bindings/0000:00:02.2.json"),
        "",
    );
    let (defs, errors) = store.bindings_lenient();
    assert_eq!((defs, errors.len()), (vec![good], 1));
}

// ---- our store: size modes, and what they must agree with ----

#[test]
fn size_mode_file_round_trips_and_a_bad_one_names_its_path() {
    use crate::model::sizes::SizeMode;
    use crate::state::store::{SizeModeDefinition, SizeModeKind};

    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let def = SizeModeDefinition {
        gpu: addr("0000:41:00.0"),
        mode: SizeMode::Mixed,
    };
    store.define_own::<SizeModeKind>(&def).unwrap();
    let path = paths.root().join("etc/vgpu/size-mode/0000:41:00.0.json");
    let written = fs::read_to_string(&path).unwrap();
    let read = store.size_mode_of(def.gpu).unwrap();
    let other = paths.root().join("etc/vgpu/size-mode/0000:42:00.0.json");
    put(&other, r#"{"version": 1, "mode": "hetero"}"#);
    let (good, bad) = store.size_modes_lenient();

    assert_eq!(written, "{\n  \"version\": 1,\n  \"mode\": \"mixed\"\n}\n");
    assert_eq!(read, Some(def));
    assert_eq!(good, vec![def]);
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0].to_string().contains(&other.display().to_string()),
        "{}",
        bad[0]
    );
}

#[test]
fn placed_on_lists_the_vgpus_defined_at_placements_on_a_gpu_and_its_vfs_only() {
    use crate::model::sizes::SizeMode;
    use crate::state::store::PLACEMENT_ATTR;

    let (_dir, paths) = host();
    let store = Store::new(&paths);
    let (gpu, vf) = (addr("0000:41:00.0"), addr("0000:41:00.4"));
    let mut on_vf = manual(Uuid::from_u128(1), "0000:41:00.4");
    on_vf.attrs = vec![(PLACEMENT_ATTR.to_owned(), "vgpu-placement-id=5".to_owned())];
    let mut elsewhere = on_vf.clone();
    elsewhere.uuid = Uuid::from_u128(2);
    elsewhere.parent = "0000:81:00.4".to_owned();
    let unplaced = manual(Uuid::from_u128(3), "0000:41:00.4");
    for def in [&on_vf, &elsewhere, &unplaced] {
        store.define_mdev(def).unwrap();
    }
    let vf_vgpu = |vf: &str, placement| VfVgpuDefinition {
        placement,
        vf: addr(vf),
        gpu,
        type_id: 1147,
        type_name: None,
        start: Start::Auto,
    };
    store
        .define_vf_vgpu(&vf_vgpu("0000:41:00.5", Some(17)))
        .unwrap();
    store
        .define_vf_vgpu(&vf_vgpu("0000:41:00.6", None))
        .unwrap();

    let placed = store.placed_on(gpu, &[vf]).unwrap();
    let refused = store.check_size_mode_agrees(gpu, Some(SizeMode::Equal), placed.clone());
    let mixed = store.check_size_mode_agrees(gpu, Some(SizeMode::Mixed), placed.clone());
    let undefined = store.check_size_mode_agrees(gpu, None, placed.clone());

    assert_eq!(placed, [on_vf.uuid.to_string(), "0000:41:00.5".to_owned()]);
    assert!(matches!(
        refused,
        Err(Error::State(StateError::SizeModeDisagrees { .. }))
    ));
    assert!(mixed.is_ok() && undefined.is_ok());
}

#[test]
fn disagreements_name_mixed_beside_mig_and_equal_beside_placements() {
    use crate::model::sizes::SizeMode;
    use crate::state::store::{AllDefinitions, MigDefinition, PLACEMENT_ATTR, SizeModeDefinition};

    let (mixed, equal) = (addr("0000:41:00.0"), addr("0000:42:00.0"));
    // An mdev at a placement on one of `equal`'s VFs counts too.
    let mut on_vf = manual(Uuid::from_u128(7), "0000:42:00.5");
    on_vf.attrs = vec![(PLACEMENT_ATTR.to_owned(), "vgpu-placement-id=3".to_owned())];
    let all = AllDefinitions {
        size_modes: vec![
            SizeModeDefinition {
                gpu: mixed,
                mode: SizeMode::Mixed,
            },
            SizeModeDefinition {
                gpu: equal,
                mode: SizeMode::Equal,
            },
        ],
        migs: vec![MigDefinition {
            gpu: mixed,
            enabled: true,
            instances: Vec::new(),
        }],
        vf_vgpus: vec![VfVgpuDefinition {
            vf: addr("0000:42:00.4"),
            gpu: equal,
            type_id: 1147,
            type_name: None,
            start: Start::Auto,
            placement: Some(5),
        }],
        mdevs: vec![on_vf],
        ..AllDefinitions::default()
    };

    let found = all.disagreements(|gpu| match gpu == equal {
        true => vec![addr("0000:42:00.4"), addr("0000:42:00.5")],
        false => Vec::new(),
    });

    assert_eq!(
        found,
        [
            (
                mixed,
                "the definitions of GPU 0000:41:00.0 disagree: mixed-size mode and MIG mode, \
                 which it does not go with; define equal-size mode (vgpuctl size-mode \
                 0000:41:00.0 equal --define)"
                    .to_owned()
            ),
            (
                equal,
                "the definitions of GPU 0000:42:00.0 disagree: equal-size mode and vGPUs at \
                 placements (00000000-0000-0000-0000-000000000007, 0000:42:00.4), which need \
                 mixed-size mode; undefine one or the other"
                    .to_owned()
            ),
        ]
    );
}
