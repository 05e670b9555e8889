//! The dependency rule, checked rather than hoped for: which of kerf's modules may use which. The pure core
//! (the API types and rules, the catalog, scheduling, disruption, the engine, admission, simulate) never reaches the
//! edges (`controllers`, `kube`, `cli`); the API rules use nothing else of kerf; the catalog only the API;
//! disruption decides below the engine (the engine drives it, never the reverse); the decisions that must not wait
//! on anything use no async runtime; and the crates keep the AWS SDK to `kerf-aws` and the binary.

use std::path::{Path, PathBuf};

/// Each module of the `kerf` crate and the modules of the crate it may name (`crate::<module>`).
const ALLOWED: &[(&str, &[&str])] = &[
    ("api", &[]),
    ("catalog", &["api"]),
    ("scheduling", &["api", "catalog"]),
    ("admission", &["api", "catalog", "scheduling"]),
    ("manifest", &["api"]),
    ("disruption", &["api", "catalog", "scheduling"]),
    (
        "engine",
        &["api", "catalog", "scheduling", "disruption", "cloud"],
    ),
    ("cloud", &["api", "catalog"]),
    ("interruption", &["api", "catalog", "cloud", "engine"]),
    (
        "simulate",
        &[
            "api",
            "catalog",
            "scheduling",
            "disruption",
            "engine",
            "cloud",
            "admission",
            "manifest",
        ],
    ),
];

/// Modules whose decisions are synchronous: no async runtime.
const NO_RUNTIME: &[&str] = &[
    "api",
    "catalog",
    "scheduling",
    "disruption",
    "engine",
    "admission",
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_owned());
        }
        return;
    }
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        rust_files(&entry.path(), out);
    }
}

/// The code of `text` without comments (line comments and doc comments: a doc link is not a dependency).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(n, line)| (n + 1, line.split("//").next().unwrap_or_default()))
}

/// The `crate::<module>` names in `line`, including those of a grouped `use crate::{a, b::c}`.
fn crate_modules(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.push(name);
            }
        } else {
            found.push(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn each_module_uses_only_the_layers_below_it() {
    let mut wrong = Vec::new();
    for (module, allowed) in ALLOWED {
        let mut files = Vec::new();
        rust_files(&src().join(module), &mut files);
        rust_files(&src().join(format!("{module}.rs")), &mut files);
        assert!(!files.is_empty(), "src/{module} has no sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            let shown = file
                .strip_prefix(src())
                .unwrap_or(&file)
                .display()
                .to_string();
            for (n, line) in code_lines(&text) {
                for used in crate_modules(line) {
                    if used != *module && !allowed.contains(&used.as_str()) {
                        wrong.push(format!("src/{shown}:{n}: {module} uses crate::{used}"));
                    }
                }
                let runtime = ["tokio::", "kube::Client", "kube::Api", "reqwest::"]
                    .iter()
                    .any(|r| line.contains(r));
                // Tests may drive async code with a runtime.
                if NO_RUNTIME.contains(module) && runtime && !line.contains("#[tokio::test]") {
                    wrong.push(format!(
                        "src/{shown}:{n}: {module} uses an async runtime or a client"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_aws_sdk_stays_in_the_aws_adapter_and_the_binary() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for krate in [".", "webhooks", "certs"] {
        let manifest =
            std::fs::read_to_string(root.join(krate).join("Cargo.toml")).expect("Cargo.toml");
        let dependencies = manifest
            .split("[dependencies]")
            .nth(1)
            .map(|d| d.split("\n[").next().unwrap_or_default())
            .unwrap_or_default();
        assert!(
            !dependencies.contains("aws-sdk") && !dependencies.contains("aws-config"),
            "{krate}/Cargo.toml depends on the AWS SDK"
        );
        if krate != "." {
            assert!(
                !dependencies.contains("kerf ") && !dependencies.contains("kerf.workspace"),
                "{krate} must not depend on the kerf crate"
            );
        }
    }
}

#[test]
fn grouped_and_nested_uses_are_seen() {
    assert_eq!(
        crate_modules("use crate::{api, catalog::Catalog};"),
        ["api", "catalog"]
    );
    assert_eq!(
        crate_modules("let x = crate::engine::overlay::f();"),
        ["engine"]
    );
    assert_eq!(crate_modules("no use here"), Vec::<String>::new());
}
