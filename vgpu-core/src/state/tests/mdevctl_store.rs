//! mdevctl's store (`etc/mdevctl.d`): writing, reading, removing, and mdevctl itself on it.

use super::*;
use crate::error::{HostError, StateError};

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
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn define_mdev_parent_scripts_dir_is_refused() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, "scripts.d"))
        .unwrap_err();
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

// Found by `round_trip::mdev_defined_reads_back_from_the_store`: the definition was written
// under a directory the listing skips, so nothing could read it back.
#[test]
fn define_mdev_hidden_parent_is_refused_and_nothing_written() {
    let (_dir, paths) = host();
    let err = Store::new(&paths)
        .define_mdev(&manual(UUID_A, ". "))
        .unwrap_err();
    let Error::State(StateError::Definition { reason, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (reason.as_str(), mdevctl_dir(&paths).exists()),
        ("parent \". \" is a hidden name", false)
    );
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
            "invalid definition {}: attribute \"../remove\" is not a path of file names under \
             the device",
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
        Error::Host(HostError::Update {
            action: "create directory",
            ..
        })
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
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
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
    assert!(matches!(
        err,
        Error::State(StateError::DefinitionJson { .. })
    ));
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
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
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
    assert!(matches!(err, Error::State(StateError::Definition { .. })));
}

#[test]
fn mdevs_oversized_file_is_too_large() {
    let (_dir, paths) = host();
    let path = mdev_path(&paths, PARENT, NAME_A);
    put(&path, &" ".repeat(64 * 1024 + 1));
    let err = Store::new(&paths).mdevs().unwrap_err();
    assert!(matches!(
        err,
        Error::Host(HostError::TooLarge { limit: 65536, .. })
    ));
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
            Error::State(StateError::DefinitionJson { .. }) => "json",
            Error::State(StateError::Definition { .. }) => "definition",
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
