//! Interruptions and unhealthy nodes, and node repair (the `NodeRepair` gate) replacing them.

use super::*;

impl TimelineRun<'_> {
    /// The claims an event's selection names.
    pub(super) fn matching(&self, nodes: &Interruption) -> Vec<String> {
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

    pub(super) fn interrupt(&mut self, interruption: &Interruption) {
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
    pub(super) fn report_condition(&mut self, fault: &NodeFault) {
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
    pub(super) fn repair(&mut self) {
        let nodes: Vec<(&str, Option<&str>, Arc<Node>)> = self
            .claims
            .iter()
            .filter_map(|c| {
                let pool = pool_label(c.claim.metadata.labels.as_ref());
                Some((c.name(), pool, self.node(c)?))
            })
            .collect();
        let view: Vec<NodeHealth<'_>> = nodes
            .iter()
            .map(|(claim, pool, node)| (Some((*claim, *pool)), node.as_ref()))
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
        self.under_repair = !repairs.is_empty();
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
}
