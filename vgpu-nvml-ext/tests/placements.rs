//! The mixed-size bindings against the test NVML as a view of a simulated host: NVIDIA's
//! mixed-size mode and placements answer as the simulator is, through this crate's bindings
//! and raw calls for the version and buffer rules (nvml.h); the host is read again only when
//! its state changed.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH as VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE, nvmlVgpuHeterogeneousMode_t,
    nvmlVgpuPlacementList_v2_t,
};
use vgpu_nvml_ext::{
    VGPU_PLACEMENT_LIST_V2, VgpuPlacements, VgpuSizeMode, set_vgpu_heterogeneous_mode,
    vgpu_heterogeneous_mode, vgpu_instance_placement_id, vgpu_type_creatable_placements,
    vgpu_type_supported_placements,
};
use vgpu_sim::SimHost;

const L40S: &str = "0000:41:00.0";
const VF0: &str = "0000:41:00.4";
const VF1: &str = "0000:41:00.5";
/// The fake's vGPU instance id of the vGPU on `VF0`: its domain and routing id.
const VF0_INSTANCE: u32 = 0x4104;
const TYPE_1Q: u32 = 1147;
const TYPE_8Q: u32 = 1152;

/// The test library, built beside this test's binary (`target/<profile>/deps` or above).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|d| d.join("libvgpu_nvml_fake.so"))
        .find(|p| p.is_file())
        .expect("libvgpu_nvml_fake.so is built with the tests")
}

/// A simulated host and a copy of the test library of its own (the loader shares one
/// loaded library between the openers of one file), with data naming the host.
struct Fixture {
    host: SimHost,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(profile: &str) -> Self {
        let host = SimHost::mount_for_test(profile);
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(built_library(), dir.path().join("libvgpu_nvml_fake.so")).unwrap();
        let data = format!("sim_root = {:?}\n", host.root().display().to_string());
        std::fs::write(dir.path().join("fake-nvml.toml"), data).unwrap();
        Self { host, dir }
    }

    fn nvml(&self) -> Nvml {
        Nvml::builder()
            .lib_path(self.dir.path().join("libvgpu_nvml_fake.so").as_os_str())
            .init()
            .unwrap()
    }

    fn vf(&self, vf: &str, file: &str) -> PathBuf {
        self.host
            .root()
            .join(format!("sys/bus/pci/devices/{vf}/nvidia/{file}"))
    }

    fn create(&self, vf: &str, type_id: u32) {
        std::fs::write(self.vf(vf, "current_vgpu_type"), type_id.to_string()).unwrap();
    }

    fn sim_mode(&self) -> String {
        let path = self
            .host
            .root()
            .join(format!(".vgpu-sim/nvidia/{L40S}.json"));
        let state: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
        state["size_mode"].as_str().unwrap_or_default().to_owned()
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn heterogeneous_mode_at_boot_is_equal() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(
        vgpu_heterogeneous_mode(&gpu).ok(),
        Some(VgpuSizeMode::Equal)
    );
}

#[test]
fn set_heterogeneous_mode_goes_through_to_the_simulator() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    set_vgpu_heterogeneous_mode(&gpu, true).unwrap();
    assert_eq!(
        (vgpu_heterogeneous_mode(&gpu).ok(), f.sim_mode()),
        (Some(VgpuSizeMode::Mixed), "mixed".to_owned())
    );
}

#[test]
fn set_heterogeneous_mode_while_vgpu_exists_is_in_use() {
    let f = Fixture::new("l40s-vendor-vfio");
    f.create(VF0, TYPE_8Q);
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert!(matches!(
        set_vgpu_heterogeneous_mode(&gpu, true),
        Err(NvmlError::InUse)
    ));
}

#[test]
fn heterogeneous_mode_of_gpu_without_it_is_not_supported() {
    let f = Fixture::new("h200-mig");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert!(matches!(
        vgpu_heterogeneous_mode(&gpu),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn heterogeneous_mode_wrong_version_is_argument_version_mismatch() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    let sym = nvml
        .lib()
        .nvmlDeviceGetVgpuHeterogeneousMode
        .as_ref()
        .unwrap();
    let mut mode = nvmlVgpuHeterogeneousMode_t {
        version: 0x0200_0008,
        mode: 0,
    };
    // SAFETY: the handle is valid while `gpu` lives; `mode` is a local.
    let code = unsafe { sym(gpu.handle(), &mut mode) };
    assert_eq!(code, VERSION_MISMATCH);
}

#[test]
fn supported_placements_of_8q_are_the_mixed_table() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(
        vgpu_type_supported_placements(&gpu, TYPE_8Q).ok(),
        Some(VgpuPlacements {
            size: 8,
            ids: vec![0, 16, 24, 40]
        })
    );
}

#[test]
fn supported_placements_homogeneous_mode_are_equal_slots() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    let sym = nvml
        .lib()
        .nvmlDeviceGetVgpuTypeSupportedPlacements
        .as_ref()
        .unwrap();
    let mut ids = [0u32; 8];
    let mut list = nvmlVgpuPlacementList_v2_t {
        version: VGPU_PLACEMENT_LIST_V2,
        placementSize: 0,
        count: 8,
        placementIds: ids.as_mut_ptr(),
        mode: nvml_wrapper_sys::bindings::NVML_VGPU_PGPU_HOMOGENEOUS_MODE,
    };
    // SAFETY: `ids` holds the 8 ids `list` says; both are locals.
    let code = unsafe { sym(gpu.handle(), TYPE_8Q, &mut list) };
    assert_eq!(
        (code, list.count, ids[..6].to_vec()),
        (0, 6, vec![0, 8, 16, 24, 32, 40])
    );
}

#[test]
fn supported_placements_short_buffer_is_insufficient_size_with_count() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    let sym = nvml
        .lib()
        .nvmlDeviceGetVgpuTypeSupportedPlacements
        .as_ref()
        .unwrap();
    let mut ids = [0u32; 1];
    let mut list = nvmlVgpuPlacementList_v2_t {
        version: VGPU_PLACEMENT_LIST_V2,
        placementSize: 0,
        count: 1,
        placementIds: ids.as_mut_ptr(),
        mode: nvml_wrapper_sys::bindings::NVML_VGPU_PGPU_HETEROGENEOUS_MODE,
    };
    // SAFETY: `ids` holds the one id `list` says; both are locals.
    let code = unsafe { sym(gpu.handle(), TYPE_8Q, &mut list) };
    assert_eq!(
        (code, list.count, list.placementSize),
        (INSUFFICIENT_SIZE, 4, 8)
    );
}

#[test]
fn creatable_placements_wrong_version_is_argument_version_mismatch() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    let sym = nvml
        .lib()
        .nvmlDeviceGetVgpuTypeCreatablePlacements
        .as_ref()
        .unwrap();
    let mut list = nvmlVgpuPlacementList_v2_t {
        version: VGPU_PLACEMENT_LIST_V2 & 0x00ff_ffff | (1 << 24),
        placementSize: 0,
        count: 0,
        placementIds: std::ptr::null_mut(),
        mode: 0,
    };
    // SAFETY: a null id array with a count of 0; `list` is a local.
    let code = unsafe { sym(gpu.handle(), TYPE_8Q, &mut list) };
    assert_eq!(code, VERSION_MISMATCH);
}

#[test]
fn creatable_placements_skip_the_slots_of_a_1q_at_0() {
    let f = Fixture::new("l40s-vendor-vfio");
    f.host.control(&format!("size-mode {L40S} mixed")).unwrap();
    f.create(VF0, TYPE_1Q);
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(
        vgpu_type_creatable_placements(&gpu, TYPE_8Q).ok(),
        Some(VgpuPlacements {
            size: 8,
            ids: vec![16, 24, 40]
        })
    );
}

#[test]
fn creatable_placements_of_another_type_in_equal_mode_are_none() {
    let f = Fixture::new("l40s-vendor-vfio");
    f.create(VF0, TYPE_1Q);
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(
        vgpu_type_creatable_placements(&gpu, TYPE_8Q).ok(),
        Some(VgpuPlacements {
            size: 8,
            ids: Vec::new()
        })
    );
}

#[test]
fn placement_id_of_a_vgpu_is_the_simulator_s() {
    let f = Fixture::new("l40s-vendor-vfio");
    f.host.control(&format!("size-mode {L40S} mixed")).unwrap();
    std::fs::write(f.vf(VF0, "vgpu_params"), "vgpu-placement-id=40").unwrap();
    f.create(VF0, TYPE_8Q);
    f.create(VF1, TYPE_1Q);
    let nvml = f.nvml();
    assert_eq!(
        vgpu_instance_placement_id(&nvml, VF0_INSTANCE).ok(),
        Some(40)
    );
}

#[test]
fn placement_id_of_unknown_vgpu_is_not_found() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    assert!(matches!(
        vgpu_instance_placement_id(&nvml, VF0_INSTANCE),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn calls_without_a_change_between_read_the_simulator_once() {
    let f = Fixture::new("l40s-vendor-vfio");
    let nvml = f.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.active_vgpus().unwrap().len(), 0);
    f.host.reset_counters();
    let again = (
        gpu.active_vgpus().unwrap().len(),
        gpu.active_vgpus().unwrap().len(),
    );
    let unchanged = f.host.counters().total();
    f.create(VF0, TYPE_8Q);
    f.host.reset_counters();
    let changed = gpu.active_vgpus().unwrap().len();
    assert_eq!(
        (again, unchanged, changed, f.host.counters().total() > 0),
        ((0, 0), 0, 1, true)
    );
}
