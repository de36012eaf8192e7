//! The map stays true: the import rules of `ARCHITECTURE.md` (its layering table) hold in
//! `host/src`, every module of `host/src` is on the map, and filters read contacts' event
//! summaries, not their events.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The layering table of ARCHITECTURE.md: module → the crate modules it may import.
fn layers() -> BTreeMap<String, BTreeSet<String>> {
    let map = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let table = map
        .split("<!-- layers:begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- layers:end -->").next())
        .expect("ARCHITECTURE.md has its layering table between the layers markers");
    let mut layers = BTreeMap::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split(',')
                .map(|n| n.trim().trim_matches('`').to_string())
                .filter(|n| !n.is_empty() && n != "—")
                .collect()
        };
        let module = cells[0].trim_matches('`').to_string();
        layers.insert(module, names(cells[1]));
    }
    assert!(layers.len() > 5, "the layering table has rows: {layers:?}");
    layers
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

/// The top-level crate modules a file names (`crate::x…` and `crate::{x…, y…}`), outside comments.
fn imports(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split on commas outside nested braces.
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(&group[start..j]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(&group[start..j]));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

/// Each file of `host/src` with the top-level module it belongs to (`lib.rs` and the binary's
/// `main.rs` stand outside the layers).
fn modules() -> Vec<(String, PathBuf)> {
    let src = Path::new(ROOT).join("host/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&src).unwrap();
            let first = rel.components().next()?.as_os_str().to_str()?.to_string();
            let module = first.trim_end_matches(".rs").to_string();
            (module != "lib" && module != "main").then_some((module, path))
        })
        .collect()
}

fn violations(layers: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (module, path) in modules() {
        let Some(allowed) = layers.get(&module) else {
            problems.push(format!(
                "host/src/{module} is not in ARCHITECTURE.md's layering table"
            ));
            continue;
        };
        let source = std::fs::read_to_string(&path).unwrap();
        for import in imports(&source) {
            if import != module && !allowed.contains(&import) {
                problems.push(format!(
                    "{} imports crate::{import}, which `{module}` may not (ARCHITECTURE.md)",
                    path.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn host_modules_import_only_what_the_map_allows() {
    let problems = violations(&layers());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layering_has_no_cycle() {
    let layers = layers();
    // Depth-first search for a path back to the start.
    fn reaches(layers: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
        let mut stack = vec![from.to_string()];
        let mut seen = BTreeSet::new();
        while let Some(m) = stack.pop() {
            for next in layers.get(&m).into_iter().flatten() {
                if next == to {
                    return true;
                }
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        false
    }
    for module in layers.keys() {
        assert!(
            !reaches(&layers, module, module),
            "`{module}` can reach itself through the allowed imports"
        );
    }
}

#[test]
fn the_checker_sees_every_form_of_import() {
    let source = "use crate::store::Store;\nuse crate::{domain::ids::X, jobs::{a, b}};\n\
                  // use crate::api::Nope;\nlet x = crate::mail::links::f();\n";
    let found: Vec<String> = imports(source).into_iter().collect();
    assert_eq!(found, ["domain", "jobs", "mail", "store"]);
    // An edge the table does not allow is reported.
    let mut layers = BTreeMap::new();
    for (module, _) in modules() {
        layers.insert(module, BTreeSet::new());
    }
    assert!(
        violations(&layers)
            .iter()
            .any(|p| p.contains("imports crate::store")),
        "an empty table forbids the store imports that exist"
    );
}

/// ARCHITECTURE.md: "what a filter reads of a contact's events does not grow with its history".
/// The modules that evaluate filters (the filter crate's SQL, live re-evaluation's and a step's
/// reads in the store) read `event_summaries`, never `events`.
#[test]
fn filters_read_event_summaries_not_events() {
    let root = Path::new(ROOT);
    for file in [
        "filter/src/sql.rs",
        "host/src/store/segments.rs",
        "host/src/store/executions.rs",
    ] {
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            !source.contains("FROM events"),
            "{file} reads `events`; filters read `event_summaries`"
        );
        assert!(
            source.contains("FROM event_summaries"),
            "{file} no longer reads `event_summaries`: update this check and ARCHITECTURE.md"
        );
    }
}
