//! The crate graph as `ARCHITECTURE.md` draws it ("The crate graph"), checked against the
//! `[dependencies]` of each workspace crate's `Cargo.toml`.
//!
//! A crate uses the crates its row names and what they use. So what each crate reaches in the
//! drawing is compared with what it reaches through the manifests. A crate with no row uses no
//! workspace crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ARCHITECTURE: &str = include_str!("../../ARCHITECTURE.md");

/// Each crate and the crates it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph in the text block under "The crate graph". The header's `uses` and `what it is`
/// mark the columns. A line with no crate goes on with the row above; `-` is none.
fn drawn(text: &str) -> Graph {
    let block = text
        .split("## The crate graph")
        .nth(1)
        .and_then(|section| section.split("```text\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md draws the crate graph in a text block");
    let mut lines = block.lines();
    let header = lines.next().expect("the block has a header");
    let uses_at = header.find("uses").expect("the header names `uses`");
    let what_at = header
        .find("what it is")
        .expect("the header names `what it is`");
    let mut graph = Graph::new();
    let mut row = String::new();
    for line in lines {
        let name = line.get(..uses_at).unwrap_or(line).trim();
        if !name.is_empty() {
            name.clone_into(&mut row);
        }
        let uses = line
            .get(uses_at..what_at.min(line.len()))
            .unwrap_or_default();
        graph.entry(row.clone()).or_default().extend(
            uses.split(',')
                .map(str::trim)
                .filter(|used| !used.is_empty() && *used != "-")
                .map(str::to_owned),
        );
    }
    graph
}

/// A TOML file under `root`.
fn manifest(root: &Path, path: &str) -> toml::Table {
    let path = root.join(path);
    let text = std::fs::read_to_string(&path).expect("a manifest of the workspace is readable");
    text.parse().expect("a manifest of the workspace parses")
}

/// Each workspace member of the workspace at `root`, with the members its `[dependencies]`
/// name (optional ones too).
fn declared(root: &Path) -> Graph {
    let workspace = manifest(root, "Cargo.toml");
    let members = workspace["workspace"]["members"]
        .as_array()
        .expect("the workspace lists its members");
    let crates: BTreeMap<String, BTreeSet<String>> = members
        .iter()
        .map(|member| {
            let member = member.as_str().expect("a member is a path");
            let crate_manifest = manifest(root, &format!("{member}/Cargo.toml"));
            let name = crate_manifest["package"]["name"].as_str().expect("a name");
            let deps = crate_manifest
                .get("dependencies")
                .and_then(toml::Value::as_table)
                .map(|deps| deps.keys().cloned().collect())
                .unwrap_or_default();
            (name.to_owned(), deps)
        })
        .collect();
    crates
        .iter()
        .map(|(name, deps)| {
            let members = deps.iter().filter(|d| crates.contains_key(*d)).cloned();
            (name.clone(), members.collect())
        })
        .collect()
}

/// Every crate `graph` reaches from each of its crates, along one edge or more.
fn closure(graph: &Graph) -> Graph {
    graph
        .keys()
        .map(|name| {
            let mut reached = BTreeSet::new();
            let mut next: Vec<&String> = graph[name].iter().collect();
            while let Some(at) = next.pop() {
                if reached.insert(at.clone()) {
                    next.extend(graph.get(at).into_iter().flatten());
                }
            }
            (name.clone(), reached)
        })
        .collect()
}

/// Where the drawing and the declared graph differ, one line per crate; none when they agree.
fn differences(drawn: &Graph, declared: &Graph) -> Vec<String> {
    let (shown, expected) = (closure(drawn), closure(declared));
    let none = BTreeSet::new();
    let names: BTreeSet<&String> = shown.keys().chain(expected.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let Some(uses) = expected.get(name) else {
                return Some(format!("{name}: drawn, but not a workspace crate"));
            };
            let drawn_uses = shown.get(name).unwrap_or(&none);
            (drawn_uses != uses)
                .then(|| format!("{name}: drawn using {drawn_uses:?}, declared {uses:?}"))
        })
        .collect()
}

#[test]
fn crate_graph_drawn_agrees_with_cargo_manifests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");

    let found = differences(&drawn(ARCHITECTURE), &declared(&root));

    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn crate_graph_missing_edge_is_a_difference() {
    let text = "## The crate graph\n\n```text\n\
                crate   uses        what it is\n\
                a       -           data\n\
                b       a           plans\n\
                c       b,          host\n\
                \x20       d\n\
                d       a           reports\n\
                ```\n";
    let declared = Graph::from([
        ("a".to_owned(), BTreeSet::new()),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
        (
            "c".to_owned(),
            BTreeSet::from(["a".to_owned(), "b".to_owned()]),
        ),
        ("d".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("e".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);

    let found = differences(&drawn(text), &declared);

    assert_eq!(
        found,
        [
            r#"c: drawn using {"a", "b", "d"}, declared {"a", "b"}"#,
            r#"d: drawn using {"a"}, declared {"a", "b"}"#,
            r#"e: drawn using {}, declared {"a"}"#,
        ]
    );
}
