//! Driver binding as the kernel parses and carries it out: `new_id` / `remove_id` (and
//! NVIDIA's `sriov-manage`, which binds the PF to `pci-pf-stub` with them, replayed step by
//! step), `vfio-pci` refusing a PF with VFs, `driver_override` bytes, `kstrtobool` in
//! `sriov_drivers_autoprobe` and the bus's `drivers_autoprobe`.

use std::path::Path;

use crate::common::{
    A4000, A4000_AUDIO, FLEX, T4, cat, cat_bytes, driver_file, drivers_probe, echo, host,
    link_name, ls, pci, unbind_lock, write_bytes,
};
use vgpu_sim::SimHost;

/// `l40s-vendor-vfio`: an L40S PF (`10de:26b9`, VFs `10de:26b9`) with 32 VFs on `nvidia`.
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
const L40S_ID: &str = "10de 26b9\n";
/// `flex-sriov`: the Flex PF and its first VF once enabled.
const FLEX_PF: &str = "0000:4d:00.0";
const FLEX_VF0: &str = "0000:4d:00.1";

fn driver_of(h: &SimHost, addr: &str) -> Option<String> {
    link_name(&pci(h, addr, "driver"))
}

/// The functions on the PF's bus other than the PF, as `lspci -D -s <bus>:` lists them.
fn vfs_of(h: &SimHost, pf: &str) -> Vec<String> {
    let bus = &pf[..8];
    ls(&h.root().join("sys/bus/pci/devices"))
        .expect("devices")
        .into_iter()
        .filter(|a| a.starts_with(bus) && a != pf)
        .collect()
}

fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

// ----- new_id / remove_id -----

#[test]
fn new_id_binds_matching_unbound_device() {
    let h = host("l40s-vendor-vfio");
    echo(&unbind_lock(&h, L40S), "1").expect("lock");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&driver_file(&h, "pci-pf-stub", "new_id"), L40S_ID).expect("new_id");
    assert_eq!(driver_of(&h, L40S), Some("pci-pf-stub".into()));
}

#[test]
fn new_id_leaves_bound_devices_alone() {
    let h = host("l40s-vendor-vfio");
    echo(&driver_file(&h, "pci-pf-stub", "new_id"), L40S_ID).expect("new_id");
    assert_eq!(driver_of(&h, L40S_VF0), Some("nvidia".into()));
}

/// Why `vgpu` never binds with `new_id`: the VFs have the PF's ids and are captured too.
#[test]
fn new_id_captures_every_unbound_device_with_the_ids() {
    let h = host("l40s-vendor-vfio");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S_VF0).expect("unbind VF");
    echo(&driver_file(&h, "pci-pf-stub", "new_id"), L40S_ID).expect("new_id");
    assert_eq!(driver_of(&h, L40S_VF0), Some("pci-pf-stub".into()));
}

#[test]
fn new_id_twice_is_eexist() {
    let h = host("l40s-vendor-vfio");
    let new_id = driver_file(&h, "pci-pf-stub", "new_id");
    echo(&new_id, L40S_ID).expect("first");
    assert_eq!(echo(&new_id, L40S_ID), Err(libc::EEXIST));
}

#[test]
fn new_id_one_field_is_einval() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&driver_file(&h, "pci-pf-stub", "new_id"), "10de\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn new_id_not_hex_is_einval() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&driver_file(&h, "pci-pf-stub", "new_id"), "nvidia l40s\n"),
        Err(libc::EINVAL)
    );
}

#[test]
fn new_id_of_statically_matched_class_is_eexist() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(
            &driver_file(&h, "nvidia", "new_id"),
            "10de 26b9 ffffffff ffffffff 30200\n"
        ),
        Err(libc::EEXIST)
    );
}

#[test]
fn remove_id_after_new_id_succeeds_and_device_stays_bound() {
    let h = host("l40s-vendor-vfio");
    echo(&unbind_lock(&h, L40S), "1").expect("lock");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&driver_file(&h, "pci-pf-stub", "new_id"), L40S_ID).expect("new_id");
    assert_eq!(
        (
            echo(&driver_file(&h, "pci-pf-stub", "remove_id"), L40S_ID),
            driver_of(&h, L40S)
        ),
        (Ok(()), Some("pci-pf-stub".into()))
    );
}

#[test]
fn remove_id_without_such_id_is_enodev() {
    let h = host("l40s-vendor-vfio");
    assert_eq!(
        echo(&driver_file(&h, "pci-pf-stub", "remove_id"), L40S_ID),
        Err(libc::ENODEV)
    );
}

#[test]
fn new_id_after_remove_id_is_accepted_again() {
    let h = host("l40s-vendor-vfio");
    let stub = |f| driver_file(&h, "pci-pf-stub", f);
    echo(&stub("new_id"), L40S_ID).expect("new_id");
    echo(&stub("remove_id"), L40S_ID).expect("remove_id");
    assert_eq!(echo(&stub("new_id"), L40S_ID), Ok(()));
}

// ----- NVIDIA's sriov-manage, step by step -----

/// `sriov-manage`'s `set_numvfs`: take the unbindLock, unbind the PF, `new_id` the PF's ids
/// to `pci-pf-stub` (binding the PF), bind it if that did not, write the count, unbind it
/// from the stub, `remove_id`, bind `nvidia`. (The script's `sleep 0.5` is left out.)
fn sriov_manage_set_numvfs(h: &SimHost, gpu: &str, numvfs: &str) {
    let lock = unbind_lock(h, gpu);
    echo(&lock, "1").expect("echo 1 > unbindLock");
    assert_eq!(cat(&lock), Ok("1\n".into()), "read -r unbindlock");
    let driver = std::fs::canonicalize(pci(h, gpu, "driver")).expect("readlink -f driver");
    echo(&driver.join("unbind"), gpu).expect("unbind from the existing driver");
    echo(&driver_file(h, "pci-pf-stub", "new_id"), L40S_ID).expect("new_id");
    if !exists(&driver_file(h, "pci-pf-stub", gpu)) {
        echo(&driver_file(h, "pci-pf-stub", "bind"), gpu).expect("bind pci-pf-stub");
    }
    echo(&pci(h, gpu, "sriov_numvfs"), numvfs).expect("sriov_numvfs");
    echo(&driver_file(h, "pci-pf-stub", "unbind"), gpu).expect("unbind pci-pf-stub");
    echo(&driver_file(h, "pci-pf-stub", "remove_id"), L40S_ID).expect("remove_id");
    echo(&driver_file(h, "nvidia", "bind"), gpu).expect("bind nvidia");
}

/// `sriov-manage -d`: every VF off its passthrough or `nvidia` driver, then 0 VFs.
fn sriov_manage_disable(h: &SimHost, gpu: &str) {
    for vf in vfs_of(h, gpu) {
        for drv in ["vfio-pci", "nvidia"] {
            if exists(&driver_file(h, drv, &vf)) {
                echo(&driver_file(h, drv, "unbind"), &vf).expect("unbind VF");
            }
        }
    }
    sriov_manage_set_numvfs(h, gpu, "0");
}

/// `sriov-manage -e`: all VFs, then every VF not on `nvidia` moved there.
fn sriov_manage_enable(h: &SimHost, gpu: &str) {
    let total = cat(&pci(h, gpu, "sriov_totalvfs")).expect("sriov_totalvfs");
    sriov_manage_set_numvfs(h, gpu, total.trim());
    for vf in vfs_of(h, gpu) {
        if !exists(&driver_file(h, "nvidia", &vf)) {
            if exists(&pci(h, &vf, "driver")) {
                echo(&pci(h, &vf, "driver/unbind"), &vf).expect("unbind VF");
            }
            echo(&driver_file(h, "nvidia", "bind"), &vf).expect("bind VF to nvidia");
        }
    }
}

#[test]
fn sriov_manage_disable_leaves_pf_on_nvidia_without_vfs() {
    let h = host("l40s-vendor-vfio");
    sriov_manage_disable(&h, L40S);
    assert_eq!(
        (
            driver_of(&h, L40S),
            cat(&pci(&h, L40S, "sriov_numvfs")),
            vfs_of(&h, L40S).len()
        ),
        (Some("nvidia".into()), Ok("0\n".into()), 0)
    );
}

#[test]
fn sriov_manage_disable_then_enable_binds_pf_and_every_vf_to_nvidia() {
    let h = host("l40s-vendor-vfio");
    sriov_manage_disable(&h, L40S);
    sriov_manage_enable(&h, L40S);
    let vfs = vfs_of(&h, L40S);
    let on_nvidia = vfs
        .iter()
        .filter(|vf| driver_of(&h, vf).as_deref() == Some("nvidia"))
        .count();
    let with_nvidia_dir = vfs
        .iter()
        .filter(|vf| pci(&h, vf, "nvidia/current_vgpu_type").exists())
        .count();
    assert_eq!(
        (
            driver_of(&h, L40S),
            cat(&pci(&h, L40S, "sriov_numvfs")),
            vfs.len(),
            on_nvidia,
            with_nvidia_dir
        ),
        (Some("nvidia".into()), Ok("32\n".into()), 32, 32, 32)
    );
}

#[test]
fn sriov_manage_leaves_no_dynamic_id_behind() {
    let h = host("l40s-vendor-vfio");
    sriov_manage_disable(&h, L40S);
    assert_eq!(
        echo(&driver_file(&h, "pci-pf-stub", "remove_id"), L40S_ID),
        Err(libc::ENODEV)
    );
}

// ----- vfio-pci and a PF with VFs -----

/// The L40S PF off `nvidia` (lock taken), its 32 VFs still enabled, `driver_override`
/// `vfio-pci`.
fn l40s_pf_unbound_for_vfio() -> SimHost {
    let h = host("l40s-vendor-vfio");
    echo(&unbind_lock(&h, L40S), "1").expect("lock");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&pci(&h, L40S, "driver_override"), "vfio-pci").expect("override");
    h
}

#[test]
fn vfio_pci_bind_of_pf_with_vfs_is_ebusy() {
    let h = l40s_pf_unbound_for_vfio();
    assert_eq!(
        echo(&driver_file(&h, "vfio-pci", "bind"), L40S),
        Err(libc::EBUSY)
    );
}

#[test]
fn vfio_pci_probe_of_pf_with_vfs_succeeds_and_leaves_it_unbound() {
    let h = l40s_pf_unbound_for_vfio();
    assert_eq!(
        (echo(&drivers_probe(&h), L40S), driver_of(&h, L40S)),
        (Ok(()), None)
    );
}

#[test]
fn vfio_pci_probe_of_pf_without_vfs_binds() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "driver_override"), "vfio-pci").expect("override");
    echo(&driver_file(&h, "i915", "unbind"), FLEX_PF).expect("unbind");
    echo(&drivers_probe(&h), FLEX_PF).expect("probe");
    assert_eq!(driver_of(&h, FLEX_PF), Some("vfio-pci".into()));
}

// ----- driver_override -----

#[test]
fn driver_override_is_cut_at_first_newline() {
    let h = host("mixed");
    echo(&pci(&h, T4, "driver_override"), "vfio-pci\nnvidia\n").expect("write");
    assert_eq!(
        cat(&pci(&h, T4, "driver_override")),
        Ok("vfio-pci\n".into())
    );
}

#[test]
fn driver_override_is_cut_at_first_nul() {
    let h = host("mixed");
    write_bytes(&pci(&h, T4, "driver_override"), b"vfio-pci\0junk").expect("write");
    assert_eq!(
        cat(&pci(&h, T4, "driver_override")),
        Ok("vfio-pci\n".into())
    );
}

#[test]
fn driver_override_keeps_any_other_bytes() {
    let h = host("mixed");
    write_bytes(&pci(&h, T4, "driver_override"), b"vfio\xff pci").expect("write");
    assert_eq!(
        cat_bytes(&pci(&h, T4, "driver_override")),
        Ok(b"vfio\xff pci\n".to_vec())
    );
}

#[test]
fn driver_override_newline_first_clears() {
    let h = host("mixed");
    echo(&pci(&h, A4000, "driver_override"), "\nvfio-pci").expect("write");
    assert_eq!(
        cat(&pci(&h, A4000, "driver_override")),
        Ok("(null)\n".into())
    );
}

#[test]
fn driver_override_of_no_driver_name_makes_probe_bind_nothing() {
    let h = host("mixed");
    let flex_vf = "0001:03:00.1";
    echo(&pci(&h, FLEX, "sriov_drivers_autoprobe"), "0").expect("autoprobe off");
    echo(&pci(&h, FLEX, "sriov_numvfs"), "1").expect("enable");
    write_bytes(&pci(&h, flex_vf, "driver_override"), b"i915 ").expect("write");
    echo(&drivers_probe(&h), flex_vf).expect("probe");
    assert_eq!(driver_of(&h, flex_vf), None);
}

// ----- sriov_drivers_autoprobe (kstrtobool) -----

fn autoprobe_after(value: &str) -> (Result<(), i32>, Result<String, i32>) {
    let h = host("flex-sriov");
    let file = pci(&h, FLEX_PF, "sriov_drivers_autoprobe");
    echo(&file, "1").expect("on");
    let written = echo(&file, value);
    (written, cat(&file))
}

#[test]
fn sriov_autoprobe_takes_first_character_only() {
    assert_eq!(autoprobe_after("no thanks"), (Ok(()), Ok("0\n".into())));
}

#[test]
fn sriov_autoprobe_false_word_is_off() {
    assert_eq!(autoprobe_after("false\n"), (Ok(()), Ok("0\n".into())));
}

#[test]
fn sriov_autoprobe_off_is_off() {
    assert_eq!(autoprobe_after("off"), (Ok(()), Ok("0\n".into())));
}

#[test]
fn sriov_autoprobe_o_alone_is_einval() {
    assert_eq!(autoprobe_after("o"), (Err(libc::EINVAL), Ok("1\n".into())));
}

#[test]
fn sriov_autoprobe_two_is_einval() {
    assert_eq!(autoprobe_after("2"), (Err(libc::EINVAL), Ok("1\n".into())));
}

#[test]
fn sriov_autoprobe_off_leaves_new_vf_unbound() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_drivers_autoprobe"), "N").expect("off");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "1").expect("enable");
    assert_eq!(driver_of(&h, FLEX_VF0), None);
}

// ----- the bus's drivers_autoprobe -----

fn bus_autoprobe(h: &SimHost) -> std::path::PathBuf {
    h.root().join("sys/bus/pci/drivers_autoprobe")
}

#[test]
fn bus_autoprobe_only_leading_zero_turns_it_off() {
    let h = host("mixed");
    echo(&bus_autoprobe(&h), "n").expect("write");
    assert_eq!(cat(&bus_autoprobe(&h)), Ok("1\n".into()));
}

#[test]
fn bus_autoprobe_zero_then_anything_is_off() {
    let h = host("mixed");
    echo(&bus_autoprobe(&h), "0 please").expect("write");
    assert_eq!(cat(&bus_autoprobe(&h)), Ok("0\n".into()));
}

#[test]
fn bus_autoprobe_off_does_not_gate_rescanned_devices() {
    let h = host("mixed");
    echo(&bus_autoprobe(&h), "0").expect("off");
    echo(&pci(&h, A4000_AUDIO, "remove"), "1").expect("remove");
    echo(&h.root().join("sys/bus/pci/rescan"), "1").expect("rescan");
    assert_eq!(driver_of(&h, A4000_AUDIO), Some("snd_hda_intel".into()));
}
