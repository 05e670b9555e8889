//! Leak protection: instances tagged for this cluster that no NodeClaim names are terminated after a grace
//! period. (To be built.)

use super::{Context, Error};
use crate::cloud::CloudProvider;
use std::sync::Arc;

pub async fn run<C: CloudProvider + 'static>(_ctx: Arc<Context<C>>) -> Result<(), Error> {
    Ok(())
}
