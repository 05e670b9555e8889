//! The scheduler preparation a driver keeps from one disruption pass to the next.

use super::input::DisruptionInput;
use crate::catalog::Catalog;
use crate::scheduling::{DaemonSetPod, PoolKey, Prepared};
use std::sync::Arc;

/// The last pass's scheduler preparation (every pool's compatible instance types, ranked, with their offerings
/// and DaemonSet overhead: [`Prepared`]), reused while the catalog is the same shared copy and the NodePools
/// and the DaemonSets' pods are unchanged. Preparing reads the whole catalog for every pool, about a tenth of a
/// pass over a thousand steady nodes; the controller and the simulator run passes one after another over the
/// same pools and catalog.
#[derive(Default)]
pub struct PassPreparation {
    kept: Option<Kept>,
    made: usize,
}

struct Kept {
    catalog: Arc<Catalog>,
    pools: Vec<PoolKey>,
    daemons: Vec<DaemonSetPod>,
    prepared: Prepared,
}

impl PassPreparation {
    /// The preparation of `input`'s NodePools over `catalog` (the shared copy `input.catalog` is) with its
    /// DaemonSets' pods, from the last call when all of them are unchanged, else made now and kept. Hand it to
    /// the pass as [`DisruptionInput::prepared`].
    pub fn get(&mut self, input: &DisruptionInput<'_>, catalog: &Arc<Catalog>) -> &Prepared {
        debug_assert!(
            std::ptr::eq(input.catalog, &**catalog),
            "the input's catalog is the shared one"
        );
        let pools: Vec<PoolKey> = input.nodepools.iter().map(Prepared::pool_key).collect();
        let daemons = daemon_pods(input);
        let fresh = self.kept.as_ref().is_some_and(|k| {
            Arc::ptr_eq(&k.catalog, catalog) && k.pools == pools && k.daemons == daemons
        });
        if !fresh {
            self.kept = None;
        }
        let made = &mut self.made;
        let kept = self.kept.get_or_insert_with(|| {
            *made += 1;
            Kept {
                prepared: Prepared::new(input.nodepools, catalog, &daemons),
                catalog: catalog.clone(),
                pools,
                daemons,
            }
        });
        &kept.prepared
    }

    /// How many preparations were made rather than reused so far.
    pub fn made(&self) -> usize {
        self.made
    }
}

/// The pod each DaemonSet of `input` runs on a node: its newest pod on the input's nodes, else its template (as
/// provisioning reads them); a DaemonSet whose pod cannot be read is left out.
pub(crate) fn daemon_pods(input: &DisruptionInput<'_>) -> Vec<DaemonSetPod> {
    DaemonSetPod::of_daemonsets(input.daemonsets, input.nodes.iter().flat_map(|n| &n.pods))
        .unwrap_or_else(|_| {
            input
                .daemonsets
                .iter()
                .filter_map(|d| DaemonSetPod::from_daemonset(d, None).ok())
                .collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodepool::NodePool;
    use crate::disruption::{NodeInput, Settings};
    use crate::scheduling::volumes::VolumeIndex;
    use crate::scheduling::DefaultSpread;
    use k8s_openapi::api::apps::v1::DaemonSet;
    use serde_json::json;

    fn pool(cpu_limit: &str) -> NodePool {
        serde_json::from_value(json!({
            "metadata": {"name": "default"},
            "spec": {"limits": {"cpu": cpu_limit}, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}}
        }))
        .expect("pool")
    }

    fn daemonset(cpu: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}}}]}}}
        }))
        .expect("daemonset")
    }

    fn input<'a>(
        pools: &'a [NodePool],
        daemonsets: &'a [DaemonSet],
        catalog: &'a Catalog,
    ) -> DisruptionInput<'a> {
        DisruptionInput {
            nodepools: pools,
            nodes: &[] as &[NodeInput],
            pending: &[],
            pdbs: &[],
            daemonsets,
            catalog,
            volumes: VolumeIndex::empty(),
            default_spread: DefaultSpread::none(),
            settings: Settings::default(),
            prepared: None,
        }
    }

    #[test]
    fn a_preparation_is_made_again_only_when_pools_catalog_or_daemonsets_change() {
        let catalog = Arc::new(Catalog::default());
        let (pools, daemonsets) = (vec![pool("100")], vec![daemonset("100m")]);
        let mut kept = PassPreparation::default();
        kept.get(&input(&pools, &daemonsets, &catalog), &catalog);
        kept.get(&input(&pools, &daemonsets, &catalog), &catalog);
        assert_eq!(kept.made(), 1, "same pools, catalog and DaemonSets: reused");

        let changed_pool = vec![pool("200")];
        kept.get(&input(&changed_pool, &daemonsets, &catalog), &catalog);
        assert_eq!(kept.made(), 2, "a pool's spec changed");

        let changed_daemonset = vec![daemonset("200m")];
        kept.get(
            &input(&changed_pool, &changed_daemonset, &catalog),
            &catalog,
        );
        assert_eq!(kept.made(), 3, "a DaemonSet's pod changed");

        // An equal catalog that is another copy: catalogs are told apart by the copy, not compared.
        let other = Arc::new(Catalog::default());
        kept.get(&input(&changed_pool, &changed_daemonset, &other), &other);
        assert_eq!(kept.made(), 4, "another catalog");
        kept.get(&input(&changed_pool, &changed_daemonset, &other), &other);
        assert_eq!(kept.made(), 4, "then reused again");
    }
}
