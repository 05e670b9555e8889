//! The in-memory cloud: a deterministic model of EC2 for tests and `kerf simulate`. It resolves
//! EC2NodeClasses against the subnets, security groups and AMIs it is given, offers the instance types of a
//! catalog in the zones of the class's subnets, and launches like an instant CreateFleet: the plan's pools
//! in order, skipping (and reporting to the ICE cache) those an injected capacity fault matches. API errors
//! and latency can be injected per operation. Instance IDs count up from `i-00000000000000001`; every time
//! comes from the caller.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::error::CloudError;
use super::ice::{IceCache, OfferingKey};
use super::instance::{instance_id, provider_id, Instance, InstanceReservation, InstanceState};
use super::launch::{plan, LaunchRequest, TAG_CLUSTER_PREFIX};
use super::node_class::{
    newest_per_architecture, NodeClass, PlacementGroup, PlacementStrategy, ResolvedAmi,
    ResolvedNodeClass, ResolvedSubnet,
};
use super::zonal_shift::{self, ZonalShift, ZonalShifts};
use super::{CloudProvider, InstanceHealth, LaunchRefusal, StatusCheck};
use crate::api::ec2nodeclass::{EC2NodeClassSpec, SecurityGroup, Subnet};
use crate::catalog::{CapacityType, InstanceType};

/// The operations faults and latency can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    ResolveNodeClass,
    InstanceTypes,
    Create,
    Get,
    List,
    Delete,
    DeleteNodeClass,
    CheckLaunch,
}

/// Offerings a launch finds without capacity; `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacityFault {
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<CapacityType>,
}

impl CapacityFault {
    fn matches(&self, key: &OfferingKey) -> bool {
        self.instance_type
            .as_ref()
            .is_none_or(|t| *t == key.instance_type)
            && self.zone.as_ref().is_none_or(|z| *z == key.zone)
            && self.capacity_type.is_none_or(|ct| ct == key.capacity_type)
    }
}

/// A subnet of the simulated VPC.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSubnet {
    pub subnet: Subnet,
    pub available_ips: i64,
    pub tags: BTreeMap<String, String>,
}

/// A security group of the simulated VPC.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSecurityGroup {
    pub group: SecurityGroup,
    pub tags: BTreeMap<String, String>,
}

/// An AMI the simulated account can launch. An alias `family@version` selects the AMIs registered under its
/// family (`al2023`), whatever the version.
#[derive(Clone, Debug, PartialEq)]
pub struct SimAmi {
    pub ami: ResolvedAmi,
    pub alias_family: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// The in-memory cloud.
#[derive(Debug)]
pub struct SimCloud {
    cluster_name: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    instance_types: Vec<InstanceType>,
    subnets: Vec<SimSubnet>,
    security_groups: Vec<SimSecurityGroup>,
    amis: Vec<SimAmi>,
    placement_groups: Vec<PlacementGroup>,
    instances: BTreeMap<String, Instance>,
    /// What the status checks report, by instance ID.
    health: BTreeMap<String, Vec<StatusCheck>>,
    /// Instance profiles made for classes' roles.
    instance_profiles: BTreeSet<String>,
    launched: u64,
    ice: IceCache,
    /// The zonal shifts ARC lists for the cluster now, and those the provider last asked for (it acts on these).
    arc_shifts: Vec<ZonalShift>,
    zonal_shifts: ZonalShifts,
    /// The zone IDs shifted at the provider's last ask: instances there are not terminated.
    shifted: BTreeSet<String>,
    capacity_faults: Vec<CapacityFault>,
    api_faults: HashMap<Operation, VecDeque<CloudError>>,
    latency: HashMap<Operation, Duration>,
}

impl SimCloud {
    /// A cloud for the cluster `cluster_name` that sells `instance_types` (their offerings say where and at
    /// what price), with no subnets, security groups or AMIs yet.
    pub fn new(cluster_name: &str, instance_types: Vec<InstanceType>) -> Self {
        SimCloud {
            cluster_name: cluster_name.to_owned(),
            state: Mutex::new(State {
                instance_types,
                ..State::default()
            }),
        }
    }

    /// The zonal shifts ARC lists from now on (the provider sees them at its next [`CloudProvider::zonal_shifts`]).
    pub fn set_zonal_shifts(&self, shifts: Vec<ZonalShift>) {
        self.state().arc_shifts = shifts;
    }

    pub fn add_subnet(&self, subnet: SimSubnet) {
        self.state().subnets.push(subnet);
    }

    pub fn add_security_group(&self, group: SimSecurityGroup) {
        self.state().security_groups.push(group);
    }

    pub fn add_ami(&self, ami: SimAmi) {
        self.state().amis.push(ami);
    }

    /// An available placement group classes may select by name or ID.
    pub fn add_placement_group(&self, group: PlacementGroup) {
        self.state().placement_groups.push(group);
    }

    /// Makes the status checks of instance `instance_id` report `checks` (none: healthy again).
    pub fn set_health(&self, instance_id: &str, checks: Vec<StatusCheck>) {
        let mut state = self.state();
        if checks.is_empty() {
            state.health.remove(instance_id);
        } else {
            state.health.insert(instance_id.to_owned(), checks);
        }
    }

    /// The instance profiles made for classes' roles and not yet deleted.
    pub fn instance_profiles(&self) -> Vec<String> {
        self.state().instance_profiles.iter().cloned().collect()
    }

    /// The instance profile the cloud makes for class `name`'s role.
    fn managed_profile(&self, name: &str) -> String {
        format!("{}_{name}", self.cluster_name)
    }

    /// From now on, launches find no capacity in the offerings `fault` matches.
    pub fn inject_insufficient_capacity(&self, fault: CapacityFault) {
        self.state().capacity_faults.push(fault);
    }

    pub fn clear_insufficient_capacity(&self) {
        self.state().capacity_faults.clear();
    }

    /// The next `count` calls of `operation` fail with `error`.
    pub fn inject_api_error(&self, operation: Operation, error: CloudError, count: usize) {
        let mut state = self.state();
        let queue = state.api_faults.entry(operation).or_default();
        queue.extend(std::iter::repeat_n(error, count));
    }

    /// Every call of `operation` takes `latency` (on the tokio clock, so paused-time tests jump over it).
    pub fn set_latency(&self, operation: Operation, latency: Duration) {
        self.state().latency.insert(operation, latency);
    }

    /// Every instance ever launched, terminated ones included, by ID.
    pub fn instances(&self) -> BTreeMap<String, Instance> {
        self.state().instances.clone()
    }

    /// Whether the ICE cache holds `key` at `now`.
    pub fn is_unavailable(&self, key: &OfferingKey, now: SystemTime) -> bool {
        self.state().ice.is_unavailable(key, now)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every update is one assignment or push).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits out the injected latency of `operation`, then takes its next injected error, if any.
    async fn enter(&self, operation: Operation) -> Result<(), CloudError> {
        let latency = self.state().latency.get(&operation).copied();
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        match self
            .state()
            .api_faults
            .get_mut(&operation)
            .and_then(VecDeque::pop_front)
        {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn resolve(&self, name: &str, spec: &EC2NodeClassSpec) -> ResolvedNodeClass {
        let state = self.state();
        let subnet_terms = spec.subnet_selector_terms.as_deref().unwrap_or_default();
        let group_terms = spec
            .security_group_selector_terms
            .as_deref()
            .unwrap_or_default();
        let ami_terms = spec.ami_selector_terms.as_deref().unwrap_or_default();
        let subnets = state
            .subnets
            .iter()
            .filter(|s| {
                subnet_terms.iter().any(|t| {
                    term_matches(
                        t.id.as_deref(),
                        None,
                        t.tags.as_ref(),
                        &s.subnet.id,
                        None,
                        &s.tags,
                    )
                })
            })
            .map(|s| ResolvedSubnet {
                subnet: s.subnet.clone(),
                available_ips: s.available_ips,
            })
            .collect();
        let security_groups = state
            .security_groups
            .iter()
            .filter(|g| {
                group_terms.iter().any(|t| {
                    term_matches(
                        t.id.as_deref(),
                        t.name.as_deref(),
                        t.tags.as_ref(),
                        &g.group.id,
                        g.group.name.as_deref(),
                        &g.tags,
                    )
                })
            })
            .map(|g| g.group.clone())
            .collect();
        let amis = state.amis.iter().filter(|a| {
            ami_terms.iter().any(|t| match &t.alias {
                Some(alias) => {
                    let family = alias.split('@').next().unwrap_or_default();
                    a.alias_family.as_deref() == Some(family)
                }
                None => term_matches(
                    t.id.as_deref(),
                    t.name.as_deref(),
                    t.tags.as_ref(),
                    &a.ami.id,
                    a.ami.name.as_deref(),
                    &a.tags,
                ),
            })
        });
        ResolvedNodeClass {
            subnets,
            security_groups,
            amis: newest_per_architecture(amis.map(|a| a.ami.clone())),
            instance_profile: spec
                .instance_profile
                .clone()
                .or_else(|| spec.role.as_ref().map(|_| self.managed_profile(name))),
            // Reserved capacity comes from the catalog's reserved offerings here, not from selector terms.
            capacity_reservations: None,
            placement_group: spec.placement_group_selector.as_ref().and_then(|selector| {
                state
                    .placement_groups
                    .iter()
                    .find(|g| match (&selector.id, &selector.name) {
                        (Some(id), _) => *id == g.id,
                        (None, Some(name)) => *name == g.name,
                        (None, None) => false,
                    })
                    .cloned()
            }),
        }
    }
}

/// Whether a selector term (an ID, a name or tags; what it sets must all hold) selects a resource. A tag
/// value `*` matches any value.
fn term_matches(
    id: Option<&str>,
    name: Option<&str>,
    tags: Option<&BTreeMap<String, String>>,
    resource_id: &str,
    resource_name: Option<&str>,
    resource_tags: &BTreeMap<String, String>,
) -> bool {
    if id.is_none() && name.is_none() && tags.is_none_or(BTreeMap::is_empty) {
        return false;
    }
    id.is_none_or(|id| id == resource_id)
        && name.is_none_or(|name| Some(name) == resource_name)
        && tags.into_iter().flatten().all(|(key, value)| {
            resource_tags
                .get(key)
                .is_some_and(|actual| value == "*" || value == actual)
        })
}

impl CloudProvider for SimCloud {
    async fn resolve_node_class(
        &self,
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<NodeClass, CloudError> {
        self.enter(Operation::ResolveNodeClass).await?;
        let resolved = self.resolve(name, spec);
        if spec.instance_profile.is_none() && spec.role.is_some() {
            let profile = self.managed_profile(name);
            self.state().instance_profiles.insert(profile);
        }
        NodeClass::ready(name, spec, resolved)
    }

    /// The in-memory cloud authorizes every launch; a fault on [`Operation::CheckLaunch`] makes it unable to
    /// tell.
    async fn check_launch(
        &self,
        _request: &LaunchRequest<'_>,
        _now: SystemTime,
    ) -> Result<Option<LaunchRefusal>, CloudError> {
        self.enter(Operation::CheckLaunch).await?;
        Ok(None)
    }

    async fn delete_node_class(
        &self,
        name: &str,
        _spec: &EC2NodeClassSpec,
    ) -> Result<(), CloudError> {
        self.enter(Operation::DeleteNodeClass).await?;
        let profile = self.managed_profile(name);
        self.state().instance_profiles.remove(&profile);
        Ok(())
    }

    async fn instance_types(
        &self,
        node_class: &NodeClass,
        now: SystemTime,
    ) -> Result<Vec<InstanceType>, CloudError> {
        self.enter(Operation::InstanceTypes).await?;
        let mut state = self.state();
        let zone_ids = node_class.resolved.zone_ids();
        for (zone, id) in &zone_ids {
            if let Some(id) = id {
                state.zonal_shifts.learn_zone(zone, id);
            }
        }
        let mut types: Vec<InstanceType> = state
            .instance_types
            .iter()
            .map(|it| {
                let mut it = it.clone();
                it.offerings
                    .retain(|o| zone_ids.contains_key(o.zone.as_str()));
                for offering in &mut it.offerings {
                    if let Some(Some(zone_id)) = zone_ids.get(offering.zone.as_str()) {
                        offering.zone_id = Some((*zone_id).clone());
                    }
                }
                it
            })
            .filter(|it| !it.offerings.is_empty())
            .collect();
        if let Some(group) = &node_class.resolved.placement_group {
            types.iter_mut().for_each(|it| group.place(it));
        }
        state.ice.apply(&mut types, now);
        zonal_shift::apply(&state.shifted, &mut types);
        Ok(types)
    }

    async fn create(
        &self,
        request: &LaunchRequest<'_>,
        now: SystemTime,
    ) -> Result<Instance, CloudError> {
        self.enter(Operation::Create).await?;
        let mut state = self.state();
        let plan = plan(request, &state.ice, now)?;
        let mut tried = Vec::new();
        for pool in &plan.overrides {
            let key = pool.key(plan.capacity_type);
            if state.capacity_faults.iter().any(|f| f.matches(&key)) {
                state.ice.mark(key.clone(), now);
                tried.push(key);
                continue;
            }
            state.launched += 1;
            let id = format!("i-{:017x}", state.launched);
            let security_group_ids = request
                .node_class
                .resolved
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect();
            let instance = Instance {
                provider_id: provider_id(&pool.zone, &id),
                id: id.clone(),
                instance_type: pool.instance_type.clone(),
                zone: pool.zone.clone(),
                capacity_type: plan.capacity_type,
                image_id: pool.image_id.clone(),
                launch_time: now,
                state: InstanceState::Running,
                subnet_id: Some(pool.subnet_id.clone()),
                security_group_ids,
                tags: request.tags(&self.cluster_name),
                // The in-memory cloud knows reservations as the catalog's offerings say them.
                reservation: pool.reservation_id.as_deref().map(|id| {
                    let offered = request
                        .instance_types
                        .iter()
                        .flat_map(|it| &it.offerings)
                        .filter_map(|o| o.reservation.as_ref())
                        .find(|r| r.id == id);
                    InstanceReservation {
                        id: id.to_owned(),
                        reservation_type: offered.map(|r| r.reservation_type).unwrap_or_default(),
                        interruptible: offered.is_some_and(|r| r.interruptible),
                    }
                }),
                // EC2 spreads instances that name no partition over the group's partitions.
                placement: request.placement().map(|mut placement| {
                    let count = request
                        .node_class
                        .resolved
                        .placement_group
                        .as_ref()
                        .filter(|g| g.strategy == PlacementStrategy::Partition)
                        .map_or(0, |g| u64::from(g.partition_count));
                    if placement.partition.is_none() && count > 0 {
                        placement.partition = u32::try_from(state.launched % count + 1).ok();
                    }
                    placement
                }),
            };
            state.instances.insert(id, instance.clone());
            return Ok(instance);
        }
        Err(CloudError::InsufficientCapacity { offerings: tried })
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.enter(Operation::Get).await?;
        let id = instance_id(provider_id)?;
        self.state()
            .instances
            .get(id)
            .filter(|i| !i.state.is_gone())
            .cloned()
            .ok_or_else(|| CloudError::NotFound {
                provider_id: provider_id.to_owned(),
            })
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.enter(Operation::List).await?;
        let cluster_tag = format!("{TAG_CLUSTER_PREFIX}{}", self.cluster_name);
        Ok(self
            .state()
            .instances
            .values()
            .filter(|i| !i.state.is_gone() && i.tags.contains_key(&cluster_tag))
            .cloned()
            .collect())
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.enter(Operation::Delete).await?;
        let id = instance_id(provider_id)?;
        let mut state = self.state();
        if let Some(refusal) = state
            .zonal_shifts
            .refuse_termination(provider_id, &state.shifted)
        {
            return Err(refusal);
        }
        match state.instances.get_mut(id) {
            Some(instance) if !instance.state.is_gone() => {
                instance.state = InstanceState::Terminated;
                Ok(())
            }
            _ => Err(CloudError::NotFound {
                provider_id: provider_id.to_owned(),
            }),
        }
    }

    fn mark_unavailable(&self, key: OfferingKey, now: SystemTime) {
        self.state().ice.mark(key, now);
    }

    async fn zonal_shifts(&self, now: SystemTime) -> Result<BTreeSet<String>, CloudError> {
        let mut state = self.state();
        let listed = state.arc_shifts.clone();
        state.zonal_shifts.replace(listed);
        state.shifted = state.zonal_shifts.shifted(now);
        Ok(state.shifted.clone())
    }

    /// The in-memory cloud keeps no launch configurations.
    async fn collect_garbage(&self, _now: SystemTime) -> Result<usize, CloudError> {
        Ok(0)
    }

    async fn instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
        Ok(self
            .state()
            .health
            .iter()
            .map(|(id, checks)| InstanceHealth {
                instance_id: id.clone(),
                checks: checks.clone(),
            })
            .collect())
    }
}
