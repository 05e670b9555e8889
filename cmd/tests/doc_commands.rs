//! Every command the README and docs/ show is accounted for: the `kerf` commands run here, against the repository's
//! files, with the exit code and the output lines the docs print beside them (`#   …` lines); every other command
//! is named in [`COVERED`] with the test that runs it or why it runs elsewhere. A command added to the docs that
//! is neither fails this test, so the docs cannot show a command nothing checks.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Commands run elsewhere, by their start: what runs them. Checked in order; the first match counts.
const COVERED: &[(&str, &str)] = &[
    ("make test", "the test command itself (CI runs it)"),
    ("cargo test", "the test command (`make test` runs the workspace's tests)"),
    ("KERF_FUZZ_CASES=", "the fuzz targets; `make test` runs them with the default case count"),
    ("KERF_E2E=1 cargo test --workspace --locked --test e2e", "`make e2e`"),
    ("export CARGO_TARGET_DIR=", "the Makefile sets it"),
    ("bash e2e/scripts/build-control-plane.sh", "`make e2e`"),
    ("bash e2e/scripts/helm.sh", "`make e2e`"),
    ("bash e2e/scripts/aws-emu.sh", "`make e2e` (install, start, stop)"),
    ("bash e2e/scripts/cluster.sh", "every e2e test binary (`kerf_e2e::Cluster`)"),
    ("eval \"$(bash e2e/scripts/", "the e2e harness (`kerf_e2e::Cluster`, `kerf_e2e::aws::AwsEmu`)"),
    ("curl -XPOST $AWS_ENDPOINT_URL/_emu/", "`kerf_e2e::aws::AwsEmu` (faults and seeds)"),
    ("kubectl get ns", "every e2e test binary starts by reaching the apiserver"),
    ("~/.cache/kerf/bin/helm", "e2e/tests/chart.rs (helm from the same place)"),
    ("helm install cert-manager", "not run here (no network); e2e/tests/chart.rs renders and applies the cert-manager mode's resources"),
    ("helm install kerf charts/kerf", "e2e/tests/chart.rs (`helm install`, self-signed mode)"),
    ("helm uninstall kerf", "e2e/tests/chart.rs"),
    ("kubectl -n kerf rollout status", "e2e/tests/chart.rs waits for the webhook to serve"),
    ("kubectl apply -f examples/", "e2e/tests/chart.rs applies examples/mistakes.yaml and examples/inflate.yaml"),
    ("kubectl delete -f examples/", "e2e/tests/chart.rs"),
    ("kubectl get nodepool", "e2e/tests/chart.rs and e2e/tests/disruption.rs read NodePools"),
    ("kubectl get nodeclaims", "the e2e tests list NodeClaims through the same API (`kerf_e2e::controller::node_claims`)"),
    ("kubectl -n kube-system scale deployment karpenter", "not run here: Karpenter's own Deployment (docs/migration.md; the test cluster has no Karpenter)"),
    ("kubectl -n kerf scale deployment kerf-controller", "not run here: kubectl scaling the chart's controller Deployment, which e2e/tests/chart.rs installs"),
    ("kubectl get pods -l app=inflate", "e2e/tests/chart.rs reads the advice annotations of the inflate pods"),
    ("kubectl get pod ", "e2e/tests/provisioning.rs reads the kerf.sh/provisioning annotation"),
    ("kubectl patch deployment inflate", "e2e/tests/chart.rs (the arm64 patch)"),
    ("cargo bench", "`make bench`: figures for docs/performance.md, not checks (`make test`'s clippy builds every bench)"),
    ("cargo build --release", "`make bench` builds the same binary"),
    ("B=$(ls -t $CARGO_TARGET_DIR/release/deps/", "`make bench` (the bench binary it built)"),
    ("KERF_SOLVE_ONCE=", "the scheduling bench's one-solve mode (`benches/scheduling.rs`), a figure"),
    ("KERF_QUALITY=", "the scheduling bench's decision-quality mode (`benches/scheduling.rs`), a figure"),
    ("KERF_DECIDE_ONCE=", "the consolidation bench's one-decision mode (`benches/consolidation.rs`), a figure"),
    ("KERF_SIZES=", "the whole-command simulate bench (`cmd/benches/simulate_command.rs`), a figure"),
    ("KERF_SCENARIO_DIR=", "the whole-command simulate bench, keeping its scenario files for a profiler"),
    ("KERF_E2E=1 KERF_BIN=", "the e2e figures test (`e2e/tests/provisioning.rs`, ignored by default: a figure)"),
    ("perf ", "a profiling aid for the bench above, not a check"),
];

/// The shell commands of the fenced `sh`/`bash`/`console`/`shell` blocks of `text`: `\`-continued lines joined,
/// a leading `$ ` dropped, each with the `#` comment lines that follow it.
fn commands(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_block = !in_block && matches!(lang.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if !in_block {
            continue;
        }
        if trimmed.starts_with('#') {
            if let Some((_, comments)) = out.last_mut() {
                comments.push(trimmed.to_owned());
            }
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        let part = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        if let Some(head) = part.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        let continued = !pending.is_empty();
        pending.push_str(part);
        // Output shown after a `$ ` command (no `$` of its own) is not a command.
        let is_output =
            !continued && (line.starts_with(' ') || part.starts_with('{') || part.starts_with('"'));
        if !is_output {
            out.push((std::mem::take(&mut pending), Vec::new()));
        }
        pending.clear();
    }
    out
}

/// `command` without its trailing `# …` comment, and the comment.
fn split_comment(command: &str) -> (&str, Option<&str>) {
    match command.find("  #").or_else(|| command.find(" # ")) {
        Some(at) => (command[..at].trim_end(), Some(command[at..].trim_start())),
        None => (command.trim_end(), None),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// Runs `cargo run -p kerf-cmd -- ARGS` as the built binary from the repository root; checks the exit code the
/// comment names (`exit N`, else 0) and that every output line the docs print (`#   text`, a trailing `…` for
/// "and more") is a line of the output. Returns what failed.
fn run_kerf(args: &str, comment: Option<&str>, shown: &[String]) -> Result<(), String> {
    // Output redirected to a file (`> /tmp/x.yaml`) is checked as printed.
    let args = args.split_once(" > ").map_or(args, |(args, _file)| args);
    let argv: Vec<&str> = args.split_whitespace().collect();
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(&argv)
        .current_dir(repo_root())
        .output()
        .map_err(|e| format!("cannot run kerf {args}: {e}"))?;
    let expected_code = comment
        .and_then(|c| c.split("exit ").nth(1))
        .and_then(|c| c.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if code != expected_code {
        return Err(format!(
            "kerf {args}: exit {code}, the docs say {expected_code}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for line in shown {
        let Some(text) = line.strip_prefix("#   ") else {
            continue;
        };
        let found = match text.strip_suffix('…') {
            Some(prefix) => stdout.lines().any(|l| l.trim().starts_with(prefix.trim())),
            None => stdout.lines().any(|l| l.trim() == text.trim()),
        };
        if !found {
            return Err(format!(
                "kerf {args}: the docs show {text:?}, the output has no such line:\n{stdout}"
            ));
        }
    }
    Ok(())
}

#[test]
fn every_documented_command_runs_or_is_covered() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("a readable doc");
        let name = doc
            .strip_prefix(repo_root())
            .unwrap_or(&doc)
            .display()
            .to_string();
        for (command, shown) in commands(&text) {
            let (command, comment) = split_comment(&command);
            if let Some(args) = command.strip_prefix("cargo run -p kerf-cmd -- ") {
                ran += 1;
                if let Err(why) = run_kerf(args, comment, &shown) {
                    failures.push(format!("{name}: {why}"));
                }
            } else if !COVERED.iter().any(|(start, _)| command.starts_with(start)) {
                failures.push(format!(
                    "{name}: `{command}` is neither a kerf command run here nor covered by a test (COVERED)"
                ));
            }
        }
    }
    assert!(ran >= 4, "the README's kerf commands were found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn commands_are_read_as_a_shell_reads_them() {
    let text = "```sh\n$ kerf a \\\n  --b c   # note\n#   shown\nkubectl x\n{\"output\": 1}\n```\n```yaml\nnot: a command\n```\n";
    let got = commands(text);
    assert_eq!(
        got,
        [
            (
                "kerf a --b c   # note".to_owned(),
                vec!["#   shown".to_owned()]
            ),
            ("kubectl x".to_owned(), vec![]),
        ]
    );
    assert_eq!(split_comment(&got[0].0), ("kerf a --b c", Some("# note")));
}
