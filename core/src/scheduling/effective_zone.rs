//! The zone a pending pod is held to by its constraints (Karpenter's `computeEffectiveZoneFromPod`, the `zone`
//! label of `karpenter_scheduler_pending_pods_by_effective_zone_count`): its required zone, its volumes' zones
//! and the zones its topology constraints on the zone key allow, intersected. One zone left names it; several are
//! [`FLEXIBLE`] (as is a pod nothing holds to a zone); none is [`NONE`].

use crate::api::labels;
use crate::api::operator::Operator;
use crate::api::requirements::{Requirement, Requirements};

/// More than one zone is possible.
pub const FLEXIBLE: &str = "flexible";
/// The constraints leave no zone.
pub const NONE: &str = "none";

/// The effective zone of a pod whose strict requirement on the zone label is `zone` (if it has one), whose volumes
/// may go to `volume_alternatives` (any one of them; empty when they constrain nothing), and whose topology
/// constraints on the zone key allow `topology` (`None` without such constraints; empty when they allow none).
pub fn effective_zone(
    zone: Option<&Requirement>,
    volume_alternatives: &[Requirements],
    topology: Option<&[&str]>,
) -> String {
    if topology.is_some_and(<[&str]>::is_empty) {
        return NONE.to_owned();
    }
    let volumes = volume_zones(volume_alternatives);
    // The zones to try come from the first that lists them: the pod's own `In`, its volumes, its topology.
    let listed: Vec<&str> = match zone
        .filter(|r| r.operator() == Operator::In)
        .and_then(Requirement::values)
    {
        Some(values) => values.iter().map(String::as_str).collect(),
        None => match (&volumes, topology) {
            (Some(v), _) => v.iter().map(String::as_str).collect(),
            (None, Some(t)) => t.to_vec(),
            (None, None) => return FLEXIBLE.to_owned(),
        },
    };
    let mut left = listed.into_iter().filter(|z| {
        zone.is_none_or(|r| r.has(z))
            && volumes.as_ref().is_none_or(|v| v.iter().any(|x| x == z))
            && topology.is_none_or(|t| t.contains(z))
    });
    match (left.next(), left.next()) {
        (Some(only), None) => only.to_owned(),
        (Some(_), Some(_)) => FLEXIBLE.to_owned(),
        (None, _) => NONE.to_owned(),
    }
}

/// The zones the volumes allow over all their alternatives; `None` when one of them leaves the zone open.
fn volume_zones(alternatives: &[Requirements]) -> Option<Vec<String>> {
    if alternatives.is_empty() {
        return None;
    }
    let mut zones: Vec<String> = Vec::new();
    for alternative in alternatives {
        let zone = alternative
            .get(labels::ZONE)
            .filter(|r| r.operator() == Operator::In)?;
        zones.extend(zone.values()?.iter().cloned());
    }
    zones.sort();
    zones.dedup();
    Some(zones)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone_in(zones: &[&str]) -> Requirement {
        Requirement::one_of(labels::ZONE, zones.iter().copied())
    }

    fn volume(zones: &[&str]) -> Requirements {
        [zone_in(zones)].into_iter().collect()
    }

    /// A case: its name, the pod's zone requirement, its volumes' alternatives, the zones its topology allows,
    /// and the effective zone.
    type Case = (
        &'static str,
        Option<Requirement>,
        Vec<Requirements>,
        Option<Vec<&'static str>>,
        &'static str,
    );

    /// Upstream scheduling suite, "Pending Pods by Effective Zone Metric" ("should report metric correctly for
    /// volume constraints" and the pod-level entries): the pod's zone, its volumes and its topology, intersected.
    #[test]
    fn the_zone_left_by_the_pods_own_its_volumes_and_its_topology() {
        let cases: [Case; 9] = [
            ("nothing holds it", None, vec![], None, FLEXIBLE),
            (
                "a node selector",
                Some(zone_in(&["z2"])),
                vec![],
                None,
                "z2",
            ),
            (
                "a PVC in two zones",
                None,
                vec![volume(&["z1", "z2"])],
                None,
                FLEXIBLE,
            ),
            ("a PVC in one zone", None, vec![volume(&["z1"])], None, "z1"),
            (
                "a selector and a PVC elsewhere",
                Some(zone_in(&["z1"])),
                vec![volume(&["z2"])],
                None,
                NONE,
            ),
            ("topology allows one", None, vec![], Some(vec!["z3"]), "z3"),
            ("topology allows none", None, vec![], Some(vec![]), NONE),
            (
                "a selector topology rules out",
                Some(zone_in(&["z1"])),
                vec![],
                Some(vec!["z2", "z3"]),
                NONE,
            ),
            (
                "two alternatives of volumes",
                None,
                vec![volume(&["z1"]), volume(&["z2"])],
                None,
                FLEXIBLE,
            ),
        ];
        for (case, zone, volumes, topology, expected) in cases {
            assert_eq!(
                effective_zone(zone.as_ref(), &volumes, topology.as_deref()),
                expected,
                "{case}"
            );
        }
    }

    /// A zone the pod rules out (`NotIn`) is not listed, yet it narrows what the volumes or topology list.
    #[test]
    fn an_excluded_zone_narrows_the_others() {
        let not_z1 =
            Requirement::new(labels::ZONE, Operator::NotIn, ["z1"], None).expect("requirement");
        assert_eq!(
            effective_zone(Some(&not_z1), &[volume(&["z1", "z2"])], None),
            "z2"
        );
        assert_eq!(effective_zone(Some(&not_z1), &[], None), FLEXIBLE);
    }
}
