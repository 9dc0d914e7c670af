//! The documentation a newcomer reads: the README and the book in `docs/`
//! (with the pages it takes in from `deploy/README.md` and `SECURITY.md`).
//! Every relative link names a file that is there, and a heading of it when
//! it names one (`#…`); every `{{#include}}` names a file and an anchor that
//! are there; the book's SUMMARY lists every page and every page it lists
//! exists. `.ci/run` also builds the book with mdBook.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files checked: README.md, SECURITY.md, deploy/README.md and
/// everything under docs/ but the built book.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut out = vec![
        root.join("README.md"),
        root.join("SECURITY.md"),
        root.join("deploy/README.md"),
    ];
    for e in walkdir_md(&root.join("docs")) {
        out.push(e);
    }
    out
}

fn walkdir_md(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "book") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `text`'s lines, those of fenced code blocks (and their fences) blank.
fn unfenced(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect()
}

/// The text outside fenced code blocks and inline code spans, line by line.
fn prose(text: &str) -> Vec<String> {
    unfenced(text)
        .into_iter()
        .map(|line| {
            let mut in_code = false;
            line.chars()
                .filter(|&c| {
                    if c == '`' {
                        in_code = !in_code;
                    }
                    c != '`' && !in_code
                })
                .collect()
        })
        .collect()
}

/// The targets of `[text](target)` links in `text`'s prose.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// The anchors mdBook and GitHub give the headings of `text`.
fn anchors(text: &str) -> BTreeSet<String> {
    unfenced(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_link_of_the_readme_and_the_book_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if !anchor.is_empty() {
                let there = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&there).contains(anchor) {
                    broken.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
        for line in text.lines() {
            let Some(at) = line.find("{{#include ") else {
                continue;
            };
            let rest = &line[at + "{{#include ".len()..];
            let spec = rest[..rest.find("}}").unwrap_or(rest.len())].trim();
            let (file, anchor) = spec.split_once(':').unwrap_or((spec, ""));
            let target = dir.join(file);
            let Ok(there) = std::fs::read_to_string(&target) else {
                broken.push(format!("{}: include {file}: no such file", page.display()));
                continue;
            };
            let marked = |what: &str| there.contains(&format!("{what}: {anchor} "));
            let found = anchor.is_empty() || (marked("ANCHOR") && marked("ANCHOR_END"));
            if !found {
                broken.push(format!(
                    "{}: include {spec}: no such anchor",
                    page.display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_books_summary_lists_every_page_and_nothing_missing() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| docs.join(l)).collect();
    for page in &listed {
        assert!(
            page.exists(),
            "SUMMARY.md lists {} that is not there",
            page.display()
        );
    }
    for page in walkdir_md(&docs) {
        if page.file_name().is_some_and(|n| n == "SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page),
            "{} is not in docs/SUMMARY.md, so the book leaves it out",
            page.display()
        );
    }
}

#[test]
fn the_link_reader_finds_links_and_headings_and_skips_code() {
    let text = "# A title, here\n\nSee [x](a.md#b) and `[not](c.md)`.\n```\n[no](d.md)\n```\n## `code` heading\n";
    assert_eq!(links(text), vec!["a.md#b"]);
    let a = anchors(text);
    assert!(a.contains("a-title-here"), "{a:?}");
    assert!(a.contains("code-heading"), "{a:?}");
}
