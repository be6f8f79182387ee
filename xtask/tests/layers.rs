//! The workspace's folders use one another one way only. Within a crate, a folder (a top-level
//! module: `src/x.rs` or `src/x/`) that uses another, directly or through others, is never used
//! back by it: each crate's folders stand in layers a reader can learn from the bottom up. A
//! test reads every crate's sources and names any circle it finds, with the files that close
//! it.
//!
//! A use is a path through `crate::x` or through enough `super::` to reach the crate's root,
//! outside comments and test modules (from the first `#[cfg(test)]` of a file on).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each folder of the crate whose sources are in `src`, with the folders it uses and, for each,
/// the files that use it.
fn uses(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> {
    let folders = folders(src);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> = BTreeMap::new();
    for file in files(src) {
        let module = module_path(src, &file);
        let Some(from) = module.first().filter(|m| folders.contains(*m)) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for to in referenced(&text, module.len()) {
            if folders.contains(&to) && &to != from {
                let files = graph.entry(from.clone()).or_default().entry(to);
                files.or_default().insert(file.clone());
            }
        }
    }
    graph
}

/// A circle of folders, the first one found (its first folder repeated at its end).
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

/// The crate's folders: `src/x.rs` and `src/x/` (not `lib.rs` nor `main.rs`).
fn folders(src: &Path) -> BTreeSet<String> {
    let entries = std::fs::read_dir(src).into_iter().flatten().flatten();
    entries
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            match e.path().is_dir() {
                true => Some(name),
                false => name.strip_suffix(".rs").map(str::to_owned),
            }
        })
        .filter(|n| n != "lib" && n != "main")
        .collect()
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

/// The top-level names a file of a module `depth` deep reaches through `crate::` or `super::`.
fn referenced(text: &str, depth: usize) -> BTreeSet<String> {
    let code: String = (text.lines())
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut names = BTreeSet::new();
    let supers = "super::".repeat(depth);
    for root in ["crate::", supers.as_str()] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            names.extend(names_after(&code[at + root.len()..]));
        }
    }
    names
}

/// `x` of `x::…`, or each name of `{x, y::…}`.
fn names_after(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    match rest.strip_prefix('{') {
        Some(list) => {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            list.split(',')
                .map(ident)
                .filter(|n| !n.is_empty())
                .collect()
        }
        None => vec![ident(rest)],
    }
}

#[test]
fn no_folder_of_any_crate_uses_one_that_uses_it_back() {
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
    let src = tempfile_dir();
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

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
