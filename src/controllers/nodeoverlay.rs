//! NodeOverlay status, as Karpenter's `nodeoverlay.controller` keeps it (`NodeOverlay` gate only): every overlay's
//! `ValidationSucceeded` (false with `RuntimeValidation` and the errors, or `Conflict` when an overlay of the same
//! weight already sets the same thing on some instance type) and `Ready` (its root, `UnhealthyDependents` when
//! validation failed). The verdicts are the engine's ([`crate::engine::overlay::evaluate`]), the same evaluation
//! the decisions apply, taken from the shared catalog cache; written only when they change.

use super::catalogs::overlaid_class_catalogs;
use super::kit::calls;
use super::nodeclass::rfc3339;
use super::state::owned;
use super::{Context, Error};
use crate::api::condition;
use crate::api::nodeoverlay::NodeOverlay;
use crate::cloud::CloudProvider;
use crate::engine::overlay::Verdict;
use ::kube::api::{Patch, PatchParams};
use ::kube::Api;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const READY: &str = "Ready";
/// Karpenter re-evaluates every 6 hours besides on changes; instance types change with the catalog's refresh.
const RESYNC_INTERVAL: Duration = Duration::from_secs(60);

/// Writes the overlays' conditions on every cluster change and every minute, until the state watch ends.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    if ctx.state.node_overlays.is_none() {
        return Ok(());
    }
    let mut changed = ctx.state.changed.clone();
    loop {
        write_statuses(&ctx).await;
        tokio::select! {
            result = changed.changed() => if result.is_err() {
                return Ok(());
            },
            () = tokio::time::sleep(RESYNC_INTERVAL) => {}
        }
    }
}

async fn write_statuses<C: CloudProvider>(ctx: &Context<C>) {
    let Some(overlays) = ctx.state.overlays() else {
        return;
    };
    let pools = owned(ctx.state.node_pools.state());
    let classes = owned(ctx.state.node_classes.state());
    let mut catalogs = ctx.catalogs.clone();
    let (_, evaluation) = overlaid_class_catalogs(ctx, &mut catalogs, &pools, &classes).await;
    let Some(evaluation) = evaluation else {
        return;
    };
    let now = rfc3339(ctx.clock.now());
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    for overlay in &overlays {
        let Some(name) = overlay.metadata.name.as_deref() else {
            continue;
        };
        let Some(verdict) = evaluation.verdicts.get(name) else {
            continue;
        };
        let Some(patch) = status_patch(overlay, verdict, &now) else {
            continue;
        };
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = api.patch_status(name, &params, &patch);
        match calls::timed("patching the nodeoverlay status", write).await {
            Ok(_) => tracing::debug!(nodeoverlay = %name, ?verdict, "updated nodeoverlay status"),
            Err(calls::ReconcileError::Kube(::kube::Error::Api(status))) if status.code == 409 => {
                tracing::debug!(nodeoverlay = %name, "nodeoverlay changed meanwhile; its status is written on the next pass")
            }
            Err(error) => {
                tracing::warn!(nodeoverlay = %name, %error, "could not update the nodeoverlay status")
            }
        }
    }
}

/// The status patch that brings `overlay`'s conditions to `verdict`, if they differ.
fn status_patch(overlay: &NodeOverlay, verdict: &Verdict, now: &str) -> Option<serde_json::Value> {
    let mut conditions = overlay
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = overlay.metadata.generation;
    let (ok, reason, message) = verdict.condition();
    let mut changed = condition::set(
        &mut conditions,
        VALIDATION_SUCCEEDED,
        ok,
        reason,
        message,
        now,
        generation,
    );
    let (ready_reason, ready_message) = if ok {
        (READY.to_owned(), String::new())
    } else {
        (
            "UnhealthyDependents".to_owned(),
            format!("{VALIDATION_SUCCEEDED}=False"),
        )
    };
    changed |= condition::set(
        &mut conditions,
        READY,
        ok,
        &ready_reason,
        &ready_message,
        now,
        generation,
    );
    // The list is replaced whole: guarded by the resourceVersion, so a concurrent write is not lost.
    changed.then(|| {
        json!({
            "metadata": {"resourceVersion": overlay.metadata.resource_version},
            "status": {"conditions": conditions},
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(status: serde_json::Value) -> NodeOverlay {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "o", "generation": 2, "resourceVersion": "7"},
            "spec": {"requirements": []}, "status": status
        }))
        .expect("overlay")
    }

    #[test]
    fn conditions_follow_the_verdict_and_are_written_only_on_change() {
        let now = "2026-11-27T00:00:00Z";
        let patch = status_patch(&overlay(json!({})), &Verdict::Conflict, now).expect("a write");
        let conditions = &patch["status"]["conditions"];
        assert_eq!(conditions[0]["type"], "ValidationSucceeded");
        assert_eq!(conditions[0]["status"], "False");
        assert_eq!(conditions[0]["reason"], "Conflict");
        assert_eq!(conditions[0]["message"], "conflict with another overlay");
        assert_eq!(conditions[1]["type"], "Ready");
        assert_eq!(conditions[1]["reason"], "UnhealthyDependents");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let written = overlay(json!({"conditions": conditions}));
        assert!(status_patch(&written, &Verdict::Conflict, now).is_none());
        let healed = status_patch(&written, &Verdict::Applied, now).expect("a write");
        assert_eq!(healed["status"]["conditions"][0]["status"], "True");
        assert_eq!(healed["status"]["conditions"][1]["status"], "True");
        assert_eq!(healed["status"]["conditions"][1]["observedGeneration"], 2);
    }

    /// The scripted-apiserver tests of the status pass ([`write_statuses`]).
    mod scripted {
        use super::*;
        use crate::api::ec2nodeclass::EC2NodeClass;
        use crate::api::nodepool::NodePool;
        use crate::cloud::sim::SimCloud;
        use crate::controllers::nodeclaim::tests::{cloud, t0};
        use crate::controllers::state::ClusterState;
        use crate::controllers::testkit::{self, apiserver, ApiServer, Exchange};
        use serde_json::Value;
        use std::sync::Mutex;

        const MERGE_PATCH: &str = "application/merge-patch+json";
        /// `t0()` as conditions carry it.
        const NOW: &str = "2027-01-15T08:00:00Z";

        fn status_path(name: &str) -> String {
            format!("/apis/karpenter.sh/v1alpha1/nodeoverlays/{name}/status")
        }

        /// The overlay `name` (generation 2, version 7) changing every instance type's price as `spec` says.
        fn overlay_json(name: &str, spec: Value, status: Value) -> Value {
            let mut full = json!({"requirements": []});
            for (key, value) in spec.as_object().into_iter().flatten() {
                full[key] = value.clone();
            }
            json!({
                "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                "metadata": {"name": name, "generation": 2, "resourceVersion": "7"},
                "spec": full, "status": status,
            })
        }

        fn named(name: &str, spec: Value, status: Value) -> NodeOverlay {
            serde_json::from_value(overlay_json(name, spec, status)).expect("an overlay")
        }

        fn pool() -> NodePool {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "general", "generation": 1},
                "spec": {"template": {"spec": {"requirements": [], "nodeClassRef":
                    {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
            }))
            .expect("a NodePool")
        }

        /// The class the in-memory cloud ([`cloud`]) resolves.
        fn class() -> EC2NodeClass {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default", "generation": 1},
                "spec": {"role": "NodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "lifecycle"}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "lifecycle"}}]},
            }))
            .expect("an EC2NodeClass")
        }

        /// A context over a scripted apiserver and the in-memory cloud, with the `NodeOverlay` gate's store
        /// holding `overlays`, and the pool and class that use [`cloud`]'s instance types when `with_pool`.
        fn context(overlays: Vec<NodeOverlay>, with_pool: bool) -> (Context<SimCloud>, ApiServer) {
            let (client, server) = apiserver();
            let mut state = ClusterState::of(vec![], vec![], vec![]);
            state.node_overlays = Some(crate::controllers::state::store_of(overlays));
            if with_pool {
                state.node_pools = crate::controllers::state::store_of(vec![pool()]);
                state.node_classes = crate::controllers::state::store_of(vec![class()]);
            }
            (testkit::context(client, cloud(), state, t0()), server)
        }

        /// A status write of some overlay (the store's order is not fixed), its path and body kept in `writes`,
        /// answered `code`.
        fn write(writes: &Arc<Mutex<Vec<(String, Value)>>>, code: u16) -> Exchange {
            let writes = writes.clone();
            Exchange::patch("/apis/karpenter.sh/v1alpha1/nodeoverlays/*")
                .content_type(MERGE_PATCH)
                .answer_with(move |seen| {
                    let name = seen
                        .path
                        .split('/')
                        .nth_back(1)
                        .unwrap_or_default()
                        .to_owned();
                    writes
                        .lock()
                        .expect("lock")
                        .push((seen.path.clone(), seen.body.clone()));
                    match code {
                        200 => (200, overlay_json(&name, json!({}), json!({}))),
                        _ => (code, testkit::status(code, "Conflict", "modified")),
                    }
                })
        }

        fn body_of<'a>(writes: &'a [(String, Value)], name: &str) -> &'a Value {
            let path = status_path(name);
            &writes
                .iter()
                .find(|(p, _)| *p == path)
                .unwrap_or_else(|| panic!("no write of {name}: {writes:?}"))
                .1
        }

        fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                   "lastTransitionTime": NOW, "observedGeneration": 2})
        }

        /// Karpenter's "should fail validation" and the happy path: each overlay gets `ValidationSucceeded` and
        /// `Ready` in a merge patch of its status tied to the version read; the invalid one is false with the
        /// runtime validation's error and `Ready` names it.
        #[tokio::test]
        async fn each_overlay_gets_its_verdict_under_its_version() {
            let (ctx, mut server) = context(
                vec![
                    named("good", json!({"price": "0.5"}), json!({})),
                    named(
                        "bad",
                        json!({"price": "0.5", "priceAdjustment": "+10%"}),
                        json!({}),
                    ),
                ],
                false,
            );
            let writes = Arc::new(Mutex::new(Vec::new()));
            let script = vec![write(&writes, 200), write(&writes, 200)];
            server.serve(script, write_statuses(&ctx)).await;
            let writes = writes.lock().expect("lock").clone();
            assert_eq!(
                *body_of(&writes, "good"),
                json!({"metadata": {"resourceVersion": "7"}, "status": {"conditions": [
                    condition(VALIDATION_SUCCEEDED, "True", "ValidationSucceeded", ""),
                    condition(READY, "True", READY, ""),
                ]}})
            );
            let bad = &body_of(&writes, "bad")["status"]["conditions"];
            assert_eq!(bad[0]["status"], "False");
            assert_eq!(bad[0]["reason"], "RuntimeValidation");
            let message = bad[0]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("cannot set both 'price' and 'priceAdjustment'"),
                "{message}"
            );
            assert_eq!(
                bad[1],
                condition(
                    READY,
                    "False",
                    "UnhealthyDependents",
                    "ValidationSucceeded=False"
                )
            );
        }

        /// Karpenter's "should fail with conflicting overlays of the same weight": two overlays of one weight
        /// that both price the instance types of a pool (from the class's catalog, read from the cloud) — the
        /// one applied first (reverse name order) wins, the other is `Conflict`.
        #[tokio::test]
        async fn of_two_overlays_of_one_weight_pricing_the_same_types_one_conflicts() {
            let spec = json!({"price": "0.5", "weight": 10});
            let (ctx, mut server) = context(
                vec![
                    named("a", spec.clone(), json!({})),
                    named("b", spec, json!({})),
                ],
                true,
            );
            let writes = Arc::new(Mutex::new(Vec::new()));
            let script = vec![write(&writes, 200), write(&writes, 200)];
            server.serve(script, write_statuses(&ctx)).await;
            let writes = writes.lock().expect("lock").clone();
            let verdict = |name| body_of(&writes, name)["status"]["conditions"][0].clone();
            assert_eq!(verdict("b")["status"], "True");
            assert_eq!(
                verdict("a"),
                condition(
                    VALIDATION_SUCCEEDED,
                    "False",
                    "Conflict",
                    "conflict with another overlay"
                )
            );
        }

        /// An overlay whose conditions show its verdict is not written: no request at all.
        #[tokio::test]
        async fn an_overlay_showing_its_verdict_is_not_written() {
            let conditions = json!({"conditions": [
                condition(VALIDATION_SUCCEEDED, "True", "ValidationSucceeded", ""),
                condition(READY, "True", READY, ""),
            ]});
            let (ctx, mut server) = context(
                vec![named("good", json!({"price": "0.5"}), conditions)],
                false,
            );
            server.serve(vec![], write_statuses(&ctx)).await;
        }

        /// A refused write (409: the overlay changed since it was read) does not stop the other overlays' writes,
        /// and the next pass writes it again.
        #[tokio::test]
        async fn a_conflict_is_written_again_on_the_next_pass() {
            let (ctx, mut server) = context(
                vec![
                    named("a", json!({"price": "0.5"}), json!({})),
                    named("b", json!({"price": "0.6"}), json!({})),
                ],
                false,
            );
            let writes = Arc::new(Mutex::new(Vec::new()));
            let script = vec![write(&writes, 409), write(&writes, 409)];
            server.serve(script, write_statuses(&ctx)).await;
            assert_eq!(writes.lock().expect("lock").len(), 2);
            let script = vec![write(&writes, 200), write(&writes, 200)];
            server.serve(script, write_statuses(&ctx)).await;
            let writes = writes.lock().expect("lock").clone();
            assert_eq!(writes[2..].len(), 2);
            for name in ["a", "b"] {
                assert_eq!(body_of(&writes[..2], name), body_of(&writes[2..], name));
            }
        }
    }
}
