//! The workspace's modules use one another one way only. Within a folder of a crate — the
//! crate's root, or any folder below it — a module (a file `x.rs` or a folder `x/`) that uses
//! another of the same folder, directly or through others, is never used back by it: the files
//! and folders of every folder stand in layers a reader can learn from the bottom up. (A module
//! and the modules inside it may use each other: a folder's `mod.rs` declares what its files
//! share.) A test reads every crate's sources and names any circle it finds, with the files
//! that close it.
//!
//! A use is a path through `crate::` or `super::`, outside comments and test modules (from the
//! first `#[cfg(test)]` of a file on), resolved to the deepest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The uses between the modules of each folder of the crate whose sources are in `src`: for
/// each module (`a/b` for `src/a/b.rs` or `src/a/b/`), the modules of the same folder it uses,
/// directly or from inside it, and for each the files that do.
fn uses(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> {
    let all = files(src);
    let modules: BTreeSet<Vec<String>> = all
        .iter()
        .flat_map(|f| {
            let path = module_path(src, f);
            (1..=path.len()).map(move |n| path[..n].to_vec())
        })
        .filter(|m| !matches!(m.as_slice(), [only] if only == "lib" || only == "main"))
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> = BTreeMap::new();
    for file in all {
        let from = module_path(src, &file);
        let from = match from.as_slice() {
            [only] if only == "lib" || only == "main" => Vec::new(),
            _ => from,
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for to in referenced(&text, &from, &modules) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            let (a, b) = (from[..=common].join("/"), to[..=common].join("/"));
            let files = graph.entry(a).or_default().entry(b);
            files.or_default().insert(file.clone());
        }
    }
    graph
}

/// A circle of modules, the first one found (its first folder repeated at its end).
fn circle(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_owned());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flat_map(|uses| uses.keys()) {
            if let Some(circle) = visit(next, graph, done, path) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut done, &mut Vec::new()))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The module a file holds, as names from the crate's root (`src/a/b.rs` and `src/a/b/mod.rs`
/// are `[a, b]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut names: Vec<String> = (relative.iter())
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if names.last().is_some_and(|n| n == "mod") {
        names.pop();
    }
    names
}

/// The modules a file of module `at` reaches through `crate::` or `super::` paths, each the
/// deepest of `modules` the path names.
fn referenced(text: &str, at: &[String], modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let code: String = (text.lines())
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    for root in ["crate::", "super::"] {
        for (i, _) in code.match_indices(root) {
            let before = code[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut rest = &code[i + root.len()..];
            let mut base: Vec<String> = match root {
                "crate::" => Vec::new(),
                _ => at[..at.len().saturating_sub(1)].to_vec(),
            };
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            for names in paths_after(rest) {
                let mut module = base.clone();
                for name in names {
                    module.push(name);
                    if !modules.contains(&module) {
                        module.pop();
                        break;
                    }
                }
                found.insert(module);
            }
        }
    }
    found
}

/// The names of the path that `rest` begins (`x::y::…`), or of each path of a `{x::y, z}`
/// group where one comes.
fn paths_after(rest: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(list) = rest.strip_prefix('{') {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            return (list.split(','))
                .map(|item| {
                    let mut path = names.clone();
                    path.extend(item.split("::").map(ident).filter(|n| !n.is_empty()));
                    path
                })
                .collect();
        }
        let name = ident(rest);
        if name.is_empty() {
            return vec![names];
        }
        rest = &rest.trim_start()[name.len()..];
        names.push(name);
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => return vec![names],
        }
    }
}

#[test]
fn no_module_of_any_folder_uses_one_that_uses_it_back() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut circles = Vec::new();
    for krate in [
        "app", "locks", "loadtest", "sandbox", "testkit", "xtask", "benches",
    ] {
        let src = workspace.join(krate).join("src");
        let graph = uses(&src);
        if let Some(circle) = circle(&graph) {
            let how: Vec<String> = (circle.windows(2))
                .map(|w| format!("{} → {} ({:?})", w[0], w[1], graph[&w[0]][&w[1]]))
                .collect();
            circles.push(format!("{krate}: {}", how.join("; ")));
        }
    }
    assert!(circles.is_empty(), "{circles:#?}");
}

#[test]
fn a_circle_through_crate_and_super_paths_is_found_and_a_test_module_is_not_read() {
    let src = tempfile_dir("paths");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("a/mod.rs"), "use crate::b::Thing;\n").unwrap();
    std::fs::write(src.join("b.rs"), "// crate::c::Nothing\n").unwrap();
    std::fs::write(src.join("c.rs"), "#[cfg(test)]\nuse crate::a::X;\n").unwrap();
    assert_eq!(circle(&uses(&src)), None);
    std::fs::write(src.join("a/deep.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(src.join("b.rs"), "use super::{c, a::deep};\n").unwrap();
    assert_eq!(
        circle(&uses(&src)),
        Some(vec!["a".to_owned(), "b".to_owned(), "a".to_owned()])
    );
    std::fs::remove_dir_all(&src).unwrap();
}

#[test]
fn a_circle_between_two_files_of_one_folder_is_found_and_a_folder_may_use_its_own_files() {
    let src = tempfile_dir("files").join("nested");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "mod x;\nmod y;\npub struct Shared;\n").unwrap();
    std::fs::write(src.join("a/x.rs"), "use super::Shared;\npub struct X;\n").unwrap();
    std::fs::write(src.join("a/y.rs"), "use crate::a::{x::X, Shared};\n").unwrap();
    assert_eq!(circle(&uses(&src)), None);
    std::fs::write(src.join("a/x.rs"), "use super::y::Y;\npub struct X;\n").unwrap();
    assert_eq!(
        circle(&uses(&src)),
        Some(vec!["a/x".to_owned(), "a/y".to_owned(), "a/x".to_owned()])
    );
    std::fs::remove_dir_all(src.parent().unwrap()).unwrap();
}

/// A folder of this process's own for test `name`: the tests of one process run at once.
fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("layers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
