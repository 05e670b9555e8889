//! The scheduler preparations a provisioning decision reuses from the ones before it.

use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::scheduling::{DaemonSetPod, PoolKey, Prepared};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Each EC2NodeClass's scheduler preparation ([`Prepared`]: every pool's compatible instance types, ranked,
/// with their offerings and DaemonSet overhead) from the decisions before, reused while the class's catalog is
/// the same shared copy and its NodePools and the DaemonSets are unchanged. Preparing goes through the whole
/// catalog for every pool, about half of a decision's time when nothing else changed.
#[derive(Default)]
pub struct Preparations {
    by_class: HashMap<String, Preparation>,
    /// How many preparations were made (not reused) so far.
    made: usize,
}

struct Preparation {
    catalog: Arc<Catalog>,
    pools: Vec<PoolKey>,
    daemon_sets: Vec<DaemonSetKey>,
    prepared: Prepared,
}

/// What of a DaemonSet the preparation depends on: its namespace, name and spec.
type DaemonSetKey = (Option<String>, Option<String>, DaemonSetSpec);

fn daemon_set_key(daemon_set: &DaemonSet) -> DaemonSetKey {
    (
        daemon_set.metadata.namespace.clone(),
        daemon_set.metadata.name.clone(),
        daemon_set.spec.clone(),
    )
}

impl Preparations {
    /// How many preparations were made rather than reused so far.
    pub fn made(&self) -> usize {
        self.made
    }

    /// The preparation of `class`'s `pools` over `catalog` with `daemon_sets` (as `daemons`), from the last
    /// decision when all of them are unchanged, else made now and kept. The watch caches list objects in no
    /// set order, so the keys are compared sorted by name. (Building them copies a few specs: microseconds,
    /// against milliseconds for a preparation.)
    pub(super) fn get(
        &mut self,
        class: &str,
        pools: &[NodePool],
        catalog: &Arc<Catalog>,
        daemon_sets: &[DaemonSet],
        daemons: &[DaemonSetPod],
    ) -> &Prepared {
        let mut pool_keys: Vec<PoolKey> = pools.iter().map(Prepared::pool_key).collect();
        pool_keys.sort_by(|a, b| a.0.cmp(&b.0));
        let mut daemon_set_keys: Vec<DaemonSetKey> =
            daemon_sets.iter().map(daemon_set_key).collect();
        daemon_set_keys.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let fresh = self.by_class.get(class).is_some_and(|p| {
            Arc::ptr_eq(&p.catalog, catalog)
                && p.pools == pool_keys
                && p.daemon_sets == daemon_set_keys
        });
        if !fresh {
            self.made += 1;
            self.by_class.insert(
                class.to_owned(),
                Preparation {
                    catalog: catalog.clone(),
                    pools: pool_keys,
                    daemon_sets: daemon_set_keys,
                    prepared: Prepared::new(pools, catalog, daemons),
                },
            );
        }
        &self.by_class[class].prepared
    }

    /// Forgets the classes not in `classes` (their catalogs go with them).
    pub(super) fn retain(&mut self, classes: &BTreeMap<String, Arc<Catalog>>) {
        self.by_class.retain(|class, _| classes.contains_key(class));
    }
}
