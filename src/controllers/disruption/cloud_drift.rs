//! The cloud side of drift (controller-behaviour.md §3.3, the AWS checks): which launched NodeClaims were
//! launched from an EC2NodeClass spec that has changed since (its hash, `NodeClassDrift`), or run an instance
//! their class would no longer launch (another AMI, subnet or security groups). One pass lists
//! kerf's instances once and judges each claim against its class as provisioning last resolved it (the
//! [`Catalogs`] cache), so no selector is resolved per node. When the list fails, cloud drift is unknown for
//! the pass and the rest of disruption goes on.

use super::super::catalogs::Catalogs;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::PLACEMENT_GROUP_ID;
use crate::cloud::{self, CloudProvider, DriftReason, Instance, NodeClass};
use crate::disruption::{node_class_drift, CloudDrift, StaticDrift};
use crate::engine::conditions::{is_true, LAUNCHED};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The bound on listing the instances (all pages of it) once per pass.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// What one pass knows of the cloud: kerf's live instances and the resolution of every ready class.
pub struct CloudFacts {
    /// By instance ID, which is how a claim's provider ID names its instance whatever zone it spells.
    instances: HashMap<String, Instance>,
    /// By class name, the class and its resolution; a class that did not resolve (not ready) is absent.
    classes: HashMap<String, (EC2NodeClass, Arc<NodeClass>)>,
}

impl CloudFacts {
    /// Lists the instances (bounded by `timeout`, [`LIST_TIMEOUT`] in the controller) and takes the cached
    /// resolution of each of `classes` that is not being deleted, as of `now`. `None`, logged, when the list
    /// fails or times out.
    pub async fn gather<C: CloudProvider>(
        cloud: &C,
        catalogs: &Catalogs,
        classes: &[EC2NodeClass],
        now: SystemTime,
        timeout: Duration,
    ) -> Option<CloudFacts> {
        let listed = match tokio::time::timeout(timeout, cloud.list()).await {
            Ok(Ok(instances)) => instances,
            Ok(Err(error)) => {
                tracing::warn!(%error, "cloud drift unknown this pass: listing the instances failed");
                return None;
            }
            Err(_) => {
                tracing::warn!(
                    ?timeout,
                    "cloud drift unknown this pass: listing the instances timed out"
                );
                return None;
            }
        };
        let instances = listed
            .into_iter()
            .filter(|i| !i.state.is_gone())
            .map(|i| (i.id.clone(), i))
            .collect();
        let mut resolved = HashMap::new();
        for class in classes
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            let (Some(name), Some(node_class)) =
                (&class.metadata.name, catalogs.resolved(class, now).await)
            else {
                continue;
            };
            resolved.insert(name.clone(), (class.clone(), node_class));
        }
        Some(CloudFacts {
            instances,
            classes: resolved,
        })
    }

    /// How `claim`'s instance drifted from its class, if it did. Not judged (`None`): a claim not `Launched`
    /// or without a provider ID, one whose class is not ready, and one whose instance is not listed (gone
    /// instances are garbage collection's business).
    pub fn drift(&self, claim: &NodeClaim) -> Option<CloudDrift> {
        if !is_true(claim, LAUNCHED) {
            return None;
        }
        let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
        let instance = self.instances.get(cloud::instance_id(provider_id).ok()?)?;
        let (class, resolved) = self.classes.get(&claim.spec.node_class_ref.name)?;
        if node_class_drift(class, claim) == StaticDrift::Drifted {
            return Some(CloudDrift::NodeClass);
        }
        cloud::drift(instance, resolved)
            .map(cloud_drift)
            .or_else(|| placement_group_drift(claim, resolved))
    }
}

/// `PlacementGroupDrift` (Karpenter's `isPlacementGroupDrifted`): the group the claim was launched into (its label;
/// none without) is not the one its class selects now (none without a selector).
fn placement_group_drift(claim: &NodeClaim, class: &NodeClass) -> Option<CloudDrift> {
    let launched_into = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PLACEMENT_GROUP_ID))
        .map(String::as_str);
    let selected = class
        .resolved
        .placement_group
        .as_ref()
        .map(|g| g.id.as_str());
    (launched_into.unwrap_or_default() != selected.unwrap_or_default())
        .then_some(CloudDrift::PlacementGroup)
}

/// The engine's name for a reason the cloud found.
fn cloud_drift(reason: DriftReason) -> CloudDrift {
    match reason {
        DriftReason::AmiDrift => CloudDrift::Ami,
        DriftReason::SubnetDrift => CloudDrift::Subnet,
        DriftReason::SecurityGroupDrift => CloudDrift::SecurityGroup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::sim::{Operation, SimAmi, SimCloud};
    use crate::cloud::{CloudError, PlacementGroup, PlacementStrategy, ResolvedAmi};
    use crate::controllers::hashes::class_annotations;
    use crate::controllers::nodeclaim::tests::{claim, cloud, launch, t0};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// The EC2NodeClass `default` at `generation`, selecting the AMI `ami`.
    fn class(generation: i64, ami: &str) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": generation},
            "spec": {
                "role": "NodeRole",
                "amiFamily": "AL2023",
                "amiSelectorTerms": [{"id": ami}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "lifecycle"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "lifecycle"}}]
            }
        }))
        .expect("a valid EC2NodeClass")
    }

    fn add_second_ami(cloud: &SimCloud) {
        cloud.add_ami(SimAmi {
            ami: ResolvedAmi {
                id: "ami-2".into(),
                name: None,
                architecture: "x86_64".into(),
                creation_date: Some("2026-06-01T00:00:00Z".into()),
                variants: Vec::new(),
                deprecated: false,
            },
            alias_family: Some("al2023".into()),
            tags: BTreeMap::new(),
        });
    }

    /// The status of a claim `Launched` with the instance `provider_id`.
    fn launched_status(provider_id: &str) -> crate::api::nodeclaim::NodeClaimStatus {
        serde_json::from_value(json!({
            "providerID": provider_id,
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                            "lastTransitionTime": "2026-11-23T00:00:00Z"}]
        }))
        .expect("status")
    }

    /// The claim `name` launched on `cloud` from `class` (resolved into `catalogs`), as the lifecycle
    /// controller leaves it: `Launched` with the instance's provider ID.
    async fn launched(
        cloud: &SimCloud,
        catalogs: &mut Catalogs,
        class: &EC2NodeClass,
        name: &str,
    ) -> NodeClaim {
        catalogs.get(cloud, class, t0()).await.expect("resolves");
        let resolved = catalogs.resolved(class, t0()).await.expect("cached");
        let mut claim = claim(name);
        let launched = launch(cloud, &claim, (*resolved).clone(), t0())
            .await
            .expect("launch");
        claim.status = Some(launched_status(&launched.instance.provider_id));
        claim
    }

    #[tokio::test]
    async fn a_claim_drifts_once_its_class_selects_another_ami() {
        let cloud = cloud();
        let mut catalogs = Catalogs::default();
        let v1 = class(1, "ami-1");
        let claim = launched(&cloud, &mut catalogs, &v1, "a").await;
        let facts = CloudFacts::gather(&cloud, &catalogs, &[v1], t0(), LIST_TIMEOUT)
            .await
            .expect("listed");
        assert_eq!(facts.drift(&claim), None, "it runs what its class selects");

        add_second_ami(&cloud);
        let v2 = class(2, "ami-2");
        catalogs.get(&cloud, &v2, t0()).await.expect("resolves");
        let facts = CloudFacts::gather(&cloud, &catalogs, &[v2], t0(), LIST_TIMEOUT)
            .await
            .expect("listed");
        assert_eq!(facts.drift(&claim), Some(CloudDrift::Ami));
    }

    #[tokio::test]
    async fn a_claim_launched_from_an_older_class_spec_drifts_first_as_node_class_drift() {
        let cloud = cloud();
        let mut catalogs = Catalogs::default();
        let annotated = |mut class: EC2NodeClass| {
            class.metadata.annotations = Some(class_annotations(&class));
            class
        };
        let v1 = annotated(class(1, "ami-1"));
        let mut claim = launched(&cloud, &mut catalogs, &v1, "a").await;
        claim.metadata.annotations = Some(class_annotations(&v1));
        let facts = CloudFacts::gather(
            &cloud,
            &catalogs,
            std::slice::from_ref(&v1),
            t0(),
            LIST_TIMEOUT,
        )
        .await
        .expect("listed");
        assert_eq!(facts.drift(&claim), None, "launched from the current spec");

        add_second_ami(&cloud);
        let mut v2 = class(2, "ami-2");
        v2.spec.user_data = Some("echo changed".into());
        let v2 = annotated(v2);
        catalogs.get(&cloud, &v2, t0()).await.expect("resolves");
        let facts = CloudFacts::gather(&cloud, &catalogs, &[v2], t0(), LIST_TIMEOUT)
            .await
            .expect("listed");
        assert_eq!(
            facts.drift(&claim),
            Some(CloudDrift::NodeClass),
            "the spec's hash is judged before the AMI"
        );
    }

    /// Upstream cloudprovider drift suite ("should return drifted if the placement group changed" and "... was
    /// removed", "should not return drifted if the placement group is unchanged"): a claim launched into the
    /// class's group carries its labels and has not drifted; once the class selects no group, or another, it has.
    #[tokio::test]
    async fn a_claim_drifts_when_its_class_selects_another_placement_group_or_none() {
        let cloud = cloud();
        for (id, name) in [("pg-1", "hpc"), ("pg-2", "other")] {
            cloud.add_placement_group(PlacementGroup {
                id: id.into(),
                name: name.into(),
                strategy: PlacementStrategy::Partition,
                partition_count: 3,
            });
        }
        let catalogs = Catalogs::default();
        let selecting = |generation, group: Option<&str>| {
            let mut class = class(generation, "ami-1");
            class.spec.placement_group_selector =
                group.map(|name| serde_json::from_value(json!({"name": name})).expect("selector"));
            class
        };
        let v1 = selecting(1, Some("hpc"));
        catalogs.get(&cloud, &v1, t0()).await.expect("resolves");
        let resolved = catalogs.resolved(&v1, t0()).await.expect("cached");
        let mut claim = claim("a");
        let types = cloud.instance_types(&resolved, t0()).await.expect("types");
        let launched = crate::controllers::nodeclaim::launch::launch(
            &cloud,
            &claim,
            (*resolved).clone(),
            &types,
            crate::controllers::nodeclaim::launch::Adoption::Skip,
            t0(),
        )
        .await
        .expect("launch");
        let labels = crate::controllers::nodeclaim::launch::launched_labels(&launched);
        assert_eq!(labels[PLACEMENT_GROUP_ID], "pg-1");
        assert_eq!(labels[crate::catalog::PLACEMENT_GROUP_PARTITION], "2");
        claim.metadata.labels = Some(labels);
        claim.status = Some(launched_status(&launched.instance.provider_id));
        let gather = |class: EC2NodeClass| {
            let catalogs = &catalogs;
            let cloud = &cloud;
            async move {
                CloudFacts::gather(cloud, catalogs, &[class], t0(), LIST_TIMEOUT)
                    .await
                    .expect("listed")
            }
        };
        assert_eq!(gather(v1).await.drift(&claim), None, "in its class's group");
        for (generation, group) in [(2, None), (3, Some("other"))] {
            let class = selecting(generation, group);
            catalogs.get(&cloud, &class, t0()).await.expect("resolves");
            assert_eq!(
                gather(class).await.drift(&claim),
                Some(CloudDrift::PlacementGroup),
                "{group:?}"
            );
        }
    }

    #[tokio::test]
    async fn claims_are_judged_only_when_launched_listed_and_their_class_ready() {
        let cloud = cloud();
        let mut catalogs = Catalogs::default();
        let v1 = class(1, "ami-1");
        let claim = launched(&cloud, &mut catalogs, &v1, "a").await;
        add_second_ami(&cloud);
        let v2 = class(2, "ami-2");
        catalogs.get(&cloud, &v2, t0()).await.expect("resolves");
        let facts = CloudFacts::gather(
            &cloud,
            &catalogs,
            std::slice::from_ref(&v2),
            t0(),
            LIST_TIMEOUT,
        )
        .await
        .expect("listed");

        let mut not_launched = claim.clone();
        not_launched.status = None;
        assert_eq!(facts.drift(&not_launched), None, "not launched");
        let mut other_class = claim.clone();
        other_class.spec.node_class_ref.name = "other".into();
        assert_eq!(facts.drift(&other_class), None, "no such class");

        // The class now selects an AMI that does not exist: it is not ready, so nothing is judged.
        let v3 = class(3, "ami-none");
        assert!(catalogs.get(&cloud, &v3, t0()).await.is_none());
        let facts = CloudFacts::gather(&cloud, &catalogs, &[v3], t0(), LIST_TIMEOUT)
            .await
            .expect("listed");
        assert_eq!(facts.drift(&claim), None, "class not ready");

        // An instance that is gone is not judged either.
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
        cloud
            .delete(&provider_id.expect("provider ID"))
            .await
            .expect("delete");
        let facts = CloudFacts::gather(&cloud, &catalogs, &[v2], t0(), LIST_TIMEOUT)
            .await
            .expect("listed");
        assert_eq!(facts.drift(&claim), None, "instance gone");
    }

    #[tokio::test]
    async fn a_failed_or_slow_list_leaves_cloud_drift_unknown() {
        let cloud = cloud();
        let catalogs = Catalogs::default();
        let refused = CloudError::Api {
            operation: "DescribeInstances",
            code: "RequestLimitExceeded".into(),
            message: "slow down".into(),
        };
        let gather = |timeout| CloudFacts::gather(&cloud, &catalogs, &[], t0(), timeout);
        cloud.inject_api_error(Operation::List, refused, 1);
        assert!(gather(LIST_TIMEOUT).await.is_none(), "refused");
        assert!(gather(LIST_TIMEOUT).await.is_some(), "answered");
        cloud.set_latency(Operation::List, Duration::from_secs(60));
        let timeout = Duration::from_millis(50);
        assert!(gather(timeout).await.is_none(), "too slow");
    }
}
