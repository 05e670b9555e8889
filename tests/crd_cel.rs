//! The CEL rules of kerf's CRDs (`api/src/cel_rules/`), evaluated as a 1.25+ apiserver would (the test apiserver
//! is 1.20, which ignores them): Karpenter's CEL tests translated into cases, agreement with kerf's webhook (the
//! stricter layer), and random objects that must never panic the evaluation.

#[path = "support/apiserver_cel.rs"]
mod apiserver_cel;
#[path = "support/upstream_cel_cases.rs"]
mod upstream_cel_cases;

use apiserver_cel::{Apiserver, CelError, Kind, Verdict};
use kerf::admission::{KindAdmission, CAPACITYBUFFER, EC2NODECLASS, NODEOVERLAY, NODEPOOL};
use kerf::api::validation::ErrorKind;
use serde_json::{json, Value};
use std::sync::OnceLock;
use upstream_cel_cases::{Case, Expect};

fn apiserver() -> &'static Apiserver {
    static APISERVER: OnceLock<Apiserver> = OnceLock::new();
    APISERVER.get_or_init(|| Apiserver::from_generated_crds().expect("the CRDs' rules compile"))
}

/// The message of each CEL error (its detail after the rendered value), with whether the rule failed to evaluate.
fn cel_detail(verdict: &Verdict) -> Vec<(&str, bool)> {
    verdict
        .cel
        .iter()
        .filter_map(|e| match &e.error.kind {
            ErrorKind::Invalid { detail, .. } => Some((detail.as_str(), e.evaluation_failed)),
            _ => None,
        })
        .collect()
}

/// Why `verdict` is not what `expect` says, if it is not.
fn mismatch(expect: &Expect, verdict: &Verdict) -> Option<String> {
    let details = cel_detail(verdict);
    let ok = match expect {
        Expect::Admit => !verdict.refused(),
        Expect::Rule(message) => details.iter().any(|(d, failed)| !failed && d == message),
        Expect::EvalError => details.iter().any(|(_, failed)| *failed),
        Expect::Schema => !verdict.schema.is_empty(),
    };
    (!ok).then(|| format!("expected {expect:?}, got {verdict:#?}"))
}

#[test]
fn the_crds_carry_karpenters_rules_and_they_compile() {
    let apiserver = apiserver();
    assert_eq!(apiserver.rules(Kind::NodePool).len(), 20);
    assert_eq!(apiserver.rules(Kind::NodeClaim).len(), 10);
    assert_eq!(apiserver.rules(Kind::EC2NodeClass).len(), 54);
    assert_eq!(apiserver.rules(Kind::NodeOverlay).len(), 8);
    assert_eq!(apiserver.rules(Kind::CapacityBuffer).len(), 2);
}

#[test]
fn karpenters_cel_test_cases() {
    let cases = upstream_cel_cases::all();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let verdict = apiserver().validate(case.kind, &case.object, case.old.as_ref());
            mismatch(&case.expect, &verdict).map(|why| format!("{}:\n  {why}", case.source))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} case(s) failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// kerf's webhook for a kind; NodeClaims have none (Karpenter creates them).
fn webhook(kind: Kind) -> Option<&'static KindAdmission> {
    match kind {
        Kind::NodePool => Some(&NODEPOOL),
        Kind::EC2NodeClass => Some(&EC2NODECLASS),
        Kind::NodeOverlay => Some(&NODEOVERLAY),
        Kind::CapacityBuffer => Some(&CAPACITYBUFFER),
        Kind::NodeClaim => None,
    }
}

/// Upstream writes four list rules as `!self.all(x, …)` (subnet, security-group and capacity-reservation terms),
/// and `all` holds for an empty list: Karpenter's apiserver refuses an empty list of those terms with the rule's
/// mutual-exclusion message. kerf's webhook checks those rules term by term (kerf+, stricter for lists with terms)
/// and refuses an empty list with one message of its own ("cannot be empty" for subnets and security groups):
/// refused either way, so only the message differs.
fn vacuous_all(error: &CelError, object: &Value) -> bool {
    error.rule.starts_with("!self.all(")
        && object.pointer(&error.error.path.json_pointer()) == Some(&json!([]))
}

/// Where CEL refuses an object the webhook admits: the webhook is meant to be the stricter layer.
fn laxer_webhook(kind: Kind, object: &Value, old: Option<&Value>) -> Option<String> {
    let webhook = webhook(kind)?;
    let verdict = apiserver().validate(kind, object, old);
    let refusals: Vec<String> = verdict.cel.iter().map(|e| e.error.to_string()).collect();
    if refusals.is_empty() {
        return None;
    }
    let admitted = webhook.admit(object, old);
    admitted.errors.is_empty().then(|| {
        format!(
            "CEL refuses {refusals:?} but the webhook admits {object}{}",
            old.map(|o| format!(" (update from {o})"))
                .unwrap_or_default()
        )
    })
}

/// Where a CEL rule that returned false is refused by the webhook without that rule's error (path and message).
fn other_message(kind: Kind, object: &Value, old: Option<&Value>) -> Vec<String> {
    let Some(webhook) = webhook(kind) else {
        return Vec::new();
    };
    let verdict = apiserver().validate(kind, object, old);
    let admitted = webhook.admit(object, old);
    let rendered: Vec<String> = admitted.errors.iter().map(ToString::to_string).collect();
    verdict
        .cel
        .iter()
        .filter(|e| !e.evaluation_failed && !vacuous_all(e, object))
        .map(|e| e.error.to_string())
        .filter(|cel| !rendered.contains(cel))
        .map(|cel| format!("{cel}\n    webhook: {rendered:?}\n    object: {object}"))
        .collect()
}

#[test]
fn the_webhook_refuses_whatever_cel_refuses() {
    let cases: Vec<Case> = upstream_cel_cases::all();
    let laxer: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            laxer_webhook(c.kind, &c.object, c.old.as_ref())
                .map(|why| format!("{}: {why}", c.source))
        })
        .collect();
    assert!(laxer.is_empty(), "{}", laxer.join("\n"));
    let messages: Vec<String> = cases
        .iter()
        .flat_map(|c| {
            other_message(c.kind, &c.object, c.old.as_ref())
                .into_iter()
                .map(|m| format!("{}: {m}", c.source))
        })
        .collect();
    assert!(
        messages.is_empty(),
        "the webhook refuses without CEL's message:\n{}",
        messages.join("\n")
    );
}

#[test]
fn every_rule_has_a_case_it_refuses() {
    let cases = upstream_cel_cases::all();
    let expected: Vec<(Kind, &str)> = cases
        .iter()
        .filter_map(|c| match &c.expect {
            Expect::Rule(message) => Some((c.kind, message.as_str())),
            _ => None,
        })
        .collect();
    for kind in [
        Kind::NodePool,
        Kind::NodeClaim,
        Kind::EC2NodeClass,
        Kind::NodeOverlay,
        Kind::CapacityBuffer,
    ] {
        for rule in apiserver().rules(kind) {
            assert!(
                expected.contains(&(kind, rule.message.as_str())),
                "no case refused by {} rule {:?} at {}",
                kind.name(),
                rule.message,
                rule.path()
            );
        }
    }
}

/// The bounds the apiserver's CEL cost estimate relies on (maxItems, maxProperties, maxLength of what the rules
/// iterate over): without them a 1.25+ apiserver refuses the CRD. They are Karpenter's, at the same paths.
#[test]
fn the_schema_keeps_the_bounds_cel_costs_rely_on() {
    let bounds: &[(&str, &str, &str, u64)] = &[
        ("NodePool", "spec.disruption.budgets", "maxItems", 50),
        (
            "NodePool",
            "spec.template.metadata.labels",
            "maxProperties",
            100,
        ),
        (
            "NodePool",
            "spec.template.spec.requirements",
            "maxItems",
            100,
        ),
        (
            "NodePool",
            "spec.template.spec.requirements[].key",
            "maxLength",
            316,
        ),
        ("NodeClaim", "spec.requirements", "maxItems", 100),
        ("NodeOverlay", "spec.requirements", "maxItems", 100),
        ("NodeOverlay", "spec.requirements[].key", "maxLength", 316),
        ("NodeClaim", "spec.requirements[].key", "maxLength", 316),
        ("EC2NodeClass", "spec.amiSelectorTerms", "maxItems", 30),
        (
            "EC2NodeClass",
            "spec.amiSelectorTerms[].alias",
            "maxLength",
            30,
        ),
        (
            "EC2NodeClass",
            "spec.amiSelectorTerms[].tags",
            "maxProperties",
            20,
        ),
        ("EC2NodeClass", "spec.subnetSelectorTerms", "maxItems", 30),
        (
            "EC2NodeClass",
            "spec.subnetSelectorTerms[].tags",
            "maxProperties",
            20,
        ),
        (
            "EC2NodeClass",
            "spec.securityGroupSelectorTerms",
            "maxItems",
            30,
        ),
        (
            "EC2NodeClass",
            "spec.securityGroupSelectorTerms[].tags",
            "maxProperties",
            20,
        ),
        (
            "EC2NodeClass",
            "spec.capacityReservationSelectorTerms",
            "maxItems",
            30,
        ),
        (
            "EC2NodeClass",
            "spec.capacityReservationSelectorTerms[].tags",
            "maxProperties",
            20,
        ),
        ("EC2NodeClass", "spec.blockDeviceMappings", "maxItems", 50),
        ("EC2NodeClass", "spec.networkInterfaces", "maxItems", 150),
    ];
    let crds = kerf::api::crds::with_cel_rules();
    for (kind, path, key, value) in bounds {
        let crd = crds
            .iter()
            .find(|c| c.spec.names.kind == *kind)
            .expect("kind");
        let mut node = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema")
            ["openAPIV3Schema"]
            .clone();
        for field in path.split('.') {
            let (name, items) = field
                .strip_suffix("[]")
                .map_or((field, false), |n| (n, true));
            node = node["properties"][name].clone();
            if items {
                node = node["items"].clone();
            }
        }
        assert_eq!(node[*key].as_u64(), Some(*value), "{kind} {path} {key}");
    }
}

mod random {
    //! Random objects: the webhook refuses whatever CEL refuses, and nothing panics the evaluation.

    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::option;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::Map;

    /// A JSON object of the fields that are present.
    fn fields(entries: Vec<(&str, Option<Value>)>) -> Value {
        Value::Object(
            entries
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                .collect::<Map<_, _>>(),
        )
    }

    fn text(pool: &'static [&'static str]) -> impl Strategy<Value = Value> {
        select(pool).prop_map(|s| json!(s))
    }

    fn tags(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
        btree_map(select(keys), select(&["", "v", "*"][..]), 0..3).prop_map(|m| json!(m))
    }

    fn requirement() -> impl Strategy<Value = Value> {
        let keys = &[
            "karpenter.sh/capacity-type",
            "karpenter.sh/nodepool",
            "karpenter.sh/foo",
            "notkarpenter.sh/x",
            "kubernetes.io/hostname",
            "karpenter.k8s.aws/instance-family",
            "karpenter.k8s.aws/foo",
            "karpenter.k8s.aws/ec2nodeclass",
            "topology.kubernetes.io/zone",
            "team",
        ][..];
        let operators = &[
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "Gt",
            "Lt",
            "Gte",
            "Lte",
        ][..];
        let values = &["1", "-1", "a", "0", "99999999999999999999", "spot", ""][..];
        (
            select(keys),
            select(operators),
            option::of(vec(select(values), 0..3)),
            option::of(select(&[1i64, 2, 3][..])),
        )
            .prop_map(|(key, operator, values, min)| {
                fields(vec![
                    ("key", Some(json!(key))),
                    ("operator", Some(json!(operator))),
                    ("values", values.map(|v| json!(v))),
                    ("minValues", min.map(|m| json!(m))),
                ])
            })
    }

    /// Mostly valid NodePools: each part is usually Karpenter's default or a valid value, sometimes random, so
    /// that a CEL refusal is often the only thing wrong with the object.
    fn nodepool() -> impl Strategy<Value = Value> {
        let labels = btree_map(
            select(
                &[
                    "team",
                    "karpenter.sh/capacity-type",
                    "karpenter.sh/nodepool",
                    "karpenter.sh/x",
                    "kubernetes.io/hostname",
                    "karpenter.k8s.aws/instance-size",
                    "karpenter.k8s.aws/x",
                ][..],
            ),
            select(&["a", ""][..]),
            0..3,
        );
        let valid_requirements =
            Just(json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]));
        let requirements = prop_oneof![3 => valid_requirements, 2 => vec(requirement(), 0..3).prop_map(Value::from)];
        let reference = prop_oneof![
            4 => Just(json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})),
            1 => (text(&["karpenter.k8s.aws", "example.com", ""]), text(&["EC2NodeClass", "Other", ""]), text(&["default", ""]))
                .prop_map(|(group, kind, name)| json!({"group": group, "kind": kind, "name": name})),
        ];
        let budget = (
            text(&["10%", "0"]),
            option::of(text(&["@daily", "0 9 * * 1"])),
            option::of(text(&["1h", "10m"])),
        )
            .prop_map(|(nodes, schedule, duration)| {
                fields(vec![
                    ("nodes", Some(nodes)),
                    ("schedule", schedule),
                    ("duration", duration),
                ])
            });
        (
            requirements,
            option::weighted(0.3, labels),
            reference,
            option::weighted(0.3, select(&[0i64, 3][..])),
            option::weighted(0.2, select(&[1i64, 50][..])),
            option::weighted(0.3, btree_map(select(&["cpu", "nodes", "memory"][..]), Just("10"), 0..3)),
            option::weighted(0.3, vec(budget, 0..3)),
        )
            .prop_map(|(requirements, labels, reference, replicas, weight, limits, budgets)| {
                let template = json!({
                    "metadata": fields(vec![("labels", labels.map(|l| json!(l)))]),
                    "spec": {"nodeClassRef": reference, "requirements": requirements},
                });
                let spec = fields(vec![
                    ("template", Some(template)),
                    ("replicas", replicas.map(|r| json!(r))),
                    ("weight", weight.map(|w| json!(w))),
                    ("limits", limits.map(|l| json!(l))),
                    ("disruption", budgets.map(|b| json!({"budgets": b}))),
                ]);
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "random"}, "spec": spec})
            })
    }

    fn ami_term() -> impl Strategy<Value = Value> {
        (
            option::of(text(&[
                "al2023@latest",
                "al2@v20240625",
                "bottlerocket@latest",
                "windows2022@latest",
                "windows2019@v1",
                "ubuntu@latest",
                "@latest",
                "al2023",
            ])),
            option::of(text(&["ami-123"])),
            option::of(text(&["name"])),
            option::of(text(&["self"])),
            option::of(tags(&["team", ""])),
            option::of(text(&["/aws/service/x"])),
        )
            .prop_map(|(alias, id, name, owner, tags, ssm)| {
                fields(vec![
                    ("alias", alias),
                    ("id", id),
                    ("name", name),
                    ("owner", owner),
                    ("tags", tags),
                    ("ssmParameter", ssm),
                ])
            })
    }

    fn selector_term(id: &'static str, with_name: bool) -> impl Strategy<Value = Value> {
        (
            option::of(Just(json!(id))),
            option::of(text(&["sg-name"])),
            option::of(tags(&["team", ""])),
        )
            .prop_map(move |(id, name, tags)| {
                fields(vec![
                    ("id", id),
                    ("name", name.filter(|_| with_name)),
                    ("tags", tags),
                ])
            })
    }

    fn kubelet() -> impl Strategy<Value = Value> {
        let signals = &["memory.available", "pid.available", "memory"][..];
        (
            option::of(btree_map(select(signals), Just("5%"), 0..3)),
            option::of(btree_map(select(signals), Just("5%"), 0..3)),
            option::of(btree_map(select(signals), Just("1m0s"), 0..3)),
            option::of(btree_map(
                select(&["cpu", "pods"][..]),
                select(&["1", "-1"][..]),
                0..2,
            )),
            option::of(select(&[10i64, 50, 60][..])),
            option::of(select(&[10i64, 50, 60][..])),
        )
            .prop_map(|(hard, soft, grace, reserved, high, low)| {
                fields(vec![
                    ("evictionHard", hard.map(|m| json!(m))),
                    ("evictionSoft", soft.map(|m| json!(m))),
                    ("evictionSoftGracePeriod", grace.map(|m| json!(m))),
                    ("kubeReserved", reserved.map(|m| json!(m))),
                    ("imageGCHighThresholdPercent", high.map(|n| json!(n))),
                    ("imageGCLowThresholdPercent", low.map(|n| json!(n))),
                ])
            })
    }

    fn nodeclass() -> impl Strategy<Value = Value> {
        let interface = (0i64..2, 0i64..2, select(&["interface", "efa-only"][..]))
            .prop_map(|(card, device, kind)| json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind}));
        let mapping = (
            option::of(any::<bool>()),
            option::of(text(&["20Gi"])),
            option::of(text(&["snap-1", ""])),
            option::of(Just(json!(100))),
        )
            .prop_map(|(root, size, snapshot, rate)| {
                fields(vec![
                    ("deviceName", Some(json!("/dev/xvda"))),
                    ("rootVolume", root.map(|r| json!(r))),
                    (
                        "ebs",
                        Some(fields(vec![
                            ("volumeSize", size),
                            ("snapshotID", snapshot),
                            ("volumeInitializationRate", rate),
                        ])),
                    ),
                ])
            });
        let reservation = (
            option::of(text(&["cr-1"])),
            option::of(text(&["012345678901"])),
            option::of(tags(&["team", ""])),
            option::of(text(&["open"])),
        )
            .prop_map(|(id, owner, tags, criteria)| {
                fields(vec![
                    ("id", id),
                    ("ownerID", owner),
                    ("tags", tags),
                    ("instanceMatchCriteria", criteria),
                ])
            });
        let amis = prop_oneof![3 => Just(json!([{"alias": "al2023@latest"}])), 2 => vec(ami_term(), 1..3).prop_map(Value::from)];
        let valid_terms = Just(json!([{"tags": {"karpenter.sh/discovery": "demo"}}]));
        let subnets = prop_oneof![4 => valid_terms.clone(), 1 => vec(selector_term("subnet-1", false), 0..3).prop_map(Value::from)];
        let groups = prop_oneof![4 => valid_terms, 1 => vec(selector_term("sg-1", true), 0..3).prop_map(Value::from)];
        let identity = prop_oneof![
            4 => Just((Some(json!("role")), None)),
            1 => (option::of(text(&["role", ""])), option::of(text(&["profile", ""]))),
        ];
        (
            (
                option::weighted(0.3, text(&["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2022"])),
                amis,
                identity,
                subnets,
                groups,
            ),
            (
                option::weighted(0.2, vec(reservation, 0..3)),
                option::weighted(0.2, tags(&["", "team", "karpenter.sh/nodepool", "kubernetes.io/cluster/x", "eks:eks-cluster-name"])),
                option::weighted(0.2, kubelet()),
                option::weighted(0.2, vec(interface, 0..4)),
                option::weighted(0.2, vec(mapping, 0..3)),
                option::weighted(0.15, btree_map(select(&["tcpEstablishedTimeout", "udpTimeout"][..]), Just(60), 0..2)),
                option::weighted(0.15, (option::of(text(&["pg"])), option::of(text(&["pg-1"])))),
            ),
        )
            .prop_map(|((family, amis, (role, profile), subnets, groups), (reservations, tags, kubelet, interfaces, mappings, tracking, placement))| {
                let spec = fields(vec![
                    ("amiFamily", family),
                    ("amiSelectorTerms", Some(amis)),
                    ("role", role),
                    ("instanceProfile", profile),
                    ("subnetSelectorTerms", Some(subnets)),
                    ("securityGroupSelectorTerms", Some(groups)),
                    ("capacityReservationSelectorTerms", reservations.map(|r| json!(r))),
                    ("tags", tags),
                    ("kubelet", kubelet),
                    ("networkInterfaces", interfaces.map(|i| json!(i))),
                    ("blockDeviceMappings", mappings.map(|m| json!(m))),
                    ("connectionTracking", tracking.map(|t| json!(t))),
                    ("placementGroupSelector", placement.map(|(name, id)| fields(vec![("name", name), ("id", id)]))),
                ]);
                json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "random"}, "spec": spec})
            })
    }

    /// Any JSON value, a few levels deep.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            "[a-z@/.:*-]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::from),
                btree_map("[a-zA-Z]{1,8}", inner, 0..4).prop_map(|m| json!(m)),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn nodepools(new in nodepool(), old in option::weighted(0.3, nodepool())) {
            let why = laxer_webhook(Kind::NodePool, &new, old.as_ref());
            prop_assert!(why.is_none(), "{}", why.unwrap_or_default());
        }

        #[test]
        fn nodeclasses(new in nodeclass(), old in option::weighted(0.3, nodeclass())) {
            let why = laxer_webhook(Kind::EC2NodeClass, &new, old.as_ref());
            prop_assert!(why.is_none(), "{}", why.unwrap_or_default());
        }

        /// Any value anywhere a rule looks: the evaluation reports errors, it never panics.
        #[test]
        fn any_value_never_panics(
            kind in select(&[Kind::NodePool, Kind::NodeClaim, Kind::EC2NodeClass][..]),
            spec in btree_map(
                select(&["template", "replicas", "limits", "weight", "disruption", "requirements", "nodeClassRef",
                         "amiSelectorTerms", "role", "instanceProfile", "kubelet", "tags", "networkInterfaces",
                         "blockDeviceMappings", "subnetSelectorTerms", "amiFamily", "connectionTracking"][..]),
                any_json(), 0..6),
            old in option::of(any_json()),
        ) {
            let object = json!({"spec": spec});
            let old = old.map(|o| json!({"spec": o}));
            let _ = apiserver().run_rules_unchecked(kind, &object, old.as_ref());
            let _ = apiserver().validate(kind, &object, old.as_ref());
        }
    }
}
