//! Capacity reservations: those an EC2NodeClass selects, and how many instances each still takes.

use super::*;

impl AwsCloud {
    /// The capacity reservations `spec` selects at `now`: each query of its terms answered by EC2 (or by an
    /// answer younger than [`QUERY_TTL`]), ended and unusable ones left out, each once, sorted by ID. Every answer
    /// from EC2 also resets the instance counts of the reservations it lists.
    pub(super) async fn capacity_reservations(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
        now: SystemTime,
    ) -> Result<Vec<CapacityReservation>, CloudError> {
        let terms = spec
            .capacity_reservation_selector_terms
            .as_deref()
            .unwrap_or_default();
        let queries = reservations::queries(terms);
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let mut answers = self.reservation_answers.lock().await;
        answers.retain(|_, (at, _)| now.duration_since(*at).is_ok_and(|age| age < QUERY_TTL));
        let mut found: BTreeMap<String, CapacityReservation> = BTreeMap::new();
        for query in queries {
            let fetched = !answers.contains_key(&query);
            if fetched {
                // Boxed for the stack's sake, as the call of this function is (see `resolve_node_class`).
                let listed = Box::pin(self.describe_capacity_reservations(&query)).await?;
                let mut availability = lock(&self.availability);
                for r in &listed {
                    if let (Some(id), Some(count)) =
                        (r.capacity_reservation_id(), r.available_instance_count())
                    {
                        availability.sync(id, u32::try_from(count).unwrap_or(0), now);
                    }
                }
                drop(availability);
                answers.insert(query.clone(), (now, listed));
            }
            let Some((_, listed)) = answers.get(&query) else {
                continue;
            };
            for r in listed {
                match reservations::from_ec2(r, now) {
                    Ok(reservation) => {
                        found.insert(reservation.id.clone(), reservation);
                    }
                    Err(Unusable::Ended(_)) => {}
                    // Said once per answer, not once per resolution.
                    Err(error) if fetched => {
                        tracing::warn!(ec2nodeclass = name, %error, "ignoring a capacity reservation")
                    }
                    Err(_) => {}
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// Every reservation one query matches. A reservation ID that does not exist is "nothing matched", as for
    /// the other selectors.
    pub(super) async fn describe_capacity_reservations(
        &self,
        query: &Query,
    ) -> Result<Vec<ec2::CapacityReservation>, CloudError> {
        let filters = query.filters();
        collect_pages("DescribeCapacityReservations", |token| {
            let mut request = self
                .ec2
                .describe_capacity_reservations()
                .set_filters(Some(filters.clone()))
                .set_next_token(token);
            request = match &query.id {
                // EC2 refuses MaxResults with IDs.
                Some(id) => request.capacity_reservation_ids(id),
                None => request.max_results(1000),
            };
            async move {
                let out = self
                    .call("DescribeCapacityReservations", request.send())
                    .await;
                Ok(not_found_is_empty(out)?.map_or((vec![], None), |o| {
                    (o.capacity_reservations.unwrap_or_default(), o.next_token)
                }))
            }
        })
        .await
    }

    /// The request with the reserved offerings that EC2 has reported full since its catalog was listed made
    /// unavailable (a launch into one fails, or a launch just took its last slot); `None` when there is none.
    pub(super) fn with_reservation_counts<'a>(
        &self,
        request: &LaunchRequest<'a>,
        now: SystemTime,
    ) -> Option<LaunchRequest<'a>> {
        let availability = lock(&self.availability);
        let full = |o: &Offering| {
            o.available
                && o.reservation
                    .as_ref()
                    .is_some_and(|r| availability.get(&r.id, now) == 0)
        };
        let any_full = request
            .instance_types
            .iter()
            .any(|it| it.offerings.iter().any(full));
        if !any_full {
            return None;
        }
        let mut checked = request.clone();
        for it in &mut checked.instance_types {
            if it.offerings.iter().any(full) {
                for offering in &mut it.to_mut().offerings {
                    if full(offering) {
                        offering.available = false;
                    }
                }
            }
        }
        Some(checked)
    }

    /// Notes the reservation of each instance that runs in one, for when it is terminated.
    pub(super) fn remember_reservations<'i>(
        &self,
        instances: impl IntoIterator<Item = &'i Instance>,
    ) {
        let mut reserved = lock(&self.reserved_instances);
        for instance in instances {
            if let Some(r) = &instance.reservation {
                reserved.insert(instance.id.clone(), r.id.clone());
            }
        }
    }
}
