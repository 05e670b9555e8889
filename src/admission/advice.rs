//! Pod advice: the annotations kerf puts on every pod, saying which NodePools can take it, how many instance
//! types fit, and the cheapest, or why no pool can. Computed by the scheduling engine from in-memory state.

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodepool::NodePool;
use crate::api::requirements::RequirementTerm;
use crate::scheduling::volumes::{self, VolumeIndex};
use crate::scheduling::{Choice, PodInfo, Scheduler};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::collections::BTreeMap;

pub use crate::api::well_known::{
    INPUTS_ANNOTATION, PROVISIONING_ANNOTATION, REQUIREMENTS_ANNOTATION, SUMMARY_ANNOTATION,
};

/// A fingerprint of what pod advice depends on besides the pod: each NodePool's and EC2NodeClass's name, UID and
/// generation (the spec; status and labels do not change advice), in name order. 16 hex digits of FNV-1a, stable
/// across builds, so the webhook and the controller compute the same one.
pub fn inputs_fingerprint(pools: &[NodePool], classes: &[EC2NodeClass]) -> String {
    let identity =
        |kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            format!(
                "{kind}/{}/{}/{}",
                meta.name.as_deref().unwrap_or_default(),
                meta.uid.as_deref().unwrap_or_default(),
                meta.generation.unwrap_or_default()
            )
        };
    let mut entries: Vec<String> = pools
        .iter()
        .map(|p| identity("NodePool", &p.metadata))
        .chain(
            classes
                .iter()
                .map(|c| identity("EC2NodeClass", &c.metadata)),
        )
        .collect();
    entries.sort_unstable();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in entries.iter().flat_map(|e| e.bytes().chain([0])) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    pub requests: BTreeMap<String, String>,
    pub requirements: Vec<RequirementTerm>,
    /// In the order kerf would try them.
    pub node_pools: Vec<PoolAdvice>,
    pub incompatible: Vec<Incompatible>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolAdvice {
    pub name: String,
    pub instance_types: usize,
    pub cheapest: Option<Cheapest>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cheapest {
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    /// USD per hour; `null` when no price is known.
    pub price_per_hour: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Incompatible {
    pub node_pool: String,
    pub reason: String,
}

impl From<&Choice> for Cheapest {
    fn from(choice: &Choice) -> Self {
        Cheapest {
            instance_type: choice.instance_type.clone(),
            capacity_type: choice.capacity_type.as_str().to_owned(),
            zone: choice.zone.clone(),
            price_per_hour: choice.price,
        }
    }
}

/// Advises on `pod` with the prepared NodePools of `scheduler`.
pub fn advise(scheduler: &Scheduler, pod: &PodInfo) -> Advice {
    let mut node_pools = Vec::new();
    let mut incompatible = Vec::new();
    for option in scheduler.options(pod) {
        match option.fit {
            Ok(fit) => node_pools.push(PoolAdvice {
                name: option.nodepool,
                instance_types: fit.instance_types,
                cheapest: fit.cheapest.as_ref().map(Cheapest::from),
            }),
            Err(reason) => incompatible.push(Incompatible {
                node_pool: option.nodepool,
                reason,
            }),
        }
    }
    Advice {
        requests: pod.requests.to_quantities(),
        requirements: pod.variants.last().map(|r| r.terms()).unwrap_or_default(),
        node_pools,
        incompatible,
    }
}

/// Advises on `pod` (parsed as `info`) with the claims, volumes and StorageClasses of `volumes`: pools are tried
/// with the topology its volumes need, and a pod its volumes keep out of the solve (a missing claim, an unknown
/// StorageClass, ...) fits no pool, with Karpenter's reason, whatever its shape.
pub fn advise_with_volumes(
    scheduler: &Scheduler,
    mut info: PodInfo,
    pod: &Pod,
    volumes: &VolumeIndex,
) -> Advice {
    let refused = match volumes.pending(pod) {
        Ok(alternatives) => {
            volumes::apply(&mut info, &alternatives);
            None
        }
        Err(error) => Some(error.to_string()),
    };
    let mut advice = advise(scheduler, &info);
    if let Some(reason) = refused {
        let pools = std::mem::take(&mut advice.node_pools);
        advice
            .incompatible
            .extend(pools.into_iter().map(|pool| Incompatible {
                node_pool: pool.name,
                reason: reason.clone(),
            }));
    }
    advice
}

impl Advice {
    /// The one-line summary.
    pub fn summary(&self) -> String {
        let Some(first) = self.node_pools.first() else {
            if self.incompatible.is_empty() {
                return "no nodepool fits: there are no nodepools".to_owned();
            }
            let reasons: Vec<String> = self
                .incompatible
                .iter()
                .map(|i| format!("{}: {}", i.node_pool, i.reason))
                .collect();
            return format!("no nodepool fits: {}", reasons.join("; "));
        };
        let count = self.node_pools.len();
        let pools = if count == 1 { "nodepool" } else { "nodepools" };
        let cheapest = match &first.cheapest {
            Some(c) => {
                let price = c
                    .price_per_hour
                    .map_or_else(|| "price unknown".to_owned(), |p| format!("${p:.4}/h"));
                format!(
                    ", cheapest {} {} {} {price}",
                    c.instance_type, c.capacity_type, c.zone
                )
            }
            None => String::new(),
        };
        format!(
            "{count} {pools}; {}: {} instance types{cheapest}",
            first.name, first.instance_types
        )
    }

    /// Both annotations.
    pub fn annotations(&self) -> Result<BTreeMap<String, String>, serde_json::Error> {
        Ok(BTreeMap::from([
            (
                REQUIREMENTS_ANNOTATION.to_owned(),
                serde_json::to_string(self)?,
            ),
            (SUMMARY_ANNOTATION.to_owned(), self.summary()),
        ]))
    }
}
