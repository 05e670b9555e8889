//! Pod advice kept current. The webhook annotates a pod with its advice once, when the pod is created; a pod that
//! is still pending when NodePools or EC2NodeClasses change would go on saying what was true then. Each advice
//! carries the fingerprint of the pools and classes it was computed from
//! ([`INPUTS_ANNOTATION`](crate::admission::advice::INPUTS_ANNOTATION)); every [`REFRESH_INTERVAL`] this
//! controller recomputes, with the webhook's own [`PodAdvisor`] and the same catalog, the advice of each pending
//! pod whose fingerprint is not the cluster's, and writes it within the pod-annotation write budget
//! ([`pod_status::WRITES_PER_SECOND`]). Pods without advice (pod advice turned off in the webhook) are left
//! alone.

use super::pod_status;
use crate::admission::advice::{inputs_fingerprint, INPUTS_ANNOTATION, REQUIREMENTS_ANNOTATION};
use crate::admission::pods::{PodAdvisor, VolumeSource};
use crate::catalog::Catalog;
use crate::controllers::Context;
use crate::scheduling::volumes::VolumeIndex;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How often pending pods' advice is compared with the cluster's NodePools and EC2NodeClasses.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// Writes in flight at once.
const PARALLEL_WRITES: usize = 8;

/// The catalog advice is computed against: the one `kerf webhook` advises from (the embedded catalog of the
/// region, with the pricing file), built the first time some advice is stale and kept for the process.
pub struct AdviceCatalog {
    load: Box<dyn Fn() -> Result<Catalog, String> + Send + Sync>,
    loaded: OnceLock<Result<&'static Catalog, String>>,
}

impl AdviceCatalog {
    pub fn new(load: impl Fn() -> Result<Catalog, String> + Send + Sync + 'static) -> Self {
        AdviceCatalog {
            load: Box::new(load),
            loaded: OnceLock::new(),
        }
    }

    /// The catalog, loaded on first use; a load that failed stays failed (the same files would fail again).
    fn get(&self) -> Result<&'static Catalog, &str> {
        self.loaded
            .get_or_init(|| {
                // One catalog per process, shared by every advisor, as the webhook holds it.
                (self.load)().map(|catalog| &*Box::leak(Box::new(catalog)))
            })
            .as_ref()
            .map(|catalog| *catalog)
            .map_err(String::as_str)
    }
}

/// The pods whose advice to recompute: not bound to a node, not finished or being deleted, advised by the
/// webhook, and advised from other inputs than `inputs` (or from before advice carried a fingerprint).
pub fn stale<'a>(pods: &'a [Arc<Pod>], inputs: &str) -> Vec<&'a Arc<Pod>> {
    pods.iter()
        .filter(|pod| {
            let bound = pod
                .spec
                .as_ref()
                .is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty()));
            let finished = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
            let annotations = pod.metadata.annotations.as_ref();
            let advised = annotations.is_some_and(|a| a.contains_key(REQUIREMENTS_ANNOTATION));
            let current = annotations
                .and_then(|a| a.get(INPUTS_ANNOTATION))
                .map(String::as_str)
                == Some(inputs);
            !bound && !finished && pod.metadata.deletion_timestamp.is_none() && advised && !current
        })
        .collect()
}

/// The volume objects of the cluster as pod advice reads them.
struct Volumes(VolumeIndex);

impl VolumeSource for Volumes {
    fn index(&self) -> Option<VolumeIndex> {
        Some(self.0.clone())
    }
}

/// Recomputes stale advice every [`REFRESH_INTERVAL`], until the controller stops.
pub async fn run<C: Send + Sync + 'static>(
    ctx: Arc<Context<C>>,
) -> Result<(), crate::controllers::Error> {
    let mut advisor: Option<Arc<PodAdvisor>> = None;
    let mut ticks = tokio::time::interval(REFRESH_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let pools: Vec<_> = ctx
            .state
            .node_pools
            .state()
            .iter()
            .map(|p| (**p).clone())
            .collect();
        let classes: Vec<_> = ctx
            .state
            .node_classes
            .state()
            .iter()
            .map(|c| (**c).clone())
            .collect();
        let inputs = inputs_fingerprint(&pools, &classes);
        let pods = ctx.state.pods.state();
        let stale = stale(&pods, &inputs);
        if stale.is_empty() {
            continue;
        }
        let catalog = match ctx.advice_catalog.get() {
            Ok(catalog) => catalog,
            Err(error) => {
                tracing::warn!(%error, "pod advice cannot be recomputed: the catalog does not load");
                continue;
            }
        };
        let current = match &advisor {
            Some(known) if known.inputs() == inputs => known.clone(),
            _ => {
                let fresh = Arc::new(PodAdvisor::new(&pools, &classes, catalog));
                advisor = Some(fresh.clone());
                fresh
            }
        };
        let volumes = Volumes(ctx.state.volumes());
        let writes: Vec<(Arc<Pod>, Value)> = stale
            .into_iter()
            .filter_map(|pod| {
                let raw = serde_json::to_value(pod.as_ref()).ok()?;
                match current.annotations(&raw, pod.metadata.namespace.as_deref(), Some(&volumes)) {
                    Ok(annotations) => Some((
                        pod.clone(),
                        json!({"metadata": {"annotations": annotations.as_ref()}}),
                    )),
                    Err(error) => {
                        tracing::debug!(pod = ?pod.metadata.name, %error, "pod advice not recomputed");
                        None
                    }
                }
            })
            .collect();
        tracing::debug!(pods = writes.len(), %inputs, "recomputing stale pod advice");
        pod_status::write_patches(&ctx.client, writes, PARALLEL_WRITES).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)], node: Option<&str>, phase: Option<&str>) -> Arc<Pod> {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .expect("a pod");
        pod.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = node.map(str::to_owned);
        }
        pod.status = phase.map(|phase| k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.to_owned()),
            ..Default::default()
        });
        Arc::new(pod)
    }

    #[test]
    fn only_pending_advised_pods_with_other_inputs_are_stale() {
        fn advised(inputs: &str) -> [(&str, &str); 2] {
            [(REQUIREMENTS_ANNOTATION, "{}"), (INPUTS_ANNOTATION, inputs)]
        }
        let pods = [
            pod(&advised("old"), None, None),                    // stale
            pod(&advised("now"), None, None),                    // current
            pod(&[(REQUIREMENTS_ANNOTATION, "{}")], None, None), // advised before fingerprints: stale
            pod(&[], None, None),                                // never advised (advice off)
            pod(&advised("old"), Some("node-a"), None),          // bound
            pod(&advised("old"), None, Some("Succeeded")),       // finished
        ];
        let stale: Vec<usize> = stale(&pods, "now")
            .into_iter()
            .map(|p| {
                pods.iter()
                    .position(|q| Arc::ptr_eq(p, q))
                    .expect("one of them")
            })
            .collect();
        assert_eq!(stale, [0, 2]);
    }

    #[test]
    fn a_catalog_that_does_not_load_says_why_every_time() {
        let catalog = AdviceCatalog::new(|| Err("prices.json: no such file".to_owned()));
        assert_eq!(catalog.get().err(), Some("prices.json: no such file"));
        assert_eq!(catalog.get().err(), Some("prices.json: no such file"));
    }
}
