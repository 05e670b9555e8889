//! A planned claim as the NodeClaim object kerf creates (api-rules.md §5): the pool's template with the
//! requirements narrowed by the pods and to the planned instance types, the pods' requests, the NodePool as
//! owner, the hash of the template it was made from (static drift), and the termination finalizer. The name is derived from the pool and the pods' UIDs, so a controller
//! that crashed after creating it and solves the same pods again gets AlreadyExists instead of a twin.

use crate::api::labels;
use crate::api::nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements};
use crate::api::nodepool::{NodePool, NodeSelectorRequirementWithMinValues};
use crate::api::operator::Operator;
use crate::api::requirements::{AllowUndefined, Requirement, Requirements};
use crate::disruption::{hash_annotations, nodepool_hash, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use crate::scheduling::PlannedClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

pub use crate::api::well_known::TERMINATION_FINALIZER;

/// The NodeClaim for `planned`, from `pool`. `pod_uids` identify the claim's pods: their UIDs (with the node
/// a pod is leaving, for the pods of a node being deleted).
pub fn node_claim(pool: &NodePool, planned: &PlannedClaim, pod_uids: &[&str]) -> NodeClaim {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let template = &pool.spec.template;
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut requirements = planned.requirements.clone();
    if !planned.instance_types.is_empty() {
        requirements.add(Requirement::one_of(
            labels::INSTANCE_TYPE,
            planned.instance_types.iter().map(|t| t.to_string()),
        ));
    }
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.extend(hash_annotations(
        NODEPOOL_HASH,
        NODEPOOL_HASH_VERSION,
        nodepool_hash(pool),
    ));
    let claim_labels = labels(pool, planned);
    let spec = NodeClaimSpec {
        taints: template.spec.taints.clone(),
        startup_taints: template.spec.startup_taints.clone(),
        requirements: requirements
            .terms()
            .into_iter()
            .map(|t| NodeSelectorRequirementWithMinValues {
                key: t.key,
                operator: t.operator,
                values: match t.operator {
                    Operator::Exists | Operator::DoesNotExist => None,
                    _ => Some(t.values),
                },
                min_values: t.min_values.and_then(|m| i64::try_from(m).ok()),
            })
            .collect(),
        resources: Some(ResourceRequirements {
            requests: Some(
                planned
                    .requests
                    .to_quantities()
                    .into_iter()
                    .map(|(name, amount)| (name, IntOrString::String(amount)))
                    .collect(),
            ),
        }),
        node_class_ref: template.spec.node_class_ref.clone(),
        termination_grace_period: template.spec.termination_grace_period.clone(),
        expire_after: template.spec.expire_after.clone(),
    };
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(name(&pool_name, pod_uids)),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![TERMINATION_FINALIZER.to_owned()]),
            owner_references: Some(vec![OwnerReference {
                api_version: "karpenter.sh/v1".to_owned(),
                kind: "NodePool".to_owned(),
                name: pool_name,
                uid: pool.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// The labels of `planned`'s NodeClaim: the template's, those its requirements fix to one value (the instance
/// type too when only one is left), a value for each open custom key, and the NodePool's. Written without the
/// claim's launch list (hundreds of names) when more than one type is left, since no label comes of it then.
pub fn labels(pool: &NodePool, planned: &PlannedClaim) -> BTreeMap<String, String> {
    let mut requirements = planned.requirements.clone();
    if let [only] = &*planned.instance_types {
        requirements.add(Requirement::one_of(
            labels::INSTANCE_TYPE,
            [only.to_string()],
        ));
    }
    let mut claim_labels = pool
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    claim_labels.extend(requirements.labels());
    claim_labels.extend(custom_labels(&requirements));
    claim_labels.insert(
        labels::NODEPOOL.to_owned(),
        pool.metadata.name.clone().unwrap_or_default(),
    );
    claim_labels
}

/// A value for each custom label key (not well-known, not restricted) the requirements leave open (`NotIn`,
/// `Exists`, `Gt`/`Lt`, or `In` with several values): the node must carry the key, or a pod selecting it with
/// `Exists` would never be placed there. Karpenter picks a value the same way (`resolveCustomLabelsFromRequirements`);
/// kerf's is deterministic: the first allowed value, or the smallest allowed integer from 0.
fn custom_labels(requirements: &Requirements) -> Vec<(String, String)> {
    let well_known = AllowUndefined::well_known_labels();
    requirements
        .iter()
        .filter(|r| !well_known.allows(r.key()) && labels::restriction(r.key()).is_none())
        .filter_map(|r| {
            r.any()
                .map(|value| (r.key().to_owned(), value.into_owned()))
        })
        .collect()
}

/// `<pool>-<10 base-36 digits of a hash of the sorted pod UIDs>`: the same pods planned onto the same pool give
/// the same name. FNV-1a is stable across builds and platforms, unlike the standard library's hasher.
pub fn name(pool: &str, pod_uids: &[&str]) -> String {
    let mut uids: Vec<&str> = pod_uids.to_vec();
    uids.sort_unstable();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for uid in uids {
        for byte in uid.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let mut digits = String::with_capacity(10);
    for _ in 0..10 {
        let digit = (hash % 36) as u32;
        digits.push(char::from_digit(digit, 36).unwrap_or('0'));
        hash /= 36;
    }
    // A pool name is at most 63 characters, so the result stays a valid object name.
    format!("{pool}-{digits}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::requirements::Requirements;
    use crate::catalog::Resources;
    use crate::scheduling::TypeName;
    use serde_json::json;

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "uid": "pool-uid"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                    "spec": {
                        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                        "startupTaints": [{"key": "init", "effect": "NoSchedule"}],
                        "expireAfter": "720h",
                        "terminationGracePeriod": "1h"
                    }
                }
            }
        }))
        .expect("a valid NodePool")
    }

    fn planned() -> PlannedClaim {
        let mut requirements = Requirements::new();
        requirements.add(Requirement::one_of(labels::ARCH, ["amd64"]));
        requirements.add(Requirement::one_of(labels::NODEPOOL, ["general"]));
        requirements.add(Requirement::one_of(
            labels::CAPACITY_TYPE,
            ["on-demand", "spot"],
        ));
        PlannedClaim {
            nodepool: "general".into(),
            requirements,
            instance_types: vec![TypeName::new("m5.large"), TypeName::new("m5.xlarge")].into(),
            pods: vec!["default/a".into(), "default/b".into()],
            requests: Resources::from_quantities([("cpu", "2"), ("memory", "3Gi"), ("pods", "2")])
                .expect("valid quantities"),
            cheapest: None,
        }
    }

    #[test]
    fn the_claim_carries_the_template_and_the_plan() {
        let claim = node_claim(&pool(), &planned(), &["u1", "u2"]);
        let value = serde_json::to_value(&claim).expect("serialisable");
        assert_eq!(
            value["metadata"]["labels"]["karpenter.sh/nodepool"],
            "general"
        );
        assert_eq!(value["metadata"]["labels"]["team"], "a");
        assert_eq!(value["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
        assert_eq!(value["metadata"]["annotations"]["note"], "x");
        assert_eq!(
            value["metadata"]["annotations"][NODEPOOL_HASH],
            nodepool_hash(&pool())
        );
        assert_eq!(
            value["metadata"]["annotations"][NODEPOOL_HASH_VERSION],
            crate::disruption::HASH_VERSION
        );
        assert_eq!(
            value["metadata"]["finalizers"],
            json!(["karpenter.sh/termination"])
        );
        let owner = &value["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["kind"].as_str(),
                owner["name"].as_str(),
                owner["uid"].as_str()
            ),
            (Some("NodePool"), Some("general"), Some("pool-uid"))
        );
        let spec = &value["spec"];
        assert_eq!(spec["nodeClassRef"]["name"], "default");
        assert_eq!(spec["taints"][0]["key"], "dedicated");
        assert_eq!(spec["startupTaints"][0]["key"], "init");
        assert_eq!(spec["expireAfter"], "720h");
        assert_eq!(spec["terminationGracePeriod"], "1h");
        assert_eq!(
            spec["resources"]["requests"],
            json!({"cpu": "2", "memory": "3Gi", "pods": "2"})
        );
        let types = spec["requirements"]
            .as_array()
            .expect("a list")
            .iter()
            .find(|r| r["key"] == labels::INSTANCE_TYPE)
            .expect("an instance-type requirement");
        assert_eq!(types["operator"], "In");
        assert_eq!(types["values"], json!(["m5.large", "m5.xlarge"]));
    }

    #[test]
    fn the_name_depends_on_the_pool_and_the_set_of_pods_only() {
        let a = name("general", &["u1", "u2"]);
        assert_eq!(a, name("general", &["u2", "u1"]));
        assert_ne!(a, name("general", &["u1", "u3"]));
        assert_ne!(a, name("other", &["u1", "u2"]));
        assert_ne!(name("p", &["ab", "c"]), name("p", &["a", "bc"]));
        assert!(a.starts_with("general-"));
        assert_eq!(a.len(), "general-".len() + 10);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }
}
