//! kerf's [`CloudProvider`](kerf_core::cloud::CloudProvider) on AWS: instance types and offerings from EC2,
//! EC2NodeClass resolution (subnets, security groups, AMIs through SSM aliases, capacity reservations), launch
//! templates per configuration, CreateFleet `instant` launches with the ICE cache (and into reservations), and
//! instance get/list/terminate; and the interruption queue on SQS ([`SqsQueue`]). The AWS SDK lives here only,
//! so the core and the Kubernetes edge stay free of it; this crate uses `kerf-core` alone, never the edge.
//! docs/cloud.md and docs/interruption.md describe the behaviour.

mod budget;
mod capacity_reservations;
mod cluster;
mod config;
mod errors;
mod fleet;
mod fleet_batcher;
mod instance_profile;
mod instance_status;
mod instance_types;
mod launch_check;
mod launch_template;
mod pagination;
mod prices;
mod provider;
mod resolve;
mod retries;
mod sqs;
mod stable_hash;
mod user_data;
mod zonal_shift;

pub use config::AwsSettings;
pub use fleet_batcher::{BatchObserver, FleetBatchSettings, BATCHER};
pub use pagination::{collect_pages, MAX_PAGES};
pub use provider::{instance_from_ec2, AwsCloud};
pub use sqs::{SqsQueue, VISIBILITY_TIMEOUT, WAIT_TIME};
pub use user_data::{registration, ClusterInfo};
