//! A loaded scenario made ready to solve: the cluster it describes, its pending pods and its NodePools prepared
//! over the catalog. `kerf simulate` and the golden tests share it.

use super::report::Report;
use super::scenario::{Scenario, ScenarioError};
use crate::catalog::Catalog;
use crate::disruption::is_daemonset_pod;
use crate::scheduling::volumes;
use crate::scheduling::{Cluster, Plan, PodInfo, Scheduler, Unschedulable};

pub struct Simulation<'a> {
    scheduler: Scheduler<'a>,
    cluster: Cluster,
    pending: Vec<PodInfo>,
    /// Pending pods their volumes keep out of the solve (a missing claim, an unknown StorageClass, ...): they
    /// are reported unschedulable with the reason.
    refused: Vec<Unschedulable>,
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
        let volume_index = scenario.volumes();
        let cluster = Cluster::from_objects(
            &scenario.nodes,
            &scenario.nodeclaims,
            &scenario.daemonsets,
            &scenario.pods,
            catalog,
        )?
        .with_volume_limits(&volume_index, &scenario.pods);
        let mut pending = Vec::new();
        let mut refused = Vec::new();
        for pod in scenario
            .pods
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(str::is_empty)
            })
            .filter(|p| !is_daemonset_pod(p))
        {
            let mut info = PodInfo::from_pod(&policies.preferences.apply(pod))?;
            match volume_index.pending(pod) {
                Ok(alternatives) => {
                    volumes::apply(&mut info, &alternatives);
                    info.attached = volume_index.attached(pod);
                    pending.push(info);
                }
                Err(error) => refused.push(Unschedulable::new(info.key, error.to_string())),
            }
        }
        Ok(Simulation {
            scheduler: Scheduler::with_daemonsets(
                &scenario.nodepools,
                catalog,
                &cluster.daemonsets,
            )
            .with_min_values_policy(policies.min_values),
            cluster,
            pending,
            refused,
            seed: scenario.settings.seed,
        })
    }

    /// How many pods wait for a node.
    pub fn pending(&self) -> usize {
        self.pending.len() + self.refused.len()
    }

    /// How many pods the solve places (pods without a node that no DaemonSet owns).
    pub fn pending_pods(&self) -> usize {
        self.pending.len()
    }

    /// The plan for the pending pods; those their volumes refuse are among its unschedulable ones.
    pub fn solve(&self) -> Plan {
        let mut plan = self.scheduler.solve_on(&self.pending, &self.cluster.nodes);
        plan.unschedulable.extend(self.refused.iter().cloned());
        plan
    }

    /// The report of `plan`, which took `solve_seconds`.
    pub fn report(&self, plan: &Plan, solve_seconds: f64) -> Report {
        let mut report = Report::new(self.pending(), plan, solve_seconds);
        report.seed = self.seed;
        report
    }
}
