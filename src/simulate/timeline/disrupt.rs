//! One disruption pass on the simulated cluster, and how its commands are carried out.

use super::*;

impl TimelineRun<'_> {
    /// The disruption engine's view of the run at `now`: every claim's node input ([`node_inputs`], as the
    /// controller assembles it) and the pods that wait.
    pub(super) fn disruption_view(&self, now: Timestamp) -> (Vec<NodeInput>, Vec<Pod>) {
        let nodes: BTreeMap<String, Arc<Node>> = self
            .claims
            .iter()
            .filter_map(|c| Some((c.name().to_owned(), self.node(c)?)))
            .collect();
        let by_name: BTreeMap<&str, &SimClaim> =
            self.claims.iter().map(|c| (c.name(), c)).collect();
        // CapacityBuffer virtual pods count on the Nodes the last step put them on, and as pending elsewhere, as the
        // controller's disruption input has them.
        let held_on: BTreeMap<&str, &str> = self
            .buffers
            .on_nodes
            .iter()
            .flat_map(|(node, keys)| keys.iter().map(move |k| (k.as_str(), node.as_str())))
            .collect();
        let held: Vec<Pod> = self
            .pods
            .iter()
            .filter_map(|p| Some(buffers::held_on(&p.pod, held_on.get(p.key.as_str())?)))
            .collect();
        let inputs = node_inputs(
            self.claims.iter().map(|c| c.claim.clone()),
            |name| nodes.get(name).cloned(),
            self.pods.iter().map(|p| p.pod.as_ref()).chain(&held),
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
            .filter(|p| p.on.is_none() && !held_on.contains_key(p.key.as_str()))
            .map(|p| Pod::clone(&p.pod))
            .collect();
        (inputs, pending)
    }

    /// One disruption pass over the cluster as it is now: the claims marked as the controller marks them, blocked
    /// budgets reported, and the commands carried out, those of emptiness and consolidation only if they still
    /// hold [`VALIDATION_DELAY`] later (as the controller re-checks them).
    pub(super) fn disrupt(&mut self) {
        let settings = self.scenario.settings.disruption().unwrap_or_default();
        let (inputs, pending) = self.disruption_view(self.now);
        let counts = pool_counts(&inputs);
        // Taken out while the run changes: the commands carried out below need the run mutably.
        let mut preparation = std::mem::take(&mut self.pass_preparation);
        let decision = decide(
            &self.input(&inputs, &pending, settings, &mut preparation),
            self.now,
        );
        // The marks mirror the verdicts and are not read back by the next pass: a pass that only marked is settled.
        self.last_pass = if decision.commands.is_empty() {
            quiet::LastPass::Settled(decision.revisit_at)
        } else {
            quiet::LastPass::Acted
        };
        for mark in marks::of_pass(&inputs, &decision, self.now) {
            if let Some(c) = self.claims.iter_mut().find(|c| c.name() == mark.claim) {
                marks::apply(Arc::make_mut(&mut c.claim), mark.conditions);
            }
        }
        for blocked in blocked_pools::of(&decision, &self.pools, &counts, self.now) {
            self.blocked(blocked);
        }
        let lasting = decision
            .skipped
            .iter()
            .filter(|s| disruption_events::is_lasting(&s.why));
        for event in disruption_events::of(lasting) {
            self.kept(event);
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
            let input = self.input(&inputs, &pending, settings, &mut preparation);
            if let Ok(valid) = validate(&input, command, later) {
                self.carry_out(&valid, &counts);
            }
        }
        self.pass_preparation = preparation;
    }

    /// The pass's input, with the preparation `preparation` keeps for the run's pools and catalog.
    pub(super) fn input<'i>(
        &'i self,
        nodes: &'i [NodeInput],
        pending: &'i [Pod],
        settings: Settings,
        preparation: &'i mut PassPreparation,
    ) -> DisruptionInput<'i> {
        let mut input = DisruptionInput {
            nodepools: &self.pools,
            nodes,
            pending,
            pdbs: &self.scenario.disruption_budgets,
            daemonsets: &self.scenario.daemonsets,
            catalog: &self.shared_catalog,
            volumes: &self.volumes,
            default_spread: &self.default_spread,
            settings,
            prepared: None,
        };
        input.prepared = Some(preparation.get(&input, &self.shared_catalog));
        input
    }

    /// A `blocked` entry, unless the same budget was already reported blocking until the same time.
    pub(super) fn blocked(&mut self, blocked: BlockedPool) {
        let line = blocked.explanation.to_string();
        let key = (blocked.nodepool.clone(), blocked.reason.to_string());
        if self.blocked.get(&key) == Some(&line) {
            return;
        }
        self.blocked.insert(key, line.clone());
        let mut entry = self.entry("blocked", format!("NodePool {}: {line}", blocked.nodepool));
        entry.nodepool = Some(blocked.nodepool);
        entry.reason = Some(blocked.reason.to_string());
        entry.budget = Some(line);
        entry.until = blocked.explanation.until.map(|t| t.to_string());
        self.entries.push(entry);
    }

    /// A `kept` entry: why the pass left a node alone, as the controller's node Event says it (`Unconsolidatable`,
    /// `DisruptionBlocked`), unless the node was already told the same.
    pub(super) fn kept(&mut self, event: NodeEvent) {
        let said = (event.reason, event.message);
        if self.kept.get(&event.claim) == Some(&said) {
            return;
        }
        let nodepool = self
            .claims
            .iter()
            .find(|c| c.name() == event.claim)
            .map(|c| c.nodepool().to_owned());
        let mut entry = self.entry("kept", format!("{}: {}", event.claim, said.1));
        entry.node_claims = vec![event.claim.clone()];
        entry.nodepool = nodepool;
        entry.reason = Some(said.0.to_owned());
        self.entries.push(entry);
        self.kept.insert(event.claim, said);
    }

    pub(super) fn explain(
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

    pub(super) fn carry_out(&mut self, command: &Command, counts: &BTreeMap<String, PoolCounts>) {
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
                    marks::apply(Arc::make_mut(&mut c.claim), conditions);
                }
            }
        }
    }

    /// How the claim's EC2NodeClass changed since launch, if it did.
    pub(super) fn cloud_drift(&self, claim: &SimClaim) -> Option<CloudDrift> {
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
}
