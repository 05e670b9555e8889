//! The instance types each EC2NodeClass can launch, resolved through the cloud provider and kept for a short
//! time: resolving selectors and listing types are several cloud calls, while a solve may run every second.
//! The time-to-live keeps ICE marks (3 minutes) and price changes visible soon enough.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::catalog::Catalog;
use crate::cloud::{CloudError, CloudProvider};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a class's catalog is reused.
pub const CATALOG_TTL: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Catalogs {
    cached: HashMap<String, Cached>,
}

struct Cached {
    fetched: SystemTime,
    /// The class's `metadata.generation` when it was resolved: an edited class is resolved again at once.
    generation: Option<i64>,
    catalog: Arc<Catalog>,
}

impl Catalogs {
    /// The catalog of `class` at `now`, from the cache while fresh.
    pub async fn get<C: CloudProvider>(
        &mut self,
        cloud: &C,
        class: &EC2NodeClass,
        now: SystemTime,
    ) -> Result<Arc<Catalog>, CloudError> {
        let name = class.metadata.name.clone().unwrap_or_default();
        if let Some(cached) = self.cached.get(&name) {
            let fresh = now
                .duration_since(cached.fetched)
                .is_ok_and(|age| age < CATALOG_TTL);
            if fresh && cached.generation == class.metadata.generation {
                return Ok(cached.catalog.clone());
            }
        }
        let node_class = cloud.resolve_node_class(&name, &class.spec).await?;
        let instance_types = cloud.instance_types(&node_class, now).await?;
        let catalog = Arc::new(Catalog { instance_types });
        self.cached.insert(
            name,
            Cached {
                fetched: now,
                generation: class.metadata.generation,
                catalog: catalog.clone(),
            },
        );
        Ok(catalog)
    }

    /// Forgets every class not in `names` (deleted classes).
    pub fn retain(&mut self, names: &[&str]) {
        self.cached.retain(|name, _| names.contains(&name.as_str()));
    }
}
