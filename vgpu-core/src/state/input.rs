//! Files the caller names on the command line (`plan -f`, `can-host -f`, `--metadata`): read
//! whole, bounded, and every failure is the caller's ([`StateError::Input`](crate::state::StateError::Input), kind `bad-input`), not
//! the host's.

use std::io::{self, Read};
use std::path::Path;

use crate::error::{Result, StateError};

/// Reads at most `limit` bytes of the file the caller named at `path`.
///
/// A file that is missing, unreadable or larger than `limit` is [`StateError::Input`](crate::state::StateError::Input) with the
/// path and the kernel's answer.
pub fn read_input(path: &Path, limit: usize) -> Result<Vec<u8>> {
    let input = |source| StateError::Input {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(input)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    let bound = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    file.take(bound).read_to_end(&mut bytes).map_err(input)?;
    if bytes.len() > limit {
        return Err(input(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ))
        .into());
    }
    tracing::trace!(path = %path.display(), bytes = bytes.len(), "read input");
    Ok(bytes)
}

/// [`read_input`] as UTF-8 text.
pub fn read_input_text(path: &Path, limit: usize) -> Result<String> {
    String::from_utf8(read_input(path, limit)?).map_err(|_| {
        StateError::Input {
            path: path.to_path_buf(),
            source: io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn read_input_missing_file_is_bad_input_with_path_and_errno() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.toml");

        let err = read_input(&path, 16).unwrap_err();

        assert_eq!(
            (err.kind(), err.errno(), err.chain()),
            (
                ErrorKind::BadInput,
                Some(libc_enoent()),
                format!(
                    "cannot read {}: No such file or directory (os error 2)",
                    path.display()
                )
            )
        );
    }

    #[test]
    fn read_input_over_limit_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.xml");
        std::fs::write(&path, "12345").unwrap();

        let err = read_input(&path, 4).unwrap_err();

        assert_eq!(
            (err.kind(), err.chain()),
            (
                ErrorKind::BadInput,
                format!("cannot read {}: larger than 4 bytes", path.display())
            )
        );
    }

    #[test]
    fn read_input_text_not_utf8_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("latin1.toml");
        std::fs::write(&path, b"\xff\xfe").unwrap();

        let err = read_input_text(&path, 16).unwrap_err();

        assert_eq!(
            (err.kind(), err.chain()),
            (
                ErrorKind::BadInput,
                format!("cannot read {}: not UTF-8 text", path.display())
            )
        );
    }

    #[test]
    fn read_input_at_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("four");
        std::fs::write(&path, "1234").unwrap();

        assert_eq!(read_input(&path, 4).unwrap(), b"1234");
    }

    fn libc_enoent() -> i32 {
        nix::errno::Errno::ENOENT as i32
    }
}
