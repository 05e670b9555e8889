//! Karpenter's own scheduling and provisioning test suites, case by case, through the whole `kerf simulate`
//! command: each file under `tests/conformance/<suite>/` is one upstream `It(...)` told as a scenario, with what
//! Karpenter expects of it. The format is in `tests/conformance/README.md`.
//!
//! A case marked `differs` is one where kerf does not (yet) decide as Karpenter does: the test asserts that its
//! expectation still fails, so a fix that makes it pass must remove the mark. A case marked `deliberate`
//! states kerf's own (documented) decision instead of Karpenter's.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The first document of a case file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    kind: String,
    /// `file › Describe › … › It`, as upstream names it.
    upstream: String,
    expect: Expect,
    /// Why kerf does not decide as Karpenter does here (yet): the expectation must fail.
    #[serde(default)]
    differs: Option<String>,
    /// Why kerf decides otherwise on purpose (docs/scheduling.md): the expectation is kerf's.
    #[serde(default)]
    deliberate: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expect {
    /// How many NodeClaims are launched.
    node_claims: Option<usize>,
    /// Pods (`namespace/name`, or `name` in `default`) that get a node, new or existing; `all` for every pod.
    scheduled: Option<Pods>,
    /// Pods that get none; `all` for every pod.
    unschedulable: Option<Pods>,
    /// For a pod, labels the node it lands on must carry.
    #[serde(default)]
    labels: BTreeMap<String, BTreeMap<String, String>>,
    /// For a pod, label keys the node it lands on must carry (any value).
    #[serde(default)]
    has_labels: BTreeMap<String, Vec<String>>,
    /// For a pod, label keys the node it lands on must not carry.
    #[serde(default)]
    absent_labels: BTreeMap<String, Vec<String>>,
    /// For a pod, label values the node it lands on must not carry (key → values).
    #[serde(default)]
    not_labels: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Groups of pods that share one node.
    #[serde(default)]
    same_node: Vec<Vec<String>>,
    /// Groups of pods no two of which share a node (pods left unplaced are not counted).
    #[serde(default)]
    distinct_nodes: Vec<Vec<String>>,
    /// Pods placed onto an existing node (or in-flight NodeClaim), by its name.
    #[serde(default)]
    on_existing: BTreeMap<String, String>,
    /// Pods matching `selector` counted per value of `key` over the nodes they are on (existing pods
    /// included), as Karpenter's `ExpectSkew`: the counts in any order.
    #[serde(default)]
    skew: Vec<Skew>,
    /// For an unschedulable pod, text its reason contains.
    #[serde(default)]
    reasons: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Pods {
    All(String),
    Some(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Skew {
    key: String,
    #[serde(default)]
    selector: BTreeMap<String, String>,
    counts: Vec<usize>,
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// Every case file, by suite folder then name.
fn case_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for suite in std::fs::read_dir(cases_dir()).expect("tests/conformance") {
        let suite = suite.expect("entry").path();
        if !suite.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&suite).expect("suite folder") {
            let file = file.expect("entry").path();
            if file.extension().is_some_and(|e| e == "yaml") {
                files.push(file);
            }
        }
    }
    files.sort();
    files
}

/// The case header and the scenario text (the documents after it).
fn split(text: &str) -> (Case, String) {
    let mut docs = text.splitn(2, "\n---\n");
    let header = docs.next().unwrap_or_default();
    let case: Case = serde_yaml::from_str(header).expect("case header");
    assert_eq!(case.kind, "Case", "the first document is the Case");
    (case, docs.next().unwrap_or_default().to_owned())
}

/// A pod name as the report writes it.
fn key(pod: &str) -> String {
    if pod.contains('/') {
        pod.to_owned()
    } else {
        format!("default/{pod}")
    }
}

/// What the scenario says of its pods and nodes, for the expectations that look at them.
#[derive(Default)]
struct World {
    /// Every pod (pending and bound, workloads' replicas included) with its labels.
    pod_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Pods bound to a node in the scenario.
    bound: BTreeMap<String, String>,
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
}

fn labels_of(meta: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(meta["labels"].clone()).unwrap_or_default()
}

fn world(scenario: &str) -> World {
    let mut world = World::default();
    for doc in serde_yaml::Deserializer::from_str(scenario) {
        let Ok(value) = Value::deserialize(doc) else {
            continue;
        };
        let namespace = value["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = value["metadata"]["name"].as_str().unwrap_or_default();
        match value["kind"].as_str() {
            Some("Pod") => {
                let pod = format!("{namespace}/{name}");
                world
                    .pod_labels
                    .insert(pod.clone(), labels_of(&value["metadata"]));
                if let Some(node) = value["spec"]["nodeName"].as_str() {
                    world.bound.insert(pod, node.to_owned());
                }
            }
            Some("Deployment" | "StatefulSet" | "ReplicaSet" | "Job") => {
                let replicas = value["spec"]["replicas"]
                    .as_u64()
                    .or_else(|| value["spec"]["parallelism"].as_u64())
                    .unwrap_or(1);
                let labels = labels_of(&value["spec"]["template"]["metadata"]);
                for i in 0..replicas {
                    world
                        .pod_labels
                        .insert(format!("{namespace}/{name}-{i}"), labels.clone());
                }
            }
            Some("Node") => {
                world
                    .node_labels
                    .insert(name.to_owned(), labels_of(&value["metadata"]));
            }
            _ => {}
        }
    }
    world
}

/// Runs the whole command on `scenario` (written beside copies of the catalogs) and returns its JSON report.
fn simulate(scenario: &str) -> Result<Value, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(cases_dir()).expect("tests/conformance") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
    }
    let text = if scenario.contains("kind: Simulation") {
        scenario.to_owned()
    } else {
        format!(
            "apiVersion: kerf.sh/v1alpha1\nkind: Simulation\nmetadata: {{name: case}}\n\
             spec: {{instanceTypes: fake.json}}\n---\n{scenario}"
        )
    };
    let path = dir.path().join("scenario.yaml");
    std::fs::write(&path, text).expect("write scenario");
    // `KERF_BIN` runs another build of the command (a release one, or a copy kept while the tree changes).
    let bin = std::env::var_os("KERF_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_kerf").into());
    let out = std::process::Command::new(bin)
        .arg("simulate")
        .arg(&path)
        .args(["-o", "json"])
        .output()
        .expect("run kerf simulate");
    if !out.status.success() {
        return Err(format!(
            "kerf simulate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("report is not JSON: {e}"))
}

/// Where each pod went (a node or claim name) and each node's labels, from the report and the scenario.
struct Outcome {
    placed: BTreeMap<String, String>,
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
    unschedulable: BTreeMap<String, String>,
    new_claims: usize,
}

fn outcome(report: &Value, world: &World) -> Outcome {
    let mut placed = world.bound.clone();
    let mut node_labels = world.node_labels.clone();
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect()
    };
    let claims = report["nodeClaims"].as_array().cloned().unwrap_or_default();
    for claim in &claims {
        let name = claim["name"].as_str().unwrap_or_default().to_owned();
        node_labels.insert(
            name.clone(),
            serde_json::from_value(claim["labels"].clone()).unwrap_or_default(),
        );
        for pod in list(&claim["pods"]) {
            placed.insert(pod, name.clone());
        }
    }
    for node in report["existingNodes"].as_array().into_iter().flatten() {
        let name = node["name"].as_str().unwrap_or_default().to_owned();
        for pod in list(&node["pods"]) {
            placed.insert(pod, name.clone());
        }
    }
    let unschedulable = report["unschedulable"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            (
                u["pod"].as_str().unwrap_or_default().to_owned(),
                u["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    Outcome {
        placed,
        node_labels,
        unschedulable,
        new_claims: claims.len(),
    }
}

/// The expectations `outcome` breaks, each in a sentence.
fn check(expect: &Expect, outcome: &Outcome, world: &World) -> Vec<String> {
    let mut broken = Vec::new();
    let pending: Vec<String> = world
        .pod_labels
        .keys()
        .filter(|p| !world.bound.contains_key(*p))
        .cloned()
        .collect();
    let resolve = |pods: &Pods| -> Vec<String> {
        match pods {
            Pods::All(word) => {
                assert_eq!(word, "all", "a pod list, or `all`");
                pending.clone()
            }
            Pods::Some(list) => list.iter().map(|p| key(p)).collect(),
        }
    };
    if let Some(n) = expect.node_claims {
        if outcome.new_claims != n {
            broken.push(format!("{} NodeClaims, expected {n}", outcome.new_claims));
        }
    }
    if let Some(pods) = &expect.scheduled {
        for pod in resolve(pods) {
            if !outcome.placed.contains_key(&pod) {
                let why = outcome.unschedulable.get(&pod).cloned().unwrap_or_default();
                broken.push(format!("{pod} is not scheduled ({why})"));
            }
        }
    }
    if let Some(pods) = &expect.unschedulable {
        for pod in resolve(pods) {
            if let Some(node) = outcome.placed.get(&pod) {
                broken.push(format!(
                    "{pod} is scheduled on {node}, expected unschedulable"
                ));
            }
        }
    }
    let node_of = |pod: &str| outcome.placed.get(&key(pod));
    let labels_on = |pod: &str| node_of(pod).and_then(|n| outcome.node_labels.get(n));
    for (pod, want) in &expect.labels {
        let Some(have) = labels_on(pod) else {
            broken.push(format!("{pod} is on no node, expected labels {want:?}"));
            continue;
        };
        for (k, v) in want {
            if have.get(k) != Some(v) {
                broken.push(format!(
                    "{pod}'s node has {k}={:?}, expected {v}",
                    have.get(k)
                ));
            }
        }
    }
    for (pod, keys) in &expect.has_labels {
        let Some(have) = labels_on(pod) else {
            broken.push(format!("{pod} is on no node"));
            continue;
        };
        for k in keys.iter().filter(|k| !have.contains_key(*k)) {
            broken.push(format!("{pod}'s node has no {k} label"));
        }
    }
    for (pod, keys) in &expect.absent_labels {
        let Some(have) = labels_on(pod) else {
            broken.push(format!("{pod} is on no node"));
            continue;
        };
        for k in keys {
            if let Some(v) = have.get(k) {
                broken.push(format!("{pod}'s node has {k}={v}, expected no such label"));
            }
        }
    }
    for (pod, refused) in &expect.not_labels {
        let Some(have) = labels_on(pod) else {
            broken.push(format!("{pod} is on no node"));
            continue;
        };
        for (k, values) in refused {
            if let Some(v) = have.get(k).filter(|v| values.contains(v)) {
                broken.push(format!(
                    "{pod}'s node has {k}={v}, expected none of {values:?}"
                ));
            }
        }
    }
    for group in &expect.same_node {
        let nodes: BTreeSet<Option<&String>> = group.iter().map(|p| node_of(p)).collect();
        if nodes.len() != 1 || nodes.contains(&None) {
            broken.push(format!("{group:?} are not on one node: {nodes:?}"));
        }
    }
    for group in &expect.distinct_nodes {
        let placed: Vec<&String> = group.iter().filter_map(|p| node_of(p)).collect();
        let nodes: BTreeSet<&String> = placed.iter().copied().collect();
        if nodes.len() != placed.len() {
            broken.push(format!("{group:?} do not each have their own node"));
        }
    }
    for (pod, node) in &expect.on_existing {
        if node_of(pod) != Some(node) {
            broken.push(format!("{pod} is on {:?}, expected {node}", node_of(pod)));
        }
    }
    for skew in &expect.skew {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (pod, labels) in &world.pod_labels {
            if !skew.selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                continue;
            }
            let Some(node) = outcome.placed.get(pod) else {
                continue;
            };
            let label = outcome.node_labels.get(node).and_then(|l| l.get(&skew.key));
            // A new NodeClaim has no hostname yet: its name stands for it, as the node it becomes.
            let domain = match label {
                Some(value) => value,
                None if skew.key == "kubernetes.io/hostname" => node,
                None => continue,
            };
            *counts.entry(domain.as_str()).or_default() += 1;
        }
        let mut have: Vec<usize> = counts.values().copied().collect();
        let mut want = skew.counts.clone();
        have.sort_unstable();
        want.sort_unstable();
        if have != want {
            broken.push(format!(
                "skew over {}: {counts:?}, expected counts {:?}",
                skew.key, skew.counts
            ));
        }
    }
    for (pod, text) in &expect.reasons {
        match outcome.unschedulable.get(&key(pod)) {
            Some(reason) if reason.contains(text.as_str()) => {}
            other => broken.push(format!(
                "{pod}'s reason is {other:?}, expected one containing {text:?}"
            )),
        }
    }
    broken
}

/// One case: `Ok` when it holds as marked (a `differs` case must still differ).
fn run(file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let (case, scenario) = split(&text);
    let world = world(&scenario);
    let broken = match simulate(&scenario) {
        Ok(report) => check(&case.expect, &outcome(&report, &world), &world),
        Err(e) => vec![e],
    };
    match (&case.differs, broken.is_empty()) {
        (None, true) => Ok(()),
        (None, false) => Err(format!("{}:\n    {}", case.upstream, broken.join("\n    "))),
        (Some(_), false) => Ok(()),
        (Some(why), true) => Err(format!(
            "{}: marked `differs` ({why}) but now decides as Karpenter does; remove the mark",
            case.upstream
        )),
    }
}

#[test]
fn karpenter_suites_through_kerf_simulate() {
    let files = case_files();
    assert!(!files.is_empty(), "no cases under tests/conformance");
    let only = std::env::var("KERF_CONFORMANCE_ONLY").unwrap_or_default();
    let files: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.to_string_lossy().contains(&only))
        .collect();
    // Two at a time: each case is one `kerf simulate` process.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let halves: Vec<_> = files
            .chunks(files.len().div_ceil(2).max(1))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|f| {
                            run(f).err().map(|e| {
                                format!(
                                    "{}: {e}",
                                    f.strip_prefix(cases_dir()).unwrap_or(f).display()
                                )
                            })
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        halves
            .into_iter()
            .flat_map(|h| h.join().expect("case thread"))
            .collect()
    });
    let marked = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| split(&t).0.differs.is_some()))
        .count();
    eprintln!(
        "conformance: {} cases, {} marked differs, {} failing",
        files.len(),
        marked,
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every case names its upstream test once; two files for one `It` would count it twice.
#[test]
fn each_upstream_case_once() {
    let mut seen = BTreeMap::new();
    for file in case_files() {
        let text = std::fs::read_to_string(&file).expect("case");
        let (case, _) = split(&text);
        assert!(
            case.deliberate.is_none() || case.differs.is_none(),
            "{}: both deliberate and differs",
            file.display()
        );
        if let Some(other) = seen.insert(case.upstream.clone(), file.clone()) {
            panic!(
                "{} and {} both translate {}",
                other.display(),
                file.display(),
                case.upstream
            );
        }
    }
}
