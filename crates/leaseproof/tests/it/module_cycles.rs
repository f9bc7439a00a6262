//! No import circles between a crate's top-level modules.
//!
//! Goal: each crate reads bottom up — a module uses the ones below it and is
//! used by the ones above, as the layers of ARCHITECTURE.md do between
//! crates. Method: every `crate::<module>` path in a module's files (its
//! tests and comments left out) is an edge from that top-level module to
//! another; a depth-first search looks for a circle. Invariant: none, in
//! every crate of the workspace; a parent and its own submodules are one
//! module, so `super::` is never a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::repository;

/// Each top-level module of the crate at `src` and the top-level modules
/// its files name through `crate::`.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|file| top_module(src, file))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = top_module(src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let used = edges.entry(from.clone()).or_default();
        for to in named_modules(&text) {
            if to != from && modules.contains(&to) {
                used.insert(to);
            }
        }
    }
    edges
}

/// The top-level module `file` belongs to; `None` for the crate root.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The modules a file's code names as `crate::<module>`, its comments and
/// its `#[cfg(test)]` part (at the end, by the house style) left out.
fn named_modules(text: &str) -> BTreeSet<String> {
    let code: Vec<&str> = text
        .lines()
        .map(str::trim_start)
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .filter(|line| !line.starts_with("//"))
        .collect();
    let code = code.join("\n");
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let preceded = code[..at].chars().next_back();
        if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `leaseproof_crate::`, not this crate
        }
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => heads_of_group(group, &mut named),
            None => named.extend(identifier(rest)),
        }
    }
    named
}

/// The first segment of each path in a `{a::b, c, d::{e, f}}` group
/// (`group` starts after its `{`): a, c and d.
fn heads_of_group(group: &str, named: &mut BTreeSet<String>) {
    let mut depth = 1;
    let mut at_head = true;
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => return,
            '}' => depth -= 1,
            ',' if depth == 1 => at_head = true,
            c if at_head && depth == 1 && !c.is_whitespace() => {
                named.extend(identifier(&group[index..]));
                at_head = false;
            }
            _ => {}
        }
    }
}

fn identifier(text: &str) -> Option<String> {
    let name: String = text
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// A circle in `edges`, as the modules along it, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| on_path == module) {
            let mut found = path[start..].to_vec();
            found.push(module.to_string());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in edges.get(module).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|module| visit(module, edges, &mut Vec::new(), &mut done))
}

/// Every crate's `src` in the workspace.
fn crate_sources() -> Vec<PathBuf> {
    let root = repository();
    let mut sources = vec![root.join("models/src"), root.join("crates/leaseproof/src")];
    for group in ["product", "harness", "servers"] {
        for entry in std::fs::read_dir(root.join("crates").join(group)).unwrap() {
            sources.push(entry.unwrap().path().join("src"));
        }
    }
    sources.push(root.join("benches"));
    sources.sort();
    sources
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let mut circles = Vec::new();
    for src in crate_sources() {
        if let Some(found) = circle(&edges(&src)) {
            circles.push(format!("{}: {}", src.display(), found.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_search_finds_a_circle_and_reads_grouped_imports() {
    assert_eq!(
        named_modules(
            "use crate::{\n    model::{A, B},\n    variant::Variant,\n};\nuse leaseproof_crate::x;\nlet y = crate::trace::f();"
        ),
        BTreeSet::from(["model".to_string(), "trace".to_string(), "variant".to_string()])
    );
    assert!(named_modules("// crate::model\n#[cfg(test)]\nuse crate::variant;").is_empty());
    let edges = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
        ("d".to_string(), BTreeSet::new()),
    ]);
    assert_eq!(circle(&edges).unwrap(), ["a", "b", "c", "a"]);
    let edges = BTreeMap::from([("a".to_string(), BTreeSet::from(["b".to_string()]))]);
    assert_eq!(circle(&edges), None);
}
