//! The example scenarios through `kerf simulate`'s engine: what a user sees for each, pinned down.

use kerf::catalog::{Catalog, CatalogSettings, Pricing};
use kerf::scheduling::{PodInfo, Scheduler};
use kerf::simulate::{load, Report};

/// us-east-1 with the on-demand prices of the shared reference data (read, not copied into the repository).
fn catalog() -> Catalog {
    let prices = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/ec2-on-demand-prices.json"
    ))
    .expect("../shared/data/ec2-on-demand-prices.json beside the checkout");
    Catalog::embedded(
        "us-east-1",
        &CatalogSettings::default(),
        &Pricing::from_json(&prices).expect("pricing"),
    )
    .expect("catalog")
}

fn simulate(example: &str, catalog: &Catalog) -> Report {
    let text =
        std::fs::read_to_string(format!("{}/examples/{example}", env!("CARGO_MANIFEST_DIR")))
            .expect("example");
    let scenario = load(&text).expect("valid scenario");
    let pods: Vec<PodInfo> = scenario
        .pods
        .iter()
        .map(|p| PodInfo::from_pod(p).expect("pod"))
        .collect();
    let plan = Scheduler::new(&scenario.nodepools, catalog).solve(&pods);
    Report::new(pods.len(), &plan, 0.0)
}

#[test]
fn inflate_packs_ten_pods_onto_one_cheap_node() {
    let report = simulate("inflate.yaml", &catalog());
    assert_eq!(
        (
            report.summary.pods,
            report.summary.scheduled,
            report.summary.node_claims
        ),
        (10, 10, 1)
    );
    let claim = &report.node_claims[0];
    assert_eq!(claim.name, "default-1");
    assert_eq!(claim.instance_type.as_deref(), Some("c6a.4xlarge"));
    assert_eq!(claim.capacity_type.as_deref(), Some("on-demand"));
    assert_eq!(report.summary.cost_per_hour, Some(0.612));
    assert_eq!(claim.pods.len(), 10);
}

#[test]
fn advice_example_reports_the_arm_pod_as_unschedulable() {
    let report = simulate("advice.yaml", &catalog());
    assert_eq!(report.summary.unschedulable, 1);
    assert_eq!(report.unschedulable[0].pod, "default/arm-only");
    assert!(
        report.unschedulable[0]
            .reason
            .contains("requires In [arm64]"),
        "{}",
        report.unschedulable[0].reason
    );
    assert!(
        report.text().contains(
            "unschedulable:\n  default/arm-only: nodepool default: incompatible requirements"
        ),
        "{}",
        report.text()
    );
}

#[test]
fn without_prices_the_report_says_so() {
    let catalog = Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
        .expect("catalog");
    let report = simulate("inflate.yaml", &catalog);
    assert_eq!(report.summary.cost_per_hour, None);
    assert!(report.text().contains("cost unknown"), "{}", report.text());
    let json = serde_json::to_value(&report).expect("json");
    for field in [
        "pods",
        "scheduled",
        "unschedulable",
        "nodeClaims",
        "costPerHour",
        "solveSeconds",
    ] {
        assert!(
            json["summary"].get(field).is_some(),
            "summary.{field} missing: {json}"
        );
    }
    assert!(json["existingNodes"].is_array());
}

#[test]
fn invalid_scenarios_are_refused_with_every_error() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mistakes.yaml"
    ))
    .expect("example");
    let err = load(&text).expect_err("invalid").to_string();
    assert!(
        err.contains("invalid cron") && err.contains("spots"),
        "{err}"
    );
}
