//! The insufficient-capacity (ICE) cache: offerings EC2 recently could not fill, kept out of launches for a
//! while. Pure: the time of every question comes in as an argument.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use crate::catalog::{CapacityType, InstanceType};

/// How long an offering stays unavailable after EC2 reported no capacity for it (Karpenter: 3 minutes;
/// marking it again extends it).
pub const ICE_TTL: Duration = Duration::from_secs(180);

/// One offering as the cache keys it: `capacityType:instanceType:zone`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    pub capacity_type: CapacityType,
    pub instance_type: String,
    pub zone: String,
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// Offerings out of capacity, each until its expiry.
#[derive(Clone, Debug, Default)]
pub struct IceCache {
    until: HashMap<OfferingKey, SystemTime>,
}

impl IceCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `key` unavailable for [`ICE_TTL`] from `now`, and forgets entries that have expired.
    pub fn mark(&mut self, key: OfferingKey, now: SystemTime) {
        self.until.retain(|_, until| *until > now);
        self.until.insert(key, now + ICE_TTL);
    }

    /// Whether `key` is unavailable at `now`.
    pub fn is_unavailable(&self, key: &OfferingKey, now: SystemTime) -> bool {
        self.until.get(key).is_some_and(|until| *until > now)
    }

    /// Sets `available = false` on every offering of `instance_types` that is unavailable at `now`.
    pub fn apply(&self, instance_types: &mut [InstanceType], now: SystemTime) {
        if self.until.is_empty() {
            return;
        }
        for instance_type in instance_types {
            for offering in &mut instance_type.offerings {
                let key = OfferingKey {
                    capacity_type: offering.capacity_type,
                    instance_type: instance_type.name.clone(),
                    zone: offering.zone.clone(),
                };
                if self.is_unavailable(&key, now) {
                    offering.available = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(instance_type: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            capacity_type: CapacityType::Spot,
            instance_type: instance_type.into(),
            zone: zone.into(),
        }
    }

    #[test]
    fn the_key_reads_capacity_type_instance_type_zone() {
        assert_eq!(
            key("m5.large", "us-west-2a").to_string(),
            "spot:m5.large:us-west-2a"
        );
    }

    #[test]
    fn an_offering_is_unavailable_for_three_minutes_and_marking_again_extends_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut cache = IceCache::new();
        cache.mark(key("m5.large", "us-west-2a"), t0);
        assert!(cache.is_unavailable(&key("m5.large", "us-west-2a"), t0));
        assert!(cache.is_unavailable(
            &key("m5.large", "us-west-2a"),
            t0 + Duration::from_secs(179)
        ));
        assert!(!cache.is_unavailable(&key("m5.large", "us-west-2a"), t0 + ICE_TTL));
        assert!(!cache.is_unavailable(&key("m5.large", "us-west-2b"), t0));
        let on_demand = OfferingKey {
            capacity_type: CapacityType::OnDemand,
            ..key("m5.large", "us-west-2a")
        };
        assert!(!cache.is_unavailable(&on_demand, t0));

        cache.mark(key("m5.large", "us-west-2a"), t0 + Duration::from_secs(120));
        assert!(cache.is_unavailable(
            &key("m5.large", "us-west-2a"),
            t0 + Duration::from_secs(299)
        ));
        assert!(!cache.is_unavailable(
            &key("m5.large", "us-west-2a"),
            t0 + Duration::from_secs(300)
        ));
    }

    #[test]
    fn expired_entries_are_forgotten_on_the_next_mark() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut cache = IceCache::new();
        cache.mark(key("a", "z"), t0);
        cache.mark(key("b", "z"), t0 + ICE_TTL);
        assert_eq!(cache.until.len(), 1);
    }
}
