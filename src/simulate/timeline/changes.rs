//! What a timeline's events and the run's own changes do to the simulated cluster: pools and classes applied,
//! workloads scaled, CapacityBuffers' virtual pods kept, NodeOverlays put into the catalog.

use super::*;

impl TimelineRun<'_> {
    /// Adds or replaces a pool, with the template hash its claims are stamped with (static drift).
    pub(super) fn set_pool(&mut self, mut pool: NodePool) {
        let hash = nodepool_hash(&pool);
        let annotations = pool.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(NODEPOOL_HASH.to_owned(), hash);
        annotations.insert(NODEPOOL_HASH_VERSION.to_owned(), HASH_VERSION.to_owned());
        self.pools.retain(|p| p.metadata.name != pool.metadata.name);
        self.pools.push(pool);
        self.pools
            .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }

    pub(super) fn set_nodeclass(&mut self, class: &Value) {
        let name = class
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let spec = class.get("spec").cloned().unwrap_or(Value::Null);
        self.nodeclasses.insert(name.to_owned(), spec);
    }

    pub(super) fn apply(&mut self, event: &Event) -> Result<(), ScenarioError> {
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

    pub(super) fn scale(
        &mut self,
        namespace: &str,
        name: &str,
        wanted: u64,
    ) -> Result<(), ScenarioError> {
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
                .extend(added.pods().map(|pod| sim_pod(Arc::new(pod), None)));
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
    pub(super) fn listed_going(
        &self,
        workload: &Value,
        namespace: &str,
        wanted: u64,
    ) -> (u64, Vec<String>) {
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

    /// Brings the CapacityBuffers' virtual pods to what the buffers keep now (a `percentage` follows its
    /// workload's scaling): new ones wait for room like pending pods, surplus ones leave their nodes.
    pub(super) fn sync_buffers(&mut self) {
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
                self.pods.push(sim_pod(Arc::new(pod), None));
            }
        }
    }

    /// Makes `overlaid_catalog` the scenario's catalog with its NodeOverlays, for the pools as they are now;
    /// whether it made it again.
    pub(super) fn overlay_pools(&mut self) -> bool {
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
}
