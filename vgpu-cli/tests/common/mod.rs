//! Helpers shared by the `vgpuctl` tests that change a simulated host.

// Each test binary uses its own subset of these helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::process::{Command, Output};

use vgpu_sim::SimHost;

pub(crate) const T4: &str = "0000:3b:00.0";
pub(crate) const FLEX: &str = "0000:4d:00.0";
pub(crate) const UUID: &str = "3b1c7e52-0a6d-4f8e-9c1b-2d4e6f8a0b1c";
pub(crate) const UUID_PEER: &str = "7d0f6a2e-5b3c-4e1d-8a9f-0c1b2d3e4f5a";

pub(crate) struct Host {
    pub(crate) sim: SimHost,
    pub(crate) state: tempfile::TempDir,
}

pub(crate) fn host(profile: &str) -> Host {
    let sim = SimHost::mount_for_test(profile);
    let state = tempfile::tempdir().unwrap();
    Host { sim, state }
}

pub(crate) fn command(host: &Host, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vgpuctl"));
    cmd.arg("--root")
        .arg(host.sim.root())
        .arg("--state-root")
        .arg(host.state.path());
    cmd.args(args)
        .env_remove("VGPU_ROOT")
        .env_remove("VGPU_STATE_ROOT");
    cmd
}

pub(crate) fn vgpuctl(host: &Host, args: &[&str]) -> Output {
    command(host, args).output().unwrap()
}

pub(crate) fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn list(host: &Host) -> serde_json::Value {
    json(&vgpuctl(host, &["list", "--json"]))
}

pub(crate) fn gpu<'a>(list: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    list["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == address)
        .unwrap()
}

pub(crate) fn vgpu_ids(host: &Host, address: &str) -> Vec<String> {
    let list = list(host);
    gpu(&list, address)["vgpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect()
}
