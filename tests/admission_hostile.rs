//! Hostile input through the admission pipeline (issue 15, items 1, 6 and 9): wrong-typed items in long lists,
//! multi-byte text where ASCII is expected, and a mutation fuzz of valid objects. Whatever the input, `admit`
//! returns (no panic), reports every item at its own index, and reports a bounded number of bounded errors.

use kerf::admission::{KindAdmission, EC2NODECLASS, NODEPOOL};
use kerf::api::validation::{
    ErrorKind, FieldError, MAX_DETAIL_CHARS, MAX_ERRORS, MAX_ERRORS_PER_COLLECTION,
    MAX_VALUE_CHARS, MAX_WARNINGS, MAX_WARNING_CHARS,
};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                    "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule", "timeAdded": "2024-01-02T03:04:05Z"}],
                    "startupTaints": [{"key": "init", "effect": "NoExecute"}]
                }
            },
            "limits": {"cpu": 100, "memory": "100Gi"},
            "disruption": {"consolidateAfter": "1m", "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Empty"]}]}
        }
    })
}

fn ec2nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}, {"id": "subnet-0123"}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "capacityReservationSelectorTerms": [{"id": "cr-0123"}],
            "tags": {"team": "a"},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}],
            "kubelet": {"maxPods": 110, "systemReserved": {"cpu": "100m"}, "evictionHard": {"memory.available": "5%"}},
            "metadataOptions": {"httpTokens": "required"}
        }
    })
}

/// Every NodePool and EC2NodeClass of the shipped examples, with the two objects above.
fn valid_objects() -> Vec<(&'static KindAdmission, Value)> {
    let mut objects = vec![(&NODEPOOL, nodepool()), (&EC2NODECLASS, ec2nodeclass())];
    for file in ["default.yaml", "gpu.yaml", "spot-fallback.yaml"] {
        let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for document in serde_yaml::Deserializer::from_str(&text) {
            let Ok(object) = Value::deserialize(document) else {
                continue;
            };
            match object["kind"].as_str() {
                Some("NodePool") => objects.push((&NODEPOOL, object)),
                Some("EC2NodeClass") => objects.push((&EC2NODECLASS, object)),
                _ => {}
            }
        }
    }
    objects
}

fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer has a parent");
    match object.pointer_mut(parent).expect("parent exists") {
        Value::Array(items) => items[last.parse::<usize>().expect("index")] = value,
        Value::Object(fields) => {
            fields.insert(last.to_owned(), value);
        }
        _ => panic!("parent of {pointer} is not a container"),
    }
}

fn with(mut object: Value, pointer: &str, value: Value) -> Value {
    set(&mut object, pointer, value);
    object
}

fn rendered(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// The most bytes one rendered error can take: its path (a few schema fields and elided map keys), the
/// quoted value and the detail, all bounded.
const MAX_ERROR_BYTES: usize = 4 * (2 * MAX_VALUE_CHARS + MAX_DETAIL_CHARS + 512);

/// The bounds every admission must respect, whatever it was given.
fn assert_bounded(kind: &KindAdmission, admitted: &kerf::admission::Admitted) {
    let errors = &admitted.errors;
    let summaries = errors
        .iter()
        .filter(|e| matches!(e.kind, ErrorKind::Omitted { .. }))
        .count();
    assert!(
        errors.len() - summaries <= MAX_ERRORS,
        "{} errors",
        errors.len()
    );
    assert!(summaries <= MAX_ERRORS + 1, "{summaries} summaries");
    for error in errors {
        let text = error.to_string();
        assert!(
            text.len() <= MAX_ERROR_BYTES,
            "{} bytes: {text:.200}",
            text.len()
        );
    }
    assert!(admitted.warnings.len() <= MAX_WARNINGS + 1);
    for warning in &admitted.warnings {
        // Characters, then UTF-8 bytes of at most 4 each, plus the elision note.
        assert!(
            warning.len() <= 4 * MAX_WARNING_CHARS + 64,
            "{warning:.200}"
        );
    }
    if let Some(invalid) = admitted.rejection(kind) {
        let message = invalid.to_string();
        assert!(message.len() <= (MAX_ERRORS + summaries) * (MAX_ERROR_BYTES + 2) + 1024);
    }
}

// ---- item 1: long lists of wrong-typed items -----------------------------------------------------------------

/// `n` items that are not objects: numbers, strings, nested arrays.
fn junk(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| match i % 3 {
                0 => json!(i),
                1 => json!("x"),
                _ => json!([[i]]),
            })
            .collect(),
    )
}

#[test]
fn wrong_typed_items_in_long_lists_give_a_bounded_report() {
    let n = 20_000;
    let mut np = nodepool();
    for pointer in [
        "/spec/template/spec/requirements",
        "/spec/template/spec/taints",
        "/spec/template/spec/startupTaints",
        "/spec/disruption/budgets",
    ] {
        set(&mut np, pointer, junk(n));
    }
    let admitted = NODEPOOL.admit(&np, None);
    assert_bounded(&NODEPOOL, &admitted);
    let errors = rendered(&admitted.errors);
    let reqs: Vec<&String> = errors
        .iter()
        .filter(|e| e.starts_with("spec.template.spec.requirements["))
        .collect();
    assert_eq!(reqs.len(), MAX_ERRORS_PER_COLLECTION, "{errors:#?}");
    assert_eq!(
        reqs[0],
        r#"spec.template.spec.requirements[0]: Invalid value: "integer": spec.template.spec.requirements[0] in body must be of type object: "integer""#
    );
    assert!(
        errors.contains(&format!(
            "... and {} more errors in spec.template.spec.requirements",
            n - MAX_ERRORS_PER_COLLECTION
        )),
        "{errors:#?}"
    );

    let mut nc = ec2nodeclass();
    for field in [
        "amiSelectorTerms",
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "capacityReservationSelectorTerms",
        "blockDeviceMappings",
        "networkInterfaces",
    ] {
        set(&mut nc, &format!("/spec/{field}"), junk(n));
    }
    let admitted = EC2NODECLASS.admit(&nc, None);
    assert_bounded(&EC2NODECLASS, &admitted);
    let errors = rendered(&admitted.errors);
    assert!(
        errors.contains(&format!(
            "... and {} more errors in spec.subnetSelectorTerms",
            n - MAX_ERRORS_PER_COLLECTION
        )),
        "{errors:#?}"
    );
}

#[test]
fn a_huge_value_is_quoted_elided() {
    let key = "é".repeat(100_000);
    let np = with(
        nodepool(),
        "/spec/template/spec/requirements/0/key",
        json!(key),
    );
    let admitted = NODEPOOL.admit(&np, None);
    assert_bounded(&NODEPOOL, &admitted);
    let elided = format!("... ({} more characters)", 100_000 - MAX_VALUE_CHARS);
    let errors = rendered(&admitted.errors);
    assert!(errors.iter().any(|e| e.contains(&elided)), "{errors:.400?}");
}

#[test]
fn map_entries_are_capped_like_list_items() {
    let labels: serde_json::Map<String, Value> = (0..5_000)
        .map(|i| (format!("k{i}"), json!(format!("-bad{i}"))))
        .collect();
    let np = with(
        nodepool(),
        "/spec/template/metadata/labels",
        Value::Object(labels),
    );
    let admitted = NODEPOOL.admit(&np, None);
    assert_bounded(&NODEPOOL, &admitted);
    let errors = rendered(&admitted.errors);
    assert!(
        errors.iter().any(|e| e.starts_with("... and ")
            && e.ends_with("more errors in spec.template.metadata.labels")),
        "{errors:#?}"
    );
}

// ---- item 6: date-times are parsed without indexing bytes ----------------------------------------------------

#[test]
fn a_multi_byte_date_time_is_an_error_not_a_panic() {
    for time in ["aé12345", "2024-01-02T03:04:05é:00", "é"] {
        let np = with(
            nodepool(),
            "/spec/template/spec/taints/0/timeAdded",
            json!(time),
        );
        let errors = rendered(&NODEPOOL.admit(&np, None).errors);
        let quoted = serde_json::to_string(time).expect("a string quotes");
        assert_eq!(
            errors,
            vec![format!("spec.template.spec.taints[0].timeAdded: Invalid value: {quoted}: spec.template.spec.taints[0].timeAdded in body must be of type date-time: {quoted}")]
        );
    }
}

// ---- item 9: rules see every item at its own index -----------------------------------------------------------

const REQS: &str = "/spec/template/spec/requirements";

fn restricted(i: usize) -> String {
    format!(
        r#"spec.template.spec.requirements[{i}].key: Invalid value: "string": label domain "karpenter.sh" is restricted"#
    )
}

fn not_an_object(i: usize) -> String {
    format!(
        r#"spec.template.spec.requirements[{i}]: Invalid value: "integer": spec.template.spec.requirements[{i}] in body must be of type object: "integer""#
    )
}

#[test]
fn an_item_after_a_wrong_typed_one_is_reported_at_its_own_index() {
    let np = with(
        nodepool(),
        REQS,
        json!([5, {"key": "karpenter.sh/foo", "operator": "Exists"}]),
    );
    assert_eq!(
        rendered(&NODEPOOL.admit(&np, None).errors),
        vec![not_an_object(0), restricted(1)]
    );
    let bogus = with(
        nodepool(),
        REQS,
        json!([5, {"key": "kubernetes.io/arch", "operator": "Bogus", "values": ["amd64"]}]),
    );
    let errors = rendered(&NODEPOOL.admit(&bogus, None).errors);
    assert_eq!(errors[0], not_an_object(0));
    assert!(
        errors[1].starts_with(
            r#"spec.template.spec.requirements[1].operator: Unsupported value: "Bogus""#
        ),
        "{errors:#?}"
    );
}

#[test]
fn items_nine_and_ten_are_removed_in_numeric_order() {
    // [9] and [10] are wrong-typed; sorted as text, "10" came before "9" and the wrong items were removed.
    let mut items: Vec<Value> = (0..12)
        .map(|i| json!({"key": format!("team{i}"), "operator": "Exists"}))
        .collect();
    items[9] = json!(9);
    items[10] = json!(10);
    items[11] = json!({"key": "karpenter.sh/foo", "operator": "Exists"});
    let np = with(nodepool(), REQS, Value::Array(items));
    assert_eq!(
        rendered(&NODEPOOL.admit(&np, None).errors),
        vec![not_an_object(9), not_an_object(10), restricted(11)]
    );
}

#[test]
fn the_ratchet_does_not_admit_a_new_invalid_item_behind_an_old_wrong_typed_one() {
    let old = with(
        nodepool(),
        REQS,
        json!([5, {"key": "team", "operator": "Exists"}]),
    );
    let new = with(
        nodepool(),
        REQS,
        json!([5, {"key": "karpenter.sh/foo", "operator": "Exists"}]),
    );
    // The wrong-typed item did not change, so its error ratchets; the new key's does not.
    assert_eq!(
        rendered(&NODEPOOL.admit(&new, Some(&old)).errors),
        vec![restricted(1)]
    );
    assert_eq!(NODEPOOL.admit(&old, Some(&old)).errors, vec![]);
}

const IN_WITHOUT_VALUES: &str = r#"spec.template.spec.requirements: Invalid value: "array": requirements with operator 'In' must have a value defined"#;

#[test]
fn list_rules_still_see_the_items_next_to_a_wrong_typed_one() {
    let old = with(
        nodepool(),
        REQS,
        json!([5, {"key": "team", "operator": "Exists"}]),
    );
    let new = with(
        nodepool(),
        REQS,
        json!([5, {"key": "team", "operator": "In"}]),
    );
    assert_eq!(
        rendered(&NODEPOOL.admit(&new, None).errors),
        vec![not_an_object(0), IN_WITHOUT_VALUES.to_owned()]
    );
    assert_eq!(
        rendered(&NODEPOOL.admit(&new, Some(&old)).errors),
        vec![IN_WITHOUT_VALUES.to_owned()]
    );
}

#[test]
fn a_list_left_empty_by_the_removal_is_not_called_empty() {
    let nc = with(ec2nodeclass(), "/spec/subnetSelectorTerms", json!([5]));
    assert_eq!(
        rendered(&EC2NODECLASS.admit(&nc, None).errors),
        vec![
            r#"spec.subnetSelectorTerms[0]: Invalid value: "integer": spec.subnetSelectorTerms[0] in body must be of type object: "integer""#
        ]
    );
}

#[test]
fn nested_and_other_lists_keep_their_indexes() {
    let np = with(
        nodepool(),
        "/spec/disruption/budgets",
        json!([5, {"nodes": "1", "reasons": ["Empty", 3, "Empty"]}]),
    );
    let errors = rendered(&NODEPOOL.admit(&np, None).errors);
    assert!(
        errors.contains(
            &r#"spec.disruption.budgets[1].reasons[2]: Duplicate value: "Empty""#.to_owned()
        ),
        "{errors:#?}"
    );
    let nc = with(
        ec2nodeclass(),
        "/spec/subnetSelectorTerms",
        json!(["subnet-1", {"tags": {"a": ""}}]),
    );
    let errors = rendered(&EC2NODECLASS.admit(&nc, None).errors);
    assert!(
        errors.contains(&r#"spec.subnetSelectorTerms[1].tags: Invalid value: "object": empty tag keys or values aren't supported"#.to_owned()),
        "{errors:#?}"
    );
}

// ---- the mutation fuzz ---------------------------------------------------------------------------------------

/// Proptest cases per run: a few seconds in a debug build; `KERF_FUZZ_CASES` runs longer by hand.
fn fuzz_cases() -> u32 {
    std::env::var("KERF_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

/// Values a careless user or an attacker puts where something else belongs.
fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,24}".prop_map(Value::from),
        "[a-z0-9./-]{0,20}".prop_map(Value::from),
        (1..2_000usize, "\\PC").prop_map(|(n, c)| Value::from(c.repeat(n))),
        Just(json!("aé12345")),
        Just(json!("2024-01-02T03:04:05+0é:00")),
        Just(json!("karpenter.sh/foo")),
        Just(json!("In")),
    ];
    let nested = leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        4 => nested,
        1 => (0..64usize).prop_map(|depth| (0..depth).fold(json!(1), |v, _| json!([v]))),
        1 => (1..3_000usize, any::<i64>()).prop_map(|(n, x)| Value::Array(vec![json!(x); n])),
    ]
}

/// The JSON pointers of every value in `object`.
fn pointers(object: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, out: &mut Vec<String>) {
        match value {
            Value::Object(fields) => fields.iter().for_each(|(k, v)| {
                walk(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                )
            }),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(v, format!("{at}/{i}"), out)),
            _ => {}
        }
        out.push(at);
    }
    let mut out = Vec::new();
    walk(object, String::new(), &mut out);
    out
}

/// One change to a valid object: a value replaced, a field or list item added next to others, or text
/// (often multi-byte) spliced into one of its strings, which keeps the type and reaches the string parsers.
#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, Value),
    Insert(usize, String, Value),
    Splice(usize, usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<usize>(), hostile_value()).prop_map(|(at, v)| Mutation::Replace(at, v)),
        1 => (any::<usize>(), "[a-zA-Z]{1,16}", hostile_value())
            .prop_map(|(at, name, v)| Mutation::Insert(at, name, v)),
        2 => (any::<usize>(), any::<usize>(), "[é€𝄞a0:+\\-]{1,3}|\\PC{1,3}")
            .prop_map(|(at, pos, text)| Mutation::Splice(at, pos, text)),
    ]
}

fn mutate(object: &mut Value, mutation: &Mutation) {
    let mut all = pointers(object);
    if matches!(mutation, Mutation::Splice(..)) {
        all.retain(|p| object.pointer(p).is_some_and(Value::is_string));
    }
    let (Mutation::Replace(at, _) | Mutation::Insert(at, _, _) | Mutation::Splice(at, _, _)) =
        mutation;
    let Some(pointer) = all.get(at % all.len().max(1)).cloned() else {
        return;
    };
    let Some(target) = object.pointer_mut(&pointer) else {
        return;
    };
    match (mutation, target) {
        (Mutation::Replace(_, value), target) => *target = value.clone(),
        (Mutation::Insert(_, name, value), Value::Object(fields)) => {
            fields.insert(name.clone(), value.clone());
        }
        (Mutation::Insert(_, _, value), Value::Array(items)) => items.push(value.clone()),
        (Mutation::Insert(_, _, value), target) => *target = value.clone(),
        (Mutation::Splice(_, pos, text), Value::String(s)) => {
            let cut = s
                .char_indices()
                .map(|(i, _)| i)
                .chain([s.len()])
                .nth(pos % (s.chars().count() + 1))
                .unwrap_or(s.len());
            s.insert_str(cut, text);
        }
        (Mutation::Splice(..), _) => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), ..ProptestConfig::default() })]

    /// Mutated valid objects, admitted on CREATE and on UPDATE (from the valid object, and unchanged): no panic,
    /// bounded errors and warnings, and an UPDATE that changes nothing is refused only for what it cannot ratchet.
    #[test]
    fn mutated_objects_are_admitted_within_bounds(
        pick in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let objects = valid_objects();
        let (kind, valid) = &objects[pick % objects.len()];
        let mut object = valid.clone();
        for m in &mutations {
            mutate(&mut object, m);
        }
        let created = kind.admit(&object, None);
        assert_bounded(kind, &created);
        let updated = kind.admit(&object, Some(valid));
        assert_bounded(kind, &updated);
        let unchanged = kind.admit(&object, Some(&object));
        assert_bounded(kind, &unchanged);
        let kept: Vec<&FieldError> = unchanged
            .errors
            .iter()
            .filter(|e| e.ratchets && !matches!(e.kind, ErrorKind::Omitted { .. }))
            .collect();
        prop_assert!(kept.is_empty(), "unchanged UPDATE kept {kept:#?}");
    }
}
