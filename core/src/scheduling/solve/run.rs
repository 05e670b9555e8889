//! One solve: the pods in Karpenter's order onto existing nodes, open claims and new claims, relaxing
//! preferences one step per failure, and the plan it ends with.

use super::*;

impl<'a> Scheduler<'a> {
    /// Plans where `pods` go: onto the existing `nodes` first, else onto new NodeClaims.
    pub fn solve_on(&self, pods: &[PodInfo], nodes: &[ExistingNode]) -> Plan {
        let mut order: Vec<&ExistingNode> = nodes.iter().collect();
        order.sort_by(|a, b| (!a.initialized, &a.name).cmp(&(!b.initialized, &b.name)));
        let nodes: Vec<NodeState> = order.into_iter().map(|n| self.node_state(n)).collect();
        let bound: Vec<Bound> = nodes
            .iter()
            .enumerate()
            .flat_map(|(host, state)| {
                let node = state.host();
                state.node.pods.iter().map(move |b| Bound {
                    pod: &b.pod,
                    host,
                    node,
                })
            })
            .collect();
        let mut templates = self.prepared.templates.clone();
        for template in &mut templates {
            if let Some(left) = template.remaining.as_mut() {
                for state in nodes
                    .iter()
                    .filter(|s| s.node.nodepool.as_ref() == Some(&template.nodepool))
                {
                    left.consume(&state.node.capacity);
                }
            }
        }
        let domains = self.solve_domains(pods, &bound, &nodes);
        let mut universe = Universe::default();
        for (k, key) in domains.keys.iter().enumerate() {
            let offered = universe.offered.entry(key.clone()).or_default();
            for (t, template) in self.prepared.templates.iter().enumerate() {
                offered.extend(
                    domains.per_template[t][k]
                        .iter()
                        .map(|d| (d.as_str(), template.taints.as_slice())),
                );
                // Types the pool's limits keep it from launching still give it domains (Karpenter counts every
                // type of every ready pool); they are no domain a new claim could take, so only here.
                offered.extend(
                    domains.over_limits[t][k]
                        .iter()
                        .map(|d| (d.as_str(), template.taints.as_slice())),
                );
            }
        }
        universe.nodes = nodes
            .iter()
            .filter(|s| !s.node.in_flight)
            .map(NodeState::host)
            .collect();
        let topology = Topology::new(pods, &bound, nodes.len(), &universe);
        let mut solver = Solver {
            scheduler: self,
            pods,
            templates,
            claims: Vec::new(),
            order: Vec::new(),
            topology,
            nodes,
            domains: &domains,
            reservations: self.prepared.reservations.clone(),
            lists: Default::default(),
        };
        let effective_zones = (0..pods.len()).map(|p| solver.effective_zone(p)).collect();
        // Largest first: CPU, then memory, then oldest, then UID.
        let mut queue: Vec<usize> = (0..pods.len()).collect();
        queue.sort_by_key(|i| {
            let p = &pods[*i];
            (
                Reverse(p.requests.cpu),
                Reverse(p.requests.memory),
                &p.created,
                &p.uid,
            )
        });
        // Pods that fail are retried after the others until a full pass places nothing (affinity ordering).
        let mut reasons: Vec<String> = vec![String::new(); pods.len()];
        let mut deferred = vec![false; pods.len()];
        loop {
            let mut failed = Vec::new();
            for &index in &queue {
                if let Err(miss) = solver.place(index) {
                    (reasons[index], deferred[index]) = match miss {
                        Miss::Unfit(reason) => (reason, false),
                        Miss::Reserved(reason) => (reason, true),
                    };
                    failed.push(index);
                }
            }
            let progress = failed.len() < queue.len();
            queue = failed;
            if queue.is_empty() || !progress {
                break;
            }
        }
        solver.refill();
        let mut unschedulable: Vec<Unschedulable> = queue
            .into_iter()
            .map(|index| Unschedulable {
                pod: pods[index].key.clone(),
                reason: std::mem::take(&mut reasons[index]),
                deferred: deferred[index],
            })
            .collect();
        let mut claims = Vec::with_capacity(solver.claims.len());
        // A solve that panicked left the rankings whole (each entry is inserted complete).
        let mut rankings = self
            .rankings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (c, claim) in solver.claims.iter().enumerate() {
            match solver.finish(c, claim, pods, &mut rankings) {
                Ok(planned) => claims.push(planned),
                // The truncated launch list broke minValues: the claim's pods wait (Strict policy).
                Err(reason) => unschedulable.extend(
                    claim
                        .pods
                        .iter()
                        .map(|p| Unschedulable::new(pods[*p].key.clone(), reason.clone())),
                ),
            }
        }
        let existing = solver
            .nodes
            .iter()
            .filter(|s| !s.pods.is_empty())
            .map(|s| NodePlacement {
                node: s.node.name.clone(),
                pods: s.pods.iter().map(|p| pods[*p].key.clone()).collect(),
            })
            .collect();
        Plan {
            claims,
            existing,
            unschedulable,
            effective_zones,
        }
    }

    /// The label keys the solve's topology constrains on (those of the pending pods and the required
    /// anti-affinity of the bound ones), with the domains each template and the existing nodes offer there.
    pub(super) fn solve_domains(
        &self,
        pods: &[PodInfo],
        bound: &[Bound],
        nodes: &[NodeState],
    ) -> SolveDomains {
        let keys: std::collections::BTreeSet<&TopologyKey> = pods
            .iter()
            .chain(bound.iter().map(|b| b.pod))
            .flat_map(|p| p.topology.iter().map(|c| &c.key))
            .filter(|k| **k != TopologyKey::Hostname)
            .collect();
        let keys: Vec<TopologyKey> = keys.into_iter().cloned().collect();
        let per_template = (0..self.prepared.templates.len())
            .map(|t| {
                keys.iter()
                    .map(|key| self.template_domains(t, key))
                    .collect()
            })
            .collect::<Vec<Vec<Vec<String>>>>();
        let over_limits = self
            .prepared
            .templates
            .iter()
            .zip(&per_template)
            .map(|(template, theirs)| {
                keys.iter()
                    .zip(theirs)
                    .map(|(key, usable)| {
                        if template.over_limits.is_empty() {
                            return Vec::new();
                        }
                        self.types_domains(template, &template.over_limits, key)
                            .into_iter()
                            .filter(|d| !usable.contains(d))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let nodes = keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let mut values: std::collections::BTreeSet<&str> = per_template
                    .iter()
                    .flat_map(|d| d[k].iter().map(String::as_str))
                    .collect();
                values.extend(
                    nodes
                        .iter()
                        .filter_map(|s| single_value(&s.node.requirements, key.label())),
                );
                values.into_iter().map(str::to_owned).collect()
            })
            .collect();
        SolveDomains {
            keys,
            per_template,
            over_limits,
            nodes,
        }
    }

    /// An existing node at the start of the solve: its room is what is allocatable minus its pods' requests and
    /// minus the DaemonSets that would run there but do not yet (controller-behaviour.md §1.3).
    pub(super) fn node_state<'n>(&'n self, node: &'n ExistingNode) -> NodeState<'n> {
        let allow = if node.in_flight {
            &self.prepared.allow
        } else {
            &DEFINED_ONLY
        };
        let missing = self.prepared.daemonsets.iter().filter(|d| {
            !node
                .pods
                .iter()
                .any(|b| b.daemonset.as_deref() == Some(d.name.as_str()))
                && daemons::runs_on(&d.pod, &node.taints, &node.requirements, allow)
        });
        let taken = daemons::overhead(
            node.pods
                .iter()
                .map(|b| &b.pod)
                .chain(missing.map(|d| &d.pod)),
        );
        let mut room = node.allocatable.clone() - &taken.overhead;
        // A node already over-committed has no room left, not negative room.
        room.cpu = room.cpu.max(0);
        room.memory = room.memory.max(0);
        room.pods = room.pods.max(0);
        room.ephemeral_storage = room.ephemeral_storage.max(0);
        NodeState {
            node,
            allow,
            room,
            ports: taken.ports,
            attached: node.attached.clone(),
            pods: Vec::new(),
        }
    }
}
