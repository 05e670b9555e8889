//! [`AwsCloud`]: the [`CloudProvider`] on EC2 and SSM.

mod launch;
mod offerings;
mod prices;
mod profiles;
mod reserved;
mod resolution;
#[cfg(test)]
mod testing;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types as ec2;
use kerf_core::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationType, EC2NodeClassSpec, InstanceStorePolicy,
    PlacementGroupSelector, SecurityGroup, Subnet,
};
use kerf_core::catalog::{
    CapacityType, CatalogSettings, InstanceType, InstanceTypeInfo, Offering, Reservation, EFA,
    RESERVED_PRICE_DIVISOR,
};
use kerf_core::cloud::zonal_shift::{self, ZonalShifts};
use kerf_core::cloud::{
    newest_per_architecture, plan, provider_id, AmiVariant, CloudError, CloudProvider, IceCache,
    Instance, InstanceHealth, InstancePlacement, InstanceReservation, InstanceState, LaunchRefusal,
    LaunchRequest, NodeClass, OfferingKey, PlacementGroup, PlacementStrategy, RefusedCall,
    ResolvedAmi, ResolvedNodeClass, ResolvedSubnet, NO_AMIS, NO_INSTANCE_PROFILE,
    PLACEMENT_GROUP_UNRESOLVED, TAG_CLUSTER_PREFIX, TAG_NODECLAIM, TAG_NODEPOOL, UNSUPPORTED_ALIAS,
};

use crate::budget::ApiBudget;
use crate::capacity_reservations::{
    self as reservations, launchable, Availability, Query, ReservedMarket, Unusable, QUERY_TTL,
};
use crate::errors::{bounded, code_of};
use crate::fleet::{self, TemplateOverrides};
use crate::fleet_batcher::{FleetBatcher, FleetCall};
use crate::instance_profile::{
    gone_is_done, profile_name, profile_tags, role_changes, role_error, role_name,
};
use crate::instance_types::{info_from_ec2, zones_by_type};
use crate::launch_check;
use crate::launch_template::{ipv6_cluster, unused_templates, Launch, Targeting, TemplateConfig};
use crate::pagination::collect_pages;
use crate::prices::on_demand::{self, OnDemandPrices};
use crate::prices::spot::{self, Row, SpotPrices};
use crate::prices::Refreshing;
use crate::resolve::{alias_parameters, is_image_id, tag_filters, unsupported_alias};
use crate::retries::AttemptsPerApi;
use crate::user_data::{self, ClusterInfo, NodeSettings};
use crate::zonal_shift::ZonalShiftSource;

use crate::config::AwsSettings;
use resolution::not_found_is_empty;

/// An instance type's EC2 facts and the zones that offer it, as described once per process.
type Described = Arc<Vec<(InstanceTypeInfo, BTreeSet<String>)>>;

/// EC2's answer to one capacity reservation query, and when it came.
type Answered = (SystemTime, Vec<ec2::CapacityReservation>);

/// The cloud provider on AWS.
pub struct AwsCloud {
    ec2: aws_sdk_ec2::Client,
    /// Every launch's CreateFleet goes through it.
    fleet_batcher: FleetBatcher,
    /// The client-side rate limits every call waits on.
    budget: Arc<ApiBudget>,
    ssm: aws_sdk_ssm::Client,
    iam: aws_sdk_iam::Client,
    /// The Price List API, in the region that serves this one; `None` in an isolated VPC.
    pricing: Option<aws_sdk_pricing::Client>,
    settings: AwsSettings,
    region: String,
    described: tokio::sync::Mutex<Option<Described>>,
    /// Names of launch templates known to exist.
    templates: Mutex<HashSet<String>>,
    ice: Mutex<IceCache>,
    /// On-demand prices from the Price List API, refreshed twice a day.
    on_demand: tokio::sync::Mutex<Refreshing<OnDemandPrices>>,
    /// Spot prices from the price history, refreshed hourly.
    spot: tokio::sync::Mutex<Refreshing<SpotPrices>>,
    /// Instance profiles known to hold their class's role: profile name → role name.
    profiles: Mutex<HashMap<String, String>>,
    /// Capacity reservation queries answered within [`QUERY_TTL`]; held across the calls, so that classes
    /// selecting the same reservations ask EC2 once.
    reservation_answers: tokio::sync::Mutex<BTreeMap<Query, Answered>>,
    /// How many more instances each reservation takes.
    availability: Mutex<Availability>,
    /// The reservation each instance known to run in one uses: its slot is counted free when it is terminated.
    reserved_instances: Mutex<HashMap<String, String>>,
    /// Where the cluster's zonal shifts are asked (`--enable-zonal-shift`), and the shifts last listed.
    zonal_shift_source: Option<ZonalShiftSource>,
    zonal_shifts: Mutex<ZonalShifts>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a single insert or remove: a panic elsewhere leaves them whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The AWS clients a provider calls through.
pub(crate) struct Clients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub iam: aws_sdk_iam::Client,
    pub pricing: Option<aws_sdk_pricing::Client>,
}

impl AwsCloud {
    /// Builds the EC2, SSM, IAM and Price List clients. No call is made, except EKS `DescribeCluster` when the
    /// cluster's endpoint is not configured ([`crate::cluster::discover`]).
    pub async fn connect(mut settings: AwsSettings) -> Result<Self, CloudError> {
        let (config, region) = crate::config::load(&settings).await?;
        settings.cluster =
            crate::cluster::discover(&config, settings.cluster, settings.call_timeout).await?;
        let pricing = (!settings.isolated_vpc).then(|| {
            let endpoint = aws_config::Region::new(on_demand::endpoint_region(&region));
            let config = aws_sdk_pricing::config::Builder::from(&config)
                .region(endpoint)
                .build();
            aws_sdk_pricing::Client::from_conf(config)
        });
        let per_api = || AttemptsPerApi {
            attempts: settings.api_max_attempts.clone(),
            base: crate::config::retry(&settings),
        };
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::config::Builder::from(&config)
                .interceptor(per_api())
                .build(),
        );
        let budget = Arc::new(ApiBudget::new(settings.api_rate_limits.clone()));
        let mut zonal_shifts = ZonalShifts::default();
        let zonal_shift_source = if settings.enable_zonal_shift {
            let (source, listed) =
                ZonalShiftSource::connect(&config, &settings.cluster.name, settings.call_timeout)
                    .await?;
            zonal_shifts.replace(listed);
            Some(source)
        } else {
            None
        };
        let clients = Clients {
            ssm: aws_sdk_ssm::Client::from_conf(
                aws_sdk_ssm::config::Builder::from(&config)
                    .interceptor(per_api())
                    .build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(&config)
                    .interceptor(per_api())
                    .build(),
            ),
            ec2,
            pricing,
        };
        Ok(AwsCloud::from_clients(
            clients,
            settings,
            region,
            budget,
            (zonal_shift_source, zonal_shifts),
        ))
    }

    /// The provider around its clients, with nothing learnt yet (no types described, empty caches).
    pub(crate) fn from_clients(
        clients: Clients,
        settings: AwsSettings,
        region: String,
        budget: Arc<ApiBudget>,
        (zonal_shift_source, zonal_shifts): (Option<ZonalShiftSource>, ZonalShifts),
    ) -> AwsCloud {
        AwsCloud {
            fleet_batcher: FleetBatcher::start(
                clients.ec2.clone(),
                settings.fleet_batch.clone(),
                settings.call_timeout,
                budget.clone(),
            ),
            budget,
            ec2: clients.ec2,
            ssm: clients.ssm,
            iam: clients.iam,
            pricing: clients.pricing,
            settings,
            region,
            described: tokio::sync::Mutex::new(None),
            templates: Mutex::new(HashSet::new()),
            ice: Mutex::new(IceCache::new()),
            on_demand: tokio::sync::Mutex::new(Refreshing::new(on_demand::REFRESH)),
            spot: tokio::sync::Mutex::new(Refreshing::new(spot::REFRESH)),
            profiles: Mutex::new(HashMap::new()),
            reservation_answers: tokio::sync::Mutex::new(BTreeMap::new()),
            availability: Mutex::new(Availability::default()),
            reserved_instances: Mutex::new(HashMap::new()),
            zonal_shift_source,
            zonal_shifts: Mutex::new(zonal_shifts),
        }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// The cluster nodes join, as configured or discovered from EKS.
    pub fn cluster(&self) -> &ClusterInfo {
        &self.settings.cluster
    }

    /// The EC2 client (the stand-in kubelet and tests read instances with it).
    pub fn ec2(&self) -> &aws_sdk_ec2::Client {
        &self.ec2
    }

    /// The IAM client (tests read instance profiles with it).
    pub fn iam(&self) -> &aws_sdk_iam::Client {
        &self.iam
    }

    /// One API call, bounded by the call timeout, its error in kerf's terms.
    async fn call<T, E, R>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, SdkError<E, R>>>,
    ) -> Result<T, CloudError>
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        // Boxed: SDK call futures are large, and every caller's future would otherwise hold this one whole (a
        // debug build's reconcile overflows its 2 MiB stack).
        let budgeted = Box::pin(async {
            self.budget.acquire(operation).await;
            call.await
        });
        bounded(operation, self.settings.call_timeout, budgeted).await
    }
}

/// An EC2 instance description in kerf's terms; `None` when it lacks an ID, zone or known state. An instance
/// that may only run in the reservation it is in (`capacity-reservations-only`, how kerf targets one) is
/// `reserved`; one that merely landed in an open reservation is on-demand, as in Karpenter.
pub fn instance_from_ec2(i: &ec2::Instance) -> Option<Instance> {
    let id = i.instance_id()?.to_owned();
    let zone = i.placement()?.availability_zone()?.to_owned();
    let state = InstanceState::from_ec2(i.state()?.name()?.as_str())?;
    let lifecycle = i.instance_lifecycle();
    let targeted = i
        .capacity_reservation_specification()
        .and_then(|s| s.capacity_reservation_preference())
        == Some(&ec2::CapacityReservationPreference::CapacityReservationsOnly);
    let reservation = i
        .capacity_reservation_id()
        .filter(|_| targeted && lifecycle != Some(&ec2::InstanceLifecycleType::Spot))
        .map(|id| InstanceReservation {
            id: id.to_owned(),
            reservation_type: match lifecycle {
                Some(ec2::InstanceLifecycleType::CapacityBlock) => {
                    CapacityReservationType::CapacityBlock
                }
                _ => CapacityReservationType::Default,
            },
            interruptible: lifecycle
                == Some(&ec2::InstanceLifecycleType::InterruptibleCapacityReservation),
        });
    Some(Instance {
        provider_id: provider_id(&zone, &id),
        id,
        instance_type: i.instance_type()?.as_str().to_owned(),
        zone,
        capacity_type: match (lifecycle, &reservation) {
            (Some(ec2::InstanceLifecycleType::Spot), _) => CapacityType::Spot,
            (_, Some(_)) => CapacityType::Reserved,
            _ => CapacityType::OnDemand,
        },
        image_id: i.image_id().unwrap_or_default().to_owned(),
        launch_time: i
            .launch_time()
            .and_then(|t| SystemTime::try_from(*t).ok())
            .unwrap_or(SystemTime::UNIX_EPOCH),
        state,
        subnet_id: i.subnet_id().map(str::to_owned),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        tags: i
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        reservation,
        placement: i.placement().and_then(|p| {
            Some(InstancePlacement {
                group_id: p.group_id().filter(|g| !g.is_empty())?.to_owned(),
                partition: p.partition_number().and_then(|n| u32::try_from(n).ok()),
            })
        }),
    })
}

impl CloudProvider for AwsCloud {
    async fn resolve_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<NodeClass, CloudError> {
        let resolved = ResolvedNodeClass {
            subnets: self.subnets(spec).await?,
            security_groups: self.security_groups(spec).await?,
            amis: self.amis(spec).await?,
            instance_profile: match (&spec.instance_profile, &spec.role) {
                (Some(profile), _) => Some(self.existing_profile(name, profile).await?),
                (None, Some(role)) => Some(self.managed_profile(name, role).await?),
                (None, None) => None,
            },
            // Resolution has no clock of its own: the reservations are judged (ended, expiring) by the wall clock,
            // as EC2 judges them. Boxed: every future this one is awaited in grows by its size, and the debug
            // build's poll frames hold several copies of each (a reconcile's stack is 2 MiB).
            capacity_reservations: if self.settings.reserved_capacity {
                let now = SystemTime::now();
                Some(Box::pin(self.capacity_reservations(name, spec, now)).await?)
            } else {
                None
            },
            placement_group: match &spec.placement_group_selector {
                Some(selector) => Box::pin(self.placement_group(name, selector)).await?,
                None => None,
            },
        };
        NodeClass::ready(name, spec, resolved)
    }

    async fn instance_types(
        &self,
        node_class: &NodeClass,
        now: SystemTime,
    ) -> Result<Vec<InstanceType>, CloudError> {
        self.offered_types(node_class, now).await
    }

    async fn create(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Instance, CloudError> {
        self.launch_instance(request, now).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let id = kerf_core::cloud::instance_id(provider_id)?;
        let not_found = || CloudError::NotFound {
            provider_id: provider_id.to_owned(),
        };
        let out = self
            .call(
                "DescribeInstances",
                self.ec2.describe_instances().instance_ids(id).send(),
            )
            .await;
        let out = match out {
            Err(e) if code_of(&e) == Some("InvalidInstanceID.NotFound") => return Err(not_found()),
            other => other?,
        };
        let instance = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(instance_from_ec2)
            .find(|i| i.id == id && !i.state.is_gone())
            .ok_or_else(not_found)?;
        self.remember_reservations([&instance]);
        Ok(instance)
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let filters = vec![
            ec2::Filter::builder()
                .name("tag-key")
                .values(format!(
                    "{TAG_CLUSTER_PREFIX}{}",
                    self.settings.cluster.name
                ))
                .build(),
            ec2::Filter::builder()
                .name("instance-state-name")
                .set_values(Some(
                    ["pending", "running", "stopping", "stopped"]
                        .map(String::from)
                        .to_vec(),
                ))
                .build(),
        ];
        let reservations = collect_pages("DescribeInstances", |token| {
            let request = self
                .ec2
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .max_results(500)
                .set_next_token(token);
            async move {
                let out = self.call("DescribeInstances", request.send()).await?;
                Ok((out.reservations.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        let instances: Vec<Instance> = reservations
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(instance_from_ec2)
            // Karpenter's second condition (a nodepool tag) is checked here: EC2 ANDs filters of one
            // name, but moto keeps only the last of them.
            .filter(|i| !i.state.is_gone() && i.tags.contains_key(TAG_NODEPOOL))
            .collect();
        self.remember_reservations(&instances);
        Ok(instances)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let id = kerf_core::cloud::instance_id(provider_id)?;
        {
            let shifts = lock(&self.zonal_shifts);
            if let Some(refusal) =
                shifts.refuse_termination(provider_id, &shifts.shifted(SystemTime::now()))
            {
                return Err(refusal);
            }
        }
        let not_found = || CloudError::NotFound {
            provider_id: provider_id.to_owned(),
        };
        let out = self
            .call(
                "TerminateInstances",
                self.ec2.terminate_instances().instance_ids(id).send(),
            )
            .await;
        let out = match out {
            Err(e) if code_of(&e) == Some("InvalidInstanceID.NotFound") => return Err(not_found()),
            other => other?,
        };
        // Its reservation takes an instance more once it is gone (counted once; EC2's next answer settles it).
        if let Some(reservation) = lock(&self.reserved_instances).remove(id) {
            lock(&self.availability).terminated(&reservation);
        }
        let already_gone = out.terminating_instances().iter().any(|change| {
            change
                .previous_state()
                .and_then(|s| s.name())
                .is_some_and(|n| *n == ec2::InstanceStateName::Terminated)
        });
        if already_gone {
            return Err(not_found());
        }
        Ok(())
    }

    fn mark_unavailable(&self, key: OfferingKey, now: SystemTime) {
        lock(&self.ice).mark(key, now);
    }

    async fn check_launch(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Option<LaunchRefusal>, CloudError> {
        self.dry_run_launch(request, now).await
    }

    async fn delete_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<(), CloudError> {
        // Whatever the class says now (it may have had a role before), kerf's profile for it goes, unless the
        // class names that very profile as its own.
        let managed = profile_name(&self.settings.cluster.name, &self.region, name);
        if spec.instance_profile.as_deref() == Some(managed.as_str()) {
            return Ok(());
        }
        self.delete_managed_profile(name).await
    }

    async fn collect_garbage(&self, now: SystemTime) -> Result<usize, CloudError> {
        let cluster_tag = format!("{TAG_CLUSTER_PREFIX}{}", self.settings.cluster.name);
        let filter = ec2::Filter::builder()
            .name("tag-key")
            .values(cluster_tag)
            .build();
        let templates = collect_pages("DescribeLaunchTemplates", |token| {
            let request = self
                .ec2
                .describe_launch_templates()
                .filters(filter.clone())
                .max_results(200)
                .set_next_token(token);
            async move {
                let out = self.call("DescribeLaunchTemplates", request.send()).await?;
                Ok((out.launch_templates.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        let listed: Vec<(String, SystemTime)> = templates
            .into_iter()
            .filter_map(|t| {
                Some((
                    t.launch_template_name?,
                    SystemTime::try_from(t.create_time?).ok()?,
                ))
            })
            .collect();
        let in_use = lock(&self.templates).clone();
        let mut deleted = 0;
        for name in unused_templates(&listed, &in_use, now) {
            let delete = self.ec2.delete_launch_template().launch_template_name(name);
            match self.call("DeleteLaunchTemplate", delete.send()).await {
                Ok(_) => deleted += 1,
                Err(e) if code_of(&e).is_some_and(|c| c.contains("NotFound")) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    async fn zonal_shifts(&self, now: SystemTime) -> Result<BTreeSet<String>, CloudError> {
        let Some(source) = &self.zonal_shift_source else {
            return Ok(BTreeSet::new());
        };
        let listed = source.list(self.settings.call_timeout).await?;
        let mut shifts = lock(&self.zonal_shifts);
        shifts.replace(listed);
        Ok(shifts.shifted(now))
    }

    async fn instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
        let mut seen = std::collections::HashSet::new();
        let mut health = Vec::new();
        for filter in crate::instance_status::listings() {
            let statuses = collect_pages("DescribeInstanceStatus", |token| {
                let request = self
                    .ec2
                    .describe_instance_status()
                    .filters(filter.clone())
                    .max_results(1000)
                    .set_next_token(token);
                async move {
                    let out = self.call("DescribeInstanceStatus", request.send()).await?;
                    Ok((out.instance_statuses.unwrap_or_default(), out.next_token))
                }
            })
            .await?;
            for status in &statuses {
                let Some(instance) = crate::instance_status::health_of(status) else {
                    continue;
                };
                if seen.insert(instance.instance_id.clone()) {
                    health.push(instance);
                }
            }
        }
        Ok(health)
    }
}

#[cfg(test)]
mod tests;
