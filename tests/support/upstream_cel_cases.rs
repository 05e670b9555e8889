//! Karpenter's CEL validation tests, translated into objects and the apiserver's expected answer.
//!
//! Each case names the upstream test it comes from (v1.14.1): kubernetes-sigs/karpenter
//! `pkg/apis/v1/nodepool_validation_cel_test.go` and `nodeclaim_validation_cel_test.go`, aws/karpenter-provider-aws
//! `pkg/apis/v1/nodepool_validation_cel_test.go` and `ec2nodeclass_validation_cel_test.go`, as "file: Context: It".
//! Cases named "kerf: ..." are ours: they reach rules no upstream test does.
//!
//! Objects are what the upstream Go objects put on the wire: fields Go leaves out when empty (`omitempty`) are
//! absent here too, durations are in Go's spelling (`20m0s`), quantities in Kubernetes' canonical form (`1k`).
//! Upstream tests only check that a create fails; where a CEL rule is what refuses, the case names its message.
#![allow(dead_code)] // each test binary uses a different subset

use super::apiserver_cel::Kind;
use serde_json::{json, Value};

/// What the apiserver does with a case's object.
#[derive(Debug, Clone)]
pub enum Expect {
    /// Stores it.
    Admit,
    /// Refuses it, a CEL rule returning false with this message among the errors.
    Rule(String),
    /// Refuses it because a CEL rule cannot be evaluated (`no such key`, a failed `int()`).
    EvalError,
    /// Refuses it in the schema step (pattern, enum, bound, required field), whatever the rules say.
    Schema,
}

/// One object (on UPDATE, with the stored one) and the expected answer.
#[derive(Debug, Clone)]
pub struct Case {
    pub source: String,
    pub kind: Kind,
    pub object: Value,
    pub old: Option<Value>,
    pub expect: Expect,
}

const NP: &str = "karpenter nodepool_validation_cel_test.go";
const NC: &str = "karpenter nodeclaim_validation_cel_test.go";
const AWS_NP: &str = "aws nodepool_validation_cel_test.go";
const EC2: &str = "aws ec2nodeclass_validation_cel_test.go";
const NO: &str = "karpenter nodeoverlay_validation_test.go";

fn create(source: String, kind: Kind, object: Value, expect: Expect) -> Case {
    Case {
        source,
        kind,
        object,
        old: None,
        expect,
    }
}

fn update(source: String, kind: Kind, old: Value, object: Value, expect: Expect) -> Case {
    Case {
        source,
        kind,
        object,
        old: Some(old),
        expect,
    }
}

fn rule(message: &str) -> Expect {
    Expect::Rule(message.to_owned())
}

/// Merges `patch` into `target`: objects field by field, `null` removes a field, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn patched(mut object: Value, patch: Value) -> Value {
    merge(&mut object, &json!({ "spec": patch }));
    object
}

/// Upstream's NodePool: a test node class, and one requirement on the capacity type.
fn nodepool(group: &str, kind: &str, spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "test"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": group, "kind": kind, "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        }}},
    });
    patched(base, spec)
}

fn np(spec: Value) -> Value {
    nodepool("karpenter.test.sh", "TestNodeClass", spec)
}

fn np_template(spec: Value) -> Value {
    np(json!({"template": {"spec": spec}}))
}

fn np_requirements(requirements: Value) -> Value {
    np_template(json!({ "requirements": requirements }))
}

fn np_labels(labels: Value) -> Value {
    np(json!({"template": {"metadata": {"labels": labels}}}))
}

fn np_budgets(budgets: Value) -> Value {
    np(json!({"disruption": {"budgets": budgets}}))
}

fn aws_np_requirement(key: &str, values: &[&str]) -> Value {
    nodepool(
        "karpenter.k8s.aws",
        "EC2NodeClass",
        json!({"template": {"spec": {"requirements": [{"key": key, "operator": "In", "values": values}]}}}),
    )
}

/// Upstream's NodeClaim: a test node class, and one requirement on the capacity type.
fn nodeclaim(spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "test"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClaim", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
        },
    });
    patched(base, spec)
}

fn nc_requirements(requirements: Value) -> Value {
    nodeclaim(json!({ "requirements": requirements }))
}

/// Upstream's EC2NodeClass: AL2023 by alias, a role, and subnets and security groups matching any tag.
fn nodeclass(spec: Value) -> Value {
    let base = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "test"},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "role-1",
            "securityGroupSelectorTerms": [{"tags": {"*": "*"}}],
            "subnetSelectorTerms": [{"tags": {"*": "*"}}],
        },
    });
    patched(base, spec)
}

/// Every case, in upstream's order within each file.
pub fn all() -> Vec<Case> {
    let mut cases = nodepool_cases();
    cases.extend(aws_nodepool_cases());
    cases.extend(nodeclaim_cases());
    cases.extend(nodeclass_cases());
    cases.extend(nodeoverlay_cases());
    cases.extend(capacitybuffer_cases());
    cases
}

/// The CapacityBuffer CRD's two rules (Karpenter v1.14.1 ships the CRD; no upstream CEL test covers them).
fn capacitybuffer_cases() -> Vec<Case> {
    let k = Kind::CapacityBuffer;
    let buffer = |spec: Value| {
        json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
               "metadata": {"name": "b", "namespace": "default"}, "spec": spec})
    };
    let c = |what: &str| format!("kerf: CapacityBuffer {what}");
    vec![
        create(
            c("podTemplateRef with replicas"),
            k,
            buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": 2})),
            Expect::Admit,
        ),
        create(
            c("scalableRef with percentage"),
            k,
            buffer(
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "d"}, "percentage": 20}),
            ),
            Expect::Admit,
        ),
        create(
            c("podTemplateRef alone"),
            k,
            buffer(json!({"podTemplateRef": {"name": "t"}})),
            rule("If podTemplateRef is set, replicas or limits must also be set"),
        ),
        create(
            c("both refs"),
            k,
            buffer(
                json!({"podTemplateRef": {"name": "t"}, "replicas": 1, "scalableRef": {"kind": "Deployment", "name": "d"}}),
            ),
            rule("You must define either PodTemplateRef or ScalableRef, but not both"),
        ),
        create(
            c("negative replicas"),
            k,
            buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": -1})),
            Expect::Schema,
        ),
        create(
            c("an empty template name"),
            k,
            buffer(json!({"podTemplateRef": {"name": ""}, "replicas": 1})),
            Expect::Schema,
        ),
    ]
}

fn nodeoverlay(spec: Value) -> Value {
    json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "overlay"}, "spec": spec})
}

/// kubernetes-sigs/karpenter pkg/apis/v1alpha1/nodeoverlay_validation_test.go (its CEL half; the base object has one
/// `karpenter.sh/capacity-type Exists` requirement).
fn nodeoverlay_cases() -> Vec<Case> {
    let c = |context: &str, it: &str| format!("{NO}: {context}: {it}");
    let k = Kind::NodeOverlay;
    let base = || json!([{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]);
    let reqs = |list: Value| nodeoverlay(json!({ "requirements": list }));
    let with = |field: &str, value: Value| {
        let mut spec = json!({ "requirements": base() });
        spec[field] = value;
        nodeoverlay(spec)
    };
    let mut cases = vec![
        // Go leaves the empty `values` out, so the rule cannot read it: refused as an evaluation error.
        create(c("Requirements", "should fail for no values for In operator"), k,
            reqs(json!([{"key": "Test", "operator": "In"}])), Expect::EvalError),
        create(c("Requirements", "should fail for no values for NotIn operator"), k,
            reqs(json!([{"key": "Test", "operator": "NotIn"}])), Expect::EvalError),
        create("kerf: NodeOverlay In with an empty values list".to_owned(), k,
            reqs(json!([{"key": "Test", "operator": "In", "values": []}])), rule("requirements with operator 'In' must have a value defined")),
        create("kerf: NodeOverlay NotIn with an empty values list".to_owned(), k,
            reqs(json!([{"key": "Test", "operator": "NotIn", "values": []}])), rule("requirements with operator 'NotIn' must have a value defined")),
        create(c("Requirements", "should allow for the karpenter.sh/nodepool label"), k,
            reqs(json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["pool"]}])), Expect::Admit),
        create(c("Requirements", "should fail for restricted domains"), k,
            reqs(json!([{"key": "karpenter.sh/test", "operator": "In", "values": ["test"]}])), rule(KARPENTER_SH_DOMAIN)),
        create(c("Requirements", "should fail for restricted domains"), k,
            reqs(json!([{"key": "karpenter.k8s.aws/test", "operator": "In", "values": ["test"]}])), rule(AWS_DOMAIN)),
        create("kerf: NodeOverlay requirement on the hostname".to_owned(), k,
            reqs(json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h"]}])), rule(HOSTNAME_LABEL)),
        create(c("Requirements", "should allow well known label exceptions"), k,
            reqs(json!([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}])), Expect::Admit),
        create(c("Requirements", "should fail with invalid GT or LT values"), k,
            reqs(json!([{"key": "key", "operator": "Gt", "values": ["1", "2"]}])),
            rule("requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value")),
        create(c("Requirements", "should allow empty requirements"), k, reqs(json!([])), Expect::Admit),
        create(c("", "shout not be able to set both price and priceAdjustment"), k,
            nodeoverlay(json!({"requirements": base(), "price": "0.432", "priceAdjustment": "+10%"})),
            rule("cannot set both 'price' and 'priceAdjustment'")),
        create(c("Capacity", "should allow custom resources"), k,
            with("capacity", json!({"smarter-devices/fuse": "1"})), Expect::Admit),
    ];
    for resource in ["cpu", "memory", "pods", "ephemeral-storage"] {
        cases.push(create(
            c(
                "Capacity",
                "should not allow cpu/memory/pod resources override",
            ),
            k,
            with("capacity", json!({ resource: "1" })),
            rule("invalid resource restricted"),
        ));
    }
    // The "Invalid Input" table sets `price` (in both contexts upstream).
    for bad in [
        "+42",
        ".5",
        "42.",
        "42%",
        "3,14",
        "1e10",
        "0x42",
        "forty-two",
        "42a",
        "42 ",
        " 42",
        "42.0.0",
        "-",
        ".",
        "-.42",
    ] {
        cases.push(create(
            c("price", "Invalid Input"),
            k,
            with("price", json!(bad)),
            Expect::Schema,
        ));
    }
    for good in ["42", "0.432"] {
        cases.push(create(
            c("price", "should allow integer/float value"),
            k,
            with("price", json!(good)),
            Expect::Admit,
        ));
    }
    for bad in ["1%", "1", "1.3", "-100.0%", "-101.1%"] {
        cases.push(create(
            c(
                "priceAdjustment",
                "should not allow an unsigned priceAdjustment / below -100%",
            ),
            k,
            with("priceAdjustment", json!(bad)),
            Expect::Schema,
        ));
    }
    for good in [
        "+1%",
        "-1%",
        "-100%",
        "+100.102%",
        "+298%",
        "+43",
        "-43",
        "+0.5",
        "-0.5",
    ] {
        cases.push(create(
            c(
                "priceAdjustment",
                "should allow a signed value or percentage",
            ),
            k,
            with("priceAdjustment", json!(good)),
            Expect::Admit,
        ));
    }
    cases
}

const BUDGET_PAIR: &str = "'schedule' must be set with 'duration'";
const KARPENTER_SH_DOMAIN: &str = r#"label domain "karpenter.sh" is restricted"#;
const AWS_DOMAIN: &str = r#"label domain "karpenter.k8s.aws" is restricted"#;
const NODEPOOL_LABEL: &str = r#"label "karpenter.sh/nodepool" is restricted"#;
const HOSTNAME_LABEL: &str = r#"label "kubernetes.io/hostname" is restricted"#;
const IN_VALUES: &str = "requirements with operator 'In' must have a value defined";
const NUMERIC: &str =
    "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value";
const MIN_VALUES: &str =
    "requirements with 'minValues' must have at least that many values specified in the 'values' field";
const STATIC_LIMITS: &str = "only 'limits.nodes' is supported on static NodePools";
const STATIC_WEIGHT: &str = "'weight' is not supported on static NodePools";
const STATIC_TRANSITION: &str =
    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";

/// Requirement cases shared by NodePools and NodeClaims (both files hold the same tests); `reqs` builds the object.
fn requirement_cases(file: &str, kind: Kind, reqs: fn(Value) -> Value) -> Vec<Case> {
    let c = |it: &str| format!("{file}: Requirements: {it}");
    let zone = "topology.kubernetes.io/zone";
    let mut cases = vec![
        create(c("should allow supported ops"), kind, reqs(json!([
            {"key": zone, "operator": "In", "values": ["test"]},
            {"key": zone, "operator": "Gt", "values": ["1"]},
            {"key": zone, "operator": "Lt", "values": ["1"]},
            {"key": zone, "operator": "NotIn"},
            {"key": zone, "operator": "Exists"},
        ])), Expect::Admit),
        create(c("should fail for unsupported ops"), kind,
            reqs(json!([{"key": zone, "operator": "unknown", "values": ["test"]}])), Expect::Schema),
        create(c("should fail for restricted domains"), kind,
            reqs(json!([{"key": "karpenter.sh/test", "operator": "In", "values": ["test"]}])), rule(KARPENTER_SH_DOMAIN)),
        // The AWS provider adds its own domain to the restricted ones.
        create(c("should fail for restricted domains (karpenter.k8s.aws)"), kind,
            reqs(json!([{"key": "karpenter.k8s.aws/test", "operator": "In", "values": ["test"]}])), rule(AWS_DOMAIN)),
        // `kubernetes.io/hostname/test` has two slashes: the key's pattern refuses it before the rule could.
        create(c("should fail for restricted labels"), kind,
            reqs(json!([{"key": "kubernetes.io/hostname/test", "operator": "In", "values": ["test"]}])), Expect::Schema),
        create(format!("kerf: {} requirement on kubernetes.io/hostname", kind.name()), kind,
            reqs(json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["test"]}])), rule(HOSTNAME_LABEL)),
        create(c("should allow non-empty set after removing overlapped value"), kind, reqs(json!([
            {"key": zone, "operator": "In", "values": ["test", "foo"]},
            {"key": zone, "operator": "NotIn", "values": ["test", "bar"]},
        ])), Expect::Admit),
        create(c("should allow empty requirements"), kind, reqs(json!([])), Expect::Admit),
        create(c("should error when minValues is negative"), kind,
            reqs(json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["insance-type-1"], "minValues": -1}])), Expect::Schema),
        create(c("should error when minValues is zero"), kind,
            reqs(json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["insance-type-1"], "minValues": 0}])), Expect::Schema),
        create(c("should error when minValues is more than 50"), kind,
            reqs(json!([{"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 51}])), Expect::Schema),
        create(c("should allow more than 50 values if minValues is not specified."), kind,
            reqs(json!([{"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": (0..90).map(|i| format!("instance{i}")).collect::<Vec<_>>()}])), Expect::Admit),
        create(c("should error when minValues is greater than the number of unique values specified within In operator"), kind,
            reqs(json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["insance-type-1"], "minValues": 2}])), rule(MIN_VALUES)),
        create(format!("kerf: {} In without values", kind.name()), kind,
            reqs(json!([{"key": zone, "operator": "In", "values": []}])), rule(IN_VALUES)),
    ];
    for domain in ["kubernetes.io", "k8s.io"] {
        cases.push(create(
            c("should allow kubernetes domains"),
            kind,
            reqs(json!([{"key": format!("{domain}/test"), "operator": "In", "values": ["test"]}])),
            Expect::Admit,
        ));
        cases.push(create(c("should allow kubernetes subdomains"), kind,
            reqs(json!([{"key": format!("subdomain.{domain}/test"), "operator": "In", "values": ["test"]}])), Expect::Admit));
    }
    // Go leaves an empty value list out, so `x.values` has no such key: the rule fails to evaluate. A value that is
    // not an integer fails `int()` the same way.
    for op in ["Gt", "Lt", "Gte", "Lte"] {
        let it = if op.len() == 2 {
            "should fail with invalid GT or LT values"
        } else {
            "should fail with invalid GTE or LTE values"
        };
        cases.push(create(
            c(it),
            kind,
            reqs(json!([{"key": zone, "operator": op}])),
            Expect::EvalError,
        ));
        cases.push(create(
            c(it),
            kind,
            reqs(json!([{"key": zone, "operator": op, "values": ["1", "2"]}])),
            rule(NUMERIC),
        ));
        cases.push(create(
            c(it),
            kind,
            reqs(json!([{"key": zone, "operator": op, "values": ["a"]}])),
            Expect::EvalError,
        ));
        cases.push(create(
            c(it),
            kind,
            reqs(json!([{"key": zone, "operator": op, "values": ["-1"]}])),
            rule(NUMERIC),
        ));
    }
    cases
}

/// kubernetes-sigs/karpenter nodepool_validation_cel_test.go.
fn nodepool_cases() -> Vec<Case> {
    let c = |context: &str, it: &str| format!("{NP}: {context}: {it}");
    let d = |it: &str| c("Disruption", it);
    let k = Kind::NodePool;
    let mut cases = vec![
        create(d("should succeed on a disabled expireAfter"), k, np_template(json!({"expireAfter": "Never"})), Expect::Admit),
        create(d("should succeed on a disabled consolidateAfter"), k, np(json!({"disruption": {"consolidateAfter": "Never"}})), Expect::Admit),
        create(d("should fail when creating a budget with an invalid cron"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "*", "duration": "20m0s"}])), Expect::Schema),
        create(d("should fail when creating a schedule with less than 5 entries"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * ", "duration": "20m0s"}])), Expect::Schema),
        create(d("should fail when creating a budget with a negative duration"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "-20m0s"}])), Expect::Schema),
        create(d("should fail when creating a budget with a seconds duration"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "30s"}])), Expect::Schema),
        create(d("should fail when creating a budget with a negative value int"), k, np_budgets(json!([{"nodes": "-10"}])), Expect::Schema),
        create(d("should fail when creating a budget with a negative value percent"), k, np_budgets(json!([{"nodes": "-10%"}])), Expect::Schema),
        create(d("should fail when creating a budget with a value percent with more than 3 digits"), k, np_budgets(json!([{"nodes": "1000%"}])), Expect::Schema),
        create(d("should fail when creating a budget with a cron but no duration"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *"}])), rule(BUDGET_PAIR)),
        create(d("should fail when creating a budget with a duration but no cron"), k,
            np_budgets(json!([{"nodes": "10", "duration": "20m0s"}])), rule(BUDGET_PAIR)),
        create(d("should succeed when creating a budget with both duration and cron"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "20m0s"}])), Expect::Admit),
        create(d("should succeed when creating a budget with hours and minutes in duration"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "2h20m0s"}])), Expect::Admit),
        create(d("should succeed when creating a budget with neither duration nor cron"), k, np_budgets(json!([{"nodes": "10"}])), Expect::Admit),
        create(d("should succeed when creating a budget with special cased crons"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "@annually", "duration": "20m0s"}])), Expect::Admit),
        create(d("should fail when creating two budgets where one has an invalid crontab"), k, np_budgets(json!([
            {"nodes": "10", "schedule": "@annually", "duration": "20m0s"},
            {"nodes": "10", "schedule": "*", "duration": "20m0s"},
        ])), Expect::Schema),
        create(d("should fail when creating multiple budgets where one doesn't have both schedule and duration"), k, np_budgets(json!([
            {"nodes": "10", "duration": "20m0s"},
            {"nodes": "10", "schedule": "* * * * *", "duration": "20m0s"},
            {"nodes": "10"},
        ])), rule(BUDGET_PAIR)),
        create(d("should allow setting multiple reasons"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "20m0s", "reasons": ["Drifted", "Empty"]}])), Expect::Admit),
    ];
    for value in ["30s", "1h30m5s", "Never"] {
        cases.push(create(
            d("should succeed on a valid expireAfter"),
            k,
            np_template(json!({"expireAfter": value})),
            Expect::Admit,
        ));
        cases.push(create(
            d("should succeed on a valid consolidateAfter"),
            k,
            np(json!({"disruption": {"consolidateAfter": value}})),
            Expect::Admit,
        ));
    }
    for value in ["-1s", "1hr", "FooNever"] {
        cases.push(create(
            d("should fail on an invalid expireAfter"),
            k,
            np_template(json!({"expireAfter": value})),
            Expect::Schema,
        ));
        cases.push(create(
            d("should fail on an invalid consolidateAfter"),
            k,
            np(json!({"disruption": {"consolidateAfter": value}})),
            Expect::Schema,
        ));
    }
    for (policy, after) in [
        ("WhenEmpty", "30s"),
        ("WhenEmptyOrUnderutilized", "30s"),
        ("WhenEmptyOrUnderutilized", "Never"),
        ("WhenEmpty", "Never"),
    ] {
        cases.push(create(
            d("should succeed when setting consolidateAfter with consolidationPolicy"),
            k,
            np(json!({"disruption": {"consolidationPolicy": policy, "consolidateAfter": after}})),
            Expect::Admit,
        ));
    }
    for policy in ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"] {
        cases.push(create(
            d("should succeed on a valid consolidationPolicy"),
            k,
            np(json!({"disruption": {"consolidationPolicy": policy}})),
            Expect::Admit,
        ));
    }
    for policy in [
        "1",
        "2",
        "3",
        "0",
        "4",
        "10",
        "balanced",
        "whenempty",
        "",
        "WhenUnderutilized",
        "foo",
    ] {
        cases.push(create(
            d("should fail on an invalid consolidationPolicy"),
            k,
            np(json!({"disruption": {"consolidationPolicy": policy}})),
            Expect::Schema,
        ));
    }
    for reason in ["Drifted", "Underutilized", "Empty"] {
        cases.push(create(d("should succeed when creating a budget with valid reasons"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "20m0s", "reasons": [reason]}])), Expect::Admit));
    }
    for reason in ["invalid", "expired", ""] {
        cases.push(create(d("should fail when creating a budget with invalid reasons"), k,
            np_budgets(json!([{"nodes": "10", "schedule": "* * * * *", "duration": "20m0s", "reasons": [reason]}])), Expect::Schema));
    }

    let t = |it: &str| c("Taints", it);
    let taints = |list: Value| np_template(json!({ "taints": list }));
    let long = "a".repeat(250);
    cases.extend([
        create(
            t("should succeed for valid taints"),
            k,
            taints(json!([
                {"key": "a", "value": "b", "effect": "NoSchedule"},
                {"key": "c", "value": "d", "effect": "NoExecute"},
                {"key": "e", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "test.com/Test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "test.com.com/test", "value": "f", "effect": "PreferNoSchedule"},
                {"key": "key-only", "effect": "NoExecute"},
            ])),
            Expect::Admit,
        ),
        create(
            t("should fail at runtime for taint keys that are too long"),
            k,
            taints(json!([{"key": format!("test.com.test.{long}/test"), "effect": "NoSchedule"}])),
            Expect::Admit,
        ),
        create(
            t("should fail for missing taint key"),
            k,
            taints(json!([{"key": "", "effect": "NoSchedule"}])),
            Expect::Schema,
        ),
        create(
            t("should fail for invalid taint value"),
            k,
            taints(json!([{"key": "invalid-value", "effect": "NoSchedule", "value": "???"}])),
            Expect::Schema,
        ),
        create(
            t("should fail for invalid taint effect"),
            k,
            taints(json!([{"key": "invalid-effect", "effect": "???"}])),
            Expect::Schema,
        ),
        create(
            t("should not fail for same key with different effects"),
            k,
            taints(
                json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]),
            ),
            Expect::Admit,
        ),
    ]);
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        cases.push(create(
            t("should fail for invalid taint keys"),
            k,
            taints(json!([{"key": key, "effect": "NoSchedule"}])),
            Expect::Schema,
        ));
    }

    let r = |it: &str| c("Requirements", it);
    cases.extend(requirement_cases(NP, k, np_requirements));
    cases.extend([
        create(
            r("should succeed for valid requirement keys"),
            k,
            np_requirements(json!([
                {"key": "Test", "operator": "Exists"},
                {"key": "test.com/Test", "operator": "Exists"},
                {"key": "test.com.com/test", "operator": "Exists"},
                {"key": "key-only", "operator": "Exists"},
            ])),
            Expect::Admit,
        ),
        create(
            r("should fail at runtime for requirement keys that are too long"),
            k,
            np_requirements(
                json!([{"key": format!("test.com.test.{long}/test"), "operator": "Exists"}]),
            ),
            Expect::Admit,
        ),
        create(
            r("should fail at runtime for requirement keys that are too long"),
            k,
            np_requirements(
                json!([{"key": format!("test.com.test/test-{long}"), "operator": "Exists"}]),
            ),
            Expect::Admit,
        ),
        create(
            r("should fail for the karpenter.sh/nodepool label"),
            k,
            np_requirements(
                json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["silly"]}]),
            ),
            rule(NODEPOOL_LABEL),
        ),
    ]);
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        cases.push(create(
            r("should fail for invalid requirement keys"),
            k,
            np_requirements(json!([{"key": key, "operator": "Exists"}])),
            Expect::Schema,
        ));
    }
    for key in [
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
    ] {
        cases.push(create(
            r("should allow well known label exceptions"),
            k,
            np_requirements(json!([{"key": key, "operator": "In", "values": ["test"]}])),
            Expect::Admit,
        ));
    }

    let l = |it: &str| c("Labels", it);
    cases.extend([
        create(
            l("should allow unrecognized labels"),
            k,
            np_labels(json!({"foo": "silly"})),
            Expect::Admit,
        ),
        create(
            l("should fail for the karpenter.sh/nodepool label"),
            k,
            np_labels(json!({"karpenter.sh/nodepool": "silly"})),
            rule(NODEPOOL_LABEL),
        ),
        // The apiserver stores label keys that are not qualified names; kerf's runtime checks refuse them.
        create(
            l("should fail for invalid label keys"),
            k,
            np_labels(json!({"spaces are not allowed": "silly"})),
            Expect::Admit,
        ),
        create(
            l("should fail at runtime for label keys that are too long"),
            k,
            np_labels(json!({format!("test.com.test.{long}/test"): "silly"})),
            Expect::Admit,
        ),
        create(
            l("should fail for invalid label values"),
            k,
            np_labels(json!({"silly": "/ is not allowed"})),
            Expect::Schema,
        ),
        create(
            l("should fail for restricted label domains"),
            k,
            np_labels(json!({"karpenter.sh/unknown": "silly"})),
            rule(KARPENTER_SH_DOMAIN),
        ),
        create(
            l("should fail for restricted label domains (karpenter.k8s.aws)"),
            k,
            np_labels(json!({"karpenter.k8s.aws/unknown": "silly"})),
            rule(AWS_DOMAIN),
        ),
        create(
            l("should allow labels kOps require"),
            k,
            np_labels(
                json!({"kops.k8s.io/instancegroup": "karpenter-nodes", "kops.k8s.io/gpu": "1"}),
            ),
            Expect::Admit,
        ),
        create(
            "kerf: NodePool label kubernetes.io/hostname".to_owned(),
            k,
            np_labels(json!({"kubernetes.io/hostname": "a"})),
            rule(HOSTNAME_LABEL),
        ),
    ]);
    for domain in ["kubernetes.io", "k8s.io"] {
        for key in [
            domain.to_owned(),
            format!("{domain}/key"),
            format!("subdomain.{domain}"),
            format!("subdomain.{domain}/key"),
        ] {
            cases.push(create(
                l("should allow labels in kubernetes domains (and prefixed, and subdomains)"),
                k,
                np_labels(json!({ key: "test-value" })),
                Expect::Admit,
            ));
        }
    }

    let g = |it: &str| c("TerminationGracePeriod", it);
    for value in ["30s", "1h30m5s"] {
        cases.push(create(
            g("should succeed on a valid terminationGracePeriod"),
            k,
            np_template(json!({"terminationGracePeriod": value})),
            Expect::Admit,
        ));
    }
    for value in ["-1s", "1hr", "Never", "FooNever"] {
        cases.push(create(
            g("should fail on an invalid terminationGracePeriod"),
            k,
            np_template(json!({"terminationGracePeriod": value})),
            Expect::Schema,
        ));
    }

    let n = |it: &str| c("NodeClassRef", it);
    let reference = |group: &str, kind: &str, name: &str| {
        np_template(json!({"nodeClassRef": {"group": group, "kind": kind, "name": name}}))
    };
    cases.extend([
        // Upstream creates the changed pool a second time; the rule it means to test runs on an UPDATE.
        update(
            n("should fail to mutate group"),
            k,
            np(json!({})),
            reference("karpenter.test.mutated.sh", "TestNodeClass", "default"),
            rule("nodeClassRef.group is immutable"),
        ),
        update(
            n("should fail to mutate kind"),
            k,
            np(json!({})),
            reference("karpenter.test.sh", "TestNodeClass2", "default"),
            rule("nodeClassRef.kind is immutable"),
        ),
        update(
            "kerf: a new nodeClassRef name is allowed".to_owned(),
            k,
            np(json!({})),
            reference("karpenter.test.sh", "TestNodeClass", "other"),
            Expect::Admit,
        ),
        create(
            n("should fail if group is unset"),
            k,
            reference("", "TestNodeClass", "default"),
            rule("group may not be empty"),
        ),
        create(
            n("should fail if kind is unset"),
            k,
            reference("karpenter.test.sh", "", "default"),
            rule("kind may not be empty"),
        ),
        create(
            n("should fail if name is unset"),
            k,
            reference("karpenter.test.sh", "TestNodeClass", ""),
            rule("name may not be empty"),
        ),
    ]);

    let p = |it: &str| c("Replicas", it);
    let replicas = |n: i64, spec: Value| {
        let mut pool = np(spec);
        pool["spec"]["replicas"] = json!(n);
        pool
    };
    for n in [5, 0, 1000] {
        cases.push(create(
            p("should succeed when replicas is set to a positive value, zero or a large value"),
            k,
            replicas(n, json!({})),
            Expect::Admit,
        ));
    }
    cases.push(create(
        p("should fail when replicas is set to a negative value"),
        k,
        replicas(-100, json!({})),
        Expect::Schema,
    ));
    for (resource, quantity) in [
        ("cpu", "1k"),
        ("memory", "2000Gi"),
        ("pods", "10"),
        ("ephemeral-storage", "10Gi"),
    ] {
        cases.push(create(
            p("should fail for incompatible fields"),
            k,
            replicas(10, json!({"limits": { resource: quantity }})),
            rule(STATIC_LIMITS),
        ));
    }
    cases.push(create(
        p("should fail for incompatible fields: weight"),
        k,
        replicas(10, json!({"weight": 25})),
        rule(STATIC_WEIGHT),
    ));
    for spec in [
        json!({"limits": {"nodes": "100"}}),
        json!({"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m0s", "budgets": [
            {"nodes": "20%", "schedule": "0 9 * * mon-fri", "duration": "8h0m0s", "reasons": ["Drifted", "Empty"]},
            {"nodes": "30%", "schedule": "0 22 * * sat,sun", "duration": "4h0m0s", "reasons": ["Underutilized"]},
            {"nodes": "5"},
        ]}}),
        json!({"template": {"metadata": {"labels": {"environment": "production"}}}}),
        json!({"template": {"metadata": {"annotations": {"example.com/last-updated": "2024-01-01"}}}}),
        json!({"template": {"spec": {"taints": [{"key": "gpu-workload", "value": "enabled", "effect": "NoSchedule"}]}}}),
        json!({"template": {"spec": {"startupTaints": [{"key": "example.com/initializing", "value": "true", "effect": "NoSchedule"}]}}}),
        json!({"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In",
             "values": ["m5.large", "m5.xlarge", "m5.2xlarge", "c5.large", "c5.xlarge", "r5.large", "r5.xlarge"], "minValues": 3},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a", "us-west-2b", "us-west-2c"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.k8s.aws/instance-memory", "operator": "Gt", "values": ["8192"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["64"]},
        ]}}}),
        json!({"template": {"spec": {"expireAfter": "72h0m0s"}}}),
        json!({"template": {"spec": {"terminationGracePeriod": "5m0s"}}}),
    ] {
        cases.push(create(
            p("should succeed for compatible fields"),
            k,
            replicas(10, spec),
            Expect::Admit,
        ));
    }
    let u = |it: &str| c("Replicas: Update Scenarios", it);
    cases.extend([
        update(
            u("should succeed when increasing replicas in a NodePool"),
            k,
            replicas(3, json!({})),
            replicas(5, json!({})),
            Expect::Admit,
        ),
        update(
            u("should fail when changing the NodePool from static to dynamic"),
            k,
            replicas(3, json!({})),
            np(json!({})),
            rule(STATIC_TRANSITION),
        ),
        update(
            u("should fail when changing the NodePool from dynamic to static"),
            k,
            np(json!({})),
            replicas(3, json!({})),
            rule(STATIC_TRANSITION),
        ),
        update(
            u("should succeed when changing the static NodePool nodes limit"),
            k,
            replicas(3, json!({"limits": {"nodes": "10"}})),
            replicas(3, json!({"limits": {"nodes": "100"}})),
            Expect::Admit,
        ),
    ]);
    cases
}

/// aws/karpenter-provider-aws nodepool_validation_cel_test.go: the AWS labels as requirement keys and labels.
fn aws_nodepool_cases() -> Vec<Case> {
    let c = |context: &str, it: &str| format!("{AWS_NP}: {context}: {it}");
    let k = Kind::NodePool;
    let mut cases = Vec::new();
    for label in kerf::api::labels::well_known_labels() {
        let aws_pool = |spec: Value| nodepool("karpenter.k8s.aws", "EC2NodeClass", spec);
        if label != "karpenter.sh/nodepool" {
            cases.push(create(
                c("Labels", "should allow well known label exceptions"),
                k,
                aws_pool(json!({"template": {"metadata": {"labels": { label.clone(): "test" }}}})),
                Expect::Admit,
            ));
        }
        if ![
            "karpenter.sh/nodepool",
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-tenancy",
        ]
        .contains(&label.as_str())
        {
            cases.push(create(
                c("Requirements", "should allow well known label exceptions"),
                k,
                aws_np_requirement(&label, &["test"]),
                Expect::Admit,
            ));
        }
    }
    // Unknown capacity types and tenancies are refused at runtime (RuntimeValidate), not by the apiserver.
    for (it, key, values) in [
        (
            "should fail validation with only invalid capacity types",
            "karpenter.sh/capacity-type",
            &["xspot"][..],
        ),
        (
            "should pass validation with valid capacity types",
            "karpenter.sh/capacity-type",
            &["on-demand"][..],
        ),
        (
            "should fail open if invalid and valid capacity types are present",
            "karpenter.sh/capacity-type",
            &["on-demand", "xspot"][..],
        ),
        (
            "should fail validation with only invalid tenancy types",
            "karpenter.k8s.aws/instance-tenancy",
            &["xdedicated"][..],
        ),
        (
            "should pass validation with valid tenancy types",
            "karpenter.k8s.aws/instance-tenancy",
            &["default"][..],
        ),
        (
            "should fail open if invalid and valid tenancy types are present",
            "karpenter.k8s.aws/instance-tenancy",
            &["default", "xdedicated"][..],
        ),
    ] {
        cases.push(create(
            c("Requirements", it),
            k,
            aws_np_requirement(key, values),
            Expect::Admit,
        ));
    }
    cases
}

/// kubernetes-sigs/karpenter nodeclaim_validation_cel_test.go.
fn nodeclaim_cases() -> Vec<Case> {
    let c = |context: &str, it: &str| format!("{NC}: {context}: {it}");
    let k = Kind::NodeClaim;
    let taints = |list: Value| nodeclaim(json!({ "taints": list }));
    let reference = |group: &str, kind: &str, name: &str| {
        nodeclaim(json!({"nodeClassRef": {"group": group, "kind": kind, "name": name}}))
    };
    let mut relabelled = nodeclaim(json!({}));
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    let mut cases = vec![
        create(c("Taints", "should succeed for valid taints"), k, taints(json!([
            {"key": "a", "value": "b", "effect": "NoSchedule"},
            {"key": "c", "value": "d", "effect": "NoExecute"},
            {"key": "e", "value": "f", "effect": "PreferNoSchedule"},
            {"key": "key-only", "effect": "NoExecute"},
        ])), Expect::Admit),
        create(c("Taints", "should fail for invalid taint keys"), k, taints(json!([{"key": "???", "effect": ""}])), Expect::Schema),
        create(c("Taints", "should fail for missing taint key"), k, taints(json!([{"key": "", "effect": "NoSchedule"}])), Expect::Schema),
        create(c("Taints", "should fail for invalid taint value"), k, taints(json!([{"key": "invalid-value", "effect": "NoSchedule", "value": "???"}])), Expect::Schema),
        create(c("Taints", "should fail for invalid taint effect"), k, taints(json!([{"key": "invalid-effect", "effect": "???"}])), Expect::Schema),
        create(c("Taints", "should not fail for same key with different effects"), k,
            taints(json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}])), Expect::Admit),
        create(c("NodeClassRef", "should succeed for valid group"), k, reference("karpenter.test.sh", "TestNodeClass", "nodeclass-test"), Expect::Admit),
        create(c("NodeClassRef", "should fail for invalid group"), k, reference("karpenter.test.sh/v1", "TestNodeClass", "nodeclass-test"), Expect::Schema),
        create("kerf: NodeClaim nodeClassRef group empty".to_owned(), k, reference("", "TestNodeClass", "default"), rule("group may not be empty")),
        create("kerf: NodeClaim nodeClassRef kind empty".to_owned(), k, reference("karpenter.test.sh", "", "default"), rule("kind may not be empty")),
        create("kerf: NodeClaim nodeClassRef name empty".to_owned(), k, reference("karpenter.test.sh", "TestNodeClass", ""), rule("name may not be empty")),
        create(c("Requirements", "should error when requirements is greater than 100"), k,
            nc_requirements(json!((0..101).map(|i| json!({"key": format!("key-{i}"), "operator": "In", "values": [format!("v{i}")]})).collect::<Vec<_>>())),
            Expect::Schema),
        // NodeClaims do not carry the NodePool rule on this key: Karpenter sets it on every claim it launches.
        create("kerf: NodeClaim requirement on karpenter.sh/nodepool".to_owned(), k,
            nc_requirements(json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}])), Expect::Admit),
        update("kerf: NodeClaim spec is immutable".to_owned(), k, nodeclaim(json!({})),
            nc_requirements(json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])), rule("spec is immutable")),
        update("kerf: a NodeClaim update that leaves the spec alone".to_owned(), k, nodeclaim(json!({})), relabelled, Expect::Admit),
    ];
    cases.extend(requirement_cases(NC, k, nc_requirements));
    for key in kerf::api::labels::well_known_labels()
        .into_iter()
        .filter(|l| l != "karpenter.sh/nodepool")
    {
        cases.push(create(
            c("Requirements", "should allow well known label exceptions"),
            k,
            nc_requirements(json!([{"key": key, "operator": "In", "values": ["test"]}])),
            Expect::Admit,
        ));
    }
    for value in ["30s", "1h30m5s"] {
        cases.push(create(
            c(
                "TerminationGracePeriod",
                "should succeed on a valid terminationGracePeriod",
            ),
            k,
            nodeclaim(json!({"terminationGracePeriod": value})),
            Expect::Admit,
        ));
    }
    for value in ["-1s", "1hr", "Never", "FooNever"] {
        cases.push(create(
            c(
                "TerminationGracePeriod",
                "should fail on an invalid terminationGracePeriod",
            ),
            k,
            nodeclaim(json!({"terminationGracePeriod": value})),
            Expect::Schema,
        ));
    }
    for value in ["30s", "1h30m5s", "Never"] {
        cases.push(create(
            c("ExpireAfter", "should succeed on a valid expireAfter"),
            k,
            nodeclaim(json!({"expireAfter": value})),
            Expect::Admit,
        ));
    }
    for value in ["-1s", "1hr", "FooNever"] {
        cases.push(create(
            c("ExpireAfter", "should fail on an invalid expireAfter"),
            k,
            nodeclaim(json!({"expireAfter": value})),
            Expect::Schema,
        ));
    }
    cases
}

const FAMILIES: [(&str, &str, &str); 6] = [
    ("AL2", "al2", "an"),
    ("AL2023", "al2023", "an"),
    ("Bottlerocket", "bottlerocket", "a"),
    ("Windows2019", "windows2019", "a"),
    ("Windows2022", "windows2022", "a"),
    ("Windows2025", "windows2025", "a"),
];
const EXACTLY_ONE_ROLE: &str = "must specify exactly one of ['role', 'instanceProfile']";
const EMPTY_TAG: &str = "empty tag keys or values aren't supported";
const AMI_TERM_EMPTY: &str =
    "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']";
const AMI_ID_EXCLUSIVE: &str = "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms";
const AMI_ALIAS_EXCLUSIVE: &str = "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms";
const ALIAS_FORMAT: &str =
    "'alias' is improperly formatted, must match the format 'family@version'";
const CR_TERM_EMPTY: &str =
    "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']";
const CR_ID_EXCLUSIVE: &str = "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term";
const SIGNALS: &str = "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']";
const RESERVED: &str = "['cpu','memory','ephemeral-storage','pid']";
const INTERFACE_PAIRS: &str = "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card";
const PRIMARY_INTERFACE: &str =
    "networkInterfaces must include a primary interface with interfaceType='interface'";
const CONNECTION_TRACKING: &str =
    "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set";

fn family_message(family: &str, article: &str) -> String {
    format!("if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias")
}

/// The selector-term cases upstream writes three times (subnets, security groups, capacity reservations) and once
/// more for AMIs: `field` is the spec field, `empty` the message of a term with no field.
fn selector_term_cases(context: &str, field: &str, empty: &str) -> Vec<Case> {
    let c = |it: &str| format!("{EC2}: {context}: {it}");
    let k = Kind::EC2NodeClass;
    let terms = |list: Value| nodeclass(json!({ field: list }));
    vec![
        create(
            c("should succeed with a valid selector on tags"),
            k,
            terms(json!([{"tags": {"test": "testvalue"}}])),
            Expect::Admit,
        ),
        create(
            c("should fail when a selector term has no values"),
            k,
            terms(json!([{}])),
            rule(empty),
        ),
        // Go leaves the empty tag map out: the term reaches the apiserver empty.
        create(
            c("should fail when a selector term has no tag map values"),
            k,
            terms(json!([{}])),
            rule(empty),
        ),
        create(
            c("should fail when a selector term has a tag map key that is empty"),
            k,
            terms(json!([{"tags": {"test": ""}}])),
            rule(EMPTY_TAG),
        ),
        create(
            c("should fail when a selector term has a tag map value that is empty"),
            k,
            terms(json!([{"tags": {"": "testvalue"}}])),
            rule(EMPTY_TAG),
        ),
        create(
            c("should fail when the last selector is invalid"),
            k,
            terms(json!([
                {"tags": {"test": "testvalue"}}, {"tags": {"test2": "testvalue2"}}, {"tags": {"test3": "testvalue3"}}, {"tags": {"": "testvalue4"}},
            ])),
            rule(EMPTY_TAG),
        ),
    ]
}

/// aws/karpenter-provider-aws ec2nodeclass_validation_cel_test.go.
fn nodeclass_cases() -> Vec<Case> {
    let c = |context: &str, it: &str| {
        if context.is_empty() {
            format!("{EC2}: {it}")
        } else {
            format!("{EC2}: {context}: {it}")
        }
    };
    let k = Kind::EC2NodeClass;
    let nc = nodeclass;
    let mut cases = vec![
        create(
            c("", "should succeed if just specifying role"),
            k,
            nc(json!({})),
            Expect::Admit,
        ),
        create(
            c("", "should succeed if just specifying instance profile"),
            k,
            nc(json!({"instanceProfile": "test-instance-profile", "role": null})),
            Expect::Admit,
        ),
        create(
            c(
                "",
                "should fail if specifying both instance profile and role",
            ),
            k,
            nc(json!({"instanceProfile": "test-instance-profile"})),
            rule(EXACTLY_ONE_ROLE),
        ),
        create(
            c(
                "",
                "should fail if not specifying one of instance profile and role",
            ),
            k,
            nc(json!({"role": null})),
            rule(EXACTLY_ONE_ROLE),
        ),
        create(
            "kerf: role set to the empty string".to_owned(),
            k,
            nc(json!({"role": ""})),
            rule("role cannot be empty"),
        ),
        create(
            "kerf: instanceProfile set to the empty string".to_owned(),
            k,
            nc(json!({"role": null, "instanceProfile": ""})),
            rule("instanceProfile cannot be empty"),
        ),
        create(
            c("AMIFamily", "should fail with the ubuntu family"),
            k,
            nc(
                json!({"amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "amiFamily": "Ubuntu"}),
            ),
            Expect::Schema,
        ),
        create(
            c(
                "AMIFamily",
                "should fail when neither amiFamily nor an alias are specified",
            ),
            k,
            nc(json!({"amiSelectorTerms": [{"id": "ami-01234567890abcdef"}], "amiFamily": null})),
            rule("must specify amiFamily if amiSelectorTerms does not contain an alias"),
        ),
    ];
    for family in [
        "AL2",
        "AL2023",
        "Bottlerocket",
        "Windows2019",
        "Windows2022",
        "Windows2025",
        "Custom",
    ] {
        cases.push(create(
            c("AMIFamily", "should succeed with valid families"),
            k,
            nc(json!({"amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "amiFamily": family})),
            Expect::Admit,
        ));
    }
    for (family, prefix, _) in FAMILIES {
        let alias = format!("{prefix}@latest");
        cases.push(create(
            c(
                "AMIFamily",
                "should succeed when the amiFamily matches amiSelectorTerms[].alias",
            ),
            k,
            nc(json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": family})),
            Expect::Admit,
        ));
        cases.push(create(
            c(
                "AMIFamily",
                "should succeed when the amiFamily is custom with amiSelectorTerms[].alias",
            ),
            k,
            nc(json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": "Custom"})),
            Expect::Admit,
        ));
        for (other, _, article) in FAMILIES.iter().filter(|(f, _, _)| *f != family) {
            let other_alias = format!("{}@latest", other.to_lowercase());
            cases.push(create(
                c(
                    "AMIFamily",
                    "should fail when then amiFamily does not match amiSelectorTerms[].alias",
                ),
                k,
                nc(json!({"amiSelectorTerms": [{"alias": other_alias}], "amiFamily": family})),
                Expect::Rule(family_message(other, article)),
            ));
        }
    }

    let t = |it: &str| c("Tags", it);
    cases.extend([
        create(t("should succeed when tags are empty"), k, nc(json!({"tags": {}})), Expect::Admit),
        create(t("should succeed if tags aren't in restricted tag keys"), k,
            nc(json!({"tags": {"karpenter.sh/custom-key": "value", "karpenter.sh/managed": "true", "kubernetes.io/role/key": "value"}})), Expect::Admit),
        create("kerf: a tag with an empty key".to_owned(), k, nc(json!({"tags": {"": "value"}})), rule("empty tag keys aren't supported")),
    ]);
    for (key, restricted) in [
        ("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
        ("kubernetes.io/cluster/test", "kubernetes.io/cluster/"),
        ("eks:eks-cluster-name", "eks:eks-cluster-name"),
        (
            "karpenter.k8s.aws/ec2nodeclass",
            "karpenter.k8s.aws/ec2nodeclass",
        ),
        ("karpenter.sh/nodeclaim", "karpenter.sh/nodeclaim"),
    ] {
        cases.push(create(
            t("should fail if tags contain a restricted domain key"),
            k,
            nc(json!({"tags": { key: "value" }})),
            Expect::Rule(format!(
                "tag contains a restricted tag matching {restricted}"
            )),
        ));
    }

    let s = |it: &str| c("SubnetSelectorTerms", it);
    cases.extend(selector_term_cases(
        "SubnetSelectorTerms",
        "subnetSelectorTerms",
        "expected at least one, got none, ['tags', 'id']",
    ));
    cases.extend([
        create(s("should succeed with a valid subnet selector on id"), k, nc(json!({"subnetSelectorTerms": [{"id": "subnet-12345749"}]})), Expect::Admit),
        create(s("should fail when subnet selector terms is set to nil"), k, nc(json!({"subnetSelectorTerms": null})), Expect::Schema),
        create(s("should fail when no subnet selector terms exist"), k, nc(json!({"subnetSelectorTerms": []})), rule("subnetSelectorTerms cannot be empty")),
        create(s("should fail when specifying id with tags"), k, nc(json!({"subnetSelectorTerms": [{"id": "subnet-12345749", "tags": {"test": "testvalue"}}]})),
            rule("'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term")),
    ]);

    let g = |it: &str| c("SecurityGroupSelectorTerms", it);
    let sg = |term: Value| nc(json!({"securityGroupSelectorTerms": [term]}));
    let sg_id_exclusive = "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term";
    cases.extend(selector_term_cases(
        "SecurityGroupSelectorTerms",
        "securityGroupSelectorTerms",
        "expected at least one, got none, ['tags', 'id', 'name']",
    ));
    cases.extend([
        create(g("should succeed with a valid security group selector on id"), k, sg(json!({"id": "sg-12345749"})), Expect::Admit),
        create(g("should succeed with a valid security group selector on name"), k, sg(json!({"name": "testname"})), Expect::Admit),
        create(g("should fail when security group selector terms is set to nil"), k, nc(json!({"securityGroupSelectorTerms": null})), Expect::Schema),
        create(g("should fail when no security group selector terms exist"), k, nc(json!({"securityGroupSelectorTerms": []})),
            rule("securityGroupSelectorTerms cannot be empty")),
        create(g("should fail when specifying id with tags"), k, sg(json!({"id": "sg-12345749", "tags": {"test": "testvalue"}})), rule(sg_id_exclusive)),
        create(g("should fail when specifying id with name"), k, sg(json!({"id": "sg-12345749", "name": "my-security-group"})), rule(sg_id_exclusive)),
        create(g("should fail when specifying name with tags"), k, sg(json!({"name": "my-security-group", "tags": {"test": "testvalue"}})),
            rule("'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term")),
    ]);

    let r = |it: &str| c("CapacityReservationSelectorTerms", it);
    let cr = |term: Value| nc(json!({"capacityReservationSelectorTerms": [term]}));
    cases.extend(selector_term_cases(
        "CapacityReservationSelectorTerms",
        "capacityReservationSelectorTerms",
        CR_TERM_EMPTY,
    ));
    cases.extend([
        create(r("should succeed with a valid capacity reservation selector on id"), k, cr(json!({"id": "cr-12345749"})), Expect::Admit),
        create(r("should succeed for a valid ownerID"), k, cr(json!({"ownerID": "012345678901", "tags": {"test": "testvalue"}})), Expect::Admit),
        create(r("should fail with a capacity reservation selector on a malformed id"), k, cr(json!({"id": "r-12345749"})), Expect::Schema),
        create(r("should succeed when capacity group selector terms is set to nil"), k, nc(json!({"capacityReservationSelectorTerms": null})), Expect::Admit),
        create(r("should fail when specifying id with tags in a single term"), k, cr(json!({"id": "cr-12345749", "tags": {"test": "testvalue"}})), rule(CR_ID_EXCLUSIVE)),
        create(r("should fail when specifying id with ownerID in a single term"), k, cr(json!({"id": "cr-12345749", "ownerID": "012345678901"})), rule(CR_ID_EXCLUSIVE)),
        create(r("should fail when the ownerID is malformed"), k, cr(json!({"ownerID": "01234567890", "tags": {"test": "testvalue"}})), Expect::Schema),
        create(r("should fail when the ownerID is set by itself"), k, cr(json!({"ownerID": "012345678901"})), rule(CR_TERM_EMPTY)),
        create(r("should succeed with a valid instanceMatchCriteria 'open'"), k, cr(json!({"instanceMatchCriteria": "open"})), Expect::Admit),
        create(r("should succeed with a valid instanceMatchCriteria 'targeted'"), k, cr(json!({"instanceMatchCriteria": "targeted"})), Expect::Admit),
        create(r("should succeed with instanceMatchCriteria combined with tags"), k, cr(json!({"instanceMatchCriteria": "open", "tags": {"test": "testvalue"}})), Expect::Admit),
        create(r("should succeed with instanceMatchCriteria combined with ownerID and tags"), k,
            cr(json!({"instanceMatchCriteria": "targeted", "ownerID": "012345678901", "tags": {"test": "testvalue"}})), Expect::Admit),
        create(r("should fail with invalid instanceMatchCriteria value"), k, cr(json!({"instanceMatchCriteria": "invalid"})), Expect::Schema),
        create(r("should fail when specifying id with instanceMatchCriteria"), k, cr(json!({"id": "cr-12345749", "instanceMatchCriteria": "open"})), rule(CR_ID_EXCLUSIVE)),
    ]);

    let a = |it: &str| c("AMISelectorTerms", it);
    let ami = |terms: Value| nc(json!({ "amiSelectorTerms": terms }));
    cases.extend(selector_term_cases(
        "AMISelectorTerms",
        "amiSelectorTerms",
        AMI_TERM_EMPTY,
    ));
    cases.extend([
        create(a("should succeed with a valid ami selector on alias"), k, ami(json!([{"alias": "al2023@latest"}])), Expect::Admit),
        create(a("should succeed with a valid ami selector on id"), k, ami(json!([{"id": "ami-12345749"}])), Expect::Admit),
        create(a("should succeed with a valid ami selector on name"), k, ami(json!([{"name": "testname"}])), Expect::Admit),
        create(a("should succeed with a valid ami selector on name and owner"), k, ami(json!([{"name": "testname", "owner": "testowner"}])), Expect::Admit),
        create(a("should succeed when an ami selector term has an owner key with tags"), k,
            ami(json!([{"owner": "testowner", "tags": {"test": "testvalue"}}])), Expect::Admit),
        create(a("should fail when specifying alias with other terms"), k, ami(json!([{"alias": "al2023@latest"}, {"id": "ami-1234749"}])),
            rule("'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms")),
        create(a("should fail for an alias with an invalid family"), k, ami(json!([{"alias": "ubuntu@latest"}])),
            rule("family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'")),
    ]);
    for other in [
        json!({"alias": "al2023@latest"}),
        json!({"tags": {"test": "testvalue"}}),
        json!({"name": "my-custom-ami"}),
        json!({"owner": "123456789"}),
    ] {
        let mut term = json!({"id": "ami-1234749"});
        merge(&mut term, &other);
        cases.push(create(
            a("should fail when specifying id with other fields"),
            k,
            ami(json!([term])),
            rule(AMI_ID_EXCLUSIVE),
        ));
    }
    for other in [
        json!({"id": "ami-1234749"}),
        json!({"tags": {"test": "testvalue"}}),
        json!({"name": "my-custom-ami"}),
        json!({"owner": "123456789"}),
    ] {
        let mut term = json!({"alias": "al2023@latest"});
        merge(&mut term, &other);
        cases.push(create(
            a("should fail when specifying alias with other fields"),
            k,
            ami(json!([term])),
            rule(AMI_ALIAS_EXCLUSIVE),
        ));
    }
    for (alias, family) in [
        ("al2@latest", "AL2"),
        ("al2@v20240625", "AL2"),
        ("al2023@latest", "AL2023"),
        ("al2023@v20240625", "AL2023"),
        ("bottlerocket@latest", "Bottlerocket"),
        ("bottlerocket@1.10.0", "Bottlerocket"),
        ("windows2019@latest", "Windows2019"),
        ("windows2022@latest", "Windows2022"),
        ("windows2025@latest", "Windows2025"),
    ] {
        cases.push(create(
            a("should succeed for valid aliases"),
            k,
            nc(json!({"amiFamily": family, "amiSelectorTerms": [{"alias": alias}]})),
            Expect::Admit,
        ));
    }
    for alias in ["@latest", "al2023", "al2023@", "al2023-latest"] {
        cases.push(create(
            a("should fail for incorrectly formatted aliases"),
            k,
            ami(json!([{"alias": alias}])),
            rule(ALIAS_FORMAT),
        ));
    }
    for alias in [
        "windows2019@v1.0.0",
        "windows2022@v1.0.0",
        "windows2025@v1.0.0",
    ] {
        cases.push(create(
            a("should fail when specifying non-latest versions with Windows aliases"),
            k,
            ami(json!([{"alias": alias}])),
            rule("windows families may only specify version 'latest'"),
        ));
    }

    let kubelet = |settings: Value| nc(json!({ "kubelet": settings }));
    let signals = json!({"memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "15%",
                         "imagefs.available": "5%", "imagefs.inodesFree": "5%", "pid.available": "5%"});
    let grace = json!({"memory.available": "1m0s", "nodefs.available": "1m30s", "nodefs.inodesFree": "5m0s",
                       "imagefs.available": "1h0m0s", "imagefs.inodesFree": "24h0m0s", "pid.available": "1m0s"});
    let kc = |it: &str| c("Kubelet", it);
    cases.extend([
        create(kc("should fail on kubeReserved with invalid keys"), k, kubelet(json!({"kubeReserved": {"pods": "2"}})),
            Expect::Rule(format!("valid keys for kubeReserved are {RESERVED}"))),
        create(kc("should fail on systemReserved with invalid keys"), k, kubelet(json!({"systemReserved": {"pods": "2"}})),
            Expect::Rule(format!("valid keys for systemReserved are {RESERVED}"))),
        create("kerf: a negative kubeReserved quantity".to_owned(), k, kubelet(json!({"kubeReserved": {"cpu": "-1"}})),
            rule("kubeReserved value cannot be a negative resource quantity")),
        create("kerf: a negative systemReserved quantity".to_owned(), k, kubelet(json!({"systemReserved": {"memory": "-1Gi"}})),
            rule("systemReserved value cannot be a negative resource quantity")),
        create(kc("Eviction Hard: should succeed on evictionHard with valid keys"), k, kubelet(json!({"evictionHard": signals})), Expect::Admit),
        create(kc("Eviction Hard: should fail on evictionHard with invalid keys"), k, kubelet(json!({"evictionHard": {"memory": "5%"}})),
            Expect::Rule(format!("valid keys for evictionHard are {SIGNALS}"))),
        create(kc("Eviction Soft: should succeed on evictionSoft with valid keys"), k,
            kubelet(json!({"evictionSoft": signals, "evictionSoftGracePeriod": grace})), Expect::Admit),
        create(kc("Eviction Soft: should fail on evictionSoft with invalid keys"), k,
            kubelet(json!({"evictionSoft": {"memory": "5%"}, "evictionSoftGracePeriod": {"memory": "1m0s"}})),
            Expect::Rule(format!("valid keys for evictionSoft are {SIGNALS}"))),
        create(kc("Eviction Soft: should fail when eviction soft doesn't have matching grace period"), k,
            kubelet(json!({"evictionSoft": {"memory.available": "200Mi"}})), Expect::EvalError),
        create(kc("GCThresholdPercent: should succeed on a valid imageGCHighThresholdPercent"), k,
            kubelet(json!({"imageGCHighThresholdPercent": 10})), Expect::Admit),
        create(kc("GCThresholdPercent: should fail when imageGCHighThresholdPercent is less than imageGCLowThresholdPercent"), k,
            kubelet(json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})),
            rule("imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent")),
        create(kc("Eviction Soft Grace Period: should fail on evictionSoftGracePeriod with invalid keys"), k,
            kubelet(json!({"evictionSoftGracePeriod": {"memory": "1m0s"}})),
            Expect::Rule(format!("valid keys for evictionSoftGracePeriod are {SIGNALS}"))),
        create(kc("Eviction Soft Grace Period: should fail when eviction soft grace period doesn't have matching threshold"), k,
            kubelet(json!({"evictionSoftGracePeriod": {"memory.available": "1m0s"}})), Expect::EvalError),
        create("kerf: an evictionSoft signal whose grace period is missing".to_owned(), k,
            kubelet(json!({"evictionSoft": {"memory.available": "5%", "pid.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m0s"}})),
            rule("evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod")),
        create("kerf: an evictionSoftGracePeriod signal without a threshold".to_owned(), k,
            kubelet(json!({"evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m0s", "pid.available": "1m0s"}})),
            rule("evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft")),
    ]);
    for value in ["5%3", "110%", "110GB"] {
        cases.push(create(
            kc("Eviction Hard: should fail on an invalid value in evictionHard"),
            k,
            kubelet(json!({"evictionHard": {"memory.available": value}})),
            Expect::Schema,
        ));
        cases.push(create(kc("Eviction Soft: should fail on an invalid value in evictionSoft"), k,
            kubelet(json!({"evictionSoft": {"memory.available": value}, "evictionSoftGracePeriod": {"memory.available": "1m0s"}})), Expect::Schema));
    }

    let m = |it: &str| c("MetadataOptions", it);
    cases.push(create(m("should succeed for valid inputs"), k,
        nc(json!({"metadataOptions": {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled", "httpPutResponseHopLimit": 34, "httpTokens": "optional"}})),
        Expect::Admit));
    for options in [
        json!({"httpEndpoint": "test"}),
        json!({"httpProtocolIPv6": "test"}),
        json!({"httpPutResponseHopLimit": -5}),
        json!({"httpTokens": "test"}),
    ] {
        cases.push(create(
            m("should fail for an invalid option"),
            k,
            nc(json!({"metadataOptions": options})),
            Expect::Schema,
        ));
    }

    let b = |it: &str| c("BlockDeviceMappings", it);
    let device = |name: &str, ebs: Value, root: bool| {
        let mut mapping = json!({"deviceName": name, "ebs": ebs});
        if root {
            mapping["rootVolume"] = json!(true);
        }
        mapping
    };
    let mappings = |list: Vec<Value>| nc(json!({ "blockDeviceMappings": list }));
    cases.extend([
        create(
            b("should succeed if more than one root volume is specified"),
            k,
            mappings(vec![
                device("map-device-1", json!({"volumeSize": "500G"}), true),
                device("map-device-2", json!({"volumeSize": "50T"}), false),
            ]),
            Expect::Admit,
        ),
        create(
            b("should succeed for valid VolumeSize in G"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "58G"}),
                false,
            )]),
            Expect::Admit,
        ),
        create(
            b("should succeed for valid VolumeSize in T"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "45T"}),
                false,
            )]),
            Expect::Admit,
        ),
        create(
            b("should fail if more than one root volume is specified"),
            k,
            mappings(vec![
                device("map-device-1", json!({"volumeSize": "50G"}), true),
                device("map-device-2", json!({"volumeSize": "50G"}), true),
            ]),
            rule("must have only one blockDeviceMappings with rootVolume"),
        ),
        create(
            b("should fail VolumeSize is less then 1Gi/1G"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "1m"}),
                false,
            )]),
            Expect::Schema,
        ),
        create(
            b("should fail VolumeSize is greater then 64T"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "100T"}),
                false,
            )]),
            Expect::Schema,
        ),
        create(
            b("should fail for VolumeSize that do not parse into quantity values"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "0"}),
                false,
            )]),
            Expect::Schema,
        ),
        create(
            b("should fail if VolumeInitializationRate set but SnapshotID not specified"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "0", "volumeInitializationRate": 100}),
                false,
            )]),
            rule("snapshotID must be set when volumeInitializationRate is set"),
        ),
        create(
            b("should fail if VolumeInitializationRate too low"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "0", "snapshotID": "snap-1", "volumeInitializationRate": 99}),
                false,
            )]),
            Expect::Schema,
        ),
        create(
            b("should fail if VolumeInitializationRate too high"),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeSize": "0", "snapshotID": "snap-1", "volumeInitializationRate": 888}),
                false,
            )]),
            Expect::Schema,
        ),
        create(
            "kerf: an EBS volume with neither snapshotID nor volumeSize".to_owned(),
            k,
            mappings(vec![device(
                "map-device-1",
                json!({"volumeType": "gp3"}),
                false,
            )]),
            rule("snapshotID or volumeSize must be defined"),
        ),
    ]);

    let i = |it: &str| c("NetworkInterfaces", it);
    let interface = |card: i64, device: i64, kind: &str| json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind});
    let interfaces = |list: Vec<Value>| nc(json!({ "networkInterfaces": list }));
    cases.extend([
        create(
            i("should succeed with valid multiple network interfaces"),
            k,
            interfaces(vec![
                interface(0, 0, "interface"),
                interface(0, 1, "efa-only"),
                interface(1, 0, "efa-only"),
                interface(1, 1, "interface"),
            ]),
            Expect::Admit,
        ),
        create(
            i("should succeed when network interfaces is empty"),
            k,
            interfaces(vec![]),
            Expect::Admit,
        ),
        create(
            i("should fail with an invalid interface type"),
            k,
            interfaces(vec![interface(0, 0, "efa")]),
            Expect::Schema,
        ),
        create(
            i("should fail with a negative NetworkCardIndex"),
            k,
            interfaces(vec![
                interface(0, 0, "interface"),
                interface(-1, 0, "interface"),
            ]),
            Expect::Schema,
        ),
        create(
            i("should fail with a negative DeviceIndex"),
            k,
            interfaces(vec![
                interface(-1, 0, "interface"),
                interface(0, -1, "interface"),
            ]),
            Expect::Schema,
        ),
        create(
            i("should fail with duplicate Network Interface and Device Index fields"),
            k,
            interfaces(vec![
                interface(0, 0, "interface"),
                interface(0, 1, "efa-only"),
                interface(1, 0, "interface"),
                interface(1, 0, "efa-only"),
            ]),
            rule(INTERFACE_PAIRS),
        ),
        create(
            i("should fail with no primary network interface"),
            k,
            interfaces(vec![interface(0, 1, "interface")]),
            rule(PRIMARY_INTERFACE),
        ),
        create(
            i("should fail when primary network interface is not ENA"),
            k,
            interfaces(vec![interface(0, 0, "efa-only")]),
            rule(PRIMARY_INTERFACE),
        ),
        create(
            i("should fail when multiple EFA devices on one network card"),
            k,
            interfaces(vec![
                interface(0, 0, "interface"),
                interface(1, 0, "efa-only"),
                interface(1, 1, "efa-only"),
            ]),
            rule(INTERFACE_PAIRS),
        ),
    ]);

    let t = |it: &str| c("ConnectionTracking", it);
    let tracking = |settings: Value| nc(json!({ "connectionTracking": settings }));
    cases.push(create(
        t("should fail when connectionTracking is specified with no fields set"),
        k,
        tracking(json!({})),
        rule(CONNECTION_TRACKING),
    ));
    for settings in [
        json!({"tcpEstablishedTimeout": 60}),
        json!({"udpStreamTimeout": 120}),
        json!({"udpTimeout": 45}),
        json!({"tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 60}),
    ] {
        cases.push(create(
            t("should succeed with valid connection tracking settings"),
            k,
            tracking(settings),
            Expect::Admit,
        ));
    }
    for settings in [
        json!({"tcpEstablishedTimeout": 59}),
        json!({"tcpEstablishedTimeout": 432001}),
        json!({"udpStreamTimeout": 59}),
        json!({"udpStreamTimeout": 181}),
        json!({"udpTimeout": 29}),
        json!({"udpTimeout": 61}),
    ] {
        cases.push(create(
            t("should fail when a timeout is out of its range"),
            k,
            tracking(settings),
            Expect::Schema,
        ));
    }

    let ri = |it: &str| c("Role Immutability", it);
    let managed = nc(json!({"role": "test-role"}));
    let unmanaged = nc(json!({"role": null, "instanceProfile": "test-instance-profile"}));
    cases.extend([
        create(
            ri("should fail if role is not defined"),
            k,
            nc(json!({"role": null})),
            rule(EXACTLY_ONE_ROLE),
        ),
        update(
            ri("should succeed when updating the role"),
            k,
            managed.clone(),
            nc(json!({"role": "test-role2"})),
            Expect::Admit,
        ),
        update(
            ri("should succeed to switch between an unmanaged and managed instance profile"),
            k,
            unmanaged.clone(),
            managed.clone(),
            Expect::Admit,
        ),
        update(
            ri("should succeed to switch between a managed and unmanaged instance profile"),
            k,
            managed,
            unmanaged,
            Expect::Admit,
        ),
    ]);

    let o = |it: &str| c("CPUOptions", it);
    cases.extend([
        create(
            o("should succeed with nestedVirtualization enabled"),
            k,
            nc(json!({"cpuOptions": {"nestedVirtualization": "enabled"}})),
            Expect::Admit,
        ),
        create(
            o("should succeed with nestedVirtualization disabled"),
            k,
            nc(json!({"cpuOptions": {"nestedVirtualization": "disabled"}})),
            Expect::Admit,
        ),
        create(
            o("should fail with invalid nestedVirtualization value"),
            k,
            nc(json!({"cpuOptions": {"nestedVirtualization": "invalid"}})),
            Expect::Schema,
        ),
        create(
            o("should succeed with empty CPUOptions"),
            k,
            nc(json!({"cpuOptions": {}})),
            Expect::Admit,
        ),
        create(
            "kerf: a placement group selector with no field".to_owned(),
            k,
            nc(json!({"placementGroupSelector": {}})),
            rule("expected at least one, got none, ['name', 'id']"),
        ),
        create(
            "kerf: a placement group selector with both fields".to_owned(),
            k,
            nc(json!({"placementGroupSelector": {"name": "a", "id": "pg-0123"}})),
            rule("'name' and 'id' are mutually exclusive"),
        ),
    ]);
    cases
}
