//! Pending replicas of one workload that share their template. `kerf simulate` expands a Deployment of
//! thousands of replicas into pods that differ only in name and UID; held as Pod objects (about 5 KB each, most
//! of it the copied spec) they were most of a large simulation's memory. As [`Replicas`] the template is held
//! once, and the solve reads it once ([`plan::decide_for`](super::plan::decide_for)), each replica adding only
//! its name.

use k8s_openapi::api::core::v1::Pod;
use std::ops::Range;
use std::sync::Arc;

/// Replicas `indices` of a workload: the pods `<name>-<i>` in `namespace`, UID `<namespace>/<name>-<i>`,
/// each otherwise the template.
#[derive(Clone, Debug)]
pub struct Replicas {
    /// The pod every replica is: the workload's template with its namespace and controller set; its own name
    /// and UID are not read.
    pub template: Arc<Pod>,
    pub namespace: String,
    pub name: String,
    pub indices: Range<u64>,
}

impl Replicas {
    /// The replicas of `template` (its namespace set, its name the workload's).
    pub fn new(template: Pod, indices: Range<u64>) -> Self {
        let namespace = template
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = template.metadata.name.clone().unwrap_or_default();
        Replicas {
            template: Arc::new(template),
            namespace,
            name,
            indices,
        }
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.indices.end.saturating_sub(self.indices.start)).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Replica `i`'s `namespace/name`, which is also its UID.
    pub fn key(&self, i: u64) -> String {
        format!("{}/{}-{i}", self.namespace, self.name)
    }

    /// Replica `i` as a Pod object of its own.
    pub fn pod(&self, i: u64) -> Pod {
        let mut pod = Pod::clone(&self.template);
        pod.metadata.name = Some(format!("{}-{i}", self.name));
        pod.metadata.namespace = Some(self.namespace.clone());
        pod.metadata.uid = Some(self.key(i));
        pod
    }

    /// Every replica as a Pod object of its own.
    pub fn pods(&self) -> impl Iterator<Item = Pod> + '_ {
        self.indices.clone().map(|i| self.pod(i))
    }
}

/// What one decision solves for: a pod, or the replicas of a workload's template, in the order the driver
/// lists them.
#[derive(Clone, Copy, Debug)]
pub enum Solvable<'p> {
    Pod(&'p Pod),
    Replicas(&'p Replicas),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::provisioning::plan::{
        decide, decide_for, Decisions, Preparations, Snapshot,
    };
    use crate::engine::provisioning::tests::{amd64, default_catalogs, pending_pod, pool};
    use serde_json::json;

    /// A workload's template: `extra` merged into its spec, in namespace `team`.
    fn template(name: &str, extra: serde_json::Value) -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team", "labels": {"app": name}},
            "spec": spec
        }))
        .expect("a valid pod")
    }

    /// Decides for `replicas` shared, with a lone pod after the first of them, and checks that the same pods
    /// as Pod objects of their own get the same decisions, claim names and refusals included.
    fn both_ways(replicas: &[Replicas]) -> Decisions {
        let snapshot = Snapshot {
            node_pools: vec![pool(json!({}), amd64())],
            ..Snapshot::default()
        };
        let lone = pending_pod(0);
        let mut shared = vec![Solvable::Replicas(&replicas[0]), Solvable::Pod(&lone)];
        shared.extend(replicas[1..].iter().map(Solvable::Replicas));
        let each: Vec<Pod> = replicas.iter().flat_map(Replicas::pods).collect();
        let first = replicas[0].len();
        let mut objects: Vec<&Pod> = each[..first].iter().collect();
        objects.push(&lone);
        objects.extend(&each[first..]);
        let catalogs = default_catalogs();
        let one = decide_for(&snapshot, &shared, &catalogs, &mut Preparations::default())
            .expect("a decision");
        let other = decide(&snapshot, &objects, &catalogs, &mut Preparations::default())
            .expect("a decision");
        assert_eq!(format!("{one:?}"), format!("{other:?}"));
        one
    }

    fn placed(decisions: &Decisions) -> usize {
        decisions.claims.iter().map(|c| c.pods.len()).sum()
    }

    fn refused(decisions: &Decisions) -> Vec<&str> {
        decisions
            .unschedulable
            .iter()
            .map(|u| u.pod.as_str())
            .collect()
    }

    #[test]
    fn shared_replicas_are_decided_for_as_their_own_pods_would_be() {
        let plain = both_ways(&[Replicas::new(template("web", json!({})), 0..7)]);
        assert_eq!((placed(&plain), plain.ignored), (8, 0));

        let anti_affinity = json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "spread"}},
                "topologyKey": "kubernetes.io/hostname"
            }]
        }}});
        let spread = both_ways(&[
            Replicas::new(template("spread", anti_affinity), 3..8),
            Replicas::new(template("web", json!({})), 0..4),
        ]);
        assert_eq!(placed(&spread), 10);
        assert!(spread.claims.len() >= 5, "{:?}", spread.claims);

        // A refusal names the pod: each replica is refused under its own name.
        let bad_request = json!({"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "lots"}}}]});
        let bad = both_ways(&[Replicas::new(template("bad", bad_request), 0..3)]);
        assert_eq!(bad.ignored, 3);
        assert_eq!(refused(&bad), ["team/bad-0", "team/bad-1", "team/bad-2"]);
        assert!(
            bad.unschedulable[2].reason.contains("team/bad-2"),
            "{:?}",
            bad.unschedulable
        );

        // A generic ephemeral volume's claim is named after its pod (here a claim of a class that does not
        // exist: each replica is refused over its own claim).
        let ephemeral = json!({"volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
            "resources": {"requests": {"storage": "1Gi"}}}}}}]});
        let scratch = both_ways(&[Replicas::new(template("scratch", ephemeral), 0..2)]);
        let reasons: Vec<&str> = scratch
            .unschedulable
            .iter()
            .map(|u| u.reason.as_str())
            .collect();
        assert_eq!(refused(&scratch), ["team/scratch-0", "team/scratch-1"]);
        assert!(
            reasons[0].contains("scratch-0-v") && reasons[1].contains("scratch-1-v"),
            "{reasons:?}"
        );

        // A template bound to a node: each replica is solved for as a pod of that node.
        let pinned = both_ways(&[Replicas::new(
            template("pinned", json!({"nodeName": "n-1"})),
            0..2,
        )]);
        assert_eq!(placed(&pinned), 3);
    }

    #[test]
    fn a_replica_is_its_template_under_its_own_name() {
        let replicas = Replicas::new(template("web", json!({})), 2..4);
        assert_eq!(replicas.len(), 2);
        let names: Vec<(Option<String>, Option<String>)> = replicas
            .pods()
            .map(|p| (p.metadata.name, p.metadata.uid))
            .collect();
        assert_eq!(
            names,
            [
                (Some("web-2".to_owned()), Some("team/web-2".to_owned())),
                (Some("web-3".to_owned()), Some("team/web-3".to_owned()))
            ]
        );
        assert!(Replicas::new(template("none", json!({})), 5..5).is_empty());
    }
}
