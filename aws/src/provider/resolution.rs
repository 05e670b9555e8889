//! EC2NodeClass resolution: subnets, security groups, AMIs (through SSM aliases, names, IDs, tags) and placement
//! groups.

use super::*;

impl AwsCloud {
    /// The available placement group `selector` names (by ID, else by name), as Karpenter's provider asks
    /// DescribePlacementGroups; `None` when EC2 knows no such group or it is not available.
    pub(super) async fn placement_group(
        &self,
        name: &str,
        selector: &PlacementGroupSelector,
    ) -> Result<Option<PlacementGroup>, CloudError> {
        let mut request = self.ec2.describe_placement_groups().filters(
            ec2::Filter::builder()
                .name("state")
                .values(ec2::PlacementGroupState::Available.as_str())
                .build(),
        );
        request = match (&selector.id, &selector.name) {
            (Some(id), _) => request.group_ids(id),
            (None, Some(name)) => request.group_names(name),
            (None, None) => return Ok(None),
        };
        let out = self.call("DescribePlacementGroups", request.send()).await;
        // EC2 answers an unknown name or ID with an error rather than an empty list. Any other failure leaves
        // the class not ready until the next resolution, as Karpenter's `PlacementGroupResolutionFailed` does.
        let out = match out {
            Err(e) if code_of(&e).is_some_and(|c| c.starts_with("InvalidPlacementGroup")) => {
                return Ok(None)
            }
            Err(e @ (CloudError::Api { .. } | CloudError::Timeout { .. })) => {
                return Err(CloudError::NodeClassNotReady {
                    name: name.to_owned(),
                    reason: format!("{PLACEMENT_GROUP_UNRESOLVED}: {e}"),
                })
            }
            other => other?,
        };
        Ok(out.placement_groups().iter().find_map(|g| {
            Some(PlacementGroup {
                id: g.group_id()?.to_owned(),
                name: g.group_name().unwrap_or_default().to_owned(),
                strategy: PlacementStrategy::parse(g.strategy()?.as_str())?,
                partition_count: g
                    .partition_count()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
            })
        }))
    }

    pub(super) async fn subnets(
        &self,
        spec: &EC2NodeClassSpec,
    ) -> Result<Vec<ResolvedSubnet>, CloudError> {
        let mut found: BTreeMap<String, ResolvedSubnet> = BTreeMap::new();
        for term in spec.subnet_selector_terms.iter().flatten() {
            let filters = tag_filters(term.tags.as_ref());
            let subnets = collect_pages("DescribeSubnets", |token| {
                let mut request = self
                    .ec2
                    .describe_subnets()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token);
                request = match &term.id {
                    Some(id) => request.subnet_ids(id),
                    None => request.max_results(1000),
                };
                async move {
                    let out = self.call("DescribeSubnets", request.send()).await;
                    let out = not_found_is_empty(out)?;
                    Ok(out.map_or((vec![], None), |o| {
                        (o.subnets.unwrap_or_default(), o.next_token)
                    }))
                }
            })
            .await?;
            for s in subnets {
                let (Some(id), Some(zone)) = (s.subnet_id, s.availability_zone) else {
                    continue;
                };
                found.insert(
                    id.clone(),
                    ResolvedSubnet {
                        subnet: Subnet {
                            id,
                            zone,
                            zone_id: s.availability_zone_id,
                        },
                        available_ips: s.available_ip_address_count.map_or(0, i64::from),
                    },
                );
            }
        }
        Ok(found.into_values().collect())
    }

    pub(super) async fn security_groups(
        &self,
        spec: &EC2NodeClassSpec,
    ) -> Result<Vec<SecurityGroup>, CloudError> {
        let mut found: BTreeMap<String, SecurityGroup> = BTreeMap::new();
        for term in spec.security_group_selector_terms.iter().flatten() {
            let mut filters = tag_filters(term.tags.as_ref());
            if let Some(name) = &term.name {
                filters.push(
                    ec2::Filter::builder()
                        .name("group-name")
                        .values(name)
                        .build(),
                );
            }
            let groups = collect_pages("DescribeSecurityGroups", |token| {
                let mut request = self
                    .ec2
                    .describe_security_groups()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token);
                request = match &term.id {
                    Some(id) => request.group_ids(id),
                    None => request.max_results(1000),
                };
                async move {
                    let out = self.call("DescribeSecurityGroups", request.send()).await;
                    let out = not_found_is_empty(out)?;
                    Ok(out.map_or((vec![], None), |o| {
                        (o.security_groups.unwrap_or_default(), o.next_token)
                    }))
                }
            })
            .await?;
            for g in groups {
                if let Some(id) = g.group_id {
                    found.insert(
                        id.clone(),
                        SecurityGroup {
                            id,
                            name: g.group_name,
                        },
                    );
                }
            }
        }
        Ok(found.into_values().collect())
    }

    pub(super) async fn amis(
        &self,
        spec: &EC2NodeClassSpec,
    ) -> Result<Vec<ResolvedAmi>, CloudError> {
        // Images deprecated by now are kept last (ResolvedAmi::deprecated).
        let now = SystemTime::now();
        let mut images = Vec::new();
        // The variants each alias image is published as (one image may be several: AL2's GPU image).
        let mut variants: HashMap<String, Vec<AmiVariant>> = HashMap::new();
        for term in spec.ami_selector_terms.iter().flatten() {
            if let Some(alias) = &term.alias {
                if let Some(why) = unsupported_alias(alias, &self.settings.kubernetes_version) {
                    return Err(CloudError::NodeClassNotReady {
                        name: String::from("(amiSelectorTerms)"),
                        reason: format!("{UNSUPPORTED_ALIAS}: {why}"),
                    });
                }
                let mut ids = Vec::new();
                for parameter in alias_parameters(alias, &self.settings.kubernetes_version)? {
                    let out = self
                        .call(
                            "GetParameter",
                            self.ssm.get_parameter().name(&parameter.name).send(),
                        )
                        .await;
                    match out {
                        Ok(out) => {
                            if let Some(id) = out.parameter.and_then(|p| p.value) {
                                let known = variants.entry(id.clone()).or_default();
                                known.extend(parameter.variants);
                                known.sort_unstable();
                                known.dedup();
                                ids.push(id);
                            }
                        }
                        // No AMI of this architecture, variant (or version) is published: the others still serve.
                        Err(e) if code_of(&e) == Some("ParameterNotFound") => {}
                        Err(e) => return Err(e),
                    }
                }
                ids.sort_unstable();
                ids.dedup();
                if !ids.is_empty() {
                    images.extend(self.describe_images(Some(ids), vec![], vec![]).await?);
                }
                continue;
            }
            if let Some(parameter) = &term.ssm_parameter {
                let id = self.ssm_image_id(parameter).await?;
                images.extend(self.describe_images(Some(vec![id]), vec![], vec![]).await?);
                continue;
            }
            let mut filters = tag_filters(term.tags.as_ref());
            if let Some(name) = &term.name {
                filters.push(ec2::Filter::builder().name("name").values(name).build());
            }
            let owners = match (&term.owner, &term.name) {
                (Some(owner), _) => vec![owner.clone()],
                // Karpenter's default for a name: images of this account or Amazon's, never a stranger's.
                (None, Some(_)) => vec!["self".to_owned(), "amazon".to_owned()],
                (None, None) => vec![],
            };
            images.extend(
                self.describe_images(term.id.clone().map(|id| vec![id]), filters, owners)
                    .await?,
            );
        }
        let amis = images.into_iter().filter_map(|image| {
            if image
                .state
                .as_ref()
                .is_some_and(|s| *s != ec2::ImageState::Available)
            {
                return None;
            }
            let id = image.image_id?;
            let deprecated = image
                .deprecation_time
                .as_deref()
                .and_then(|t| {
                    aws_sdk_ec2::primitives::DateTime::from_str(
                        t,
                        aws_sdk_ec2::primitives::DateTimeFormat::DateTime,
                    )
                    .ok()
                })
                .is_some_and(|t| t <= aws_sdk_ec2::primitives::DateTime::from(now));
            Some(ResolvedAmi {
                deprecated,
                variants: variants.get(&id).cloned().unwrap_or_default(),
                id,
                name: image.name,
                architecture: image.architecture?.as_str().to_owned(),
                creation_date: image.creation_date,
            })
        });
        Ok(newest_per_architecture(amis))
    }

    /// The image id the SSM parameter `name` holds (an `ssmParameter` AMI selector term). A parameter that is
    /// missing or holds anything but an image id is an error naming it: the term never widens to other images.
    pub(super) async fn ssm_image_id(&self, name: &str) -> Result<String, CloudError> {
        let not_ready = |why: String| CloudError::NodeClassNotReady {
            name: String::from("(amiSelectorTerms)"),
            reason: format!("{NO_AMIS}: {why}"),
        };
        let out = match self
            .call("GetParameter", self.ssm.get_parameter().name(name).send())
            .await
        {
            Ok(out) => out,
            Err(e) if code_of(&e) == Some("ParameterNotFound") => {
                return Err(not_ready(format!("ssmParameter {name:?} does not exist")))
            }
            Err(e) => return Err(e),
        };
        let value = out.parameter.and_then(|p| p.value).unwrap_or_default();
        if is_image_id(&value) {
            Ok(value)
        } else {
            Err(not_ready(format!(
                "ssmParameter {name:?} holds {:?}, not an image id (ami-...)",
                value.chars().take(64).collect::<String>()
            )))
        }
    }

    pub(super) async fn describe_images(
        &self,
        ids: Option<Vec<String>>,
        filters: Vec<ec2::Filter>,
        owners: Vec<String>,
    ) -> Result<Vec<ec2::Image>, CloudError> {
        collect_pages("DescribeImages", |token| {
            let mut request = self
                .ec2
                .describe_images()
                // Deprecated images still count (used where nothing current fits), as Karpenter asks.
                .include_deprecated(true)
                .set_filters(Some(filters.clone()))
                .set_owners((!owners.is_empty()).then(|| owners.clone()))
                .set_next_token(token);
            request = match &ids {
                Some(ids) => request.set_image_ids(Some(ids.clone())),
                None => request.max_results(1000),
            };
            async move {
                let out = not_found_is_empty(self.call("DescribeImages", request.send()).await)?;
                Ok(out.map_or((vec![], None), |o| {
                    (o.images.unwrap_or_default(), o.next_token)
                }))
            }
        })
        .await
    }
}

/// A `*.NotFound` answer (an ID in a selector that does not exist) as "nothing matched".
pub(super) fn not_found_is_empty<T>(
    result: Result<T, CloudError>,
) -> Result<Option<T>, CloudError> {
    match result {
        Ok(out) => Ok(Some(out)),
        Err(e)
            if code_of(&e)
                .is_some_and(|c| c.ends_with(".NotFound") || c.ends_with(".Malformed")) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{self, ec2_error_body};
    use super::*;
    use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput;
    use aws_smithy_mocks::mock;

    fn subnet(id: &str, zone: &str) -> ec2::Subnet {
        ec2::Subnet::builder()
            .subnet_id(id)
            .availability_zone(zone)
            .availability_zone_id(format!("usw2-{}", &zone[9..]))
            .available_ip_address_count(100)
            .build()
    }

    fn spec(subnet_terms: serde_json::Value) -> EC2NodeClassSpec {
        let mut spec = serde_json::to_value(testing::spec()).expect("json");
        spec["subnetSelectorTerms"] = subnet_terms;
        serde_json::from_value(spec).expect("a spec")
    }

    /// Karpenter's subnet provider "should handle empty pages when describing subnets" and "should not overwrite
    /// found values when handling multiple pages of subnets": an empty page with a `NextToken` does not end the
    /// listing, each token is passed back, every page's subnets are kept, and the tag term is the request's
    /// filter (a listing, so at most 1000 a page).
    #[tokio::test]
    async fn subnets_are_gathered_across_pages_empty_ones_included() {
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let seen = tokens.clone();
        let pages =
            mock!(aws_sdk_ec2::Client::describe_subnets).then_compute_output(move |input| {
                let filters: Vec<_> = input
                    .filters()
                    .iter()
                    .map(|f| (f.name().unwrap_or_default(), f.values().to_vec()))
                    .collect();
                assert_eq!(
                    filters,
                    [(
                        "tag:karpenter.sh/discovery",
                        vec![testing::CLUSTER.to_owned()]
                    )]
                );
                assert_eq!(input.max_results(), Some(1000));
                seen.lock()
                    .unwrap()
                    .push(input.next_token().map(str::to_owned));
                match input.next_token() {
                    None => DescribeSubnetsOutput::builder().next_token("p2").build(),
                    Some("p2") => DescribeSubnetsOutput::builder()
                        .subnets(subnet("subnet-a", "us-west-2a"))
                        .next_token("p3")
                        .build(),
                    Some(_) => DescribeSubnetsOutput::builder()
                        .subnets(subnet("subnet-b", "us-west-2b"))
                        .build(),
                }
            });
        let cloud = testing::cloud(testing::ec2(&[&pages]));
        let found = cloud.subnets(&testing::spec()).await.expect("subnets");
        let found: Vec<(&str, &str, i64)> = found
            .iter()
            .map(|s| {
                (
                    s.subnet.id.as_str(),
                    s.subnet.zone.as_str(),
                    s.available_ips,
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                ("subnet-a", "us-west-2a", 100),
                ("subnet-b", "us-west-2b", 100)
            ]
        );
        assert_eq!(
            *tokens.lock().unwrap(),
            [None, Some("p2".to_owned()), Some("p3".to_owned())]
        );
    }

    /// A subnet term naming an ID asks for that ID (not a listing); EC2's `InvalidSubnetID.NotFound` for it is
    /// "nothing matched", not a failure of the resolution (the class then says no subnet matched).
    #[tokio::test]
    async fn a_subnet_id_that_does_not_exist_matches_nothing() {
        let missing = mock!(aws_sdk_ec2::Client::describe_subnets)
            .match_requests(|input| {
                input.subnet_ids() == ["subnet-gone"] && input.max_results().is_none()
            })
            .sequence()
            .http_status(400, Some(ec2_error_body("InvalidSubnetID.NotFound")))
            .build();
        let cloud = testing::cloud(testing::ec2(&[&missing]));
        let found = cloud
            .subnets(&spec(serde_json::json!([{"id": "subnet-gone"}])))
            .await
            .expect("nothing matched is no error");
        assert!(found.is_empty());
        assert_eq!(missing.num_calls(), 1);
    }

    /// A placement group EC2 does not know (`InvalidPlacementGroup.Unknown`) is no group (the class is then not
    /// ready for its selector), while a failed call (here throttled, retries off) makes the class not ready for
    /// the group's resolution (Karpenter's `PlacementGroupResolutionFailed`) instead of an API error.
    #[tokio::test]
    async fn an_unknown_placement_group_is_none_and_a_failed_lookup_is_not_ready() {
        let answers = mock!(aws_sdk_ec2::Client::describe_placement_groups)
            .match_requests(|input| {
                input.group_names() == ["training"]
                    && input
                        .filters()
                        .iter()
                        .any(|f| f.name() == Some("state") && f.values() == ["available"])
            })
            .sequence()
            .http_status(400, Some(ec2_error_body("InvalidPlacementGroup.Unknown")))
            .http_status(503, Some(ec2_error_body("RequestLimitExceeded")))
            .build();
        let cloud = testing::cloud(testing::ec2(&[&answers]));
        let selector = PlacementGroupSelector {
            id: None,
            name: Some("training".into()),
        };
        let unknown = cloud.placement_group("default", &selector).await;
        assert!(matches!(unknown, Ok(None)), "{unknown:?}");
        let failed = cloud
            .placement_group("default", &selector)
            .await
            .unwrap_err();
        match failed {
            CloudError::NodeClassNotReady { name, reason } => {
                assert_eq!(name, "default");
                assert!(reason.starts_with(PLACEMENT_GROUP_UNRESOLVED), "{reason}");
                assert!(reason.contains("RequestLimitExceeded"), "{reason}");
            }
            other => panic!("{other}"),
        }
    }
}
