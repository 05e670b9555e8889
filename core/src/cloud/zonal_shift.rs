//! ARC zonal shifts: the zones (by zone ID) the cluster's traffic is shifted away from, as Application Recovery
//! Controller lists them for the EKS cluster (`GetManagedResource`), and their effect on offerings: while a shift
//! is applied and unexpired, no offering in its zone is available (Karpenter's AWS provider with
//! `--enable-zonal-shift`). Pure: the time of every question comes in as an argument.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use super::{instance_id, zone_of, CloudError};
use crate::catalog::{InstanceType, Offering};

/// One zonal shift on the cluster, as ARC reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZonalShift {
    /// The zone ID traffic is shifted away from (`usw2-az1`).
    pub away_from: String,
    /// When the shift ends unless it is extended.
    pub expiry: SystemTime,
    /// Whether ARC applies it (`APPLIED`); a shift that is not (a practice run's outcome pending, or a shift
    /// another one overrides) leaves the zone's offerings alone.
    pub applied: bool,
}

/// The shifts last reported, by zone ID, and the zone IDs of the zones seen in subnets (a provider ID names its
/// instance's zone by name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZonalShifts {
    by_zone: BTreeMap<String, ZonalShift>,
    zone_ids: BTreeMap<String, String>,
}

impl ZonalShifts {
    /// The shifts of one report, which replaces the last: a shift no longer listed (cancelled) no longer counts.
    /// Karpenter keeps a zone it stops hearing about while any other shift is listed, until that zone's old
    /// expiry; kerf trusts the newest report (docs/cloud.md lists the difference).
    pub fn replace(&mut self, shifts: impl IntoIterator<Item = ZonalShift>) {
        self.by_zone = shifts
            .into_iter()
            .map(|s| (s.away_from.clone(), s))
            .collect();
    }

    /// The zone IDs shifted away from at `now`: applied shifts that have not expired.
    pub fn shifted(&self, now: SystemTime) -> BTreeSet<String> {
        self.by_zone
            .values()
            .filter(|s| s.applied && s.expiry > now)
            .map(|s| s.away_from.clone())
            .collect()
    }

    /// Remembers the zone ID of the zone `zone` (from a resolved subnet).
    pub fn learn_zone(&mut self, zone: &str, zone_id: &str) {
        if self.zone_ids.get(zone).map(String::as_str) != Some(zone_id) {
            self.zone_ids.insert(zone.to_owned(), zone_id.to_owned());
        }
    }

    /// Why the instance `provider_id` names must not be terminated while `shifted` (zone IDs) are shifted away
    /// from: its zone is one (Karpenter's provider skips TerminateInstances there so that retries do not pile
    /// onto the impaired zone).
    pub fn refuse_termination(
        &self,
        provider_id: &str,
        shifted: &BTreeSet<String>,
    ) -> Option<CloudError> {
        let zone = zone_of(provider_id)?;
        let zone_id = self.zone_ids.get(zone)?;
        shifted
            .contains(zone_id)
            .then(|| CloudError::ZonallyShifted {
                instance_id: instance_id(provider_id).unwrap_or(provider_id).to_owned(),
                zone: zone.to_owned(),
                zone_id: zone_id.clone(),
            })
    }
}

/// The key a shift names an offering's zone by: its zone ID, or its name where the catalog has no IDs (the
/// embedded catalog `kerf simulate` plans with).
pub fn zone_key(offering: &Offering) -> &str {
    offering.zone_id.as_deref().unwrap_or(&offering.zone)
}

/// Sets `available = false` on every offering of `instance_types` in a zone of `shifted` (zone keys), reserved
/// offerings included: a launch there would go into the impaired zone.
pub fn apply(shifted: &BTreeSet<String>, instance_types: &mut [InstanceType]) {
    if shifted.is_empty() {
        return;
    }
    for instance_type in instance_types {
        for offering in &mut instance_type.offerings {
            if shifted.contains(zone_key(offering)) {
                offering.available = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CapacityType, Catalog, CatalogSettings, Pricing};
    use std::time::Duration;

    /// m5.large of the embedded catalog, with `offerings`.
    fn m5_large(offerings: Vec<Offering>) -> InstanceType {
        let catalog = Catalog::embedded("us-west-2", &CatalogSettings::default(), &Pricing::none())
            .expect("embedded catalog");
        let mut it = catalog
            .instance_types
            .into_iter()
            .find(|it| it.name == "m5.large")
            .expect("m5.large");
        it.offerings = offerings;
        it
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn shift(zone: &str, expiry: u64, applied: bool) -> ZonalShift {
        ZonalShift {
            away_from: zone.into(),
            expiry: at(expiry),
            applied,
        }
    }

    fn offering(zone: &str, zone_id: Option<&str>, capacity_type: CapacityType) -> Offering {
        Offering {
            zone: zone.into(),
            zone_id: zone_id.map(Into::into),
            capacity_type,
            price: Some(0.1),
            available: true,
            reservation: None,
        }
    }

    #[test]
    fn only_applied_unexpired_shifts_count() {
        let mut shifts = ZonalShifts::default();
        shifts.replace([
            shift("usw2-az1", 100, true),
            shift("usw2-az2", 100, false),
            shift("usw2-az3", 50, true),
        ]);
        assert_eq!(
            shifts.shifted(at(60)),
            BTreeSet::from(["usw2-az1".to_owned()])
        );
        assert!(shifts.shifted(at(99)).contains("usw2-az1"));
        assert!(shifts.shifted(at(100)).is_empty());
        assert!(shifts.shifted(at(49)).contains("usw2-az3"));
    }

    #[test]
    fn a_report_replaces_the_last_and_an_empty_one_clears_every_shift() {
        let mut shifts = ZonalShifts::default();
        shifts.replace([shift("usw2-az1", 100, true), shift("usw2-az2", 100, true)]);
        shifts.replace([shift("usw2-az2", 100, true)]);
        assert_eq!(
            shifts.shifted(at(0)),
            BTreeSet::from(["usw2-az2".to_owned()])
        );
        shifts.replace([]);
        assert!(shifts.shifted(at(0)).is_empty());
    }

    /// Karpenter's `should mark offerings as unavailable for zones shifted away from` (instancetype suite): the
    /// shifted zone's offerings of every capacity type go, the other zones' stay, and all return when it clears.
    #[test]
    fn offerings_in_a_shifted_zone_are_unavailable_until_it_clears() {
        let zones = [
            ("us-west-2a", "usw2-az1"),
            ("us-west-2b", "usw2-az2"),
            ("us-west-2c", "usw2-az3"),
        ];
        let base = m5_large(
            zones
                .iter()
                .flat_map(|(zone, id)| {
                    [CapacityType::OnDemand, CapacityType::Spot]
                        .map(|ct| offering(zone, Some(id), ct))
                })
                .collect(),
        );
        let available = |types: &[InstanceType]| {
            types[0]
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.zone.clone())
                .collect::<Vec<_>>()
        };
        let mut shifts = ZonalShifts::default();
        shifts.replace([shift("usw2-az1", 3600, true)]);
        let mut types = vec![base.clone()];
        apply(&shifts.shifted(at(0)), &mut types);
        assert_eq!(available(&types).len(), 4);
        assert!(!available(&types).contains(&"us-west-2a".to_owned()));

        shifts.replace([]);
        let mut types = vec![base];
        apply(&shifts.shifted(at(0)), &mut types);
        assert_eq!(available(&types).len(), 6);
    }

    /// Karpenter's `should not call TerminateInstances for instances in a zonally shifted AZ` (instance suite):
    /// the refusal names the instance and says "zonally shifted"; other zones and unknown zones terminate.
    #[test]
    fn instances_in_a_shifted_zone_are_not_terminated() {
        let mut shifts = ZonalShifts::default();
        shifts.learn_zone("us-west-2a", "usw2-az1");
        shifts.learn_zone("us-west-2b", "usw2-az2");
        shifts.replace([shift("usw2-az1", 100, true)]);
        let shifted = shifts.shifted(at(10));
        let refused = shifts
            .refuse_termination("aws:///us-west-2a/i-0abc", &shifted)
            .expect("refused");
        assert_eq!(
            refused.to_string(),
            "instance i-0abc is in zonally shifted availability zone us-west-2a (usw2-az1), skipping termination"
        );
        for other in [
            "aws:///us-west-2b/i-0abc",
            "aws:///us-west-2z/i-0abc",
            "garbage",
        ] {
            assert_eq!(shifts.refuse_termination(other, &shifted), None, "{other}");
        }
        let expired = shifts.shifted(at(100));
        assert_eq!(
            shifts.refuse_termination("aws:///us-west-2a/i-0abc", &expired),
            None
        );
    }

    #[test]
    fn offerings_without_a_zone_id_are_keyed_by_zone_name() {
        let mut types = vec![m5_large(vec![
            offering("us-west-2a", None, CapacityType::OnDemand),
            offering("us-west-2b", None, CapacityType::OnDemand),
        ])];
        apply(&BTreeSet::from(["us-west-2a".to_owned()]), &mut types);
        let available: Vec<bool> = types[0].offerings.iter().map(|o| o.available).collect();
        assert_eq!(available, [false, true]);
    }
}
