//! What is committed reads as the program writes it: the latest committed run through the
//! report's schema (a report older than the schema is refused with its version: see
//! `report::json`'s tests), the history index with every committed run and
//! `results/README.md`'s list of the deleted ones as `seckill-bench history` writes it, and the
//! README's results section and strategy table as the program and the catalogue have them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use app::api::{Strategy, StrategyInfo};
use loadtest::report::{readme, run_history};
use loadtest::schema::{history, json};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

#[test]
fn the_committed_run_reads_through_the_report_schema() {
    let run = json::read(&workspace().join("results/latest")).unwrap();
    assert!(!run.strategies.is_empty());
    assert!(
        run.strategies
            .iter()
            .all(|s| s.sale.as_ref().unwrap().accounting.initial_stock > 0)
    );
}

#[test]
fn every_committed_run_folder_is_in_the_history_index() {
    let results = workspace().join("results");
    let history = history::read(&results)
        .unwrap()
        .expect("results/history.json");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&results).unwrap() {
        let entry = entry.unwrap();
        let holds_a_run = ["report.json", "matrix.json", "peers.json"]
            .iter()
            .any(|file| entry.path().join(file).is_file());
        let folder = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() && holds_a_run && history.run(&folder).is_none() {
            missing.push(folder);
        }
    }
    assert!(
        missing.is_empty(),
        "not in results/history.json: {missing:?}; run `cargo xtask bench history`"
    );
}

#[test]
fn the_results_readme_lists_each_deleted_run_with_its_commit_as_the_program_writes_it() {
    let results = workspace().join("results");
    let history = history::read(&results)
        .unwrap()
        .expect("results/history.json");
    let uncommitted: Vec<&str> = (history.runs.iter())
        .filter(|r| !r.is_in(&results) && r.commit.is_none())
        .map(|r| r.folder.as_str())
        .collect();
    assert!(
        uncommitted.is_empty(),
        "deleted runs whose commit the index does not know: {uncommitted:?}"
    );
    let text = std::fs::read_to_string(results.join("README.md")).unwrap();
    let written =
        run_history::replace(&text, &run_history::older_runs(&history, &results)).unwrap();
    assert!(
        written == text,
        "results/README.md's older runs are not what `seckill-bench history` writes; run it"
    );
}

#[test]
fn the_readme_results_section_is_what_the_program_writes_from_the_committed_run() {
    let root = workspace();
    let (readme_path, run_path) = (root.join("README.md"), root.join("results/latest"));
    let text = std::fs::read_to_string(&readme_path).unwrap();
    let run = json::read(&run_path).unwrap();
    let link = readme::link(&readme_path, &run_path).unwrap();
    let picture = readme::picture(&readme_path, &link);
    let phases = loadtest::phase::readme(&run);
    let section = readme::section(&run, &link, &phases, picture.as_deref());
    let written = readme::replace(&text, &section).unwrap();
    assert!(
        written == text,
        "README.md's results section is not what `seckill-bench readme` writes; run it"
    );
}

#[test]
fn the_readme_names_every_strategy_of_the_catalogue_with_its_safety_class() {
    let text = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section = text
        .lines()
        .skip_while(|l| !l.starts_with("## Strategies"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "));
    let mut classed = BTreeMap::new();
    for line in section.filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (names, safety) = (cells[1], cells[2]);
        for name in names.split(", ") {
            classed.insert(name.trim_matches('`').to_owned(), safety.to_owned());
        }
    }
    for &strategy in Strategy::ALL {
        let safety = StrategyInfo::of(strategy).safety.to_string();
        assert_eq!(
            classed.get(strategy.name()),
            Some(&safety),
            "README.md's strategy table and the catalogue disagree on `{}`",
            strategy.name()
        );
    }
    assert_eq!(classed.len(), Strategy::ALL.len(), "{classed:?}");
}

#[test]
fn every_file_and_test_a_readme_links_exists() {
    let root = workspace();
    let mut readmes = vec![root.join("README.md")];
    for entry in std::fs::read_dir(&root).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.is_file() {
            readmes.push(readme);
        }
    }
    let mut broken = Vec::new();
    for readme in &readmes {
        let text = std::fs::read_to_string(readme).unwrap();
        for (label, target) in links(&text) {
            if target.contains("://") || target.starts_with('#') {
                continue;
            }
            let path = readme
                .parent()
                .unwrap()
                .join(target.split('#').next().unwrap());
            if !path.exists() {
                broken.push(format!("{}: {target}", readme.display()));
                continue;
            }
            // A link whose text is a test's name (a code span in snake case) names a function
            // of the file it links to.
            let Some(name) = label.filter(|l| {
                l.contains('_')
                    && l.bytes()
                        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
            }) else {
                continue;
            };
            let code = std::fs::read_to_string(&path).unwrap_or_default();
            if !code.contains(&format!("fn {name}(")) {
                broken.push(format!("{}: no `fn {name}` in {target}", readme.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}

/// Every link and picture of the Markdown `text`: its target, and a link's text where that is
/// one code span.
fn links(text: &str) -> Vec<(Option<String>, String)> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut found = Vec::new();
    let mut open: Option<(String, Vec<Event>)> = None;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) => {
                open = Some((dest_url.to_string(), Vec::new()))
            }
            Event::Start(Tag::Image { dest_url, .. }) => found.push((None, dest_url.to_string())),
            Event::End(TagEnd::Link) => {
                if let Some((target, inside)) = open.take() {
                    let label = match inside.as_slice() {
                        [Event::Code(code)] => Some(code.to_string()),
                        _ => None,
                    };
                    found.push((label, target));
                }
            }
            other => {
                if let Some((_, inside)) = &mut open {
                    inside.push(other);
                }
            }
        }
    }
    found
}

#[test]
fn the_committed_lock_peers_page_is_what_the_program_prints_from_its_figures() {
    let results = workspace().join("results");
    let folder = std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("peers.json").is_file())
        .expect("a committed lock peers run");
    let json = std::fs::read_to_string(folder.join("peers.json")).unwrap();
    let report: loadtest::lock::peers::PeersReport = serde_json::from_str(&json).unwrap();
    let committed = std::fs::read_to_string(folder.join("peers.md")).unwrap();
    let lines = |md: &str| -> Vec<String> {
        (md.lines().map(str::trim_end))
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(lines(&report.markdown()), lines(&committed));
}
