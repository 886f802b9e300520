//! dlq-core's modules in layers whose imports run one way: a module may use a module of a
//! lower layer, and one of its own layer only when that layer has at most three modules (a
//! small circle the layer owns, e.g. a row and its subject). The table below is the map
//! `docs/DESIGN.md` draws; this test fails when code reaches up, so that the map stays true.
//!
//! It reads every file of `src/` (without its `#[cfg(test)]` part and without comments: a doc
//! may point anywhere, an import may not) and follows each `crate::name` path. A name the
//! crate root re-exports (`crate::Error`, `crate::Retrier`) counts as the module it comes from,
//! so a path through the root is no way around a layer.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, lowest first, with what each owns.
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves: retry timing, error classification, JSON Schema checks, trace context.
    ("leaves", &["backoff", "classify", "validate", "otel"]),
    // The vocabulary: the error type, the stored row and the subject it is about.
    ("vocabulary", &["error", "record", "subject"]),
    // What is done to rows, and sealing.
    ("actions", &["action", "sealed"]),
    // The settings read from configuration: the retrier's, and its breakers' (each reads the
    // other's duration format and type).
    ("settings", &["config", "breaker_config"]),
    // A handler's registration: its upcasters and the schemas it publishes.
    ("handlers", &["handler", "catalog", "upcast"]),
    // The store contract.
    ("store", &["store"]),
    // The registered handlers of a process, and the catalog they publish into a store.
    ("registry", &["registry"]),
    // Metrics, labels and health.
    ("observe", &["observe"]),
    // The live path with the circuits it reads, and what operators may see.
    ("live path", &["live", "circuit", "redact"]),
    ("retrier", &["retrier"]),
    // The in-memory store, and the operator layer.
    ("stores and operators", &["memory", "admin"]),
    // What the macros expand to, and the kit for store implementers and tests.
    ("macro support", &["__private"]),
    ("testing", &["testing"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

/// The top-level module of each file under `src`, and the file's text.
fn files(src: &Path) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
            let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            found.push((module, rel.display().to_string(), text));
        }
    }
    found
}

/// `text` without its `#[cfg(test)]` part, with comment lines blanked (so that line numbers
/// stay).
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    let lines: Vec<_> =
        text[..end].lines().map(|line| if line.trim_start().starts_with("//") { "" } else { line }).collect();
    lines.join("\n")
}

fn ident_end(s: &str) -> usize {
    s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len())
}

/// The first two identifiers of `path` (`a::b::c` gives `a`, `b`; the second empty when there
/// is one segment).
fn head(path: &str) -> (&str, &str) {
    let path = path.trim();
    let first = &path[..ident_end(path)];
    let second = path[first.len()..].strip_prefix("::").map_or("", |tail| &tail[..ident_end(tail)]);
    (first, second)
}

/// The entries of the `{...}` group that starts `text` (`{a::B, C, d::{E, F}}`), and the
/// group's length; a nested group counts as its entry (`d`).
fn group(text: &str) -> (Vec<&str>, usize) {
    let (mut depth, mut start, mut entries) = (0, 1, Vec::new());
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    entries.push(&text[start..at]);
                    return (entries, at + 1);
                }
            }
            ',' if depth == 1 => {
                entries.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    (entries, text.len())
}

/// Each path that follows `crate::` in `code`, as its first two identifiers with the line it
/// is on; a group (`crate::{a::B, C}`) gives one path per entry.
fn crate_paths(code: &str) -> Vec<(usize, (&str, &str))> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        if code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[from..];
        if rest.starts_with('{') {
            let (entries, len) = group(rest);
            paths.extend(entries.into_iter().map(|e| (line_of(at), head(e))).filter(|(_, (f, _))| !f.is_empty()));
            from += len;
        } else {
            paths.push((line_of(at), head(rest)));
        }
    }
    paths
}

/// The names `lib.rs` re-exports from the crate's modules, at the root (`pub use module::{A, B};`)
/// or in a module of its own that only re-exports (`pub mod adapter { pub use crate::live::X; }`),
/// by the module each comes from; and the names of those re-exporting modules.
fn root_names(lib: &str, modules: &[&str]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut names = BTreeMap::new();
    let mut facades = Vec::new();
    for statement in lib.split(';') {
        for line in statement.lines() {
            if let Some(facade) = line.trim().strip_prefix("pub mod ").and_then(|m| m.strip_suffix(" {")) {
                facades.push(facade.to_owned());
            }
        }
        let Some(at) = statement.find("pub use ") else { continue };
        let used = &statement[at + "pub use ".len()..];
        let used = used.strip_prefix("crate::").unwrap_or(used);
        let Some((module, items)) = used.split_once("::") else { continue };
        if !modules.contains(&module) {
            continue;
        }
        for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|i| !i.is_empty()) {
            names.insert(item.to_owned(), module.to_owned());
        }
    }
    (names, facades)
}

#[test]
fn every_module_imports_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = files(&src);
    let mut modules: Vec<&str> =
        files.iter().map(|(m, _, _)| m.as_str()).filter(|m| *m != "lib" && *m != "main").collect();
    modules.sort_unstable();
    modules.dedup();
    let unplaced: Vec<_> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no layer (add each to LAYERS, and to docs/DESIGN.md's map): {unplaced:?}");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let (root, facades) = root_names(&lib, &modules);
    let mut upward = Vec::new();
    for (module, file, text) in &files {
        let Some(from) = layer_of(module) else { continue };
        if file.ends_with("tests.rs") {
            continue;
        }
        let code = code(text);
        for (line, (first, second)) in crate_paths(&code) {
            {
                // A path through a re-exporting module counts as the module the name comes from.
                let name = if facades.iter().any(|f| f == first) { second } else { first };
                let target = if modules.contains(&name) { Some(name) } else { root.get(name).map(String::as_str) };
                let Some(target) = target.filter(|t| t != module) else { continue };
                let to = layer_of(target).unwrap();
                let same_small_layer = to == from && LAYERS[to].1.len() <= 3;
                if to > from || (to == from && !same_small_layer) {
                    upward.push(format!(
                        "src/{file}:{line}: {module} ({}) uses {target} ({})",
                        LAYERS[from].0, LAYERS[to].0
                    ));
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports that reach up a layer:\n{}", upward.join("\n"));
}

/// No layer is empty, and no module is in two.
#[test]
fn every_module_is_in_one_layer() {
    for (name, modules) in LAYERS {
        assert!(!modules.is_empty(), "{name}");
    }
    let mut all: Vec<_> = LAYERS.iter().flat_map(|(_, m)| m.iter()).collect();
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a module in two layers");
}

/// The scan itself: a path through the root counts as its module, a comment does not.
#[test]
fn the_scan_follows_root_names_and_skips_comments() {
    let lib = "pub use retrier::{Retrier, RetrierStats};\npub use error::Error;\n\
               pub mod adapter {\n    pub use crate::live::{Dispatcher, current_store};\n}";
    let (root, facades) = root_names(lib, &["retrier", "error", "live"]);
    assert_eq!(root.get("Retrier").map(String::as_str), Some("retrier"));
    assert_eq!(root.get("Error").map(String::as_str), Some("error"));
    assert_eq!(root.get("Dispatcher").map(String::as_str), Some("live"));
    assert_eq!(facades, ["adapter"]);
    assert_eq!(
        crate_paths("let r: crate::Retrier = $crate::x; my_crate::y;\ncrate::adapter::Dispatcher"),
        [(1, ("Retrier", "")), (1, ("x", "")), (2, ("adapter", "Dispatcher"))]
    );
    assert_eq!(
        crate_paths("use crate::{\n    Error,\n    record::{A, B}, breaker_config::BreakerConfig,\n};"),
        [(1, ("Error", "")), (1, ("record", "")), (1, ("breaker_config", "BreakerConfig"))]
    );
    let text = "/// [`Retrier`](crate::Retrier)\nuse crate::store::X;\n#[cfg(test)]\nuse crate::admin;";
    assert_eq!(code(text), "\nuse crate::store::X;");
}
