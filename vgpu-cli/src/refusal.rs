//! The errors `vgpuctl` finds itself, beside those of the libraries: a message and the
//! [`ErrorKind`] a caller acts on. Every error `vgpuctl` reports carries a kind
//! ([`crate::error_kind`]); one the command line makes is a [`Refusal`].

use vgpu_core::ErrorKind;

/// An error of the command line itself: arguments that do not go together, a domain that
/// cannot move here, a file that is not what the command reads. `Display` does not repeat
/// the source.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What a caller can do about it.
    pub kind: ErrorKind,
    /// What is wrong, in one line.
    pub message: String,
    /// What it was found from, when another error says more.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Refusal {
    /// A refusal of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Refusal {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The arguments or a file the caller named are wrong.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadInput, message)
    }

    /// The same refusal, found from `source`.
    #[must_use]
    pub fn because(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The Rust files under `dir`, recursively.
    fn sources(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(sources(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        files
    }

    /// Each place in `text` where an error is made of a bare string (`bail!("…")`,
    /// `anyhow!("…")`), which carries no kind: `file:line`.
    fn untyped_errors(file: &Path, text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for mac in ["bail!(", "anyhow!("] {
            for (at, _) in text.match_indices(mac) {
                let rest = text[at + mac.len()..].trim_start();
                if rest.starts_with('"') || rest.starts_with("r\"") || rest.starts_with("r#") {
                    let line = text[..at].lines().count();
                    found.push(format!("{}:{line}", file.display()));
                }
            }
        }
        found
    }

    #[test]
    fn cli_sources_make_no_error_without_a_kind() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = sources(&root.join("src"));
        files.extend(sources(&root.join("../vgpu-cli-libvirt/src")));
        // This file's own test names the macros in strings.
        files.retain(|f| !f.ends_with("refusal.rs"));

        let found: Vec<String> = files
            .iter()
            .flat_map(|f| untyped_errors(f, &std::fs::read_to_string(f).unwrap()))
            .collect();

        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn untyped_errors_finds_a_bare_string_bail() {
        let text = "fn f() -> Result<()> {\n    anyhow::bail!(\n        \"no kind\"\n    )\n}\n";

        assert_eq!(untyped_errors(Path::new("x.rs"), text), vec!["x.rs:2"]);
    }
}
