//! The cluster's life on a virtual clock: every minute the due events happen, launched nodes become ready,
//! pending pods are provisioned (the controller's solve), and one disruption pass (`disruption::decide`) runs
//! and its commands are carried out. Minutes that cannot change anything are skipped and only billed
//! ([`quiet`]). Nothing reads the wall clock or draws a random number, and every collection is walked in a
//! fixed order, so one scenario always gives the same timeline.

mod changes;
mod disrupt;
mod faults;
mod nodes;
mod provision;
mod quiet;
mod shifts;

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
    decide, ec2nodeclass_hash, is_daemonset_pod, lifetime_remaining, nodepool_hash, validate,
    Budgets, CloudDrift, Command, DisruptionInput, Explanation, NodeInput, PassPreparation,
    PoolCounts, Settings, DISRUPTED_TAINT, HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION,
    VALIDATION_DELAY,
};
use crate::engine::blocked_pools::{self, BlockedPool};
use crate::engine::buffers;
use crate::engine::disruption_events::{self, NodeEvent};
use crate::engine::disruption_input::{node_inputs, pool_counts, Facts};
use crate::engine::launch::{kubelet_labels, launched_labels, registered_metadata};
use crate::engine::marks;
use crate::engine::nominations::{self, Nominations};
use crate::engine::overlay;
use crate::engine::pod_events::stamp_due;
use crate::engine::provisioning::claim::node_claim;
use crate::engine::provisioning::plan::{self, Preparations, Snapshot};
use crate::engine::provisioning::step::{self, BufferPlacement};
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
use std::cell::RefCell;
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
    /// Shared with each disruption pass's input (a claim lists up to 600 instance types); written copy-on-write.
    claim: Arc<NodeClaim>,
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
    /// Its Node as last built ([`TimelineRun::node`]).
    built: RefCell<Option<nodes::BuiltNode>>,
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
        Arc::make_mut(&mut self.claim).status = Some(
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
    /// Shared with the snapshots the run decides on; copied only when the run changes it.
    pod: Arc<Pod>,
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
    /// The last `kept` entry of each claim (its Event reason and message), so a node is told once per verdict.
    kept: BTreeMap<String, (&'static str, String)>,
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
    /// Where the last provisioning step put CapacityBuffer virtual pods: they are never bound (real pods take the
    /// room first, as in the cluster), but disruption keeps room for those on Nodes.
    buffers: BufferPlacement,
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
    /// The disruption passes' scheduler preparation, kept from pass to pass as the controller keeps it.
    pass_preparation: PassPreparation,
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
    /// Whether the last repair pass had an unhealthy node to judge.
    under_repair: bool,
    /// What the last disruption pass did.
    last_pass: quiet::LastPass,
    /// Whether quiet minutes are skipped ([`quiet`]); off only to compare with a run of every minute.
    skip_quiet: bool,
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
            .every_pod()
            .into_iter()
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
                sim_pod(pod, on)
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
            kept: BTreeMap::new(),
            cost: Vec::new(),
            nominations: Nominations::default(),
            fixed_nodes,
            overlaid_catalog: Arc::new(catalog.clone()),
            shared_catalog: Arc::new(catalog.clone()),
            zonal_shifts: Vec::new(),
            shifted: BTreeSet::new(),
            held: Vec::new(),
            workload_replicas: BTreeMap::new(),
            buffers: BufferPlacement::default(),
            overlays: scenario.nodeoverlays.clone(),
            node_overlay: gates.node_overlay,
            overlaid_for: None,
            preparations: Preparations::default(),
            pass_preparation: PassPreparation::default(),
            volumes: scenario.volumes(),
            default_spread: scenario
                .default_spread()
                .map_err(|e| ScenarioError::Invalid(vec![e]))?,
            node_repair: gates.node_repair,
            static_capacity: gates.static_capacity,
            replicas_said: BTreeMap::new(),
            repair_held: std::collections::BTreeSet::new(),
            under_repair: false,
            last_pass: quiet::LastPass::Acted,
            skip_quiet: true,
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
                claim: Arc::new(e.claim),
                choice: e.choice,
                launched: e.created,
                ready: false,
                nodeclass,
                replacement: None,
                awaiting: None,
                conditions: e.conditions,
                built: RefCell::default(),
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
        let mut busy_from = self.now;
        while self.now < end {
            let elapsed = self.now.duration_since(self.timeline.start);
            let due = events.peek().is_some_and(|e| e.at <= elapsed);
            if !due && self.now < busy_from {
                self.account();
                self.now += STEP;
                continue;
            }
            let before = self.before();
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
            busy_from = self.next_busy_minute(&before, due);
            self.account();
            self.now += STEP;
        }
        Ok(self.report())
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
fn sim_pod(mut pod: Arc<Pod>, on: Option<String>) -> SimPod {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) != on.as_ref() {
        Arc::make_mut(&mut pod)
            .spec
            .get_or_insert_with(Default::default)
            .node_name = on.clone();
    }
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
