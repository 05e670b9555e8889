//! `kerf validate` and `kerf simulate` on hostile and careless input, through the commands' own entry points
//! (the flags parsed as on the command line, the input in a file): exit codes, messages, and no runaway cost.

use clap::Parser;
use kerf::cli::{Cli, Command};
use std::time::{Duration, Instant};

/// The exit code, stdout and stderr of `kerf <args…>` with `input` as the file named `{}` in `args`.
fn kerf(args: &[&str], input: &str) -> (u8, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("input.yaml");
    std::fs::write(&path, input).expect("write input");
    let path = path.to_str().expect("utf-8 path");
    let argv: Vec<&str> = std::iter::once("kerf")
        .chain(args.iter().map(|a| if *a == "{}" { path } else { a }))
        .collect();
    let cli = Cli::try_parse_from(argv).expect("arguments");
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = match cli.command {
        Command::Validate(args) => kerf::cli::validate::run(&args, &mut stdout, &mut stderr),
        Command::Simulate(args) => kerf::cli::simulate::run(&args, &mut stdout, &mut stderr),
        other => panic!("not a command under test: {other:?}"),
    };
    (
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn validate(input: &str) -> (u8, String, String) {
    kerf(&["validate", "-f", "{}"], input)
}

fn simulate(input: &str) -> (u8, String, String) {
    kerf(&["simulate", "{}"], input)
}

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: NAME
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
";

fn nodepool(name: &str) -> String {
    NODEPOOL.replace("NAME", name)
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: REPLICAS
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          resources: {requests: {cpu: CPU, memory: 1Gi}}
";

fn deployment(replicas: &str, cpu: &str) -> String {
    format!(
        "{}---\n{}",
        nodepool("default"),
        DEPLOYMENT.replace("REPLICAS", replicas).replace("CPU", cpu)
    )
}

#[test]
fn deep_nesting_is_refused_fast_with_the_document_and_line() {
    for (style, text) in [
        ("flow mappings", "{a: ".repeat(200_000)),
        ("flow lists", "[".repeat(200_000)),
        ("block lists", "- ".repeat(200_000)),
    ] {
        let input = format!("{}---\nspec:\n  {text}\n", nodepool("default"));
        let started = Instant::now();
        for command in ["validate", "simulate"] {
            let (code, _, stderr) = if command == "validate" {
                validate(&input)
            } else {
                simulate(&input)
            };
            assert_eq!(code, 2, "{command} {style}: {stderr}");
            assert!(
                stderr.contains("document 2")
                    && stderr.contains("nesting deeper than 64 levels")
                    && stderr.contains("line 13"),
                "{command} {style}: {stderr}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{style}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn syntax_errors_exit_2_with_line_and_column_in_both_commands() {
    let input = format!("{}---\nkind: Pod\nspec: [\n", nodepool("default"));
    for (code, _, stderr) in [validate(&input), simulate(&input)] {
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("document 2") && stderr.contains("line") && stderr.contains("column"),
            "{stderr}"
        );
    }
}

#[test]
fn duplicate_keys_are_unreadable_in_both_commands() {
    let input =
        nodepool("default").replace("  name: default\n", "  name: default\n  name: other\n");
    for (code, _, stderr) in [validate(&input), simulate(&input)] {
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("duplicate field \"name\"") && stderr.contains("line 5 column 3"),
            "{stderr}"
        );
    }
}

#[test]
fn names_that_are_not_dns_subdomains_are_rejected() {
    let (code, stdout, stderr) = validate(&format!("{}---\n{}", nodepool("Foo_1"), nodepool("ok")));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(r#"document 1: NodePool.karpenter.sh "Foo_1" is invalid: metadata.name: Invalid value: "Foo_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"#),
        "{stderr}"
    );
    assert!(
        stdout.contains("name: ok") && !stdout.contains("Foo_1"),
        "{stdout}"
    );
    let long = "a".repeat(254);
    let (code, _, stderr) = validate(&nodepool(&long));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("must be no more than 253 characters"),
        "{stderr}"
    );
    let (code, _, stderr) = validate(&nodepool("").replace("  name: \n", ""));
    assert_eq!(code, 1);
    assert!(stderr.contains("metadata.name: Required value"), "{stderr}");
    let (code, _, stderr) = simulate(&nodepool("a/b"));
    assert_eq!(code, 1);
    assert!(
        stderr.contains(r#"metadata.name: Invalid value: "a/b""#),
        "{stderr}"
    );
}

#[test]
fn a_second_object_of_the_same_kind_and_name_already_exists() {
    let input = format!("{}---\n{}", nodepool("default"), nodepool("default"));
    let (code, stdout, stderr) = validate(&input);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(r#"document 2: nodepools.karpenter.sh "default" already exists (document 1 has the same kind and name)"#),
        "{stderr}"
    );
    assert_eq!(stdout.matches("kind: NodePool").count(), 1, "{stdout}");
    let (code, _, stderr) = simulate(&input);
    assert_eq!(code, 1);
    assert!(stderr.contains("already exists"), "{stderr}");
    // Same name, other kind or namespace: two objects.
    let pods = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: other}\n";
    assert_eq!(validate(pods).0, 0);
}

#[test]
fn input_size_and_object_count_are_bounded_by_flags() {
    let input = format!("{}---\n{}", nodepool("a"), nodepool("b"));
    let (code, _, stderr) = kerf(
        &["validate", "-f", "{}", "--max-input-bytes", "100"],
        &input,
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("larger than 100 bytes (raise the limit with --max-input-bytes)"),
        "{stderr}"
    );
    let (code, _, stderr) = kerf(&["simulate", "{}", "--max-objects", "1"], &input);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(
            "document 2: more than 1 objects in the input (raise the limit with --max-objects)"
        ),
        "{stderr}"
    );
    assert_eq!(
        kerf(&["validate", "-f", "{}", "--max-objects", "2"], &input).0,
        0
    );
}

#[test]
fn replicas_are_refused_before_any_pod_is_made() {
    let started = Instant::now();
    let (code, _, stderr) = simulate(&deployment("1000000000", "1"));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(r#"document 2: Deployment "web": spec.replicas: 1000000000 pods would make 1000000000 in the scenario, more than the limit of 100000 (raise it with --max-pods)"#),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let (code, _, stderr) = kerf(
        &["simulate", "{}", "--max-pods", "20"],
        &deployment("21", "1"),
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("more than the limit of 20"), "{stderr}");
    assert_eq!(
        kerf(
            &["simulate", "{}", "--max-pods", "20"],
            &deployment("20", "1")
        )
        .0,
        0
    );

    let (code, _, stderr) = simulate(&deployment("-3", "1"));
    assert_eq!(code, 1);
    assert!(
        stderr.contains(r#"Deployment.apps "web" is invalid: spec.replicas: Invalid value: -3: must be greater than or equal to 0"#),
        "{stderr}"
    );
    let (code, _, stderr) = simulate(&deployment("\"3\"", "1"));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("spec.replicas in body must be of type integer"),
        "{stderr}"
    );
}

#[test]
fn negative_resources_are_refused_with_their_field() {
    let (code, _, stderr) = simulate(&deployment("2", "-1"));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(r#"spec.template.spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0"#),
        "{stderr}"
    );
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, resources: {limits: {memory: -1Gi}}}]\n";
    let (code, _, stderr) = simulate(&format!("{}---\n{pod}", nodepool("default")));
    assert_eq!(code, 1);
    assert!(
        stderr.contains(r#"spec.containers[0].resources.limits[memory]: Invalid value: "-1Gi""#),
        "{stderr}"
    );
}

fn timeline(spec: &str) -> String {
    format!(
        "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {spec}\n---\n{}",
        deployment("2", "1")
    )
}

#[test]
fn timelines_are_bounded_in_length_events_and_scale() {
    let started = Instant::now();
    let (code, _, stderr) = simulate(&timeline("{duration: 100000h}"));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("spec.duration: 100000h is longer than the limit of 744h00m (raise it with --max-duration)"),
        "{stderr}"
    );
    let (code, _, stderr) = simulate(&timeline(
        "{duration: 2h, events: [{at: 1000000000h, scale: {deployment: web, replicas: 1}}]}",
    ));
    assert_eq!(code, 1);
    assert!(stderr.contains("spec.events[0].at"), "{stderr}");
    let (code, _, stderr) = kerf(
        &["simulate", "{}", "--max-duration", "1h"],
        &timeline("{duration: 2h}"),
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("longer than the limit of 1h00m"),
        "{stderr}"
    );
    let events = "[{at: 1m, scale: {deployment: web, replicas: 1}}, {at: 2m, scale: {deployment: web, replicas: 2}}]";
    let (code, _, stderr) = kerf(
        &["simulate", "{}", "--max-events", "1"],
        &timeline(&format!("{{duration: 1h, events: {events}}}")),
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains(
            "spec.events: 2 events, more than the limit of 1 (raise it with --max-events)"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = simulate(&timeline(
        "{duration: 1h, events: [{at: 1m, scale: {deployment: web, replicas: 1000000000}}]}",
    ));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("spec.events: scaling default/web to 1000000000 replicas makes 1000000000 pods, more than the limit of 100000 (raise it with --max-pods)"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// A date-time that is not one, with a multi-byte character where a digit belongs, is an invalid value:
/// never a panic (the date-time parser is the schema checker's).
#[test]
fn a_broken_date_time_is_an_error_not_a_panic() {
    let input = format!(
        "{}status:\n  conditions:\n    - {{type: Ready, status: \"True\", reason: R, message: m, lastTransitionTime: \"aé12345\"}}\n",
        nodepool("default")
    );
    let (code, _, stderr) = validate(&input);
    assert!(code <= 1, "{code}: {stderr}");
}
