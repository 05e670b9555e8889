//! Capacity reservations (on-demand capacity reservations and capacity blocks) an EC2NodeClass selects, on EC2's
//! terms: the DescribeCapacityReservations queries its `capacityReservationSelectorTerms` make, EC2's answer as
//! the class status lists it, how many more instances each reservation takes between two answers, and which kind
//! of reserved launch a plan makes. Pure: every time comes in as an argument.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::primitives::{DateTime, DateTimeFormat};
use aws_sdk_ec2::types as ec2;
use kerf_core::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationSelectorTerm, CapacityReservationState,
    CapacityReservationType, InstanceMatchCriteria,
};
use kerf_core::catalog::CapacityType;
use kerf_core::cloud::{LaunchPlan, ResolvedNodeClass};

use crate::resolve::tag_filters;

/// How long the answer to one query is reused (Karpenter's default cache time): the catalog is refreshed every
/// 30 s and the class status every minute, while reservations change on EC2's side only now and then.
pub const QUERY_TTL: Duration = Duration::from_secs(60);
/// How long an instance count from EC2 is trusted without a newer answer. A new one comes every minute; this only
/// bounds an EC2 outage (Karpenter keeps it a day).
pub const AVAILABILITY_TTL: Duration = Duration::from_secs(24 * 3600);
/// A capacity block is `expiring` from this long before its end: EC2 reclaims its instances 30 minutes before the
/// end, and Karpenter stops launching into it 10 minutes before that.
pub const CAPACITY_BLOCK_EXPIRY: Duration = Duration::from_secs(40 * 60);

/// One DescribeCapacityReservations listing a selector term asks for. Every query asks for `active` reservations
/// only: a pending, expired or cancelled one cannot be launched into.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Query {
    /// A term naming a reservation asks for it alone (EC2 refuses paging then).
    pub id: Option<String>,
    pub owner_id: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// `open` or `targeted`.
    pub instance_match_criteria: Option<&'static str>,
}

/// The queries of `terms`, each once: a term's `id` is a query of its own, and its tags and instance match
/// criteria (with its owner) another, as Karpenter splits them. A term with only an owner selects nothing
/// (validation refuses it).
pub fn queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<Query> {
    let mut queries = BTreeSet::new();
    for term in terms {
        if let Some(id) = &term.id {
            queries.insert(Query {
                id: Some(id.clone()),
                owner_id: None,
                tags: BTreeMap::new(),
                instance_match_criteria: None,
            });
        }
        let tags = term.tags.clone().unwrap_or_default();
        if !tags.is_empty() || term.instance_match_criteria.is_some() {
            queries.insert(Query {
                id: None,
                owner_id: term.owner_id.clone(),
                tags,
                instance_match_criteria: term.instance_match_criteria.map(|c| c.as_str()),
            });
        }
    }
    queries.into_iter().collect()
}

impl Query {
    /// The EC2 filters of the query: `state=active`, and for a query without an ID the owner, the tags (a value
    /// of `*` as `tag-key`) and the instance match criteria.
    pub fn filters(&self) -> Vec<ec2::Filter> {
        let mut filters = vec![ec2::Filter::builder()
            .name("state")
            .values(ec2::CapacityReservationState::Active.as_str())
            .build()];
        if self.id.is_some() {
            return filters;
        }
        if let Some(owner) = &self.owner_id {
            filters.push(
                ec2::Filter::builder()
                    .name("owner-id")
                    .values(owner)
                    .build(),
            );
        }
        filters.extend(tag_filters(Some(&self.tags)));
        if let Some(criteria) = self.instance_match_criteria {
            filters.push(
                ec2::Filter::builder()
                    .name("instance-match-criteria")
                    .values(criteria)
                    .build(),
            );
        }
        filters
    }
}

/// Why a reservation EC2 listed is left out of the class.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// Its end has passed (EC2 may still call it active for a moment): nothing can launch into it.
    #[error("capacity reservation {0} has ended")]
    Ended(String),
    /// A field kerf needs is missing, or has a value it does not know (a new match criteria or reservation type
    /// would change what a launch must say).
    #[error("capacity reservation {id}: {why}")]
    Unsupported { id: String, why: String },
}

/// EC2's `reservation` as the class status lists it at `now`: a capacity block is `expiring` from
/// [`CAPACITY_BLOCK_EXPIRY`] before its end, everything else `active`.
pub fn from_ec2(
    reservation: &ec2::CapacityReservation,
    now: SystemTime,
) -> Result<CapacityReservation, Unusable> {
    let id = reservation
        .capacity_reservation_id()
        .unwrap_or_default()
        .to_owned();
    let unsupported = |why: String| Unusable::Unsupported {
        id: id.clone(),
        why,
    };
    let required = |value: Option<&str>, field: &str| {
        value
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| unsupported(format!("no {field}")))
    };
    if id.is_empty() {
        return Err(unsupported("no capacity reservation ID".into()));
    }
    let end = reservation
        .end_date()
        .and_then(|d| SystemTime::try_from(*d).ok());
    if end.is_some_and(|end| end <= now) {
        return Err(Unusable::Ended(id));
    }
    let instance_match_criteria = match reservation.instance_match_criteria() {
        Some(ec2::InstanceMatchCriteria::Open) => InstanceMatchCriteria::Open,
        Some(ec2::InstanceMatchCriteria::Targeted) => InstanceMatchCriteria::Targeted,
        other => {
            return Err(unsupported(format!(
                "unsupported instance match criteria {:?}",
                other.map(|c| c.as_str())
            )))
        }
    };
    let reservation_type = match reservation.reservation_type() {
        None | Some(ec2::CapacityReservationType::Default) => CapacityReservationType::Default,
        Some(ec2::CapacityReservationType::CapacityBlock) => CapacityReservationType::CapacityBlock,
        Some(other) => {
            return Err(unsupported(format!(
                "unsupported reservation type {:?}",
                other.as_str()
            )))
        }
    };
    let expiring = reservation_type == CapacityReservationType::CapacityBlock
        && end.is_some_and(|end| end <= now + CAPACITY_BLOCK_EXPIRY);
    Ok(CapacityReservation {
        availability_zone: required(reservation.availability_zone(), "availability zone")?,
        end_time: reservation.end_date().map(whole_seconds),
        id: id.clone(),
        instance_match_criteria,
        instance_type: required(reservation.instance_type(), "instance type")?,
        owner_id: required(reservation.owner_id(), "owner")?,
        reservation_type: Some(reservation_type),
        state: Some(if expiring {
            CapacityReservationState::Expiring
        } else {
            CapacityReservationState::Active
        }),
        interruptible: Some(reservation.interruptible().unwrap_or(false)),
    })
}

/// An EC2 time as RFC 3339 in whole seconds, as Kubernetes writes times.
fn whole_seconds(time: &DateTime) -> String {
    DateTime::from_secs(time.secs())
        .fmt(DateTimeFormat::DateTime)
        .unwrap_or_default()
}

/// Whether a reservation can be launched into now: not a capacity block about to be reclaimed.
pub fn launchable(reservation: &CapacityReservation) -> bool {
    reservation.state != Some(CapacityReservationState::Expiring)
}

/// How many more instances each reservation takes: EC2's count at the last answer, less the launches and plus
/// the terminations kerf made since. The next answer replaces the count, so a mistake lasts a minute at most.
#[derive(Clone, Debug, Default)]
pub struct Availability {
    counts: HashMap<String, (u32, SystemTime)>,
}

impl Availability {
    /// EC2's count for reservation `id`, as of `now`.
    pub fn sync(&mut self, id: &str, count: u32, now: SystemTime) {
        self.counts.insert(id.to_owned(), (count, now));
    }

    /// The instances reservation `id` still takes at `now`; 0 when EC2 has not said (or not for a day).
    pub fn get(&self, id: &str, now: SystemTime) -> u32 {
        match self.counts.get(id) {
            Some((count, synced))
                if now
                    .duration_since(*synced)
                    .is_ok_and(|age| age < AVAILABILITY_TTL) =>
            {
                *count
            }
            // A sync "in the future" (the clock stepped back) is still the latest word.
            Some((count, synced)) if *synced > now => *count,
            _ => 0,
        }
    }

    /// An instance was launched into `id`.
    pub fn launched(&mut self, id: &str) {
        if let Some((count, _)) = self.counts.get_mut(id) {
            *count = count.saturating_sub(1);
        }
    }

    /// An instance of `id` was terminated: its slot is free again (EC2 frees it once the instance is gone;
    /// counting it at once may overestimate for a moment, which a failed launch corrects).
    pub fn terminated(&mut self, id: &str) {
        if let Some((count, _)) = self.counts.get_mut(id) {
            *count = count.saturating_add(1);
        }
    }

    /// EC2 said `id` is full (a launch into it found no capacity): nothing more until the next answer.
    pub fn exhausted(&mut self, id: &str) {
        if let Some((count, _)) = self.counts.get_mut(id) {
            *count = 0;
        }
    }
}

/// The kinds of reserved launch. One CreateFleet call launches into one kind only (its target capacity type and
/// market differ); on a price tie the first in this order wins, as in Karpenter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReservedMarket {
    /// An on-demand capacity reservation: launched as on-demand capacity, targeted.
    Default,
    /// A capacity block: the `capacity-block` market, one instance type per call.
    CapacityBlock,
    /// An interruptible on-demand capacity reservation: the `interruptible-capacity-reservation` market.
    Interruptible,
}

impl ReservedMarket {
    /// The market of `reservation`; an unknown one (not in the class's status any more) as an ODCR.
    pub fn of(reservation: Option<&CapacityReservation>) -> Self {
        match reservation {
            Some(r) if r.reservation_type == Some(CapacityReservationType::CapacityBlock) => {
                ReservedMarket::CapacityBlock
            }
            Some(r) if r.interruptible == Some(true) => ReservedMarket::Interruptible,
            _ => ReservedMarket::Default,
        }
    }
}

/// Narrows a `reserved` plan to what one CreateFleet call can launch, as Karpenter's reserved launch filters do:
/// the pools of the market with the cheapest pool (ties by [`ReservedMarket`] order), and for capacity blocks only
/// the cheapest pool. Returns the market; `None` for a plan of another capacity type, left as it is.
pub fn narrow(plan: &mut LaunchPlan, class: &ResolvedNodeClass) -> Option<ReservedMarket> {
    if plan.capacity_type != CapacityType::Reserved {
        return None;
    }
    let market_of = |reservation: Option<&String>| {
        ReservedMarket::of(reservation.and_then(|id| class.capacity_reservation(id)))
    };
    // The overrides are sorted cheapest first, so the first of each market is its cheapest.
    let market = plan
        .overrides
        .iter()
        .map(|o| {
            (
                o.price.unwrap_or(f64::INFINITY),
                market_of(o.reservation_id.as_ref()),
            )
        })
        .min_by(|(a, a_market), (b, b_market)| a.total_cmp(b).then(a_market.cmp(b_market)))
        .map_or(ReservedMarket::Default, |(_, market)| market);
    plan.overrides
        .retain(|o| market_of(o.reservation_id.as_ref()) == market);
    if market == ReservedMarket::CapacityBlock {
        plan.overrides.truncate(1);
    }
    Some(market)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_core::cloud::LaunchOverride;

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn term(json: serde_json::Value) -> CapacityReservationSelectorTerm {
        serde_json::from_value(json).expect("a term")
    }

    fn filters(query: &Query) -> Vec<(String, Vec<String>)> {
        query
            .filters()
            .iter()
            .map(|f| (f.name().unwrap_or_default().to_owned(), f.values().to_vec()))
            .collect()
    }

    fn pair(name: &str, value: &str) -> (String, Vec<String>) {
        (name.to_owned(), vec![value.to_owned()])
    }

    #[test]
    fn an_id_is_a_query_of_its_own_and_tags_with_owner_and_criteria_another() {
        let terms = [
            term(serde_json::json!({"id": "cr-1"})),
            term(
                serde_json::json!({"tags": {"team": "ml", "any": "*"}, "ownerID": "123456789012"}),
            ),
            term(serde_json::json!({"instanceMatchCriteria": "open"})),
            // The same again asks nothing more.
            term(serde_json::json!({"id": "cr-1"})),
        ];
        let queries = queries(&terms);
        assert_eq!(queries.len(), 3, "{queries:?}");
        let by_id = queries.iter().find(|q| q.id.is_some()).unwrap();
        assert_eq!(filters(by_id), [pair("state", "active")]);
        let tagged = queries.iter().find(|q| !q.tags.is_empty()).unwrap();
        assert_eq!(
            filters(tagged),
            [
                pair("state", "active"),
                pair("owner-id", "123456789012"),
                pair("tag-key", "any"),
                pair("tag:team", "ml"),
            ]
        );
        let open = queries
            .iter()
            .find(|q| q.instance_match_criteria.is_some())
            .unwrap();
        assert_eq!(
            filters(open),
            [
                pair("state", "active"),
                pair("instance-match-criteria", "open")
            ]
        );
    }

    fn ec2_reservation(id: &str) -> ec2::builders::CapacityReservationBuilder {
        ec2::CapacityReservation::builder()
            .capacity_reservation_id(id)
            .instance_type("m5.large")
            .availability_zone("us-west-2a")
            .owner_id("123456789012")
            .instance_match_criteria(ec2::InstanceMatchCriteria::Targeted)
            .available_instance_count(2)
            .state(ec2::CapacityReservationState::Active)
    }

    fn at(secs: u64) -> DateTime {
        DateTime::from(t0() + Duration::from_secs(secs))
    }

    #[test]
    fn an_odcr_is_listed_with_its_fields_and_defaults() {
        let listed = from_ec2(&ec2_reservation("cr-1").build(), t0()).unwrap();
        assert_eq!(
            serde_json::to_value(&listed).unwrap(),
            serde_json::json!({
                "availabilityZone": "us-west-2a", "id": "cr-1", "instanceMatchCriteria": "targeted",
                "instanceType": "m5.large", "ownerID": "123456789012", "reservationType": "default",
                "state": "active", "interruptible": false
            })
        );
        let interruptible = ec2_reservation("cr-2").interruptible(true).build();
        assert_eq!(
            from_ec2(&interruptible, t0()).unwrap().interruptible,
            Some(true)
        );
    }

    #[test]
    fn a_capacity_block_expires_forty_minutes_before_its_end_and_an_odcr_never() {
        let block = |end: u64| {
            ec2_reservation("cr-b")
                .reservation_type(ec2::CapacityReservationType::CapacityBlock)
                .end_date(at(end))
                .build()
        };
        let state = |r: &ec2::CapacityReservation| from_ec2(r, t0()).unwrap().state;
        assert_eq!(
            state(&block(41 * 60)),
            Some(CapacityReservationState::Active)
        );
        assert_eq!(
            state(&block(40 * 60)),
            Some(CapacityReservationState::Expiring)
        );
        let odcr = ec2_reservation("cr-o").end_date(at(60)).build();
        assert_eq!(state(&odcr), Some(CapacityReservationState::Active));
        assert_eq!(
            from_ec2(&block(41 * 60), t0()).unwrap().end_time.as_deref(),
            Some("2027-01-15T08:41:00Z")
        );
    }

    #[test]
    fn ended_and_unknown_reservations_are_left_out() {
        let ended = ec2_reservation("cr-1").end_date(at(0)).build();
        assert_eq!(from_ec2(&ended, t0()), Err(Unusable::Ended("cr-1".into())));
        let criteria = ec2_reservation("cr-2")
            .instance_match_criteria(ec2::InstanceMatchCriteria::from("new-kind"))
            .build();
        assert!(matches!(
            from_ec2(&criteria, t0()),
            Err(Unusable::Unsupported { .. })
        ));
        let kind = ec2_reservation("cr-3")
            .reservation_type(ec2::CapacityReservationType::from("new-kind"))
            .build();
        assert!(matches!(
            from_ec2(&kind, t0()),
            Err(Unusable::Unsupported { .. })
        ));
        let no_zone = ec2::CapacityReservation::builder()
            .capacity_reservation_id("cr-4")
            .instance_match_criteria(ec2::InstanceMatchCriteria::Open)
            .build();
        assert!(matches!(
            from_ec2(&no_zone, t0()),
            Err(Unusable::Unsupported { .. })
        ));
    }

    #[test]
    fn availability_counts_launches_terminations_and_exhaustion_until_the_next_answer() {
        let mut availability = Availability::default();
        assert_eq!(availability.get("cr-1", t0()), 0);
        // Launches into a reservation EC2 never listed change nothing.
        availability.launched("cr-1");
        availability.terminated("cr-1");
        assert_eq!(availability.get("cr-1", t0()), 0);
        availability.sync("cr-1", 2, t0());
        availability.launched("cr-1");
        assert_eq!(availability.get("cr-1", t0()), 1);
        availability.terminated("cr-1");
        availability.terminated("cr-1");
        assert_eq!(availability.get("cr-1", t0()), 3);
        availability.exhausted("cr-1");
        assert_eq!(availability.get("cr-1", t0()), 0);
        availability.launched("cr-1");
        assert_eq!(availability.get("cr-1", t0()), 0);
        availability.sync("cr-1", 5, t0());
        assert_eq!(availability.get("cr-1", t0() + AVAILABILITY_TTL), 0);
    }

    fn reservation(
        id: &str,
        kind: CapacityReservationType,
        interruptible: bool,
    ) -> CapacityReservation {
        CapacityReservation {
            availability_zone: "us-west-2a".into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: "m5.large".into(),
            owner_id: "123456789012".into(),
            reservation_type: Some(kind),
            state: Some(CapacityReservationState::Active),
            interruptible: Some(interruptible),
        }
    }

    fn pool(instance_type: &str, price: f64, reservation: &str) -> LaunchOverride {
        LaunchOverride {
            instance_type: instance_type.into(),
            zone: "us-west-2a".into(),
            subnet_id: "subnet-a".into(),
            image_id: "ami-1".into(),
            price: Some(price),
            reservation_id: Some(reservation.into()),
        }
    }

    fn class() -> ResolvedNodeClass {
        ResolvedNodeClass {
            capacity_reservations: Some(vec![
                reservation("cr-odcr", CapacityReservationType::Default, false),
                reservation("cr-odcr2", CapacityReservationType::Default, false),
                reservation("cr-block", CapacityReservationType::CapacityBlock, false),
                reservation("cr-block2", CapacityReservationType::CapacityBlock, false),
                reservation("cr-int", CapacityReservationType::Default, true),
            ]),
            ..Default::default()
        }
    }

    fn reserved(overrides: Vec<LaunchOverride>) -> LaunchPlan {
        LaunchPlan {
            capacity_type: CapacityType::Reserved,
            overrides,
            prioritized: false,
        }
    }

    fn ids(plan: &LaunchPlan) -> Vec<&str> {
        plan.overrides
            .iter()
            .filter_map(|o| o.reservation_id.as_deref())
            .collect()
    }

    #[test]
    fn a_reserved_plan_keeps_the_market_of_its_cheapest_pool() {
        let mut plan = reserved(vec![
            pool("c5.large", 1e-8, "cr-block"),
            pool("m5.large", 2e-8, "cr-odcr"),
            pool("m5.xlarge", 3e-8, "cr-block2"),
        ]);
        assert_eq!(
            narrow(&mut plan, &class()),
            Some(ReservedMarket::CapacityBlock)
        );
        // One capacity block per call: the cheapest.
        assert_eq!(ids(&plan), ["cr-block"]);

        let mut plan = reserved(vec![
            pool("m5.large", 1e-8, "cr-int"),
            pool("m5.large", 1e-8, "cr-odcr"),
            pool("c5.large", 2e-8, "cr-odcr2"),
            pool("c5.large", 2e-8, "cr-block"),
        ]);
        // A tie: an ODCR before a capacity block before an interruptible reservation.
        assert_eq!(narrow(&mut plan, &class()), Some(ReservedMarket::Default));
        assert_eq!(ids(&plan), ["cr-odcr", "cr-odcr2"]);

        let mut plan = reserved(vec![pool("m5.large", 1e-8, "cr-int")]);
        assert_eq!(
            narrow(&mut plan, &class()),
            Some(ReservedMarket::Interruptible)
        );

        let mut on_demand = LaunchPlan {
            capacity_type: CapacityType::OnDemand,
            overrides: vec![],
            prioritized: false,
        };
        assert_eq!(narrow(&mut on_demand, &class()), None);
    }
}
