//! The layering of `src/`: the dependency graph between top-level modules
//! (`src/*.rs` and `src/*/`), read from their `crate::` paths, has no
//! cycle, and the few edges CONTRIBUTING forbids are absent. Reads the
//! source, runs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules everyone may import that import nothing of ours.
const LEAVES: &[&str] = &[
    "approval_config",
    "budget",
    "conversation",
    "duration",
    "paths",
    "policy",
    "prompt_cache",
    "reason",
    "regions",
    "setup",
    "suggest",
    "wire_api",
];

/// Modules that may import leaves only (the raw config reaches nothing).
const LEAF_ONLY: &[&str] = &["config"];

/// Edges that must not exist, even without a cycle.
const FORBIDDEN: &[(&str, &str)] = &[
    ("model", "agent"),
    ("model", "tools"),
    ("model", "settings"),
    ("model", "config"),
    ("tools", "model"),
    ("events", "model"),
    ("health", "model"),
    ("health", "settings"),
];

/// The wire adapters and their transport, which must not reach the chain,
/// the registry or the retry loop.
const ADAPTERS: &[&str] = &[
    "model/openai",
    "model/anthropic",
    "model/responses",
    "model/ollama.rs",
    "model/bedrock",
    "model/gemini",
    "model/azure",
    "model/foundry",
    "model/http.rs",
    "model/sse.rs",
];

/// The wire folders (and files) of `model/`: one per API, each a `WireForm`.
const WIRE_FORMS: &[&str] = &[
    "openai",
    "responses",
    "anthropic",
    "ollama",
    "bedrock",
    "gemini",
    "azure",
    "foundry",
];

/// Names of clouds, which no file of the gate or the chain may use.
const CLOUDS: &[&str] = &["bedrock", "vertex", "azure", "gemini", "foundry"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without comment lines.
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segments after each `crate::` (and inside `crate::{...}`).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut refs = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            refs.extend(group.split(',').map(|p| ident(p.trim())));
        } else {
            refs.insert(ident(rest));
        }
    }
    refs.retain(|r| !r.is_empty());
    refs
}

/// The top-level module a file belongs to (`None` for the crate root).
fn top_level(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

/// module -> the modules it reaches, with one file that does it.
fn graph() -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| top_level(f.strip_prefix(&root).unwrap()))
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap().to_path_buf();
        let Some(from) = top_level(&rel) else {
            continue;
        };
        let edges = graph.entry(from.clone()).or_default();
        for to in crate_refs(&code(file)) {
            assert!(
                modules.contains(&to),
                "{}: `crate::{to}` reaches an item of the crate root; only lib.rs wires, nothing imports from it",
                rel.display()
            );
            if to != from {
                edges.entry(to).or_insert_with(|| rel.clone());
            }
        }
    }
    graph
}

/// A cycle through `start`, if any, as the list of modules on it.
fn cycle_from(
    graph: &BTreeMap<String, BTreeMap<String, PathBuf>>,
    start: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = graph();
    let listing: Vec<String> = graph
        .iter()
        .map(|(from, to)| {
            let to: Vec<&str> = to.keys().map(String::as_str).collect();
            format!("{from} -> {}", to.join(", "))
        })
        .collect();
    let listing = listing.join("\n");
    // `cargo test --test cli layers:: -- --nocapture` shows the graph.
    println!("{listing}");
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            let hops: Vec<String> = cycle
                .windows(2)
                .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]].display()))
                .collect();
            panic!(
                "import cycle between top-level modules:\n  {}\n\nthe graph:\n{listing}",
                hops.join("\n  ")
            );
        }
    }
    for (from, to) in FORBIDDEN {
        if let Some(file) = graph.get(*from).and_then(|e| e.get(*to)) {
            panic!("{from} must not import {to} ({})", file.display());
        }
    }
    for (from, edges) in &graph {
        if let Some(file) = edges.get("config") {
            assert!(
                matches!(from.as_str(), "settings" | "fuzz_tests"),
                "only settings imports config, not {from} ({})",
                file.display()
            );
        }
    }
    for leaf in LEAVES {
        let edges = graph.get(*leaf).map(|e| e.len()).unwrap_or(0);
        assert_eq!(
            edges, 0,
            "{leaf} is a leaf: it imports nothing of ours\n{listing}"
        );
    }
    for module in LEAF_ONLY {
        for (to, file) in graph.get(*module).into_iter().flatten() {
            assert!(
                LEAVES.contains(&to.as_str()),
                "{module} imports only leaves, not {to} ({})",
                file.display()
            );
        }
    }
}

#[test]
fn adapters_do_not_reach_the_chain() {
    for adapter in ADAPTERS {
        for file in files_under(adapter) {
            let code = code(&file);
            for layer in ["chain", "registry", "retry"] {
                for prefix in ["super::", "crate::model::", "super::super::"] {
                    let path = format!("{prefix}{layer}");
                    assert!(
                        !code.contains(&path),
                        "{} reaches {path}: adapters know nothing of the layers above them",
                        file.display()
                    );
                }
            }
        }
    }
}

/// The files of `model/<rel>`, a folder or one file.
fn files_under(rel: &str) -> Vec<PathBuf> {
    let path = src().join(rel);
    let mut files = Vec::new();
    if path.is_dir() {
        rust_files(&path, &mut files);
    } else {
        files.push(path);
    }
    files
}

#[test]
fn every_wire_folder_is_an_adapter() {
    for wire in WIRE_FORMS {
        let folder = format!("model/{wire}");
        let file = format!("model/{wire}.rs");
        assert!(
            src().join(&folder).is_dir() || src().join(&file).is_file(),
            "{wire} is no longer a wire form of model/: update WIRE_FORMS"
        );
        assert!(
            ADAPTERS.contains(&folder.as_str()) || ADAPTERS.contains(&file.as_str()),
            "{wire} is missing from ADAPTERS"
        );
    }
}

#[test]
fn credentials_reach_neither_the_transport_nor_an_adapter() {
    let mut files = Vec::new();
    rust_files(&src().join("model/credentials"), &mut files);
    assert!(!files.is_empty());
    for file in files {
        let rel = file.strip_prefix(src()).unwrap();
        let module = module_path(rel);
        for path in module_refs(&module, &code_before_tests(&file)) {
            if path.len() < 2 || path[0] != "model" {
                continue;
            }
            let to = path[1].as_str();
            assert!(
                to != "http" && !WIRE_FORMS.contains(&to) && to != "adapter",
                "{} reaches model::{to}: credentials know neither the transport nor an adapter",
                rel.display()
            );
        }
    }
}

/// Whether `code` uses `word` as an identifier or a path segment (any case,
/// within `snake_case` and `CamelCase` names too), outside comments and strings.
fn names(code: &str, word: &str) -> bool {
    let code = without_strings(code).to_ascii_lowercase();
    code.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .flat_map(|ident| ident.split('_'))
        .any(|part| part.starts_with(word))
}

/// `code` with the contents of its string literals blanked (a message may
/// quote a cloud; the code may not depend on one).
fn without_strings(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let code = code.replace("'\"'", "' '");
    let mut in_string = false;
    let mut escaped = false;
    for c in code.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                out.push(c);
            }
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    out
}

#[test]
fn the_gate_and_the_chain_name_no_cloud() {
    let mut files = Vec::new();
    rust_files(&src().join("model/gate"), &mut files);
    for entry in std::fs::read_dir(src().join("model")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("chain") {
            files.extend(files_under(&format!("model/{name}")));
        }
    }
    assert!(files.len() > 2);
    for file in files {
        let code = code(&file);
        for cloud in CLOUDS {
            assert!(
                !names(&code, cloud),
                "{} names {cloud}: the gate and the chain know no cloud",
                file.strip_prefix(src()).unwrap().display()
            );
        }
    }
}

#[test]
fn a_cloud_is_found_in_names_not_in_strings() {
    assert!(names("use crate::model::bedrock::X;", "bedrock"));
    assert!(names("let is_vertex = true;", "vertex"));
    assert!(names("AzureToken::new()", "azure"));
    assert!(!names("let s = \"a bedrock model\";", "bedrock"));
    assert!(!names("if c == '\"' { x }", "x_never"));
    assert!(!names("let bedrocky_not = 1;", "azure"));
}

#[test]
fn the_reader_finds_grouped_and_plain_paths() {
    let refs =
        crate_refs("use crate::a::B;\nuse crate::{c::D, e};\nx = crate::f::g();\nmy_crate::h;");
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    assert_eq!(refs, ["a", "c", "e", "f"]);
}

/// A file's module path: `model/openai/stream.rs` is `model::openai::stream`,
/// `model/openai/mod.rs` is `model::openai`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.strip_suffix(".rs").unwrap_or(&last).to_string();
    if stem != "mod" {
        parts.push(stem);
    }
    parts
}

/// The code before the file's unit tests (`#[cfg(test)] mod tests`).
fn code_before_tests(path: &Path) -> String {
    let code = code(path);
    match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

/// The module paths a file's code names: `crate::a::b` and `super::x`
/// (`super::{x, y}` too), resolved against the file's own module path.
fn module_refs(file_module: &[String], code: &str) -> BTreeSet<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut refs = BTreeSet::new();
    let mut add = |base: Vec<String>, rest: &str| {
        let mut heads = Vec::new();
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            heads.extend(group.split(',').map(|p| ident(p.trim())));
        } else {
            heads.push(ident(rest));
        }
        for head in heads.into_iter().filter(|h| !h.is_empty()) {
            let mut path = base.clone();
            path.push(head);
            refs.insert(path);
        }
    };
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &code[i..];
        let mut up = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            up += 1;
            rest = r;
        }
        if up <= file_module.len() {
            add(file_module[..file_module.len() - up].to_vec(), rest);
        }
    }
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut base = Vec::new();
        let mut rest = &code[i + "crate::".len()..];
        // Walk `a::b::` down to the last segment.
        loop {
            let head = ident(rest);
            match rest[head.len()..].strip_prefix("::") {
                Some(r) if !head.is_empty() && !r.starts_with('{') => {
                    base.push(head);
                    rest = r;
                }
                _ => break,
            }
        }
        // Every prefix of the path is a reference to that module.
        for n in 1..base.len() {
            add(base[..n - 1].to_vec(), &base[n - 1]);
        }
        if let Some(last) = base.last().cloned() {
            add(base[..base.len() - 1].to_vec(), &last);
        }
        add(base, rest);
    }
    refs
}

#[test]
fn the_files_of_one_module_form_no_cycle() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).unwrap().to_path_buf();
            let module = module_path(&rel);
            (rel, module)
        })
        .filter(|(rel, _)| !matches!(rel.to_str(), Some("lib.rs" | "main.rs")))
        // Test-only files (`tests.rs`, `bench.rs`, `*_tests.rs`) may reach
        // across: they are not part of the layering.
        .filter(|(rel, _)| {
            let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !(name == "tests.rs" || name == "bench.rs" || name.ends_with("_tests.rs"))
        })
        .collect();
    // Every module with children: its children, and the edges between them.
    let parents: BTreeSet<Vec<String>> = modules
        .iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(_, m)| m[..m.len() - 1].to_vec())
        .collect();
    for parent in parents {
        let children: BTreeSet<String> = modules
            .iter()
            .filter(|(_, m)| m.len() > parent.len() && m.starts_with(&parent))
            .map(|(_, m)| m[parent.len()].clone())
            .collect();
        let mut graph: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
        for (rel, module) in &modules {
            if module.len() <= parent.len() || !module.starts_with(&parent) {
                continue;
            }
            let from = module[parent.len()].clone();
            let edges = graph.entry(from.clone()).or_default();
            for path in module_refs(module, &code_before_tests(&root.join(rel))) {
                if path.len() > parent.len() && path.starts_with(&parent) {
                    let to = &path[parent.len()];
                    if to != &from && children.contains(to) {
                        edges.entry(to.clone()).or_insert_with(|| rel.clone());
                    }
                }
            }
        }
        for child in graph.keys() {
            if let Some(cycle) = cycle_from(&graph, child) {
                let hops: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]].display()))
                    .collect();
                panic!(
                    "import cycle between the files of {}:\n  {}",
                    parent.join("::"),
                    hops.join("\n  ")
                );
            }
        }
    }
}

#[test]
fn module_refs_resolve_super_and_crate_paths() {
    let here: Vec<String> = ["model", "openai", "stream"].map(String::from).to_vec();
    let refs = module_refs(
        &here,
        "use super::super::wire::{a, b};\nuse super::{request, Dialect};\nuse crate::model::http::X;",
    );
    let refs: Vec<String> = refs.iter().map(|r| r.join("::")).collect();
    assert!(refs.contains(&"model::wire".to_string()), "{refs:?}");
    assert!(
        refs.contains(&"model::openai::request".to_string()),
        "{refs:?}"
    );
    assert!(refs.contains(&"model::http".to_string()), "{refs:?}");
}
