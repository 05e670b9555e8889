//! Every `§` citation in the code and the docs names a reference file of `docs/reference/` on the same line
//! (`controller-behaviour.md §3.4`, `api-rules.md §2.4 and §2.6`) and a numbered heading that file has, so a reader
//! can follow it. A finer number than the headings go (api-rules.md §0.4d) must point into a section without numbered
//! subsections. Citations of other documents (`RFC 5280 §4.1`) are left alone.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const REFERENCES: [&str; 2] = ["controller-behaviour.md", "api-rules.md"];
/// Where citations may be: the workspace's sources, tests, scripts and docs.
const ROOTS: [&str; 13] = [
    "src",
    "api",
    "core",
    "tests",
    "benches",
    "aws",
    "webhooks",
    "certs",
    "cmd",
    "e2e",
    "docs",
    "charts",
    "README.md",
];
const EXTENSIONS: [&str; 6] = ["rs", "md", "sh", "py", "yaml", "toml"];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The numbered headings of a reference file: `3` for "## 3. Disruption", `3.4` for "### 3.4 Consolidation".
fn headings(file: &str) -> BTreeSet<String> {
    let path = workspace().join("docs/reference").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let heading = Regex::new(r"^#+\s+(\d+)\.(\d+)?").expect("regex");
    text.lines()
        .filter_map(|line| heading.captures(line))
        .map(|c| match c.get(2) {
            Some(sub) => format!("{}.{}", &c[1], sub.as_str()),
            None => c[1].to_owned(),
        })
        .collect()
}

/// Whether `section` (letters dropped) is a heading of `known`, or lies in a section without numbered subsections.
fn resolves(section: &str, known: &BTreeSet<String>) -> bool {
    let number: String = section
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = number.split('.').filter(|p| !p.is_empty());
    let Some(top) = parts.next() else {
        return false;
    };
    match parts.next() {
        None => known.contains(top),
        Some(sub) => {
            let exact = format!("{top}.{sub}");
            let prefix = format!("{top}.");
            known.contains(&exact)
                || (known.contains(top) && !known.iter().any(|k| k.starts_with(&prefix)))
        }
    }
}

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e));
        if wanted {
            out.push(path.to_owned());
        }
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        // The reference itself, build output and golden data are not citing anything.
        if ["target", "reference", "golden", ".git"].contains(&name.to_str().unwrap_or_default()) {
            continue;
        }
        files(&path, out);
    }
}

#[test]
fn every_citation_names_a_reference_file_and_one_of_its_headings() {
    let known: Vec<(&str, BTreeSet<String>)> =
        REFERENCES.iter().map(|f| (*f, headings(f))).collect();
    for (file, headings) in &known {
        assert!(
            headings.len() > 10,
            "{file}: too few numbered headings: {headings:?}"
        );
    }
    let citation = Regex::new(r"§(\d+(?:\.\d+)?[a-z]?)(?:[–-](\d+(?:\.\d+)?))?").expect("regex");
    let other_document = Regex::new(r"RFC \d+ $").expect("regex");
    let mut paths = Vec::new();
    for root in ROOTS {
        files(&workspace().join(root), &mut paths);
    }
    paths.sort();
    let mut cited = 0;
    let mut wrong = Vec::new();
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        let shown = path
            .strip_prefix(workspace())
            .unwrap_or(path)
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            for m in citation.captures_iter(line) {
                let at = m.get(0).expect("whole match").start();
                let before = &line[..at];
                if other_document.is_match(before) {
                    continue;
                }
                // The reference named last before the citation on its line.
                let named = known
                    .iter()
                    .filter_map(|(file, headings)| before.rfind(file).map(|i| (i, file, headings)))
                    .max_by_key(|(i, _, _)| *i);
                let Some((_, file, headings)) = named else {
                    wrong.push(format!(
                        "{shown}:{}: {} names no reference file",
                        n + 1,
                        &m[0]
                    ));
                    continue;
                };
                cited += 1;
                for section in [m.get(1), m.get(2)].into_iter().flatten() {
                    if !resolves(section.as_str(), headings) {
                        wrong.push(format!(
                            "{shown}:{}: {file} has no heading §{}",
                            n + 1,
                            section.as_str()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "citations that cannot be followed:\n{}",
        wrong.join("\n")
    );
    assert!(
        cited > 50,
        "only {cited} citations found: is the scan looking in the right places?"
    );
}

#[test]
fn a_section_resolves_to_its_heading_or_into_an_undivided_section() {
    let known: BTreeSet<String> = ["0", "1", "1.1", "1.2", "3", "3.4"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert!(resolves("3.4", &known));
    assert!(resolves("1", &known));
    assert!(resolves("0.4d", &known), "0 has no subsections");
    assert!(
        !resolves("1.3", &known),
        "1 has subsections, 1.3 is not one"
    );
    assert!(!resolves("7", &known));
    assert!(!resolves("", &known));
}
