use super::*;

/// A directory laid out as a simulated host with one L40S and two VFs, the first running
/// an L40S-24Q: what `refresh` reads.
fn host(name: &str) -> std::path::PathBuf {
    let root =
        std::env::temp_dir().join(format!("vgpu-nvml-fake-sim-{name}-{}", std::process::id()));
    let state = root.join(".vgpu-sim/nvidia");
    std::fs::create_dir_all(&state).expect("state directory");
    std::fs::write(
        state.join("0000:41:00.0.json"),
        r#"{"address":"0000:41:00.0","name":"NVIDIA L40S","pci_device_id":649662686,
           "mig":null,"supported_vgpu_types":[
           {"id":1145,"name":"NVIDIA L40S-1B","framebuffer_mib":1024,"max_instances":32,
            "gpu_instance_profile":null},
           {"id":1155,"name":"NVIDIA L40S-24Q","framebuffer_mib":24576,"max_instances":2,
            "gpu_instance_profile":null}],
           "vfs":["0000:41:00.4","0000:41:00.5"]}"#,
    )
    .expect("state file");
    let vf = |addr: &str, current: &str, creatable: &str| {
        let nv = root.join("sys/bus/pci/devices").join(addr).join("nvidia");
        std::fs::create_dir_all(&nv).expect("nvidia directory");
        std::fs::write(nv.join("current_vgpu_type"), current).expect("type");
        std::fs::write(nv.join("creatable_vgpu_types"), creatable).expect("creatable");
    };
    vf("0000:41:00.4", "1155\n", "ID    : vGPU Name\n");
    vf(
        "0000:41:00.5",
        "0\n",
        "ID    : vGPU Name\n1155  : NVIDIA L40S-24Q\n",
    );
    root
}

const ALL: Need = Need {
    vgpus: true,
    creatable: true,
};

#[test]
fn refresh_without_data_serves_the_gpu_with_defaults() {
    let root = host("defaults");
    let mut data: Data = toml::from_str("").expect("no data");
    let done = refresh(&mut data, &root, ALL);
    std::fs::remove_dir_all(&root).expect("clean up");
    let g = &data.gpus[0];
    assert_eq!(
        (
            done,
            g.name.as_str(),
            g.uuid.as_str(),
            g.pci_device_id,
            g.ecc,
            g.scheduler.map(|s| s.policy)
        ),
        (
            Ok(()),
            "NVIDIA L40S",
            "GPU-00000000-0000-4000-8000-000000410000",
            0x26b9_10de,
            Some(Mode {
                current: true,
                pending: true
            }),
            Some(1)
        )
    );
}

#[test]
fn refresh_reads_the_running_vgpu_and_the_creatable_union() {
    let root = host("vgpus");
    let mut data: Data = toml::from_str("").expect("no data");
    let done = refresh(&mut data, &root, ALL);
    std::fs::remove_dir_all(&root).expect("clean up");
    let g = &data.gpus[0];
    let vgpus: Vec<(u32, u32, Option<u32>)> = g
        .vgpus
        .iter()
        .map(|v| (v.instance, v.type_id, v.gpu_instance_id))
        .collect();
    assert_eq!(
        (done, vgpus, g.creatable.clone()),
        (Ok(()), vec![(0x4104, 1155, None)], vec![1155])
    );
}

#[test]
fn refresh_keeps_the_data_s_uuid_and_type_rows() {
    let root = host("given");
    let mut data: Data = toml::from_str(
        "[[gpu]]\npci = \"0000:41:00.0\"\nuuid = \"GPU-1\"\n\
         [[gpu.type]]\nid = 1155\nname = \"NVIDIA L40S-24Q\"\nclass = \"Quadro\"\n\
         framebuffer_mib = 24576\nmax_instances = 2\n\
         placements = { size = 24, ids = [0, 24] }\n",
    )
    .expect("data");
    for g in &mut data.gpus {
        g.given.types = g.types.clone();
    }
    let done = refresh(&mut data, &root, ALL);
    std::fs::remove_dir_all(&root).expect("clean up");
    let g = &data.gpus[0];
    let types: Vec<(u32, String, bool)> = g
        .types
        .iter()
        .map(|t| (t.id, t.class.clone(), t.placements.is_some()))
        .collect();
    assert_eq!(
        (done, g.uuid.as_str(), types),
        (
            Ok(()),
            "GPU-1",
            vec![
                (1145, "NVS".to_owned(), false),
                (1155, "Quadro".to_owned(), true)
            ]
        )
    );
}

#[test]
fn refresh_of_a_root_without_a_simulator_names_the_path() {
    let root = std::env::temp_dir().join(format!("vgpu-nvml-fake-nosim-{}", std::process::id()));
    let mut data: Data = toml::from_str("").expect("no data");
    assert!(refresh(&mut data, &root, ALL).is_err_and(|e| {
        e.starts_with(&format!("{}", root.join(".vgpu-sim/nvidia").display()))
    }));
}

/// The running vGPUs' type ids of the first GPU.
fn running(data: &Data) -> Vec<u32> {
    data.gpus[0].vgpus.iter().map(|v| v.type_id).collect()
}

/// Sets VF `0000:41:00.5`'s `current_vgpu_type` in `host`'s layout.
fn set_type(root: &Path, value: &str) {
    let path = root.join("sys/bus/pci/devices/0000:41:00.5/nvidia/current_vgpu_type");
    std::fs::write(path, value).expect("type");
}

fn set_generation(root: &Path, line: &str) {
    std::fs::write(root.join(".vgpu-sim/generation"), line).expect("generation");
}

const VGPUS: Need = Need {
    vgpus: true,
    creatable: false,
};

#[test]
fn refresh_if_changed_skips_while_the_generation_is_unchanged() {
    let root = host("unchanged");
    set_generation(&root, "boot 3\n");
    let mut data: Data = toml::from_str("").expect("no data");
    let mut seen = None;
    let first = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    // A change the generation does not show: the data keeps what it read.
    set_type(&root, "1155\n");
    let second = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    let kept = running(&data);
    set_generation(&root, "boot 4\n");
    let third = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    std::fs::remove_dir_all(&root).expect("clean up");
    assert_eq!(
        (first, second, kept, third, running(&data)),
        (Ok(()), Ok(()), vec![1155], Ok(()), vec![1155, 1155])
    );
}

#[test]
fn refresh_if_changed_reads_the_vfs_a_gpu_only_read_left_out() {
    let root = host("wider");
    set_generation(&root, "boot 3\n");
    let mut data: Data = toml::from_str("").expect("no data");
    let mut seen = None;
    let gpus = refresh_if_changed(&mut data, &root, Need::default(), &mut seen);
    let before = running(&data);
    let vgpus = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    std::fs::remove_dir_all(&root).expect("clean up");
    assert_eq!(
        (gpus, before, vgpus, running(&data), seen.map(|s| s.need)),
        (Ok(()), vec![], Ok(()), vec![1155], Some(VGPUS))
    );
}

#[test]
fn refresh_if_changed_after_a_vf_read_skips_a_gpu_only_read() {
    let root = host("narrower");
    set_generation(&root, "boot 3\n");
    let mut data: Data = toml::from_str("").expect("no data");
    let mut seen = None;
    let first = refresh_if_changed(&mut data, &root, ALL, &mut seen);
    std::fs::remove_dir_all(root.join(".vgpu-sim/nvidia")).expect("remove state");
    // A read would fail now: the data answers.
    let second = refresh_if_changed(&mut data, &root, Need::default(), &mut seen);
    std::fs::remove_dir_all(&root).expect("clean up");
    assert_eq!((first, second), (Ok(()), Ok(())));
}

#[test]
fn refresh_if_changed_without_a_generation_reads_every_time() {
    let root = host("nogeneration");
    let mut data: Data = toml::from_str("").expect("no data");
    let mut seen = None;
    let first = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    set_type(&root, "1155\n");
    let second = refresh_if_changed(&mut data, &root, VGPUS, &mut seen);
    std::fs::remove_dir_all(&root).expect("clean up");
    assert_eq!(
        (first, second, running(&data), seen),
        (Ok(()), Ok(()), vec![1155, 1155], None)
    );
}

#[test]
fn parse_creatable_reads_the_ids_after_the_header() {
    assert_eq!(
        parse_creatable("ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1155  : NVIDIA L40S-24Q\n"),
        vec![1145, 1155]
    );
}

#[test]
fn parse_creatable_header_only_is_empty() {
    assert_eq!(parse_creatable("ID    : vGPU Name\n"), Vec::<u32>::new());
}

#[test]
fn gpu_uuid_names_the_pci_address() {
    assert_eq!(
        gpu_uuid("0000:41:00.0"),
        "GPU-00000000-0000-4000-8000-000000410000"
    );
}

#[test]
fn vgpu_instance_is_domain_and_routing_id() {
    assert_eq!(vgpu_instance("0001:41:01.2"), 0x0001_410a);
}

#[test]
fn class_of_quadro_type_is_quadro() {
    assert_eq!(class_of("NVIDIA L40S-24Q"), "Quadro");
}

#[test]
fn class_of_mig_backed_type_is_compute() {
    assert_eq!(class_of("NVIDIA H200X-1-18C"), "Compute");
}
