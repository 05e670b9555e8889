//! The cluster's life on a virtual clock: every minute the due events happen, launched nodes become ready,
//! pending pods are provisioned (the controller's solve), and one disruption pass (`disruption::decide`) runs
//! and its commands are carried out. Nothing reads the wall clock or draws a random number, and every
//! collection is walked in a fixed order, so one scenario always gives the same timeline.

use super::events::{Action, Event, Interruption, NodeFault, Timeline, ZonalShiftSpec};
use super::existing::take_over;
use super::scenario::{expand, pods_listed, Scenario, ScenarioError};
use super::timeline_report::{CostHour, Entry, TimelineReport, Totals};
use crate::api::ec2nodeclass::EC2NodeClassSpec;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::cloud::zonal_shift::{self, ZonalShift, ZonalShifts};
use crate::disruption::{
    count_nodes, decide, ec2nodeclass_hash, is_daemonset_pod, lifetime_remaining, nodepool_hash,
    validate, Budgets, CloudDrift, Command, DisruptionInput, Explanation, NodeInput, NodeState,
    PoolCounts, Settings, Why, DISRUPTED_TAINT, HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION,
    VALIDATION_DELAY,
};
use crate::engine::buffers;
use crate::engine::disruption_input::{node_inputs, Facts};
use crate::engine::launch::{kubelet_labels, launched_labels, registered_metadata};
use crate::engine::marks;
use crate::engine::nominations::{self, Nominations};
use crate::engine::overlay;
use crate::engine::pod_events::stamp_due;
use crate::engine::provisioning::claim::node_claim;
use crate::engine::provisioning::plan::{self, Preparations, Snapshot};
use crate::engine::repair::{self, pool_label, ClaimHealth, NodeHealth, Verdict, AWS_POLICIES};
use crate::engine::static_capacity::{self, Scale, StaticClaim};
use crate::engine::zonal_shift::{notices, ZoneInfo};
use crate::scheduling::volumes::VolumeIndex;
use crate::scheduling::DefaultSpread;
use crate::scheduling::{Choice, PlannedClaim};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

/// One tick of the virtual clock.
const STEP: SignedDuration = SignedDuration::from_secs(60);
/// How long a launched instance takes to become an initialized node.
pub const READY_AFTER: SignedDuration = SignedDuration::from_secs(120);

/// The instance of a claim deleted in a zone shifted away from, left running as the cloud provider leaves it.
struct HeldInstance {
    claim: String,
    zone: String,
    key: String,
    price: Option<f64>,
}

/// A NodeClaim kerf launched during the run.
struct SimClaim {
    claim: NodeClaim,
    choice: Choice,
    launched: Timestamp,
    ready: bool,
    /// The spec of its EC2NodeClass at launch: a later change drifts the node.
    nodeclass: Option<Value>,
    /// When it was launched to replace another node (no-churn protects it).
    replacement: Option<Timestamp>,
    /// Disruption queued it: it is deleted once these replacements are ready.
    awaiting: Option<Vec<String>>,
    /// What its Node reports besides a Ready kubelet (a `unhealthy` event's condition, a snapshot's conditions).
    conditions: Vec<NodeCondition>,
}

impl SimClaim {
    fn name(&self) -> &str {
        self.claim.metadata.name.as_deref().unwrap_or_default()
    }

    /// Its NodePool (`karpenter.sh/nodepool`).
    fn nodepool(&self) -> &str {
        self.claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .map_or("", String::as_str)
    }

    /// Its instance booted and its Node registered and initialized (at `since`, for a claim taken over).
    fn initialize(&mut self, since: Timestamp) {
        self.ready = true;
        let name = self.name().to_owned();
        let time = since.to_string();
        let conditions: Vec<Value> = ["Launched", "Registered", "Initialized", "Ready"]
            .iter()
            .map(|t| {
                json!({"type": t, "status": "True", "lastTransitionTime": time,
                    "reason": t, "message": ""})
            })
            .collect();
        let last_pod_event = self
            .claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.clone());
        self.claim.status = Some(
            serde_json::from_value(json!({"nodeName": name, "conditions": conditions,
                "lastPodEventTime": last_pod_event}))
            .unwrap_or_default(),
        );
    }
}

/// What the overlaid catalog was made from: the pools (name and spec) and the overlays.
type OverlaidFor = (
    Vec<(Option<String>, crate::api::nodepool::NodePoolSpec)>,
    Vec<(Option<String>, crate::api::nodeoverlay::NodeOverlaySpec)>,
);

/// A pod and the claim it is bound (or nominated) to.
struct SimPod {
    pod: Pod,
    /// `namespace/name`, as plans name pods.
    key: String,
    on: Option<String>,
}

/// The state of a run.
pub struct TimelineRun<'a> {
    scenario: &'a Scenario,
    catalog: &'a Catalog,
    timeline: &'a Timeline,
    pools: Vec<NodePool>,
    /// EC2NodeClass specs by name.
    nodeclasses: BTreeMap<String, Value>,
    claims: Vec<SimClaim>,
    pods: Vec<SimPod>,
    launched: u64,
    now: Timestamp,
    entries: Vec<Entry>,
    /// The last blocked entry of each (pool, reason), so a window that stays shut is reported once.
    blocked: BTreeMap<(String, String), String>,
    cost: Vec<CostHour>,
    /// Nodes the last solve or disruption command counted on to take pods.
    nominations: Nominations,
    /// Nodes of the starting cluster that no claim owns: capacity that disruption never takes.
    fixed_nodes: Vec<Node>,
    /// The catalog with the NodeOverlays in it (the scenario's catalog itself without overlays), made again when
    /// the pools change.
    overlaid_catalog: Arc<Catalog>,
    /// `overlaid_catalog` without the offerings of zones shifted away from, shared as the provisioning decision
    /// takes each class's catalog.
    shared_catalog: Arc<Catalog>,
    /// The zonal shifts `zonalShift` events began (`spec.enableZonalShift`), as ARC lists them.
    zonal_shifts: Vec<ZonalShift>,
    /// The zones (their keys: zone IDs where the catalog has them, else names) shifted at the last step.
    shifted: BTreeSet<String>,
    /// Instances of claims deleted in a shifted zone: not terminated (nor their cost stopped) until it clears.
    held: Vec<HeldInstance>,
    /// Where the last provisioning decision put CapacityBuffer virtual pods (by pod key, the claim): they are
    /// never bound (real pods take the room first, as in the cluster), but disruption keeps room for them there.
    buffer_on: BTreeMap<String, String>,
    /// Each scaled workload's replicas now, by (namespace, name): a CapacityBuffer's percentage follows them.
    workload_replicas: BTreeMap<(String, String), i32>,
    /// The NodeOverlays in force: the scenario's, and those events applied (none without the gate).
    overlays: Vec<crate::api::nodeoverlay::NodeOverlay>,
    /// Whether the `NodeOverlay` gate is on: without it an applied overlay is reported and left out.
    node_overlay: bool,
    /// The pools (name and spec) and overlays `shared_catalog` was overlaid for.
    overlaid_for: Option<OverlaidFor>,
    /// What the provisioning decision prepared from the pools, kept while they do not change.
    preparations: Preparations,
    /// The scenario's claims, volumes and classes: where pods' volumes let them go.
    volumes: VolumeIndex,
    /// The scenario's default spread, with its Services and workloads (they do not change during a run).
    default_spread: DefaultSpread,
    /// The `NodeRepair` feature gate.
    node_repair: bool,
    /// The `StaticCapacity` feature gate.
    static_capacity: bool,
    /// The last `replicas` entry of each static pool, so a state that lasts is reported once.
    replicas_said: BTreeMap<String, String>,
    /// Claims whose repair is held back and was reported so (reported again only once it was not).
    repair_held: std::collections::BTreeSet<String>,
}

impl<'a> TimelineRun<'a> {
    /// A run of `scenario`'s timeline, from the cluster it describes: its NodeClaims and Nodes are the nodes
    /// at the start, its bound pods stay bound ([`super::existing`]).
    pub fn new(
        scenario: &'a Scenario,
        timeline: &'a Timeline,
        catalog: &'a Catalog,
    ) -> Result<Self, ScenarioError> {
        let (existing, fixed_nodes) = take_over(
            &scenario.nodeclaims,
            &scenario.nodes,
            catalog,
            timeline.start,
        )?;
        // The run names a claim's Node after the claim: pods bound to a claim's Node are bound to the claim.
        let claim_of_node: BTreeMap<&str, &str> = existing
            .iter()
            .filter_map(|e| Some((e.node.as_deref()?, e.claim.metadata.name.as_deref()?)))
            .collect();
        let fixed_names: Vec<&str> = fixed_nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        // A pod bound to a Node the scenario does not hold (one deleted a moment before a snapshot) waits for a
        // node, as it would once the pod garbage collector has replaced it.
        let pods = scenario
            .pods
            .iter()
            .filter(|p| !is_daemonset_pod(p))
            .map(|pod| {
                let on = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|node| match claim_of_node.get(node) {
                        Some(claim) => Some((*claim).to_owned()),
                        None => fixed_names.contains(&node).then(|| node.to_owned()),
                    });
                sim_pod(pod.clone(), on)
            })
            .collect();
        let gates = scenario
            .settings
            .feature_gates()
            .map_err(|e| ScenarioError::Invalid(vec![e]))?;
        let mut run = TimelineRun {
            scenario,
            catalog,
            timeline,
            pools: Vec::new(),
            nodeclasses: BTreeMap::new(),
            claims: Vec::new(),
            pods,
            launched: 0,
            now: timeline.start,
            entries: Vec::new(),
            blocked: BTreeMap::new(),
            cost: Vec::new(),
            nominations: Nominations::default(),
            fixed_nodes,
            overlaid_catalog: Arc::new(catalog.clone()),
            shared_catalog: Arc::new(catalog.clone()),
            zonal_shifts: Vec::new(),
            shifted: BTreeSet::new(),
            held: Vec::new(),
            workload_replicas: BTreeMap::new(),
            buffer_on: BTreeMap::new(),
            overlays: scenario.nodeoverlays.clone(),
            node_overlay: gates.node_overlay,
            overlaid_for: None,
            preparations: Preparations::default(),
            volumes: scenario.volumes(),
            default_spread: scenario
                .default_spread()
                .map_err(|e| ScenarioError::Invalid(vec![e]))?,
            node_repair: gates.node_repair,
            static_capacity: gates.static_capacity,
            replicas_said: BTreeMap::new(),
            repair_held: std::collections::BTreeSet::new(),
        };
        for pool in &scenario.nodepools {
            run.set_pool(pool.clone());
        }
        for class in &scenario.nodeclasses {
            run.set_nodeclass(class);
        }
        for e in existing {
            let nodeclass = run
                .nodeclasses
                .get(&e.claim.spec.node_class_ref.name)
                .cloned();
            let mut claim = SimClaim {
                claim: e.claim,
                choice: e.choice,
                launched: e.created,
                ready: false,
                nodeclass,
                replacement: None,
                awaiting: None,
                conditions: e.conditions,
            };
            if e.ready {
                claim.initialize(e.created);
            }
            run.claims.push(claim);
        }
        Ok(run)
    }

    /// Runs the whole timeline and reports it.
    pub fn run(mut self) -> Result<TimelineReport, ScenarioError> {
        let end = self.timeline.start + self.timeline.duration;
        let mut events = self.timeline.events.iter().peekable();
        while self.now < end {
            let elapsed = self.now.duration_since(self.timeline.start);
            while let Some(event) = events.next_if(|e| e.at <= elapsed) {
                self.apply(event)?;
            }
            let overlaid = self.overlay_pools();
            self.shift_zones(overlaid);
            self.sync_buffers();
            self.make_ready();
            if self.node_repair {
                self.repair();
            }
            self.keep_replicas();
            self.provision()?;
            self.disrupt();
            self.account();
            self.now += STEP;
        }
        Ok(self.report())
    }

    /// Adds or replaces a pool, with the template hash its claims are stamped with (static drift).
    fn set_pool(&mut self, mut pool: NodePool) {
        let hash = nodepool_hash(&pool);
        let annotations = pool.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(NODEPOOL_HASH.to_owned(), hash);
        annotations.insert(NODEPOOL_HASH_VERSION.to_owned(), HASH_VERSION.to_owned());
        self.pools.retain(|p| p.metadata.name != pool.metadata.name);
        self.pools.push(pool);
        self.pools
            .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }

    fn set_nodeclass(&mut self, class: &Value) {
        let name = class
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let spec = class.get("spec").cloned().unwrap_or(Value::Null);
        self.nodeclasses.insert(name.to_owned(), spec);
    }

    fn apply(&mut self, event: &Event) -> Result<(), ScenarioError> {
        match &event.action {
            Action::Scale {
                namespace,
                workload,
                replicas: wanted,
            } => self.scale(namespace, workload, *wanted)?,
            Action::Interrupt(interruption) => self.interrupt(interruption),
            Action::Unhealthy(fault) => self.report_condition(fault),
            Action::ApplyNodePool(pool) => {
                let name = pool.metadata.name.clone().unwrap_or_default();
                self.set_pool((**pool).clone());
                self.entries
                    .push(self.entry("apply", format!("NodePool {name} changed")));
            }
            Action::ApplyNodeOverlay(overlay) => {
                let name = overlay.metadata.name.clone().unwrap_or_default();
                let said = if self.node_overlay {
                    self.overlays
                        .retain(|o| o.metadata.name != overlay.metadata.name);
                    self.overlays.push((**overlay).clone());
                    format!("NodeOverlay {name} applied")
                } else {
                    format!("NodeOverlay {name} left out: the NodeOverlay feature gate is off")
                };
                self.entries.push(self.entry("apply", said));
            }
            Action::ApplyNodeClass(class) => {
                self.set_nodeclass(class);
                let name = class
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.entries
                    .push(self.entry("apply", format!("EC2NodeClass {name} changed")));
            }
            Action::ZonalShift(shift) => self.begin_shift(shift),
        }
        Ok(())
    }

    /// The key zonal shifts name `zone` by in the catalog (its zone ID where the catalog has them, else its name).
    fn zone_key(&self, zone: &str) -> Option<String> {
        self.catalog
            .instance_types
            .iter()
            .flat_map(|it| &it.offerings)
            .find(|o| o.zone == zone)
            .map(|o| zonal_shift::zone_key(o).to_owned())
    }

    /// ARC begins a shift away from the event's zone (one already shifted gets the new expiry).
    fn begin_shift(&mut self, shift: &ZonalShiftSpec) {
        let Some(key) = self.zone_key(&shift.zone) else {
            let said = format!("no offering is in zone {}: nothing to shift", shift.zone);
            self.entries.push(self.entry("zonal-shift", said));
            return;
        };
        let length = crate::disruption::parse_go_duration(&shift.duration).unwrap_or_default();
        let until = self.now + length;
        self.zonal_shifts.retain(|s| s.away_from != key);
        self.zonal_shifts.push(ZonalShift {
            away_from: key,
            expiry: SystemTime::from(until),
            applied: true,
        });
        let said = format!(
            "traffic shifted away from zone {} until {until} (ARC zonal shift)",
            shift.zone
        );
        self.entries.push(self.entry("zonal-shift", said));
    }

    /// Takes the offerings of zones shifted away from out of the shared catalog when the shifted zones (or the
    /// overlaid catalog) changed, records the NodePools' Events, and terminates the instances held in zones that
    /// cleared.
    fn shift_zones(&mut self, overlaid: bool) {
        let mut listed = ZonalShifts::default();
        listed.replace(self.zonal_shifts.iter().cloned());
        let shifted = listed.shifted(SystemTime::from(self.now));
        if shifted == self.shifted && !overlaid {
            return;
        }
        self.shared_catalog = if shifted.is_empty() {
            self.overlaid_catalog.clone()
        } else {
            let mut catalog = (*self.overlaid_catalog).clone();
            zonal_shift::apply(&shifted, &mut catalog.instance_types);
            Arc::new(catalog)
        };
        if shifted == self.shifted {
            return;
        }
        // The simulated classes launch wherever the catalog offers.
        let zones: BTreeSet<(String, String)> = self
            .catalog
            .instance_types
            .iter()
            .flat_map(|it| &it.offerings)
            .map(|o| (o.zone.clone(), zonal_shift::zone_key(o).to_owned()))
            .collect();
        let zones: Vec<ZoneInfo> = zones
            .into_iter()
            .map(|(zone, zone_id)| ZoneInfo { zone, zone_id })
            .collect();
        let pools: Vec<(&NodePool, Vec<ZoneInfo>)> =
            self.pools.iter().map(|p| (p, zones.clone())).collect();
        let told = notices(&self.shifted, &shifted, &pools);
        drop(pools);
        for notice in told {
            let mut entry = self.entry("zonal-shift", notice.message());
            entry.nodepool = Some(notice.nodepool.clone());
            entry.reason = Some(notice.reason().to_owned());
            self.entries.push(entry);
        }
        let (released, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| !shifted.contains(&h.key));
        self.held = held;
        for h in released {
            let mut entry = self.entry(
                "zonal-shift",
                format!(
                    "{}'s instance terminated: zone {} is no longer shifted away from",
                    h.claim, h.zone
                ),
            );
            entry.node_claims = vec![h.claim];
            self.entries.push(entry);
        }
        self.shifted = shifted;
    }

    fn scale(&mut self, namespace: &str, name: &str, wanted: u64) -> Result<(), ScenarioError> {
        let workload = self.scenario.workloads.iter().find(|w| {
            w.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                && w.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    == namespace
        });
        let Some(workload) = workload else {
            return Err(ScenarioError::Timeline(format!(
                "spec.events: scale: no workload {namespace}/{name} in the scenario"
            )));
        };
        // Pods the simulation made are named `<name>-<i>`; new ones are numbered after the last.
        let prefix = format!("{namespace}/{name}-");
        let index = |p: &SimPod| -> Option<u64> { p.key.strip_prefix(&prefix)?.parse().ok() };
        let next = self
            .pods
            .iter()
            .filter_map(index)
            .max()
            .map_or(0, |i| i + 1);
        let (current, going) = if pods_listed(workload) {
            self.listed_going(workload, namespace, wanted)
        } else {
            let going: Vec<String> = self
                .pods
                .iter()
                .filter(|p| index(p).is_some_and(|i| i >= wanted))
                .map(|p| p.key.clone())
                .collect();
            (next, going)
        };
        let going: std::collections::BTreeSet<String> = going.into_iter().collect();
        let mut left = Vec::new();
        self.pods.retain(|p| {
            let keep = !going.contains(&p.key);
            if !keep {
                left.extend(p.on.clone());
            }
            keep
        });
        for claim in left {
            self.pod_event(&claim);
        }
        if wanted > current {
            let (_, kind) = crate::manifest::group_kind(workload);
            let added = expand(workload, next..next + (wanted - current)).map_err(|source| {
                ScenarioError::Object {
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                    source,
                }
            })?;
            self.pods
                .extend(added.into_iter().map(|pod| sim_pod(pod, None)));
        }
        self.workload_replicas.insert(
            (namespace.to_owned(), name.to_owned()),
            i32::try_from(wanted).unwrap_or(i32::MAX),
        );
        self.entries.push(self.entry(
            "scale",
            format!("{namespace}/{name}: {current} → {wanted} replicas"),
        ));
        Ok(())
    }

    /// For a workload whose pods the scenario lists (a snapshot): how many pods of its namespace its selector
    /// matches, and which go to leave `wanted`: pending pods first, then the last by name.
    fn listed_going(&self, workload: &Value, namespace: &str, wanted: u64) -> (u64, Vec<String>) {
        let selector: BTreeMap<String, String> = workload
            .pointer("/spec/selector/matchLabels")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let selects = |p: &SimPod| {
            !buffers::is_virtual(&p.pod)
                && p.pod.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && !selector.is_empty()
                && selector
                    .iter()
                    .all(|(k, v)| p.pod.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v))
        };
        let mut members: Vec<(bool, String)> = self
            .pods
            .iter()
            .filter(|p| selects(p))
            .map(|p| (p.on.is_some(), p.key.clone()))
            .collect();
        let current = u64::try_from(members.len()).unwrap_or(u64::MAX);
        members.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
        let excess = usize::try_from(current.saturating_sub(wanted)).unwrap_or(usize::MAX);
        let going = members.into_iter().take(excess).map(|(_, k)| k).collect();
        (current, going)
    }

    /// The claims an event's selection names.
    fn matching(&self, nodes: &Interruption) -> Vec<String> {
        let label = |c: &SimClaim, key: &str| {
            c.claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
        };
        let matches =
            |wanted: &Option<String>, actual: Option<String>| wanted.is_some() && *wanted == actual;
        self.claims
            .iter()
            .filter(|c| {
                matches(&nodes.node_claim, Some(c.name().to_owned()))
                    || matches(&nodes.instance_type, Some(c.choice.instance_type.clone()))
                    || matches(&nodes.zone, label(c, labels::ZONE))
            })
            .map(|c| c.name().to_owned())
            .collect()
    }

    fn interrupt(&mut self, interruption: &Interruption) {
        let hit = self.matching(interruption);
        if hit.is_empty() {
            self.entries
                .push(self.entry("interrupt", "no node matches".to_owned()));
        }
        for name in hit {
            // EC2 reclaims the instance whatever the zone.
            let pods = self.remove(&name);
            let mut entry = self.entry(
                "interrupt",
                format!("{name} interrupted, {pods} pods to reschedule"),
            );
            entry.node_claims = vec![name];
            self.entries.push(entry);
        }
    }

    /// Every node the fault names reports its condition from now on.
    fn report_condition(&mut self, fault: &NodeFault) {
        let hit = self.matching(&fault.nodes());
        let now = Time(self.now);
        let mut entry = self.entry(
            "unhealthy",
            if hit.is_empty() {
                "no node matches".to_owned()
            } else {
                format!("{}: {}={}", hit.join(", "), fault.condition, fault.status)
            },
        );
        for claim in self
            .claims
            .iter_mut()
            .filter(|c| hit.iter().any(|h| h == c.name()))
        {
            claim.conditions.retain(|c| c.type_ != fault.condition);
            claim.conditions.push(NodeCondition {
                type_: fault.condition.clone(),
                status: fault.status.clone(),
                reason: Some("SimulatedFault".to_owned()),
                last_transition_time: Some(now.clone()),
                last_heartbeat_time: Some(now.clone()),
                ..NodeCondition::default()
            });
        }
        entry.node_claims = hit;
        self.entries.push(entry);
    }

    /// Node repair's pass ([`repair::decide`], as the `node.health` controller runs it): a node unhealthy past its
    /// toleration is deleted at once (no budget, no `do-not-disrupt`) and its pods wait for new capacity; one held
    /// back because too much of its pool is unhealthy is reported once.
    fn repair(&mut self) {
        let nodes: Vec<(&str, Option<&str>, Node)> = self
            .claims
            .iter()
            .filter_map(|c| {
                let pool = pool_label(c.claim.metadata.labels.as_ref());
                Some((c.name(), pool, self.node(c)?))
            })
            .collect();
        let view: Vec<NodeHealth<'_>> = nodes
            .iter()
            .map(|(claim, pool, node)| (Some((*claim, *pool)), node))
            .chain(self.fixed_nodes.iter().map(|node| (None, node)))
            .map(|(claim, node)| {
                let claim = claim.map(|(name, pool)| ClaimHealth {
                    name,
                    pool,
                    deleting: false,
                    termination_timestamp: None,
                });
                NodeHealth::of(node, claim)
            })
            .collect();
        let repairs = repair::decide(&view, &AWS_POLICIES, self.now);
        drop(view);
        drop(nodes);
        for r in repairs {
            match r.verdict {
                Verdict::Repair { condition, .. } => {
                    self.repair_held.remove(&r.claim);
                    let pods = self.delete(&r.claim);
                    let mut entry = self.entry(
                        "repair",
                        format!(
                            "{} replaced: its Node reported {condition} past the toleration, {pods} pods to reschedule",
                            r.claim
                        ),
                    );
                    entry.node_claims = vec![r.claim];
                    entry.nodepool = Some(r.pool).filter(|p| !p.is_empty());
                    entry.reason = Some("Unhealthy".to_owned());
                    self.entries.push(entry);
                }
                Verdict::Blocked { message, .. } => {
                    if self.repair_held.insert(r.claim.clone()) {
                        let mut entry =
                            self.entry("repair", format!("{} not repaired: {message}", r.claim));
                        entry.node_claims = vec![r.claim];
                        entry.nodepool = Some(r.pool).filter(|p| !p.is_empty());
                        self.entries.push(entry);
                    }
                }
                Verdict::Tolerated(_) => {}
            }
        }
    }

    /// Static pools kept at their replicas ([`static_capacity::scale`], as the `static.capacity` controller
    /// runs it): claims launched from the template at its cheapest offering, or the surplus removed (its pods wait
    /// for capacity). Without the gate, each static pool is said to launch nothing, once.
    fn keep_replicas(&mut self) {
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
                        .map(|p| p.pod.clone())
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
    fn say_replicas(&mut self, pool: &str, detail: String) {
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
    fn make_ready(&mut self) {
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

    fn exists(&self, name: &str) -> bool {
        self.claims.iter().any(|c| c.name() == name)
    }

    /// Deletes a claim kerf decided to remove; its pods wait for new capacity. Returns how many there were. In a
    /// zone shifted away from its instance is not terminated until the shift ends (and costs until then).
    fn delete(&mut self, name: &str) -> usize {
        let in_shifted_zone = self.claims.iter().find(|c| c.name() == name).and_then(|c| {
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
    fn remove(&mut self, name: &str) -> usize {
        self.claims.retain(|c| c.name() != name);
        let mut moved = 0;
        for pod in &mut self.pods {
            if pod.on.as_deref() == Some(name) {
                pod.on = None;
                if let Some(spec) = pod.pod.spec.as_mut() {
                    spec.node_name = None;
                }
                moved += 1;
            }
        }
        moved
    }

    /// Records a pod event on a claim (`status.lastPodEventTime`), which restarts its `consolidateAfter`.
    fn pod_event(&mut self, claim: &str) {
        let now = self.now;
        if let Some(c) = self.claims.iter_mut().find(|c| c.name() == claim) {
            if let Some(status) = c.claim.status.as_mut() {
                if stamp_due(status.last_pod_event_time.as_deref(), now) {
                    status.last_pod_event_time = Some(now.to_string());
                }
            }
        }
    }

    /// The type `name` as `pool` sees it: with its NodeOverlays (a capacity overlay's resources are what the node's
    /// device plugin would report).
    fn instance_type(&self, name: &str, pool: &str) -> Option<&crate::catalog::InstanceType> {
        self.shared_catalog.instance_types.iter().find(|it| {
            it.name == name
                && it
                    .requirements
                    .get(labels::NODEPOOL)
                    .is_none_or(|r| r.has(pool))
        })
    }

    /// Brings the CapacityBuffers' virtual pods to what the buffers keep now (a `percentage` follows its
    /// workload's scaling): new ones wait for room like pending pods, surplus ones leave their nodes.
    fn sync_buffers(&mut self) {
        if self.scenario.capacity_buffers.is_empty() {
            return;
        }
        let wanted = self.scenario.buffer_pods(|namespace, name| {
            self.workload_replicas
                .get(&(namespace.to_owned(), name.to_owned()))
                .copied()
                .or_else(|| self.scenario.written_replicas(namespace, name))
        });
        let wanted_keys: BTreeSet<String> = wanted.iter().map(plan::pod_key).collect();
        let mut left = Vec::new();
        self.pods.retain(|p| {
            let keep = !buffers::is_virtual(&p.pod) || wanted_keys.contains(&p.key);
            if !keep {
                left.extend(p.on.clone());
            }
            keep
        });
        for claim in left {
            self.pod_event(&claim);
        }
        let have: BTreeSet<String> = self.pods.iter().map(|p| p.key.clone()).collect();
        for pod in wanted {
            if !have.contains(&plan::pod_key(&pod)) {
                self.pods.push(sim_pod(pod, None));
            }
        }
    }

    /// Makes `overlaid_catalog` the scenario's catalog with its NodeOverlays, for the pools as they are now;
    /// whether it made it again.
    fn overlay_pools(&mut self) -> bool {
        // Overlays are only ever added during a run: without any, the catalog is the scenario's.
        if self.overlays.is_empty() {
            return false;
        }
        let inputs: OverlaidFor = (
            self.pools
                .iter()
                .map(|p| (p.metadata.name.clone(), p.spec.clone()))
                .collect(),
            self.overlays
                .iter()
                .map(|o| (o.metadata.name.clone(), o.spec.clone()))
                .collect(),
        );
        if self.overlaid_for.as_ref() == Some(&inputs) {
            return false;
        }
        // Every class has the scenario's catalog, so the pools are overlaid together over it.
        let base = Arc::new(self.catalog.clone());
        let catalogs: BTreeMap<String, Arc<Catalog>> = self
            .pools
            .iter()
            .map(|p| {
                (
                    p.spec.template.spec.node_class_ref.name.clone(),
                    base.clone(),
                )
            })
            .collect();
        let evaluation = overlay::evaluate(&self.overlays, &self.pools, &catalogs);
        let pool_refs: Vec<&NodePool> = self.pools.iter().collect();
        self.overlaid_catalog = Arc::new(
            overlay::overlaid(self.catalog, &pool_refs, &evaluation)
                .unwrap_or_else(|| self.catalog.clone()),
        );
        self.overlaid_for = Some(inputs);
        true
    }

    /// The Node of a ready claim; nodes that disruption queued are tainted so provisioning leaves them be.
    fn node(&self, claim: &SimClaim) -> Option<Node> {
        if !claim.ready {
            return None;
        }
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
        // A node a command holds carries `karpenter.sh/disrupted`, as the controller taints it.
        let mut taints = json!(claim.claim.spec.taints.clone().unwrap_or_default());
        if let (Some(list), true) = (taints.as_array_mut(), claim.awaiting.is_some()) {
            list.push(json!({"key": DISRUPTED_TAINT, "effect": "NoSchedule"}));
        }
        let mut conditions = claim.conditions.clone();
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..NodeCondition::default()
            });
        }
        serde_json::from_value(json!({
            "metadata": {"name": claim.name(), "labels": node_labels, "annotations": annotations},
            "spec": {"taints": taints},
            "status": {
                "capacity": it.capacity.to_quantities(),
                "allocatable": it.allocatable().to_quantities(),
                "conditions": conditions,
            },
        }))
        .ok()
    }

    /// The controller's provisioning decision ([`plan::decide`]) for the pods that wait, onto the nodes there
    /// are and new claims, NodePool limits included.
    fn provision(&mut self) -> Result<(), ScenarioError> {
        if self.pods.iter().all(|p| p.on.is_some()) {
            return Ok(());
        }
        let snapshot = Snapshot {
            nodes: self
                .claims
                .iter()
                .filter_map(|c| self.node(c))
                .chain(self.fixed_nodes.iter().cloned())
                .collect(),
            node_claims: self.claims.iter().map(|c| c.claim.clone()).collect(),
            daemon_sets: self.scenario.daemonsets.clone(),
            pods: self.pods.iter().map(|p| Arc::new(p.pod.clone())).collect(),
            node_pools: self.pools.clone(),
            node_classes: Vec::new(),
            policies: self.scenario.settings.policies().unwrap_or_default(),
            default_spread: self.default_spread.clone(),
            volumes: self.volumes.clone(),
            disruption_budgets: self.scenario.disruption_budgets.clone(),
        };
        let pending: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| p.on.is_none())
            .map(|p| &p.pod)
            .collect();
        // This decision places the virtual pods anew.
        self.buffer_on.clear();
        // Every class a pool names has the scenario's catalog.
        let catalogs: BTreeMap<String, Arc<Catalog>> = self
            .pools
            .iter()
            .map(|p| {
                (
                    p.spec.template.spec.node_class_ref.name.clone(),
                    self.shared_catalog.clone(),
                )
            })
            .collect();
        let decisions = plan::decide(&snapshot, &pending, &catalogs, &mut self.preparations)?;
        let targets: Vec<(String, Vec<String>)> = decisions
            .nominated_nodes()
            .into_iter()
            .map(|(node, pods)| {
                (
                    node.to_owned(),
                    pods.into_iter().map(str::to_owned).collect(),
                )
            })
            .collect();
        let window = nominations::window(nominations::DEFAULT_BATCH_MAX);
        for (node, pods) in targets {
            // Virtual pods nominate nothing (Karpenter's scheduler skips them): their node is held by them.
            let real = pods.iter().any(|key| {
                self.pods
                    .iter()
                    .any(|p| &p.key == key && !buffers::is_virtual(&p.pod))
            });
            if real {
                self.nominations.nominate(&node, self.now, window);
            }
            self.place(&pods, &node);
        }
        for new in decisions.claims {
            let Some(choice) = new.choice else {
                continue;
            };
            if let Some(name) = self.launch(new.node_claim, choice, new.pods.len(), None) {
                self.place(&new.pods, &name);
            }
        }
        Ok(())
    }

    fn place(&mut self, pods: &[String], claim: &str) {
        let mut bound = false;
        for pod in self.pods.iter_mut().filter(|p| pods.contains(&p.key)) {
            if buffers::is_virtual(&pod.pod) {
                self.buffer_on.insert(pod.key.clone(), claim.to_owned());
                continue;
            }
            bound = true;
            pod.on = Some(claim.to_owned());
            pod.pod.spec.get_or_insert_with(Default::default).node_name = Some(claim.to_owned());
        }
        // Virtual pods are no pod events (a buffer node's consolidateAfter is not reset by them).
        if bound {
            self.pod_event(claim);
        }
    }

    /// Launches the replacement `planned` on its cheapest offering; `None` when it has none or its pool is gone.
    fn launch_planned(&mut self, planned: &PlannedClaim, replacing: &str) -> Option<String> {
        let pool = self
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(planned.nodepool.as_str()))?;
        let claim = node_claim(pool, planned, &[]);
        let choice = planned.cheapest.clone()?;
        self.launch(claim, choice, planned.pods.len(), Some(replacing))
    }

    /// Creates `claim` (named `<pool>-<n>` in launch order) on `choice`, as the controller's launch labels it.
    fn launch(
        &mut self,
        mut claim: NodeClaim,
        choice: Choice,
        pods: usize,
        replacing: Option<&str>,
    ) -> Option<String> {
        let nodepool = pool_of(&claim).to_owned();
        self.launched += 1;
        let name = format!("{nodepool}-{}", self.launched);
        claim.metadata.name = Some(name.clone());
        claim.metadata.creation_timestamp = Some(Time(self.now));
        let instance_type = self
            .catalog
            .instance_types
            .iter()
            .find(|it| it.name == choice.instance_type);
        claim
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(launched_labels(
                instance_type,
                &choice.instance_type,
                &choice.zone,
                choice.capacity_type,
            ));
        let nodeclass = self
            .nodeclasses
            .get(&claim.spec.node_class_ref.name)
            .cloned();
        let mut entry = self.entry(
            "launch",
            format!(
                "{name} {} {} {}{}",
                choice.instance_type,
                choice.capacity_type.as_str(),
                choice.zone,
                replacing.map_or_else(String::new, |r| format!(", replacing {r}"))
            ),
        );
        entry.node_claims = vec![name.clone()];
        entry.nodepool = Some(nodepool);
        entry.price_per_hour = choice.price;
        entry.pods = Some(pods);
        self.entries.push(entry);
        self.claims.push(SimClaim {
            claim,
            choice,
            launched: self.now,
            ready: false,
            nodeclass,
            replacement: replacing.map(|_| self.now),
            awaiting: None,
            conditions: Vec::new(),
        });
        Some(name)
    }

    /// The disruption engine's view of the run at `now`: every claim's node input ([`node_inputs`], as the
    /// controller assembles it) and the pods that wait.
    fn disruption_view(&self, now: Timestamp) -> (Vec<NodeInput>, Vec<Pod>) {
        let nodes: BTreeMap<String, Node> = self
            .claims
            .iter()
            .filter_map(|c| Some((c.name().to_owned(), self.node(c)?)))
            .collect();
        let by_name: BTreeMap<&str, &SimClaim> =
            self.claims.iter().map(|c| (c.name(), c)).collect();
        // CapacityBuffer virtual pods count on the claims the last decision put them on (their Nodes are named after
        // the claims), as the controller's disruption input has them.
        let held: Vec<Pod> = self
            .pods
            .iter()
            .filter_map(|p| {
                let claim = self.buffer_on.get(&p.key)?;
                let mut pod = p.pod.clone();
                pod.spec.get_or_insert_with(Default::default).node_name = Some(claim.clone());
                if let Some(status) = pod.status.as_mut() {
                    status.phase = Some("Running".into());
                    status.conditions = None;
                }
                Some(pod)
            })
            .collect();
        let inputs = node_inputs(
            self.claims.iter().map(|c| c.claim.clone()),
            |name| nodes.get(name),
            self.pods.iter().map(|p| &p.pod).chain(&held),
            &self.nominations,
            now,
            |claim| {
                let sim = claim
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|name| by_name.get(name));
                Facts {
                    cloud_drift: sim.and_then(|c| self.cloud_drift(c)),
                    launched_as_replacement: sim.and_then(|c| c.replacement),
                }
            },
        );
        let pending = self
            .pods
            .iter()
            .filter(|p| p.on.is_none() && !self.buffer_on.contains_key(&p.key))
            .map(|p| p.pod.clone())
            .collect();
        (inputs, pending)
    }

    /// One disruption pass over the cluster as it is now: the claims marked as the controller marks them, blocked
    /// budgets reported, and the commands carried out, those of emptiness and consolidation only if they still
    /// hold [`VALIDATION_DELAY`] later (as the controller re-checks them).
    fn disrupt(&mut self) {
        let settings = self.scenario.settings.disruption().unwrap_or_default();
        let (inputs, pending) = self.disruption_view(self.now);
        let counts = count_nodes(inputs.iter().map(|n| {
            (
                pool_of(&n.claim),
                NodeState::of(&n.claim, n.node.as_ref(), n.queued),
            )
        }));
        let decision = decide(&self.input(&inputs, &pending, settings), self.now);
        for mark in marks::of_pass(&inputs, &decision, self.now) {
            if let Some(c) = self.claims.iter_mut().find(|c| c.name() == mark.claim) {
                marks::apply(&mut c.claim, mark.conditions);
            }
        }
        for skip in &decision.skipped {
            let (Why::Budget { .. }, Some(pool)) = (&skip.why, &skip.nodepool) else {
                continue;
            };
            self.blocked(pool, skip.method.reason(), &counts);
        }
        let delay = SignedDuration::try_from(VALIDATION_DELAY).unwrap_or(SignedDuration::ZERO);
        for command in &decision.commands {
            if !command.method.needs_validation() {
                self.carry_out(command, &counts);
                continue;
            }
            // Checked against the run as it is after the commands before it, at the time the controller would.
            let later = self.now.checked_add(delay).unwrap_or(self.now);
            let (inputs, pending) = self.disruption_view(later);
            if let Ok(valid) = validate(&self.input(&inputs, &pending, settings), command, later) {
                self.carry_out(&valid, &counts);
            }
        }
    }

    fn input<'i>(
        &'i self,
        nodes: &'i [NodeInput],
        pending: &'i [Pod],
        settings: Settings,
    ) -> DisruptionInput<'i> {
        DisruptionInput {
            nodepools: &self.pools,
            nodes,
            pending,
            pdbs: &self.scenario.disruption_budgets,
            daemonsets: &self.scenario.daemonsets,
            catalog: &self.shared_catalog,
            volumes: &self.volumes,
            default_spread: &self.default_spread,
            settings,
        }
    }

    /// A `blocked` entry, unless the same budget was already reported blocking until the same time.
    fn blocked(
        &mut self,
        pool: &str,
        reason: crate::disruption::Reason,
        counts: &BTreeMap<String, PoolCounts>,
    ) {
        let Some(explanation) = self.explain(pool, reason, counts) else {
            return;
        };
        let line = explanation.to_string();
        let key = (pool.to_owned(), reason.to_string());
        if self.blocked.get(&key) == Some(&line) {
            return;
        }
        self.blocked.insert(key, line.clone());
        let mut entry = self.entry("blocked", format!("NodePool {pool}: {line}"));
        entry.nodepool = Some(pool.to_owned());
        entry.reason = Some(reason.to_string());
        entry.budget = Some(line);
        entry.until = explanation.until.map(|t| t.to_string());
        self.entries.push(entry);
    }

    fn explain(
        &self,
        pool: &str,
        reason: crate::disruption::Reason,
        counts: &BTreeMap<String, PoolCounts>,
    ) -> Option<Explanation> {
        let spec = self
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pool))?;
        let reason = reason.budget_reason()?;
        Some(Budgets::of(spec).explain(
            reason,
            counts.get(pool).copied().unwrap_or_default(),
            self.now,
        ))
    }

    fn carry_out(&mut self, command: &Command, counts: &BTreeMap<String, PoolCounts>) {
        let candidates: Vec<String> = command.candidates.iter().map(|t| t.claim.clone()).collect();
        let pool = command
            .candidates
            .first()
            .map(|t| t.nodepool.clone())
            .unwrap_or_default();
        let budget = self
            .explain(&pool, command.reason, counts)
            .map(|e| e.to_string());
        // A later block of this pool and reason is news again.
        self.blocked
            .remove(&(pool.clone(), command.reason.to_string()));
        // The disruption reads before the launches of its replacements.
        let position = self.entries.len();
        let replacements: Vec<String> = command
            .replacements
            .iter()
            .filter_map(|planned| self.launch_planned(planned, candidates.first()?))
            .collect();
        let mut entry = self.entry(
            "disrupt",
            format!(
                "{} {:?}: {}{}",
                command.reason,
                command.method,
                candidates.join(", "),
                if replacements.is_empty() {
                    " deleted".to_owned()
                } else {
                    format!(" replaced by {}", replacements.join(", "))
                }
            ),
        );
        entry.node_claims = candidates.clone();
        entry.nodepool = Some(pool);
        entry.reason = Some(command.reason.to_string());
        entry.method = Some(format!("{:?}", command.method));
        entry.budget = budget;
        entry.replacements = replacements.clone();
        entry.savings_per_hour = Some(round(command.savings));
        self.entries.insert(position, entry);
        let window = nominations::window(nominations::DEFAULT_BATCH_MAX);
        for destination in command.destinations.iter().chain(&replacements) {
            self.nominations.nominate(destination, self.now, window);
        }
        for name in candidates {
            if replacements.is_empty() {
                self.delete(&name);
            } else if let Some(c) = self.claims.iter_mut().find(|c| c.name() == name) {
                c.awaiting = Some(replacements.clone());
                let reason = command.reason.to_string();
                if let Some(conditions) =
                    marks::disruption_reason(&c.claim, Some(&reason), self.now)
                {
                    marks::apply(&mut c.claim, conditions);
                }
            }
        }
    }

    /// How the claim's EC2NodeClass changed since launch, if it did.
    fn cloud_drift(&self, claim: &SimClaim) -> Option<CloudDrift> {
        let now = self
            .nodeclasses
            .get(&claim.claim.spec.node_class_ref.name)?;
        let then = claim.nodeclass.as_ref()?;
        if now == then {
            return None;
        }
        // The controller's order: the class's hash (every field but the selector terms), then what the
        // selectors pick. Without a cloud to resolve them, a changed selector counts as picking other AMIs,
        // subnets or security groups.
        let hash = |spec: &Value| {
            serde_json::from_value::<EC2NodeClassSpec>(spec.clone())
                .ok()
                .map(|spec| ec2nodeclass_hash(&spec))
        };
        let changed = |key: &str| now.get(key) != then.get(key);
        if hash(now) != hash(then) {
            Some(CloudDrift::NodeClass)
        } else if changed("amiSelectorTerms") {
            Some(CloudDrift::Ami)
        } else if changed("subnetSelectorTerms") {
            Some(CloudDrift::Subnet)
        } else if changed("securityGroupSelectorTerms") {
            Some(CloudDrift::SecurityGroup)
        } else {
            // Another selector (capacity reservations) the simulation does not resolve.
            None
        }
    }

    /// Adds this minute's cost of the nodes that exist (an instance is billed from launch).
    fn account(&mut self) {
        let hour = usize::try_from(self.now.duration_since(self.timeline.start).as_secs() / 3600)
            .unwrap_or(usize::MAX);
        while self.cost.len() <= hour {
            self.cost.push(CostHour {
                hour: self.cost.len(),
                cost: 0.0,
                nodes: 0,
                unknown_prices: false,
            });
        }
        let minute_share = STEP.as_secs_f64() / 3600.0;
        let slot = &mut self.cost[hour];
        let prices = self.claims.iter().map(|c| c.choice.price);
        for price in prices.chain(self.held.iter().map(|h| h.price)) {
            match price {
                Some(price) => slot.cost += price * minute_share,
                None => slot.unknown_prices = true,
            }
        }
        slot.nodes = slot.nodes.max(self.claims.len() + self.held.len());
    }

    fn entry(&self, action: &'static str, detail: String) -> Entry {
        Entry::new(
            self.now.duration_since(self.timeline.start),
            self.now,
            action,
            detail,
        )
    }

    fn report(self) -> TimelineReport {
        let count = |action: &str| self.entries.iter().filter(|e| e.action == action).count();
        let totals = Totals {
            cost: round(self.cost.iter().map(|h| h.cost).sum()),
            launches: count("launch"),
            disruptions: count("disrupt"),
            interruptions: self
                .entries
                .iter()
                .filter(|e| e.action == "interrupt" && !e.node_claims.is_empty())
                .count(),
            blocked: count("blocked"),
            repairs: self
                .entries
                .iter()
                .filter(|e| e.action == "repair" && e.reason.is_some())
                .count(),
            nodes_at_end: self.claims.len(),
            pending_at_end: self
                .pods
                .iter()
                .filter(|p| p.on.is_none() && !buffers::is_virtual(&p.pod))
                .count(),
        };
        TimelineReport {
            start: self.timeline.start.to_string(),
            duration: Entry::offset(self.timeline.duration),
            timeline: self.entries,
            cost_by_hour: self
                .cost
                .into_iter()
                .map(|h| CostHour {
                    cost: round(h.cost),
                    ..h
                })
                .collect(),
            totals,
        }
    }
}

/// A pod of the run, bound to the run's node `on` or waiting for one.
fn sim_pod(mut pod: Pod, on: Option<String>) -> SimPod {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    pod.spec.get_or_insert_with(Default::default).node_name = on.clone();
    SimPod { pod, key, on }
}

fn pool_of(claim: &NodeClaim) -> &str {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .map_or("", String::as_str)
}

/// Dollars to a hundredth of a cent, so sums print the same everywhere.
fn round(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}
