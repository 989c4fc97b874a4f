//! `vgpuctl` killed (SIGKILL, which it cannot catch) while it has a device off its driver,
//! then `restore`: no device is left without the driver that its definition or the state
//! before the change names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::common::*;
use vgpu_sim::{FsOp, KernelOp, LatencyOp};

/// The Flex 170 as one 8 GiB VF and four 2 GiB ones, kept on i915 (`vf_driver = "default"`)
/// and defined, so that `restore` knows them.
const FLEX_HOST: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"default\"\nsizes = [\"8GiB\", \"4x2GiB\"]\n";

/// The same sizes, each VF bound to vfio-pci for a guest.
const FLEX_GUESTS: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\nmodel = \"Flex 170\"\nvf_driver = \"vfio-pci\"\nsizes = [\"8GiB\", \"4x2GiB\"]\n";

/// The VF whose quota is lowered first.
const VF2: &str = "0000:4d:00.2";

fn write_file(h: &Host, name: &str, text: &str) -> String {
    let file = h.state.path().join(name);
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_owned()
}

fn driver_link(h: &Host, address: &str) -> PathBuf {
    h.sim
        .root()
        .join("sys/bus/pci/devices")
        .join(address)
        .join("driver")
}

/// The driver the simulated kernel has `address` on.
fn driver_of(h: &Host, address: &str) -> Option<String> {
    std::fs::read_link(driver_link(h, address))
        .ok()
        .and_then(|t| Some(t.file_name()?.to_str()?.to_owned()))
}

/// Polls until `ready` holds, with a deadline.
fn wait_until(what: &str, ready: impl FnMut() -> bool) {
    assert!(
        vgpu_testing::wait_for(Duration::from_secs(20), ready),
        "{what} did not happen"
    );
}

fn kill(mut child: Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
}

/// The record of `address`'s host driver that `vgpuctl` keeps while it has the device.
fn record(h: &Host, address: &str) -> PathBuf {
    h.state
        .path()
        .join("run/vgpu/previous-driver")
        .join(address)
}

/// `FLEX_HOST` applied on a fresh `flex-sriov` and killed once VF 2, off i915, has its
/// quota, while the rebind is slowed down by 15 s. The rebind's probe, in flight in the
/// simulator, completes after that; by then what the test runs next has given VF 2 a driver,
/// and a probe of a bound VF changes nothing.
///
/// A kill that lands once `apply` is inside the probe's write cannot take effect until the
/// simulator answers it (the kernel waits for a FUSE reply it has sent), so VF 2 is back on
/// i915 before the test looks. Reads of links are slowed down to 50 ms, so the test sees the
/// quota's line before that. A try that still gets the CPU too late is made again on a fresh
/// host, three times at most; the host returned always has VF 2 off its driver.
fn killed_in_the_quota_phase() -> (Host, String) {
    for _ in 0..3 {
        let (h, file) = killed_once_in_the_quota_phase();
        if driver_of(&h, VF2).is_none() {
            return (h, file);
        }
    }
    panic!("three kills of apply all came after VF 2's rebind had started");
}

/// One try of [`killed_in_the_quota_phase`].
fn killed_once_in_the_quota_phase() -> (Host, String) {
    let h = host("flex-sriov");
    let file = write_file(&h, "host.toml", FLEX_HOST);
    h.sim
        .set_latency(
            LatencyOp::Kernel(KernelOp::Probe),
            Duration::from_millis(15_000),
        )
        .unwrap();
    // Between the quota's audit line and the probe, the rebind reads VF 2's driver link: slowed
    // down, it gives the test time to see the line and kill before the probe is sent.
    h.sim
        .set_latency(LatencyOp::Fs(FsOp::Readlink), Duration::from_millis(50))
        .unwrap();
    let child = command(&h, &["apply", "-f", &file])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The quota step is audited once written; the rebind after it waits on the latency.
    let audit = h.state.path().join("var/log/vgpu/audit.jsonl");
    wait_until("the quota of VF 2", || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"action\":\"lmem-quota\"") && l.contains(VF2))
    });
    kill(child);
    h.sim.control("clear").unwrap();
    (h, file)
}

fn i915(mib: u64) -> (serde_json::Value, serde_json::Value) {
    (serde_json::json!(mib), serde_json::json!("i915"))
}

/// The quota of VF 2 was defined before it was set, those of the others not yet: `restore`
/// gives VF 2 back to i915 first, finds its quota set, and the next `apply` finishes the rest.
#[test]
fn restore_gives_a_vf_killed_off_its_driver_back_and_apply_then_finishes() {
    let (h, file) = killed_in_the_quota_phase();
    let left = driver_of(&h, VF2);

    let restored = vgpuctl(&h, &["restore", "--json"]);
    let report = json(&restored);
    let steps: Vec<_> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["action"].clone(),
                s["device"].clone(),
                s["outcome"].clone(),
            )
        })
        .collect();
    let restored_vfs = flex_vfs(&h);
    let applied = vgpuctl(&h, &["apply", "-f", &file]);
    let asserted = vgpuctl(&h, &["assert", "-f", &file]);

    let step = |action: &str, device: &str, outcome: &str| {
        (
            serde_json::json!(action),
            serde_json::json!(device),
            serde_json::json!(outcome),
        )
    };
    assert_eq!(
        (
            left,
            restored.status.code(),
            steps,
            restored_vfs,
            applied.status.code(),
            asserted.status.code(),
            flex_vfs(&h),
            record(&h, VF2).exists()
        ),
        (
            None,
            Some(0),
            vec![
                step("driver", VF2, "created"),
                step("sriov", FLEX, "unchanged"),
                step("quota", VF2, "unchanged"),
            ],
            vec![i915(3276), i915(2048), i915(3276), i915(3276), i915(3276)],
            Some(0),
            Some(0),
            vec![i915(8192), i915(2048), i915(2048), i915(2048), i915(2048)],
            false
        )
    );
}

#[test]
fn a_vf_killed_off_its_driver_and_then_bound_for_a_guest_goes_back_to_i915() {
    let (h, _) = killed_in_the_quota_phase();
    let guests = write_file(&h, "guests.toml", FLEX_GUESTS);
    let applied = vgpuctl(&h, &["apply", "-f", &guests]);
    let binding: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            h.state
                .path()
                .join("etc/vgpu/bindings")
                .join(format!("{VF2}.json")),
        )
        .unwrap(),
    )
    .unwrap();

    let unbound = vgpuctl(&h, &["unbind", VF2]);

    assert_eq!(
        (
            applied.status.code(),
            &binding["previous_driver"],
            unbound.status.code(),
            String::from_utf8_lossy(&unbound.stdout).into_owned(),
            driver_of(&h, VF2)
        ),
        (
            Some(0),
            &serde_json::json!("i915"),
            Some(0),
            format!("{VF2}: now i915\n"),
            Some("i915".to_owned())
        )
    );
}

// ----- a signal at points spread over a whole `apply` -----

const L40S_HOST: &str = "version = 1\n[configs.default]\npersistence = \"auto\"\n[[configs.default.gpu]]\nmodel = \"L40S\"\ntypes = { \"L40S-12Q\" = 4 }\n";

/// The audit log's records.
fn audited(h: &Host) -> usize {
    std::fs::read_to_string(h.state.path().join("var/log/vgpu/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// What a change can leave behind on each GPU: its driver, VF count, VFs (address, driver,
/// local memory), vGPUs and the definitions on it, by GPU address.
fn snapshot(h: &Host) -> BTreeMap<String, serde_json::Value> {
    let list = list(h);
    let defined = json(&vgpuctl(h, &["list", "--defined", "--json"]));
    let defined = defined["definitions"].as_array().unwrap();
    list["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let address = g["address"].as_str().unwrap().to_owned();
            let vfs: Vec<_> = g["vfs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|vf| serde_json::json!([vf["address"], vf["driver"], vf["memory_mib"]]))
                .collect();
            let vgpus: Vec<_> = g["vgpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| serde_json::json!([v["id"], v["type"]]))
                .collect();
            // A definition is the GPU's when it is on the GPU or on one of its VFs.
            let mine = |d: &&serde_json::Value| {
                let on = d["on"].as_str().or(d["id"].as_str()).unwrap_or("");
                on == address || vfs.iter().any(|vf| vf[0] == on)
            };
            let defs: Vec<_> = defined.iter().filter(mine).cloned().collect();
            let state = serde_json::json!([g["driver"], g["sriov"]["num_vfs"], vfs, vgpus, defs]);
            (address, state)
        })
        .collect()
}

/// A change to signal: the host, what readies it, the desired-state file, and the command
/// (`FILE` stands for the file's path).
struct Case<'a> {
    profile: &'a str,
    setup: &'a [&'a str],
    text: &'a str,
    args: &'a [&'a str],
}

impl Case<'_> {
    /// `apply -f FILE` of `text` on `profile`.
    const fn apply<'a>(profile: &'a str, setup: &'a [&'a str], text: &'a str) -> Case<'a> {
        Case {
            profile,
            setup,
            text,
            args: &["apply", "-f", "FILE"],
        }
    }

    /// The command line with the file's path.
    fn command_line<'a>(&'a self, file: &'a str) -> Vec<&'a str> {
        self.args
            .iter()
            .map(|a| if *a == "FILE" { file } else { a })
            .collect()
    }
}

/// A fresh host of the case's profile, each kernel step slowed down so that a signal lands
/// inside one, made ready by its setup, with its file written as `host.toml`.
fn slowed(case: &Case<'_>) -> (Host, String) {
    let h = host(case.profile);
    if !case.setup.is_empty() {
        assert_eq!(vgpuctl(&h, case.setup).status.code(), Some(0));
    }
    let file = write_file(&h, "host.toml", case.text);
    for (op, ms) in [
        (KernelOp::Probe, 30),
        (KernelOp::Unbind, 30),
        (KernelOp::Bind, 30),
        (KernelOp::VgpuCreate, 30),
        (KernelOp::SriovEnable, 100),
    ] {
        h.sim
            .set_latency(LatencyOp::Kernel(op), Duration::from_millis(ms))
            .unwrap();
    }
    (h, file)
}

/// What the whole command does on a fresh host of the case: the number of audit records it
/// writes, and the host before and after.
#[derive(Clone)]
struct WholeRun {
    records: usize,
    before: BTreeMap<String, serde_json::Value>,
    planned: BTreeMap<String, serde_json::Value>,
}

fn whole_run(case: &Case<'_>) -> WholeRun {
    let (h, file) = slowed(case);
    let before = snapshot(&h);
    let start = audited(&h);
    assert_eq!(
        vgpuctl(&h, &case.command_line(&file)).status.code(),
        Some(0)
    );
    WholeRun {
        records: audited(&h) - start,
        before,
        planned: snapshot(&h),
    }
}

/// [`whole_run`] once per case: the SIGKILL and the SIGINT test of a case share it. A fresh
/// simulated host of a profile is the same every time, so its run is too.
fn whole_run_once(case: &Case<'_>) -> WholeRun {
    type Runs = Mutex<BTreeMap<String, Arc<OnceLock<WholeRun>>>>;
    static RUNS: OnceLock<Runs> = OnceLock::new();
    let key = format!(
        "{} {:?} {:?} {:?}",
        case.profile, case.setup, case.text, case.args
    );
    let run = Arc::clone(
        RUNS.get_or_init(Runs::default)
            .lock()
            .unwrap()
            .entry(key)
            .or_default(),
    );
    run.get_or_init(|| whole_run(case)).clone()
}

/// About six kill points over a command that writes `records` audit records: after the first
/// record, then evenly to the last.
fn points(records: usize) -> impl Iterator<Item = usize> {
    (1..records).step_by(records.div_ceil(6).max(1))
}

/// Runs the case's command on a fresh host and sends `signal` once the audit log has `after`
/// more records; returns the host and the exit code.
fn signalled(
    case: &Case<'_>,
    signal: nix::sys::signal::Signal,
    after: usize,
) -> (Host, Option<i32>) {
    let (h, file) = slowed(case);
    let start = audited(&h);
    let mut child = command(&h, &case.command_line(&file))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the audit records", || {
        audited(&h) >= start + after || child.try_wait().unwrap().is_some()
    });
    // A child that ended already is not signalled: its pid may be another process's.
    if child.try_wait().unwrap().is_none() {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    }
    let code = child.wait().unwrap().code();
    h.sim.control("clear").unwrap();
    (h, code)
}

/// SIGKILL at each point, then `restore`: every VF has a driver, no record of a host driver
/// stands for a device without one, and a second `restore` changes nothing (the host is as
/// its definitions say).
fn killed_then_restored(case: &Case<'_>) {
    let profile = case.profile;
    let records = whole_run_once(case).records;
    let mut killed = 0;
    for after in points(records) {
        let (h, code) = signalled(case, nix::sys::signal::Signal::SIGKILL, after);
        let first = vgpuctl(&h, &["restore", "--json"]);
        let second = json(&vgpuctl(&h, &["restore", "--json"]));
        let changed: Vec<_> = second["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["outcome"] != "unchanged")
            .cloned()
            .collect();
        let list = list(&h);
        let driverless: Vec<_> = list["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["vfs"].as_array().unwrap().iter())
            .filter(|vf| vf["driver"].is_null())
            .map(|vf| vf["address"].clone())
            .collect();
        let record_files = std::fs::read_dir(h.state.path().join("run/vgpu/previous-driver"))
            .map(|d| d.count())
            .unwrap_or(0);
        let on_vfio = list["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["vfs"].as_array().unwrap().iter())
            .filter(|vf| vf["driver"] == "vfio-pci")
            .count();
        assert_eq!(
            (
                first.status.code(),
                changed,
                driverless,
                record_files <= on_vfio
            ),
            (Some(0), vec![], vec![], true),
            "{profile}, killed after {after} of {records} records: {}",
            String::from_utf8_lossy(&first.stdout)
        );
        killed += usize::from(code.is_none());
    }
    let tried = points(records).count();
    assert!(
        killed * 2 >= tried,
        "{profile}: only {killed} of {tried} points killed the command"
    );
}

/// SIGINT at each point: the command exits 130, or 0 when the signal came after the last
/// step, and each GPU is as it was or as planned, never in between: a GPU whose operation
/// had finished keeps it, the others are undone.
fn interrupted(case: &Case<'_>) {
    let profile = case.profile;
    let WholeRun {
        records,
        before,
        planned,
    } = whole_run_once(case);
    let mut stopped = 0;
    for after in points(records) {
        let (h, code) = signalled(case, nix::sys::signal::Signal::SIGINT, after);
        let after_signal = snapshot(&h);
        let all_planned = after_signal == planned;
        let between: Vec<_> = after_signal
            .into_iter()
            .filter(|(gpu, now)| Some(now) != before.get(gpu) && Some(now) != planned.get(gpu))
            .collect();
        assert_eq!(
            (
                code == Some(130) || (code == Some(0) && all_planned),
                between
            ),
            (true, vec![]),
            "{profile}, interrupted after {after} of {records} records, exit {code:?}"
        );
        stopped += usize::from(code == Some(130));
    }
    let tried = points(records).count();
    assert!(
        stopped * 2 >= tried,
        "{profile}: only {stopped} of {tried} points stopped the command"
    );
}

/// Three defined L40S-12Q on each L40S.
const PROVISION: &[&str] = &[
    "provision",
    "--all",
    "--type",
    "L40S-12Q",
    "--count",
    "3",
    "--define",
    "--auto",
];

/// The L40S at 0000:41:00.0 without VFs, for NVIDIA's SR-IOV sequence.
const L40S_NO_VFS: &[&str] = &["sriov", "0000:41:00.0", "--vfs", "0"];

#[test]
fn sigkill_at_points_of_a_quota_apply_then_restore_leaves_every_vf_on_a_driver() {
    killed_then_restored(&Case::apply("flex-sriov", &[], FLEX_HOST));
}

#[test]
fn sigkill_at_points_of_a_guest_vf_apply_then_restore_leaves_every_vf_on_a_driver() {
    killed_then_restored(&Case::apply("flex-sriov", &[], FLEX_GUESTS));
}

#[test]
fn sigkill_at_points_of_an_nvidia_sriov_apply_then_restore_matches_definitions() {
    killed_then_restored(&Case::apply("l40s-vendor-vfio", L40S_NO_VFS, L40S_HOST));
}

#[test]
fn sigint_at_points_of_a_quota_apply_leaves_the_host_as_before_or_as_planned() {
    interrupted(&Case::apply("flex-sriov", &[], FLEX_HOST));
}

#[test]
fn sigint_at_points_of_a_guest_vf_apply_leaves_the_host_as_before_or_as_planned() {
    interrupted(&Case::apply("flex-sriov", &[], FLEX_GUESTS));
}

#[test]
fn sigint_at_points_of_an_nvidia_sriov_apply_leaves_the_host_as_before_or_as_planned() {
    interrupted(&Case::apply("l40s-vendor-vfio", L40S_NO_VFS, L40S_HOST));
}

#[test]
fn sigint_at_points_of_nvidia_sriov_leaves_the_gpu_as_before_or_as_asked() {
    interrupted(&Case {
        profile: "l40s-vendor-vfio",
        setup: L40S_NO_VFS,
        text: "",
        args: &["sriov", "0000:41:00.0", "--vfs", "32", "--define"],
    });
}

#[test]
fn sigint_at_points_of_provision_leaves_each_gpu_as_before_or_as_asked() {
    interrupted(&Case {
        profile: "l40s-vendor-vfio",
        setup: &[],
        text: "",
        args: PROVISION,
    });
}

#[test]
fn sigkill_at_points_of_provision_then_restore_matches_definitions() {
    killed_then_restored(&Case {
        profile: "l40s-vendor-vfio",
        setup: &[],
        text: "",
        args: PROVISION,
    });
}

/// A record whose name is no PCI address is a failed `driver` step naming its file; a record
/// of a device the host no longer has is forgotten; neither stops the rest of `restore`.
#[test]
fn restore_reports_a_bad_driver_record_and_forgets_one_of_a_gone_device() {
    let h = host("flex-sriov");
    let records = h.state.path().join("run/vgpu/previous-driver");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::write(records.join("junk"), "i915").unwrap();
    std::fs::write(records.join("0000:4d:07.7"), "i915").unwrap();

    let restored = vgpuctl(&h, &["restore", "--json"]);

    let report = json(&restored);
    let step = &report["steps"][0];
    assert_eq!(
        (
            restored.status.code(),
            report["steps"].as_array().unwrap().len(),
            (&step["action"], &step["device"], &step["outcome"]),
            step["error"]
                .as_str()
                .unwrap()
                .contains(records.join("junk").to_str().unwrap()),
            records.join("0000:4d:07.7").exists(),
        ),
        (
            Some(1),
            1,
            (
                &serde_json::json!("driver"),
                &serde_json::json!("record"),
                &serde_json::json!("failed")
            ),
            true,
            false
        )
    );
}
