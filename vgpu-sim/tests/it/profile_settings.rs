//! What profile settings change in the kernel's answers: a VF probe that runs after the
//! `sriov_numvfs` write (`async_probe_ms`, `latency async-probe`), a driver that lowers
//! `sriov_totalvfs` or enables fewer VFs than asked, which i915 build runs (upstream has no
//! SR-IOV), and the kernel version (mdev types have `name` from 6.1).

use crate::common::{
    IGPU, cat, driver_file, drivers_probe, echo, eventually, host, link_name, ls, mdev_type, pci,
    unbind_lock,
};
use vgpu_sim::{Profile, SimHost};

/// `flex-sriov`: the Flex PF (16 VFs, on `i915`) and its first two VFs once enabled.
const FLEX_PF: &str = "0000:4d:00.0";
const FLEX_VF0: &str = "0000:4d:00.1";
const FLEX_VF1: &str = "0000:4d:00.2";
/// `l40s-vendor-vfio`: the first L40S PF and its first VF.
const L40S: &str = "0000:41:00.0";
const L40S_VF0: &str = "0000:41:00.4";
/// `a40-vf-mdev` (kernel 5.15): the A40's first VF, an mdev parent.
const A40_VF0: &str = "0000:41:00.4";

/// A built-in profile changed by `edit`, mounted.
fn host_with(name: &str, edit: impl FnOnce(&mut Profile)) -> SimHost {
    let mut p = Profile::builtin(name).expect("builtin profile");
    edit(&mut p);
    SimHost::mount_profile_for_test(p)
}

/// `flex-sriov` with the PF's SR-IOV settings changed by `edit`.
fn flex_with(edit: impl FnOnce(&mut vgpu_sim::profile::SriovSpec)) -> SimHost {
    host_with("flex-sriov", |p| {
        let pf = p
            .devices
            .iter_mut()
            .find(|d| d.addr.to_string() == FLEX_PF)
            .expect("the Flex PF");
        edit(pf.sriov.as_mut().expect("SR-IOV"));
    })
}

fn driver_of(h: &SimHost, addr: &str) -> Option<String> {
    link_name(&pci(h, addr, "driver"))
}

// ----- asynchronous VF probe -----

fn flex_async(millis: u64) -> SimHost {
    let h = host("flex-sriov");
    h.control(&format!("latency async-probe {millis}"))
        .expect("control");
    h
}

#[test]
fn async_probe_vf_is_there_but_unbound_when_the_write_returns() {
    let h = flex_async(1000);
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(
        (
            link_name(&pci(&h, FLEX_PF, "virtfn0")),
            driver_of(&h, FLEX_VF0)
        ),
        (Some(FLEX_VF0.into()), None)
    );
}

#[test]
fn async_probe_vf_is_bound_after_the_delay() {
    let h = flex_async(200);
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    assert!(eventually(
        || driver_of(&h, FLEX_VF0).as_deref() == Some("i915")
    ));
}

#[test]
fn async_probe_client_bind_before_the_probe_stays() {
    let h = flex_async(300);
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    echo(&pci(&h, FLEX_VF0, "driver_override"), "vfio-pci").expect("override");
    echo(&drivers_probe(&h), FLEX_VF0).expect("probe");
    // Both VFs' probes are due at once: the second VF, left alone, shows when they ran.
    let probed = eventually(|| driver_of(&h, FLEX_VF1).as_deref() == Some("i915"));
    assert_eq!(
        (probed, driver_of(&h, FLEX_VF0)),
        (true, Some("vfio-pci".into()))
    );
}

#[test]
fn async_probe_profile_key_sets_the_latency() {
    let h = host_with("flex-sriov", |p| p.async_probe_ms = 250);
    let control = cat(&h.root().join(".vgpu-sim/control")).expect("control");
    assert!(control.contains("latency async-probe 250\n"), "{control}");
}

/// NVIDIA's VFs get their `nvidia/` directory when `nvidia` probes them: after the write.
#[test]
fn async_probe_nvidia_vf_directory_appears_after_the_write() {
    let h = host("l40s-vendor-vfio");
    echo(&unbind_lock(&h, L40S), "1").expect("lock");
    echo(&driver_file(&h, "nvidia", "unbind"), L40S).expect("unbind");
    echo(&pci(&h, L40S, "driver_override"), "pci-pf-stub").expect("override");
    echo(&drivers_probe(&h), L40S).expect("probe");
    echo(&pci(&h, L40S, "sriov_numvfs"), "0").expect("disable");
    h.control("latency async-probe 300").expect("control");
    echo(&pci(&h, L40S, "sriov_numvfs"), "32").expect("enable");
    let nvidia_dir = pci(&h, L40S_VF0, "nvidia");
    let at_once = nvidia_dir.exists();
    assert_eq!((at_once, eventually(|| nvidia_dir.exists())), (false, true));
}

#[test]
fn async_probe_disabled_vfs_are_not_probed_later() {
    let h = flex_async(200);
    let numvfs = pci(&h, FLEX_PF, "sriov_numvfs");
    echo(&numvfs, "2").expect("enable");
    echo(&numvfs, "0").expect("disable");
    // Not a synchronisation: the test is that nothing happens once the probe time (200 ms)
    // has passed, and no state change marks that moment. So the wait is the latency itself.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        (cat(&numvfs), pci(&h, FLEX_VF0, "").exists()),
        (Ok("0\n".into()), false)
    );
}

// ----- sriov_totalvfs lowered by the driver, partial enable -----

#[test]
fn driver_max_vfs_lowers_totalvfs_while_on_own_driver() {
    let h = flex_with(|s| s.driver_max_vfs = Some(7));
    assert_eq!(cat(&pci(&h, FLEX_PF, "sriov_totalvfs")), Ok("7\n".into()));
}

#[test]
fn driver_max_vfs_numvfs_above_it_is_erange() {
    let h = flex_with(|s| s.driver_max_vfs = Some(7));
    assert_eq!(
        echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "8"),
        Err(libc::ERANGE)
    );
}

#[test]
fn driver_max_vfs_is_reset_on_unbind() {
    let h = flex_with(|s| s.driver_max_vfs = Some(7));
    echo(&driver_file(&h, "i915", "unbind"), FLEX_PF).expect("unbind");
    assert_eq!(cat(&pci(&h, FLEX_PF, "sriov_totalvfs")), Ok("16\n".into()));
}

#[test]
fn driver_enables_fewer_write_succeeds_numvfs_reads_fewer() {
    let h = flex_with(|s| s.driver_enables_at_most = Some(3));
    let numvfs = pci(&h, FLEX_PF, "sriov_numvfs");
    assert_eq!(
        (
            echo(&numvfs, "8"),
            cat(&numvfs),
            link_name(&pci(&h, FLEX_PF, "virtfn3"))
        ),
        (Ok(()), Ok("3\n".into()), None)
    );
}

#[test]
fn driver_enables_fewer_does_not_apply_to_pci_pf_stub() {
    let h = flex_with(|s| s.driver_enables_at_most = Some(3));
    echo(&pci(&h, FLEX_PF, "driver_override"), "pci-pf-stub").expect("override");
    echo(&driver_file(&h, "i915", "unbind"), FLEX_PF).expect("unbind");
    echo(&drivers_probe(&h), FLEX_PF).expect("probe");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "8").expect("enable");
    assert_eq!(cat(&pci(&h, FLEX_PF, "sriov_numvfs")), Ok("8\n".into()));
}

// ----- which i915 -----

#[test]
fn upstream_i915_sriov_numvfs_is_enoent() {
    let h = host_with("flex-sriov", |p| p.out_of_tree_drivers.clear());
    assert_eq!(
        echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2"),
        Err(libc::ENOENT)
    );
}

#[test]
fn out_of_tree_i915_sriov_numvfs_enables() {
    let h = host("flex-sriov");
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(cat(&pci(&h, FLEX_PF, "sriov_numvfs")), Ok("2\n".into()));
}

#[test]
fn xe_sriov_numvfs_enables_and_binds_vfs_to_xe() {
    let h = host_with("flex-sriov", |p| {
        p.out_of_tree_drivers.clear();
        for d in p
            .devices
            .iter_mut()
            .filter(|d| d.driver.as_deref() == Some("i915"))
        {
            d.driver = Some("xe".into());
        }
    });
    echo(&pci(&h, FLEX_PF, "sriov_numvfs"), "2").expect("enable");
    assert_eq!(driver_of(&h, FLEX_VF0), Some("xe".into()));
}

// ----- kernel version -----

#[test]
fn mdev_gvtg_type_on_6_1_has_name_reading_type_name() {
    let h = host("gvtg");
    assert_eq!(
        cat(&mdev_type(&h, IGPU, "i915-GVTg_V5_4", "name")),
        Ok("GVTg_V5_4\n".into())
    );
}

#[test]
fn mdev_gvtg_type_before_6_1_has_no_name_file() {
    let h = host_with("gvtg", |p| p.kernel = Some("5.15.0-105-generic".into()));
    assert_eq!(
        ls(&mdev_type(&h, IGPU, "i915-GVTg_V5_4", "")),
        Ok(vec![
            "available_instances".into(),
            "create".into(),
            "description".into(),
            "device_api".into(),
            "devices".into()
        ])
    );
}

#[test]
fn mdev_nvidia_type_before_6_1_has_name() {
    let h = host("a40-vf-mdev");
    assert_eq!(
        cat(&mdev_type(&h, A40_VF0, "nvidia-558", "name")),
        Ok("NVIDIA A40-2Q\n".into())
    );
}
