use super::*;
use serde_json::json;

const ZONE: &str = "topology.kubernetes.io/zone";

fn config(text: &str) -> SchedulerConfig {
    SchedulerConfig::parse(text).expect("a valid scheduler config")
}

fn zone_default() -> DefaultSpread {
    DefaultSpread::new(&config(&format!(
        "podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule}}]}}"
    )))
}

fn pod(metadata: Value, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "pause"}]);
    serde_json::from_value(json!({"metadata": metadata, "spec": spec})).expect("a pod")
}

fn owned_by(api_version: &str, kind: &str, name: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": format!("{name}-uid"),
            "controller": true}])
}

fn replica_set(name: &str, selector: Value) -> ReplicaSet {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                                  "spec": {"selector": selector}}))
    .expect("a ReplicaSet")
}

fn service(namespace: &str, selector: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": "svc", "namespace": namespace},
                                  "spec": {"selector": selector}}))
    .expect("a Service")
}

fn spreads(pod: &Pod) -> Vec<TopologySpreadConstraint> {
    pod.spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.clone())
        .unwrap_or_default()
}

/// Karpenter's options suite, `SchedulerConfiguration › ParseSchedulerConfiguration`: each document, and
/// whether it is accepted (`Ok(n)`: with n constraints) or refused (with text of the message).
#[test]
fn parse_follows_karpenters_scheduler_configuration_cases() {
    let zone = |extra: &str| {
        format!("podTopologySpread:\n  defaultConstraints:\n  - {{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway{extra}}}\n")
    };
    let cases: Vec<(&str, String, Result<usize, &str>)> = vec![
        ("should return a nil configuration for an empty value", String::new(), Ok(0)),
        ("(blank, as an unset chart value renders)", "  \n".to_owned(), Ok(0)),
        (
            "should parse a valid podTopologySpread.defaultConstraints document",
            format!("podTopologySpread:\n  defaultConstraints:\n  - maxSkew: 1\n    topologyKey: {ZONE}\n    whenUnsatisfiable: ScheduleAnyway\n  - maxSkew: 3\n    topologyKey: kubernetes.io/hostname\n    whenUnsatisfiable: DoNotSchedule\n"),
            Ok(2),
        ),
        (
            "should parse an equivalent JSON document",
            format!(r#"{{"podTopologySpread":{{"defaultConstraints":[{{"maxSkew":1,"topologyKey":"{ZONE}","whenUnsatisfiable":"ScheduleAnyway"}}]}}}}"#),
            Ok(1),
        ),
        ("should fail fast on an unknown field", format!("{}notARealField: true\n", zone("")), Err("notARealField")),
        ("(an unknown field inside a constraint)", zone(", maxskew: 2"), Err("maxskew")),
        ("should fail on malformed YAML", "podTopologySpread: {".to_owned(), Err("decoding")),
        (
            "should reject a non-positive maxSkew",
            format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 0, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}]}}"),
            Err("defaultConstraints[0].maxSkew: 0 must be greater than 0"),
        ),
        (
            "should reject a missing topologyKey",
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}]}".to_owned(),
            Err("defaultConstraints[0].topologyKey: must be set"),
        ),
        ("should reject a labelSelector", zone(", labelSelector: {matchLabels: {app: test}}"), Err("labelSelector: must not be set")),
        ("should reject matchLabelKeys", zone(", matchLabelKeys: [pod-template-hash]"), Err("matchLabelKeys: must not be set")),
        (
            "should reject a topologyKey that isn't a valid label name",
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: not a valid label name, whenUnsatisfiable: ScheduleAnyway}]}".to_owned(),
            Err("topologyKey: \"not a valid label name\" is not a valid label key"),
        ),
        (
            "should reject a duplicated topologyKey and whenUnsatisfiable pair",
            format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}, {{maxSkew: 3, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}]}}"),
            Err("defaultConstraints[1] repeats [0]"),
        ),
        (
            "should allow the same topologyKey with a different whenUnsatisfiable",
            format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway}}, {{maxSkew: 3, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule}}]}}"),
            Ok(2),
        ),
        (
            "should reject an invalid whenUnsatisfiable",
            format!("podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: Sometimes}}]}}"),
            Err("whenUnsatisfiable: \"Sometimes\" must be DoNotSchedule or ScheduleAnyway"),
        ),
        ("(a null labelSelector is no selector)", zone(", labelSelector: null"), Ok(1)),
        ("(minDomains is carried, with ScheduleAnyway too)", zone(", minDomains: 3"), Ok(1)),
        ("(kerf: minDomains as the pod API allows it)", zone(", minDomains: 0"), Err("minDomains: 0 must be greater than 0")),
        ("(kerf: the node policies as the pod API allows them)", zone(", nodeTaintsPolicy: honor"), Err("nodeTaintsPolicy: \"honor\" must be Honor or Ignore")),
        ("(no podTopologySpread)", "{}".to_owned(), Ok(0)),
    ];
    for (name, text, want) in cases {
        match (SchedulerConfig::parse(&text), want) {
            (Ok(parsed), Ok(n)) => {
                assert_eq!(parsed.default_constraints.len(), n, "{name}");
            }
            (Err(error), Err(text)) => {
                assert!(error.to_string().contains(text), "{name}: {error}");
            }
            (got, want) => panic!("{name}: got {got:?}, expected {want:?}"),
        }
    }
    let parsed = config(&format!(
        "podTopologySpread: {{defaultConstraints: [{{maxSkew: 2, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule, minDomains: 3, nodeTaintsPolicy: Honor}}]}}"
    ));
    assert_eq!(
        parsed.default_constraints,
        [TopologySpreadConstraint {
            max_skew: 2,
            topology_key: ZONE.to_owned(),
            when_unsatisfiable: "DoNotSchedule".to_owned(),
            min_domains: Some(3),
            node_taints_policy: Some("Honor".to_owned()),
            ..TopologySpreadConstraint::default()
        }]
    );
    // The same document as a value (a Simulation's spec.schedulerConfig).
    let value = json!({"podTopologySpread": {"defaultConstraints": [
        {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "nodeTaintsPolicy": "Honor"}]}});
    assert_eq!(SchedulerConfig::from_value(&value), Ok(parsed));
    assert_eq!(
        SchedulerConfig::from_value(&Value::Null),
        Ok(SchedulerConfig::default())
    );
    assert!(SchedulerConfig::from_value(&json!({"podTopologySpread": {"defaults": []}})).is_err());
}

/// The deduction and the injection, case by case. The cases named after Karpenter's
/// `topology_test.go › Topology › DefaultConstraints` are the decisions those tests rest on; the conformance
/// cases (`cmd/tests/conformance/topology/default-constraints-*.yaml`) run them through a whole solve.
#[test]
fn the_defaults_go_to_pods_that_declare_none_with_the_selector_kube_scheduler_deduces() {
    let test_labels = json!({"test": "test"});
    let mut spread = zone_default();
    spread.add_replica_set(&replica_set(
        "web",
        json!({"matchLabels": {"test": "test"}}),
    ));
    let rs_selector = |labels: &[(&str, &str)]| LabelSelector {
        match_labels: None,
        match_expressions: Some(
            labels
                .iter()
                .map(|(k, v)| LabelSelectorRequirement {
                    key: (*k).to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![(*v).to_owned()]),
                })
                .collect(),
        ),
    };
    struct Case {
        name: &'static str,
        spread: DefaultSpread,
        pod: Pod,
        /// The selector each default carries; `None`: the pod is left as it is.
        want: Option<LabelSelector>,
    }
    let with_service = {
        let mut s = zone_default();
        s.add_service(&service("default", test_labels.clone()));
        s
    };
    let rc_and_service = {
        let mut s = zone_default();
        s.add_service(&service("default", json!({"app": "web"})));
        s.add_replication_controller(
            &serde_json::from_value(json!({"metadata": {"name": "rc", "namespace": "default"},
                                           "spec": {"selector": {"test": "test"}}}))
            .expect("an RC"),
        );
        s
    };
    let revisions = {
        let mut s = zone_default();
        s.add_replica_set(&replica_set(
            "web-old",
            json!({"matchLabels": {"test": "test", "pod-template-hash": "old"}}),
        ));
        s
    };
    let cases = vec![
        Case {
            name: "should apply default zonal spread to a pod that declares no constraints of its own",
            spread: spread.clone(),
            pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}), json!({})),
            want: Some(rs_selector(&[("test", "test")])),
        },
        Case {
            name: "should NOT apply the default to a pod that declares its own constraints",
            spread: spread.clone(),
            pod: pod(
                json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}),
                json!({"topologySpreadConstraints": [{"maxSkew": 3, "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"test": "test"}}}]}),
            ),
            want: None,
        },
        Case {
            name: "should be a no-op when no default constraints are configured",
            spread: DefaultSpread::default(),
            pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web")}), json!({})),
            want: None,
        },
        Case {
            name: "should not apply the default to a pod with no owner and no matching service",
            spread: spread.clone(),
            pod: pod(json!({"name": "p", "labels": test_labels}), json!({})),
            want: None,
        },
        Case {
            name: "should deduce a selector from a matching service for a pod with no supported owner",
            spread: with_service.clone(),
            pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("batch/v1", "Job", "job")}), json!({})),
            want: Some(LabelSelector { match_labels: Some([("test".to_owned(), "test".to_owned())].into()), match_expressions: None }),
        },
        Case {
            name: "should spread each Deployment revision independently (the ReplicaSet's pod-template-hash joins the selector)",
            spread: revisions,
            pod: pod(json!({"name": "p", "labels": {"test": "test", "pod-template-hash": "old"},
                            "ownerReferences": owned_by("apps/v1", "ReplicaSet", "web-old")}), json!({})),
            want: Some(rs_selector(&[("pod-template-hash", "old"), ("test", "test")])),
        },
        Case {
            name: "(a Service of another namespace does not select the pod)",
            spread: {
                let mut s = zone_default();
                s.add_service(&service("other", test_labels.clone()));
                s
            },
            pod: pod(json!({"name": "p", "labels": test_labels}), json!({})),
            want: None,
        },
        Case {
            name: "(a Service whose selector the pod does not match adds nothing)",
            spread: with_service.clone(),
            pod: pod(json!({"name": "p", "labels": {"test": "other"}}), json!({})),
            want: None,
        },
        Case {
            name: "(a ReplicationController's map merges with the Services' labels)",
            spread: rc_and_service,
            pod: pod(json!({"name": "p", "labels": {"test": "test", "app": "web"},
                            "ownerReferences": owned_by("v1", "ReplicationController", "rc")}), json!({})),
            want: Some(LabelSelector {
                match_labels: Some([("app".to_owned(), "web".to_owned()), ("test".to_owned(), "test".to_owned())].into()),
                match_expressions: None,
            }),
        },
        Case {
            name: "(an owner reference that is not the controller, or of another API version, adds nothing)",
            spread: spread.clone(),
            pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"},
                {"apiVersion": "extensions/v1beta1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}), json!({})),
            want: None,
        },
        Case {
            name: "(an owner the driver does not have adds nothing)",
            spread: spread.clone(),
            pod: pod(json!({"name": "p", "labels": test_labels, "ownerReferences": owned_by("apps/v1", "StatefulSet", "web")}), json!({})),
            want: None,
        },
        Case {
            name: "(an empty list of constraints is none: the defaults apply)",
            spread: with_service,
            pod: pod(json!({"name": "p", "labels": test_labels}), json!({"topologySpreadConstraints": []})),
            want: Some(LabelSelector { match_labels: Some([("test".to_owned(), "test".to_owned())].into()), match_expressions: None }),
        },
    ];
    for case in cases {
        let applied = case.spread.apply(&case.pod);
        match case.want {
            None => assert!(matches!(applied, Cow::Borrowed(_)), "{}", case.name),
            Some(selector) => {
                let got = spreads(&applied);
                assert_eq!(got.len(), 1, "{}", case.name);
                assert_eq!(
                    got[0].label_selector.as_ref(),
                    Some(&selector),
                    "{}",
                    case.name
                );
                assert_eq!(got[0].topology_key, ZONE, "{}", case.name);
                assert_eq!(got[0].when_unsatisfiable, "DoNotSchedule", "{}", case.name);
            }
        }
    }
}

/// "should spread each workload independently": two ReplicaSets' pods get different selectors, so their
/// pods form two topology groups; "should carry minDomains through a synthesized default": every field of a
/// configured default reaches the pod.
#[test]
fn each_workload_gets_its_own_selector_and_every_field_of_the_default() {
    let mut spread = DefaultSpread::new(&config(&format!(
        "podTopologySpread: {{defaultConstraints: [{{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: DoNotSchedule, minDomains: 3}}, {{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, nodeAffinityPolicy: Ignore}}]}}"
    )));
    spread.add_replica_set(&replica_set("a", json!({"matchLabels": {"app": "a"}})));
    spread.add_replica_set(&replica_set(
        "b",
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["b"]}]}),
    ));
    let a = pod(
        json!({"name": "a-0", "labels": {"app": "a"}, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "a")}),
        json!({}),
    );
    let b = pod(
        json!({"name": "b-0", "labels": {"app": "b"}, "ownerReferences": owned_by("apps/v1", "ReplicaSet", "b")}),
        json!({}),
    );
    let (a, b) = (spreads(&spread.apply(&a)), spreads(&spread.apply(&b)));
    assert_eq!(a.len(), 2);
    assert_ne!(a[0].label_selector, b[0].label_selector);
    assert_eq!(a[0].min_domains, Some(3));
    assert_eq!(a[1].when_unsatisfiable, "ScheduleAnyway");
    assert_eq!(a[1].node_affinity_policy.as_deref(), Some("Ignore"));
    assert_eq!(a[1].label_selector, a[0].label_selector);
    // The shared value defaults nothing.
    assert!(!DefaultSpread::none().is_active());
    assert!(spread.is_active());
}
