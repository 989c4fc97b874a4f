//! The file readers: every bad input is an error naming the file, line and column.

use std::path::PathBuf;

use crate::Error;
use crate::desired::{
    DesiredFile, Entry, Format, Location, Partition, Selection, SizeItem, TypeItem, VfDriver,
};
use crate::model::NVIDIA_VENDOR_ID;
use crate::model::definition::Start;
use crate::testing::unit::addr;

fn toml_error(text: &str) -> (usize, usize, String) {
    match DesiredFile::parse("host.toml", Format::HostToml, text) {
        Err(Error::Desired {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a located error, got {other:?}"),
    }
}

fn yaml_error(text: &str) -> (usize, usize, String) {
    match DesiredFile::parse("config.yaml", Format::DeviceManagerYaml, text) {
        Err(Error::Desired {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a located error, got {other:?}"),
    }
}

const HEAD: &str = "version = 1\n[configs.default]\n[[configs.default.gpu]]\n";

#[test]
fn host_toml_every_key_is_read() {
    let text = "version = 1\n[configs.lab]\nseries = \"B\"\npersistence = \"manual\"\n[[configs.lab.gpu]]\naddress = \"0000:3b:00.0\"\nsizes = [\"2x2GiB\", \"1GiB\"]\nround_up = true\n[[configs.lab.gpu]]\nvendor = \"intel\"\nmodel = \"Flex 170\"\nnuma = 1\nvfs = 8\nvf_driver = \"default\"\n[[configs.lab.gpu]]\nall = true\ntypes = { \"T4-1Q\" = 16 }\npersistence = \"auto\"\n";

    let file = DesiredFile::parse("host.toml", Format::HostToml, text).unwrap();

    assert_eq!(
        file.configs[0].entries,
        vec![
            Entry {
                selection: Selection {
                    address: Some(addr("0000:3b:00.0")),
                    ..Selection::default()
                },
                partition: Partition::Sizes(vec![
                    SizeItem {
                        count: Some(2),
                        framebuffer_mib: 2048,
                        at: Location {
                            line: 7,
                            column: 10
                        }
                    },
                    SizeItem {
                        count: None,
                        framebuffer_mib: 1024,
                        at: Location {
                            line: 7,
                            column: 20
                        }
                    }
                ]),
                series: 'B',
                round_up: true,
                persistence: Start::Manual,
                vf_driver: VfDriver::VfioPci,
                tenant: None,
                size_mode: None,
                scheduler: None,
                mig: None,
                at: Location { line: 5, column: 1 }
            },
            Entry {
                selection: Selection {
                    model: Some("Flex 170".to_owned()),
                    vendor: Some(0x8086),
                    numa_node: Some(1),
                    ..Selection::default()
                },
                partition: Partition::Vfs {
                    count: 8,
                    at: Location {
                        line: 13,
                        column: 7
                    }
                },
                series: 'B',
                round_up: false,
                persistence: Start::Manual,
                vf_driver: VfDriver::Default,
                tenant: None,
                size_mode: None,
                scheduler: None,
                mig: None,
                at: Location { line: 9, column: 1 }
            },
            Entry {
                selection: Selection {
                    all: true,
                    ..Selection::default()
                },
                partition: Partition::Types(vec![TypeItem {
                    name: "T4-1Q".to_owned(),
                    count: 16,
                    at: Location {
                        line: 17,
                        column: 11
                    }
                }]),
                series: 'B',
                round_up: false,
                persistence: Start::Auto,
                vf_driver: VfDriver::VfioPci,
                tenant: None,
                size_mode: None,
                scheduler: None,
                mig: None,
                at: Location {
                    line: 15,
                    column: 1
                }
            }
        ]
    );
}

#[test]
fn host_toml_unknown_key_names_line_column_and_the_keys_expected() {
    let (line, column, message) = toml_error(&format!("{HEAD}all = true\nsize = \"1GiB\"\n"));

    assert_eq!(
        (line, column, message),
        (
            5,
            1,
            "unknown field `size`, expected one of `all`, `address`, `model`, `vendor`, `numa`, `sizes`, `types`, `vfs`, `series`, `round_up`, `persistence`, `vf_driver`, `scheduler`, `mig`, `optional`, `tenant`, `size_mode`".to_owned()
        )
    );
}

#[test]
fn host_toml_other_version_is_refused_where_it_is_written() {
    let (line, column, message) = toml_error(
        "\nversion = 2\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 1\n",
    );

    assert_eq!(
        (line, column, message),
        (
            2,
            11,
            "version 2 is not supported: expected version = 1".to_owned()
        )
    );
}

#[test]
fn host_toml_syntax_error_is_located() {
    let (line, column, _message) = toml_error(&format!("{HEAD}all = true\nsizes = \"1GiB\n"));

    assert_eq!((line, column), (5, 14));
}

#[test]
fn host_toml_impossible_size_is_located_at_the_size() {
    let (line, column, message) = toml_error(&format!("{HEAD}all = true\nsizes = \"0x12GiB\"\n"));

    assert_eq!(
        (line, column, message),
        (
            5,
            9,
            "\"0\" is not a count of 1 or more: expected a size such as \"12GiB\", \"512MiB\" or \"4x12GiB\" (count x size)".to_owned()
        )
    );
}

#[test]
fn host_toml_bad_size_in_a_list_is_located_at_that_size() {
    let (line, column, _message) =
        toml_error(&format!("{HEAD}all = true\nsizes = [\"1GiB\", \"2GB\"]\n"));

    assert_eq!((line, column), (5, 18));
}

#[test]
fn host_toml_zero_count_of_a_type_is_refused() {
    let (line, column, _message) =
        toml_error(&format!("{HEAD}all = true\ntypes = {{ \"T4-1Q\" = 0 }}\n"));

    assert_eq!((line, column), (5, 21));
}

#[test]
fn host_toml_unknown_persistence_names_the_choices() {
    let (line, column, message) = toml_error(&format!(
        "{HEAD}all = true\nvfs = 1\npersistence = \"boot\"\n"
    ));

    assert_eq!(
        (line, column, message),
        (
            6,
            15,
            "unknown variant `boot`, expected `auto` or `manual`".to_owned()
        )
    );
}

#[test]
fn host_toml_entry_without_selection_is_refused() {
    let (line, column, message) = toml_error(&format!("{HEAD}vfs = 1\n"));

    assert_eq!(
        (line, column, message),
        (
            3,
            1,
            "no selection: expected all = true, address, model, vendor or numa".to_owned()
        )
    );
}

#[test]
fn host_toml_two_partitions_are_refused() {
    let (_line, _column, message) =
        toml_error(&format!("{HEAD}all = true\nvfs = 1\nsizes = \"1GiB\"\n"));

    assert_eq!(
        message,
        "more than one partition: expected only one of sizes, types and vfs"
    );
}

#[test]
fn host_toml_bad_address_is_located() {
    let (line, column, _message) = toml_error(&format!("{HEAD}address = \"41:00.0\"\nvfs = 1\n"));

    assert_eq!((line, column), (4, 11));
}

#[test]
fn device_manager_yaml_is_read_as_nvidia_selections() {
    let text = "version: v1\nvgpu-configs:\n  t4-small:\n  - devices: [0, 1]\n    device-filter: [\"0x1EB810DE\"]\n    vgpu-devices:\n      \"T4-1Q\": 16\n";

    let file = DesiredFile::parse("config.yaml", Format::DeviceManagerYaml, text).unwrap();

    assert_eq!(
        file.configs[0].entries,
        vec![Entry {
            selection: Selection {
                vendor: Some(NVIDIA_VENDOR_ID),
                device_ids: vec![(0x10de, 0x1eb8)],
                nvidia_indices: Some(vec![0, 1]),
                optional: true,
                ..Selection::default()
            },
            partition: Partition::Types(vec![TypeItem {
                name: "T4-1Q".to_owned(),
                count: 16,
                at: Location { line: 7, column: 7 }
            }]),
            series: 'Q',
            round_up: false,
            persistence: Start::Auto,
            vf_driver: VfDriver::VfioPci,
            tenant: None,
            size_mode: None,
            scheduler: None,
            mig: Some(crate::desired::MigRequest {
                geometry: crate::desired::MigGeometry::Disabled,
                at: Location { line: 7, column: 7 },
                implied: true
            }),
            at: Location { line: 4, column: 5 }
        }]
    );
}

#[test]
fn device_manager_unknown_key_is_located() {
    let (line, column, message) = yaml_error(
        "version: v1\nvgpu-configs:\n  default:\n  - devices: all\n    vgpu-device:\n      T4-1Q: 16\n",
    );

    assert_eq!(
        (line, column, message),
        (
            5,
            5,
            "vgpu-configs.default[0]: unknown field `vgpu-device`, expected one of `device-filter`, `devices`, `vgpu-devices`".to_owned()
        )
    );
}

#[test]
fn device_manager_other_version_is_located() {
    let (line, column, message) = yaml_error(
        "version: v2\nvgpu-configs:\n  default:\n  - devices: all\n    vgpu-devices: {}\n",
    );

    assert_eq!(
        (line, column, message),
        (
            1,
            10,
            "version \"v2\" is not supported: expected version: v1".to_owned()
        )
    );
}

#[test]
fn device_manager_zero_count_is_located_at_the_type() {
    let (line, column, message) = yaml_error(
        "version: v1\nvgpu-configs:\n  default:\n  - devices: all\n    vgpu-devices:\n      T4-1Q: 0\n",
    );

    assert_eq!(
        (line, column, message),
        (
            6,
            14,
            "\"T4-1Q\": 0: expected a count of 1 or more".to_owned()
        )
    );
}

#[test]
fn device_manager_devices_other_than_all_is_refused() {
    let (line, column, _message) = yaml_error(
        "version: v1\nvgpu-configs:\n  default:\n  - devices: some\n    vgpu-devices: {}\n",
    );

    assert_eq!((line, column), (4, 14));
}

#[test]
fn device_manager_bad_device_filter_is_located() {
    let (line, column, _message) = yaml_error(
        "version: v1\nvgpu-configs:\n  default:\n  - devices: all\n    device-filter: T4\n    vgpu-devices: {}\n",
    );

    assert_eq!((line, column), (5, 20));
}

#[test]
fn device_manager_syntax_error_is_located() {
    let (line, column, _message) =
        yaml_error("version: v1\nvgpu-configs:\n  default: [\n  - devices: all\n");

    assert_eq!((line, column), (4, 3));
}

// Found by the `device_manager_yaml` fuzz target: the YAML crate marks the end of a text
// without a final line break on a line past the last.
#[test]
fn device_manager_missing_version_without_final_newline_is_located_in_the_text() {
    let (line, column, message) = yaml_error("# a\n# b");

    assert_eq!(
        (line, column, message),
        (2, 4, "missing field `version`".to_owned())
    );
}

// Found by the `device_manager_yaml` fuzz target: a config with no value at the end of a file
// without a final newline was located on a line past the last.
#[test]
fn device_manager_empty_config_at_end_of_file_is_located_in_the_text() {
    let (line, column, message) = yaml_error("version: v1\nvgpu-configs:\n  ? x");

    assert_eq!(
        (line, column, message),
        (
            3,
            6,
            "config \"x\" is empty: expected at least one entry".to_owned()
        )
    );
}

#[test]
fn device_manager_carriage_returns_break_lines_as_yaml_does() {
    let (line, column, _message) = yaml_error("# a\r# b\r\n# c");

    assert_eq!((line, column), (3, 4));
}

#[test]
fn config_without_name_is_default() {
    let file = DesiredFile::parse(
        "host.toml",
        Format::HostToml,
        "version = 1\n[configs.a]\n[[configs.a.gpu]]\nall = true\nvfs = 1\n[configs.default]\n[[configs.default.gpu]]\nall = true\nvfs = 2\n",
    )
    .unwrap();

    assert_eq!(
        file.config(None).map(|c| c.name.clone()).ok(),
        Some("default".to_owned())
    );
}

#[test]
fn format_of_path_by_extension() {
    assert_eq!(
        (
            Format::of_path(&PathBuf::from("a/config.yml")),
            Format::of_path(&PathBuf::from("host.toml"))
        ),
        (Format::DeviceManagerYaml, Format::HostToml)
    );
}
