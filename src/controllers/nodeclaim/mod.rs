//! A NodeClaim's lifecycle: launch its instance, register its Node, initialize it, and give up on it when it
//! does not register in time. (To be built.)

use super::{Context, Error};
use crate::cloud::CloudProvider;
use std::sync::Arc;

pub async fn run<C: CloudProvider + 'static>(_ctx: Arc<Context<C>>) -> Result<(), Error> {
    Ok(())
}
