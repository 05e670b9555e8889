//! The snapshot one disruption pass decides on, assembled from the reflector stores, the PodDisruptionBudgets
//! (listed per pass: no other controller watches them), the catalogs of the EC2NodeClasses in use and the
//! cloud facts of drift ([`CloudFacts`]).

use super::super::catalogs::{class_catalogs, Catalogs};
use super::super::kit::pdbs::{list_pdbs, PdbListError as SnapshotError};
use super::super::state::owned;
use super::super::Context;
use super::cloud_drift::{CloudFacts, LIST_TIMEOUT};
use crate::api::nodepool::NodePool;
use crate::catalog::{Catalog, InstanceType};
use crate::cloud::CloudProvider;
use crate::disruption::NodeInput;
use crate::engine::disruption_input::{node_inputs, Facts};
use crate::engine::provisioning::pending;
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::DefaultSpread;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Everything a [`crate::disruption::DisruptionInput`] borrows, owned.
pub struct Snapshot {
    pub nodepools: Vec<NodePool>,
    pub nodes: Vec<NodeInput>,
    pub pending: Vec<Pod>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub daemonsets: Vec<DaemonSet>,
    /// The instance types of every EC2NodeClass a NodePool references, each name once.
    pub catalog: Arc<Catalog>,
    /// The claims, volumes and classes pods' volumes need (shared with the stores).
    pub volumes: VolumeIndex,
    /// The cluster's default spread, with the Services and controllers that deduce pods' selectors.
    pub default_spread: DefaultSpread,
    /// The operator's settings of the engine: solve policies (as provisioning applies them), feature gates.
    pub settings: crate::disruption::Settings,
}

/// Takes a snapshot. `replacements` are the claims disruption launched, with when: no-churn protects them.
pub async fn snapshot<C: CloudProvider>(
    ctx: &Context<C>,
    catalogs: &mut Catalogs,
    replacements: &HashMap<String, Timestamp>,
) -> Result<Snapshot, SnapshotError> {
    let state = &ctx.state;
    // Nodes and claims before pods, as provisioning does: a pod bound meanwhile is pending here, never missing.
    // Shared with the store, as the claims are.
    let nodes: HashMap<String, Arc<Node>> = state
        .nodes
        .state()
        .into_iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, n)))
        .collect();
    // Shared with the store, not copied: each lists up to 600 instance types.
    let claims = state.node_claims.state();
    let nodepools = owned(state.node_pools.state());
    let classes = owned(state.node_classes.state());
    let daemonsets = owned(state.daemon_sets.state());
    let pods = state.pods.state();
    let volumes = state.volumes();
    let pdbs = list_pdbs(&ctx.client).await?;
    let class_catalogs = class_catalogs(ctx, catalogs, &nodepools, &classes).await;
    let catalog = merge(class_catalogs.values());
    // After the catalogs: they refreshed the resolutions drift is judged against.
    let now = ctx.clock.now();
    let cloud = CloudFacts::gather(&ctx.cloud, catalogs, &classes, now, LIST_TIMEOUT).await;
    let stamp = Timestamp::try_from(now).unwrap_or(Timestamp::UNIX_EPOCH);

    // The store's pods are shared, not copied: each pod is copied once, into the node input or the pending
    // list that holds it (a pass used to hold three copies of every bound pod).
    // CapacityBuffers' virtual pods: on the Nodes provisioning planned them onto (so those are not empty, and a
    // consolidation must find them room), or pending with the others.
    let (bound_virtual, waiting_virtual) = ctx.buffer_pods.for_disruption();
    let pending_pods = pods
        .iter()
        .filter(|pod| pending::is_provisionable(pod))
        .map(|pod| pod.as_ref().clone())
        .chain(waiting_virtual)
        .collect();
    let nodes = ctx.nominations.with(|nominations| {
        node_inputs(
            claims,
            |name| nodes.get(name).cloned(),
            pods.iter().map(AsRef::as_ref).chain(&bound_virtual),
            nominations,
            stamp,
            |claim| Facts {
                cloud_drift: cloud.as_ref().and_then(|c| c.drift(claim)),
                launched_as_replacement: claim
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|name| replacements.get(name))
                    .copied(),
            },
        )
    });
    Ok(Snapshot {
        nodepools,
        nodes,
        pending: pending_pods,
        pdbs,
        daemonsets,
        catalog,
        volumes,
        default_spread: state.default_spread(&ctx.settings.scheduler_config),
        settings: ctx.settings.disruption(),
    })
}

/// One catalog of the instance types of all `catalogs`; a type listed by several classes is kept as the first
/// class lists it, since the engine looks types up by name (and pool). A single class's catalog is shared, not copied: a copy of
/// every EC2 type's requirements is over 20 MB, made again on every pass.
fn merge<'a>(catalogs: impl IntoIterator<Item = &'a Arc<Catalog>>) -> Arc<Catalog> {
    let catalogs: Vec<&Arc<Catalog>> = catalogs.into_iter().collect();
    if let [only] = catalogs[..] {
        return only.clone();
    }
    // Within one class a name may repeat: NodeOverlays give pools that see a type differently their own entry.
    let mut seen: HashSet<&str> = HashSet::new();
    let mut instance_types: Vec<InstanceType> = Vec::new();
    for catalog in catalogs {
        let names: HashSet<&str> = catalog
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        instance_types.extend(
            catalog
                .instance_types
                .iter()
                .filter(|t| !seen.contains(t.name.as_str()))
                .cloned(),
        );
        seen.extend(names);
    }
    Arc::new(Catalog { instance_types })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CatalogSettings, Pricing};

    fn catalog(names: &[&str]) -> Arc<Catalog> {
        let all = Catalog::embedded("us-west-2", &CatalogSettings::default(), &Pricing::none())
            .expect("embedded catalog");
        Arc::new(Catalog {
            instance_types: all
                .instance_types
                .into_iter()
                .filter(|t| names.contains(&t.name.as_str()))
                .collect(),
        })
    }

    fn names(catalog: &Catalog) -> Vec<&str> {
        catalog
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect()
    }

    #[test]
    fn one_class_catalog_is_shared_and_several_are_merged_each_type_once() {
        let first = catalog(&["m5.large", "m5.xlarge"]);
        assert!(Arc::ptr_eq(&merge([&first]), &first));
        let second = catalog(&["m5.xlarge", "c5.large"]);
        let merged = merge([&first, &second]);
        assert_eq!(names(&merged), ["m5.large", "m5.xlarge", "c5.large"]);
        assert!(merge([]).instance_types.is_empty());
    }
}
