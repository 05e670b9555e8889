//! Static drift of a NodePool (controller-behaviour.md §3.3, `NodePoolDrifted`): the pool's template is hashed
//! into `karpenter.sh/nodepool-hash`, claims carry the hash of the template they were made from, and a claim
//! whose hash differs has drifted, compared only when both carry the same hash version.
//!
//! The hash covers the template except `requirements` (the requirements check covers those; resources and
//! budgets are not in the template). It is FNV-1a (64 bits) of a canonical JSON text of the template, printed
//! in decimal: object keys sorted, lists treated as sets (sorted, duplicates dropped), and zero values
//! (`null`, `""`, `0`, `false`, empty lists and maps) left out, so that a list's order or an explicit empty
//! value does not drift a node, as with Karpenter's `SlicesAsSets`/`IgnoreZeroValue` options. The numbers differ
//! from Karpenter's (which hashes Go structs), so kerf writes its own hash version: a fleet taken over from
//! Karpenter then reads as a version change (hashes rewritten, nothing drifted) rather than as drift.
//!
//! The EC2NodeClass has its own hash the same way (`NodeClassDrift`): its spec except the selector terms,
//! whose matches drift dynamically (AMI, subnet, security group drift) instead.

use crate::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use serde_json::Value;
use std::collections::BTreeMap;

pub use crate::api::well_known::{
    EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION,
};
/// The hash version this code computes: not Karpenter's `v3`, whose numbers kerf does not reproduce.
pub const HASH_VERSION: &str = "kerf-v1";

/// The template hash of `pool`, for its `karpenter.sh/nodepool-hash` annotation and its new claims'.
pub fn nodepool_hash(pool: &NodePool) -> String {
    // Serializing plain structs with string keys cannot fail; a null would still hash consistently.
    let mut template = serde_json::to_value(&pool.spec.template).unwrap_or(Value::Null);
    if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("requirements");
    }
    hash_of(&template)
}

/// The spec hash of an EC2NodeClass, for its `karpenter.k8s.aws/ec2nodeclass-hash` annotation and its
/// launched claims'.
pub fn ec2nodeclass_hash(spec: &EC2NodeClassSpec) -> String {
    let mut spec = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Some(fields) = spec.as_object_mut() {
        fields.retain(|key, _| !key.ends_with("SelectorTerms"));
    }
    hash_of(&spec)
}

/// The annotations that record `hash` under `hash_key` and kerf's hash version under `version_key`.
pub fn hash_annotations(
    hash_key: &str,
    version_key: &str,
    hash: String,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (hash_key.to_owned(), hash),
        (version_key.to_owned(), HASH_VERSION.to_owned()),
    ])
}

fn hash_of(value: &Value) -> String {
    let mut text = String::new();
    if let Some(value) = normalize(value) {
        write_canonical(&value, &mut text);
    }
    fnv1a64(text.as_bytes()).to_string()
}

/// A claim's static drift against its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticDrift {
    /// Same hash version, different hash: `NodePoolDrifted`.
    Drifted,
    /// Same hash version and hash.
    Current,
    /// The versions differ: not compared. The claim's hash should be rewritten to the pool's if the claim
    /// has not drifted otherwise, so that an upgrade does not drift the fleet.
    VersionChanged,
    /// The pool or the claim lacks an annotation: not compared.
    Unknown,
}

/// Compares the NodePool hash annotations of `pool` and `claim`, versions first.
pub fn static_drift(pool: &NodePool, claim: &NodeClaim) -> StaticDrift {
    compare(
        pool.metadata.annotations.as_ref(),
        claim.metadata.annotations.as_ref(),
        NODEPOOL_HASH,
        NODEPOOL_HASH_VERSION,
    )
}

/// Compares the EC2NodeClass hash annotations of `class` and `claim`, versions first.
pub fn node_class_drift(class: &EC2NodeClass, claim: &NodeClaim) -> StaticDrift {
    compare(
        class.metadata.annotations.as_ref(),
        claim.metadata.annotations.as_ref(),
        EC2NODECLASS_HASH,
        EC2NODECLASS_HASH_VERSION,
    )
}

fn compare(
    owner: Option<&BTreeMap<String, String>>,
    claim: Option<&BTreeMap<String, String>>,
    hash_key: &str,
    version_key: &str,
) -> StaticDrift {
    let get = |a: Option<&BTreeMap<String, String>>, key| a.and_then(|a| a.get(key)).cloned();
    let (Some(owner_hash), Some(owner_version), Some(claim_hash), Some(claim_version)) = (
        get(owner, hash_key),
        get(owner, version_key),
        get(claim, hash_key),
        get(claim, version_key),
    ) else {
        return StaticDrift::Unknown;
    };
    if owner_version != claim_version {
        StaticDrift::VersionChanged
    } else if owner_hash != claim_hash {
        StaticDrift::Drifted
    } else {
        StaticDrift::Current
    }
}

/// Drops zero values and turns lists into sorted, deduplicated sets; `None` for a zero value.
fn normalize(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Bool(b) => b.then_some(Value::Bool(true)),
        Value::Number(n) => (n.as_f64() != Some(0.0)).then(|| value.clone()),
        Value::String(s) => (!s.is_empty()).then(|| value.clone()),
        Value::Array(items) => {
            let mut set: Vec<(String, Value)> = items
                .iter()
                .filter_map(normalize)
                .map(|v| {
                    let mut text = String::new();
                    write_canonical(&v, &mut text);
                    (text, v)
                })
                .collect();
            set.sort_by(|a, b| a.0.cmp(&b.0));
            set.dedup_by(|a, b| a.0 == b.0);
            (!set.is_empty()).then(|| Value::Array(set.into_iter().map(|(_, v)| v).collect()))
        }
        Value::Object(map) => {
            let kept: serde_json::Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| normalize(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
    }
}

/// JSON text with object keys in sorted order, whatever order the map keeps them in.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// FNV-1a, 64 bits: small, fixed, and the same on every platform and release.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{created_claim as claim, pool};
    use super::*;
    use serde_json::json;

    fn base() -> NodePool {
        let mut p = pool(json!({"consolidateAfter": "1m"}));
        p.spec.template = serde_json::from_value(json!({
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "1", "effect": "NoExecute"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "720h",
            }
        }))
        .expect("template");
        p
    }

    fn with(edit: impl FnOnce(&mut serde_json::Value)) -> NodePool {
        let mut p = base();
        let mut template = serde_json::to_value(&p.spec.template).expect("json");
        edit(&mut template);
        p.spec.template = serde_json::from_value(template).expect("template");
        p
    }

    #[test]
    fn the_hash_is_a_fixed_function_of_the_template() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(nodepool_hash(&base()), nodepool_hash(&base()));
        assert!(nodepool_hash(&base()).parse::<u64>().is_ok());
    }

    #[test]
    fn requirements_and_non_template_fields_do_not_drift() {
        let h = nodepool_hash(&base());
        let requirements = with(|t| {
            t["spec"]["requirements"] =
                json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}])
        });
        assert_eq!(nodepool_hash(&requirements), h);
        let mut budgets = base();
        budgets.spec.disruption =
            Some(serde_json::from_value(json!({"budgets": [{"nodes": "0"}]})).expect("d"));
        budgets.spec.weight = Some(50);
        assert_eq!(nodepool_hash(&budgets), h);
    }

    #[test]
    fn order_and_explicit_empty_values_do_not_drift() {
        let h = nodepool_hash(&base());
        let reordered = with(
            |t| t["spec"]["taints"] = json!([{"key": "b", "value": "1", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}]),
        );
        assert_eq!(nodepool_hash(&reordered), h);
        let empty_value = with(|t| t["spec"]["taints"][0]["value"] = json!(""));
        assert_eq!(nodepool_hash(&empty_value), h);
        let empty_startup = with(|t| t["spec"]["startupTaints"] = json!([]));
        assert_eq!(nodepool_hash(&empty_startup), h);
    }

    #[test]
    fn template_changes_drift() {
        let h = nodepool_hash(&base());
        type Edit = fn(&mut serde_json::Value);
        let edits: [(&str, Edit); 7] = [
            ("taints", |t| t["spec"]["taints"][0]["key"] = json!("c")),
            ("startupTaints", |t| {
                t["spec"]["startupTaints"] = json!([{"key": "s", "effect": "NoSchedule"}])
            }),
            ("labels", |t| t["metadata"]["labels"]["team"] = json!("b")),
            ("annotations", |t| {
                t["metadata"]["annotations"]["extra"] = json!("y")
            }),
            ("expireAfter", |t| t["spec"]["expireAfter"] = json!("24h")),
            ("terminationGracePeriod", |t| {
                t["spec"]["terminationGracePeriod"] = json!("1h")
            }),
            ("nodeClassRef", |t| {
                t["spec"]["nodeClassRef"]["name"] = json!("other")
            }),
        ];
        for (what, edit) in edits {
            assert_ne!(nodepool_hash(&with(edit)), h, "{what}");
        }
    }

    #[test]
    fn claims_drift_only_under_the_same_hash_version() {
        let annotate = |hash: &str, version: &str| {
            BTreeMap::from([
                (NODEPOOL_HASH.to_owned(), hash.to_owned()),
                (NODEPOOL_HASH_VERSION.to_owned(), version.to_owned()),
            ])
        };
        let mut p = base();
        p.metadata.annotations = Some(annotate(&nodepool_hash(&p), HASH_VERSION));
        let mut c = claim("2026-11-01T00:00:00Z", None, json!({}));
        assert_eq!(static_drift(&p, &c), StaticDrift::Unknown);
        c.metadata.annotations = Some(annotate(&nodepool_hash(&p), HASH_VERSION));
        assert_eq!(static_drift(&p, &c), StaticDrift::Current);
        c.metadata.annotations = Some(annotate("123", HASH_VERSION));
        assert_eq!(static_drift(&p, &c), StaticDrift::Drifted);
        c.metadata.annotations = Some(annotate("123", "v2"));
        assert_eq!(static_drift(&p, &c), StaticDrift::VersionChanged);
    }

    fn class_spec(edit: impl FnOnce(&mut serde_json::Value)) -> EC2NodeClassSpec {
        let mut spec = json!({
            "role": "NodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "userData": "echo hi",
            "tags": {"team": "a"}
        });
        edit(&mut spec);
        serde_json::from_value(spec).expect("an EC2NodeClass spec")
    }

    #[test]
    fn a_class_drifts_on_its_spec_but_not_on_its_selector_terms() {
        let h = ec2nodeclass_hash(&class_spec(|_| {}));
        let selectors = class_spec(|s| {
            s["amiSelectorTerms"] = json!([{"id": "ami-2"}]);
            s["subnetSelectorTerms"] = json!([{"id": "subnet-2"}]);
            s["securityGroupSelectorTerms"] = json!([{"id": "sg-2"}]);
        });
        assert_eq!(
            ec2nodeclass_hash(&selectors),
            h,
            "selector terms drift dynamically"
        );
        let user_data = class_spec(|s| s["userData"] = json!("echo bye"));
        assert_ne!(ec2nodeclass_hash(&user_data), h);
        let tags = class_spec(|s| s["tags"]["team"] = json!("b"));
        assert_ne!(ec2nodeclass_hash(&tags), h);
    }

    #[test]
    fn a_claim_drifts_from_its_class_under_the_same_hash_version() {
        let class_with = |hash: &str| -> EC2NodeClass {
            serde_json::from_value(json!({
                "metadata": {"name": "default", "annotations":
                    hash_annotations(EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION, hash.to_owned())},
                "spec": {}
            }))
            .expect("a class")
        };
        let mut c = claim("2026-11-01T00:00:00Z", None, json!({}));
        c.metadata.annotations = Some(hash_annotations(
            EC2NODECLASS_HASH,
            EC2NODECLASS_HASH_VERSION,
            "1".to_owned(),
        ));
        assert_eq!(node_class_drift(&class_with("1"), &c), StaticDrift::Current);
        assert_eq!(node_class_drift(&class_with("2"), &c), StaticDrift::Drifted);
        c.metadata.annotations = None;
        assert_eq!(node_class_drift(&class_with("2"), &c), StaticDrift::Unknown);
    }
}
