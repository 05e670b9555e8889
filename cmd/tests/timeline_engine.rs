//! What the shared engine gives `kerf simulate`'s timeline, as the controller has it on a real cluster: full
//! launch labels on nodes, the NodePool template's annotations on nodes, `lastPodEventTime`, nominated
//! destinations, and timelines that start from the scenario's own cluster.

mod support;

use kerf::catalog::Catalog;
use kerf::simulate::{load, TimelineRun};
use serde_json::Value;
use support::{catalog, catalog_with_spot};

const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: R
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {k: v}}]
  securityGroupSelectorTerms: [{tags: {k: v}}]
";

fn pool(extra_template_metadata: &str, disruption: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    metadata: {{{extra_template_metadata}}}
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}
  disruption: {{{disruption}}}
"
    )
}

fn deployment(name: &str, replicas: u32, node_selector: &str) -> String {
    sized(name, replicas, node_selector, "1", "1Gi")
}

fn sized(name: &str, replicas: u32, node_selector: &str, cpu: &str, memory: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{{node_selector}}}
      containers: [{{name: c, image: i, resources: {{requests: {{cpu: '{cpu}', memory: {memory}}}}}}}]
"
    )
}

/// The scenario of a Simulation with `spec` and `docs` (YAML documents after it).
fn scenario(spec: &str, docs: &[&str]) -> kerf::simulate::Scenario {
    let mut text = format!("apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {spec}\n");
    for doc in docs {
        text.push_str("---\n");
        text.push_str(doc);
    }
    load(&text).expect("valid scenario")
}

/// The timeline report of `docs` (YAML documents after the Simulation's own).
fn timeline(spec: &str, docs: &[&str]) -> Value {
    timeline_on(&catalog(), spec, docs)
}

/// The timeline report of `docs` over `catalog`.
fn timeline_on(catalog: &Catalog, spec: &str, docs: &[&str]) -> Value {
    let scenario = scenario(spec, docs);
    let timeline = scenario.timeline.as_ref().expect("a timeline");
    let report = TimelineRun::new(&scenario, timeline, catalog)
        .and_then(TimelineRun::run)
        .expect("run");
    serde_json::to_value(report).expect("json")
}

fn actions(report: &Value) -> Vec<String> {
    report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["action"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// A pod that arrives later and selects labels of the node's instance type and of its kubelet
/// (`karpenter.k8s.aws/instance-category`, `topology.kubernetes.io/region`, `kubernetes.io/os`) binds to the
/// node already there, as on the controller's nodes: kerf's nodes carry every label of their instance type
/// (Karpenter's "should launch nodes with the instance-type labels" in `provisioning/suite_test.go`).
#[test]
fn nodes_carry_every_instance_type_label_so_later_pods_selecting_them_bind() {
    let report = timeline(
        "{duration: 10m, events: [{at: 5m, scale: {deployment: picky, replicas: 1}}]}",
        &[
            &pool("", "consolidateAfter: Never"),
            CLASS,
            &sized("a", 1, "", "200m", "256Mi"),
            &sized(
                "picky",
                0,
                "karpenter.k8s.aws/instance-category: c, topology.kubernetes.io/region: us-east-1, kubernetes.io/os: linux",
                "200m",
            "256Mi",
            ),
        ],
    );
    assert_eq!(
        report["totals"]["pendingAtEnd"],
        0,
        "{:#?}",
        actions(&report)
    );
    assert_eq!(report["totals"]["launches"], 1, "{:#?}", actions(&report));
}

/// `karpenter.sh/do-not-disrupt: "true"` in the NodePool template reaches the node (Karpenter's registration
/// syncs the claim's annotations to the Node), so emptiness leaves the node alone when the pods go.
#[test]
fn the_templates_do_not_disrupt_annotation_protects_its_nodes() {
    let docs = |annotations: &str| {
        timeline(
            "{duration: 30m, events: [{at: 5m, scale: {deployment: a, replicas: 0}}]}",
            &[
                &pool(
                    annotations,
                    "consolidationPolicy: WhenEmpty, consolidateAfter: 1m",
                ),
                CLASS,
                &deployment("a", 2, ""),
            ],
        )
    };
    let plain = docs("");
    assert_eq!(plain["totals"]["disruptions"], 1, "{:#?}", actions(&plain));
    let protected = docs("annotations: {karpenter.sh/do-not-disrupt: 'true'}");
    assert_eq!(
        protected["totals"]["disruptions"],
        0,
        "{:#?}",
        actions(&protected)
    );
    assert_eq!(protected["totals"]["nodesAtEnd"], 1);
}

/// `consolidateAfter` counts from the last pod event: a node whose pods leave at 20m is not empty "for long"
/// because it was initialized at 2m (Karpenter's consolidatable condition on `lastPodEventTime`).
#[test]
fn consolidate_after_counts_from_the_last_pod_event() {
    let report = timeline(
        "{duration: 60m, events: [{at: 20m, scale: {deployment: a, replicas: 0}}]}",
        &[
            &pool("", "consolidationPolicy: WhenEmpty, consolidateAfter: 15m"),
            CLASS,
            &deployment("a", 2, ""),
        ],
    );
    let disrupt = report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|e| e["action"] == "disrupt")
        .unwrap_or_else(|| panic!("no disruption: {:#?}", actions(&report)));
    assert_eq!(disrupt["at"], "0h35m", "{:#?}", actions(&report));
}

const EXISTING: &str = "apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-10.ec2.internal
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: m5.2xlarge
    topology.kubernetes.io/zone: us-east-1a
    karpenter.sh/capacity-type: on-demand
spec: {providerID: 'aws:///us-east-1a/i-0abc'}
status:
  conditions: [{type: Ready, status: 'True'}]
  capacity: {cpu: '8', memory: 32Gi, pods: '58'}
  allocatable: {cpu: 7910m, memory: 30Gi, pods: '58'}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  creationTimestamp: '2026-01-04T00:00:00Z'
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: m5.2xlarge
    topology.kubernetes.io/zone: us-east-1a
    karpenter.sh/capacity-type: on-demand
  annotations: {karpenter.sh/nodepool-hash: '1', karpenter.sh/nodepool-hash-version: kerf-v1}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
status:
  nodeName: ip-10-0-1-10.ec2.internal
  providerID: 'aws:///us-east-1a/i-0abc'
  conditions: [{type: Initialized, status: 'True', lastTransitionTime: '2026-01-04T00:02:00Z', reason: Initialized, message: ''}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, labels: {app: web}}
spec:
  nodeName: ip-10-0-1-10.ec2.internal
  containers: [{name: c, image: i, resources: {requests: {cpu: '1', memory: 1Gi}}}]
status: {phase: Running}
";

/// A timeline starts from the scenario's cluster: its node is taken over with its age and its pod, and a
/// NodePool hash that no longer matches drifts it at once; the replacement takes the pod.
#[test]
fn a_timeline_starts_from_the_scenarios_own_cluster_and_sees_its_drift() {
    let report = timeline(
        "{duration: 20m}",
        &[&pool("", "consolidateAfter: Never"), CLASS, EXISTING],
    );
    let lines = actions(&report);
    assert!(
        lines.first().is_some_and(
            |l| l.starts_with("disrupt Drifted") && l.contains("default-abcde replaced by")
        ),
        "{lines:#?}"
    );
    assert_eq!(report["totals"]["nodesAtEnd"], 1, "{lines:#?}");
    assert_eq!(report["totals"]["pendingAtEnd"], 0);
}

/// A pod bound to a Node the scenario does not hold (deleted just before a snapshot) waits for a new node.
#[test]
fn a_pod_bound_to_an_unknown_node_waits_for_a_node() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: lost, namespace: default}\nspec: {nodeName: nowhere, containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}\n";
    let report = timeline(
        "{duration: 5m}",
        &[&pool("", "consolidateAfter: Never"), CLASS, pod],
    );
    assert_eq!(report["totals"]["launches"], 1, "{:#?}", actions(&report));
    assert_eq!(report["totals"]["pendingAtEnd"], 0);
}

/// A snapshot's Deployment (`kerf.sh/pods-listed`) is not made again from its replicas; scaling it removes
/// its pods from their node (which then goes empty and is removed) and adds new ones from its template.
#[test]
fn a_snapshots_deployment_scales_its_listed_pods() {
    let web = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, annotations: {kerf.sh/pods-listed: 'true'}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: i, resources: {requests: {cpu: '1', memory: 1Gi}}}]
";
    let existing = EXISTING
        .replace(
            "karpenter.sh/nodepool-hash: '1'",
            "karpenter.sh/nodepool-hash: 'x'",
        )
        .replace(
            "karpenter.sh/nodepool-hash-version: kerf-v1",
            "karpenter.sh/nodepool-hash-version: other",
        );
    let report = timeline(
        "{duration: 30m, events: [{at: 5m, scale: {deployment: web, replicas: 0}}, {at: 20m, scale: {deployment: web, replicas: 2}}]}",
        &[
            &pool("", "consolidationPolicy: WhenEmpty, consolidateAfter: 1m"),
            CLASS,
            &existing,
            web,
        ],
    );
    let lines = actions(&report);
    assert!(
        lines
            .iter()
            .any(|l| l == "scale default/web: 1 → 0 replicas"),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("disrupt Empty") && l.contains("default-abcde")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "scale default/web: 0 → 2 replicas"),
        "{lines:#?}"
    );
    assert_eq!(report["totals"]["pendingAtEnd"], 0, "{lines:#?}");
}

/// The first planned claim's instance type (and how many pods stayed unschedulable) of a one-solve simulation.
fn solve_once(spec: &str, docs: &[&str]) -> (Option<String>, usize) {
    let scenario = scenario(spec, docs);
    let catalog = catalog();
    let simulation = kerf::simulate::Simulation::new(&scenario, std::sync::Arc::new(catalog))
        .expect("simulation");
    let decisions = simulation.solve().expect("decide");
    (
        decisions
            .claims
            .first()
            .and_then(|c| c.choice.as_ref())
            .map(|c| c.instance_type.clone()),
        decisions.unschedulable.len(),
    )
}

/// A pod of 1 CPU whose `nodeAffinity` is `affinity` (YAML indented for its place).
fn with_node_affinity(affinity: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: default}}
spec:
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1', memory: 1Gi}}}}}}]
  affinity:
    nodeAffinity:
      {affinity}
"
    )
}

/// Karpenter's `--preference-policy=Ignore`: a pod's preferred node affinity no longer steers the choice, so the
/// cheapest type is launched instead of the preferred family.
#[test]
fn the_preference_policy_ignore_leaves_preferences_out() {
    let prefers = &with_node_affinity(
        "preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 1, preference: {matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]}}",
    );
    let pool = pool("", "consolidateAfter: Never");
    let (respected, _) = solve_once("{}", &[&pool, CLASS, prefers]);
    let (ignored, _) = solve_once("{preferencePolicy: Ignore}", &[&pool, CLASS, prefers]);
    assert!(
        respected.as_deref().is_some_and(|t| t.starts_with("m5.")),
        "{respected:?}"
    );
    assert!(
        ignored.as_deref().is_some_and(|t| !t.starts_with("m5.")),
        "{ignored:?}"
    );
}

/// Karpenter's `MIN_VALUES_POLICY=BestEffort`: a NodePool asking for more distinct families than fit the pod
/// launches with the ones there are instead of leaving the pod pending.
#[test]
fn the_min_values_policy_best_effort_relaxes_min_values() {
    let pool = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5], minValues: 3}
";
    // The pod allows two of the three families.
    let pods = &with_node_affinity(
        "requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5]}]}]",
    );
    let (strict, unschedulable) = solve_once("{}", &[pool, CLASS, pods]);
    assert_eq!((strict, unschedulable), (None, 1));
    let (relaxed, unschedulable) =
        solve_once("{minValuesPolicy: BestEffort}", &[pool, CLASS, pods]);
    assert!(relaxed.is_some() && unschedulable == 0, "{relaxed:?}");
}

#[test]
fn an_unknown_policy_names_its_field() {
    let text =
        "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {preferencePolicy: Sometimes}\n";
    let error = load(text).expect_err("refused").to_string();
    assert!(
        error.contains("spec.preferencePolicy") && error.contains("Respect or Ignore"),
        "{error}"
    );
}

/// Drift of the EC2NodeClass as the controller judges it: a changed field the hash covers (user data) or a
/// selector that picks other subnets replaces the nodes; the same class applied again does not.
#[test]
fn node_class_changes_drift_as_the_controller_judges_them() {
    let applied = |spec: serde_json::Value| {
        let class = serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": spec,
        });
        timeline(
            &format!("{{duration: 30m, events: [{{at: 10m, apply: {class}}}]}}"),
            &[
                &pool("", "consolidateAfter: Never"),
                CLASS,
                &deployment("a", 1, ""),
            ],
        )
    };
    let base = serde_json::json!({
        "role": "R",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"k": "v"}}],
        "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
    });
    let disruptions = |report: &Value| report["totals"]["disruptions"].as_u64().unwrap_or(0);
    assert_eq!(disruptions(&applied(base.clone())), 0, "the same class");
    let mut user_data = base.clone();
    user_data["userData"] = serde_json::json!("echo hi");
    assert!(disruptions(&applied(user_data)) > 0, "user data");
    let mut subnets = base;
    subnets["subnetSelectorTerms"] = serde_json::json!([{"tags": {"k": "w"}}]);
    assert!(disruptions(&applied(subnets)) > 0, "other subnets");
}

/// `spec.featureGates` switches spot-to-spot consolidation on as `--feature-gates` does for the controller: a spot
/// node left with one small pod is replaced by a cheaper spot node only with the gate on (Karpenter's
/// consolidation suite: "cannot replace spot with spot if the spotToSpotConsolidation is disabled", and with it
/// on, "spot to spot consolidation should order the instance types by price before enforcing minimum
/// flexibility"). The map form takes the chart's camelCase names.
#[test]
fn the_spot_to_spot_gate_lets_consolidation_replace_spot_nodes() {
    let spot_pool = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}
";
    let catalog = catalog_with_spot(0.3);
    let run = |gates: &str| {
        timeline_on(
            &catalog,
            &format!(
                "{{duration: 30m, {gates} events: [{{at: 5m, scale: {{deployment: a, replicas: 1}}}}]}}"
            ),
            &[spot_pool, CLASS, &deployment("a", 12, "")],
        )
    };
    let off = run("");
    assert_eq!(off["totals"]["disruptions"], 0, "{:#?}", actions(&off));
    for gates in [
        "featureGates: SpotToSpotConsolidation=true,",
        "featureGates: {spotToSpotConsolidation: true},",
    ] {
        let on = run(gates);
        let lines = actions(&on);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("disrupt Underutilized") && l.contains("replaced by")),
            "{gates}: {lines:#?}"
        );
        assert!(
            on["totals"]["cost"].as_f64() < off["totals"]["cost"].as_f64(),
            "{gates}: {} vs {}",
            on["totals"]["cost"],
            off["totals"]["cost"]
        );
    }
    let text = "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {featureGates: {capacityBuffers: true}}\n";
    let error = load(text).expect_err("refused").to_string();
    assert!(
        error.contains("spec.featureGates") && error.contains("capacityBuffers"),
        "{error}"
    );
}

/// Node repair in the timeline (the `NodeRepair` gate), as Karpenter's node health suite describes it: a node
/// whose Node reports `Ready=False` is replaced once the AWS policy's 30 minutes have passed ("should delete nodes
/// that are unhealthy by the cloud provider", "should not delete node when health duration is not reached"),
/// whatever its `do-not-disrupt` annotation and a budget of zero say ("should ignore do-not-disrupt on a node",
/// "should ignore node disruption budgets"); its pods get a new node. Without the gate nothing is repaired.
#[test]
fn node_repair_replaces_a_node_unhealthy_past_its_toleration() {
    let docs = [
        &pool(
            "annotations: {karpenter.sh/do-not-disrupt: 'true'}",
            "consolidateAfter: Never, budgets: [{nodes: '0'}]",
        ),
        CLASS,
        &deployment("a", 1, ""),
    ];
    let events = "events: [{at: 10m, unhealthy: {nodeClaim: default-1}}]";
    let on = timeline(
        &format!("{{duration: 1h, featureGates: NodeRepair=true, {events}}}"),
        &docs,
    );
    let lines = actions(&on);
    let repair = on["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|e| e["action"] == "repair")
        .unwrap_or_else(|| panic!("no repair: {lines:#?}"));
    assert_eq!(repair["at"], "0h40m", "{lines:#?}");
    assert_eq!(repair["nodeClaims"][0], "default-1", "{lines:#?}");
    assert_eq!(repair["reason"], "Unhealthy");
    assert!(
        lines
            .iter()
            .any(|l| l == "unhealthy default-1: Ready=False"),
        "{lines:#?}"
    );
    assert_eq!(on["totals"]["repairs"], 1, "{lines:#?}");
    assert_eq!(on["totals"]["launches"], 2, "a replacement: {lines:#?}");
    assert_eq!(on["totals"]["pendingAtEnd"], 0, "{lines:#?}");

    let off = timeline(&format!("{{duration: 1h, {events}}}"), &docs);
    assert!(
        !actions(&off).iter().any(|l| l.starts_with("repair")),
        "{:#?}",
        actions(&off)
    );
    assert_eq!(off["totals"]["launches"], 1);
    assert!(off["totals"].get("repairs").is_none(), "left out when none");
}

/// "should ignore unhealthy nodes if more then 20% of the nodes are unhealthy in a nodepool": two nodes of two
/// unhealthy are held back (and said so once each), not replaced.
#[test]
fn node_repair_holds_back_when_most_of_a_pool_is_unhealthy() {
    let one_per_node = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidateAfter: Never}
";
    let report = timeline(
        "{duration: 2h, featureGates: NodeRepair=true, events: [{at: 10m, unhealthy: {instanceType: m5.xlarge, condition: KernelReady}}]}",
        &[one_per_node, CLASS, &sized("a", 2, "", "3", "1Gi")],
    );
    let lines = actions(&report);
    let held: Vec<&String> = lines.iter().filter(|l| l.starts_with("repair")).collect();
    assert_eq!(held.len(), 2, "{lines:#?}");
    assert!(
        held.iter()
            .all(|l| l.ends_with("not repaired: more than 20% nodes are unhealthy in the nodepool")),
        "{lines:#?}"
    );
    assert!(report["totals"].get("repairs").is_none(), "{lines:#?}");
    assert_eq!(report["totals"]["nodesAtEnd"], 2, "{lines:#?}");
}

#[test]
fn an_unhealthy_event_names_its_nodes_and_a_real_status() {
    for (event, want) in [
        ("{at: 1m, unhealthy: {}}", "name exactly one of nodeClaim"),
        (
            "{at: 1m, unhealthy: {zone: a, status: Sick}}",
            "spec.events[0].unhealthy.status",
        ),
        (
            "{at: 1m, unhealthy: {zone: a, condition: ' '}}",
            "spec.events[0].unhealthy.condition",
        ),
        (
            "{at: 1m, unhealthy: {zone: a, colour: red}}",
            "unknown field",
        ),
    ] {
        let text = format!(
            "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {{duration: 1h, events: [{event}]}}\n---\n{}---\n{CLASS}",
            pool("", "consolidateAfter: Never")
        );
        let error = load(&text).expect_err(event).to_string();
        assert!(error.contains(want), "{event}: {error}");
    }
}

/// A static pool of 3 (the `StaticCapacity` gate; Karpenter's static provisioning suite, "should create
/// nodeclaims when current node count is less than desired replicas", and its deprovisioning and static drift
/// suites): 3 nodes from the template alone with no pods at all; an interrupted node is made again; a template
/// change replaces every node one for one (drift), so the pool never drops below 3 nodes; lowering replicas to 1
/// removes two. Without the gate the pool launches nothing and the timeline says why.
#[test]
fn a_static_pool_keeps_its_replicas_through_a_deletion_and_a_template_change() {
    let static_pool = |replicas: u32, team: &str| {
        format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: fixed}}
spec:
  replicas: {replicas}
  template:
    metadata: {{labels: {{team: {team}}}}}
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
  disruption: {{budgets: [{{nodes: '1'}}]}}
"
        )
    };
    let indent = |text: &str| {
        text.lines()
            .map(|l| format!("        {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let events = format!(
        "events:\n  - {{at: 10m, interrupt: {{nodeClaim: fixed-2}}}}\n  - at: 30m\n    apply:\n{}\n  - at: 2h\n    apply:\n{}",
        indent(&static_pool(3, "b")),
        indent(&static_pool(1, "b")),
    );
    let spec = |gates: &str| {
        format!(
            "\n  duration: 3h\n  {gates}\n  {}",
            events.replace('\n', "\n  ")
        )
    };
    let on = timeline(
        &spec("featureGates: StaticCapacity=true"),
        &[&static_pool(3, "a"), CLASS],
    );
    let lines = actions(&on);
    let launches: Vec<&String> = lines.iter().filter(|l| l.starts_with("launch")).collect();
    // 3 at the start, 1 for the interrupted node, 3 drift replacements.
    assert_eq!(launches.len(), 7, "{lines:#?}");
    assert!(
        launches.iter().all(|l| l.contains("m5.large")),
        "{lines:#?}"
    );
    let drifts = lines
        .iter()
        .filter(|l| l.starts_with("disrupt Drifted"))
        .count();
    assert_eq!(drifts, 3, "{lines:#?}");
    let removed = lines
        .iter()
        .filter(|l| l.starts_with("replicas") && l.contains("above its 1 replicas"))
        .count();
    assert_eq!(removed, 2, "{lines:#?}");
    assert_eq!(on["totals"]["nodesAtEnd"], 1, "{lines:#?}");
    // Never below 3 nodes between the first minute and the scale-down, but for the interrupted one's minute.
    for hour in &on["costByHour"].as_array().expect("hours")[..2] {
        assert!(hour["nodes"].as_u64() >= Some(3), "{hour}");
    }

    let off = timeline(&spec(""), &[&static_pool(3, "a"), CLASS]);
    let lines = actions(&off);
    assert_eq!(off["totals"]["launches"], 0, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l
                .ends_with("spec.replicas does nothing without the StaticCapacity feature gate")),
        "{lines:#?}"
    );
}
