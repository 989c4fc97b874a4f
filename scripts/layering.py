#!/usr/bin/env python3
"""The workspace's layering: no cycle between a crate's top-level modules, vgpu-core's modules
in layer order, and no crate depending on one it must not.

Modules. For each library and binary target of each workspace crate, the files are found from
the crate root through its `mod` declarations (with `#[path]`). A reference from top-level
module A to top-level module B is a path `crate::B...`, `$crate::B...`, a `super::` chain that
leaves A, or `crate::NAME` where the root re-exports NAME from B (`pub use B::...NAME`).
Comments and string literals are left out. So is test code: items under a `#[cfg(...)]` that
holds only with `test` (`cfg(test)`, `cfg(all(test, ...))`), and modules named `tests`. Every
strongly connected component of more than one module is a cycle; each of its edges is printed
with the file:line of each reference. LAYERS orders a library's modules: a module uses only
those before it. ALLOWED_EDGES lists the references both checks leave out, each with its reason.

Crates. `cargo metadata --format-version 1 --no-deps` gives each workspace crate's declared
dependencies, of every kind (normal, dev, build). FORBIDDEN says which crates each workspace
crate must not depend on; ONLY_FOR says which crates alone may depend on a given one; DEV_ONLY
names the crates that may only be dev-dependencies. Every workspace crate needs a FORBIDDEN
entry, so that a new crate is placed on purpose.

Usage: scripts/layering.py [--self-test] [--root DIR]

--root DIR checks the workspace at DIR (default: the one this script is in). --self-test checks
the checker instead: on a small crate it writes to a temporary directory (a two-module and a
three-module cycle, references in test code, comments and strings that must not count, an
allowed edge, a layer order) and on made-up metadata. Exit status: 0 when the layering holds,
1 on a violation, 2 on a usage error.
"""
import json
import os
import subprocess
import sys
import tempfile

# vgpu-core and what is built on it.
CORE_AND_ABOVE = {"vgpu-core", "vgpu-libvirt", "vgpu-cli", "vgpu-cli-libvirt", "vgpu-testing"}
# The model, the planner, libvirt's domains as data, and everything built on them.
MODEL_AND_ABOVE = {"vgpu-model", "vgpu-plan", "vgpu-domain", "vgpu-report"} | CORE_AND_ABOVE
# What only the host-facing crates may touch: the kernel (nix, udev), an async runtime,
# libvirt and NVML.
HOST_IO = {"nix", "libc", "udev", "tokio", "virt", "nvml-wrapper", "vgpu-nvml-ext", "tempfile"}

# Crates that must not appear among a workspace crate's dependencies, of any kind.
FORBIDDEN = {
    # Plain data and pure parsers: no other workspace crate, no host I/O.
    "vgpu-model": (MODEL_AND_ABOVE - {"vgpu-model"}) | HOST_IO | {"vgpu-sim"},
    # Pure planning over the model: the model only, no host I/O.
    "vgpu-plan": CORE_AND_ABOVE | HOST_IO | {"vgpu-sim"},
    # libvirt's domains as data (domain XML, hostdevs, owners): the model only, no host I/O,
    # so that vgpuctl reads what vgpuctl-libvirt prints without libvirt.
    "vgpu-domain": CORE_AND_ABOVE | HOST_IO | {"vgpu-plan", "vgpu-sim"},
    # Reports over the model and the plan: no host I/O, nothing above them.
    "vgpu-report": CORE_AND_ABOVE | HOST_IO | {"vgpu-domain", "vgpu-sim"},
    # The library: no printing, no libvirt (ARCHITECTURE.md, code map); no report, which is
    # at the edge: what the core needs of one is in vgpu-model.
    "vgpu-core": {"vgpu-cli", "vgpu-cli-libvirt", "vgpu-libvirt", "virt", "vgpu-report"},
    "vgpu-libvirt": {"vgpu-cli", "vgpu-cli-libvirt"},
    # vgpuctl: no libvirt, not even for its tests; vgpuctl-libvirt runs what needs it.
    "vgpu-cli": {"vgpu-libvirt", "vgpu-cli-libvirt", "virt"},
    "vgpu-cli-libvirt": set(),
    # An independent kernel model, sharing no code with vgpu-core (ARCHITECTURE.md, code map).
    "vgpu-sim": MODEL_AND_ABOVE,
    # The layer under vgpu-core's `nvml` module.
    "vgpu-nvml-ext": MODEL_AND_ABOVE,
    # Test NVML libraries, standing in for the driver's under vgpu-core's tests.
    "vgpu-nvml-fake": MODEL_AND_ABOVE,
    "vgpu-nvml-fake-legacy": MODEL_AND_ABOVE,
    # Fake host trees and test set-up over the library: nothing above it, no simulator.
    "vgpu-testing": {"vgpu-libvirt", "vgpu-cli", "vgpu-cli-libvirt", "virt", "vgpu-sim"},
}

# Crates that may only be dev-dependencies: test scaffolding never ships in a library or binary.
DEV_ONLY = {"vgpu-testing"}

# Crates only the named workspace crates may depend on.
ONLY_FOR = {
    # libvirt's binding links libvirt at build time: only vgpu-libvirt may pull it in.
    "virt": {"vgpu-libvirt"},
    # What reaches libvirt: vgpuctl-libvirt only.
    "vgpu-libvirt": {"vgpu-cli-libvirt"},
    # NVML is reached through vgpu-core's `nvml` module and vgpu-nvml-ext only.
    "nvml-wrapper": {"vgpu-core", "vgpu-nvml-ext"},
}

# The top-level modules of a crate's library in layer order: each may use only those before it.
# ARCHITECTURE.md's tables list them in this order. A module missing here is an error.
LAYERS = {
    "vgpu-model": [
        "pci",
        "checks",
        "location",
        "limit",
        "sizes",
        "serde_hex",
        "delta",
        "parse",
        "holder",
        "nvml",
        "migration",
        "definition",
        "name",
        "catalog",
        "kind",
        "policy",
        "driver_params",
        "usage",
    ],
    "vgpu-plan": [
        "placement",
        "error",
        "desired",
        "steps",
        "capacity",
        "offers",
        "geometry",
        "planner",
        "tenants",
        "place",
        "testing",
    ],
    "vgpu-core": [
        "error",
        "host",
        "discovery",
        "nvml",
        "checks",
        "backend",
        "state",
        "manager",
        "fuzzing",
    ],
    "vgpu-sim": [
        "error",
        "profile",
        "control",
        "uevent",
        "process",
        "vfio",
        "kernel",
        "tree",
        "shared",
        "fs",
        "host",
        "libvirtd",
        "peer",
    ],
}

# Module edges (crate, from, to) left out of both checks, each with why it is there. An entry
# whose edge no longer exists is an error, so that the list only shrinks.
ALLOWED_EDGES = {}

KEYWORDS_NOT_MODULES = {"self", "super", "crate", "Self"}


# --- Lexing ---------------------------------------------------------------------------------


def lex(text):
    """The tokens of Rust source as (kind, value, line): kind is 'id' or 'p' (punctuation).

    Comments, string, byte-string, raw-string and char literals are dropped; lifetimes are
    dropped; '::' is one token."""
    tokens = []
    i = 0
    n = len(text)
    line = 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth = 0
            while i < n:
                if text.startswith("/*", i):
                    depth += 1
                    i += 2
                elif text.startswith("*/", i):
                    depth -= 1
                    i += 2
                    if depth == 0:
                        break
                else:
                    if text[i] == "\n":
                        line += 1
                    i += 1
        elif c in "rb" and _raw_string_at(text, i):
            j = i + 1 if c == "r" else i + 2
            hashes = 0
            while text[j] == "#":
                hashes += 1
                j += 1
            end = text.find('"' + "#" * hashes, j + 1)
            end = n if end < 0 else end + 1 + hashes
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i)) or (
            c == "c" and text.startswith('c"', i)
        ):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "'" or (c == "b" and text.startswith("b'", i)):
            j = i + (1 if c == "'" else 2)
            if j < n and text[j] == "\\":
                end = text.find("'", j + 2)
                i = n if end < 0 else end + 1
            elif j + 1 < n and text[j + 1] == "'":
                i = j + 2
            else:
                # A lifetime or a label: skip the quote and the identifier after it.
                i = j
                while i < n and (text[i].isalnum() or text[i] == "_"):
                    i += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            if word == "r" and text.startswith("#", j):
                # A raw identifier, r#name.
                k = j + 1
                while k < n and (text[k].isalnum() or text[k] == "_"):
                    k += 1
                word = text[j + 1 : k]
                j = k
            tokens.append(("id", word, line))
            i = j
        elif c.isdigit():
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_."):
                if text[j] == "." and not (j + 1 < n and text[j + 1].isdigit()):
                    break
                j += 1
            i = j
        elif text.startswith("::", i):
            tokens.append(("p", "::", line))
            i += 2
        else:
            tokens.append(("p", c, line))
            i += 1
    return tokens


def _raw_string_at(text, i):
    j = i + 1 if text[i] == "r" else i + 2
    if text[i] == "b" and not text.startswith("br", i):
        return False
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        return False
    while j < len(text) and text[j] == "#":
        j += 1
    return j < len(text) and text[j] == '"'


# --- cfg evaluation -------------------------------------------------------------------------


def cfg_only_test(tokens, i):
    """Whether the cfg predicate starting at tokens[i] holds only when `test` does.

    Returns (answer, index after the predicate)."""
    kind, value, _ = tokens[i]
    if kind == "id" and value in ("all", "any", "not") and _is(tokens, i + 1, "("):
        args = []
        j = i + 2
        while not _is(tokens, j, ")"):
            answer, j = cfg_only_test(tokens, j)
            args.append(answer)
            if _is(tokens, j, ","):
                j += 1
        j += 1
        if value == "all":
            return any(args), j
        if value == "any":
            return bool(args) and all(args), j
        return False, j
    if kind == "id" and value == "test" and not _is(tokens, i + 1, "="):
        return True, i + 1
    # Any other predicate (`feature = "x"`, `unix`): skip it.
    j = i + 1
    if _is(tokens, j, "="):
        j += 1
        # The string literal was dropped by the lexer; nothing more to skip.
    return False, j


def _is(tokens, i, value):
    return i < len(tokens) and tokens[i][1] == value and tokens[i][0] == "p"


def _is_id(tokens, i, value=None):
    return i < len(tokens) and tokens[i][0] == "id" and (value is None or tokens[i][1] == value)


def skip_group(tokens, i):
    """The index after the bracketed group opening at tokens[i] ('(', '[' or '{')."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    while i < len(tokens):
        kind, value, _ = tokens[i]
        if kind == "p" and value in pairs:
            stack.append(pairs[value])
        elif kind == "p" and stack and value == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return i


def parse_attribute(tokens, i):
    """At '#' of `#[...]` or `#![...]`: (is it a cfg that holds only with test, path attribute
    value or None, index after it)."""
    j = i + 1
    if _is(tokens, j, "!"):
        j += 1
    end = skip_group(tokens, j)
    only_test = False
    if _is_id(tokens, j + 1, "cfg") and _is(tokens, j + 2, "("):
        only_test, _ = cfg_only_test(tokens, j + 3)
    return only_test, end


def skip_item(tokens, i):
    """The index after the item (or statement) starting at tokens[i]: up to a ';' or the end
    of its first brace group, whichever closes first at depth 0."""
    depth = 0
    while i < len(tokens):
        kind, value, _ = tokens[i]
        if kind == "p" and value in "([":
            depth += 1
        elif kind == "p" and value in ")]":
            depth -= 1
        elif kind == "p" and value == "{":
            if depth == 0:
                return skip_group(tokens, i)
            depth += 1
        elif kind == "p" and value == "}":
            if depth == 0:
                return i  # The end of the enclosing block: the item ended before it.
            depth -= 1
        elif kind == "p" and value == ";" and depth == 0:
            return i + 1
        i += 1
    return i


# --- Module tree and references -------------------------------------------------------------


class Crate:
    """One target's module tree: every file, and every reference from one top-level module to
    another."""

    def __init__(self, root_file):
        self.root_file = os.path.abspath(root_file)
        self.top_modules = set()
        # (top-level module, ident, file, line) for each `crate::ident` or escaping super::.
        self.references = []
        self.reexports = {}  # name re-exported by the root -> top-level module it comes from
        self.files = []
        self._visit(self.root_file, [], is_mod_rs=True)

    def _visit(self, path, modpath, is_mod_rs):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return
        self.files.append(path)
        tokens = lex(text)
        base = os.path.dirname(path)
        if not is_mod_rs:
            base = os.path.join(base, os.path.splitext(os.path.basename(path))[0])
        self._walk(tokens, 0, len(tokens), path, modpath, base, os.path.dirname(path), True)

    def _walk(self, tokens, i, end, path, modpath, base, file_dir, file_level):
        """Walk tokens[i:end], at module path modpath, whose child files live under base."""
        skip_next = False
        path_attr = None
        while i < end:
            kind, value, line = tokens[i]
            if kind == "p" and value == "#" and (_is(tokens, i + 1, "[") or _is(tokens, i + 1, "!")):
                inner = _is(tokens, i + 1, "!")
                only_test, after = parse_attribute(tokens, i)
                if only_test and inner:
                    return  # `#![cfg(test)]`: the whole module is test code.
                if only_test:
                    skip_next = True
                attr_start = i + (3 if inner else 2)
                if _is_id(tokens, attr_start, "path") and _is(tokens, attr_start + 1, "="):
                    path_attr = _path_attr_value(path, tokens[attr_start][2])
                i = after
                continue
            if skip_next:
                skip_next = False
                path_attr = None
                i = skip_item(tokens, i)
                continue
            if kind == "id" and value == "mod" and _is_id(tokens, i + 1):
                name = tokens[i + 1][1]
                if not modpath:
                    self.top_modules.add(name)
                attr, path_attr = path_attr, None
                if _is(tokens, i + 2, ";"):
                    if name != "tests":
                        self._child_file(name, modpath, base, file_dir, file_level, attr)
                    i += 3
                    continue
                if _is(tokens, i + 2, "{"):
                    close = skip_group(tokens, i + 2)
                    if name != "tests":
                        self._walk(
                            tokens,
                            i + 3,
                            close - 1,
                            path,
                            modpath + [name],
                            os.path.join(base, name),
                            file_dir,
                            False,
                        )
                    i = close
                    continue
            path_attr = None
            if kind == "id" and value == "use" and not modpath:
                self._root_use(tokens, i + 1)
            if kind == "id" and value in ("crate", "super") and _is(tokens, i + 1, "::"):
                self._reference(tokens, i, path, modpath)
            i += 1

    def _child_file(self, name, modpath, base, file_dir, file_level, attr):
        if attr is not None:
            where = file_dir if file_level else base
            self._visit(os.path.normpath(os.path.join(where, attr)), modpath + [name], True)
            return
        flat = os.path.join(base, name + ".rs")
        nested = os.path.join(base, name, "mod.rs")
        if os.path.exists(flat):
            self._visit(flat, modpath + [name], False)
        elif os.path.exists(nested):
            self._visit(nested, modpath + [name], True)

    def _reference(self, tokens, i, path, modpath):
        line = tokens[i][2]
        if tokens[i][1] == "crate":
            up_to_root = True
            j = i + 2
        else:
            ups = 0
            j = i
            while _is_id(tokens, j, "super") and _is(tokens, j + 1, "::"):
                ups += 1
                j += 2
            up_to_root = ups == len(modpath)
        if not up_to_root or not modpath:
            return
        for ident in _first_segments(tokens, j):
            self.references.append((modpath[0], ident, path, line))

    def _root_use(self, tokens, i):
        """Record the names a `use` in the root brings in, with the module they come from."""
        if _is_id(tokens, i, "crate") or _is_id(tokens, i, "self"):
            i += 2
        if not _is_id(tokens, i):
            return
        module = tokens[i][1]
        end = i
        while end < len(tokens) and not _is(tokens, end, ";"):
            end += 1
        for k in range(i + 1, end):
            if tokens[k][0] != "id":
                continue
            follows = tokens[k + 1][1] if k + 1 < len(tokens) else ";"
            if follows in (",", "}", ";") or _is_id(tokens, k - 1, "as"):
                self.reexports.setdefault(tokens[k][1], module)

    def edges(self):
        """{(from, to): [(file, line), ...]} between top-level modules."""
        result = {}
        for source, ident, path, line in self.references:
            target = ident if ident in self.top_modules else self.reexports.get(ident)
            if target is None or target == source or target not in self.top_modules:
                continue
            result.setdefault((source, target), []).append((path, line))
        return result


def _path_attr_value(path, line):
    """The string of a `#[path = "..."]` attribute on the given line of path (the lexer drops
    string literals, so it is read from the text)."""
    with open(path, encoding="utf-8") as f:
        text = f.read().splitlines()[line - 1]
    start = text.index('"', text.index("path")) + 1
    return text[start : text.index('"', start)]


def _first_segments(tokens, j):
    """After `crate::`: the first path segment, or each first segment of a `{...}` group."""
    if _is_id(tokens, j):
        return [tokens[j][1]] if tokens[j][1] not in KEYWORDS_NOT_MODULES else []
    if not _is(tokens, j, "{"):
        return []
    idents = []
    close = skip_group(tokens, j)
    k = j + 1
    expect_segment = True
    depth = 0
    while k < close - 1:
        kind, value, _ = tokens[k]
        if kind == "p" and value == "{":
            depth += 1
        elif kind == "p" and value == "}":
            depth -= 1
        elif kind == "p" and value == "," and depth == 0:
            expect_segment = True
        elif expect_segment and depth == 0 and kind == "id":
            if value not in KEYWORDS_NOT_MODULES:
                idents.append(value)
            expect_segment = False
        k += 1
    return idents


def cycles(edges):
    """The strongly connected components of more than one node, each sorted, in sorted order
    (Tarjan's algorithm, iterative)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index = {}
    low = {}
    on_stack = set()
    stack = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def check_modules(crate_name, target_name, root_file, workspace, allowed, layers, out, used):
    """Print each module cycle of one target, and each edge against the order of `layers`
    (None: no order); return how many violations there are. The entries of `allowed` that
    remove an edge are added to `used`."""
    crate = Crate(root_file)
    edges = crate.edges()
    found = 0
    label = f"{crate_name} ({target_name})"
    for entry in allowed:
        name, source, target = entry
        if name == crate_name and (source, target) in edges:
            del edges[(source, target)]
            used.add(entry)
    for component in cycles(edges):
        found += 1
        out.append(f"{label}: module cycle {' <-> '.join(component)}")
        members = set(component)
        for (source, target), places in sorted(edges.items()):
            if source in members and target in members:
                out.append(f"    {source} -> {target}: {_places(places, workspace)}")
    if layers is not None:
        for module in sorted(crate.top_modules - set(layers)):
            out.append(f"{label}: module {module} has no place in LAYERS[{crate_name!r}]")
            found += 1
        for module in sorted(set(layers) - crate.top_modules):
            out.append(f"{label}: LAYERS[{crate_name!r}] names {module}, which is not a module")
            found += 1
        rank = {module: i for i, module in enumerate(layers)}
        for (source, target), places in sorted(edges.items()):
            if source in rank and target in rank and rank[target] > rank[source]:
                out.append(
                    f"{label}: {source} uses {target}, a later layer: "
                    f"{_places(places, workspace)}"
                )
                found += 1
    return found


def check_stale(allowed, used, out):
    """Print each entry of `allowed` no target used; return how many there are."""
    stale = sorted(set(allowed) - used)
    for name, source, target in stale:
        out.append(
            f"{name}: the allowed edge {source} -> {target} ({allowed[(name, source, target)]}) "
            "no longer exists; remove it from ALLOWED_EDGES"
        )
    return len(stale)


def _places(places, workspace):
    return ", ".join(f"{_rel(path, workspace)}:{line}" for path, line in places)


def _rel(path, workspace):
    return os.path.relpath(path, workspace) if workspace else path


def check_dependencies(metadata, out):
    """Print each forbidden crate dependency; return how many there are."""
    members = set(metadata["workspace_members"])
    found = 0
    for package in metadata["packages"]:
        if package["id"] not in members:
            continue
        name = package["name"]
        if name not in FORBIDDEN:
            out.append(
                f"{name}: a workspace crate with no entry in FORBIDDEN (scripts/layering.py); "
                "add one naming the crates it must not depend on"
            )
            found += 1
            continue
        for dep in package["dependencies"]:
            kind = dep["kind"] or "normal"
            dep_name = dep["name"]
            if dep_name in FORBIDDEN[name]:
                out.append(f"{name} must not depend on {dep_name} (it does, as a {kind} dependency)")
                found += 1
            if dep_name in ONLY_FOR and name not in ONLY_FOR[dep_name]:
                allowed = ", ".join(sorted(ONLY_FOR[dep_name]))
                out.append(
                    f"{name} must not depend on {dep_name}: only {allowed} may "
                    f"(it does, as a {kind} dependency)"
                )
                found += 1
            if dep_name in DEV_ONLY and kind != "dev":
                out.append(f"{name} must depend on {dep_name} only for tests (it does, as a {kind} dependency)")
                found += 1
    return found


def check_workspace(root):
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    workspace = metadata["workspace_root"]
    out = []
    found = check_dependencies(metadata, out)
    targets = 0
    used = set()
    members = set(metadata["workspace_members"])
    for package in metadata["packages"]:
        if package["id"] not in members:
            continue
        for target in package["targets"]:
            kinds = set(target["kind"])
            if not kinds & {"lib", "rlib", "cdylib", "bin", "proc-macro"}:
                continue
            targets += 1
            layers = LAYERS.get(package["name"]) if "lib" in kinds else None
            found += check_modules(
                package["name"],
                target["name"],
                target["src_path"],
                workspace,
                ALLOWED_EDGES,
                layers,
                out,
                used,
            )
    found += check_stale(ALLOWED_EDGES, used, out)
    for line in out:
        print(line, file=sys.stderr)
    if found:
        print(
            f"layering: {found} violation(s); see ARCHITECTURE.md (Rules) and "
            "scripts/layering.py",
            file=sys.stderr,
        )
        return 1
    layered = ", ".join(sorted(LAYERS))
    print(
        f"layering: {targets} targets without a module cycle, {layered} in layer order "
        f"({len(ALLOWED_EDGES)} allowed edges); crate dependencies as the rules say"
    )
    return 0


# --- Self-test ------------------------------------------------------------------------------


SELF_TEST_FILES = {
    "lib.rs": """
        //! crate::c in a comment does not count.
        mod a;
        mod b;
        mod c;
        mod d;
        mod e;
        mod f;
        pub use f::Thing;
    """,
    "a.rs": """
        use crate::b::B;
        pub(crate) struct A;
        #[cfg(test)]
        mod tests {
            use crate::c::C;
        }
    """,
    "b/mod.rs": """
        mod inner;
        pub(crate) struct B;
        #[cfg(all(test, feature = "x"))]
        fn only_in_tests() { let _ = crate::c::C; }
        const S: &str = "crate::c::C";
    """,
    "b/inner.rs": "use super::super::a::A;\n",
    "c.rs": """
        pub(crate) struct C;
        #[cfg(any(test, feature = "y"))]
        use crate::{d::D, e};
    """,
    "d.rs": "pub(crate) struct D; fn g() { let _ = crate::Thing; }\n",
    "e.rs": "#![cfg(test)]\nuse crate::a::A;\n",
    "f.rs": "pub struct Thing; fn h() { let _: crate::c::C; }\n",
}


def self_test():
    """Check the checker: a crate with the cycles a <-> b (through a nested super:: path) and
    c -> d -> f -> c (through a root re-export), references in test code, comments and strings
    that must not count, the allow-list, and a layer order; then made-up metadata breaking each
    kind of crate rule."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in SELF_TEST_FILES.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        crate = Crate(os.path.join(tmp, "lib.rs"))
        edges = crate.edges()
        want_edges = {("a", "b"), ("b", "a"), ("c", "d"), ("c", "e"), ("d", "f"), ("f", "c")}
        if set(edges) != want_edges:
            failures.append(f"edges {sorted(edges)}, expected {sorted(want_edges)}")
        want_cycles = [["a", "b"], ["c", "d", "f"]]
        if cycles(edges) != want_cycles:
            failures.append(f"cycles {cycles(edges)}, expected {want_cycles}")
        root = os.path.join(tmp, "lib.rs")
        out = []
        if check_modules("t", "lib", root, tmp, {}, None, out, set()) != 2:
            failures.append("check_modules did not count two cycles: " + "; ".join(out))
        if not any("a -> b: a.rs:2" in line for line in out):
            failures.append("no file:line for a -> b: " + "; ".join(out))
        # b -> a allowed breaks a <-> b; the stale entry a -> c is one violation.
        allowed = {("t", "b", "a"): "why", ("t", "a", "c"): "stale"}
        out = []
        used = set()
        found = check_modules("t", "lib", root, tmp, allowed, None, out, used)
        if found + check_stale(allowed, used, out) != 2:
            failures.append("an allowed edge or a stale entry was miscounted: " + "; ".join(out))
        # Two cycles, `a` missing from the layers, `g` not a module, and f -> c going to a
        # later layer.
        out = []
        layers = ["f", "e", "d", "c", "b", "g"]
        if check_modules("t", "lib", root, tmp, {}, layers, out, set()) != 5:
            failures.append("layer order: " + "; ".join(out))
        for expected in (
            "module a has no place",
            "names g, which is not a module",
            "f uses c, a later layer: f.rs:1",
        ):
            if not any(expected in line for line in out):
                failures.append(f"no {expected!r} in: " + "; ".join(out))
    metadata = {
        "workspace_members": ["core", "sim", "new", "plan", "cli", "domain", "helper"],
        "packages": [
            {"id": "core", "name": "vgpu-core", "dependencies": [{"name": "virt", "kind": None}]},
            {"id": "sim", "name": "vgpu-sim", "dependencies": [{"name": "vgpu-core", "kind": "dev"}]},
            {"id": "new", "name": "vgpu-new", "dependencies": []},
            {
                "id": "plan",
                "name": "vgpu-plan",
                "dependencies": [{"name": "vgpu-testing", "kind": None}],
            },
            {
                "id": "cli",
                "name": "vgpu-cli",
                "dependencies": [
                    {"name": "vgpu-core", "kind": None},
                    {"name": "vgpu-libvirt", "kind": "dev"},
                ],
            },
            {"id": "domain", "name": "vgpu-domain", "dependencies": [{"name": "nix", "kind": None}]},
            {
                "id": "helper",
                "name": "vgpu-cli-libvirt",
                "dependencies": [
                    {"name": "vgpu-cli", "kind": None},
                    {"name": "vgpu-libvirt", "kind": None},
                ],
            },
        ],
    }
    out = []
    # vgpu-core -> virt breaks FORBIDDEN and ONLY_FOR; vgpu-sim -> vgpu-core (dev) FORBIDDEN;
    # vgpu-new has no entry; vgpu-cli -> vgpu-core is fine, vgpu-cli -> vgpu-libvirt (dev)
    # breaks FORBIDDEN and ONLY_FOR; vgpu-domain -> nix FORBIDDEN; vgpu-cli-libvirt's are fine;
    # vgpu-plan -> vgpu-testing (normal) breaks FORBIDDEN (it is above the plan) and DEV_ONLY.
    if check_dependencies(metadata, out) != 9:
        failures.append("crate rules: " + "; ".join(out))
    for failure in failures:
        print(f"layering self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print("layering self-test: cycles, layer order, test code and crate rules as expected")
    return 0


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = list(argv)
    if "--root" in args:
        k = args.index("--root")
        if k + 1 == len(args):
            print(__doc__, file=sys.stderr)
            return 2
        root = args[k + 1]
        del args[k : k + 2]
    if args == ["--self-test"]:
        return self_test()
    if args:
        print(__doc__, file=sys.stderr)
        return 2
    return check_workspace(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
