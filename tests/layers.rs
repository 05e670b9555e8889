//! The dependency rule, checked rather than hoped for: which of kerf's crates and modules may use which.
//!
//! Crates: `kerf-api` (the API types and rules) uses no other kerf crate; `kerf-core` (catalog, scheduling,
//! disruption, engine, cloud port) only `kerf-api`; the AWS adapter only those two, never the Kubernetes edge
//! (`kerf`); the webhook server and the certificates none; and only `kerf-aws` and the binary link the AWS SDK.
//!
//! Modules, inside those crates: the catalog uses only the API; disruption decides below the engine (the engine
//! drives it, never the reverse); admission and simulate, in the edge crate, never reach the controllers, the
//! Kubernetes client or the command line; and the decisions that must not wait on anything use no async runtime.

use std::path::{Path, PathBuf};

/// Each module and the modules it may name (`crate::<module>`; the layers below are re-exported under their module
/// names, so `crate::api` is `kerf_api` wherever it is written).
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

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crate directory a module's sources are in: `kerf-api` is the `api` module, `kerf-core` holds the pure ones,
/// and the rest are the edge crate's (`src/`).
fn crate_of(module: &str) -> &'static str {
    match module {
        "api" => "api",
        "catalog" | "scheduling" | "disruption" | "engine" | "cloud" | "interruption"
        | "manifest" => "core",
        _ => ".",
    }
}

/// The sources of `module`, relative to the workspace.
fn module_files(module: &str) -> Vec<PathBuf> {
    let src = workspace().join(crate_of(module)).join("src");
    let mut files = Vec::new();
    if module == "api" {
        rust_files(&src, &mut files);
    } else {
        rust_files(&src.join(module), &mut files);
        rust_files(&src.join(format!("{module}.rs")), &mut files);
    }
    files
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
        let files = module_files(module);
        assert!(!files.is_empty(), "{module} has no sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            let shown = file
                .strip_prefix(workspace())
                .unwrap_or(&file)
                .display()
                .to_string();
            for (n, line) in code_lines(&text) {
                // `kerf-api` is a crate of its own: its `crate::` is itself, and its Cargo.toml names no kerf crate.
                let uses = if module == &"api" {
                    Vec::new()
                } else {
                    crate_modules(line)
                };
                for used in uses {
                    if used != *module && !allowed.contains(&used.as_str()) {
                        wrong.push(format!("{shown}:{n}: {module} uses crate::{used}"));
                    }
                }
                let runtime = ["tokio::", "kube::Client", "kube::Api", "reqwest::"]
                    .iter()
                    .any(|r| line.contains(r));
                // Tests may drive async code with a runtime.
                if NO_RUNTIME.contains(module) && runtime && !line.contains("#[tokio::test]") {
                    wrong.push(format!(
                        "{shown}:{n}: {module} uses an async runtime or a client"
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

/// Each library crate and the kerf crates its `[dependencies]` may name.
const CRATES: &[(&str, &[&str])] = &[
    ("api", &[]),
    ("core", &["kerf-api"]),
    ("webhooks", &[]),
    ("certs", &[]),
    ("aws", &["kerf-api", "kerf-core"]),
    (
        ".",
        &["kerf-api", "kerf-core", "kerf-webhooks", "kerf-certs"],
    ),
];

/// The `[dependencies]` table of a crate's manifest (dev-dependencies may add test kits).
fn dependencies(krate: &str) -> Vec<String> {
    let manifest =
        std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).expect("Cargo.toml");
    let table = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .map(|d| d.split("\n[").next().unwrap_or_default())
        .unwrap_or_default();
    table
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| line.split(['=', '.']).next())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_kerf_crates_below_it() {
    for (krate, allowed) in CRATES {
        let deps = dependencies(krate);
        assert!(!deps.is_empty(), "{krate}/Cargo.toml has no [dependencies]");
        for dep in &deps {
            if dep == "kerf" || dep.starts_with("kerf-") {
                assert!(
                    allowed.contains(&dep.as_str()),
                    "{krate}/Cargo.toml depends on {dep}, above or beside it"
                );
            }
        }
    }
}

#[test]
fn the_aws_sdk_stays_in_the_aws_adapter_and_the_binary() {
    for (krate, _) in CRATES.iter().filter(|(k, _)| *k != "aws") {
        let sdk = dependencies(krate)
            .into_iter()
            .find(|d| d.starts_with("aws-sdk") || d == "aws-config");
        assert_eq!(sdk, None, "{krate}/Cargo.toml depends on the AWS SDK");
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
