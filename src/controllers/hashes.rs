//! The hash annotations static drift compares (controller-behaviour.md §3.3): every NodePool carries the hash
//! of its template (`karpenter.sh/nodepool-hash`) and every EC2NodeClass the hash of its spec
//! (`karpenter.k8s.aws/ec2nodeclass-hash`), each with kerf's hash version. Claims get the pool's hash when they
//! are created and the class's when they launch; a claim whose hash version differs from kerf's (made by
//! Karpenter, or by a kerf without hashes) and that has not drifted is given the current hashes, so taking
//! over a fleet or upgrading kerf does not drift every node.

use super::kit::calls;
use super::{Context, Error};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::cloud::CloudProvider;
use crate::disruption::{
    ec2nodeclass_hash, hash_annotations, nodepool_hash, EC2NODECLASS_HASH,
    EC2NODECLASS_HASH_VERSION, HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION,
};
use crate::engine::conditions::{is_true, LAUNCHED};
use crate::engine::marks::DRIFTED;
use ::kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

/// Brings every hash annotation up to date on each change of the cluster state, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut changed = ctx.state.changed.clone();
    loop {
        write_hashes(&ctx).await;
        if changed.changed().await.is_err() {
            return Ok(());
        }
    }
}

/// One round of writes. Failures are logged; the next change of the state retries.
async fn write_hashes<C>(ctx: &Context<C>) {
    let pools = ctx.state.node_pools.state();
    let classes = ctx.state.node_classes.state();
    let pool_hashes: HashMap<String, BTreeMap<String, String>> = pools
        .iter()
        .map(|p| (p.name_any(), pool_annotations(p)))
        .collect();
    let class_hashes: HashMap<String, BTreeMap<String, String>> = classes
        .iter()
        .map(|c| (c.name_any(), class_annotations(c)))
        .collect();
    let pool_api: Api<NodePool> = Api::all(ctx.client.clone());
    for pool in &pools {
        annotate(&pool_api, pool.as_ref(), &pool_hashes[&pool.name_any()]).await;
    }
    let class_api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    for class in &classes {
        annotate(&class_api, class.as_ref(), &class_hashes[&class.name_any()]).await;
    }
    let claim_api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for claim in ctx.state.node_claims.state() {
        let pool = claim.labels().get(labels::NODEPOOL);
        let mut wanted = pool
            .and_then(|p| pool_hashes.get(p))
            .map(|a| rehash(&claim, a, NODEPOOL_HASH_VERSION))
            .unwrap_or_default();
        // The class's hash is a launch's record; an unlaunched claim gets it when it launches.
        if is_true(&claim, LAUNCHED) {
            if let Some(a) = class_hashes.get(&claim.spec.node_class_ref.name) {
                wanted.extend(rehash(&claim, a, EC2NODECLASS_HASH_VERSION));
            }
        }
        annotate(&claim_api, claim.as_ref(), &wanted).await;
    }
}

/// The hash annotations `pool` should carry.
pub fn pool_annotations(pool: &NodePool) -> BTreeMap<String, String> {
    hash_annotations(NODEPOOL_HASH, NODEPOOL_HASH_VERSION, nodepool_hash(pool))
}

/// The hash annotations `class` should carry.
pub fn class_annotations(class: &EC2NodeClass) -> BTreeMap<String, String> {
    hash_annotations(
        EC2NODECLASS_HASH,
        EC2NODECLASS_HASH_VERSION,
        ec2nodeclass_hash(&class.spec),
    )
}

/// The owner's hash annotations (`current`) for `claim` when the claim's hash version, under `version_key`,
/// is not kerf's and the claim has not drifted; nothing otherwise (a claim of kerf's version keeps the hash
/// it was made with: that difference is what drift is).
pub fn rehash(
    claim: &NodeClaim,
    current: &BTreeMap<String, String>,
    version_key: &str,
) -> BTreeMap<String, String> {
    let version = claim.annotations().get(version_key);
    if version.map(String::as_str) == Some(HASH_VERSION) || is_true(claim, DRIFTED) {
        return BTreeMap::new();
    }
    current.clone()
}

/// Merge-patches the annotations of `object` that differ from `wanted`.
async fn annotate<K>(api: &Api<K>, object: &K, wanted: &BTreeMap<String, String>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let have = object.meta().annotations.as_ref();
    let differ: BTreeMap<&String, &String> = wanted
        .iter()
        .filter(|(k, v)| have.and_then(|a| a.get(*k)) != Some(*v))
        .collect();
    if differ.is_empty() {
        return;
    }
    let name = object.meta().name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"annotations": differ}});
    match calls::merge_patch(api, &name, patch).await {
        Ok(()) => tracing::debug!(kind = %K::kind(&()), %name, "updated hash annotations"),
        Err(e) if e.is_not_found() => {}
        Err(error) => {
            tracing::warn!(kind = %K::kind(&()), %name, %error, "could not update hash annotations")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotations: serde_json::Value, conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "annotations": annotations},
            "spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"conditions": conditions}
        }))
        .expect("a NodeClaim")
    }

    fn current() -> BTreeMap<String, String> {
        hash_annotations(NODEPOOL_HASH, NODEPOOL_HASH_VERSION, "42".into())
    }

    fn drifted() -> serde_json::Value {
        json!([{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "",
                "lastTransitionTime": "2026-11-23T00:00:00Z"}])
    }

    #[test]
    fn a_claim_of_another_hash_version_takes_the_current_hash() {
        let karpenter = claim(
            json!({NODEPOOL_HASH: "7", NODEPOOL_HASH_VERSION: "v3"}),
            json!([]),
        );
        assert_eq!(
            rehash(&karpenter, &current(), NODEPOOL_HASH_VERSION),
            current()
        );
        let unhashed = claim(json!({}), json!([]));
        assert_eq!(
            rehash(&unhashed, &current(), NODEPOOL_HASH_VERSION),
            current()
        );
    }

    #[test]
    fn a_claim_of_kerfs_version_or_drifted_keeps_its_hash() {
        let made_by_kerf = claim(
            json!({NODEPOOL_HASH: "7", NODEPOOL_HASH_VERSION: HASH_VERSION}),
            json!([]),
        );
        assert!(rehash(&made_by_kerf, &current(), NODEPOOL_HASH_VERSION).is_empty());
        let drifted = claim(
            json!({NODEPOOL_HASH: "7", NODEPOOL_HASH_VERSION: "v3"}),
            drifted(),
        );
        assert!(rehash(&drifted, &current(), NODEPOOL_HASH_VERSION).is_empty());
    }

    #[test]
    fn pools_and_classes_carry_their_hashes_under_kerfs_version() {
        let class: EC2NodeClass = serde_json::from_value(json!({
            "metadata": {"name": "default"},
            "spec": {"role": "NodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}
        }))
        .expect("a class");
        let annotations = class_annotations(&class);
        assert_eq!(
            annotations[EC2NODECLASS_HASH],
            ec2nodeclass_hash(&class.spec)
        );
        assert_eq!(annotations[EC2NODECLASS_HASH_VERSION], HASH_VERSION);
    }
}
