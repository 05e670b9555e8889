//! Every metric Karpenter v1.14 documents under `karpenter_*` and `operator_*`
//! (aws/karpenter-provider-aws website/content/en/v1.14/reference/metrics.md), with the type and label names
//! of its definition in kubernetes-sigs/karpenter, the AWS provider and awslabs/operatorpkg; and the test that
//! kerf's `/metrics` text has each with exactly those label names.

mod feed;
mod table;

use super::nodes::well_known_label_names;
use super::*;
use feed::feed;
use std::collections::{BTreeMap, BTreeSet};
use table::{documented, Type, NODE};

/// For each family of the text (its `# TYPE` name), its type and the label names of its samples (`le` and
/// `quantile` aside).
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a type line");
            let before = families.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
            assert!(before.is_none(), "{name} is registered twice");
            current = Some(name.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let family = current.as_ref().expect("a sample after its TYPE line");
        let Some(open) = line.find('{') else { continue };
        let close = line.rfind('}').expect("closed labels");
        let names: Vec<String> = line[open + 1..close]
            .split("\",")
            .filter_map(|pair| {
                pair.split_once('=')
                    .map(|(n, _)| n.trim_start_matches(',').to_owned())
            })
            .filter(|n| n != "le" && n != "quantile")
            .collect();
        families.get_mut(family).expect("known").1.extend(names);
    }
    families
}

#[test]
fn every_documented_metric_has_karpenters_type_and_label_names() {
    let metrics = Metrics::new();
    feed(&metrics);
    let text = metrics.encode().expect("encodable");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let found = families(&text);
    let node_labels: Vec<String> = well_known_label_names()
        .into_iter()
        .map(|(_, name)| name)
        .chain(["node_name", "phase", "managed"].map(str::to_owned))
        .collect();
    let list = documented();
    assert_eq!(
        list.len(),
        101,
        "the v1.14 page's karpenter_* and operator_* metrics"
    );
    let mut problems = Vec::new();
    for (name, kind, label_names) in list {
        let (family, expected_type) = match kind {
            Type::Counter => (
                name.strip_suffix("_total")
                    .expect("a counter name")
                    .to_owned(),
                "counter",
            ),
            Type::Gauge => (name.clone(), "gauge"),
            Type::Histogram => (name.clone(), "histogram"),
            Type::Summary => (name.clone(), "summary"),
        };
        let expected: BTreeSet<String> = label_names
            .into_iter()
            .flat_map(|n| {
                if n == NODE {
                    node_labels.clone()
                } else {
                    vec![n]
                }
            })
            .collect();
        match found.get(&family) {
            None => problems.push(format!("{name}: missing")),
            Some((t, _)) if t != expected_type => {
                problems.push(format!("{name}: type {t}, not {expected_type}"))
            }
            Some((_, labels)) if *labels != expected => {
                problems.push(format!("{name}: labels {labels:?}, not {expected:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}\n\n{text}", problems.join("\n"));
}

#[test]
fn histograms_have_karpenters_buckets() {
    let metrics = Metrics::new();
    feed(&metrics);
    let text = metrics.encode().expect("encodable");
    let bounds = |family: &str| -> Vec<String> {
        let prefix = format!("{family}_bucket{{");
        let mut seen: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let le = line
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("le");
            if !seen.iter().any(|s| s == le) {
                seen.push(le.to_owned());
            }
        }
        seen
    };
    let expect = |family: &str, values: &[f64]| {
        let mut expected: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        expected.push("+Inf".to_owned());
        assert_eq!(bounds(family), expected, "{family}");
    };
    expect(
        "karpenter_scheduler_scheduling_duration_seconds",
        &buckets::DURATION,
    );
    expect("karpenter_pods_bound_duration_seconds", &buckets::DURATION);
    expect(
        "karpenter_interruption_message_queue_duration_seconds",
        &buckets::DURATION,
    );
    expect(
        "karpenter_cloudprovider_duration_seconds",
        &buckets::DEFAULT,
    );
    expect(
        "karpenter_nodes_lifetime_duration_seconds",
        &buckets::NODE_LIFETIME,
    );
    expect(
        "karpenter_consolidation_score",
        &buckets::CONSOLIDATION_SCORE,
    );
    expect(
        "karpenter_cloudprovider_batcher_batch_size",
        &buckets::BATCH_SIZE,
    );
    expect(
        "operator_ec2nodeclass_status_condition_transition_seconds",
        &buckets::DEFAULT,
    );
    expect(
        "operator_status_condition_transition_seconds",
        &buckets::DEFAULT,
    );
    let exponential = |start: f64, n: i32| (0..n).map(|i| start * 2f64.powi(i)).collect::<Vec<_>>();
    expect(
        "karpenter_nodeclaims_termination_duration_seconds",
        &exponential(1.0, 12),
    );
    expect(
        "karpenter_nodeclaims_instance_termination_duration_seconds",
        &exponential(1.0, 11),
    );
    expect(
        "operator_nodeclaim_status_condition_transition_seconds",
        &exponential(0.5, 15),
    );
    expect(
        "operator_node_termination_duration_seconds",
        &exponential(0.5, 15),
    );
}
