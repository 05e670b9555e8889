//! The dependency rule, checked rather than hoped for: which of kerf's crates and modules may use which.
//!
//! Crates: `kerf-api` (the API types and rules) uses no other kerf crate; `kerf-core` (catalog, scheduling,
//! disruption, engine, cloud port) only `kerf-api`; the AWS adapter only those two, never the Kubernetes edge
//! (`kerf`); the webhook server and the certificates none; and only `kerf-aws` and the binary link the AWS SDK.
//!
//! Modules, inside those crates: the catalog uses only the API; disruption decides below the engine (the engine
//! drives it, never the reverse); admission and simulate, in the edge crate, never reach the controllers, the
//! Kubernetes client or the command line; the decisions that must not wait on anything use no async runtime; and
//! no two modules of a folder use each other (test code aside).

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

/// The crates' source folders: every folder of modules below them is checked for circles.
const CRATE_SOURCES: &[&str] = &[
    "api/src",
    "core/src",
    "src",
    "aws/src",
    "webhooks/src",
    "certs/src",
];

/// Every folder below `root` (itself included), with the absolute path of its modules (`crate::a::b::`).
fn module_folders(root: &Path) -> Vec<(PathBuf, String)> {
    let mut folders = vec![(root.to_owned(), "crate::".to_owned())];
    let mut next = 0;
    while next < folders.len() {
        let (folder, absolute) = folders[next].clone();
        next += 1;
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                folders.push((entry.path(), format!("{absolute}{name}::")));
            }
        }
    }
    folders
}

/// Test code may reach anywhere: test files, and the scripted apiserver of the controllers' tests.
fn is_test_file(name: &str) -> bool {
    name == "tests.rs" || name.ends_with("_tests.rs") || name == "testkit.rs"
}

/// The modules directly in `folder`: its `.rs` files (but `mod.rs`, `lib.rs` and test files) and folders.
fn sibling_modules(folder: &Path) -> std::collections::BTreeSet<String> {
    let mut modules = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().is_dir() {
            modules.insert(name);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            if !is_test_file(&name) && stem != "mod" && stem != "lib" {
                modules.insert(stem.to_owned());
            }
        }
    }
    modules
}

/// The non-test files of `module` in `folder`, each with how many `super::` lead from it back to `folder`.
fn files_with_depth(folder: &Path, module: &str) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    rust_files(&folder.join(format!("{module}.rs")), &mut files);
    rust_files(&folder.join(module), &mut files);
    files
        .into_iter()
        .filter(|f| !is_test_file(&f.file_name().unwrap_or_default().to_string_lossy()))
        .map(|f| {
            let parts = f.strip_prefix(folder).map_or(0, |p| p.components().count());
            let depth = if f.ends_with("mod.rs") {
                parts - 1
            } else {
                parts
            };
            (f, depth)
        })
        .collect()
}

/// The modules of `folder` that `line`, in a file `depth` levels below it, names: through as many `super::` as
/// lead back to `folder`, or through `absolute`.
fn siblings_named(line: &str, depth: usize, absolute: &str) -> Vec<String> {
    static RELATIVE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\b((?:super::)+)(\{[^}]*\}|[a-z_0-9]+)").expect("regex")
    });
    let mut named = Vec::new();
    for found in RELATIVE.captures_iter(line) {
        if found[1].matches("super::").count() != depth {
            continue;
        }
        let target = &found[2];
        for item in target.trim_matches(['{', '}']).split(',') {
            named.push(
                item.trim()
                    .split("::")
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    let mut rest = line;
    while let Some(at) = rest.find(absolute) {
        rest = &rest[at + absolute.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        named.push(name);
    }
    named
}

/// No two modules of a folder use each other (`a` names `b` and `b` names `a`): the one that is lower should hold
/// what both need, or a third module should.
#[test]
fn no_two_modules_of_a_folder_use_each_other() {
    let mut circles = Vec::new();
    let folders = CRATE_SOURCES
        .iter()
        .flat_map(|root| module_folders(&workspace().join(root)));
    for (folder, absolute) in folders {
        let absolute = absolute.as_str();
        let modules = sibling_modules(&folder);
        let mut uses = std::collections::BTreeSet::new();
        for module in &modules {
            for (file, depth) in files_with_depth(&folder, module) {
                let text = std::fs::read_to_string(&file).expect("source");
                // An inline test module ends the file's own code.
                let code = text.split("mod tests {").next().unwrap_or_default();
                for (_, line) in code_lines(code) {
                    for used in siblings_named(line, depth, absolute) {
                        if modules.contains(&used) && used != *module {
                            uses.insert((module.clone(), used));
                        }
                    }
                }
            }
        }
        for (a, b) in &uses {
            if a < b && uses.contains(&(b.clone(), a.clone())) {
                circles.push(format!("{}: {a} and {b}", folder.display()));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that use each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_seen_through_super_and_absolute_paths() {
    assert_eq!(
        siblings_named(
            "use super::super::kit::calls::{self, X};",
            2,
            "crate::controllers::"
        ),
        ["kit"]
    );
    assert_eq!(
        siblings_named(
            "use super::{nodeclaim, Context};",
            1,
            "crate::controllers::"
        ),
        ["nodeclaim", "Context"]
    );
    assert_eq!(
        siblings_named(
            "crate::controllers::state::owned(x)",
            3,
            "crate::controllers::"
        ),
        ["state"]
    );
    assert_eq!(
        siblings_named("use super::calls;", 2, "crate::x::"),
        Vec::<String>::new()
    );
}
