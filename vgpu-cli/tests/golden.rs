//! `vgpuctl` output checked against golden files.
//!
//! Run with `VGPU_REGENERATE=1` to rewrite the files after an intended change, then review the
//! diff.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::{Path, PathBuf};

use clap::Parser;
use vgpu_cli::{Cli, run};
use vgpu_core::testing::{FakeHost, scenarios};

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Runs `vgpuctl <args>` against `host`; returns the exit code and the output.
fn vgpuctl(host: &FakeHost, args: &[&str]) -> (u8, String) {
    let root = host.root().to_string_lossy().into_owned();
    let argv = ["vgpuctl", "--root", root.as_str()]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("arguments parse");
    let mut out = Vec::new();
    let code = run(&cli, &mut out).expect("command succeeds");
    // Paths under the temporary root differ between runs; golden files show them as <root>.
    let text = String::from_utf8(out)
        .expect("UTF-8 output")
        .replace(&root, "<root>");
    (code, text)
}

fn assert_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("VGPU_REGENERATE").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (run with VGPU_REGENERATE=1)", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

fn every_interface() -> FakeHost {
    let host = FakeHost::new().unwrap();
    scenarios::every_interface(&host).unwrap();
    host
}

#[test]
fn list_table_every_interface_host_matches_golden() {
    let (code, out) = vgpuctl(&every_interface(), &["list"]);
    assert_eq!(code, 0);
    assert_golden("list-every-interface.txt", &out);
}

#[test]
fn list_json_every_interface_host_matches_golden() {
    let (code, out) = vgpuctl(&every_interface(), &["list", "--json"]);
    assert_eq!(code, 0);
    assert_golden("list-every-interface.json", &out);
}

#[test]
fn types_table_every_interface_host_matches_golden() {
    let (_, out) = vgpuctl(&every_interface(), &["types"]);
    assert_golden("types-every-interface.txt", &out);
}

#[test]
fn types_json_one_gpu_matches_golden() {
    let (_, out) = vgpuctl(&every_interface(), &["types", "81:00.0", "--json"]);
    assert_golden("types-l40s.json", &out);
}

#[test]
fn check_table_every_interface_host_matches_golden() {
    let (code, out) = vgpuctl(&every_interface(), &["check"]);
    assert_eq!(code, 0);
    assert_golden("check-every-interface.txt", &out);
}

#[test]
fn check_json_every_interface_host_matches_golden() {
    let (_, out) = vgpuctl(&every_interface(), &["check", "--json"]);
    assert_golden("check-every-interface.json", &out);
}

fn no_iommu() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.cpu("fpu vmx sse").unwrap();
    host.write("proc/cmdline", "root=/dev/sda1 ro\n").unwrap();
    scenarios::t4_legacy(
        &host,
        &scenarios::T4Legacy {
            address: vgpu_core::testing::addr("0000:3b:00.0"),
            group: 12,
            numa: 0,
            used: &[],
        },
    )
    .unwrap();
    host.remove("sys/devices/pci0000:3b/0000:3b:00.0/iommu_group")
        .unwrap();
    host.remove("sys/kernel/iommu_groups/12").unwrap();
    host
}

#[test]
fn check_table_no_iommu_matches_golden() {
    let (code, out) = vgpuctl(&no_iommu(), &["check"]);
    assert_eq!(code, 3);
    assert_golden("check-no-iommu.txt", &out);
}
