//! Termination: a deleted NodeClaim or kerf Node is tainted, drained through the eviction API (PDBs
//! honoured), its instance terminated, then its finalizers removed. (To be built.)

use super::{Context, Error};
use crate::cloud::CloudProvider;
use std::sync::Arc;

pub async fn run<C: CloudProvider + 'static>(_ctx: Arc<Context<C>>) -> Result<(), Error> {
    Ok(())
}
