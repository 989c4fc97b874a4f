//! The host lock and the audit log.

use super::*;
use crate::error::{HostError, StateError};

// ---- host lock ----

#[test]
fn lock_held_second_acquire_times_out() {
    let (_dir, paths) = host();
    let _held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    let err = HostLock::acquire(&paths, Duration::from_millis(30)).unwrap_err();
    assert!(matches!(
        err,
        Error::State(StateError::Locked { ref path, .. }) if *path == paths.root().join("run/vgpu/lock")
    ));
}

#[test]
fn lock_timeout_message_names_path_and_holder() {
    let (_dir, paths) = host();
    let _held = HostLock::acquire(&paths, Duration::ZERO).unwrap();
    let err = HostLock::acquire(&paths, Duration::ZERO).unwrap_err();
    let lock = paths.root().join("run/vgpu/lock");
    assert!(err.to_string().starts_with(&format!(
        "another vgpu process holds {} (waited ",
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
    let found_held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = std::sync::Arc::clone(&found_held);
    let releaser = std::thread::spawn(move || {
        // Released once the acquire below has found the lock held: it is waiting then.
        let waiting = vgpu_testing::wait_for(Duration::from_secs(10), || {
            seen.load(std::sync::atomic::Ordering::SeqCst)
        });
        drop(held);
        waiting
    });
    let taken = HostLock::acquire_watched(&paths, Duration::from_secs(10), &mut || {
        found_held.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let waited = releaser.join().unwrap();
    assert_eq!((waited, taken.is_ok()), (true, true));
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
    assert!(matches!(
        err,
        Error::Host(HostError::Update { action: "open", .. })
    ));
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

/// A record an earlier failure left without its newline does not swallow the next one.
#[test]
fn audit_record_after_a_partial_one_starts_a_line_of_its_own() {
    let (_dir, paths) = host();
    let log = AuditLog::open(&paths).unwrap();
    log.record(&entry("first")).unwrap();
    let path = AuditLog::path_for(&paths);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"time\"").unwrap();

    log.record(&entry("second")).unwrap();

    let lines = audit_lines(&paths);
    let parsed: Vec<Option<AuditEntry>> = lines
        .iter()
        .map(|line| serde_json::from_str(line).ok())
        .collect();
    assert_eq!(
        parsed,
        vec![Some(entry("first")), None, Some(entry("second"))],
        "{lines:?}"
    );
}

/// The state root on a tmpfs filled to the last byte: the record that does not fit is refused
/// and leaves nothing behind; once space is freed, records append as valid JSON lines.
#[test]
fn audit_record_on_a_full_disk_leaves_no_partial_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = match vgpu_testing::disk::Tmpfs::mount(dir.path(), "64k") {
        Ok(disk) => disk,
        Err(err) => {
            assert!(std::env::var_os("CI").is_none(), "{err}");
            #[allow(clippy::print_stderr)] // a test telling why it skips
            {
                eprintln!("skipped: cannot mount a tmpfs (root and mount(8) are needed): {err}");
            }
            return;
        }
    };
    let paths = HostPaths::new(dir.path());
    let log = AuditLog::open(&paths).unwrap();
    log.record(&entry("before")).unwrap();
    // tmpfs allocates whole pages: end the log 50 bytes short of a page boundary (a blank
    // line), so that the next record fits only in part once no page is free.
    let path = AuditLog::path_for(&paths);
    let len = std::fs::metadata(&path).unwrap().len();
    let pad = usize::try_from(4096 - 50 - len).unwrap();
    let mut blank = vec![b' '; pad - 1];
    blank.push(b'\n');
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap(),
        &blank,
    )
    .unwrap();
    disk.fill().unwrap();
    let len_before = std::fs::metadata(&path).unwrap().len();

    let full = log.record(&entry("while-full"));
    let len_after = std::fs::metadata(&path).unwrap().len();
    disk.free().unwrap();
    log.record(&entry("after")).unwrap();

    let parsed: Vec<AuditEntry> = audit_lines(&paths)
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        (full.is_err(), len_after, parsed),
        (true, len_before, vec![entry("before"), entry("after")])
    );
}
