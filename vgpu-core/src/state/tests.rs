//! Unit tests of the persistent stores (mdevctl's and ours), the host lock and the audit log, on temporary
//! host roots.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::audit::{AuditEntry, AuditLog, rfc3339_utc};
use super::lock::HostLock;
use super::store::{
    BindingDefinition, MdevDefinition, SriovDefinition, Start, Store, VfVgpuDefinition,
};
use crate::error::Error;
use crate::host::paths::HostPaths;
use crate::testing::addr;
use tempfile::TempDir;
use uuid::Uuid;

const UUID_A: Uuid = Uuid::from_u128(0x6a8f_0a3c_1111_4d2e_9b7a_0000_0000_0001);
const UUID_B: Uuid = Uuid::from_u128(0x6a8f_0a3c_1111_4d2e_9b7a_0000_0000_0002);
const NAME_A: &str = "6a8f0a3c-1111-4d2e-9b7a-000000000001";
const NAME_B: &str = "6a8f0a3c-1111-4d2e-9b7a-000000000002";
const PARENT: &str = "0000:41:00.0";

/// What `mdevctl define -u <A> -p 0000:41:00.0 -t nvidia-222 --auto` followed by
/// `mdevctl modify --addattr=remap --value=on` and `--addattr=x --value=y` writes (mdevctl 1.2.0).
const MDEVCTL_WITH_ATTRS: &str = "{\n  \"mdev_type\": \"nvidia-222\",\n  \"start\": \"auto\",\n  \"attrs\": [\n    {\n      \"remap\": \"on\"\n    },\n    {\n      \"x\": \"y\"\n    }\n  ]\n}";
/// What `mdevctl define -u <B> -p 0000:41:00.0 -t nvidia-223` writes (mdevctl 1.2.0).
const MDEVCTL_MANUAL: &str =
    "{\n  \"mdev_type\": \"nvidia-223\",\n  \"start\": \"manual\",\n  \"attrs\": []\n}";

fn host() -> (TempDir, HostPaths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = HostPaths::new(dir.path());
    (dir, paths)
}

fn mdevctl_dir(paths: &HostPaths) -> PathBuf {
    paths.root().join("etc/mdevctl.d")
}

fn mdev_path(paths: &HostPaths, parent: &str, name: &str) -> PathBuf {
    mdevctl_dir(paths).join(parent).join(name)
}

fn put(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn with_attrs(uuid: Uuid, parent: &str) -> MdevDefinition {
    MdevDefinition {
        uuid,
        parent: parent.to_owned(),
        mdev_type: "nvidia-222".to_owned(),
        start: Start::Auto,
        attrs: vec![
            ("remap".to_owned(), "on".to_owned()),
            ("x".to_owned(), "y".to_owned()),
        ],
    }
}

fn manual(uuid: Uuid, parent: &str) -> MdevDefinition {
    MdevDefinition {
        uuid,
        parent: parent.to_owned(),
        mdev_type: "nvidia-223".to_owned(),
        start: Start::Manual,
        attrs: Vec::new(),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

// ---- Start ----

#[test]
fn start_display_is_lowercase_word() {
    assert_eq!(
        (Start::Auto.to_string(), Start::Manual.to_string()),
        ("auto".to_owned(), "manual".to_owned())
    );
}

// ---- mdevctl's store: writing ----

#[test]
fn define_mdev_with_attrs_writes_mdevctl_bytes() {
    let (_dir, paths) = host();
    Store::new(&paths)
        .define_mdev(&with_attrs(UUID_A, PARENT))
        .unwrap();
    let written = fs::read_to_string(mdev_path(&paths, PARENT, NAME_A)).unwrap();
    assert_eq!(written, MDEVCTL_WITH_ATTRS);
}

#[test]
fn define_mdev_without_attrs_writes_mdevctl_bytes() {
    let (_dir, paths) = host();
    Store::new(&paths)
        .define_mdev(&manual(UUID_B, PARENT))
        .unwrap();
    let written = fs::read_to_string(mdev_path(&paths, PARENT, NAME_B)).unwrap();
    assert_eq!(written, MDEVCTL_MANUAL);
}

#[test]
fn define_mdev_new_file_has_mode_0644() {
    let (_dir, paths) = host();
    Store::new(&paths)
        .define_mdev(&manual(UUID_B, PARENT))
        .unwrap();
    assert_eq!(mode(&mdev_path(&paths, PARENT, NAME_B)), 0o644);
}

#[test]
fn define_mdev_write_leaves_only_the_definition() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    store.define_mdev(&with_attrs(UUID_A, PARENT)).unwrap();
    assert_eq!(
        names(&mdevctl_dir(&paths).join(PARENT)),
        vec![NAME_A.to_owned()]
    );
}

#[test]
fn define_mdev_same_parent_overwrites() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    store.define_mdev(&with_attrs(UUID_A, PARENT)).unwrap();
    assert_eq!(
        store.mdev(UUID_A).unwrap(),
        Some(with_attrs(UUID_A, PARENT))
    );
}

#[test]
fn define_mdev_other_parent_is_refused() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    let err = store
        .define_mdev(&manual(UUID_A, "0000:42:00.0"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "mdev {NAME_A} is already defined under parent {PARENT} ({})",
            mdev_path(&paths, PARENT, NAME_A).display()
        )
    );
}

#[test]
fn define_mdev_other_parent_refusal_leaves_no_file() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    store
        .define_mdev(&manual(UUID_A, "0000:42:00.0"))
        .unwrap_err();
    assert!(!mdevctl_dir(&paths).join("0000:42:00.0").exists());
}

#[test]
fn define_mdev_parent_with_slash_is_refused() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, "a/b"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: parent \"a/b\" is not a file name",
            mdevctl_dir(&paths).display()
        )
    );
}

#[test]
fn define_mdev_parent_dotdot_is_refused() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, ".."))
        .unwrap_err();
    assert!(matches!(err, Error::Definition { .. }));
}

#[test]
fn define_mdev_parent_scripts_dir_is_refused() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, "scripts.d"))
        .unwrap_err();
    assert!(matches!(err, Error::Definition { .. }));
}

#[test]
fn define_mdev_attr_name_with_slash_is_refused() {
    let (_dir, paths) = host();
    let mut def = manual(UUID_A, PARENT);
    def.attrs.push(("../remove".to_owned(), "1".to_owned()));
    let err = Store::new(&paths).define_mdev(&def).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: attribute \"../remove\" is not a file name",
            mdev_path(&paths, PARENT, NAME_A).display()
        )
    );
}

#[test]
fn define_mdev_unwritable_store_is_update_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/mdevctl.d"),
        "a file, not a directory",
    );
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, PARENT))
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Update {
            action: "create directory",
            ..
        }
    ));
}

// ---- mdevctl's store: reading ----

#[test]
fn mdev_written_by_mdevctl_reads_back() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_A), MDEVCTL_WITH_ATTRS);
    let def = Store::new(&paths).mdev(UUID_A).unwrap();
    assert_eq!(def, Some(with_attrs(UUID_A, PARENT)));
}

#[test]
fn mdev_undefined_is_none() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_A), MDEVCTL_WITH_ATTRS);
    assert_eq!(Store::new(&paths).mdev(UUID_B).unwrap(), None);
}

#[test]
fn mdevs_absent_store_is_empty() {
    let (_dir, paths) = host();
    assert_eq!(Store::new(&paths).mdevs().unwrap(), Vec::new());
}

#[test]
fn mdevs_sorted_by_parent_then_uuid() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_B, "0000:42:00.0")).unwrap();
    store.define_mdev(&manual(UUID_B, PARENT)).unwrap_err();
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    let listed: Vec<(String, Uuid)> = store
        .mdevs()
        .unwrap()
        .into_iter()
        .map(|def| (def.parent, def.uuid))
        .collect();
    assert_eq!(
        listed,
        vec![
            (PARENT.to_owned(), UUID_A),
            ("0000:42:00.0".to_owned(), UUID_B)
        ]
    );
}

#[test]
fn mdevs_two_under_one_parent_sorted_by_uuid() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_B), MDEVCTL_MANUAL);
    put(&mdev_path(&paths, PARENT, NAME_A), MDEVCTL_WITH_ATTRS);
    assert_eq!(
        Store::new(&paths).mdevs().unwrap(),
        vec![with_attrs(UUID_A, PARENT), manual(UUID_B, PARENT)]
    );
}

#[test]
fn mdevs_scripts_dir_is_skipped() {
    let (_dir, paths) = host();
    fs::create_dir_all(mdevctl_dir(&paths).join("scripts.d/callouts")).unwrap();
    fs::create_dir_all(mdevctl_dir(&paths).join("scripts.d/notifiers")).unwrap();
    put(&mdev_path(&paths, PARENT, NAME_B), MDEVCTL_MANUAL);
    assert_eq!(
        Store::new(&paths).mdevs().unwrap(),
        vec![manual(UUID_B, PARENT)]
    );
}

#[test]
fn mdevs_hidden_file_is_skipped() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_B), MDEVCTL_MANUAL);
    put(&mdev_path(&paths, PARENT, ".tmp-leftover"), "{");
    assert_eq!(
        Store::new(&paths).mdevs().unwrap(),
        vec![manual(UUID_B, PARENT)]
    );
}

#[test]
fn mdevs_missing_attrs_reads_as_none() {
    let (_dir, paths) = host();
    put(
        &mdev_path(&paths, PARENT, NAME_B),
        r#"{"mdev_type": "nvidia-223", "start": "manual"}"#,
    );
    assert_eq!(
        Store::new(&paths).mdevs().unwrap(),
        vec![manual(UUID_B, PARENT)]
    );
}

#[test]
fn mdevs_attrs_keep_file_order() {
    let (_dir, paths) = host();
    put(
        &mdev_path(&paths, PARENT, NAME_A),
        r#"{"mdev_type": "t", "start": "auto", "attrs": [{"z": "1"}, {"a": "2"}]}"#,
    );
    let def = Store::new(&paths).mdev(UUID_A).unwrap().unwrap();
    assert_eq!(
        def.attrs,
        vec![
            ("z".to_owned(), "1".to_owned()),
            ("a".to_owned(), "2".to_owned())
        ]
    );
}

#[test]
fn mdevs_plain_text_file_is_json_error() {
    let (_dir, paths) = host();
    let path = mdev_path(&paths, PARENT, NAME_A);
    put(&path, "nvidia-222 auto\n");
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot parse definition {}", path.display())
    );
}

#[test]
fn mdevs_empty_file_is_json_error() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_A), "");
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(err, Error::DefinitionJson { .. }));
}

#[test]
fn mdevs_unknown_start_is_json_error_naming_variant() {
    let (_dir, paths) = host();
    put(
        &mdev_path(&paths, PARENT, NAME_A),
        r#"{"mdev_type": "nvidia-222", "start": "boot", "attrs": []}"#,
    );
    let err = Store::new(&paths).mdevs().unwrap_err();
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert_eq!(
        source,
        "unknown variant `boot`, expected `auto` or `manual` at line 1 column 43"
    );
}

#[test]
fn mdevs_missing_type_is_json_error() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_A), r#"{"start": "auto"}"#);
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(err, Error::DefinitionJson { .. }));
}

#[test]
fn mdevs_non_uuid_name_is_definition_error() {
    let (_dir, paths) = host();
    let path = mdev_path(&paths, PARENT, "notes.txt");
    put(&path, MDEVCTL_MANUAL);
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: the name is not a lowercase hyphenated UUID",
            path.display()
        )
    );
}

#[test]
fn mdevs_uppercase_uuid_name_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &mdev_path(&paths, PARENT, &NAME_A.to_uppercase()),
        MDEVCTL_MANUAL,
    );
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(err, Error::Definition { .. }));
}

#[test]
fn mdevs_file_beside_parents_is_definition_error() {
    let (_dir, paths) = host();
    let path = mdevctl_dir(&paths).join("README");
    put(&path, "notes");
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: not a parent directory",
            path.display()
        )
    );
}

#[test]
fn mdevs_attr_with_two_entries_is_definition_error() {
    let (_dir, paths) = host();
    let path = mdev_path(&paths, PARENT, NAME_A);
    put(
        &path,
        r#"{"mdev_type": "t", "start": "auto", "attrs": [{"a": "1", "b": "2"}]}"#,
    );
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid definition {}: attribute 0 is not one name and its value",
            path.display()
        )
    );
}

#[test]
fn mdevs_attr_name_dotdot_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &mdev_path(&paths, PARENT, NAME_A),
        r#"{"mdev_type": "t", "start": "auto", "attrs": [{"..": "1"}]}"#,
    );
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(err, Error::Definition { .. }));
}

#[test]
fn mdevs_oversized_file_is_too_large() {
    let (_dir, paths) = host();
    let path = mdev_path(&paths, PARENT, NAME_A);
    put(&path, &" ".repeat(64 * 1024 + 1));
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 65536, .. }));
}

#[test]
fn mdevs_lenient_returns_good_definitions_and_each_error() {
    let (_dir, paths) = host();
    put(&mdev_path(&paths, PARENT, NAME_A), "garbage");
    put(&mdev_path(&paths, PARENT, NAME_B), MDEVCTL_MANUAL);
    put(&mdev_path(&paths, "0000:42:00.0", "not-a-uuid"), "{}");
    let (defs, errors) = Store::new(&paths).mdevs_lenient();
    let error_kinds: Vec<&str> = errors
        .iter()
        .map(|err| match err {
            Error::DefinitionJson { .. } => "json",
            Error::Definition { .. } => "definition",
            _ => "other",
        })
        .collect();
    assert_eq!(
        (defs, error_kinds),
        (vec![manual(UUID_B, PARENT)], vec!["json", "definition"])
    );
}

// ---- mdevctl's store: removing ----

#[test]
fn undefine_mdev_undefined_returns_false() {
    let (_dir, paths) = host();
    assert!(!Store::new(&paths).undefine_mdev(UUID_A).unwrap());
}

#[test]
fn undefine_mdev_defined_returns_true_and_removes_file() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    store.define_mdev(&manual(UUID_B, PARENT)).unwrap();
    let removed = store.undefine_mdev(UUID_A).unwrap();
    assert_eq!(
        (removed, names(&mdevctl_dir(&paths).join(PARENT))),
        (true, vec![NAME_B.to_owned()])
    );
}

#[test]
fn undefine_mdev_last_of_parent_removes_parent_dir() {
    let (_dir, paths) = host();
    let store = Store::new(&paths);
    fs::create_dir_all(mdevctl_dir(&paths).join("scripts.d/callouts")).unwrap();
    store.define_mdev(&manual(UUID_A, PARENT)).unwrap();
    store.undefine_mdev(UUID_A).unwrap();
    assert_eq!(names(&mdevctl_dir(&paths)), vec!["scripts.d".to_owned()]);
}

// ---- mdevctl itself on our store ----

/// A host whose `etc/mdevctl.d` mdevctl 1.2 accepts; fails the test when mdevctl is missing.
fn mdevctl_host() -> (TempDir, HostPaths) {
    vgpu_sim::peer::mdevctl_for_test();
    let (dir, paths) = host();
    vgpu_sim::peer::prepare_mdevctl_store(&mdevctl_dir(&paths)).unwrap();
    (dir, paths)
}

/// Runs `mdevctl ARGS` with the host's `etc/mdevctl.d` on `/etc/mdevctl.d`.
fn mdevctl(paths: &HostPaths, args: &[&str]) -> Output {
    vgpu_sim::peer::mdevctl(None, &mdevctl_dir(paths), args).unwrap()
}

#[test]
fn mdevctl_lists_definitions_written_by_store() {
    let (_dir, paths) = mdevctl_host();
    let store = Store::new(&paths);
    store.define_mdev(&with_attrs(UUID_A, PARENT)).unwrap();
    store.define_mdev(&manual(UUID_B, PARENT)).unwrap();
    let out = mdevctl(&paths, &["list", "--defined", "--dumpjson"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([{ PARENT: [
            { NAME_A: { "mdev_type": "nvidia-222", "start": "auto",
                        "attrs": [{ "remap": "on" }, { "x": "y" }] } },
            { NAME_B: { "mdev_type": "nvidia-223", "start": "manual", "attrs": [] } },
        ] }])
    );
}

#[test]
fn store_reads_definition_written_by_mdevctl() {
    let (_dir, paths) = mdevctl_host();
    let out = mdevctl(
        &paths,
        &["define", "-u", NAME_B, "-p", PARENT, "-t", "nvidia-223"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        Store::new(&paths).mdevs().unwrap(),
        vec![manual(UUID_B, PARENT)]
    );
}

#[test]
fn mdevctl_undefine_of_store_definition_empties_store() {
    let (_dir, paths) = mdevctl_host();
    Store::new(&paths)
        .define_mdev(&with_attrs(UUID_A, PARENT))
        .unwrap();
    let out = mdevctl(&paths, &["undefine", "-u", NAME_A]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(Store::new(&paths).mdevs().unwrap(), Vec::new());
}

// ---- our store: SR-IOV ----

#[test]
fn define_sriov_writes_versioned_json() {
    let (_dir, paths) = host();
    let def = SriovDefinition {
        pf: addr("0000:41:00.0"),
        num_vfs: 4,
        drivers_autoprobe: Some(false),
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
    };
    let first = SriovDefinition {
        pf: addr("0000:41:00.0"),
        num_vfs: 4,
        drivers_autoprobe: Some(true),
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
    assert!(matches!(err, Error::DefinitionJson { .. }));
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
    assert!(matches!(err, Error::Definition { .. }));
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
        })
        .unwrap();
    let first = store.undefine_sriov(pf).unwrap();
    let second = store.undefine_sriov(pf).unwrap();
    assert_eq!((first, second), (true, false));
}

// ---- our store: vendor-VFIO types on VFs ----

#[test]
fn define_vf_vgpu_writes_versioned_json() {
    let (_dir, paths) = host();
    let def = VfVgpuDefinition {
        vf: addr("0000:41:00.4"),
        gpu: addr("0000:41:00.0"),
        type_id: 1151,
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
        vf: addr("0000:41:00.4"),
        gpu: addr("0000:41:00.0"),
        type_id: 1151,
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
    assert!(matches!(err, Error::DefinitionJson { .. }));
}

#[test]
fn vf_vgpus_bad_gpu_address_is_json_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/vf-vgpus/0000:41:00.4.json"),
        r#"{"version": 1, "gpu": "41:00.0", "type_id": 1151, "start": "auto"}"#,
    );
    let err = Store::new(&paths).vf_vgpus().unwrap_err();
    assert!(matches!(err, Error::DefinitionJson { .. }));
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
    assert!(matches!(err, Error::Definition { .. }));
}

#[test]
fn bindings_driver_dotdot_in_file_is_definition_error() {
    let (_dir, paths) = host();
    put(
        &paths.root().join("etc/vgpu/bindings/0000:00:02.1.json"),
        r#"{"version": 1, "driver": "..", "previous_driver": null, "start": "auto"}"#,
    );
    let err = Store::new(&paths).bindings().unwrap_err();
    assert!(matches!(err, Error::Definition { .. }));
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

// ---- host lock ----

#[test]
fn lock_held_second_acquire_times_out() {
    let (_dir, paths) = host();
    let _held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    let err = HostLock::acquire(&paths, Duration::from_millis(30)).unwrap_err();
    assert!(matches!(
        err,
        Error::Locked { ref path, .. } if *path == paths.root().join("run/vgpu/lock")
    ));
}

#[test]
fn lock_timeout_message_names_path_and_holder() {
    let (_dir, paths) = host();
    let _held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    let err = HostLock::acquire(&paths, Duration::ZERO).unwrap_err();
    let lock = paths.root().join("run/vgpu/lock");
    assert!(err.to_string().starts_with(&format!(
        "another vgpuctl holds {} (waited ",
        lock.display()
    )));
}

#[test]
fn lock_dropped_second_acquire_succeeds() {
    let (_dir, paths) = host();
    let held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    drop(held);
    assert!(HostLock::acquire(&paths, Duration::ZERO).is_ok());
}

#[test]
fn lock_released_while_waiting_is_taken() {
    let (_dir, paths) = host();
    let held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
    });
    let taken = HostLock::acquire(&paths, Duration::from_secs(10));
    releaser.join().unwrap();
    assert!(taken.is_ok());
}

#[test]
fn lock_creates_private_dir_and_file() {
    let (_dir, paths) = host();
    let lock = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    assert_eq!(
        (mode(lock.path()), mode(&paths.root().join("run/vgpu"))),
        (0o600, 0o700)
    );
}

// ---- audit log ----

fn entry(action: &str) -> AuditEntry {
    AuditEntry {
        time: "2026-11-30T01:02:03.456Z".to_owned(),
        uid: 1000,
        command: "vgpuctl create 0000:41:00.0 nvidia-222".to_owned(),
        action: action.to_owned(),
        device: format!("0000:41:00.0/{NAME_A}"),
        result: "ok".to_owned(),
    }
}

fn audit_lines(paths: &HostPaths) -> Vec<String> {
    fs::read_to_string(paths.root().join("var/log/vgpu/audit.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn audit_record_writes_one_json_line_with_exact_fields() {
    let (_dir, paths) = host();
    AuditLog::open(&paths)
        .unwrap()
        .record(&entry("create-mdev"))
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(&audit_lines(&paths)[0]).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "time": "2026-11-30T01:02:03.456Z",
            "uid": 1000,
            "command": "vgpuctl create 0000:41:00.0 nvidia-222",
            "action": "create-mdev",
            "device": format!("0000:41:00.0/{NAME_A}"),
            "result": "ok",
        })
    );
}

#[test]
fn audit_two_records_append_in_order() {
    let (_dir, paths) = host();
    let log = AuditLog::open(&paths).unwrap();
    log.record(&entry("create-mdev")).unwrap();
    log.record(&entry("define-mdev")).unwrap();
    let actions: Vec<AuditEntry> = audit_lines(&paths)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(actions, vec![entry("create-mdev"), entry("define-mdev")]);
}

#[test]
fn audit_reopened_log_appends_after_existing_lines() {
    let (_dir, paths) = host();
    AuditLog::open(&paths)
        .unwrap()
        .record(&entry("first"))
        .unwrap();
    AuditLog::open(&paths)
        .unwrap()
        .record(&entry("second"))
        .unwrap();
    assert_eq!(audit_lines(&paths).len(), 2);
}

#[test]
fn audit_multiline_result_stays_one_line() {
    let (_dir, paths) = host();
    let mut failed = entry("create-mdev");
    failed.result = "cannot write\nno capacity left".to_owned();
    AuditLog::open(&paths).unwrap().record(&failed).unwrap();
    assert_eq!(audit_lines(&paths).len(), 1);
}

#[test]
fn audit_log_file_is_under_var_log_vgpu() {
    let (_dir, paths) = host();
    let log = AuditLog::open(&paths).unwrap();
    assert_eq!(
        log.path(),
        paths.root().join("var/log/vgpu/audit.jsonl").as_path()
    );
}

#[test]
fn audit_unopenable_log_is_update_error() {
    let (_dir, paths) = host();
    fs::create_dir_all(paths.root().join("var/log/vgpu/audit.jsonl")).unwrap();
    let err = AuditLog::open(&paths).unwrap_err();
    assert!(matches!(err, Error::Update { action: "open", .. }));
}

#[test]
fn audit_entry_now_has_rfc3339_millisecond_time() {
    let now = AuditEntry::now("vgpuctl restore", "restore", "-", "ok");
    let shape: String = now
        .time
        .chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect();
    assert_eq!(shape, "0000-00-00T00:00:00.000Z");
}

fn at_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

#[test]
fn rfc3339_epoch_is_1970() {
    assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
}

#[test]
fn rfc3339_leap_day_last_millisecond() {
    assert_eq!(
        rfc3339_utc(at_millis(1_709_251_199_999)),
        "2024-02-29T23:59:59.999Z"
    );
}

#[test]
fn rfc3339_century_leap_day() {
    assert_eq!(
        rfc3339_utc(at_millis(951_825_600_000)),
        "2000-02-29T12:00:00.000Z"
    );
}

#[test]
fn rfc3339_non_leap_century_goes_to_march() {
    assert_eq!(
        rfc3339_utc(at_millis(4_107_542_400_000)),
        "2100-03-01T00:00:00.000Z"
    );
}

#[test]
fn rfc3339_example_from_docs() {
    assert_eq!(
        rfc3339_utc(at_millis(1_796_000_523_456)),
        "2026-11-30T01:02:03.456Z"
    );
}

#[test]
fn rfc3339_before_epoch_counts_back() {
    assert_eq!(
        rfc3339_utc(UNIX_EPOCH - Duration::from_secs(1)),
        "1969-12-31T23:59:59.000Z"
    );
}
