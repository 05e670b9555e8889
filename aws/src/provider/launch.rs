//! Launches: launch templates per configuration, CreateFleet (and its dry runs for EC2NodeClass validation).

use super::*;

impl AwsCloud {
    /// The launch template for `config`, created unless it is known to exist. Another replica (or an
    /// earlier run) may have created it first: that counts as existing.
    pub(super) async fn ensure_template(
        &self,
        config: &TemplateConfig,
    ) -> Result<String, CloudError> {
        let name = config.name();
        if lock(&self.templates).contains(&name) {
            return Ok(name);
        }
        let created = self
            .call(
                "CreateLaunchTemplate",
                self.ec2
                    .create_launch_template()
                    .launch_template_name(&name)
                    .launch_template_data(config.data())
                    .tag_specifications(config.tag_specification())
                    .send(),
            )
            .await;
        match created {
            Ok(_) => {}
            Err(e) if code_of(&e) == Some("InvalidLaunchTemplateName.AlreadyExistsException") => {}
            Err(e) => return Err(e),
        }
        lock(&self.templates).insert(name.clone());
        Ok(name)
    }

    pub(super) fn template_config(
        &self,
        request: &LaunchRequest<'_>,
        image_id: &str,
        targeting: Targeting,
        efa_interfaces: i32,
    ) -> Result<TemplateConfig, CloudError> {
        let spec = &request.node_class.spec;
        let resolved = &request.node_class.resolved;
        let user_data = user_data::render(
            spec,
            &self.settings.cluster,
            &NodeSettings {
                labels: &request.labels,
                taints: &request.taints,
                kubelet: spec.kubelet.as_ref(),
                custom: spec.user_data.as_deref(),
                raid0: spec.instance_store_policy == Some(InstanceStorePolicy::Raid0),
            },
        )?;
        Ok(TemplateConfig::new(
            spec,
            Launch {
                image_id: image_id.to_owned(),
                user_data,
                security_group_ids: resolved
                    .security_groups
                    .iter()
                    .map(|g| g.id.clone())
                    .collect(),
                instance_profile: resolved.instance_profile.clone(),
                tags: template_tags(request.tags(&self.settings.cluster.name)),
                ipv6: ipv6_cluster(self.settings.cluster.cidr.as_deref()),
                targeting,
                efa_interfaces,
                placement: request.placement(),
            },
        ))
    }

    pub(super) async fn create_fleet(
        &self,
        request: &LaunchRequest<'_>,
        plan: &kerf_core::cloud::LaunchPlan,
        market: Option<ReservedMarket>,
    ) -> Result<aws_sdk_ec2::operation::create_fleet::CreateFleetOutput, CloudError> {
        // One template per image, and per reservation for a reserved launch: a template targets one reservation,
        // and its overrides are that reservation's pool only.
        // And per EFA interface count, for a claim requesting EFA: types differ in network cards.
        type TemplateKey<'k> = (&'k str, Option<&'k str>, i32);
        let mut by_template: BTreeMap<TemplateKey<'_>, Vec<&kerf_core::cloud::LaunchOverride>> =
            BTreeMap::new();
        for o in &plan.overrides {
            let reservation = o.reservation_id.as_deref();
            by_template
                .entry((
                    o.image_id.as_str(),
                    reservation,
                    efa_interfaces(request, &o.instance_type),
                ))
                .or_default()
                .push(o);
        }
        let mut templates = Vec::new();
        for ((image_id, reservation, efa), overrides) in by_template {
            let targeting = match (reservation, market) {
                (Some(id), Some(market)) => Targeting::Only {
                    id: id.to_owned(),
                    market,
                },
                _ if self.settings.reserved_capacity => Targeting::NoReservation,
                _ => Targeting::Open,
            };
            let template_name = self
                .ensure_template(&self.template_config(request, image_id, targeting, efa)?)
                .await?;
            templates.push(TemplateOverrides {
                template_name,
                overrides,
            });
        }
        // The NodeClaim's tag is the caller's own: the batcher keeps it out of what launches share.
        let mut tags = request.tags(&self.settings.cluster.name);
        let own_tags = tags
            .remove_entry(TAG_NODECLAIM)
            .into_iter()
            .collect::<BTreeMap<_, _>>();
        // Karpenter leaves `Context` out for a claim whose minValues it relaxed (MIN_VALUES_POLICY=BestEffort);
        // kerf does not mark relaxed claims yet (docs/cloud.md), so it always sends it.
        let context = request.node_class.spec.context.as_deref();
        // Its timestamp ends the pending → launch request time of docs/performance.md.
        tracing::debug!(nodeclaim = %request.node_claim, "calling CreateFleet");
        self.fleet_batcher
            .launch(FleetCall {
                request: fleet::request(&self.ec2, plan, market, &templates, &tags, context),
                own_tags,
            })
            .await
    }

    pub(super) async fn dry_run_launch(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Option<LaunchRefusal>, CloudError> {
        // A check is not a launch: offerings out of capacity are no reason to leave one out.
        let plan = plan(request, &IceCache::new(), now)?;
        let Some(first) = plan.overrides.first() else {
            return Err(CloudError::InvalidRequest(format!(
                "EC2NodeClass {}: no offering to check a launch with",
                request.node_class.name
            )));
        };
        let targeting = if self.settings.reserved_capacity {
            Targeting::NoReservation
        } else {
            Targeting::Open
        };
        let config = self.template_config(
            request,
            &first.image_id,
            targeting,
            efa_interfaces(request, &first.instance_type),
        )?;
        let template_name = match launch_check::template(self.ensure_template(&config).await)? {
            Ok(name) => name,
            Err(refusal) => return Ok(Some(refusal)),
        };
        let templates = [TemplateOverrides {
            template_name: template_name.clone(),
            overrides: plan
                .overrides
                .iter()
                .filter(|o| o.image_id == first.image_id)
                .collect(),
        }];
        let tags = request.tags(&self.settings.cluster.name);
        let context = request.node_class.spec.context.as_deref();
        let fleet =
            fleet::request(&self.ec2, &plan, None, &templates, &tags, context).dry_run(true);
        let answer = self.call("CreateFleet", fleet.send()).await;
        if let Some(refusal) = launch_check::dry_run(RefusedCall::CreateFleet, answer)? {
            return Ok(Some(refusal));
        }
        // Authorization does not depend on the subnet: any subnet allowed is enough; when none is, the first
        // subnet's answer is the verdict.
        let mut first_answer = None;
        for subnet in &request.node_class.resolved.subnets {
            let run = launch_check::run_instances(
                &self.ec2,
                &template_name,
                &first.instance_type,
                &subnet.subnet.id,
                &tags,
            );
            let answer = self.call("RunInstances", run.send()).await;
            match launch_check::dry_run(RefusedCall::RunInstances, answer) {
                Ok(None) => return Ok(None),
                other => {
                    first_answer.get_or_insert(other);
                }
            }
        }
        first_answer.unwrap_or(Ok(None))
    }

    pub(super) async fn launch_instance(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Instance, CloudError> {
        let checked = self.with_reservation_counts(request, now);
        let request = checked.as_ref().unwrap_or(request);
        let mut plan = plan(request, &lock(&self.ice), now)?;
        let market = reservations::narrow(&mut plan, &request.node_class.resolved);
        let out = match self.create_fleet(request, &plan, market).await {
            // A template deleted behind kerf's back: forget what we knew and try once more.
            Err(e) if code_of(&e) == Some("InvalidLaunchTemplateName.NotFoundException") => {
                lock(&self.templates).clear();
                self.create_fleet(request, &plan, market).await?
            }
            other => other?,
        };
        let outcome = fleet::outcome(&plan, out.instances(), out.errors());
        if plan.capacity_type == CapacityType::Reserved {
            // A full reservation is not an offering out of capacity for a while: it stays full until EC2 lists
            // it again (Karpenter marks the reservation, not the offering).
            let mut availability = lock(&self.availability);
            for id in &outcome.full_reservations {
                tracing::debug!(capacity_reservation = %id, "capacity reservation full");
                availability.exhausted(id);
            }
        } else {
            let mut ice = lock(&self.ice);
            for key in &outcome.no_capacity {
                ice.mark(key.clone(), now);
            }
        }
        if let Some((id, pool)) = outcome.launched {
            let reservation = pool.reservation_id.clone().map(|reservation| {
                let resolved = request
                    .node_class
                    .resolved
                    .capacity_reservation(&reservation);
                lock(&self.availability).launched(&reservation);
                lock(&self.reserved_instances).insert(id.clone(), reservation.clone());
                InstanceReservation {
                    id: reservation,
                    reservation_type: resolved
                        .and_then(|r| r.reservation_type)
                        .unwrap_or(CapacityReservationType::Default),
                    interruptible: resolved.and_then(|r| r.interruptible).unwrap_or(false),
                }
            });
            return Ok(Instance {
                provider_id: provider_id(&pool.zone, &id),
                id,
                instance_type: pool.instance_type,
                zone: pool.zone,
                capacity_type: plan.capacity_type,
                image_id: pool.image_id,
                launch_time: now,
                state: InstanceState::Pending,
                subnet_id: Some(pool.subnet_id),
                security_group_ids: request
                    .node_class
                    .resolved
                    .security_groups
                    .iter()
                    .map(|g| g.id.clone())
                    .collect(),
                tags: request.tags(&self.settings.cluster.name),
                reservation,
                // The partition EC2 chose when the launch named none is read back at registration.
                placement: request.placement(),
            });
        }
        match outcome.other_error {
            Some((code, message)) => Err(CloudError::Api {
                operation: "CreateFleet",
                code,
                message,
            }),
            None if !outcome.no_capacity.is_empty() => Err(CloudError::InsufficientCapacity {
                offerings: outcome.no_capacity,
            }),
            None => Err(CloudError::Api {
                operation: "CreateFleet",
                code: "NoInstance".into(),
                message: "CreateFleet answered with neither an instance nor an error".into(),
            }),
        }
    }
}

/// The EFA interfaces an instance of `instance_type` gets for `request`: one per network card of the type when
/// the claim requests `vpc.amazonaws.com/efa` and its class lists no `networkInterfaces` (listed interfaces are
/// sent as listed), as Karpenter's launch templates for EFA claims; else none.
fn efa_interfaces(request: &LaunchRequest<'_>, instance_type: &str) -> i32 {
    let listed = request
        .node_class
        .spec
        .network_interfaces
        .as_ref()
        .is_some_and(|l| !l.is_empty());
    if !request.efa_requested || listed {
        return 0;
    }
    request
        .instance_types
        .iter()
        .find(|it| it.name == instance_type)
        .and_then(|it| it.capacity.extended.get(EFA))
        .and_then(|n| i32::try_from(*n).ok())
        .unwrap_or(0)
}

/// The tags of a launch template: the launch's, less the NodeClaim's name, so that claims with one
/// configuration share a template (the fleet still tags each instance with its claim).
fn template_tags(mut tags: BTreeMap<String, String>) -> BTreeMap<String, String> {
    tags.remove(TAG_NODECLAIM);
    tags
}

#[cfg(test)]
mod tests;
