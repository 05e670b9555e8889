//! Garbage collection between NodeClaims and instances (controller-behaviour.md §2.4 "GC"), every
//! `Settings::gc_interval`:
//! - an instance tagged for this cluster that no NodeClaim accounts for (neither by its
//!   `karpenter.sh/nodeclaim` tag nor by provider ID) is terminated once it is older than
//!   `Settings::leak_grace` — what a hand-removed finalizer or a crash in the wrong place would otherwise leak;
//! - a launched NodeClaim whose instance is gone (confirmed by a direct lookup, since listings lag) is deleted,
//!   so termination removes its Node and the provisioner replaces its capacity;
//! - the provider drops what it made for launches and no longer uses (launch templates).
//!
//! What to collect is decided by [`plan`], a pure function of the instances, the claims and the time.

use super::kit::calls;
use super::{Context, Error};
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::{CloudError, CloudProvider, Instance, TAG_NODECLAIM};
use ::kube::{Api, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A NodeClaim as garbage collection sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimFacts {
    pub name: String,
    /// Set once the claim is launched.
    pub provider_id: Option<String>,
    /// Already being deleted: termination owns it.
    pub deleting: bool,
}

impl ClaimFacts {
    pub fn of(claim: &NodeClaim) -> ClaimFacts {
        ClaimFacts {
            name: claim.name_any(),
            provider_id: claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .filter(|id| !id.is_empty()),
            deleting: claim.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// What one pass collects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collection {
    /// Provider IDs of leaked instances to terminate.
    pub leaked_instances: Vec<String>,
    /// Claims whose instance is missing from the listing: deleted once a lookup confirms it is gone.
    pub orphaned_claims: Vec<(String, String)>,
}

/// Decides a pass: `instances` are the live instances tagged for this cluster, `claims` every NodeClaim.
pub fn plan(
    instances: &[Instance],
    claims: &[ClaimFacts],
    now: SystemTime,
    leak_grace: Duration,
) -> Collection {
    let claim_names: HashSet<&str> = claims.iter().map(|c| c.name.as_str()).collect();
    let claimed_ids: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.provider_id.as_deref())
        .collect();
    let leaked_instances = instances
        .iter()
        .filter(|i| !i.state.is_gone())
        .filter(|i| !claimed_ids.contains(i.provider_id.as_str()))
        .filter(|i| {
            i.tags
                .get(TAG_NODECLAIM)
                .is_none_or(|name| !claim_names.contains(name.as_str()))
        })
        .filter(|i| {
            now.duration_since(i.launch_time)
                .is_ok_and(|age| age >= leak_grace)
        })
        .map(|i| i.provider_id.clone())
        .collect();
    let live_ids: HashSet<&str> = instances
        .iter()
        .filter(|i| !i.state.is_gone())
        .map(|i| i.provider_id.as_str())
        .collect();
    let orphaned_claims = claims
        .iter()
        .filter(|c| !c.deleting)
        .filter_map(|c| Some((c, c.provider_id.as_deref()?)))
        .filter(|(_, id)| !live_ids.contains(id))
        .map(|(c, id)| (c.name.clone(), id.to_owned()))
        .collect();
    Collection {
        leaked_instances,
        orphaned_claims,
    }
}

/// `kerf_garbage_collected_total{kind="instance"|"nodeclaim"}`.
#[derive(Clone, Default)]
pub struct GarbageMetrics {
    collected: Family<KindLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

impl GarbageMetrics {
    pub fn register(registry: &mut Registry) -> GarbageMetrics {
        let metrics = GarbageMetrics::default();
        registry.register(
            "kerf_garbage_collected",
            "Leaked instances terminated and NodeClaims deleted because their instance was gone",
            metrics.collected.clone(),
        );
        metrics
    }

    fn count(&self, kind: &'static str) {
        self.collected.get_or_create(&KindLabel { kind }).inc();
    }
}

/// Collects every `Settings::gc_interval` until the task is dropped; a failed pass is logged and retried at the
/// next tick.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut ticker = tokio::time::interval(ctx.settings.gc_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(error) = collect(&ctx).await {
            tracing::warn!(%error, "garbage collection pass failed; retrying at the next interval");
        }
    }
}

async fn collect<C: CloudProvider>(ctx: &Context<C>) -> Result<(), Error> {
    let instances = ctx.cloud.list().await?;
    // Read after the listing: a claim created in between is seen, so its fresh instance is not called leaked.
    let claims: Vec<ClaimFacts> = ctx
        .state
        .node_claims
        .state()
        .iter()
        .map(|c| ClaimFacts::of(c))
        .collect();
    let collection = plan(
        &instances,
        &claims,
        ctx.clock.now(),
        ctx.settings.leak_grace,
    );
    for provider_id in &collection.leaked_instances {
        match ctx.cloud.delete(provider_id).await {
            Ok(()) | Err(CloudError::NotFound { .. }) => {
                tracing::info!(
                    provider_id,
                    "garbage collected instance: no NodeClaim names it"
                );
                ctx.metrics.garbage.count("instance");
            }
            Err(error) => {
                tracing::warn!(provider_id, %error, "could not terminate a leaked instance")
            }
        }
    }
    match ctx.cloud.collect_garbage(ctx.clock.now()).await {
        Ok(0) => {}
        Ok(removed) => tracing::info!(removed, "garbage collected unused launch configurations"),
        Err(error) => tracing::warn!(%error, "could not collect unused launch configurations"),
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (name, provider_id) in &collection.orphaned_claims {
        match ctx.cloud.get(provider_id).await {
            Err(CloudError::NotFound { .. }) => {}
            Ok(_) => continue, // the listing lagged
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %error, "could not look up a NodeClaim's instance");
                continue;
            }
        }
        match calls::delete(&api, name).await {
            Ok(()) => {
                tracing::info!(nodeclaim = %name, provider_id, "deleted nodeclaim: its instance is gone");
                ctx.metrics.garbage.count("nodeclaim");
            }
            Err(error) => tracing::warn!(nodeclaim = %name, %error, "could not delete a NodeClaim"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;
    use crate::cloud::{provider_id, InstanceState};
    use std::collections::BTreeMap;

    const GRACE: Duration = Duration::from_secs(30);

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn instance(
        id: &str,
        claim: Option<&str>,
        launched_ago: u64,
        state: InstanceState,
    ) -> Instance {
        let mut tags = BTreeMap::new();
        if let Some(claim) = claim {
            tags.insert(TAG_NODECLAIM.to_owned(), claim.to_owned());
        }
        Instance {
            id: id.to_owned(),
            provider_id: provider_id("us-west-2a", id),
            instance_type: "m5.large".to_owned(),
            zone: "us-west-2a".to_owned(),
            capacity_type: CapacityType::OnDemand,
            image_id: "ami-1".to_owned(),
            launch_time: t0() - Duration::from_secs(launched_ago),
            state,
            subnet_id: None,
            security_group_ids: vec![],
            tags,
            reservation: None,
            placement: None,
        }
    }

    fn claim(name: &str, instance: Option<&str>, deleting: bool) -> ClaimFacts {
        ClaimFacts {
            name: name.to_owned(),
            provider_id: instance.map(|id| provider_id("us-west-2a", id)),
            deleting,
        }
    }

    /// A launched claim (`instance`: its instance ID), being deleted or not, as the store holds it.
    fn stored_claim(name: &str, instance: Option<&str>, deleting: bool) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "finalizers": ["karpenter.sh/termination"],
                         "deletionTimestamp": deleting.then_some("2026-11-23T00:00:00Z")},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"providerID": instance.map(|id| provider_id("us-west-2a", id))},
        }))
        .expect("a nodeclaim")
    }

    /// A context over a scripted apiserver and an empty in-memory cloud, with `claims` in the store.
    fn scripted(
        claims: Vec<NodeClaim>,
    ) -> (
        Context<crate::cloud::sim::SimCloud>,
        crate::controllers::testkit::ApiServer,
    ) {
        use crate::controllers::{state::ClusterState, testkit};
        let (client, server) = testkit::apiserver();
        let cloud = crate::cloud::sim::SimCloud::new("test", Vec::new());
        let ctx = testkit::context(
            client,
            cloud,
            ClusterState::of(vec![], claims, vec![]),
            t0(),
        );
        (ctx, server)
    }

    fn collected(ctx: &Context<crate::cloud::sim::SimCloud>, kind: &'static str) -> u64 {
        ctx.metrics
            .garbage
            .collected
            .get_or_create(&KindLabel { kind })
            .get()
    }

    /// Only the launched claim whose instance a lookup says is gone is deleted: not the unlaunched one, not
    /// the one termination owns already.
    #[tokio::test]
    async fn a_launched_claim_whose_instance_is_gone_is_deleted() {
        use crate::controllers::testkit::Exchange;
        let (ctx, mut server) = scripted(vec![
            stored_claim("orphan", Some("i-0a"), false),
            stored_claim("unlaunched", None, false),
            stored_claim("deleting", Some("i-0b"), true),
        ]);
        let deleted =
            serde_json::to_value(stored_claim("orphan", Some("i-0a"), true)).expect("json");
        let script =
            vec![Exchange::delete("/apis/karpenter.sh/v1/nodeclaims/orphan").answer(200, deleted)];
        server.serve(script, collect(&ctx)).await.expect("a pass");
        assert_eq!(collected(&ctx, "nodeclaim"), 1);
    }

    /// One claim the apiserver refuses to delete (500) is logged and left for the next pass; the others are
    /// still deleted in the same pass. (The store's order is not fixed: the answer goes by the path.)
    #[tokio::test]
    async fn a_claim_that_cannot_be_deleted_does_not_stop_the_others() {
        use crate::controllers::testkit::{status, Exchange};
        let (ctx, mut server) = scripted(vec![
            stored_claim("refused", Some("i-1"), false),
            stored_claim("deleted", Some("i-2"), false),
        ]);
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let delete = |asked: Arc<std::sync::Mutex<Vec<String>>>| {
            Exchange::delete("/apis/karpenter.sh/v1/nodeclaims/*").answer_with(move |seen| {
                let name = seen.path.rsplit('/').next().unwrap_or_default().to_owned();
                asked.lock().expect("lock").push(name.clone());
                if name == "refused" {
                    (500, status(500, "InternalError", "etcd is unhappy"))
                } else {
                    let claim = stored_claim(&name, Some("i-2"), true);
                    (200, serde_json::to_value(claim).expect("json"))
                }
            })
        };
        let script = vec![delete(asked.clone()), delete(asked.clone())];
        server.serve(script, collect(&ctx)).await.expect("a pass");
        let mut asked = asked.lock().expect("lock").clone();
        asked.sort();
        assert_eq!(asked, ["deleted", "refused"]);
        assert_eq!(collected(&ctx, "nodeclaim"), 1);
    }

    /// A lookup that fails says nothing about the instance: the claim is kept (Karpenter's garbage
    /// collection likewise deletes only on NotFound).
    #[tokio::test]
    async fn a_claim_whose_instance_lookup_fails_is_kept() {
        use crate::cloud::sim::Operation;
        let (ctx, mut server) = scripted(vec![stored_claim("orphan", Some("i-1"), false)]);
        let throttled = CloudError::Api {
            operation: "DescribeInstances",
            code: "RequestLimitExceeded".into(),
            message: "Request limit exceeded.".into(),
        };
        ctx.cloud.inject_api_error(Operation::Get, throttled, 1);
        server.serve(vec![], collect(&ctx)).await.expect("a pass");
        assert_eq!(collected(&ctx, "nodeclaim"), 0);
    }

    #[test]
    fn an_instance_no_claim_names_is_leaked_once_past_the_grace_period() {
        let instances = [
            instance("i-old", Some("gone-claim"), 31, InstanceState::Running),
            instance("i-untagged", None, 600, InstanceState::Running),
            instance("i-young", Some("gone-claim"), 29, InstanceState::Pending),
        ];
        let collection = plan(&instances, &[], t0(), GRACE);
        assert_eq!(
            collection.leaked_instances,
            [
                provider_id("us-west-2a", "i-old"),
                provider_id("us-west-2a", "i-untagged")
            ]
        );
    }

    #[test]
    fn a_claim_accounts_for_its_instance_by_tag_before_its_status_is_written() {
        // The crash window: the instance exists and is tagged, the claim has no providerID yet.
        let instances = [instance(
            "i-1",
            Some("default-abc"),
            600,
            InstanceState::Running,
        )];
        let claims = [claim("default-abc", None, false)];
        assert_eq!(
            plan(&instances, &claims, t0(), GRACE),
            Collection::default()
        );
    }

    #[test]
    fn a_claim_accounts_for_its_instance_by_provider_id_whatever_the_tag_says() {
        let instances = [instance("i-1", Some("other"), 600, InstanceState::Running)];
        let claims = [claim("default-abc", Some("i-1"), false)];
        assert_eq!(
            plan(&instances, &claims, t0(), GRACE),
            Collection::default()
        );
    }

    #[test]
    fn terminating_instances_are_not_collected_again_and_leave_their_claims_orphaned() {
        let instances = [instance("i-1", None, 600, InstanceState::ShuttingDown)];
        let claims = [claim("default-abc", Some("i-1"), false)];
        let collection = plan(&instances, &claims, t0(), GRACE);
        assert!(collection.leaked_instances.is_empty());
        assert_eq!(
            collection.orphaned_claims,
            [("default-abc".to_owned(), provider_id("us-west-2a", "i-1"))]
        );
    }

    #[test]
    fn unlaunched_and_deleting_claims_are_never_orphaned() {
        let claims = [
            claim("not-launched", None, false),
            claim("deleting", Some("i-9"), true),
        ];
        assert_eq!(plan(&[], &claims, t0(), GRACE), Collection::default());
    }
}
