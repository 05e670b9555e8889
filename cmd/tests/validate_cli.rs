//! `kerf validate` as a user runs it: exit codes, errors on stderr, defaults and pod advice on stdout.

use std::process::Command;

fn kerf_validate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("validate")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run kerf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn accepts_the_example_and_prints_its_defaults() {
    let (code, stdout, stderr) = kerf_validate(&["-f", "examples/default.yaml"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("expireAfter: 720h"), "{stdout}");
    assert!(stdout.contains("httpTokens: required"), "{stdout}");
}

#[test]
fn rejects_the_mistakes_with_every_error() {
    let (code, stdout, stderr) = kerf_validate(&["-f", "examples/mistakes.yaml"]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty(), "nothing rejected is printed: {stdout}");
    for expected in [
        r#"NodePool.karpenter.sh "weekend-freeze" is invalid"#,
        r#"Unsupported value: "WhenUnderutilized""#,
        "no valid values found in [spots] for karpenter.sh/capacity-type",
        "invalid cron, beginning of range (6) beyond end of range (0): sat-sun",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in {stderr}"
        );
    }
}

#[test]
fn unreadable_input_exits_2_with_the_location() {
    let (code, _, stderr) = kerf_validate(&["-f", "examples/does-not-exist.yaml"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("examples/does-not-exist.yaml"), "{stderr}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: NodePool\nspec: [\n").expect("write");
    let (code, _, stderr) = kerf_validate(&["-f", bad.to_str().expect("utf-8 path")]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("line") && stderr.contains("column"),
        "{stderr}"
    );
}

#[test]
fn pods_get_the_advice_annotations() {
    let (code, stdout, stderr) = kerf_validate(&["-f", "examples/advice.yaml", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("JSON list");
    let pods: Vec<&serde_json::Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .collect();
    let summary = |i: usize| {
        pods[i]["metadata"]["annotations"]["kerf.sh/instance-summary"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        summary(0).starts_with("1 nodepool; default: "),
        "{}",
        summary(0)
    );
    // Without a pricing file, the shipped on-demand snapshot prices the cheapest offering, as Karpenter's does.
    assert!(
        summary(0).ends_with("cheapest t3a.medium on-demand us-east-1a $0.0376/h"),
        "{}",
        summary(0)
    );
    assert!(
        summary(1).starts_with(
            "no nodepool fits: default: incompatible requirements, key kubernetes.io/arch"
        ),
        "{}",
        summary(1)
    );
}

#[test]
fn pod_advice_follows_the_pods_volumes() {
    // examples/volumes.yaml: the claim bound to a volume in us-east-1c, a WaitForFirstConsumer class allowing
    // us-east-1b, and a claim that does not exist.
    let (code, stdout, stderr) = kerf_validate(&["-f", "examples/volumes.yaml", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("JSON list");
    let summary = |name: &str| {
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|o| o["kind"] == "Pod" && o["metadata"]["name"] == name)
            .and_then(|o| o["metadata"]["annotations"]["kerf.sh/instance-summary"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        summary("db").ends_with("us-east-1c $0.1504/h"),
        "{}",
        summary("db")
    );
    assert!(
        summary("worker").contains(" us-east-1b "),
        "{}",
        summary("worker")
    );
    assert_eq!(
        summary("orphan"),
        "no nodepool fits: default: getting persistent volume claim, persistentvolumeclaims \"reports\" not found"
    );
}
