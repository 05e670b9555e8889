//! Consolidation with volume topology: a pod whose claim is bound to a zonal volume only moves within the
//! volume's zone (docs/disruption.md, Consolidating a set of nodes; docs/controller.md, Volumes).

mod disruption_support;

use disruption_support::{disrupted, pod, pool, World, NOW};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kerf::disruption::Decision;
use kerf::scheduling::volumes::VolumeIndex;
use serde_json::json;
use std::sync::Arc;

const ZONE: &str = "topology.kubernetes.io/zone";

/// Two underutilized 8-CPU nodes, `a` in zone-a and `b` in zone-b, one 1-CPU pod each; `a`'s pod mounts claim
/// `data`, bound to a volume in zone-a when `zonal`.
fn two_zones(zonal: bool) -> World {
    let mut w = World::new(vec![pool("p", json!({"consolidateAfter": "0s"}))], 1);
    w.node("a", "p", "f0-8", "on-demand");
    let b = w.node("b", "p", "f0-8", "on-demand");
    for labels in [
        b.node
            .as_mut()
            .map(std::sync::Arc::make_mut)
            .and_then(|n| n.metadata.labels.as_mut()),
        std::sync::Arc::make_mut(&mut b.claim)
            .metadata
            .labels
            .as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        labels.insert(ZONE.to_owned(), "zone-b".to_owned());
    }
    w.pods("b", 1, "1", json!({}));
    let mut with_volume = pod("a-p0", Some("a"), "1", json!({}));
    with_volume.spec.as_mut().expect("spec").volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
    )
    .expect("volume")]);
    w.find("a").pods.push(with_volume);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "shop",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "vol-a", "storageClassName": ""}
    }))
    .expect("claim");
    let affinity = if zonal {
        json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}]}})
    } else {
        json!(null)
    };
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "vol-a"},
        "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}, "nodeAffinity": affinity}
    }))
    .expect("volume");
    w.volumes = VolumeIndex::from_objects([Arc::new(claim)], [Arc::new(volume)], []);
    w
}

/// The zone requirement of each command's replacements.
fn replacement_zones(decision: &Decision) -> Vec<String> {
    decision
        .commands
        .iter()
        .flat_map(|c| &c.replacements)
        .map(|r| {
            r.requirements
                .get(ZONE)
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_pod_on_a_zonal_volume_only_moves_within_its_zone() {
    // Without a zone on the volume, `a` goes and its pod moves to `b` in zone-b.
    let free = two_zones(false).decide(NOW);
    assert_eq!(disrupted(&free), [["a-claim"]], "{free:?}");
    assert_eq!(free.commands[0].destinations, ["b"]);
    assert!(free.commands[0].is_delete());

    // With it, the pod cannot go to zone-b: `a` is replaced by a cheaper node in zone-a instead.
    let zonal = two_zones(true).decide(NOW);
    assert_eq!(disrupted(&zonal), [["a-claim"]], "{zonal:?}");
    assert!(zonal.commands[0].destinations.is_empty(), "{zonal:?}");
    assert_eq!(
        replacement_zones(&zonal),
        ["topology.kubernetes.io/zone In [zone-a]"]
    );
}

#[test]
fn when_no_replacement_pays_the_node_without_the_zonal_pod_goes() {
    // No replacement is ever cheap enough: only deletes remain. `a`'s pod cannot leave zone-a, so it is `b` that
    // goes, its pod moving to `a`.
    let mut world = two_zones(true);
    world.settings.replace_margin = 1.0;
    let zonal = world.decide(NOW);
    assert_eq!(disrupted(&zonal), [["b-claim"]], "{zonal:?}");
    assert_eq!(zonal.commands[0].destinations, ["a"]);
}

#[test]
fn a_pod_whose_claim_is_gone_does_not_hold_its_node() {
    // Karpenter leaves a moving pod whose claim cannot be found out of the solve; so does kerf.
    let mut world = two_zones(true);
    world.volumes = VolumeIndex::default();
    world.settings.replace_margin = 1.0;
    let d = world.decide(NOW);
    assert_eq!(disrupted(&d), [["a-claim"]], "{d:?}");
    assert!(d.commands[0].destinations.is_empty(), "{d:?}");
}
