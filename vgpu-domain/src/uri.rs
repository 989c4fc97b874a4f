//! libvirt connection URIs: the system driver's, and that of the QEMU driver embedded in a
//! process (<https://libvirt.org/drvqemu.html#embedded-driver>).

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The system QEMU driver, through `libvirtd` or `virtqemud`.
pub const DEFAULT_URI: &str = "qemu:///system";

const EMBED_PREFIX: &str = "qemu:///embed?";

/// The URI of libvirt's embedded QEMU driver keeping all its state under `root`:
/// `qemu:///embed?root=<root>`, with bytes other than letters, digits and `/._~-`
/// percent-encoded.
pub fn embedded_uri(root: &Path) -> String {
    let mut uri = format!("{EMBED_PREFIX}root=");
    for &b in root.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._~-".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// The `root` of an embedded driver's URI, percent-decoded; `None` for any other URI.
pub fn embedded_root(uri: &str) -> Option<PathBuf> {
    let query = uri.strip_prefix(EMBED_PREFIX)?;
    let value = query.split('&').find_map(|p| p.strip_prefix("root="))?;
    let bytes = value.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                decoded.push(b);
                i += 3;
            }
            (b, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    Some(PathBuf::from(OsString::from_vec(decoded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_uri_plain_path() {
        assert_eq!(
            embedded_uri(Path::new("/var/tmp/vgpu-1")),
            "qemu:///embed?root=/var/tmp/vgpu-1"
        );
    }

    #[test]
    fn embedded_uri_escapes_space_and_ampersand() {
        assert_eq!(
            embedded_uri(Path::new("/tmp/a b&c")),
            "qemu:///embed?root=/tmp/a%20b%26c"
        );
    }

    #[test]
    fn embedded_root_decodes_what_embedded_uri_encodes() {
        let root = Path::new("/tmp/a b&c%d");
        assert_eq!(embedded_root(&embedded_uri(root)).as_deref(), Some(root));
    }

    #[test]
    fn embedded_root_of_system_uri_is_none() {
        assert_eq!(embedded_root(DEFAULT_URI), None);
    }
}
