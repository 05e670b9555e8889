//! Provisioning: pending pods through the controller's decision, and the claims it launches.

use super::*;

impl TimelineRun<'_> {
    /// The controller's provisioning decision ([`plan::decide`]) for the pods that wait, onto the nodes there
    /// are and new claims, NodePool limits included.
    pub(super) fn provision(&mut self) -> Result<(), ScenarioError> {
        if self.pods.iter().all(|p| p.on.is_some()) {
            return Ok(());
        }
        let snapshot = Snapshot {
            nodes: self
                .claims
                .iter()
                .filter_map(|c| self.node(c))
                .chain(self.fixed_nodes.iter().cloned().map(Arc::new))
                .collect(),
            node_claims: self.claims.iter().map(|c| c.claim.clone()).collect(),
            daemon_sets: self.scenario.daemonsets.clone(),
            pods: self.pods.iter().map(|p| p.pod.clone()).collect(),
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
            .map(|p| p.pod.as_ref())
            .collect();
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
        let step = step::step(&snapshot, &pending, &catalogs, &mut self.preparations)?;
        let window = nominations::window(nominations::DEFAULT_BATCH_MAX);
        for (node, pods) in &step.nominated {
            self.nominations.nominate(node, self.now, window);
            self.bind(pods, node);
        }
        for new in &step.decisions.claims {
            let Some(choice) = new.choice.clone() else {
                continue;
            };
            if let Some(name) = self.launch(new.node_claim(), choice, new.pods.len(), None) {
                self.bind(&new.pods, &name);
            }
        }
        self.buffers = step.buffers;
        Ok(())
    }

    /// Binds the real pods among `pods` to the claim's node (virtual pods are never bound), a pod event there.
    pub(super) fn bind(&mut self, pods: &[String], claim: &str) {
        let mut bound = false;
        for pod in self.pods.iter_mut().filter(|p| pods.contains(&p.key)) {
            if buffers::is_virtual(&pod.pod) {
                continue;
            }
            bound = true;
            pod.on = Some(claim.to_owned());
            Arc::make_mut(&mut pod.pod)
                .spec
                .get_or_insert_with(Default::default)
                .node_name = Some(claim.to_owned());
        }
        if bound {
            self.pod_event(claim);
        }
    }

    /// Launches the replacement `planned` on its cheapest offering; `None` when it has none or its pool is gone.
    pub(super) fn launch_planned(
        &mut self,
        planned: &PlannedClaim,
        replacing: &str,
    ) -> Option<String> {
        let pool = self
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(planned.nodepool.as_str()))?;
        let claim = node_claim(pool, planned, &[]);
        let choice = planned.cheapest.clone()?;
        self.launch(claim, choice, planned.pods.len(), Some(replacing))
    }

    /// Creates `claim` (named `<pool>-<n>` in launch order) on `choice`, as the controller's launch labels it.
    pub(super) fn launch(
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
            claim: Arc::new(claim),
            choice,
            launched: self.now,
            ready: false,
            nodeclass,
            replacement: replacing.map(|_| self.now),
            awaiting: None,
            conditions: Vec::new(),
            built: RefCell::default(),
        });
        Some(name)
    }
}
