//! The instance types an EC2NodeClass can launch: EC2's descriptions, the zones of the class's subnets, prices,
//! reservations, and what is unavailable (ICE, zonal shifts).

use super::*;

impl AwsCloud {
    /// Every launchable instance type and the zones offering it, described once (EC2's list changes with
    /// new instance families, not within a process's life).
    async fn described(&self) -> Result<Described, CloudError> {
        let mut cached = self.described.lock().await;
        if let Some(described) = cached.as_ref() {
            return Ok(described.clone());
        }
        let types = collect_pages("DescribeInstanceTypes", |token| {
            let request = self
                .ec2
                .describe_instance_types()
                .max_results(100)
                .set_next_token(token);
            async move {
                let out = self.call("DescribeInstanceTypes", request.send()).await?;
                Ok((out.instance_types.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        let offerings = collect_pages("DescribeInstanceTypeOfferings", |token| {
            let request = self
                .ec2
                .describe_instance_type_offerings()
                .location_type(ec2::LocationType::AvailabilityZone)
                .max_results(1000)
                .set_next_token(token);
            async move {
                let out = self
                    .call("DescribeInstanceTypeOfferings", request.send())
                    .await?;
                Ok((
                    out.instance_type_offerings.unwrap_or_default(),
                    out.next_token,
                ))
            }
        })
        .await?;
        let mut zones = zones_by_type(&offerings);
        let described: Described = Arc::new(
            types
                .iter()
                .filter_map(info_from_ec2)
                .filter_map(|info| {
                    let zones = zones.remove(&info.name)?;
                    Some((info, zones))
                })
                .collect(),
        );
        *cached = Some(described.clone());
        Ok(described)
    }

    pub(super) async fn offered_types(
        &self,
        node_class: &NodeClass,
        now: SystemTime,
    ) -> Result<Vec<InstanceType>, CloudError> {
        let settings = CatalogSettings::from_ec2nodeclass(&node_class.spec).map_err(|e| {
            CloudError::InvalidRequest(format!("EC2NodeClass {}: {e}", node_class.name))
        })?;
        let zone_ids = node_class.resolved.zone_ids();
        {
            let mut shifts = lock(&self.zonal_shifts);
            for (zone, id) in &zone_ids {
                if let Some(id) = id {
                    shifts.learn_zone(zone, id);
                }
            }
        }
        let described = self.described().await?;
        let on_demand = self.on_demand_prices(now).await;
        let spot = self.spot_prices(now).await;
        let price = |instance_type: &str, zone: &str, capacity_type| {
            match capacity_type {
                CapacityType::Spot => spot.get(instance_type, zone),
                CapacityType::OnDemand => on_demand.get(instance_type),
                _ => None,
            }
            .or_else(|| {
                self.settings
                    .pricing
                    .price(&self.region, instance_type, zone, capacity_type)
            })
        };
        // Reserved offerings come from the class's reservations, with the instances each still takes; EC2's
        // own offerings are on-demand and spot only.
        let mut reserved: HashMap<&str, Vec<&CapacityReservation>> = HashMap::new();
        if self.settings.reserved_capacity {
            for r in node_class
                .resolved
                .capacity_reservations
                .as_deref()
                .unwrap_or_default()
            {
                reserved
                    .entry(r.instance_type.as_str())
                    .or_default()
                    .push(r);
            }
        }
        let availability = lock(&self.availability).clone();
        let mut types: Vec<InstanceType> = described
            .iter()
            .filter_map(|(info, zones)| {
                let mut offerings: Vec<Offering> = zones
                    .iter()
                    .filter_map(|zone| zone_ids.get(zone.as_str()).map(|id| (zone, id)))
                    .flat_map(|(zone, zone_id)| {
                        info.capacity_types
                            .iter()
                            .map(move |&capacity_type| Offering {
                                zone: zone.clone(),
                                zone_id: zone_id.cloned(),
                                capacity_type,
                                price: price(&info.name, zone, capacity_type),
                                available: true,
                                reservation: None,
                            })
                    })
                    .collect();
                for r in reserved.get(info.name.as_str()).into_iter().flatten() {
                    let zone = &r.availability_zone;
                    // Only where the type is offered and the class has a subnet, as its other offerings.
                    let Some(zone_id) =
                        zone_ids.get(zone.as_str()).filter(|_| zones.contains(zone))
                    else {
                        continue;
                    };
                    let capacity = availability.get(&r.id, now);
                    let on_demand = price(&info.name, zone, CapacityType::OnDemand);
                    offerings.push(Offering {
                        zone: zone.clone(),
                        zone_id: zone_id.cloned(),
                        capacity_type: CapacityType::Reserved,
                        // Paid for already: nearly free, yet ordered as the on-demand prices are (Karpenter's).
                        price: Some(on_demand.map_or(0.0, |p| p / RESERVED_PRICE_DIVISOR)),
                        available: capacity > 0 && launchable(r),
                        reservation: Some(Reservation {
                            id: r.id.clone(),
                            capacity,
                            reservation_type: r.reservation_type.unwrap_or_default(),
                            interruptible: r.interruptible.unwrap_or(false),
                        }),
                    });
                }
                let group = node_class.resolved.placement_group.as_ref();
                // A type that cannot join the group's strategy is not offered (Karpenter's compatibility check).
                if offerings.is_empty()
                    || group.is_some_and(|g| !g.admits(info.placement_group_strategies.as_deref()))
                {
                    return None;
                }
                let mut it = InstanceType::from_info(info, &self.region, offerings, &settings);
                if let Some(group) = group {
                    group.place(&mut it);
                }
                Some(it)
            })
            .collect();
        lock(&self.ice).apply(&mut types, now);
        zonal_shift::apply(&lock(&self.zonal_shifts).shifted(now), &mut types);
        Ok(types)
    }
}
