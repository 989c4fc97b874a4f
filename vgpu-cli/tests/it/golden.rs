//! `vgpuctl` output checked against golden files, and each command's exit code with it.
//!
//! Run with `VGPU_REGENERATE=1` to rewrite the files after an intended change, then review the
//! diff. Exit codes are pinned in the tests and still checked while regenerating.

use crate::common::assert_golden;
use clap::Parser;
use vgpu_cli::libvirt_facts::from_helper;
use vgpu_cli::{Cli, run_local};
use vgpu_testing::{FakeHost, scenarios};

/// Runs `vgpuctl <args>` against `host`; returns the exit code and the output.
fn vgpuctl(host: &FakeHost, args: &[&str]) -> (u8, String) {
    let root = host.root().to_string_lossy().into_owned();
    let argv = ["vgpuctl", "--root", root.as_str()]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("arguments parse");
    let mut out = Vec::new();
    let code = run_local(&cli, &mut out, from_helper).expect("command succeeds");
    // Paths under the temporary root differ between runs; golden files show them as <root>.
    let text = String::from_utf8(out)
        .expect("UTF-8 output")
        .replace(&root, "<root>");
    (code, text)
}

fn every_interface() -> FakeHost {
    let host = FakeHost::new().unwrap();
    scenarios::every_interface(&host).unwrap();
    host
}

#[test]
fn list_table_every_interface_host_matches_golden() {
    assert_golden(
        "list-every-interface.txt",
        0,
        vgpuctl(&every_interface(), &["list"]),
    );
}

#[test]
fn list_json_every_interface_host_matches_golden() {
    assert_golden(
        "list-every-interface.json",
        0,
        vgpuctl(&every_interface(), &["list", "--json"]),
    );
}

#[test]
fn types_table_every_interface_host_matches_golden() {
    assert_golden(
        "types-every-interface.txt",
        0,
        vgpuctl(&every_interface(), &["types"]),
    );
}

#[test]
fn types_json_one_gpu_matches_golden() {
    assert_golden(
        "types-l40s.json",
        0,
        vgpuctl(&every_interface(), &["types", "81:00.0", "--json"]),
    );
}

#[test]
fn check_table_every_interface_host_matches_golden() {
    assert_golden(
        "check-every-interface.txt",
        0,
        vgpuctl(&every_interface(), &["check"]),
    );
}

#[test]
fn check_json_every_interface_host_matches_golden() {
    assert_golden(
        "check-every-interface.json",
        0,
        vgpuctl(&every_interface(), &["check", "--json"]),
    );
}

fn no_iommu() -> FakeHost {
    let host = FakeHost::new().unwrap();
    host.cpu("fpu vmx sse").unwrap();
    host.write("proc/cmdline", "root=/dev/sda1 ro\n").unwrap();
    scenarios::t4_legacy(
        &host,
        &scenarios::T4Legacy {
            address: vgpu_testing::addr("0000:3b:00.0"),
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
    assert_golden("check-no-iommu.txt", 3, vgpuctl(&no_iommu(), &["check"]));
}
