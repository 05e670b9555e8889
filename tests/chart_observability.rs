//! The chart's alerts (`templates/prometheusrule.yaml`) and Grafana dashboard (`dashboards/kerf.json`) read only
//! metrics `kerf controller` publishes: a renamed or misspelt metric would otherwise leave an alert that never
//! fires and a panel that stays empty. Read from the files' text; the e2e chart test renders them with helm.

use std::collections::BTreeSet;

const RULES: &str = include_str!("../charts/kerf/templates/prometheusrule.yaml");
const DASHBOARD: &str = include_str!("../charts/kerf/dashboards/kerf.json");
const METRICS_DOC: &str = include_str!("../docs/metrics.md");

/// The metric names a text mentions (`karpenter_…`, `kerf_…`, `operator_…`).
fn mentioned(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = ["karpenter_", "kerf_", "operator_"]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[at + name.len().max(1)..];
        // A word that merely starts the same way (`kerf_dashboard`) is not preceded by a query's characters; a
        // metric name ends with a selector, a bracket, a space or a closing parenthesis, and is long.
        if name.matches('_').count() >= 2 {
            names.insert(name);
        }
    }
    names
}

/// The metrics docs/metrics.md documents (its unit test, `controllers::metrics::documented`, holds the controller
/// to them), by the names a query uses: a histogram's series are `x_bucket`, `x_sum` and `x_count`. The registry
/// itself cannot say: a labelled family without samples encodes nothing, in kerf as in client_golang.
fn published() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for name in mentioned(METRICS_DOC) {
        for suffix in ["bucket", "sum", "count"] {
            names.insert(format!("{name}_{suffix}"));
        }
        names.insert(name);
    }
    names
}

#[test]
fn alerts_and_dashboard_read_only_published_metrics() {
    let published = published();
    for (file, text) in [
        ("prometheusrule.yaml", RULES),
        ("dashboards/kerf.json", DASHBOARD),
    ] {
        let mentioned = mentioned(text);
        assert!(mentioned.len() >= 8, "{file}: {mentioned:?}");
        let unknown: Vec<&String> = mentioned.difference(&published).collect();
        assert!(
            unknown.is_empty(),
            "{file} reads metrics kerf does not publish: {unknown:?}"
        );
    }
}

#[test]
fn the_dashboard_is_grafana_json_with_a_datasource_variable() {
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("JSON");
    assert_eq!(dashboard["uid"], "kerf-overview");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        assert_eq!(panel["datasource"]["uid"], "${datasource}");
    }
}
