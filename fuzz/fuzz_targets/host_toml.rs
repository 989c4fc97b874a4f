//! A desired-state `host.toml` from any bytes: never panics, and an error names a line and a
//! column inside the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpu_core::plan::Error;
use vgpu_core::plan::desired::{DesiredFile, Format};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(Error::Desired { line, column, .. }) =
        DesiredFile::parse("host.toml", Format::HostToml, text)
    {
        check_location(text, line, column);
    }
});

/// A location is one-based, on a line of the text (or just past its end), at most one column
/// past that line's last character.
fn check_location(text: &str, line: usize, column: usize) {
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(line >= 1 && line <= lines.len(), "{text:?}: line {line}");
    let width = lines[line - 1].chars().count();
    assert!(
        column >= 1 && column <= width + 1,
        "{text:?}: line {line} column {column}"
    );
}
