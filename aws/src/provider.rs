//! [`AwsCloud`]: the [`CloudProvider`] on EC2 and SSM.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types as ec2;
use kerf::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationType, EC2NodeClassSpec, InstanceStorePolicy,
    PlacementGroupSelector, SecurityGroup, Subnet,
};
use kerf::catalog::{
    CapacityType, CatalogSettings, InstanceType, InstanceTypeInfo, Offering, Pricing, Reservation,
    EFA, RESERVED_PRICE_DIVISOR,
};
use kerf::cloud::api_limits::{ApiAttempts, ApiRateLimits};
use kerf::cloud::zonal_shift::{self, ZonalShifts};
use kerf::cloud::{
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
use crate::fleet_batcher::{FleetBatchSettings, FleetBatcher, FleetCall};
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

/// How kerf talks to AWS and which cluster it launches for.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub cluster: ClusterInfo,
    /// The Kubernetes minor version (`1.30`) that AMI aliases pick EKS-optimized AMIs for.
    pub kubernetes_version: String,
    /// The region; `None` takes it from the standard chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// An endpoint for every service (an emulator); `None` uses AWS (or `AWS_ENDPOINT_URL`).
    pub endpoint_url: Option<String>,
    /// Access key and secret for emulators; `None` uses the standard chain (IRSA, Pod Identity, …).
    pub static_credentials: Option<(String, String)>,
    /// The bound on one API call, retries included.
    pub call_timeout: Duration,
    /// Attempts per call (the SDK retries throttling and 5xx answers, with jittered exponential backoff).
    pub max_attempts: u32,
    /// Attempts of the APIs given their own ([`kerf::cloud::api_limits::ApiAttempts`]), over `max_attempts`.
    pub api_max_attempts: ApiAttempts,
    /// The longest backoff between two attempts (the SDK's standard retry doubles it from 1 s, with jitter).
    pub retry_max_backoff: Duration,
    /// The client-side rate limit of each API ([`kerf::cloud::api_limits`]).
    pub api_rate_limits: ApiRateLimits,
    /// Prices of offerings (on-demand and spot) that AWS's price APIs do not give: by default the shipped
    /// on-demand snapshot (`Pricing::snapshot`), a pricing file over it.
    pub pricing: Pricing,
    /// No route to AWS's public endpoints (Karpenter's `ISOLATED_VPC`): the Price List API is not called and
    /// on-demand prices come from `pricing` only.
    pub isolated_vpc: bool,
    /// The `ReservedCapacity` feature gate: capacity reservations are looked up, offered and targeted. Off, none
    /// is looked up and launch templates say nothing about reservations.
    pub reserved_capacity: bool,
    /// How CreateFleet calls of one instance are gathered into one (docs/cloud.md "CreateFleet batching").
    pub fleet_batch: FleetBatchSettings,
    /// `--enable-zonal-shift`: the cluster's ARC zonal shifts are followed (checked at start).
    pub enable_zonal_shift: bool,
}

impl AwsSettings {
    /// Settings with kerf's defaults: a 30 s call timeout (moto lists every instance type in ~5 s) and 3
    /// attempts.
    pub fn new(cluster: ClusterInfo, kubernetes_version: &str) -> Self {
        AwsSettings {
            cluster,
            kubernetes_version: kubernetes_version.to_owned(),
            region: None,
            endpoint_url: None,
            static_credentials: None,
            call_timeout: Duration::from_secs(30),
            max_attempts: 3,
            retry_max_backoff: Duration::from_secs(20),
            api_max_attempts: ApiAttempts::default(),
            api_rate_limits: ApiRateLimits::default(),
            pricing: Pricing::snapshot(),
            isolated_vpc: false,
            reserved_capacity: true,
            fleet_batch: FleetBatchSettings::default(),
            enable_zonal_shift: false,
        }
    }
}

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
        Ok(AwsCloud {
            fleet_batcher: FleetBatcher::start(
                ec2.clone(),
                settings.fleet_batch.clone(),
                settings.call_timeout,
                budget.clone(),
            ),
            budget,
            ec2,
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
            pricing,
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
        })
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

    /// The on-demand prices of the Price List API (none in an isolated VPC), fetched again twice a day.
    async fn on_demand_prices(&self, now: SystemTime) -> Arc<OnDemandPrices> {
        let Some(client) = &self.pricing else {
            return Arc::default();
        };
        let fetch = || on_demand::fetch(client, &self.region, self.settings.call_timeout);
        self.on_demand
            .lock()
            .await
            .get(now, "on-demand", fetch)
            .await
    }

    /// The spot prices of the price history, fetched again when older than an hour.
    async fn spot_prices(&self, now: SystemTime) -> Arc<SpotPrices> {
        let fetch = || async {
            let rows = self.spot_price_history(now).await?;
            Ok(SpotPrices::from_rows(rows, now))
        };
        self.spot.lock().await.get(now, "spot", fetch).await
    }

    async fn spot_price_history(&self, now: SystemTime) -> Result<Vec<Row>, CloudError> {
        let start = aws_sdk_ec2::primitives::DateTime::from(now);
        let filter = ec2::Filter::builder()
            .name("product-description")
            .values("Linux/UNIX")
            .values("Linux/UNIX (Amazon VPC)")
            .build();
        let rows = collect_pages("DescribeSpotPriceHistory", |token| {
            let request = self
                .ec2
                .describe_spot_price_history()
                .start_time(start)
                .filters(filter.clone())
                .max_results(1000)
                .set_next_token(token);
            async move {
                let out = self
                    .call("DescribeSpotPriceHistory", request.send())
                    .await?;
                Ok((out.spot_price_history.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|p| {
                Some(Row {
                    instance_type: p.instance_type?.as_str().to_owned(),
                    zone: p.availability_zone?,
                    price: p.spot_price?,
                    timestamp: SystemTime::try_from(p.timestamp?).ok()?,
                })
            })
            .collect())
    }

    /// The instance profile kerf manages for class `node_class`, created when missing and made to hold exactly
    /// `role`. A role that does not exist makes the class not ready.
    async fn managed_profile(&self, node_class: &str, role: &str) -> Result<String, CloudError> {
        let cluster = &self.settings.cluster.name;
        let name = profile_name(cluster, &self.region, node_class);
        let role = role_name(role);
        if lock(&self.profiles).get(&name).is_some_and(|r| r == role) {
            return Ok(name);
        }
        let roles = match self.profile_roles(&name).await? {
            Some(roles) => roles,
            None => {
                let mut create = self
                    .iam
                    .create_instance_profile()
                    .instance_profile_name(&name);
                for (key, value) in profile_tags(cluster, node_class) {
                    let tag = aws_sdk_iam::types::Tag::builder()
                        .key(key)
                        .value(value)
                        .build();
                    create =
                        create.tags(tag.map_err(|e| CloudError::InvalidRequest(e.to_string()))?);
                }
                match self.call("CreateInstanceProfile", create.send()).await {
                    Ok(_) => {
                        tracing::info!(instance_profile = %name, ec2nodeclass = node_class, "created instance profile")
                    }
                    Err(e) if code_of(&e) == Some("EntityAlreadyExists") => {}
                    Err(e) => return Err(e),
                }
                vec![]
            }
        };
        let changes = role_changes(&roles, role);
        for old in changes.remove {
            self.remove_role(&name, old).await?;
        }
        if changes.add {
            let add = self
                .iam
                .add_role_to_instance_profile()
                .instance_profile_name(&name)
                .role_name(role);
            if let Err(e) = self.call("AddRoleToInstanceProfile", add.send()).await {
                // A profile holds one role. Another resolution of the class (its status and the provisioner
                // resolve it independently, and so do two replicas) may have added it since we looked.
                let added_meanwhile = code_of(&e) == Some("LimitExceeded")
                    && self
                        .profile_roles(&name)
                        .await?
                        .is_some_and(|roles| roles.iter().any(|r| r == role));
                if !added_meanwhile {
                    return Err(role_error(node_class, role, e));
                }
            }
        }
        lock(&self.profiles).insert(name.clone(), role.to_owned());
        Ok(name)
    }

    /// `profile` (the class's `spec.instanceProfile`) when IAM has it; else the class is not ready, with the
    /// profile named, rather than launching instances EC2 will refuse.
    async fn existing_profile(&self, class: &str, profile: &str) -> Result<String, CloudError> {
        match self.profile_roles(profile).await? {
            Some(_) => Ok(profile.to_owned()),
            None => Err(CloudError::NodeClassNotReady {
                name: class.to_owned(),
                reason: format!("{NO_INSTANCE_PROFILE}: {profile}"),
            }),
        }
    }

    /// The roles instance profile `name` holds; `None` when it does not exist.
    async fn profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, CloudError> {
        let get = self.iam.get_instance_profile().instance_profile_name(name);
        match self.call("GetInstanceProfile", get.send()).await {
            Ok(out) => Ok(Some(
                out.instance_profile
                    .map(|p| p.roles.into_iter().map(|r| r.role_name).collect())
                    .unwrap_or_default(),
            )),
            Err(e) if code_of(&e) == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn remove_role(&self, profile: &str, role: &str) -> Result<(), CloudError> {
        let remove = self
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(profile)
            .role_name(role);
        gone_is_done(
            self.call("RemoveRoleFromInstanceProfile", remove.send())
                .await,
        )
    }

    /// Deletes the instance profile kerf manages for class `node_class`, emptied of its roles first (IAM
    /// refuses to delete a profile that holds one).
    async fn delete_managed_profile(&self, node_class: &str) -> Result<(), CloudError> {
        let name = profile_name(&self.settings.cluster.name, &self.region, node_class);
        lock(&self.profiles).remove(&name);
        let Some(roles) = self.profile_roles(&name).await? else {
            return Ok(());
        };
        for role in &roles {
            self.remove_role(&name, role).await?;
        }
        let delete = self
            .iam
            .delete_instance_profile()
            .instance_profile_name(&name);
        gone_is_done(self.call("DeleteInstanceProfile", delete.send()).await)?;
        tracing::info!(instance_profile = %name, ec2nodeclass = node_class, "deleted instance profile");
        Ok(())
    }

    /// The available placement group `selector` names (by ID, else by name), as Karpenter's provider asks
    /// DescribePlacementGroups; `None` when EC2 knows no such group or it is not available.
    async fn placement_group(
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

    async fn subnets(&self, spec: &EC2NodeClassSpec) -> Result<Vec<ResolvedSubnet>, CloudError> {
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

    async fn security_groups(
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

    /// The capacity reservations `spec` selects at `now`: each query of its terms answered by EC2 (or by an
    /// answer younger than [`QUERY_TTL`]), ended and unusable ones left out, each once, sorted by ID. Every answer
    /// from EC2 also resets the instance counts of the reservations it lists.
    async fn capacity_reservations(
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
    async fn describe_capacity_reservations(
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
    fn with_reservation_counts<'a>(
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
    fn remember_reservations<'i>(&self, instances: impl IntoIterator<Item = &'i Instance>) {
        let mut reserved = lock(&self.reserved_instances);
        for instance in instances {
            if let Some(r) = &instance.reservation {
                reserved.insert(instance.id.clone(), r.id.clone());
            }
        }
    }

    async fn amis(&self, spec: &EC2NodeClassSpec) -> Result<Vec<ResolvedAmi>, CloudError> {
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
    async fn ssm_image_id(&self, name: &str) -> Result<String, CloudError> {
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

    async fn describe_images(
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

    /// The launch template for `config`, created unless it is known to exist. Another replica (or an
    /// earlier run) may have created it first: that counts as existing.
    async fn ensure_template(&self, config: &TemplateConfig) -> Result<String, CloudError> {
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

    fn template_config(
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

    async fn create_fleet(
        &self,
        request: &LaunchRequest<'_>,
        plan: &kerf::cloud::LaunchPlan,
        market: Option<ReservedMarket>,
    ) -> Result<aws_sdk_ec2::operation::create_fleet::CreateFleetOutput, CloudError> {
        // One template per image, and per reservation for a reserved launch: a template targets one reservation,
        // and its overrides are that reservation's pool only.
        // And per EFA interface count, for a claim requesting EFA: types differ in network cards.
        type TemplateKey<'k> = (&'k str, Option<&'k str>, i32);
        let mut by_template: BTreeMap<TemplateKey<'_>, Vec<&kerf::cloud::LaunchOverride>> =
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

/// A `*.NotFound` answer (an ID in a selector that does not exist) as "nothing matched".
fn not_found_is_empty<T>(result: Result<T, CloudError>) -> Result<Option<T>, CloudError> {
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

    async fn create(
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

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let id = kerf::cloud::instance_id(provider_id)?;
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
        let id = kerf::cloud::instance_id(provider_id)?;
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
