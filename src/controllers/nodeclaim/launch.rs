//! Launching a NodeClaim's instance: adopt the instance an earlier attempt launched (tagged with the claim's
//! name), or create one; then what the claim's status, labels and annotations say about it.
//!
//! Adoption is what makes a crash between CreateFleet and the status write safe: the instance carries
//! `karpenter.sh/nodeclaim=<name>` from the moment it exists, so the next attempt finds it instead of
//! launching a second one.

use crate::api::nodeclaim::NodeClaim;
use crate::catalog::InstanceType;
use crate::cloud::{CloudError, CloudProvider, Instance, LaunchRequest, NodeClass, TAG_NODECLAIM};
use crate::disruption::{
    ec2nodeclass_hash, hash_annotations, EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// A launched (or adopted) instance and the type it is.
#[derive(Clone, Debug)]
pub struct Launched {
    pub instance: Instance,
    pub instance_type: Option<InstanceType>,
    /// The hash of the EC2NodeClass spec it launched with (static `NodeClassDrift`).
    pub node_class_hash: String,
    /// Found already running for this claim rather than created now.
    pub adopted: bool,
}

/// The live instance tagged for the claim `name`, if any (the oldest, should a bug have made two).
pub fn adoptable<'a>(instances: &'a [Instance], name: &str) -> Option<&'a Instance> {
    instances
        .iter()
        .filter(|i| {
            !i.state.is_gone() && i.tags.get(TAG_NODECLAIM).map(String::as_str) == Some(name)
        })
        .min_by_key(|i| (i.launch_time, i.id.clone()))
}

/// Whether the launch first looks for an instance an earlier attempt launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// An earlier attempt, of this process or of one before it, may have launched an instance: list them.
    Look,
    /// This process created the claim and has not tried to launch it: no instance can carry its name, so the
    /// listing (every instance of the cluster) is skipped.
    Skip,
}

/// Adopts the claim's instance or launches one: from `types` (the class's instance types) the claim's request,
/// then `create`. [`CloudError::InsufficientCapacity`] when no offering had capacity.
pub async fn launch<C: CloudProvider>(
    cloud: &C,
    claim: &NodeClaim,
    node_class: NodeClass,
    types: &[InstanceType],
    adoption: Adoption,
    now: SystemTime,
) -> Result<Launched, CloudError> {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let node_class_hash = ec2nodeclass_hash(&node_class.spec);
    let find_type = |instance: &Instance| {
        types
            .iter()
            .find(|t| t.name == instance.instance_type)
            .cloned()
    };
    if adoption == Adoption::Look {
        let existing = cloud.list().await?;
        if let Some(instance) = adoptable(&existing, name) {
            return Ok(Launched {
                instance_type: find_type(instance),
                instance: instance.clone(),
                node_class_hash,
                adopted: true,
            });
        }
    }
    let request = LaunchRequest::from_node_claim(claim, node_class, types)?;
    tracing::debug!(
        instance_types = request.instance_types.len(),
        "launch request built"
    );
    let instance = cloud.create(&request, now).await?;
    Ok(Launched {
        instance_type: find_type(&instance),
        instance,
        node_class_hash,
        adopted: false,
    })
}

/// The labels a launched claim gets (see [`crate::engine::launch::launched_labels`]), with the reservation of an
/// instance launched into one and the placement group of one launched into a group, as EC2 reports them.
pub fn launched_labels(launched: &Launched) -> BTreeMap<String, String> {
    let instance = &launched.instance;
    let mut labels = crate::engine::launch::launched_labels(
        launched.instance_type.as_ref(),
        &instance.instance_type,
        &instance.zone,
        instance.capacity_type,
    );
    if let Some(r) = &instance.reservation {
        labels.extend(crate::engine::launch::reservation_labels(
            &r.id,
            r.reservation_type.as_str(),
            r.interruptible,
        ));
    }
    labels.extend(crate::engine::launch::placement_labels(
        instance.placement.as_ref(),
        launched.instance_type.as_ref(),
    ));
    labels
}

/// The annotations a launched claim gets: the hash of the class it launched with.
pub fn launched_annotations(launched: &Launched) -> BTreeMap<String, String> {
    hash_annotations(
        EC2NODECLASS_HASH,
        EC2NODECLASS_HASH_VERSION,
        launched.node_class_hash.clone(),
    )
}

/// The status fields a launch fills: provider ID, image, and capacity / allocatable of the type.
pub fn launched_status(launched: &Launched) -> Value {
    let mut status = json!({
        "providerID": launched.instance.provider_id,
        "imageID": launched.instance.image_id,
    });
    if let Some(it) = &launched.instance_type {
        status["capacity"] = json!(it.capacity.to_quantities());
        status["allocatable"] = json!(it.allocatable().to_quantities());
    }
    status
}
