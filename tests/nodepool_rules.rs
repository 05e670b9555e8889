//! Every NodePool rule of api-rules.md §2, accepted and rejected through the full admission pipeline
//! (defaults, schema, rules), with the rendered apiserver message checked.

use kerf::admission::NODEPOOL;
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
                }
            }
        }
    })
}

/// `base()` with the JSON value at `pointer` replaced (or inserted, creating the last segment).
fn with(pointer: &str, value: Value) -> Value {
    let mut np = base();
    set(&mut np, pointer, value);
    np
}

fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer has a parent");
    let parent = object.pointer_mut(parent).expect("parent exists");
    match parent {
        Value::Array(items) => items[last.parse::<usize>().expect("index")] = value,
        Value::Object(fields) => {
            fields.insert(last.to_owned(), value);
        }
        _ => panic!("parent of {pointer} is not a container"),
    }
}

fn errors(np: &Value) -> Vec<String> {
    NODEPOOL
        .admit(np, None)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn warnings(np: &Value) -> Vec<String> {
    NODEPOOL.admit(np, None).warnings
}

const LABEL_VALUE_FMT: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NOT_CHECKED: &str = r#"<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"#;
const REQS: &str = "/spec/template/spec/requirements";
const TSPEC: &str = "/spec/template/spec";

/// (case, object, expected errors)
fn reject_cases() -> Vec<(&'static str, Value, Vec<String>)> {
    let req = |r: Value| with(REQS, json!([r]));
    let labels = |l: Value| with("/spec/template/metadata/labels", l);
    let budget = |b: Value| with("/spec/disruption", json!({"budgets": [b]}));
    let e = |s: &str| vec![s.to_owned()];
    // Like the apiserver, rules are not checked when a required field is missing or a value cannot be parsed.
    let unchecked = |s: &str| vec![s.to_owned(), NOT_CHECKED.to_owned()];
    vec![
        ("spec missing", json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}}), unchecked("spec: Required value")),
        ("nodeClassRef missing", { let mut np = base(); np["spec"]["template"]["spec"].as_object_mut().map(|s| s.remove("nodeClassRef")); np }, unchecked("spec.template.spec.nodeClassRef: Required value")),
        ("requirements missing", { let mut np = base(); np["spec"]["template"]["spec"].as_object_mut().map(|s| s.remove("requirements")); np }, unchecked("spec.template.spec.requirements: Required value")),
        ("D1 karpenter.sh requirement", req(json!({"key": "karpenter.sh/foo", "operator": "Exists"})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "string": label domain "karpenter.sh" is restricted"#)),
        ("D1 suffix match", req(json!({"key": "notkarpenter.sh/x", "operator": "Exists"})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "string": label domain "karpenter.sh" is restricted"#)),
        ("D2 nodepool requirement", req(json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "string": label "karpenter.sh/nodepool" is restricted"#)),
        ("D3 hostname requirement", req(json!({"key": "kubernetes.io/hostname", "operator": "Exists"})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "string": label "kubernetes.io/hostname" is restricted"#)),
        ("D4 aws domain requirement", req(json!({"key": "karpenter.k8s.aws/instance-pods", "operator": "Exists"})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "string": label domain "karpenter.k8s.aws" is restricted"#)),
        ("D1 on labels", labels(json!({"karpenter.sh/initialized": "true"})),
            e(r#"spec.template.metadata.labels: Invalid value: "object": label domain "karpenter.sh" is restricted"#)),
        ("D2 on labels", labels(json!({"karpenter.sh/nodepool": "x"})),
            e(r#"spec.template.metadata.labels: Invalid value: "object": label "karpenter.sh/nodepool" is restricted"#)),
        ("D3 on labels", labels(json!({"kubernetes.io/hostname": "x"})),
            e(r#"spec.template.metadata.labels: Invalid value: "object": label "kubernetes.io/hostname" is restricted"#)),
        ("D4 on labels", labels(json!({"karpenter.k8s.aws/foo": "x"})),
            e(r#"spec.template.metadata.labels: Invalid value: "object": label domain "karpenter.k8s.aws" is restricted"#)),
        ("In without values", req(json!({"key": "team", "operator": "In"})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements with operator 'In' must have a value defined"#)),
        ("In with empty values", req(json!({"key": "team", "operator": "In", "values": []})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements with operator 'In' must have a value defined"#)),
        ("Gt with two values", req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["1", "2"]})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"#)),
        ("Lte non-integer", req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["a"]})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"#)),
        ("Lt negative", req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["-1"]})),
            vec![
                r#"spec.template.spec.requirements: Invalid value: "array": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"#.to_owned(),
                format!(r#"spec.template.spec.requirements[0].values[0]: Invalid value: "-1": invalid value -1 for key karpenter.k8s.aws/instance-cpu, {LABEL_VALUE_FMT}"#),
            ]),
        ("Gte overflow", req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["99999999999999999999"]})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"#)),
        ("Gt without values", req(json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt"})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"#)),
        ("minValues above values", req(json!({"key": "team", "operator": "In", "values": ["a"], "minValues": 2})),
            e(r#"spec.template.spec.requirements: Invalid value: "array": requirements with 'minValues' must have at least that many values specified in the 'values' field"#)),
        ("minValues 0", req(json!({"key": "team", "operator": "Exists", "minValues": 0})),
            e("spec.template.spec.requirements[0].minValues: Invalid value: 0: spec.template.spec.requirements[0].minValues in body should be greater than or equal to 1")),
        ("minValues 51", req(json!({"key": "team", "operator": "Exists", "minValues": 51})),
            e("spec.template.spec.requirements[0].minValues: Invalid value: 51: spec.template.spec.requirements[0].minValues in body should be less than or equal to 50")),
        ("unknown operator", req(json!({"key": "team", "operator": "Foo"})),
            unchecked(r#"spec.template.spec.requirements[0].operator: Unsupported value: "Foo": supported values: "Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt""#)),
        ("bad key pattern", req(json!({"key": "-team", "operator": "Exists"})),
            e(r#"spec.template.spec.requirements[0].key: Invalid value: "-team": spec.template.spec.requirements[0].key in body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$'"#)),
        ("RT key name too long", req(json!({"key": format!("example.com/{}", "a".repeat(64)), "operator": "Exists"})),
            vec![format!(r#"spec.template.spec.requirements[0].key: Invalid value: "example.com/{0}": key example.com/{0} is not a qualified name, name part must be no more than 63 characters"#, "a".repeat(64))]),
        ("RT requirement value", req(json!({"key": "team", "operator": "NotIn", "values": ["ok", "a b"]})),
            vec![format!(r#"spec.template.spec.requirements[0].values[1]: Invalid value: "a b": invalid value a b for key team, {LABEL_VALUE_FMT}"#)]),
        ("RT requirement value too long", req(json!({"key": "team", "operator": "Exists", "values": ["a".repeat(64)]})),
            vec![format!(r#"spec.template.spec.requirements[0].values[0]: Invalid value: "{0}": invalid value {0} for key team, must be no more than 63 characters"#, "a".repeat(64))]),
        ("unknown capacity type", req(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["xspot"]})),
            e(r#"spec.template.spec.requirements[0].values: Invalid value: "xspot": no valid values found in [xspot] for karpenter.sh/capacity-type, expected one of: [on-demand reserved spot], got: [xspot]"#)),
        ("unknown tenancy", req(json!({"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": ["host"]})),
            e(r#"spec.template.spec.requirements[0].values: Invalid value: "host": no valid values found in [host] for karpenter.k8s.aws/instance-tenancy, expected one of: [dedicated default], got: [host]"#)),
        ("known values below minValues", req(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "xspot"], "minValues": 2})),
            e(r#"spec.template.spec.requirements[0].values: Invalid value: "spot xspot": not enough valid values found in [spot xspot] for karpenter.sh/capacity-type, expected at least 2 valid values from: [on-demand reserved spot], got: 1"#)),
        ("D5 ec2nodeclass requirement", req(json!({"key": "karpenter.k8s.aws/ec2nodeclass", "operator": "Exists"})),
            vec![format!(r#"spec.template.spec.requirements[0].key: Invalid value: "karpenter.k8s.aws/ec2nodeclass": {}"#, kerf::api::labels::runtime_restriction_message("karpenter.k8s.aws/ec2nodeclass"))]),
        ("too many requirements", with(REQS, json!((0..101).map(|i| json!({"key": format!("k{i}"), "operator": "Exists"})).collect::<Vec<_>>())),
            e("spec.template.spec.requirements: Too many: 101: must have at most 100 items")),
        ("label value pattern", labels(json!({"team": "-a"})),
            vec![
                r#"spec.template.metadata.labels[team]: Invalid value: "-a": spec.template.metadata.labels[team] in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'"#.to_owned(),
            ]),
        ("label value too long", labels(json!({"team": "a".repeat(64)})), e("spec.template.metadata.labels[team]: Too long: may not be longer than 63")),
        ("label key not qualified", labels(json!({"spaces are not allowed": "x"})),
            e(r#"spec.template.metadata.labels[spaces are not allowed]: Invalid value: "spaces are not allowed": invalid key name "spaces are not allowed" in labels, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')""#)),
        ("D5 ec2nodeclass label", labels(json!({"karpenter.k8s.aws/ec2nodeclass": "x"})),
            vec![format!(r#"spec.template.metadata.labels[karpenter.k8s.aws/ec2nodeclass]: Invalid value: "karpenter.k8s.aws/ec2nodeclass": invalid key name "karpenter.k8s.aws/ec2nodeclass" in labels, {}"#, kerf::api::labels::runtime_restriction_message("karpenter.k8s.aws/ec2nodeclass"))]),
        ("too many labels", labels(json!((0..101).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>())),
            e("spec.template.metadata.labels: Too many: 101: must have at most 100 items")),
        ("taint without effect", with(&format!("{TSPEC}/taints"), json!([{"key": "a"}])), unchecked("spec.template.spec.taints[0].effect: Required value")),
        ("taint bad effect", with(&format!("{TSPEC}/taints"), json!([{"key": "a", "effect": "NoWay"}])),
            unchecked(r#"spec.template.spec.taints[0].effect: Unsupported value: "NoWay": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#)),
        ("taint empty key", with(&format!("{TSPEC}/taints"), json!([{"key": "", "effect": "NoSchedule"}])),
            vec![
                r#"spec.template.spec.taints[0].key: Invalid value: "": spec.template.spec.taints[0].key in body should be at least 1 chars long"#.to_owned(),
                r#"spec.template.spec.taints[0].key: Invalid value: "": spec.template.spec.taints[0].key in body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$'"#.to_owned(),
            ]),
        ("taint empty value", with(&format!("{TSPEC}/startupTaints"), json!([{"key": "a", "value": "", "effect": "NoSchedule"}])),
            e(r#"spec.template.spec.startupTaints[0].value: Invalid value: "": spec.template.spec.startupTaints[0].value in body should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$'"#)),
        ("taint bad timeAdded", with(&format!("{TSPEC}/taints"), json!([{"key": "a", "effect": "NoExecute", "timeAdded": "now"}])),
            e(r#"spec.template.spec.taints[0].timeAdded: Invalid value: "now": spec.template.spec.taints[0].timeAdded in body must be of type date-time: "now""#)),
        ("RT taint key too long", with(&format!("{TSPEC}/taints"), json!([{"key": "a".repeat(64), "effect": "NoSchedule"}])),
            vec![format!(r#"spec.template.spec.taints[0].key: Invalid value: "{}": invalid value: name part must be no more than 63 characters in taints"#, "a".repeat(64))]),
        ("duplicate taint across lists", { let mut np = with(&format!("{TSPEC}/taints"), json!([{"key": "a", "value": "x", "effect": "NoSchedule"}])); set(&mut np, &format!("{TSPEC}/startupTaints"), json!([{"key": "a", "value": "y", "effect": "NoSchedule"}])); np },
            e(r#"spec.template.spec.startupTaints[0]: Invalid value: "a": duplicate taint Key/Effect pair a=NoSchedule"#)),
        ("empty nodeClassRef fields", with(&format!("{TSPEC}/nodeClassRef"), json!({"group": "", "kind": "", "name": ""})),
            vec![
                r#"spec.template.spec.nodeClassRef.group: Invalid value: "string": group may not be empty"#.to_owned(),
                r#"spec.template.spec.nodeClassRef.kind: Invalid value: "string": kind may not be empty"#.to_owned(),
                r#"spec.template.spec.nodeClassRef.name: Invalid value: "string": name may not be empty"#.to_owned(),
            ]),
        ("group with slash", with(&format!("{TSPEC}/nodeClassRef/group"), json!("karpenter.k8s.aws/v1")),
            e(r#"spec.template.spec.nodeClassRef.group: Invalid value: "karpenter.k8s.aws/v1": spec.template.spec.nodeClassRef.group in body should match '^[^/]*$'"#)),
        ("expireAfter 1d", with(&format!("{TSPEC}/expireAfter"), json!("1d")),
            e(r#"spec.template.spec.expireAfter: Invalid value: "1d": spec.template.spec.expireAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'"#)),
        ("expireAfter overflow", with(&format!("{TSPEC}/expireAfter"), json!("2562048h")),
            e(r#"spec.template.spec.expireAfter: Invalid value: "2562048h": duration is too long: the largest duration Karpenter can decode is 2562047h47m16s"#)),
        ("terminationGracePeriod Never", with(&format!("{TSPEC}/terminationGracePeriod"), json!("Never")),
            e(r#"spec.template.spec.terminationGracePeriod: Invalid value: "Never": spec.template.spec.terminationGracePeriod in body should match '^([0-9]+(s|m|h))+$'"#)),
        ("consolidateAfter 1hr", with("/spec/disruption", json!({"consolidateAfter": "1hr"})),
            e(r#"spec.disruption.consolidateAfter: Invalid value: "1hr": spec.disruption.consolidateAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'"#)),
        ("WhenUnderutilized", with("/spec/disruption", json!({"consolidationPolicy": "WhenUnderutilized"})),
            e(r#"spec.disruption.consolidationPolicy: Unsupported value: "WhenUnderutilized": supported values: "WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced""#)),
        ("budget nodes 101%", budget(json!({"nodes": "101%"})),
            e(r#"spec.disruption.budgets[0].nodes: Invalid value: "101%": spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'"#)),
        ("budget nodes -1", budget(json!({"nodes": "-1"})),
            e(r#"spec.disruption.budgets[0].nodes: Invalid value: "-1": spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'"#)),
        ("schedule without duration", budget(json!({"nodes": "0", "schedule": "@daily"})),
            e(r#"spec.disruption.budgets: Invalid value: "array": 'schedule' must be set with 'duration'"#)),
        ("duration without schedule", budget(json!({"nodes": "0", "duration": "10m"})),
            e(r#"spec.disruption.budgets: Invalid value: "array": 'schedule' must be set with 'duration'"#)),
        ("duration 30s", budget(json!({"nodes": "0", "schedule": "@daily", "duration": "30s"})),
            e(r#"spec.disruption.budgets[0].duration: Invalid value: "30s": spec.disruption.budgets[0].duration in body should match '^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$'"#)),
        ("schedule *", budget(json!({"nodes": "0", "schedule": "*", "duration": "10m"})),
            e(r#"spec.disruption.budgets[0].schedule: Invalid value: "*": spec.disruption.budgets[0].schedule in body should match '^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$'"#)),
        ("kerf+ schedule sat-sun", budget(json!({"nodes": "0", "schedule": "0 0 * * sat-sun", "duration": "10m"})),
            e(r#"spec.disruption.budgets[0].schedule: Invalid value: "0 0 * * sat-sun": invalid cron, beginning of range (6) beyond end of range (0): sat-sun"#)),
        ("kerf+ schedule dow 7", budget(json!({"nodes": "0", "schedule": "0 0 * * 7", "duration": "10m"})),
            e(r#"spec.disruption.budgets[0].schedule: Invalid value: "0 0 * * 7": invalid cron, end of range (7) above maximum (6): 7"#)),
        ("kerf+ schedule 6 fields", budget(json!({"nodes": "0", "schedule": "0 0 0 * * *", "duration": "10m"})),
            e(r#"spec.disruption.budgets[0].schedule: Invalid value: "0 0 0 * * *": invalid cron, expected exactly 5 fields, found 6"#)),
        ("kerf+ schedule @dailyfoo", budget(json!({"nodes": "0", "schedule": "@dailyfoo", "duration": "10m"})),
            e(r#"spec.disruption.budgets[0].schedule: Invalid value: "@dailyfoo": invalid cron, unrecognized descriptor: @dailyfoo"#)),
        ("unknown reason", budget(json!({"nodes": "1", "reasons": ["Expired"]})),
            e(r#"spec.disruption.budgets[0].reasons[0]: Unsupported value: "Expired": supported values: "Underutilized", "Empty", "Drifted""#)),
        ("duplicate reason", budget(json!({"nodes": "1", "reasons": ["Empty", "Empty"]})),
            e(r#"spec.disruption.budgets[0].reasons[1]: Duplicate value: "Empty""#)),
        ("too many budgets", with("/spec/disruption", json!({"budgets": (0..51).map(|_| json!({"nodes": "1"})).collect::<Vec<_>>()})),
            e("spec.disruption.budgets: Too many: 51: must have at most 50 items")),
        ("limit not a quantity", with("/spec/limits", json!({"cpu": "lots"})),
            vec![format!(r#"spec.limits[cpu]: Invalid value: "lots": spec.limits[cpu] in body should match '{}'"#, kerf::api::validation::grammar::QUANTITY_PATTERN)]),
        ("weight 0", with("/spec/weight", json!(0)), e("spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1")),
        ("weight 101", with("/spec/weight", json!(101)), e("spec.weight: Invalid value: 101: spec.weight in body should be less than or equal to 100")),
        ("weight string", with("/spec/weight", json!("10")), e(r#"spec.weight: Invalid value: "string": spec.weight in body must be of type integer: "string""#)),
        ("replicas negative", with("/spec/replicas", json!(-1)), e("spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0")),
        ("static with cpu limit", { let mut np = with("/spec/replicas", json!(2)); set(&mut np, "/spec/limits", json!({"cpu": "10"})); np },
            e(r#"spec: Invalid value: "object": only 'limits.nodes' is supported on static NodePools"#)),
        ("static with weight", { let mut np = with("/spec/replicas", json!(2)); set(&mut np, "/spec/weight", json!(10)); np },
            e(r#"spec: Invalid value: "object": 'weight' is not supported on static NodePools"#)),
    ]
}

#[test]
fn every_rejection_has_the_apiserver_message() {
    let mut failures = Vec::new();
    for (case, np, expected) in reject_cases() {
        let got = errors(&np);
        if got != expected {
            failures.push(format!(
                "{case}:\n  expected {expected:#?}\n  got      {got:#?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn accepted_specs() {
    let req = |r: Value| with(REQS, json!([r]));
    let cases = vec![
        ("base", base()),
        ("empty requirements", with(REQS, json!([]))),
        (
            "capacity-type",
            req(
                json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}),
            ),
        ),
        (
            "mixed known and unknown capacity types",
            req(
                json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "xspot"]}),
            ),
        ),
        (
            "allowed aws key",
            req(
                json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}),
            ),
        ),
        (
            "kubernetes.io keys since v1.9",
            req(json!({"key": "node-role.kubernetes.io/gpu", "operator": "Exists"})),
        ),
        (
            "Gte 0",
            req(
                json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["0"]}),
            ),
        ),
        (
            "minValues with NotIn",
            req(
                json!({"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["m5"], "minValues": 3}),
            ),
        ),
        (
            "minValues met",
            req(
                json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "m5"], "minValues": 2}),
            ),
        ),
        (
            "same taint key other effect",
            with(
                &format!("{TSPEC}/taints"),
                json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]),
            ),
        ),
        (
            "taint value with prefix",
            with(
                &format!("{TSPEC}/taints"),
                json!([{"key": "a", "value": "example.com/v", "effect": "NoSchedule"}]),
            ),
        ),
        ("durations", {
            let mut np = with(&format!("{TSPEC}/expireAfter"), json!("1h1h"));
            set(
                &mut np,
                &format!("{TSPEC}/terminationGracePeriod"),
                json!("20m0s"),
            );
            np
        }),
        (
            "expireAfter Never",
            with(&format!("{TSPEC}/expireAfter"), json!("Never")),
        ),
        (
            "budgets",
            with(
                "/spec/disruption",
                json!({"consolidateAfter": "Never", "consolidationPolicy": "Balanced", "budgets": [
            {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "05%"}, {"nodes": "100%", "reasons": ["Drifted"]},
            {"nodes": "0", "schedule": "@daily", "duration": "2h20m0s"}]}),
            ),
        ),
        (
            "limits",
            with(
                "/spec/limits",
                json!({"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": "-1", "nodes": "+5"}),
            ),
        ),
        ("weight", with("/spec/weight", json!(100))),
        ("static", {
            let mut np = with("/spec/replicas", json!(3));
            set(&mut np, "/spec/limits", json!({"nodes": 5}));
            np
        }),
        (
            "labels",
            with(
                "/spec/template/metadata/labels",
                json!({"app.kubernetes.io/managed-by": "x", "karpenter.sh/capacity-type": "spot", "empty": ""}),
            ),
        ),
    ];
    for (case, np) in cases {
        assert_eq!(errors(&np), Vec::<String>::new(), "{case}");
    }
}

#[test]
fn defaults_are_filled_in() {
    let admitted = NODEPOOL.admit(&base(), None);
    assert_eq!(
        admitted.object["spec"]["disruption"],
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]})
    );
    assert_eq!(
        admitted.object["spec"]["template"]["spec"]["expireAfter"],
        "720h"
    );
    let partial = with(
        "/spec/disruption",
        json!({"budgets": [{"schedule": "@daily", "duration": "10m"}]}),
    );
    assert_eq!(
        NODEPOOL.admit(&partial, None).object["spec"]["disruption"],
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%", "schedule": "@daily", "duration": "10m"}]})
    );
    let nulls = with("/spec/disruption", Value::Null);
    assert_eq!(
        NODEPOOL.admit(&nulls, None).object["spec"]["disruption"]["consolidateAfter"],
        "0s"
    );
}

#[test]
fn warnings_for_valid_but_suspicious_specs() {
    let scheduled = with(
        "/spec/disruption",
        json!({"budgets": [{"nodes": "5", "schedule": "@daily", "duration": "1h"}]}),
    );
    assert!(
        warnings(&scheduled)
            .iter()
            .any(|w| w.contains("restricts disruption only while its schedule is active")),
        "{:?}",
        warnings(&scheduled)
    );
    let never = with(
        "/spec/disruption",
        json!({"budgets": [{"nodes": "0", "schedule": "0 0 30 2 *", "duration": "1h"}]}),
    );
    assert!(warnings(&never).iter().any(|w| w.contains("never fires")));
    let no_reasons = with(
        "/spec/disruption",
        json!({"budgets": [{"nodes": "1", "reasons": []}]}),
    );
    assert!(warnings(&no_reasons)
        .iter()
        .any(|w| w.contains("apply to no disruption reason")));
    let mixed = with(
        REQS,
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "xspot"]}]),
    );
    assert!(warnings(&mixed)
        .iter()
        .any(|w| w.contains("[xspot] are not known")));
    let unknown = with("/spec/foo", json!(1));
    assert!(warnings(&unknown)
        .iter()
        .any(|w| w.contains("unknown field \"spec.foo\"")));
    assert_eq!(warnings(&base()), Vec::<String>::new());
}

#[test]
fn update_ratchets_unchanged_errors_but_not_transitions() {
    let legacy = with(
        "/spec/template/metadata/labels",
        json!({"karpenter.sh/custom": "x"}),
    );
    let mut relabelled = legacy.clone();
    relabelled["metadata"]["labels"] = json!({"owner": "me"});
    assert_eq!(
        NODEPOOL.admit(&relabelled, Some(&legacy)).errors,
        vec![],
        "an unchanged bad label does not block a metadata update"
    );
    assert_eq!(
        NODEPOOL.admit(&relabelled, None).errors.len(),
        1,
        "CREATE is fully validated"
    );

    let mut regrouped = base();
    regrouped["spec"]["template"]["spec"]["nodeClassRef"]["group"] = json!("example.com");
    let errs: Vec<String> = NODEPOOL
        .admit(&regrouped, Some(&base()))
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            r#"spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.group is immutable"#
        ]
    );
    let mut rekinded = base();
    rekinded["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = json!("Other");
    let errs: Vec<String> = NODEPOOL
        .admit(&rekinded, Some(&base()))
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            r#"spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.kind is immutable"#
        ]
    );
    let mut renamed = base();
    renamed["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("other");
    assert_eq!(
        NODEPOOL.admit(&renamed, Some(&base())).errors,
        vec![],
        "a new name is drift, not an error"
    );

    let static_pool = with("/spec/replicas", json!(1));
    let errs: Vec<String> = NODEPOOL
        .admit(&static_pool, Some(&base()))
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errs,
        vec![
            r#"spec: Invalid value: "object": Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"#
        ]
    );
}

#[test]
fn rejection_renders_like_kubectl_shows_it() {
    let np = with("/spec/weight", json!(0));
    let admitted = NODEPOOL.admit(&np, None);
    let rejection = admitted.rejection(&NODEPOOL).expect("rejected");
    assert_eq!(
        rejection.to_string(),
        r#"NodePool.karpenter.sh "default" is invalid: spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1"#
    );
}
