//! A session's end: `finish` waits for udev and audits the wait; `Drop` waits for nothing.

use super::*;
use crate::state::audit::AuditLog;

/// A session on an empty host root, with `release_timeout`.
fn open(dir: &tempfile::TempDir, release_timeout: Duration) -> (HostPaths, Session) {
    let paths = HostPaths::new(dir.path());
    let session = Session::open(
        &paths,
        "session test",
        SessionOptions {
            lock_timeout: Duration::ZERO,
            sriov: SriovOptions::default(),
            force: false,
            release_timeout,
            nvml: NvmlSource::default(),
            references: crate::manager::DomainReferences::NoLibvirt,
        },
    )
    .unwrap();
    (paths, session)
}

/// A session that owes a wait for udev: the kernel sent an event (for
/// `/devices/test/0000:00:00.0`) that udev never processes. A session that waits for it
/// waits the whole `release_timeout`.
fn owing_udev(dir: &tempfile::TempDir, release_timeout: Duration) -> (HostPaths, Session) {
    let (paths, session) = open(dir, release_timeout);
    let settle = Settle::unfinished_for_test(u64::MAX, "/devices/test/0000:00:00.0").unwrap();
    *session.settle.lock().unwrap() = Some(settle);
    (paths, session)
}

/// The `udev-settle` records of the audit log: their results.
fn settle_records(paths: &HostPaths) -> Vec<String> {
    let log = std::fs::read_to_string(AuditLog::path_for(paths)).unwrap();
    log.lines()
        .map(|line| serde_json::from_str::<crate::state::audit::AuditEntry>(line).unwrap())
        .filter(|entry| entry.action == "udev-settle")
        .map(|entry| entry.result)
        .collect()
}

#[test]
fn session_dropped_without_finish_skips_the_udev_wait_and_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, session) = owing_udev(&dir, Duration::from_secs(3600));
    drop(session);
    let relocked = HostLock::acquire(&paths, Duration::ZERO).map(drop);
    assert_eq!(
        (relocked.is_ok(), settle_records(&paths)),
        (
            true,
            vec![format!(
                "{SETTLE_SKIPPED}; udev had not finished with /devices/test/0000:00:00.0 \
                 (uevent {})",
                u64::MAX
            )]
        )
    );
}

#[test]
fn session_finished_waits_for_udev_and_audits_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, session) = owing_udev(&dir, Duration::ZERO);
    session.finish();
    let relocked = HostLock::acquire(&paths, Duration::ZERO).map(drop);
    assert_eq!(
        (relocked.is_ok(), settle_records(&paths)),
        (
            true,
            vec![format!(
                "udev's processing of /devices/test/0000:00:00.0 (uevent {}) did not happen \
                 within 0 ms (watching {})",
                u64::MAX,
                paths.sys().join("devices/test/0000:00:00.0").display()
            )]
        )
    );
}

#[test]
fn session_finished_with_nothing_owed_records_no_udev_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, session) = open(&dir, Duration::from_secs(3600));
    session.record("test", "host", "ok");
    session.finish();
    assert_eq!(settle_records(&paths), Vec::<String>::new());
}
