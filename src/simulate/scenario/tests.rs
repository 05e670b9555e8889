use super::*;

const SCENARIO: &str = r#"
apiVersion: kerf.sh/v1alpha1
kind: Simulation
metadata: {name: s}
spec:
  schedulerConfig:
    podTopologySpread:
      defaultConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: default}
spec:
  selector: {app: api}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: pause}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: api-job, namespace: default}
spec:
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c, image: pause}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: lone, namespace: default}
spec:
  template:
    metadata: {labels: {app: lone}}
    spec: {containers: [{name: c, image: pause}]}
"#;

/// Pods made from a workload carry the controller reference a cluster's would (a Deployment's through its
/// ReplicaSet), and the scenario's Services and workloads deduce their default spread selector from it.
#[test]
fn workload_pods_are_owned_as_in_a_cluster_and_deduce_their_default_spread() {
    let scenario = load(SCENARIO).expect("scenario");
    assert_eq!(scenario.services.len(), 1);
    assert!(scenario.ignored.is_empty(), "{:?}", scenario.ignored);
    let pods = scenario.every_pod();
    let pod = |name: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pod {name}"))
    };
    let owner = |name: &str| {
        let owners = pod(name)
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default();
        assert_eq!(owners.len(), 1, "{name}: {owners:?}");
        let o = &owners[0];
        (
            o.api_version.clone(),
            o.kind.clone(),
            o.name.clone(),
            o.controller,
        )
    };
    assert_eq!(
        owner("web-1"),
        (
            "apps/v1".into(),
            "ReplicaSet".into(),
            "web-rs".into(),
            Some(true)
        )
    );
    assert_eq!(
        owner("api-job-0"),
        (
            "batch/v1".into(),
            "Job".into(),
            "api-job".into(),
            Some(true)
        )
    );
    let spread = scenario.default_spread().expect("default spread");
    let selector = |name: &str| {
        spread
            .selector(pod(name))
            .map(|s| serde_json::to_value(s).expect("selector"))
    };
    assert_eq!(
        selector("web-0"),
        Some(json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}))
    );
    // A Job gives no selector; the Service that selects the pod does.
    assert_eq!(
        selector("api-job-0"),
        Some(json!({"matchLabels": {"app": "api"}}))
    );
    assert_eq!(selector("lone-0"), None);

    // Without the setting nothing is defaulted; a misspelt or invalid one is refused, naming the field.
    let unset = Scenario {
        settings: SimulationSettings::default(),
        ..scenario.clone()
    };
    assert!(!unset.default_spread().expect("no setting").is_active());
    assert!(load(&SCENARIO.replace("  schedulerConfig:", "  schedulerConfigs:")).is_err());
    let refused = load(&SCENARIO.replace("maxSkew: 1", "maxSkew: -1"))
        .expect_err("refused")
        .to_string();
    assert!(
        refused.contains("spec.schedulerConfig: podTopologySpread.defaultConstraints[0].maxSkew"),
        "{refused}"
    );
}
