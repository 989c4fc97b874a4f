//! NVIDIA vgpu-device-manager's YAML (`version: v1`) from any bytes: never panics, and an error
//! names a line and a column inside the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::plan::Error;
use vgpu_core::plan::desired::{DesiredFile, Format};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(Error::Desired { line, column, .. }) =
        DesiredFile::parse("config.yaml", Format::DeviceManagerYaml, text)
    {
        check_location(text, line, column);
    }
});

/// A location is one-based, on a line of the text (or just past its end), at most one column
/// past that line's last character; lines are broken as YAML 1.1 breaks them (`\n`, `\r\n`,
/// `\r`, U+0085, U+2028, U+2029), as the YAML crate counts them.
fn check_location(text: &str, line: usize, column: usize) {
    let normalized = text.replace("\r\n", "\n");
    let lines: Vec<&str> = normalized
        .split(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'])
        .collect();
    assert!(line >= 1 && line <= lines.len(), "{text:?}: line {line}");
    let width = lines[line - 1].chars().count();
    assert!(
        column >= 1 && column <= width + 1,
        "{text:?}: line {line} column {column}"
    );
}
