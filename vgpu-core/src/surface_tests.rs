//! The public surface as `ARCHITECTURE.md` states it ("vgpu-core", the table of public
//! paths), checked against `lib.rs`: the same public modules, the same names at the root.

use std::collections::BTreeSet;

const LIB: &str = include_str!("lib.rs");
const ARCHITECTURE: &str = include_str!("../../ARCHITECTURE.md");

/// The public modules and root names `lib.rs` declares: `pub mod x;` (not hidden), `pub use
/// crate_name as x;`, and each name of a `pub use path::{a, b};` at the root.
fn declared() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut modules = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut hidden = false;
    for line in LIB.lines() {
        if line == "#[doc(hidden)]" {
            hidden = true;
            continue;
        }
        if let Some(module) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            if !hidden {
                modules.insert(module.to_owned());
            }
        } else if let Some(rest) = line.strip_prefix("pub use ") {
            let rest = rest.trim_end_matches(';');
            if let Some((_, alias)) = rest.split_once(" as ") {
                modules.insert(alias.to_owned());
            } else if let Some((_, list)) = rest.split_once("::{") {
                names.extend(list.trim_end_matches('}').split(", ").map(str::to_owned));
            } else if let Some((_, name)) = rest.rsplit_once("::") {
                names.insert(name.to_owned());
            }
        }
        if !line.starts_with("#[") {
            hidden = false;
        }
    }
    (modules, names)
}

/// The modules and root names in the first cell of each row of ARCHITECTURE.md's table of
/// public paths.
fn documented() -> (BTreeSet<String>, BTreeSet<String>) {
    let table = ARCHITECTURE
        .split("| public path | what it gives |")
        .nth(1)
        .expect("ARCHITECTURE.md has the table of vgpu-core's public paths");
    let mut modules = BTreeSet::new();
    let mut names = BTreeSet::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cell = row
            .split('|')
            .nth(1)
            .unwrap_or_default()
            .trim()
            .trim_matches('`');
        let path = cell
            .strip_prefix("vgpu_core::")
            .expect("each public path starts with vgpu_core::");
        match path.strip_prefix('{') {
            Some(list) => names.extend(list.trim_end_matches('}').split(", ").map(str::to_owned)),
            None => {
                modules.insert(path.to_owned());
            }
        }
    }
    (modules, names)
}

#[test]
fn architecture_names_the_public_modules_and_root_names_lib_declares() {
    let (modules, names) = declared();
    assert_eq!(documented(), (modules.clone(), names.clone()));
    assert_eq!(
        names,
        [
            "Error",
            "ErrorKind",
            "HostPaths",
            "Manager",
            "Result",
            "discover"
        ]
        .map(str::to_owned)
        .into()
    );
    assert!(!modules.contains("backend") && !modules.contains("fuzzing"));
}
