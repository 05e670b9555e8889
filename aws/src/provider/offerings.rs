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

#[cfg(test)]
mod tests {
    use super::super::testing::{self, t0};
    use super::*;
    use aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsOutput;
    use aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesOutput;
    use aws_sdk_ec2::operation::describe_spot_price_history::DescribeSpotPriceHistoryOutput;
    use aws_smithy_mocks::mock;

    /// EC2's description of a two-vCPU x86 type sold on-demand and as spot.
    fn described(name: &str) -> ec2::InstanceTypeInfo {
        ec2::InstanceTypeInfo::builder()
            .instance_type(ec2::InstanceType::from(name))
            .processor_info(
                ec2::ProcessorInfo::builder()
                    .supported_architectures(ec2::ArchitectureType::X8664)
                    .build(),
            )
            .supported_virtualization_types(ec2::VirtualizationType::Hvm)
            .supported_usage_classes(ec2::UsageClassType::OnDemand)
            .supported_usage_classes(ec2::UsageClassType::Spot)
            .v_cpu_info(ec2::VCpuInfo::builder().default_v_cpus(2).build())
            .memory_info(ec2::MemoryInfo::builder().size_in_mib(4096).build())
            .network_info(
                ec2::NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .build(),
            )
            .build()
    }

    fn offered(name: &str, zone: &str) -> ec2::InstanceTypeOffering {
        ec2::InstanceTypeOffering::builder()
            .instance_type(ec2::InstanceType::from(name))
            .location_type(ec2::LocationType::AvailabilityZone)
            .location(zone)
            .build()
    }

    /// Every `NextToken` page of DescribeInstanceTypes and of DescribeInstanceTypeOfferings is read, each token
    /// passed back as given, and what a later page adds joins what earlier ones gave (Karpenter's instance type
    /// provider reads them with the SDK's paginators); a type is offered in the zones of every page, where the
    /// class has a subnet only. EC2 is described once per process: the next listing asks nothing more.
    #[tokio::test]
    async fn instance_types_and_their_zones_are_read_across_every_page_once() {
        let types_tokens = Arc::new(Mutex::new(Vec::new()));
        let offerings_tokens = Arc::new(Mutex::new(Vec::new()));
        let seen = types_tokens.clone();
        let types =
            mock!(aws_sdk_ec2::Client::describe_instance_types).then_compute_output(move |input| {
                seen.lock()
                    .unwrap()
                    .push(input.next_token().map(str::to_owned));
                match input.next_token() {
                    None => DescribeInstanceTypesOutput::builder()
                        .instance_types(described("c5.large"))
                        .next_token("types-2")
                        .build(),
                    Some(_) => DescribeInstanceTypesOutput::builder()
                        .instance_types(described("m5.large"))
                        .build(),
                }
            });
        let seen = offerings_tokens.clone();
        let offerings = mock!(aws_sdk_ec2::Client::describe_instance_type_offerings)
            .then_compute_output(move |input| {
                assert_eq!(
                    input.location_type(),
                    Some(&ec2::LocationType::AvailabilityZone)
                );
                seen.lock()
                    .unwrap()
                    .push(input.next_token().map(str::to_owned));
                match input.next_token() {
                    None => DescribeInstanceTypeOfferingsOutput::builder()
                        .instance_type_offerings(offered("c5.large", "us-west-2a"))
                        .instance_type_offerings(offered("m5.large", "us-west-2a"))
                        .next_token("offerings-2")
                        .build(),
                    Some("offerings-2") => DescribeInstanceTypeOfferingsOutput::builder()
                        .instance_type_offerings(offered("c5.large", "us-west-2b"))
                        .next_token("offerings-3")
                        .build(),
                    Some(_) => DescribeInstanceTypeOfferingsOutput::builder()
                        .instance_type_offerings(offered("c5.large", "us-west-2c"))
                        .build(),
                }
            });
        let spot = mock!(aws_sdk_ec2::Client::describe_spot_price_history)
            .then_output(|| DescribeSpotPriceHistoryOutput::builder().build());
        let cloud = testing::cloud(testing::ec2(&[&types, &offerings, &spot]));
        // Subnets in 2a and 2b: 2c is offered but not the class's.
        let class = testing::node_class(&["us-west-2a", "us-west-2b"]);
        let listed = cloud.offered_types(&class, t0()).await.expect("types");
        let zones: BTreeMap<String, BTreeSet<(String, CapacityType)>> = listed
            .iter()
            .map(|it| {
                let zones = it
                    .offerings
                    .iter()
                    .map(|o| (o.zone.clone(), o.capacity_type))
                    .collect();
                (it.name.clone(), zones)
            })
            .collect();
        let both = |zones: &[&str]| -> BTreeSet<(String, CapacityType)> {
            zones
                .iter()
                .flat_map(|z| {
                    [CapacityType::OnDemand, CapacityType::Spot].map(|ct| ((*z).to_owned(), ct))
                })
                .collect()
        };
        assert_eq!(
            zones,
            BTreeMap::from([
                ("c5.large".to_owned(), both(&["us-west-2a", "us-west-2b"])),
                ("m5.large".to_owned(), both(&["us-west-2a"])),
            ])
        );
        assert_eq!(
            *types_tokens.lock().unwrap(),
            [None, Some("types-2".to_owned())]
        );
        assert_eq!(
            *offerings_tokens.lock().unwrap(),
            [
                None,
                Some("offerings-2".to_owned()),
                Some("offerings-3".to_owned())
            ]
        );
        cloud
            .offered_types(&class, t0())
            .await
            .expect("types again");
        assert_eq!(types.num_calls(), 2, "described once");
        assert_eq!(offerings.num_calls(), 3, "described once");
    }
}
