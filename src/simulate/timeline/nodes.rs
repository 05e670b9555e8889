//! The simulated nodes: static pools kept at their replicas, launched claims becoming ready, claims deleted, pod
//! events, and the Node each claim registers.

use super::*;
use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

impl TimelineRun<'_> {
    /// Static pools kept at their replicas ([`static_capacity::scale`], as the `static.capacity` controller
    /// runs it): claims launched from the template at its cheapest offering, or the surplus removed (its pods wait
    /// for capacity). Without the gate, each static pool is said to launch nothing, once.
    pub(super) fn keep_replicas(&mut self) {
        let pools: Vec<NodePool> = self
            .pools
            .iter()
            .filter(|p| p.spec.replicas.is_some())
            .cloned()
            .collect();
        for pool in pools {
            let Some((replicas, limit)) = static_capacity::replicas_of(&pool) else {
                continue;
            };
            let name = pool.metadata.name.clone().unwrap_or_default();
            if !self.static_capacity {
                self.say_replicas(
                    &name,
                    format!("NodePool {name}: spec.replicas does nothing without the StaticCapacity feature gate"),
                );
                continue;
            }
            let mine: Vec<&SimClaim> = self
                .claims
                .iter()
                .filter(|c| pool_of(&c.claim) == name)
                .collect();
            let bound: Vec<Vec<Pod>> = mine
                .iter()
                .map(|c| {
                    self.pods
                        .iter()
                        .filter(|p| p.on.as_deref() == Some(c.name()))
                        .map(|p| Pod::clone(&p.pod))
                        .collect()
                })
                .collect();
            let views: Vec<StaticClaim<'_>> = mine
                .iter()
                .zip(&bound)
                .map(|(c, pods)| StaticClaim {
                    name: c.name(),
                    launched: true,
                    deleting: false,
                    pending_disruption: c.awaiting.is_some(),
                    pods,
                    lifetime_remaining: lifetime_remaining(&c.claim, self.now).unwrap_or(1.0),
                })
                .collect();
            let decision = static_capacity::scale(replicas, limit, &views, self.now);
            drop(views);
            match decision {
                Scale::Hold => {
                    self.replicas_said.remove(&name);
                }
                Scale::Up(count) => {
                    self.replicas_said.remove(&name);
                    for _ in 0..count {
                        // As provisioning sees it: with overlays, without shifted zones.
                        let catalog = self.shared_catalog.clone();
                        let planned = static_capacity::static_replacement(&pool, &catalog);
                        let seed = self.launched.to_string();
                        let claim = static_capacity::static_claim(&pool, &seed);
                        let (Some(choice), Some(claim)) =
                            (planned.and_then(|p| p.cheapest), claim)
                        else {
                            self.say_replicas(&name, format!("NodePool {name}: no offering its template allows"));
                            break;
                        };
                        self.launch(claim, choice, 0, None);
                    }
                }
                Scale::AtLimit { wanted } => self.say_replicas(
                    &name,
                    format!("NodePool {name}: {wanted} below its {replicas} replicas, at its node limit"),
                ),
                Scale::Down(names) => {
                    self.replicas_said.remove(&name);
                    for claim in names {
                        let pods = self.delete(&claim);
                        let mut entry = self.entry(
                            "replicas",
                            format!("{claim} removed: NodePool {name} is above its {replicas} replicas, {pods} pods to reschedule"),
                        );
                        entry.node_claims = vec![claim];
                        entry.nodepool = Some(name.clone());
                        self.entries.push(entry);
                    }
                }
            }
        }
    }

    /// A `replicas` entry about pool `pool`, unless the same was said last.
    pub(super) fn say_replicas(&mut self, pool: &str, detail: String) {
        if self.replicas_said.get(pool) == Some(&detail) {
            return;
        }
        self.replicas_said.insert(pool.to_owned(), detail.clone());
        let mut entry = self.entry("replicas", detail);
        entry.nodepool = Some(pool.to_owned());
        self.entries.push(entry);
    }

    /// Claims whose instance has had time to boot become initialized nodes, their nominated pods bound; the
    /// nodes that waited for them as replacements are deleted.
    pub(super) fn make_ready(&mut self) {
        let now = self.now;
        for claim in &mut self.claims {
            if !claim.ready && now.duration_since(claim.launched) >= READY_AFTER {
                claim.initialize(now);
            }
        }
        let ready: Vec<String> = self
            .claims
            .iter()
            .filter(|c| c.ready)
            .map(|c| c.name().to_owned())
            .collect();
        let done: Vec<String> = self
            .claims
            .iter()
            .filter(|c| {
                c.awaiting
                    .as_ref()
                    .is_some_and(|names| names.iter().all(|n| ready.contains(n) || !self.exists(n)))
            })
            .map(|c| c.name().to_owned())
            .collect();
        for name in done {
            self.delete(&name);
        }
    }

    pub(super) fn exists(&self, name: &str) -> bool {
        self.claims.iter().any(|c| c.name() == name)
    }

    /// Deletes a claim kerf decided to remove; its pods wait for new capacity. Returns how many there were. In a
    /// zone shifted away from its instance is not terminated until the shift ends (and costs until then).
    pub(super) fn delete(&mut self, name: &str) -> usize {
        // Without a shift nothing is held, and the catalog is not searched for the zone's key.
        let shifting = !self.shifted.is_empty();
        let claim = self.claims.iter().find(|c| shifting && c.name() == name);
        let in_shifted_zone = claim.and_then(|c| {
            let key = self.zone_key(&c.choice.zone)?;
            self.shifted.contains(&key).then(|| HeldInstance {
                claim: name.to_owned(),
                zone: c.choice.zone.clone(),
                key,
                price: c.choice.price,
            })
        });
        if let Some(held) = in_shifted_zone {
            let mut entry = self.entry(
                "zonal-shift",
                format!(
                    "{name} deleted; its instance is not terminated while zone {} is shifted away from",
                    held.zone
                ),
            );
            entry.node_claims = vec![name.to_owned()];
            self.entries.push(entry);
            self.held.push(held);
        }
        self.remove(name)
    }

    /// Removes a claim whose instance is gone; its pods wait for new capacity. Returns how many there were.
    pub(super) fn remove(&mut self, name: &str) -> usize {
        self.claims.retain(|c| c.name() != name);
        let mut moved = 0;
        for pod in &mut self.pods {
            if pod.on.as_deref() == Some(name) {
                pod.on = None;
                if let Some(spec) = Arc::make_mut(&mut pod.pod).spec.as_mut() {
                    spec.node_name = None;
                }
                moved += 1;
            }
        }
        moved
    }

    /// Records a pod event on a claim (`status.lastPodEventTime`), which restarts its `consolidateAfter`.
    pub(super) fn pod_event(&mut self, claim: &str) {
        let now = self.now;
        if let Some(c) = self.claims.iter_mut().find(|c| c.name() == claim) {
            let due = c
                .claim
                .status
                .as_ref()
                .is_some_and(|status| stamp_due(status.last_pod_event_time.as_deref(), now));
            // Copied on write: the last disruption pass may still share the claim.
            if due {
                if let Some(status) = Arc::make_mut(&mut c.claim).status.as_mut() {
                    status.last_pod_event_time = Some(now.to_string());
                }
            }
        }
    }

    /// The type `name` as `pool` sees it: with its NodeOverlays (a capacity overlay's resources are what the node's
    /// device plugin would report).
    pub(super) fn instance_type(
        &self,
        name: &str,
        pool: &str,
    ) -> Option<&crate::catalog::InstanceType> {
        self.shared_catalog.instance_types.iter().find(|it| {
            it.name == name
                && it
                    .requirements
                    .get(labels::NODEPOOL)
                    .is_none_or(|r| r.has(pool))
        })
    }

    /// The Node of a ready claim; nodes that disruption queued are tainted so provisioning leaves them be. Built
    /// again only when what it is built from changed: each pass reads every node, and few change between passes.
    pub(super) fn node(&self, claim: &SimClaim) -> Option<Arc<Node>> {
        if !claim.ready {
            return None;
        }
        let mut built = claim.built.borrow_mut();
        if let Some(b) = built
            .as_ref()
            .filter(|b| b.still_of(claim, &self.shared_catalog))
        {
            // Tests run unoptimized: there every reuse is checked against a node built afresh.
            debug_assert_eq!(self.build_node(claim).as_ref(), Some(b.node.as_ref()));
            return Some(b.node.clone());
        }
        let node = Arc::new(self.build_node(claim)?);
        *built = Some(BuiltNode {
            claim: claim.claim.clone(),
            catalog: self.shared_catalog.clone(),
            awaiting: claim.awaiting.is_some(),
            conditions: claim.conditions.clone(),
            node: node.clone(),
        });
        Some(node)
    }

    fn build_node(&self, claim: &SimClaim) -> Option<Node> {
        let it = self.instance_type(&claim.choice.instance_type, claim.nodepool())?;
        // What the kubelet registers, then what registration syncs from the claim, as on a real node.
        let region = it
            .requirements
            .labels()
            .remove(labels::REGION)
            .unwrap_or_default();
        let mut node_labels = kubelet_labels(claim.name(), it, &claim.choice.zone, &region);
        let (synced, annotations) = registered_metadata(&claim.claim);
        node_labels.extend(synced);
        node_labels.insert(labels::NODE_INITIALIZED.to_owned(), "true".to_owned());
        // The claim's taints in the Node's form (a `timeAdded` that does not read as a time makes no Node).
        let mut taints: Vec<Taint> = match &claim.claim.spec.taints {
            Some(taints) if !taints.is_empty() => {
                serde_json::from_value(serde_json::to_value(taints).ok()?).ok()?
            }
            _ => Vec::new(),
        };
        // A node a command holds carries `karpenter.sh/disrupted`, as the controller taints it.
        if claim.awaiting.is_some() {
            taints.push(Taint {
                key: DISRUPTED_TAINT.to_owned(),
                effect: "NoSchedule".to_owned(),
                ..Taint::default()
            });
        }
        let mut conditions = claim.conditions.clone();
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..NodeCondition::default()
            });
        }
        // Built as the typed object: a pass builds every node, and a trip through JSON was most of the cost.
        let quantities = |resources: &crate::catalog::Resources| {
            resources
                .to_quantities()
                .into_iter()
                .map(|(name, amount)| (name, Quantity(amount)))
                .collect()
        };
        Some(Node {
            metadata: ObjectMeta {
                name: Some(claim.name().to_owned()),
                labels: Some(node_labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&it.capacity)),
                allocatable: Some(quantities(&it.allocatable())),
                conditions: Some(conditions),
                ..NodeStatus::default()
            }),
        })
    }
}

/// A claim's Node as [`TimelineRun::node`] last built it, with what it was built from besides the claim's
/// launch choice (which never changes).
pub(super) struct BuiltNode {
    /// Held, so that any change to the claim (copied on write, see [`SimClaim::claim`]) makes a new one.
    claim: Arc<NodeClaim>,
    /// The catalog its instance type was read from.
    catalog: Arc<Catalog>,
    /// Whether a command held it (the `karpenter.sh/disrupted` taint).
    awaiting: bool,
    conditions: Vec<NodeCondition>,
    node: Arc<Node>,
}

impl BuiltNode {
    /// Whether `claim`'s Node, with the types of `catalog`, is still this one.
    fn still_of(&self, claim: &SimClaim, catalog: &Arc<Catalog>) -> bool {
        Arc::ptr_eq(&self.claim, &claim.claim)
            && Arc::ptr_eq(&self.catalog, catalog)
            && self.awaiting == claim.awaiting.is_some()
            && self.conditions == claim.conditions
    }
}
