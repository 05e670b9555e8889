//! The instance types each EC2NodeClass can launch, resolved through the cloud provider and kept for a short
//! time: resolving selectors and listing types are several cloud calls, while a solve may run every second.
//! The time-to-live keeps ICE marks (3 minutes) and price changes visible soon enough. One cache serves
//! provisioning and disruption (`Context::catalogs`): a catalog of every EC2 type is several MB, and two
//! loops holding their own copies of the same listing doubled it. The resolution itself (AMIs, subnets,
//! security groups) is kept beside it: disruption judges cloud drift against it.

use super::Context;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeoverlay::NodeOverlay;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::cloud::{CloudError, CloudProvider, NodeClass};
use crate::engine::overlay::{self, Evaluation};
use std::collections::HashSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Mutex;

/// How long a class's catalog is reused.
pub const CATALOG_TTL: Duration = Duration::from_secs(30);
/// How long after a failed resolution a class is tried again (unless it is edited meanwhile).
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// A handle on the cache; clones share it.
#[derive(Clone, Default)]
pub struct Catalogs(Arc<Mutex<Cache>>);

#[derive(Default)]
struct Cache {
    cached: HashMap<String, Cached>,
    /// The last overlaid catalogs and what they were made from: kept while nothing they depend on changes, so a
    /// solve reuses what it prepared from them (`plan::Preparations` compares the catalogs' `Arc`s).
    overlaid: Option<(OverlayInputs, Overlaid)>,
    /// When each class last failed to resolve, and its generation then.
    failed: HashMap<String, (SystemTime, Option<i64>)>,
}

struct Cached {
    fetched: SystemTime,
    /// The class's `metadata.generation` when it was resolved: an edited class is resolved again at once.
    generation: Option<i64>,
    catalog: Arc<Catalog>,
    node_class: Arc<NodeClass>,
}

/// What overlaid catalogs depend on: the classes' catalogs (by identity), the pools' names, classes and template
/// labels (by generation), and the overlays (by generation).
#[derive(Clone, Debug, PartialEq, Eq)]
struct OverlayInputs {
    catalogs: Vec<(String, usize)>,
    pools: Vec<(Option<String>, Option<i64>)>,
    overlays: Vec<(Option<String>, Option<i64>)>,
}

/// Each class's catalog with its pools' NodeOverlays in it, and the overlays' verdicts.
pub type Overlaid = (BTreeMap<String, Arc<Catalog>>, Arc<Evaluation>);

impl Catalogs {
    /// `catalogs` (by class) as `pools` see them under `overlays` ([`overlay::overlaid_catalogs`]), the answer
    /// of the last call while its inputs are the same.
    pub async fn overlaid(
        &self,
        catalogs: BTreeMap<String, Arc<Catalog>>,
        pools: &[NodePool],
        overlays: &[NodeOverlay],
    ) -> Overlaid {
        let inputs = OverlayInputs {
            catalogs: catalogs
                .iter()
                .map(|(class, c)| (class.clone(), Arc::as_ptr(c) as usize))
                .collect(),
            pools: pools
                .iter()
                .map(|p| (p.metadata.name.clone(), p.metadata.generation))
                .collect(),
            overlays: overlays
                .iter()
                .map(|o| (o.metadata.name.clone(), o.metadata.generation))
                .collect(),
        };
        let mut cache = self.0.lock().await;
        if let Some((kept, overlaid)) = &cache.overlaid {
            if *kept == inputs {
                return overlaid.clone();
            }
        }
        let (overlaid, evaluation) = overlay::overlaid_catalogs(overlays, pools, &catalogs);
        let answer = (overlaid, Arc::new(evaluation));
        cache.overlaid = Some((inputs, answer.clone()));
        answer
    }

    /// The catalog of `class` at `now`, from the cache while fresh; `None` when the class does not resolve
    /// (logged once per attempt; attempts are [`RETRY_AFTER`] apart). A caller that finds the class being
    /// fetched by another waits for that fetch instead of making the same calls.
    pub async fn get<C: CloudProvider>(
        &self,
        cloud: &C,
        class: &EC2NodeClass,
        now: SystemTime,
    ) -> Option<Arc<Catalog>> {
        self.0.lock().await.get(cloud, class, now).await
    }

    /// What `class` resolved to, when [`Catalogs::get`] would answer from the cache at `now` (fresh, and the
    /// class unchanged since); never a cloud call.
    pub async fn resolved(&self, class: &EC2NodeClass, now: SystemTime) -> Option<Arc<NodeClass>> {
        self.0.lock().await.resolved(class, now)
    }

    /// Every cached catalog, by EC2NodeClass name (the metrics report their offerings and price the fleet).
    pub async fn all(&self) -> Vec<(String, Arc<Catalog>)> {
        let cache = self.0.lock().await;
        cache
            .cached
            .iter()
            .map(|(name, cached)| (name.clone(), cached.catalog.clone()))
            .collect()
    }

    /// Makes every cached catalog stale, so the next [`Catalogs::get`] of each class asks the cloud again (the
    /// zones shifted away from changed: offerings there came or went).
    pub async fn expire(&self) {
        for cached in self.0.lock().await.cached.values_mut() {
            cached.fetched = SystemTime::UNIX_EPOCH;
        }
    }

    /// Forgets every class not in `names` (deleted classes).
    pub async fn retain(&self, names: &[&str]) {
        self.0.lock().await.retain(names);
    }
}

impl Cache {
    async fn get<C: CloudProvider>(
        &mut self,
        cloud: &C,
        class: &EC2NodeClass,
        now: SystemTime,
    ) -> Option<Arc<Catalog>> {
        let name = class.metadata.name.clone().unwrap_or_default();
        let generation = class.metadata.generation;
        if let Some(cached) = self.cached.get(&name) {
            if within(cached.fetched, now, CATALOG_TTL) && cached.generation == generation {
                return Some(cached.catalog.clone());
            }
        }
        if let Some((at, failed_generation)) = self.failed.get(&name) {
            if within(*at, now, RETRY_AFTER) && *failed_generation == generation {
                return None;
            }
        }
        match fetch(cloud, &name, class, now).await {
            Ok((node_class, catalog)) => {
                self.failed.remove(&name);
                Some(self.store(name, generation, now, node_class, catalog))
            }
            Err(error) => {
                tracing::warn!(ec2nodeclass = %name, %error, "cannot provision from this EC2NodeClass");
                self.failed.insert(name, (now, generation));
                None
            }
        }
    }

    fn store(
        &mut self,
        name: String,
        generation: Option<i64>,
        now: SystemTime,
        node_class: NodeClass,
        catalog: Catalog,
    ) -> Arc<Catalog> {
        // A refresh that found the same types keeps the copy already shared: a solve reuses what it prepared
        // from a catalog only while it is that very copy (`plan::Preparations`), and two equal copies would
        // both stay in memory while any solve or launch holds the old one.
        let catalog = match self.cached.get(&name) {
            Some(cached) if *cached.catalog == catalog => cached.catalog.clone(),
            _ => Arc::new(catalog),
        };
        self.cached.insert(
            name,
            Cached {
                fetched: now,
                generation,
                catalog: catalog.clone(),
                node_class: Arc::new(node_class),
            },
        );
        catalog
    }

    fn resolved(&self, class: &EC2NodeClass, now: SystemTime) -> Option<Arc<NodeClass>> {
        let cached = self.cached.get(class.metadata.name.as_deref()?)?;
        let current = within(cached.fetched, now, CATALOG_TTL)
            && cached.generation == class.metadata.generation;
        current.then(|| cached.node_class.clone())
    }

    fn retain(&mut self, names: &[&str]) {
        self.cached.retain(|name, _| names.contains(&name.as_str()));
        self.failed.retain(|name, _| names.contains(&name.as_str()));
    }
}

/// Resolves the class and lists its instance types.
async fn fetch<C: CloudProvider>(
    cloud: &C,
    name: &str,
    class: &EC2NodeClass,
    now: SystemTime,
) -> Result<(NodeClass, Catalog), CloudError> {
    let node_class = cloud.resolve_node_class(name, &class.spec).await?;
    let instance_types = cloud.instance_types(&node_class, now).await?;
    Ok((node_class, Catalog { instance_types }))
}

/// Whether less than `ttl` has passed from `since` to `now`.
fn within(since: SystemTime, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(since).is_ok_and(|age| age < ttl)
}

/// The catalog of every EC2NodeClass a NodePool references, from the cache or the cloud, with the NodeOverlays in
/// it (the `NodeOverlay` gate). A class that is missing, being deleted or does not resolve is left out, with a
/// log line saying why.
pub async fn class_catalogs<C: CloudProvider>(
    ctx: &Context<C>,
    catalogs: &mut Catalogs,
    pools: &[NodePool],
    classes: &[EC2NodeClass],
) -> BTreeMap<String, Arc<Catalog>> {
    overlaid_class_catalogs(ctx, catalogs, pools, classes)
        .await
        .0
}

/// [`class_catalogs`], with the overlays' verdicts (`None` without the `NodeOverlay` gate).
pub async fn overlaid_class_catalogs<C: CloudProvider>(
    ctx: &Context<C>,
    catalogs: &mut Catalogs,
    pools: &[NodePool],
    classes: &[EC2NodeClass],
) -> (BTreeMap<String, Arc<Catalog>>, Option<Arc<Evaluation>>) {
    let now = ctx.clock.now();
    let mut found = BTreeMap::new();
    let referenced: HashSet<&str> = pools
        .iter()
        .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
        .collect();
    for class in classes {
        let name = class.metadata.name.clone().unwrap_or_default();
        if !referenced.contains(name.as_str()) || class.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(catalog) = catalogs.get(&ctx.cloud, class, now).await {
            found.insert(name, catalog);
        }
    }
    let names: Vec<&str> = classes
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    catalogs.retain(&names).await;
    match ctx.state.overlays() {
        Some(overlays) => {
            let (overlaid, evaluation) = catalogs.overlaid(found, pools, &overlays).await;
            (overlaid, Some(evaluation))
        }
        None => (found, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::Subnet;
    use crate::catalog::{CatalogSettings, Pricing};
    use crate::cloud::sim::{Operation, SimCloud, SimSubnet};
    use crate::controllers::testkit;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn cloud() -> SimCloud {
        let types = Catalog::embedded("us-west-2", &CatalogSettings::default(), &Pricing::none())
            .expect("embedded catalog")
            .instance_types
            .into_iter()
            .filter(|it| it.name == "m5.large")
            .collect();
        let cloud = SimCloud::new("test", types);
        let tags = BTreeMap::from([("discovery".to_owned(), "test".to_owned())]);
        testkit::add_network(
            &cloud,
            &[("subnet-a", "us-west-2a", "usw2-az1")],
            100,
            &tags,
        );
        cloud
    }

    fn class(generation: i64) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": generation},
            "spec": {
                "role": "NodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"discovery": "test"}}],
                "securityGroupSelectorTerms": [{"tags": {"discovery": "test"}}]
            }
        }))
        .expect("a valid EC2NodeClass")
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn refused() -> CloudError {
        CloudError::Api {
            operation: "DescribeSubnets",
            code: "Throttling".into(),
            message: "slow down".into(),
        }
    }

    #[tokio::test]
    async fn a_catalog_is_reused_while_fresh_and_the_class_unchanged() {
        let cloud = cloud();
        let catalogs = Catalogs::default();
        let first = catalogs
            .get(&cloud, &class(1), at(0))
            .await
            .expect("resolves");
        assert_eq!(first.instance_types.len(), 1);
        // A cloud that would now fail is not asked while the catalog is fresh…
        cloud.inject_api_error(Operation::ResolveNodeClass, refused(), 1);
        assert!(catalogs.get(&cloud, &class(1), at(29)).await.is_some());
        // …but is once the class changed.
        assert!(catalogs.get(&cloud, &class(2), at(29)).await.is_none());
    }

    #[tokio::test]
    async fn a_refresh_that_finds_the_same_types_keeps_the_shared_copy() {
        let cloud = cloud();
        let catalogs = Catalogs::default();
        let ttl = CATALOG_TTL.as_secs();
        let first = catalogs
            .get(&cloud, &class(1), at(0))
            .await
            .expect("resolves");
        let refreshed = catalogs
            .get(&cloud, &class(1), at(ttl))
            .await
            .expect("resolves");
        assert!(Arc::ptr_eq(&first, &refreshed));
        // A subnet in another zone gives the type offerings there: a different catalog, a new copy.
        cloud.add_subnet(SimSubnet {
            subnet: Subnet {
                id: "subnet-b".into(),
                zone: "us-west-2b".into(),
                zone_id: Some("usw2-az2".into()),
            },
            available_ips: 100,
            tags: BTreeMap::from([("discovery".to_owned(), "test".to_owned())]),
        });
        let changed = catalogs
            .get(&cloud, &class(1), at(2 * ttl))
            .await
            .expect("resolves");
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(
            changed.instance_types[0].offerings.len(),
            2 * first.instance_types[0].offerings.len()
        );
    }

    #[tokio::test]
    async fn a_failed_class_is_retried_only_after_a_pause() {
        let cloud = cloud();
        let catalogs = Catalogs::default();
        cloud.inject_api_error(Operation::ResolveNodeClass, refused(), 1);
        assert!(catalogs.get(&cloud, &class(1), at(0)).await.is_none());
        // The cloud would answer now, but the failure is remembered for RETRY_AFTER.
        assert!(catalogs.get(&cloud, &class(1), at(5)).await.is_none());
        assert!(catalogs.get(&cloud, &class(1), at(10)).await.is_some());
    }

    #[tokio::test]
    async fn clones_share_one_catalog_and_one_listing() {
        let cloud = cloud();
        let provisioning = Catalogs::default();
        let disruption = provisioning.clone();
        let first = provisioning
            .get(&cloud, &class(1), at(0))
            .await
            .expect("resolves");
        // The clone answers from the same cache: the cloud, which would now fail, is not asked again.
        cloud.inject_api_error(Operation::ResolveNodeClass, refused(), 1);
        let second = disruption
            .get(&cloud, &class(1), at(1))
            .await
            .expect("cached");
        assert!(Arc::ptr_eq(&first, &second));
        // Forgetting a deleted class through one handle forgets it for both.
        disruption.retain(&[]).await;
        assert!(provisioning.get(&cloud, &class(1), at(2)).await.is_none());
    }
}
