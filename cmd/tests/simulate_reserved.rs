//! `kerf simulate` with reserved capacity (examples/reserved-capacity.yaml): the whole command, as a user runs it.

use serde_json::Value;
use std::path::Path;

/// Runs `kerf simulate <scenario> -o json` and returns its report.
fn report(scenario: &Path) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("simulate")
        .arg(scenario)
        .args(["-o", "json"])
        .output()
        .expect("run kerf simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json report")
}

/// Each planned NodeClaim as `type/capacity-type/zone`.
fn claims(report: &Value) -> Vec<String> {
    report["nodeClaims"]
        .as_array()
        .expect("nodeClaims")
        .iter()
        .map(|c| {
            format!(
                "{}/{}/{}",
                c["instanceType"].as_str().unwrap_or_default(),
                c["capacityType"].as_str().unwrap_or_default(),
                c["zone"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/reserved-capacity.yaml")
}

#[test]
fn the_reservation_is_used_and_the_second_pod_waits_for_it() {
    let report = report(&example());
    assert_eq!(claims(&report), ["m5.large/reserved/us-east-1a"]);
    let waiting = &report["unschedulable"][0];
    assert_eq!(waiting["pod"], "default/web-1");
    assert!(
        waiting["reason"].as_str().is_some_and(|r| r
            .contains("compatible reserved offerings are available, but could not be reserved")),
        "{waiting}"
    );
}

#[test]
fn with_the_reserved_capacity_gate_off_both_pods_go_on_demand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let examples = example().parent().expect("examples").to_owned();
    std::fs::copy(
        examples.join("reserved-capacity-types.json"),
        dir.path().join("reserved-capacity-types.json"),
    )
    .expect("copy types");
    let scenario = std::fs::read_to_string(example())
        .expect("example")
        .replace(
        "  instanceTypes: reserved-capacity-types.json\n",
        "  instanceTypes: reserved-capacity-types.json\n  featureGates: ReservedCapacity=false\n",
    );
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, scenario).expect("write scenario");
    let report = report(&path);
    let claims = claims(&report);
    assert_eq!(claims.len(), 2, "{report}");
    assert!(
        claims.iter().all(|c| c.starts_with("m5.large/on-demand/")),
        "{claims:?}"
    );
    assert_eq!(report["unschedulable"], Value::Array(Vec::new()));
}
