//! The `mixed` host the telemetry and migration tests share: vGPUs made, the test NVML
//! answering from `tests/data/fake-nvml-mixed.toml`, and libvirt's test driver holding the
//! domains of `tests/data/libvirt-mixed.xml`.

use std::path::{Path, PathBuf};
use std::process::Command;

use vgpu_testing::fake_nvml::FakeNvml;

use super::{Host, T4, UUID, host, stderr};

/// The L40S of the `mixed` host.
pub(crate) const L40S: &str = "0000:5e:00.0";
/// The Flex 170 whose VF the `mixed` host binds to `vfio-pci`.
pub(crate) const FLEX: &str = "0001:03:00.0";

/// A file of `tests/data`.
pub(crate) fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// libvirt's test driver holding `web-1` (tenant `acme`), `batch-3` (tenant `initech`) and
/// Nova's `server-7` (project `globex`).
pub(crate) fn libvirt_uri() -> String {
    format!("test://{}", data("libvirt-mixed.xml").display())
}

/// The two T4-2Q vGPUs `batch-3` holds.
pub(crate) const BATCH_3: [&str; 2] = [
    "9a3e5c71-2b4d-4f60-8e1a-3c5b7d9f0a21",
    "9a3e5c71-2b4d-4f60-8e1a-3c5b7d9f0a22",
];

/// The `mixed` host with a T4-2Q (`UUID`, held by `web-1`), two more (`BATCH_3`, held by
/// `batch-3`), an L40S-12Q on the first VF (held by `server-7`) and a Flex VF on `vfio-pci`
/// that no domain holds.
pub(crate) fn mixed() -> Host {
    let h = host("mixed");
    for args in [
        &["create", T4, "--type", "T4-2Q", "--uuid", UUID][..],
        &["create", T4, "--type", "T4-2Q", "--uuid", BATCH_3[0]],
        &["create", T4, "--type", "T4-2Q", "--uuid", BATCH_3[1]],
        &["create", L40S, "--type", "L40S-12Q"],
        &["sriov", FLEX, "--vfs", "2"],
        &["bind", "0001:03:00.1"],
    ] {
        let out = super::vgpuctl(&h, args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    h
}

pub(crate) fn fake_nvml() -> FakeNvml {
    FakeNvml::new(&std::fs::read_to_string(data("fake-nvml-mixed.toml")).unwrap()).unwrap()
}

/// `vgpuctl` on `h` with libvirt at `uri` and NVML from `nvml` (none: not loaded).
pub(crate) fn command(h: &Host, uri: &str, nvml: Option<&FakeNvml>, args: &[&str]) -> Command {
    let mut cmd = super::command(h, &["--connect", uri]);
    if let Some(nvml) = nvml {
        cmd.arg("--nvml-library").arg(nvml.library());
    }
    cmd.args(args)
        .env_remove("VGPU_NVML_LIBRARY")
        .env_remove("VGPU_CONNECT");
    cmd
}
