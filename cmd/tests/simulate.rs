//! The example scenarios through `kerf simulate`'s engine: what a user sees for each, pinned down.

mod support;

use kerf::catalog::{Catalog, CatalogSettings, Pricing};
use kerf::simulate::{load, Report, Scenario, Simulation, TimelineRun};
use serde_json::Value;
use support::catalog;

/// An example scenario, loaded.
fn example(name: &str) -> Scenario {
    let text =
        std::fs::read_to_string(format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR")))
            .expect("example");
    load(&text).expect("valid scenario")
}

fn simulate(example_name: &str, catalog: &Catalog) -> Report {
    let scenario = example(example_name);
    let simulation =
        Simulation::new(&scenario, std::sync::Arc::new(catalog.clone())).expect("simulation");
    simulation.report(&simulation.solve().expect("decide"), 0.0)
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
        "/../examples/mistakes.yaml"
    ))
    .expect("example");
    let err = load(&text).expect_err("invalid").to_string();
    assert!(
        err.contains("invalid cron") && err.contains("spots"),
        "{err}"
    );
}

/// Set to regenerate the golden reports instead of comparing with them.
const UPDATE_GOLDEN: &str = "KERF_UPDATE_GOLDEN";

/// Every example's JSON report (without `solveSeconds`) equals the checked-in one under tests/golden/.
/// `KERF_UPDATE_GOLDEN=1 cargo test -p kerf-cmd --test simulate golden` rewrites them after an intended change.
#[test]
fn golden_reports_of_the_examples() {
    let catalog = catalog();
    let mut differ = Vec::new();
    for example in [
        "inflate",
        "advice",
        "spot-fallback",
        "gpu",
        "zonal-spread",
        "existing-cluster",
    ] {
        let report = simulate(&format!("{example}.yaml"), &catalog);
        let mut json = serde_json::to_value(&report).expect("json");
        if let Some(Value::Object(summary)) = json.get_mut("summary") {
            summary.remove("solveSeconds");
        }
        let text = serde_json::to_string_pretty(&json).expect("json") + "\n";
        let path = format!("{}/tests/golden/{example}.json", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os(UPDATE_GOLDEN).is_some() {
            std::fs::write(&path, &text).expect("write golden file");
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}; run with {UPDATE_GOLDEN}=1 to create it"));
        // Compared as JSON, not as text: a workspace test build may keep serde_json maps in insertion order (the
        // AWS SDK's test utilities turn on `preserve_order`), which changes the key order but not the report.
        let expected: Value = serde_json::from_str(&golden).unwrap_or(Value::Null);
        if expected != json {
            differ.push(format!("{example}: expected {path}\n{golden}\ngot\n{text}"));
        }
    }
    assert!(
        differ.is_empty(),
        "reports differ from tests/golden (set {UPDATE_GOLDEN}=1 to accept):\n{}",
        differ.join("\n")
    );
}

/// A workload's pending replicas share their template in the solve (`Scenario::replicas`); the report is the
/// one the same pods as Pod objects of their own get, for every example and a mix of request shapes,
/// spreads and affinities.
#[test]
fn replicas_sharing_their_template_are_reported_as_pods_of_their_own() {
    let catalog = std::sync::Arc::new(catalog());
    let mut scenarios: Vec<(String, Scenario)> =
        std::fs::read_dir(format!("{}/../examples", env!("CARGO_MANIFEST_DIR")))
            .expect("examples")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            // `mistakes.yaml` shows the errors of an invalid scenario.
            .filter_map(|path| {
                let text = std::fs::read_to_string(&path).expect("example");
                Some((path.display().to_string(), load(&text).ok()?))
            })
            .collect();
    scenarios.push(("a mix".to_owned(), load(MIX).expect("valid scenario")));
    let mut shared = 0;
    for (name, scenario) in scenarios {
        shared += scenario.replicas.len();
        let mut each = scenario.clone();
        each.pods = scenario.every_pod();
        each.replicas.clear();
        let report = |scenario: &Scenario| {
            let simulation = Simulation::new(scenario, catalog.clone()).expect("simulation");
            let mut json =
                serde_json::to_value(simulation.report(&simulation.solve().expect("decide"), 0.0))
                    .expect("json");
            json["summary"]["solveSeconds"] = Value::Null;
            json
        };
        assert_eq!(report(&scenario), report(&each), "{name}");
    }
    assert!(shared >= 10, "the examples share {shared} templates");
}

/// Workloads of several request shapes, with zonal and hostname spreads, self-affinity and anti-affinity,
/// between two lone pods.
const MIX: &str = include_str!("scenarios/workload-mix.yaml");

#[test]
fn the_existing_cluster_fills_existing_capacity_first_and_echoes_the_seed() {
    let report = simulate("existing-cluster.yaml", &catalog());
    assert_eq!(
        report.summary.unschedulable, 0,
        "{:?}",
        report.unschedulable
    );
    let on: Vec<(&str, usize)> = report
        .existing_nodes
        .iter()
        .map(|n| (n.name.as_str(), n.pods.len()))
        .collect();
    // The kerf node has 3.92 CPUs: 0.2 for the running agent and 2 for the old api pods leave room for three
    // 500m pods; the in-flight m5.large keeps 0.2 for the agent it will run and takes the other three. The
    // tainted system node takes none; the 2-CPU workers need a new node.
    assert_eq!(on, [("ip-10-0-1-10.ec2.internal", 3), ("default-q9m4t", 3)]);
    assert_eq!(report.summary.node_claims, 1);
    assert_eq!(report.node_claims[0].pods.len(), 2);
    assert_eq!(report.seed, None);
    assert_eq!(simulate("spot-fallback.yaml", &catalog()).seed, Some(7));
}

/// Volume topology (examples/volumes.yaml): a claim bound to a zonal volume puts the node in the volume's zone, an
/// unbound claim of a WaitForFirstConsumer class in one of the class's `allowedTopologies`, an ephemeral volume
/// without a class in the default class's; a pod whose claim does not exist is reported with Karpenter's reason.
#[test]
fn volumes_decide_the_zone_and_a_missing_claim_is_reported() {
    let scenario = example("volumes.yaml");
    assert!(scenario.ignored.is_empty(), "{:?}", scenario.ignored);
    assert_eq!(
        (
            scenario.persistent_volumes.len(),
            scenario.persistent_volume_claims.len(),
            scenario.storage_classes.len()
        ),
        (1, 2, 2)
    );
    let report = simulate("volumes.yaml", &catalog());
    let zone_of = |pod: &str| {
        report
            .node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p == pod))
            .and_then(|c| c.zone.clone())
    };
    assert_eq!(
        zone_of("shop/db").as_deref(),
        Some("us-east-1c"),
        "{report:?}"
    );
    assert_eq!(
        zone_of("shop/worker").as_deref(),
        Some("us-east-1b"),
        "{report:?}"
    );
    assert_eq!(
        zone_of("shop/cache").as_deref(),
        Some("us-east-1a"),
        "{report:?}"
    );
    assert_eq!(
        (
            report.summary.pods,
            report.summary.scheduled,
            report.summary.unschedulable
        ),
        (4, 3, 1)
    );
    assert_eq!(report.unschedulable[0].pod, "shop/orphan");
    assert_eq!(
        report.unschedulable[0].reason,
        "getting persistent volume claim, persistentvolumeclaims \"reports\" not found"
    );

    // The binary prints the same.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/volumes.yaml"
    ))
    .expect("example");
    let (code, stdout, stderr) = kerf_simulate(&text);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "shop/orphan: getting persistent volume claim, persistentvolumeclaims \"reports\" not found"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("ignored"), "{stdout}");
}

/// A claim bound to a volume that the scenario does not hold, and an unbound claim whose class does not exist or
/// binds at once, are refused as Karpenter refuses them; two StorageClasses of one name are one too many.
#[test]
fn volume_mistakes_are_reported_per_pod() {
    let scenario = load(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: now}
provisioner: ebs.csi.aws.com
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: gone-volume}
spec: {volumeName: pv-gone, accessModes: ["ReadWriteOnce"], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: no-class}
spec: {storageClassName: gold, accessModes: ["ReadWriteOnce"], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: immediate}
spec: {storageClassName: now, accessModes: ["ReadWriteOnce"], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: a}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: gone-volume}}]
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: no-class}}]
---
apiVersion: v1
kind: Pod
metadata: {name: c}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: immediate}}]
"#,
    )
    .expect("valid scenario");
    let catalog = catalog();
    let simulation = Simulation::new(&scenario, std::sync::Arc::new(catalog)).expect("simulation");
    let report = simulation.report(&simulation.solve().expect("decide"), 0.0);
    let reasons: Vec<(&str, &str)> = report
        .unschedulable
        .iter()
        .map(|u| (u.pod.as_str(), u.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("default/a", "failed to validate pvc, persistentvolumes \"pv-gone\" not found (PersistentVolumeClaim=default/gone-volume)"),
            ("default/b", "failed to validate pvc, failed to get storage class, storageclasses.storage.k8s.io \"gold\" not found (PersistentVolumeClaim=default/no-class)"),
            ("default/c", "failed to validate pvc, pvc with immediate volume binding mode must be bound (PersistentVolumeClaim=default/immediate, StorageClass=now)"),
        ]
    );

    let twice = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\nprovisioner: a\n---\n\
                 apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3, namespace: elsewhere}\nprovisioner: b\n";
    let error = load(twice).expect_err("refused").to_string();
    assert!(
        error.contains("storageclasses.storage.k8s.io \"gp3\" already exists"),
        "{error}"
    );
}

/// `kerf simulate` on `scenario` (a file in a fresh directory): exit code, stdout, stderr.
fn kerf_simulate(scenario: &str) -> (i32, String, String) {
    kerf_simulate_with(scenario, &[])
}

fn kerf_simulate_with(scenario: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, scenario).expect("write scenario");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("simulate")
        .arg(&path)
        .args(args)
        .output()
        .expect("run kerf simulate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn large_scenarios_show_progress_on_stderr_and_small_ones_stay_quiet() {
    let inflate = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/inflate.yaml"
    ))
    .expect("example");
    assert!(inflate.contains("replicas: 10\n"), "the example changed");

    let (code, stdout, stderr) = kerf_simulate(&inflate);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("10 pods"), "{stdout}");
    assert!(!stderr.contains("simulating"), "{stderr}");
    // The README's first command prices its choice out of the box (the shipped on-demand snapshot): the
    // cheapest type that fits, not an unpriced one.
    assert!(
        stdout.contains("1 NodeClaim to launch, $0.6120/h")
            && stdout.contains("c6a.4xlarge on-demand"),
        "{stdout}"
    );
    assert!(!stdout.contains("price unknown"), "{stdout}");

    let large = inflate.replace("replicas: 10\n", "replicas: 1500\n");
    let (code, stdout, stderr) = kerf_simulate(&large);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("1500 pods"), "{stdout}");
    assert!(
        stderr.contains("simulating 1500 pending pods") && stderr.contains("solved 1500 pods in"),
        "{stderr}"
    );
}

/// A timeline example's JSON report, as `kerf simulate -o json` prints it.
fn timeline_json(example_name: &str, catalog: &Catalog) -> String {
    timeline_json_of(&example(example_name), catalog)
}

/// The actions of a report's timeline entries, in order.
fn actions(report: &Value) -> Vec<&str> {
    report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect()
}

/// [`timeline_json`] of a loaded scenario.
fn timeline_json_of(scenario: &Scenario, catalog: &Catalog) -> String {
    timeline_json_with(scenario, catalog, false)
}

/// [`timeline_json_of`], going through every minute in full if `every_minute`.
fn timeline_json_with(scenario: &Scenario, catalog: &Catalog, every_minute: bool) -> String {
    let simulation =
        Simulation::new(scenario, std::sync::Arc::new(catalog.clone())).expect("simulation");
    let mut report = simulation.report(&simulation.solve().expect("decide"), 0.0);
    report.summary.solve_seconds = None;
    let timeline = scenario.timeline.as_ref().expect("a timeline example");
    report.timeline = Some(
        TimelineRun::new(scenario, timeline, catalog)
            .map(|run| {
                if every_minute {
                    run.every_minute()
                } else {
                    run
                }
            })
            .and_then(TimelineRun::run)
            .expect("run"),
    );
    serde_json::to_string_pretty(&report).expect("json") + "\n"
}

/// Six hours of a cluster with every clock-driven fact a disruption pass reads: `consolidateAfter` off the
/// minute grid, short `expireAfter`s, a budget window that freezes disruption for 20 minutes every hour, pods
/// whose do-not-disrupt lasts 47 minutes, a WhenEmpty pool, and workloads scaled up and down.
const CLOCKWORK: &str = "\
apiVersion: kerf.sh/v1alpha1
kind: Simulation
spec:
  duration: 6h
  events:
    - {at: 20m, scale: {deployment: web, replicas: 3}}
    - {at: 1h5m, scale: {deployment: web, replicas: 14}}
    - {at: 2h30m, scale: {deployment: batch, replicas: 0}}
    - {at: 3h30m, scale: {deployment: batch, replicas: 6}}
    - {at: 4h45m, scale: {deployment: web, replicas: 5}}
    - {at: 5h20m, scale: {deployment: web, replicas: 1}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 2h30m
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
        - {key: karpenter.k8s.aws/instance-size, operator: In, values: [large, xlarge, 2xlarge]}
  disruption:
    consolidateAfter: 7m30s
    budgets:
      - {nodes: \"0\", schedule: \"15 * * * *\", duration: 20m}
      - {nodes: \"50%\"}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: batch}
spec:
  template:
    metadata: {labels: {pool: batch}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 5h30m
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 11m
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 9
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {karpenter.sh/do-not-disrupt: 47m}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: web}}
      containers:
        - {name: c, image: pause, resources: {requests: {cpu: 1500m, memory: 2Gi}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: batch, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: batch}}
  template:
    metadata: {labels: {app: batch}}
    spec:
      nodeSelector: {pool: batch}
      containers:
        - {name: c, image: pause, resources: {requests: {cpu: \"3\", memory: 4Gi}}}
";

/// Skipping quiet minutes changes nothing: the timeline examples whose minutes it skips, and [`CLOCKWORK`],
/// report the same bytes as runs that go through every minute. (The CapacityBuffer and zonal-shift examples
/// keep every minute while their features are in play; the node-repair one shows a repair in between.)
#[test]
fn skipping_quiet_minutes_reports_what_running_every_minute_does() {
    let catalog = catalog();
    let mut scenarios: Vec<(String, Scenario)> = [
        "timeline-consolidation",
        "timeline-maintenance-window",
        "timeline-drift",
        "timeline-node-repair",
    ]
    .iter()
    .map(|name| (name.to_string(), example(&format!("{name}.yaml"))))
    .collect();
    scenarios.push(("clockwork".into(), load(CLOCKWORK).expect("valid scenario")));
    for (name, scenario) in &scenarios {
        let skipping = timeline_json_of(scenario, &catalog);
        let every_minute = timeline_json_with(scenario, &catalog, true);
        assert_eq!(skipping, every_minute, "{name}");
    }
    let clockwork: Value =
        serde_json::from_str(&timeline_json_of(&scenarios[4].1, &catalog)).expect("json");
    let actions: std::collections::BTreeSet<&str> = actions(&clockwork).into_iter().collect();
    // The run exercises what it is meant to: launches, emptiness and expiration, and the frozen window, which
    // lets emptiness go on exactly when it closes (a revisit between minutes the run skips); the nodes its
    // do-not-disrupt pods and WhenEmpty pool keep say why.
    assert_eq!(
        actions,
        ["blocked", "disrupt", "kept", "launch", "scale"].into(),
        "{clockwork}"
    );
    let entries = clockwork["timeline"].as_array().expect("timeline");
    let at = |action: &str, reason: &str| -> Vec<&str> {
        entries
            .iter()
            .filter(|e| e["action"] == action && e["reason"] == reason)
            .filter_map(|e| e["time"].as_str())
            .collect()
    };
    assert!(at("blocked", "Empty").contains(&"2026-01-05T00:28:00Z"));
    assert_eq!(at("disrupt", "Empty")[0], "2026-01-05T00:35:00Z");
    assert!(at("disrupt", "Expired").contains(&"2026-01-05T02:30:00Z"));
}

/// Each timeline example gives the same bytes twice and equals its golden report; the reports show what the
/// examples are about.
#[test]
fn timeline_examples_are_reproducible_and_golden() {
    let catalog = catalog();
    for example in [
        "timeline-consolidation",
        "timeline-maintenance-window",
        "timeline-drift",
        "timeline-node-repair",
        "timeline-node-overlay",
        "timeline-capacity-buffer",
        "timeline-zonal-shift",
    ] {
        let first = timeline_json(&format!("{example}.yaml"), &catalog);
        let second = timeline_json(&format!("{example}.yaml"), &catalog);
        assert_eq!(first, second, "{example} is not reproducible");
        let path = format!("{}/tests/golden/{example}.json", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os(UPDATE_GOLDEN).is_some() {
            std::fs::write(&path, &first).expect("write golden file");
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}; run with {UPDATE_GOLDEN}=1 to create it"));
        assert_eq!(golden, first, "{example} differs from {path}");
    }
    let window: Value =
        serde_json::from_str(&timeline_json("timeline-maintenance-window.yaml", &catalog))
            .expect("json");
    let entries = window["timeline"].as_array().expect("timeline");
    let blocked = entries
        .iter()
        .find(|e| e["action"] == "blocked")
        .expect("a blocked entry");
    assert_eq!(blocked["until"], "2026-01-05T17:00:00Z");
    let disrupt = entries
        .iter()
        .find(|e| e["action"] == "disrupt")
        .expect("a disruption");
    assert_eq!(disrupt["reason"], "Underutilized");
    assert_eq!(
        disrupt["time"], "2026-01-05T17:00:00Z",
        "not before the window closes"
    );
    let consolidation: Value =
        serde_json::from_str(&timeline_json("timeline-consolidation.yaml", &catalog))
            .expect("json");
    let actions = actions(&consolidation);
    assert_eq!(
        actions,
        [
            "launch", "kept", "scale", "disrupt", "launch", "kept", "interrupt", "launch", "kept"
        ],
        "the scale-down consolidates, the interruption is replaced, and each node kept says why once"
    );
    let kept = consolidation["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|e| e["action"] == "kept")
        .expect("a kept entry");
    assert_eq!(kept["reason"], "Unconsolidatable");
    assert_eq!(
        kept["detail"],
        "default-1: Can't replace with a cheaper node"
    );
    assert_eq!(consolidation["totals"]["pendingAtEnd"], 0);
    let drift: Value =
        serde_json::from_str(&timeline_json("timeline-drift.yaml", &catalog)).expect("json");
    let reasons: Vec<&Value> = drift["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["action"] == "disrupt")
        .map(|e| &e["reason"])
        .collect();
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| *r == "Drifted"),
        "{reasons:?}"
    );
    let repair: Value =
        serde_json::from_str(&timeline_json("timeline-node-repair.yaml", &catalog)).expect("json");
    let lines: Vec<String> = repair["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["action"] == "repair")
        .map(|e| {
            format!(
                "{} {}",
                e["at"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(repair["totals"]["repairs"], 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("0h50m default-2 replaced: its Node reported Ready"),
        "{lines:#?}"
    );
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.starts_with("1h30m") && l.ends_with("unhealthy in the nodepool")),
        "the zone-wide fault is held back: {lines:#?}"
    );
    assert_eq!(repair["totals"]["nodesAtEnd"], 3);
}

#[test]
fn timeline_mistakes_name_the_field() {
    let simulation = |spec: &str| {
        load(&format!(
            "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {spec}\n"
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    assert!(simulation("{duration: soon}").contains("spec.duration"));
    assert!(
        simulation("{events: [{at: 1h, scale: {deployment: a, replicas: 1}}]}")
            .contains("spec.events")
    );
    assert!(
        simulation("{duration: 2h, events: [{at: 3h, scale: {deployment: a, replicas: 1}}]}")
            .contains("spec.events[0].at")
    );
    assert!(simulation(
        "{duration: 2h, events: [{at: 1h, interrupt: {zone: a, instanceType: b}}]}"
    )
    .contains("spec.events[0].interrupt"));
    assert!(
        simulation("{duration: 2h, events: [{at: 1h, apply: {apiVersion: v1, kind: Pod}}]}")
            .contains("spec.events[0].apply")
    );
}

/// The binary's JSON for a timeline is the same bytes on every run (no wall-clock solve time in it), and an
/// interruption by NodeClaim name empties the node and gets its pods a new one.
#[test]
fn kerf_simulate_prints_the_same_timeline_json_every_time() {
    let inflate = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/inflate.yaml"
    ))
    .expect("example");
    let scenario = format!(
        "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec:\n  seed: 3\n  duration: 20m\n  events:\n    - {{at: 10m, interrupt: {{nodeClaim: default-1}}}}\n---\n{inflate}"
    );
    let first = kerf_simulate_with(&scenario, &["-o", "json"]);
    let second = kerf_simulate_with(&scenario, &["-o", "json"]);
    assert_eq!(first.0, 0, "{}", first.2);
    assert_eq!(first.1, second.1, "two runs differ");
    assert!(!first.1.contains("solveSeconds"), "{}", first.1);
    let report: Value = serde_json::from_str(&first.1).expect("json");
    assert_eq!(
        actions(&report),
        ["launch", "kept", "interrupt", "launch", "kept"]
    );
    assert_eq!(report["totals"]["nodesAtEnd"], 1);

    let existing = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/existing-cluster.yaml"
    ))
    .expect("example");
    // A timeline starts from the scenario's cluster: its two nodes and bound pods are there from the start, and
    // the pending pods that do not fit on them get one new node.
    let (code, stdout, stderr) = kerf_simulate_with(
        &format!(
            "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nspec: {{duration: 1h}}\n---\n{existing}"
        ),
        &["-o", "json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["totals"]["launches"], 1, "{stdout}");
    assert_eq!(report["totals"]["nodesAtEnd"], 3, "{stdout}");
    assert_eq!(report["totals"]["pendingAtEnd"], 0, "{stdout}");
}

/// NodeOverlays in `kerf simulate` (examples/node-overlay.yaml): with the gate the overlaid m5 type is chosen over
/// the c5 type the list prices favour, at the adjusted price; without it the overlay is listed as left out and the
/// list prices decide.
#[test]
fn a_node_overlay_changes_the_type_chosen_only_with_its_gate() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/node-overlay.yaml"
    ))
    .expect("example");
    let run = |text: &str| {
        let scenario = load(text).expect("valid scenario");
        let simulation =
            Simulation::new(&scenario, std::sync::Arc::new(catalog())).expect("simulation");
        (
            scenario.ignored.clone(),
            simulation.report(&simulation.solve().expect("decide"), 0.0),
        )
    };
    let (ignored, with) = run(&text);
    assert!(ignored.is_empty(), "{ignored:?}");
    let chosen = with.node_claims[0]
        .instance_type
        .clone()
        .unwrap_or_default();
    assert!(chosen.starts_with("m5."), "{chosen}");
    let off = text.replace("nodeOverlay: true", "nodeOverlay: false");
    let (ignored, without) = run(&off);
    assert_eq!(
        ignored,
        ["NodeOverlay/m5-savings-plan (the NodeOverlay feature gate is off)"]
    );
    let chosen_off = without.node_claims[0]
        .instance_type
        .clone()
        .unwrap_or_default();
    assert!(chosen_off.starts_with("c5."), "{chosen_off}");
    let cost = |r: &Report| r.summary.cost_per_hour.expect("priced");
    assert!(
        cost(&with) < cost(&without),
        "{} vs {}",
        cost(&with),
        cost(&without)
    );
}

/// A NodeOverlay applied mid-run (examples/timeline-node-overlay.yaml): consolidation replaces the c5 node the list
/// prices chose with the m5 node the overlay makes cheaper, and the cost follows the overlaid price. Without the gate
/// the applied overlay is reported as left out and nothing is disrupted.
#[test]
fn a_node_overlay_applied_mid_run_moves_consolidation() {
    let catalog = catalog();
    let with: Value =
        serde_json::from_str(&timeline_json("timeline-node-overlay.yaml", &catalog)).expect("json");
    let entries = with["timeline"].as_array().expect("timeline");
    let launched: Vec<&str> = entries
        .iter()
        .filter(|e| e["action"] == "launch")
        .filter_map(|e| e["detail"].as_str()?.split(' ').nth(1))
        .collect();
    assert_eq!(launched.len(), 2, "{entries:?}");
    assert!(
        launched[0].starts_with("c5.") && launched[1].starts_with("m5."),
        "{launched:?}"
    );
    assert!(
        entries.iter().any(|e| e["action"] == "disrupt"),
        "{entries:?}"
    );

    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/timeline-node-overlay.yaml"
    ))
    .expect("example")
    .replace("nodeOverlay: true", "nodeOverlay: false");
    let without: Value = serde_json::from_str(&timeline_json_of(
        &load(&text).expect("valid scenario"),
        &catalog,
    ))
    .expect("json");
    let entries = without["timeline"].as_array().expect("timeline");
    assert!(
        !entries.iter().any(|e| e["action"] == "disrupt"),
        "{entries:?}"
    );
    assert!(
        entries.iter().any(|e| e["detail"]
            .as_str()
            .is_some_and(|m| m.contains("left out: the NodeOverlay feature gate is off"))),
        "{entries:?}"
    );
}

/// An ARC zonal shift in a timeline (examples/timeline-zonal-shift.yaml; Karpenter's AWS zonal shift): the NodePool
/// hears of it when it begins and ends, nothing is launched in the shifted zone while it lasts, a node deleted there
/// keeps its instance (and its cost) until it ends; a run without `enableZonalShift` refuses the event.
#[test]
fn a_zonal_shift_keeps_launches_out_of_the_zone_while_it_lasts() {
    let catalog = catalog();
    let with: Value =
        serde_json::from_str(&timeline_json("timeline-zonal-shift.yaml", &catalog)).expect("json");
    let entries = with["timeline"].as_array().expect("timeline");
    let within_shift = |e: &&Value| {
        let at = e["at"].as_str().unwrap_or_default();
        ("0h30m"..="1h29m").contains(&at)
    };
    let launches_in_shift: Vec<&str> = entries
        .iter()
        .filter(within_shift)
        .filter(|e| e["action"] == "launch")
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert!(!launches_in_shift.is_empty(), "{entries:#?}");
    assert!(
        launches_in_shift.iter().all(|d| d.contains("us-east-1b")),
        "{launches_in_shift:?}"
    );
    let reasons: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["action"] == "zonal-shift" && e["nodepool"] == "default")
        .filter_map(|e| Some((e["at"].as_str()?, e["reason"].as_str()?)))
        .collect();
    assert_eq!(
        reasons,
        [
            ("0h30m", "ZonalShiftActive"),
            ("1h30m", "ZonalShiftCleared")
        ],
        "{entries:#?}"
    );
    let held = entries
        .iter()
        .find(|e| {
            e["action"] == "zonal-shift"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("is not terminated while zone us-east-1a"))
        })
        .expect("a deletion in the shifted zone is held");
    let claim = held["nodeClaims"][0].as_str().expect("the claim");
    assert!(
        entries.iter().any(|e| e["at"] == "1h30m"
            && e["nodeClaims"][0] == claim
            && e["detail"]
                .as_str()
                .is_some_and(|d| d.contains("instance terminated"))),
        "{entries:#?}"
    );

    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/timeline-zonal-shift.yaml"
    ))
    .expect("example")
    .replace("enableZonalShift: true", "enableZonalShift: false");
    let refused = load(&text).expect_err("a zonalShift event without enableZonalShift");
    assert!(
        refused
            .to_string()
            .contains("spec.events[0].zonalShift: needs spec.enableZonalShift: true"),
        "{refused}"
    );
}

/// A CapacityBuffer in a timeline (examples/timeline-capacity-buffer.yaml, Karpenter's active buffer): 50% of web's
/// four pods is two chunks of headroom launched with them; when web scales to eight the headroom grows to four, and
/// the new web pods are placed at once (on the headroom's room) while more capacity is launched for the buffer. The
/// virtual pods are never reported pending at the end, and without the gate the buffer is left out.
#[test]
fn a_capacity_buffer_keeps_headroom_through_a_scale_up() {
    let catalog = catalog();
    let with: Value =
        serde_json::from_str(&timeline_json("timeline-capacity-buffer.yaml", &catalog))
            .expect("json");
    let entries = with["timeline"].as_array().expect("timeline");
    let launches = |before: &str| {
        entries
            .iter()
            .filter(|e| e["action"] == "launch" && e["at"].as_str() < Some(before))
            .count()
    };
    // c5.xlarge: 4 CPUs, 3 pods of 1 CPU each after overhead: 4 web + 2 headroom need 2 nodes at the start.
    assert_eq!(launches("1h00m"), 2, "{entries:#?}");
    assert!(
        launches("2h00m") > 2,
        "the buffer grows with web: {entries:#?}"
    );
    assert_eq!(with["totals"]["pendingAtEnd"], 0, "{:#?}", with["totals"]);

    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/timeline-capacity-buffer.yaml"
    ))
    .expect("example")
    .replace("capacityBuffer: true", "capacityBuffer: false");
    let scenario = load(&text).expect("valid scenario");
    assert_eq!(
        scenario.ignored,
        ["CapacityBuffer/web-headroom (the CapacityBuffer feature gate is off)"]
    );
    let without: Value =
        serde_json::from_str(&timeline_json_of(&scenario, &catalog)).expect("json");
    let started = without["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["action"] == "launch" && e["at"] == "0h00m")
        .count();
    assert_eq!(started, 2, "four web pods alone: {without:#?}");
}
