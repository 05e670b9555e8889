//! Provisioning: pods the kube-scheduler marked Unschedulable, batched (idle / max windows), solved with the
//! existing nodes and in-flight NodeClaims counted, turned into NodeClaims. (To be built.)

use super::{Context, Error};
use crate::cloud::CloudProvider;
use std::sync::Arc;

pub async fn run<C: CloudProvider + 'static>(_ctx: Arc<Context<C>>) -> Result<(), Error> {
    Ok(())
}
