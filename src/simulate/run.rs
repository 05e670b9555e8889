//! A loaded scenario made ready to decide: the snapshot it describes and the catalog every NodePool's class
//! has. The one-solve `kerf simulate` decides with the controller's own provisioning step
//! ([`plan::decide`]), so a pod is refused, nominated or given a NodeClaim here exactly as the controller
//! would; the golden tests share it.

use super::events::DEFAULT_START;
use super::report::Report;
use super::scenario::{in_order, Scenario, ScenarioError};
use crate::catalog::Catalog;
use crate::disruption::is_daemonset_pod;
use crate::engine::overlay;
use crate::engine::provisioning::plan::{self, Decisions, Preparations, Snapshot};
use crate::engine::provisioning::replicas::{Replicas, Solvable};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Simulation {
    snapshot: Snapshot,
    /// The workloads' replicas that share their template ([`Scenario::replicas`]), not in the snapshot's pods.
    replicas: Vec<(usize, Replicas)>,
    catalog: Arc<Catalog>,
    /// Every class a pool names, each with the scenario's catalog.
    catalogs: BTreeMap<String, Arc<Catalog>>,
    seed: Option<u64>,
    /// The scenario's start (a `do-not-disrupt` duration on a leaving node's pod is read against it).
    now: Timestamp,
}

impl Simulation {
    /// The scenario's cluster (Nodes, NodeClaims, DaemonSets, pods, volumes, the default spread with the Services
    /// and workloads that deduce pods' selectors) as the controller's snapshot.
    pub fn new(scenario: &Scenario, catalog: Arc<Catalog>) -> Result<Self, ScenarioError> {
        let policies = scenario
            .settings
            .policies()
            .map_err(|e| ScenarioError::Invalid(vec![e]))?;
        let default_spread = scenario
            .default_spread()
            .map_err(|e| ScenarioError::Invalid(vec![e]))?;
        let catalogs = scenario
            .nodepools
            .iter()
            .map(|p| {
                (
                    p.spec.template.spec.node_class_ref.name.clone(),
                    catalog.clone(),
                )
            })
            .collect();
        // `nodeoverlays` is empty without the gate (`scenario::load` leaves them out).
        let (catalogs, _) =
            overlay::overlaid_catalogs(&scenario.nodeoverlays, &scenario.nodepools, &catalogs);
        let snapshot = Snapshot {
            nodes: scenario.nodes.iter().cloned().map(Arc::new).collect(),
            node_claims: scenario.nodeclaims.iter().cloned().map(Arc::new).collect(),
            daemon_sets: scenario.daemonsets.clone(),
            // CapacityBuffers' virtual pods are provisioned for with the pending pods.
            pods: scenario
                .pods
                .iter()
                .cloned()
                .chain(
                    scenario
                        .buffer_pods(|ns, name| scenario.written_replicas(ns, name))
                        .into_iter()
                        .map(Arc::new),
                )
                .collect(),
            node_pools: scenario.nodepools.clone(),
            node_classes: Vec::new(),
            policies,
            default_spread,
            volumes: scenario.volumes(),
            disruption_budgets: scenario.disruption_budgets.clone(),
        };
        Ok(Simulation {
            snapshot,
            replicas: scenario.replicas.clone(),
            catalog,
            catalogs,
            seed: scenario.settings.seed,
            now: scenario
                .settings
                .start
                .as_deref()
                .unwrap_or(DEFAULT_START)
                .parse()
                .map_err(|e| ScenarioError::Invalid(vec![format!("spec.start: {e}")]))?,
        })
    }

    /// The pods waiting for a node: those without one that no DaemonSet owns (DaemonSet pods are the
    /// DaemonSet's overhead on every node), then those of nodes being deleted that must move, as the controller
    /// solves for them ([`Leaving::is_reschedulable`](crate::engine::provisioning::leaving::Leaving)). A
    /// workload's replicas sharing a template all wait.
    fn pending(&self) -> Vec<Solvable<'_>> {
        let leaving = self.snapshot.leaving();
        let (mut pending, mut moving) = (Vec::new(), Vec::new());
        for solvable in in_order(&self.snapshot.pods, &self.replicas) {
            let Solvable::Pod(pod) = solvable else {
                pending.push(solvable);
                continue;
            };
            let unbound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty);
            if unbound && !is_daemonset_pod(pod) {
                pending.push(solvable);
            } else if !unbound
                && leaving.is_reschedulable(pod, &self.snapshot.disruption_budgets, self.now)
            {
                moving.push(solvable);
            }
        }
        pending.extend(moving);
        pending
    }

    /// How many pods wait for a node.
    pub fn pending_pods(&self) -> usize {
        self.pending()
            .iter()
            .map(|s| match s {
                Solvable::Pod(_) => 1,
                Solvable::Replicas(r) => r.len(),
            })
            .sum()
    }

    /// What the controller's provisioning step decides for the pending pods.
    pub fn solve(&self) -> Result<Decisions, ScenarioError> {
        let pending = self.pending();
        Ok(plan::decide_for(
            &self.snapshot,
            &pending,
            &self.catalogs,
            &mut Preparations::default(),
        )?)
    }

    /// The report of `decisions`, which took `solve_seconds`.
    pub fn report(&self, decisions: &Decisions, solve_seconds: f64) -> Report {
        let mut report = Report::new(self.pending_pods(), decisions, &self.catalog, solve_seconds);
        report.seed = self.seed;
        report
    }
}
