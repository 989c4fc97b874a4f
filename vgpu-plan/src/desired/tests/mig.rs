//! MIG geometry in desired-state files: `host.toml`'s `mig`, the geometry vgpu-device-manager
//! types imply, and mig-parted's format; every bad input located.

use crate::testing::MIG_PARTED;
use std::collections::BTreeMap;
use std::path::Path;

use crate::Error;
use crate::desired::{
    DesiredFile, Entry, Format, Location, MigGeometry, MigRequest, Partition, Selection, VfDriver,
};
use crate::model::NVIDIA_VENDOR_ID;
use crate::model::definition::Start;
use crate::planner::plan;
use crate::steps::{Refusal, Refused};
use crate::testing::fleet::Model;
use crate::testing::unit::{L40S, L40S_BY_MODEL, gpu, host, toml, yaml};

fn error(path: &str, format: Format, text: &str) -> (usize, usize, String) {
    match DesiredFile::parse(path, format, text) {
        Err(Error::Desired {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a located error, got {other:?}"),
    }
}

fn toml_error(text: &str) -> (usize, usize, String) {
    error("host.toml", Format::HostToml, text)
}

fn mig_parted_error(text: &str) -> (usize, usize, String) {
    error("mig.yaml", Format::MigPartedYaml, text)
}

fn instances(counts: &[(&str, u32)]) -> MigGeometry {
    MigGeometry::Instances(counts.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect())
}

/// The `mig` of the only entry of a `host.toml` entry's body.
fn toml_mig(body: &str) -> Option<MigRequest> {
    toml(&format!("{L40S_BY_MODEL}{body}")).entries[0]
        .mig
        .clone()
}

const PROFILE_EXPECTED: &str = "expected a GPU-instance profile such as \"1g.18gb\" or \
     \"1g.18gb+me\": <slices>g.<GB>gb, then optionally +me, +me.all, +gfx or -me";

#[test]
fn host_toml_mig_table_is_profiles_and_counts_where_written() {
    let mig = toml_mig("mig = { \"1g.18gb\" = 3, \"2g.35gb\" = 2 }\ntypes = {}\n");

    assert_eq!(
        mig,
        Some(MigRequest {
            geometry: instances(&[("1g.18gb", 3), ("2g.35gb", 2)]),
            at: Location { line: 5, column: 7 },
            implied: false,
        })
    );
}

#[test]
fn host_toml_mig_disabled_is_mig_mode_off() {
    let mig = toml_mig("mig = \"disabled\"\ntypes = {}\n");

    assert_eq!(
        mig,
        Some(MigRequest {
            geometry: MigGeometry::Disabled,
            at: Location { line: 5, column: 7 },
            implied: false,
        })
    );
}

#[test]
fn host_toml_mig_empty_table_is_mig_on_without_instances() {
    let mig = toml_mig("mig = {}\ntypes = {}\n").map(|m| m.geometry);

    assert_eq!(mig, Some(MigGeometry::Instances(BTreeMap::new())));
}

#[test]
fn host_toml_without_mig_leaves_geometry_alone() {
    assert_eq!(toml_mig("types = {}\n"), None);
}

#[test]
fn host_toml_mig_profile_suffixes_nvidia_uses_are_read() {
    let mig = toml_mig(
        "mig = { \"1g.18gb+me\" = 1, \"1g.23gb+me.all\" = 1, \"1g.24gb+gfx\" = 1, \
         \"1g.23gb-me\" = 1 }\ntypes = {}\n",
    )
    .map(|m| m.geometry);

    assert_eq!(
        mig,
        Some(instances(&[
            ("1g.18gb+me", 1),
            ("1g.23gb+me.all", 1),
            ("1g.23gb-me", 1),
            ("1g.24gb+gfx", 1),
        ]))
    );
}

#[test]
fn host_toml_mig_unknown_word_names_what_is_expected() {
    let found = toml_error(&format!("{L40S_BY_MODEL}mig = \"off\"\ntypes = {{}}\n"));

    assert_eq!(
        found,
        (
            5,
            7,
            "mig = \"off\": expected \"disabled\" or a table of GPU-instance profiles and counts, \
             such as { \"1g.18gb\" = 7 }"
                .to_owned()
        )
    );
}

#[test]
fn host_toml_mig_zero_count_is_refused_at_the_count() {
    let found = toml_error(&format!(
        "{L40S_BY_MODEL}mig = {{ \"1g.18gb\" = 0 }}\ntypes = {{}}\n"
    ));

    assert_eq!(
        found,
        (
            5,
            21,
            "\"1g.18gb\" = 0: expected a count of 1 or more (leave the profile out for none)"
                .to_owned()
        )
    );
}

#[test]
fn host_toml_mig_negative_count_is_refused_at_the_count() {
    let found = toml_error(&format!(
        "{L40S_BY_MODEL}mig = {{ \"1g.18gb\" = -2 }}\ntypes = {{}}\n"
    ));

    assert_eq!(
        found,
        (
            5,
            21,
            "\"1g.18gb\" = -2: expected a count of 1 or more (leave the profile out for none)"
                .to_owned()
        )
    );
}

#[test]
fn host_toml_mig_number_is_neither_table_nor_disabled() {
    let found = toml_error(&format!("{L40S_BY_MODEL}mig = 7\ntypes = {{}}\n"));

    assert_eq!(
        found,
        (
            5,
            7,
            "invalid type: integer `7`, expected \"disabled\" or a table of GPU-instance \
             profiles and counts, such as { \"1g.18gb\" = 7 }"
                .to_owned()
        )
    );
}

#[test]
fn host_toml_mig_count_as_text_is_located_at_the_count() {
    let found = toml_error(&format!(
        "{L40S_BY_MODEL}mig = {{ \"1g.18gb\" = \"3\" }}\ntypes = {{}}\n"
    ));

    assert_eq!(
        found,
        (5, 21, "invalid type: string \"3\", expected i64".to_owned())
    );
}

#[test]
fn host_toml_mig_upper_case_profile_is_malformed() {
    let found = toml_error(&format!(
        "{L40S_BY_MODEL}mig = {{ \"1g.18GB\" = 1 }}\ntypes = {{}}\n"
    ));

    assert_eq!(
        found,
        (
            5,
            9,
            format!("\"1g.18GB\" is not a GPU-instance profile: {PROFILE_EXPECTED}")
        )
    );
}

#[test]
fn host_toml_mig_unknown_suffix_is_malformed() {
    let found = toml_error(&format!(
        "{L40S_BY_MODEL}mig = {{ \"1g.18gb+tv\" = 1 }}\ntypes = {{}}\n"
    ));

    assert_eq!(
        found,
        (
            5,
            9,
            format!("\"1g.18gb+tv\" is not a GPU-instance profile: {PROFILE_EXPECTED}")
        )
    );
}

#[test]
fn host_toml_mig_prefix_and_nine_slices_are_malformed() {
    let found = (
        toml_error(&format!(
            "{L40S_BY_MODEL}mig = {{ \"MIG 1g.18gb\" = 1 }}\ntypes = {{}}\n"
        ))
        .2,
        toml_error(&format!(
            "{L40S_BY_MODEL}mig = {{ \"9g.141gb\" = 1 }}\ntypes = {{}}\n"
        ))
        .2,
    );

    assert_eq!(
        found,
        (
            format!("\"MIG 1g.18gb\" is not a GPU-instance profile: {PROFILE_EXPECTED}"),
            format!("\"9g.141gb\" is not a GPU-instance profile: {PROFILE_EXPECTED}"),
        )
    );
}

#[test]
fn host_toml_mig_alone_is_no_partition() {
    let found = toml_error(&format!("{L40S_BY_MODEL}mig = \"disabled\"\n"));

    assert_eq!(
        found,
        (
            3,
            1,
            "no partition: expected sizes = \"4x12GiB\", types = { \"L40S-12Q\" = 4 } or vfs = 8"
                .to_owned()
        )
    );
}

#[test]
fn plan_geometry_without_mig_facts_is_refused_at_mig() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let desired = toml(&format!(
        "{L40S_BY_MODEL}mig = \"disabled\"\ntypes = {{}}\n"
    ));

    let plan = plan(&state, &desired);

    assert_eq!(
        plan.gpus[0].refusals,
        vec![Refused {
            refusal: Refusal::MigUnknown {
                why: "NVML is not loaded, or does not give this GPU's MIG mode".to_owned()
            },
            message: "its MIG mode and GPU instances cannot be read: NVML is not loaded, or \
                      does not give this GPU's MIG mode"
                .to_owned(),
            at: Some(Location { line: 5, column: 7 }),
        }]
    );
}

#[test]
fn device_manager_mig_backed_types_imply_their_instances() {
    let text = "version: v1\nvgpu-configs:\n  mixed:\n  - devices: all\n    vgpu-devices:\n      \"H200X-1-18C\": 3\n      \"NVIDIA H200X-2-35C\": 2\n";

    let mig = yaml(text, "mixed").entries[0].mig.clone();

    assert_eq!(
        mig,
        Some(MigRequest {
            geometry: instances(&[("1g.18gb", 3), ("2g.35gb", 2)]),
            at: Location { line: 6, column: 7 },
            implied: true,
        })
    );
}

#[test]
fn device_manager_seven_1_18c_imply_seven_1g_18gb() {
    let text = "version: v1\nvgpu-configs:\n  small:\n  - devices: all\n    vgpu-devices:\n      \"H200X-1-18C\": 7\n";

    let mig = yaml(text, "small").entries[0]
        .mig
        .clone()
        .map(|m| m.geometry);

    assert_eq!(mig, Some(instances(&[("1g.18gb", 7)])));
}

#[test]
fn device_manager_media_extension_type_implies_plus_me() {
    let text = "version: v1\nvgpu-configs:\n  media:\n  - devices: all\n    vgpu-devices:\n      \"A100-1-5CME\": 1\n";

    let mig = yaml(text, "media").entries[0]
        .mig
        .clone()
        .map(|m| m.geometry);

    assert_eq!(mig, Some(instances(&[("1g.5gb+me", 1)])));
}

#[test]
fn device_manager_time_sliced_type_implies_mig_off() {
    let text = "version: v1\nvgpu-configs:\n  desk:\n  - devices: all\n    vgpu-devices:\n      \"T4-1Q\": 16\n";

    let mig = yaml(text, "desk").entries[0]
        .mig
        .clone()
        .map(|m| (m.geometry, m.implied));

    assert_eq!(mig, Some((MigGeometry::Disabled, true)));
}

#[test]
fn device_manager_time_sliced_beside_mig_backed_implies_no_geometry() {
    let text = "version: v1\nvgpu-configs:\n  both:\n  - devices: all\n    vgpu-devices:\n      \"H200X-1-18C\": 1\n      \"H200X-141C\": 1\n";

    assert_eq!(yaml(text, "both").entries[0].mig, None);
}

#[test]
fn device_manager_no_types_implies_no_geometry() {
    let text = "version: v1\nvgpu-configs:\n  none:\n  - devices: all\n    vgpu-devices: {}\n";

    assert_eq!(yaml(text, "none").entries[0].mig, None);
}

fn nvidia(indices: Option<Vec<u32>>, device_ids: Vec<(u16, u16)>) -> Selection {
    Selection {
        vendor: Some(NVIDIA_VENDOR_ID),
        optional: true,
        nvidia_indices: indices,
        device_ids,
        ..Selection::default()
    }
}

fn geometry_entry(selection: Selection, geometry: MigGeometry, at: Location) -> Entry {
    Entry {
        selection,
        partition: Partition::Unchanged,
        series: 'Q',
        round_up: false,
        persistence: Start::Auto,
        vf_driver: VfDriver::VfioPci,
        tenant: None,
        size_mode: None,
        scheduler: None,
        mig: Some(MigRequest {
            geometry,
            at,
            implied: false,
        }),
        at,
    }
}

#[test]
fn mig_parted_entries_are_geometry_with_nvidia_selections() {
    let file = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, MIG_PARTED).unwrap();

    let custom = file.config(Some("custom")).unwrap();

    assert_eq!(
        custom.entries,
        vec![
            geometry_entry(
                nvidia(Some(vec![0, 1]), Vec::new()),
                MigGeometry::Disabled,
                Location { line: 4, column: 7 }
            ),
            geometry_entry(
                nvidia(Some(vec![2]), vec![(0x10de, 0x2335)]),
                instances(&[("1g.18gb", 3), ("2g.35gb", 2)]),
                Location { line: 6, column: 7 }
            ),
        ]
    );
}

#[test]
fn mig_parted_empty_mig_devices_is_mig_on_without_instances() {
    let file = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, MIG_PARTED).unwrap();

    let all = file.config(Some("all-enabled")).unwrap();

    assert_eq!(
        all.entries,
        vec![geometry_entry(
            nvidia(None, Vec::new()),
            MigGeometry::Instances(BTreeMap::new()),
            Location {
                line: 13,
                column: 7
            }
        )]
    );
}

#[test]
fn mig_parted_zero_count_is_none_of_that_profile() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"1g.18gb\": 0\n      \"3g.71gb\": 2\n";

    let file = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, text).unwrap();

    assert_eq!(
        file.configs[0].entries[0].mig.clone().map(|m| m.geometry),
        Some(instances(&[("3g.71gb", 2)]))
    );
}

#[test]
fn mig_parted_whole_compute_instance_adds_to_its_gpu_instance() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"3c.3g.71gb\": 1\n      \"3g.71gb\": 1\n";

    let file = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, text).unwrap();

    assert_eq!(
        file.configs[0].entries[0].mig.clone().map(|m| m.geometry),
        Some(instances(&[("3g.71gb", 2)]))
    );
}

#[test]
fn mig_parted_enabled_without_mig_devices_is_located_at_the_entry() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n";

    assert_eq!(
        mig_parted_error(text),
        (
            4,
            5,
            "mig-enabled: true without mig-devices: expected mig-devices, {} for MIG mode \
             without GPU instances"
                .to_owned()
        )
    );
}

#[test]
fn mig_parted_devices_with_mig_disabled_is_located_at_mig_devices() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: false\n    mig-devices:\n      \"1g.18gb\": 7\n";

    assert_eq!(
        mig_parted_error(text),
        (
            7,
            7,
            "mig-devices with mig-enabled: false: expected no mig-devices, or mig-enabled: true"
                .to_owned()
        )
    );
}

#[test]
fn mig_parted_negative_count_is_located_at_the_count() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"1g.18gb\": -1\n";

    assert_eq!(
        mig_parted_error(text),
        (
            7,
            18,
            "\"1g.18gb\": -1: expected a count of 0 or more".to_owned()
        )
    );
}

#[test]
fn mig_parted_every_count_zero_is_refused() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"1g.18gb\": 0\n";

    assert_eq!(
        mig_parted_error(text),
        (
            7,
            7,
            "every count in mig-devices is 0: expected one above 0, or mig-devices: {} for none"
                .to_owned()
        )
    );
}

#[test]
fn mig_parted_malformed_profile_is_located_at_the_key() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"1g.5gb\": 1\n      \"1g.18\": 1\n";

    assert_eq!(
        mig_parted_error(text),
        (
            8,
            7,
            format!("\"1g.18\" is not a GPU-instance profile: {PROFILE_EXPECTED}")
        )
    );
}

#[test]
fn mig_parted_smaller_compute_instance_is_refused_at_the_key() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      \"1c.3g.71gb\": 2\n";

    assert_eq!(
        mig_parted_error(text),
        (
            7,
            7,
            format!(
                "\"1c.3g.71gb\" is a compute-instance profile, and a MIG-backed vGPU takes a \
                 whole GPU instance: {PROFILE_EXPECTED}"
            )
        )
    );
}

#[test]
fn mig_parted_missing_mig_enabled_is_located() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-devices: {}\n";

    assert_eq!(
        mig_parted_error(text),
        (
            4,
            5,
            "mig-configs.c[0]: missing field `mig-enabled`".to_owned()
        )
    );
}

#[test]
fn mig_parted_unknown_key_is_located() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n    vgpu-devices: {}\n";

    assert_eq!(
        mig_parted_error(text),
        (
            6,
            5,
            "mig-configs.c[0]: unknown field `vgpu-devices`, expected one of `device-filter`, \
             `devices`, `mig-enabled`, `mig-devices`"
                .to_owned()
        )
    );
}

#[test]
fn mig_parted_other_version_is_located() {
    let text = "version: v2\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: false\n";

    assert_eq!(
        mig_parted_error(text),
        (
            1,
            10,
            "version \"v2\" is not supported: expected version: v1".to_owned()
        )
    );
}

#[test]
fn mig_parted_empty_config_is_located() {
    let text = "version: v1\nmig-configs:\n  c: []\n";

    assert_eq!(
        mig_parted_error(text),
        (
            3,
            6,
            "config \"c\" is empty: expected at least one entry".to_owned()
        )
    );
}

#[test]
fn mig_parted_bad_device_filter_is_located() {
    let text = "version: v1\nmig-configs:\n  c:\n  - devices: all\n    device-filter: H200\n    mig-enabled: false\n";

    assert_eq!(
        mig_parted_error(text),
        (
            5,
            20,
            "device-filter \"H200\" is not a device id: expected the PCI device id and vendor id \
             as one number, such as \"0x1EB810DE\""
                .to_owned()
        )
    );
}

#[test]
fn format_of_file_tells_mig_parted_by_its_top_level_key() {
    let formats = (
        Format::of_file(Path::new("mig.yaml"), MIG_PARTED),
        Format::of_file(Path::new("dm.yml"), "version: v1\nvgpu-configs: {}\n"),
        Format::of_file(Path::new("host.toml"), MIG_PARTED),
    );

    assert_eq!(
        formats,
        (
            Format::MigPartedYaml,
            Format::DeviceManagerYaml,
            Format::HostToml
        )
    );
}

#[test]
fn plan_mig_parted_entry_on_a_gpu_without_mig_facts_is_refused() {
    let state = host(vec![gpu(Model::L40s, L40S)]);
    let file = DesiredFile::parse("mig.yaml", Format::MigPartedYaml, MIG_PARTED).unwrap();

    let plan = plan(&state, file.config(Some("all-enabled")).unwrap());

    assert_eq!(
        plan.gpus[0]
            .refusals
            .iter()
            .map(|r| (r.refusal.clone(), r.at))
            .collect::<Vec<_>>(),
        vec![(
            Refusal::MigUnknown {
                why: "NVML is not loaded, or does not give this GPU's MIG mode".to_owned()
            },
            Some(Location {
                line: 13,
                column: 7
            })
        )]
    );
}
