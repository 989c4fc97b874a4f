//! Frame-buffer scrubbing on free as the simulated NVIDIA driver's registry sets it
//! (`RMDisableScrubOnFree` in `proc/driver/nvidia/params`, through the simulator's
//! `nvidia-registry` control line): the isolation report's scrubbing line and `check`'s
//! `scrub-on-free` finding.

use std::process::Output;

use crate::common::{self, Host, host};

/// The simulated `mixed` host's L40S.
const L40S: &str = "0000:5e:00.0";

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines of `out` that start with `prefix` (after their indentation).
fn lines_starting(out: &Output, prefix: &str) -> Vec<String> {
    stdout(out)
        .lines()
        .filter(|l| l.trim_start().starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// The `mixed` host with the registry line `line` set to `value`.
fn with_registry(line: &str, value: &str) -> Host {
    let h = host("mixed");
    h.sim
        .control(&format!("nvidia-registry {line} {value}"))
        .unwrap();
    h
}

/// The L40S's `scrub` object of `vgpuctl isolation 5e:00.0 --json`, with the exit code.
fn scrub_json(h: &Host) -> (Option<i32>, serde_json::Value) {
    let out = common::vgpuctl(h, &["isolation", "5e:00.0", "--json"]);
    let json = common::json(&out);
    (
        out.status.code(),
        json["gpus"][0]["nvidia"]["scrub"].clone(),
    )
}

#[test]
fn isolation_json_registry_unset_scrubs_by_default() {
    let h = host("mixed");

    assert_eq!(
        scrub_json(&h),
        (
            Some(0),
            serde_json::json!({
                "status": "partial",
                "fact": {
                    "name": "scrub-on-free",
                    "value": "on",
                    "source": "procfs",
                    "detail": "RMDisableScrubOnFree is not set"
                },
                "residual_risk":
                    "scrub on free (driver default); NVIDIA does not document a guarantee"
            })
        )
    );
}

#[test]
fn isolation_json_registry_per_device_set_is_not_provided() {
    let h = with_registry(
        "RegistryDwordsPerDevice",
        &format!("pci={L40S};RMDisableScrubOnFree=1"),
    );

    assert_eq!(
        scrub_json(&h),
        (
            Some(0),
            serde_json::json!({
                "status": "not-provided",
                "fact": {
                    "name": "scrub-on-free",
                    "value": "off",
                    "source": "procfs",
                    "detail": "RMDisableScrubOnFree in RegistryDwordsPerDevice"
                },
                "residual_risk": "frame buffer is not cleared when a vGPU is freed"
            })
        )
    );
}

#[test]
fn isolation_table_registry_dwords_set_shows_scrub_off() {
    let h = with_registry("RegistryDwords", "RMDisableScrubOnFree=1");

    let out = common::vgpuctl(&h, &["isolation", "5e:00.0"]);

    assert_eq!(
        (out.status.code(), lines_starting(&out, "scrubbing")),
        (
            Some(0),
            vec![
                "  scrubbing         not-provided  scrub-on-free=off (RMDisableScrubOnFree in \
                 RegistryDwords) [procfs]"
                    .to_owned()
            ]
        )
    );
}

#[test]
fn check_registry_dwords_set_warns_naming_every_nvidia_gpu() {
    let h = with_registry("RegistryDwords", "RmPVMRL=0x30;RMDisableScrubOnFree=1");

    let out = common::vgpuctl(&h, &["check"]);

    assert_eq!(
        (out.status.code(), lines_starting(&out, "scrub-on-free")),
        (
            Some(0),
            vec![
                "scrub-on-free        warn    RMDisableScrubOnFree is set: frame buffer is not \
                 cleared when a vGPU is freed on 0000:3b:00.0, 0000:5e:00.0, 0000:af:00.0"
                    .to_owned(),
                "  scrub-on-free: remove RMDisableScrubOnFree from the nvidia module's \
                 NVreg_RegistryDwords"
                    .to_owned()
            ]
        )
    );
}

#[test]
fn check_registry_per_device_set_warns_naming_that_gpu() {
    let h = with_registry(
        "RegistryDwordsPerDevice",
        &format!("pci={L40S};RMDisableScrubOnFree=1"),
    );

    let out = common::vgpuctl(&h, &["check", "--json"]);
    let json = common::json(&out);
    let check = json["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "scrub-on-free"))
        .cloned();

    assert_eq!(
        check,
        Some(serde_json::json!({
            "id": "scrub-on-free",
            "status": "warn",
            "summary": "RMDisableScrubOnFree is set: frame buffer is not cleared when a vGPU \
                        is freed on 0000:5e:00.0",
            "remedy": "remove RMDisableScrubOnFree from the nvidia module's NVreg_RegistryDwords"
        }))
    );
}

#[test]
fn check_registry_unset_passes() {
    let h = host("mixed");

    let out = common::vgpuctl(&h, &["check"]);

    assert_eq!(
        lines_starting(&out, "scrub-on-free"),
        vec![
            "scrub-on-free        pass    the NVIDIA driver clears a freed vGPU's frame buffer \
             (its default)"
                .to_owned()
        ]
    );
}
