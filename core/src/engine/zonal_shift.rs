//! Which NodePools hear of a zonal shift: when the set of zones shifted away from changes, each NodePool that
//! can launch into a zone that became shifted gets a `ZonalShiftActive` Warning, and one that can launch into a
//! zone that is no longer shifted a `ZonalShiftCleared` Event (Karpenter's AWS `arczonalshift` controller). A pool
//! can launch into a zone when its class has a subnet there and its requirements admit the zone's name and ID.
//! The controller publishes them; `kerf simulate` records them.

use std::collections::BTreeSet;

use crate::api::labels;
use crate::api::nodepool::NodePool;
use crate::scheduling::pool_requirements;

/// A zone a class can launch into: its name and its zone ID (the key shifts are listed by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneInfo {
    pub zone: String,
    pub zone_id: String,
}

/// One NodePool told of a shift that began or ended in one of its zones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShiftNotice {
    pub nodepool: String,
    pub zone: String,
    pub zone_id: String,
    /// Began (true) or ended.
    pub active: bool,
}

impl ShiftNotice {
    pub fn reason(&self) -> &'static str {
        if self.active {
            "ZonalShiftActive"
        } else {
            "ZonalShiftCleared"
        }
    }

    /// Warning while the zone is shifted, Normal once it is back.
    pub fn is_warning(&self) -> bool {
        self.active
    }

    pub fn message(&self) -> String {
        let (zone, id) = (&self.zone, &self.zone_id);
        if self.active {
            format!("Zonal shift detected: offerings in zone {zone} ({id}) are unavailable for this NodePool")
        } else {
            format!("Zonal shift cleared: offerings in zone {zone} ({id}) are restored for this NodePool")
        }
    }
}

/// The notices for a change from `previous` to `current` shifted zone IDs, for `pools`, each with the zones of its
/// class. No change, no notice. A pool whose requirements do not parse (refused at admission) hears nothing.
pub fn notices(
    previous: &BTreeSet<String>,
    current: &BTreeSet<String>,
    pools: &[(&NodePool, Vec<ZoneInfo>)],
) -> Vec<ShiftNotice> {
    let changes = current
        .difference(previous)
        .map(|id| (id, true))
        .chain(previous.difference(current).map(|id| (id, false)));
    let changes: Vec<(&String, bool)> = changes.collect();
    if changes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (pool, zones) in pools {
        let Ok(requirements) = pool_requirements(pool) else {
            continue;
        };
        let admits = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));
        for (zone_id, active) in &changes {
            let Some(info) = zones.iter().find(|z| z.zone_id == **zone_id) else {
                continue;
            };
            if admits(labels::ZONE, &info.zone) && admits(labels::ZONE_ID, zone_id) {
                out.push(ShiftNotice {
                    nodepool: pool.metadata.name.clone().unwrap_or_default(),
                    zone: info.zone.clone(),
                    zone_id: (*zone_id).clone(),
                    active: *active,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(name: &str, zones: Option<&[&str]>) -> NodePool {
        let requirements = zones.map_or_else(Vec::new, |zones| {
            vec![json!({"key": labels::ZONE, "operator": "In", "values": zones})]
        });
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": requirements,
            }}},
        }))
        .expect("a NodePool")
    }

    fn zones() -> Vec<ZoneInfo> {
        [
            ("test-zone-1a", "tstz1-1a"),
            ("test-zone-1b", "tstz1-1b"),
            ("test-zone-1c", "tstz1-1c"),
        ]
        .map(|(zone, zone_id)| ZoneInfo {
            zone: zone.into(),
            zone_id: zone_id.into(),
        })
        .to_vec()
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    // Karpenter's ARCZonalShiftController suite, case by case.
    #[test]
    fn a_warning_when_a_zone_shifts_and_a_normal_event_when_it_clears() {
        let default = pool("default", None);
        let pools = [(&default, zones())];
        let detected = notices(&set(&[]), &set(&["tstz1-1a"]), &pools);
        assert_eq!(detected.len(), 1);
        assert_eq!(detected[0].reason(), "ZonalShiftActive");
        assert!(detected[0].is_warning());
        assert_eq!(
            detected[0].message(),
            "Zonal shift detected: offerings in zone test-zone-1a (tstz1-1a) are unavailable for this NodePool"
        );
        let cleared = notices(&set(&["tstz1-1a"]), &set(&[]), &pools);
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].reason(), "ZonalShiftCleared");
        assert!(!cleared[0].is_warning());
        assert_eq!(
            cleared[0].message(),
            "Zonal shift cleared: offerings in zone test-zone-1a (tstz1-1a) are restored for this NodePool"
        );
    }

    #[test]
    fn no_event_for_a_pool_restricted_to_other_zones() {
        let restricted = pool("restricted", Some(&["test-zone-1b", "test-zone-1c"]));
        assert!(notices(&set(&[]), &set(&["tstz1-1a"]), &[(&restricted, zones())]).is_empty());
    }

    #[test]
    fn no_event_for_a_zone_the_class_has_no_subnet_in() {
        let default = pool("default", None);
        assert!(notices(&set(&[]), &set(&["tstz1-1z"]), &[(&default, zones())]).is_empty());
    }

    #[test]
    fn no_event_without_a_change() {
        let default = pool("default", None);
        let same = set(&["tstz1-1a"]);
        assert!(notices(&same, &same, &[(&default, zones())]).is_empty());
    }

    #[test]
    fn only_the_pools_that_reach_the_zone_hear_of_it() {
        let default = pool("default", None);
        let restricted = pool("restricted", Some(&["test-zone-1b"]));
        let got = notices(
            &set(&[]),
            &set(&["tstz1-1a"]),
            &[(&default, zones()), (&restricted, zones())],
        );
        let pools: Vec<&str> = got.iter().map(|n| n.nodepool.as_str()).collect();
        assert_eq!(pools, ["default"]);
    }
}
