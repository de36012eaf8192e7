//! The map stays true: the import rules of `ARCHITECTURE.md` (its layering table) hold in
//! `host/src`, every module of `host/src` is on the map, no modules of `host/src` import each
//! other in a circle, and filters read contacts' event summaries, not their events.

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

/// Every `.rs` file under `dir`, its subdirectories' too.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
    for module in [
        "filter/src/sql.rs",
        "host/src/store/segments",
        "host/src/store/executions",
    ] {
        let path = root.join(module);
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
        let mut reads_summaries = false;
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            assert!(
                !source.contains("FROM events"),
                "{} reads `events`; filters read `event_summaries`",
                file.display()
            );
            reads_summaries |= source.contains("FROM event_summaries");
        }
        assert!(
            reads_summaries,
            "{module} no longer reads `event_summaries`: update this check and ARCHITECTURE.md"
        );
    }
}

/// A token of Rust source as far as module paths go: a word, `::`, or one other character.
/// Comments, string and character literals are skipped (a brace inside them is no brace).
fn tokens(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if (c == 'r' || c == 'b') && matches!(next, Some('#' | '"'))
            || c == 'b' && next == Some('r') && matches!(chars.get(i + 2), Some('#' | '"'))
        {
            // A raw (byte) string: r"…", r#"…"#, br#"…"#; or b"…".
            let mut j = i + 1;
            if chars[j] == 'r' {
                j += 1;
            }
            let raw = chars[i] == 'r' || chars[i + 1] == 'r';
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                // `r#ident`, a raw identifier.
                i = j;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if !raw && chars[j] == '\\' {
                    j += 2;
                    continue;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// The paths a `use` tree names, starting at `tokens[*at]` (after `use`), up to its `;`.
fn use_paths(tokens: &[String], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    while *at < tokens.len() {
        let t = tokens[*at].as_str();
        *at += 1;
        match t {
            "::" => {}
            "{" => {
                loop {
                    use_paths(tokens, at, path.clone(), out);
                    // use_paths stopped after a `,` or the group's `}`.
                    if tokens.get(*at - 1).is_none_or(|t| t != ",") {
                        break;
                    }
                }
                // Past the group: a `,` or `}` of the outer group or the `;`.
                if tokens
                    .get(*at)
                    .is_some_and(|t| t == "," || t == "}" || t == ";")
                {
                    *at += 1;
                }
                return;
            }
            "," | "}" | ";" => {
                out.push(path);
                return;
            }
            "as" => {
                *at += 1;
            }
            "*" => {}
            // `a::{self, b}`: `self` names `a`.
            "self" if !path.is_empty() => {}
            word => path.push(word.to_string()),
        }
    }
}

/// The module paths (`crate`-absolute, as segments) a file names, with the inline `mod`s it is in
/// taken into account: `use` trees and `crate::`/`super::`/`self::` paths in code.
fn named_paths(
    source: &str,
    module: &[String],
    children: &dyn Fn(&[String]) -> bool,
) -> Vec<Vec<String>> {
    let tokens = tokens(source);
    let mut found = Vec::new();
    // The inline modules open at a point: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let absolute = |inline: &[(String, usize)], path: &[String]| -> Option<Vec<String>> {
        let mut here: Vec<String> = module.to_vec();
        here.extend(inline.iter().map(|(name, _)| name.clone()));
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                here.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    here.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A path relative to this module names a child module, or something else
                // (another crate, a local item): only the former is an import of this crate.
                let mut child = here.clone();
                child.push(first.to_string());
                if !children(&child) {
                    return None;
                }
            }
            None => return None,
        }
        here.extend(rest.iter().cloned());
        Some(here)
    };
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "{" => {
                depth += 1;
                i += 1;
            }
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((tokens[i + 1].clone(), depth + 1));
                depth += 1;
                i += 3;
            }
            "use" => {
                i += 1;
                let mut paths = Vec::new();
                use_paths(&tokens, &mut i, Vec::new(), &mut paths);
                found.extend(paths.iter().filter_map(|p| absolute(&inline, p)));
            }
            // Not `$crate::…`: a macro's path belongs to where the macro is used.
            "crate" | "super" | "self"
                if tokens.get(i + 1).is_some_and(|t| t == "::")
                    && (i == 0 || (tokens[i - 1] != "::" && tokens[i - 1] != "$")) =>
            {
                let mut path = vec![t.to_string()];
                i += 1;
                while tokens.get(i).is_some_and(|t| t == "::")
                    && tokens
                        .get(i + 1)
                        .is_some_and(|t| t.chars().all(|c| c.is_alphanumeric() || c == '_'))
                {
                    path.push(tokens[i + 1].clone());
                    i += 2;
                }
                found.extend(absolute(&inline, &path));
            }
            _ => i += 1,
        }
    }
    found
}

/// The files of `host/src` (the library: `main.rs` is the binary's crate) by module path:
/// `store/contacts.rs` and `store/contacts/mod.rs` are both `["store", "contacts"]`.
fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut by_module = BTreeMap::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap();
        let mut module: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_string())
            .collect();
        if module == ["main"] {
            continue;
        }
        if module.last().is_some_and(|m| m == "mod" || m == "lib") {
            module.pop();
        }
        by_module.insert(module, path);
    }
    by_module
}

/// File-level imports among the modules of `host/src`: module → the modules it imports
/// (each with the path that names it), leaving out a module's imports of its ancestors (a child
/// uses its parent's items) and of itself.
fn module_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> {
    let files = module_files(src);
    let is_module = |m: &[String]| files.contains_key(m);
    let mut edges = BTreeMap::new();
    for (module, path) in &files {
        let source = std::fs::read_to_string(path).unwrap();
        let mut targets: BTreeMap<Vec<String>, String> = BTreeMap::new();
        for named in named_paths(&source, module, &is_module) {
            // The file that defines the item: the longest prefix of the path that is a module.
            let Some(target) = (0..=named.len())
                .rev()
                .map(|n| named[..n].to_vec())
                .find(|m| files.contains_key(m))
            else {
                continue;
            };
            if module.starts_with(&target) {
                continue;
            }
            targets.entry(target).or_insert_with(|| named.join("::"));
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(edges: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flat_map(|t| t.keys()) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The circles found, each as its modules and the imports among them.
fn circle_report(edges: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<String> {
    circles(edges)
        .into_iter()
        .map(|circle| {
            let mut lines = vec![format!("a circle of {} modules:", circle.len())];
            for module in &circle {
                for (target, path) in &edges[module] {
                    if circle.contains(target) {
                        lines.push(format!(
                            "  {} -> {} (names {path})",
                            module.join("::"),
                            target.join("::")
                        ));
                    }
                }
            }
            lines.join("\n")
        })
        .collect()
}

/// ARCHITECTURE.md: no import circle among the modules of `host/src`. A module is a file; it
/// imports another by a `use` or a `crate::`/`super::`/`self::` path naming an item of it
/// (`$crate::` paths in macros belong where the macro is used and are not seen); a module's
/// imports of its ancestors (a child using its parent's items) do not count.
#[test]
fn host_modules_import_each_other_in_no_circle() {
    let edges = module_imports(&Path::new(ROOT).join("host/src"));
    assert!(
        edges.values().map(BTreeMap::len).sum::<usize>() > 100,
        "the checker sees the imports: {edges:?}"
    );
    let report = circle_report(&edges);
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_circle_checker_resolves_paths_and_finds_a_circle() {
    let m = |s: &str| -> Vec<String> { s.split("::").map(str::to_string).collect() };
    let known = [
        m("store::jobs"),
        m("store::jobs::sql"),
        m("store::statements"),
    ];
    let is_module = |path: &[String]| known.iter().any(|k| k == path);
    let source = "use super::jobs::sql::{A, b::C};\nuse crate::{store::statements::{self, S}};\n\
                  // use super::nope::X;\nconst S: &str = \"super::nope::Y {\";\n\
                  fn f() { super::jobs::g(); $crate::store::nope::h(); }\n\
                  mod tests { use super::*; use super::super::jobs::Lease; }\n";
    let found: BTreeSet<String> = named_paths(source, &m("store::statements"), &is_module)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let expected: BTreeSet<String> = [
        "store::jobs::sql::A",
        "store::jobs::sql::b::C",
        "store::statements",
        "store::statements::S",
        "store::jobs::g",
        "store::jobs::Lease",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(found, expected);
    // jobs -> statements -> jobs::sql is no circle; jobs::sql -> statements makes one.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    edges
        .entry(m("store::jobs"))
        .or_default()
        .insert(m("store::statements"), "S".into());
    edges
        .entry(m("store::statements"))
        .or_default()
        .insert(m("store::jobs::sql"), "A".into());
    edges.entry(m("store::jobs::sql")).or_default();
    assert!(circles(&edges).is_empty());
    edges
        .entry(m("store::jobs::sql"))
        .or_default()
        .insert(m("store::statements"), "S".into());
    assert_eq!(
        circles(&edges),
        [vec![m("store::jobs::sql"), m("store::statements")]]
    );
}

/// No file of `host/src` is over 1,000 lines: a file holds one concept (ARCHITECTURE.md).
#[test]
fn no_host_source_file_is_over_a_thousand_lines() {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("host/src"), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).unwrap().lines().count();
            (lines > 1_000).then(|| format!("{} has {lines} lines", path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these along the concepts they hold (a concept a file):\n{}",
        long.join("\n")
    );
}
