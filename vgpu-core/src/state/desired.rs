//! Reading desired-state files (`host.toml`, NVIDIA vgpu-device-manager and mig-parted YAML)
//! for `vgpu-plan`, which parses text and reads nothing.

use std::path::Path;

use crate::error::Result;
use crate::plan::desired::{DesiredFile, Format};
use crate::state::input::read_input_text;

/// The largest desired-state file read.
const FILE_LIMIT: usize = 1024 * 1024;

/// Reads the desired-state file at `path`, in the format its name and text imply
/// ([`Format::of_file`]), and parses it ([`DesiredFile::parse`]). The file is the caller's:
/// one that cannot be read is [`StateError::Input`](crate::state::StateError::Input).
pub fn read_desired(path: &Path) -> Result<DesiredFile> {
    let text = read_input_text(path, FILE_LIMIT)?;
    Ok(DesiredFile::parse(
        path,
        Format::of_file(path, &text),
        &text,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::MIG_PARTED;

    #[test]
    fn desired_file_read_detects_mig_parted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, MIG_PARTED).unwrap();

        let file = read_desired(&path).unwrap();

        assert_eq!(
            (
                file.format,
                file.configs
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
            ),
            (Format::MigPartedYaml, vec!["all-enabled", "custom"])
        );
    }
}
