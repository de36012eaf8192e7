//! The documentation holds together: every relative link of `README.md`, `ARCHITECTURE.md` and
//! `docs/**/*.md` names a file that exists and, with a `#fragment`, a heading of that page (by
//! GitHub's anchor for it); every page of `docs/` is reachable from the book's table of contents.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The Markdown pages whose links are checked.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for path in std::fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().path())
        {
            match path.extension() {
                _ if path.is_dir() => folders.push(path),
                Some(e) if e == "md" => pages.push(path),
                _ => {}
            }
        }
    }
    pages.sort();
    pages
}

/// The lines outside fenced code blocks.
fn unfenced(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The text outside fenced code blocks, with inline code spans removed.
fn prose(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for line in unfenced(text) {
        let mut out = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        lines.push(out);
    }
    lines
}

/// The targets of the inline links (`[text](target)`) and reference definitions
/// (`[label]: target`) of a page.
fn links(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.trim_matches(['<', '>']).to_string());
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some((_, target)) = trimmed.split_once("]: ")
        {
            targets.push(target.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    targets
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page: its headings' (a repeated one numbered `-1`, `-2`…) and explicit
/// `<a id="…">` / `<a name="…">` ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for line in unfenced(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut n = 0;
            while anchors.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            anchors.insert(anchor);
        }
        for attribute in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(&format!("<a {attribute}")) {
                let after = &rest[at + 3 + attribute.len()..];
                let end = after.find('"').unwrap_or(after.len());
                anchors.insert(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    anchors
}

/// `page`'s path relative to the repository root, for messages.
fn shown(page: &Path) -> String {
    page.strip_prefix(ROOT)
        .unwrap_or(page)
        .display()
        .to_string()
}

#[test]
fn every_relative_link_of_the_documentation_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", shown(&page)));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if resolved.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&resolved).unwrap();
            if !anchors(&target_text).contains(fragment) {
                broken.push(format!("{}: {target} (no such heading)", shown(&page)));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_reachable_from_its_table_of_contents() {
    let docs = Path::new(ROOT).join("docs");
    let mut reached = BTreeSet::new();
    let mut queue = vec![docs.join("README.md")];
    while let Some(page) = queue.pop() {
        let Ok(page) = page.canonicalize() else {
            continue;
        };
        if !reached.insert(page.clone()) {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            let file = target.split('#').next().unwrap_or("");
            if file.ends_with(".md") && !file.contains("://") {
                queue.push(page.parent().unwrap().join(file));
            }
        }
    }
    let unreached: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&docs))
        .filter(|p| !reached.contains(&p.canonicalize().unwrap()))
        .map(|p| shown(&p))
        .collect();
    assert!(
        unreached.is_empty(),
        "pages no link from docs/README.md leads to: {unreached:?}"
    );
}

#[test]
fn the_checker_reads_links_and_anchors_as_github_does() {
    let page = "# Backup and restore\n## Metrics and traces (OTLP)\n## Metrics and traces (OTLP)\n\
                see [a](b.md#c) and `[not](code.md)`, [ref]: ../x.md\n```\n[no](fenced.md)\n```\n";
    assert_eq!(links(page), ["b.md#c"]);
    assert_eq!(links("[ref]: ../x.md \"title\""), ["../x.md"]);
    let anchors = anchors(page);
    assert!(anchors.contains("backup-and-restore"));
    assert!(anchors.contains("metrics-and-traces-otlp"));
    assert!(anchors.contains("metrics-and-traces-otlp-1"));
    assert_eq!(
        slug("`herald config` — the settings"),
        "herald-config--the-settings"
    );
}
