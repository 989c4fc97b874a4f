//! `vgpuctl create --define` racing the real `mdevctl start` for the same GPU, 100 rounds on the
//! simulated A40 (mdev on SR-IOV VFs: each VF takes one vGPU, the A40-24Q two per GPU). The
//! host lock serialises `vgpuctl` only; the kernel's instance count arbitrates between the two
//! tools, and `vgpuctl` goes to the next VF when mdevctl took the one it chose. The A40 here has
//! 4 of its 32 VFs and 2 of its types, so that a round costs a tenth of what the full card's
//! discovery would: the race is the same.
//!
//! Both tools start at once (a barrier). mdevctl starts faster than vgpuctl reads the GPU, so
//! the time the simulated kernel takes to make an mdev (its `mdev-create` latency; NVIDIA's
//! driver takes a good part of a second) decides where mdevctl's write lands in vgpuctl's run:
//! done before vgpuctl reads (vgpuctl chooses another VF), or still in the kernel when vgpuctl
//! chooses the same VF (the kernel refuses vgpuctl's write, and vgpuctl tries the next VF or
//! finds the GPU full). The rounds go through several latencies to see each.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Barrier;
use std::time::Duration;

use crate::common::{Host, json, stderr, vgpuctl};
use uuid::Uuid;
use vgpu_sim::{KernelOp, LatencyOp, Profile, SimHost};

const A40: &str = "0000:41:00.0";
/// NVIDIA A40-24Q: two per GPU, one per VF.
const A40_24Q: &str = "nvidia-565";
const PER_GPU: usize = 2;
const ROUNDS: u32 = 100;
/// How long the kernel takes to make an mdev, in milliseconds, round after round.
const CREATE_MS: [u64; 5] = [0, 50, 100, 150, 250];

/// The `a40-vf-mdev` host with 4 VFs enabled and the A40-24Q and A40-48Q types.
fn small_a40() -> Host {
    let mut profile = Profile::builtin("a40-vf-mdev").unwrap();
    for device in &mut profile.devices {
        if let Some(sriov) = &mut device.sriov {
            sriov.total_vfs = 4;
            sriov.num_vfs = 4;
        }
    }
    profile
        .types
        .retain(|t| t.catalog != "a40" || ["nvidia-565", "nvidia-566"].contains(&t.id.as_str()));
    Host {
        sim: SimHost::mount_profile_for_test(profile),
        state: tempfile::tempdir().unwrap(),
    }
}

/// The VFs of the A40, in `virtfnN` order.
fn vfs(h: &Host) -> Vec<String> {
    let list = json(&vgpuctl(h, &["list", "--json"]));
    let gpu = common::gpu(&list, A40);
    gpu["vfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vf| vf["address"].as_str().unwrap().to_owned())
        .collect()
}

/// Every mediated device on the host, by UUID, with its parent: what the kernel's mdev bus
/// lists, read from the simulated sysfs.
fn mdevs(h: &Host) -> BTreeMap<String, String> {
    let bus = h.sim.root().join("sys/bus/mdev/devices");
    std::fs::read_dir(&bus)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let target = std::fs::canonicalize(entry.path()).unwrap();
            let parent = target.parent().unwrap().file_name().unwrap();
            (
                entry.file_name().into_string().unwrap(),
                parent.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// mdevctl's store, shared by both tools.
fn store(h: &Host) -> PathBuf {
    h.state.path().join("etc/mdevctl.d")
}

/// The parents under which the store defines `uuid`.
fn defined_under(store: &Path, uuid: &str) -> Vec<String> {
    let mut parents: Vec<String> = std::fs::read_dir(store)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.join(uuid).exists())
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    parents.sort();
    parents
}

/// Another tool makes a vGPU of the type on `parent` (the round's first vGPU, made before the
/// race), by writing to sysfs as mdevctl does.
fn make_on(h: &Host, parent: &str, uuid: Uuid) {
    let create = h
        .sim
        .root()
        .join("sys/bus/pci/devices")
        .join(parent)
        .join("mdev_supported_types")
        .join(A40_24Q)
        .join("create");
    std::fs::write(create, uuid.to_string()).unwrap();
}

/// Removes every mediated device and every definition, for the next round.
fn clear(h: &Host) {
    for uuid in mdevs(h).keys() {
        let remove = h
            .sim
            .root()
            .join("sys/bus/mdev/devices")
            .join(uuid)
            .join("remove");
        std::fs::write(remove, "1").unwrap();
    }
    for entry in std::fs::read_dir(store(h)).unwrap() {
        let dir = entry.unwrap().path();
        if dir.file_name().is_some_and(|n| n != "scripts.d") {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

/// What one round saw: who made a vGPU, and where.
struct Round {
    mdevctl: Output,
    vgpuctl: Output,
    /// The UUIDs each tool asked for.
    peer: String,
    ours: String,
}

/// Starts `mdevctl start` on `parent` and `vgpuctl create --define` on the A40 at once.
fn race(h: &Host, parent: &str) -> Round {
    let store = store(h);
    let peer = Uuid::new_v4().to_string();
    let ours = Uuid::new_v4().to_string();
    let start = Barrier::new(2);
    let (mdevctl, vgpuctl) = std::thread::scope(|scope| {
        let peer_run = scope.spawn(|| {
            start.wait();
            vgpu_sim::peer::mdevctl(
                Some(h.sim.root()),
                &store,
                &["start", "-u", &peer, "-p", parent, "-t", A40_24Q],
            )
            .unwrap()
        });
        let ours_run = scope.spawn(|| {
            start.wait();
            common::vgpuctl(
                h,
                &[
                    "create", A40, "--type", A40_24Q, "--uuid", &ours, "--define", "--json",
                ],
            )
        });
        (peer_run.join().unwrap(), ours_run.join().unwrap())
    });
    Round {
        mdevctl,
        vgpuctl,
        peer,
        ours,
    }
}

/// Checks the host after a round that began with `free` places for the type, mdevctl asking
/// for `target`: no VF holds two vGPUs, the GPU holds no more than the type allows, each tool's
/// vGPU is there exactly when the tool says it made it, vgpuctl's definition is there exactly
/// once (under the VF it made the vGPU on) when it made one and nowhere when it did not, and
/// vgpuctl fails only when the GPU is full, saying so.
fn check(h: &Host, round: u32, free: usize, target: &str, seen: &Round) {
    let mdevs = mdevs(h);
    let context = format!(
        "round {round}: mdevctl {:?} {}, vgpuctl {:?} {}; mdevs {mdevs:?}",
        seen.mdevctl.status.code(),
        stderr(&seen.mdevctl),
        seen.vgpuctl.status.code(),
        String::from_utf8_lossy(&seen.vgpuctl.stdout),
    );
    let mut per_parent: BTreeMap<&str, usize> = BTreeMap::new();
    for parent in mdevs.values() {
        *per_parent.entry(parent).or_default() += 1;
    }
    assert!(per_parent.values().all(|n| *n == 1), "{context}");
    assert!(mdevs.len() <= PER_GPU, "{context}");

    let peer_made = seen.mdevctl.status.success();
    assert_eq!(mdevs.contains_key(&seen.peer), peer_made, "{context}");

    let answer = json(&seen.vgpuctl);
    let defined = defined_under(&store(h), &seen.ours);
    if seen.vgpuctl.status.success() {
        let parent = answer["placement"]["parent"].as_str().unwrap();
        assert_eq!(
            (mdevs.get(&seen.ours).map(String::as_str), defined),
            (Some(parent), vec![parent.to_owned()]),
            "{context}"
        );
    } else {
        assert_eq!(
            (
                answer["kind"].as_str(),
                mdevs.contains_key(&seen.ours),
                defined,
                mdevs.len()
            ),
            (Some("no-capacity"), false, Vec::<String>::new(), PER_GPU),
            "{context}"
        );
    }
    // mdevctl asks for one VF and does not look further: it fails only when vgpuctl took it.
    if !peer_made {
        assert_eq!(mdevs.get(&seen.ours), Some(&target.to_owned()), "{context}");
    }
    // vgpuctl looks further: with room for both, it always makes one.
    if free == PER_GPU {
        assert!(seen.vgpuctl.status.success(), "{context}");
    }
}

#[test]
fn create_racing_mdevctl_start_never_double_allocates_or_leaks_a_definition() {
    vgpu_sim::peer::mdevctl_for_test();
    let h = small_a40();
    vgpu_sim::peer::prepare_mdevctl_store(&store(&h)).unwrap();
    let vfs = vfs(&h);
    let create = LatencyOp::Kernel(KernelOp::MdevCreate);
    for round in 0..ROUNDS {
        h.sim.set_latency(create, Duration::ZERO).unwrap();
        // Even rounds race for an empty GPU (room for both); odd ones for its last place,
        // after another tool made a vGPU on the first VF. mdevctl asks for the first free VF,
        // the one vgpuctl chooses too.
        let free = if round % 2 == 0 {
            PER_GPU
        } else {
            make_on(&h, &vfs[0], Uuid::new_v4());
            PER_GPU - 1
        };
        let latency = CREATE_MS[(round as usize / 2) % CREATE_MS.len()];
        h.sim
            .set_latency(create, Duration::from_millis(latency))
            .unwrap();
        let target = &vfs[PER_GPU - free];
        let seen = race(&h, target);
        check(&h, round, free, target, &seen);
        clear(&h);
    }
}
