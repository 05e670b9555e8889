//! A timeline that starts from a running cluster: the scenario's NodeClaims (with their Nodes) become the
//! run's claims, launched when they were created and ready if their Node is initialized; Nodes no claim owns
//! (a managed node group, say) are fixed capacity that disruption never touches; bound pods stay where they
//! are. So "what does tonight's budget window do to my cluster" starts from the cluster as it is, ages and
//! drift included (a claim whose `karpenter.sh/nodepool-hash` differs from its pool's is drifted at once).

use super::scenario::ScenarioError;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{CapacityType, Catalog};
use crate::scheduling::Choice;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// One claim of the running cluster, as the run takes it over.
pub struct Existing {
    pub claim: NodeClaim,
    pub choice: Choice,
    pub created: Timestamp,
    /// Its Node, by name, once registered.
    pub node: Option<String>,
    /// Registered and initialized: capacity now, not in a couple of minutes.
    pub ready: bool,
    /// Its Node's conditions (node repair reads them).
    pub conditions: Vec<NodeCondition>,
}

/// The scenario's claims matched to their Nodes, and the Nodes no claim owns. `start` stands in for a missing
/// `creationTimestamp`.
pub fn take_over(
    claims: &[NodeClaim],
    nodes: &[Node],
    catalog: &Catalog,
    start: Timestamp,
) -> Result<(Vec<Existing>, Vec<Node>), ScenarioError> {
    let by_name: BTreeMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let by_provider_id: BTreeMap<&str, &str> = nodes
        .iter()
        .filter_map(|n| {
            let id = n.spec.as_ref()?.provider_id.as_deref()?;
            Some((id, n.metadata.name.as_deref()?))
        })
        .collect();
    let mut owned = Vec::new();
    let mut existing = Vec::with_capacity(claims.len());
    for claim in claims {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let status = claim.status.as_ref();
        let node = status
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| by_name.contains_key(n))
            .or_else(|| by_provider_id.get(status?.provider_id.as_deref()?).copied())
            .map(str::to_owned);
        let node_object = node.as_deref().and_then(|n| by_name.get(n).copied());
        let label = |key: &str| {
            node_object
                .and_then(|n| n.metadata.labels.as_ref()?.get(key))
                .or_else(|| claim.metadata.labels.as_ref()?.get(key))
                .cloned()
        };
        let problem = |what: String| ScenarioError::Timeline(format!("NodeClaim {name}: {what}"));
        let instance_type = label(labels::INSTANCE_TYPE).ok_or_else(|| {
            problem(format!(
                "no {} label: launched claims carry one",
                labels::INSTANCE_TYPE
            ))
        })?;
        let it = catalog
            .instance_types
            .iter()
            .find(|t| t.name == instance_type)
            .ok_or_else(|| {
                problem(format!(
                    "instance type {instance_type:?} is not in the catalog"
                ))
            })?;
        let zone =
            label(labels::ZONE).ok_or_else(|| problem(format!("no {} label", labels::ZONE)))?;
        let capacity_type = match label(labels::CAPACITY_TYPE) {
            Some(value) => value.parse::<CapacityType>().map_err(|_| {
                problem(format!(
                    "{} {value:?} is not a capacity type",
                    labels::CAPACITY_TYPE
                ))
            })?,
            None => CapacityType::OnDemand,
        };
        let price = it
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == capacity_type)
            .and_then(|o| o.price);
        let initialized = status
            .and_then(|s| s.conditions.as_deref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Initialized" && c.status == "True")
            });
        let node_ready = node_object.is_some_and(is_ready);
        if let Some(n) = &node {
            owned.push(n.clone());
        }
        existing.push(Existing {
            claim: claim.clone(),
            choice: Choice {
                instance_type,
                capacity_type,
                zone,
                price,
            },
            created: claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(start, |t| t.0.min(start)),
            ready: node.is_some() && (initialized || node_ready),
            conditions: node_object
                .and_then(|n| n.status.as_ref()?.conditions.clone())
                .unwrap_or_default(),
            node,
        });
    }
    existing.sort_by(|a, b| a.claim.metadata.name.cmp(&b.claim.metadata.name));
    let unowned = nodes
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|name| !owned.contains(name))
        })
        .cloned()
        .collect();
    Ok((existing, unowned))
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
