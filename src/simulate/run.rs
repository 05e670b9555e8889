//! A loaded scenario made ready to solve: the cluster it describes, its pending pods and its NodePools prepared
//! over the catalog. `kerf simulate` and the golden tests share it.

use super::report::Report;
use super::scenario::{Scenario, ScenarioError};
use crate::catalog::Catalog;
use crate::disruption::is_daemonset_pod;
use crate::scheduling::{Cluster, Plan, PodInfo, Scheduler};

pub struct Simulation<'a> {
    scheduler: Scheduler<'a>,
    cluster: Cluster,
    pending: Vec<PodInfo>,
    seed: Option<u64>,
}

impl<'a> Simulation<'a> {
    /// The scenario's cluster (Nodes, NodeClaims, DaemonSets, bound pods) and its pending pods: pods without a
    /// node that no DaemonSet owns (DaemonSet pods are the DaemonSet's overhead on every node).
    pub fn new(scenario: &Scenario, catalog: &'a Catalog) -> Result<Self, ScenarioError> {
        let policies = scenario
            .settings
            .policies()
            .map_err(|e| ScenarioError::Invalid(vec![e]))?;
        let cluster = Cluster::from_objects(
            &scenario.nodes,
            &scenario.nodeclaims,
            &scenario.daemonsets,
            &scenario.pods,
            catalog,
        )?;
        let pending = scenario
            .pods
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(str::is_empty)
            })
            .filter(|p| !is_daemonset_pod(p))
            .map(|p| PodInfo::from_pod(&policies.preferences.apply(p)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Simulation {
            scheduler: Scheduler::with_daemonsets(
                &scenario.nodepools,
                catalog,
                &cluster.daemonsets,
            )
            .with_min_values_policy(policies.min_values),
            cluster,
            pending,
            seed: scenario.settings.seed,
        })
    }

    /// How many pods wait for a node.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// How many pods the solve places (pods without a node that no DaemonSet owns).
    pub fn pending_pods(&self) -> usize {
        self.pending.len()
    }

    pub fn solve(&self) -> Plan {
        self.scheduler.solve_on(&self.pending, &self.cluster.nodes)
    }

    /// The report of `plan`, which took `solve_seconds`.
    pub fn report(&self, plan: &Plan, solve_seconds: f64) -> Report {
        let mut report = Report::new(self.pending.len(), plan, solve_seconds);
        report.seed = self.seed;
        report
    }
}
