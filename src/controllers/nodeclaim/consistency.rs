//! NodeClaim consistency (`nodeclaim.consistency`; decided by [`crate::engine::consistency`]): every launched
//! claim with a Node is checked at most every 10 minutes; each issue is a Warning `FailedConsistencyCheck` Event on
//! the claim, and its `ConsistentStateFound` condition says whether any was found.

use super::super::kit::marks;
use super::super::{Context, Error};
use super::registration::node_with_provider_id;
use crate::engine::consistency::{
    conditions, issues, CONSISTENT_STATE_FOUND, FAILED_CONSISTENCY_CHECK, SCAN_EVERY,
};
use crate::engine::marks::Mark;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the claims are looked through for one due a check.
const LOOK_EVERY: Duration = Duration::from_secs(30);

/// Checks claims until the task is dropped.
pub async fn run<C>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    // Claim UID → when it was last checked.
    let mut checked: HashMap<String, Instant> = HashMap::new();
    let mut ticker = tokio::time::interval(LOOK_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = Timestamp::try_from(ctx.clock.now())
            .map_err(|e| Error::Invalid(format!("the clock is out of range: {e}")))?;
        checked.retain(|_, at| at.elapsed() < SCAN_EVERY);
        let nodes = ctx.state.nodes.state();
        let mut writes = Vec::new();
        for claim in ctx.state.node_claims.state() {
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            if checked.contains_key(&uid) {
                continue;
            }
            let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
            let Some(node) = provider_id
                .filter(|id| !id.is_empty())
                .and_then(|id| node_with_provider_id(&nodes, id))
            else {
                continue;
            };
            let name = claim.metadata.name.clone().unwrap_or_default();
            let found = issues(&claim, &node);
            for issue in &found {
                tracing::info!(nodeclaim = %name, %issue, "failed consistency check");
                ctx.events
                    .warning(claim.as_ref(), FAILED_CONSISTENCY_CHECK, issue.clone())
                    .await;
            }
            match conditions(&claim, &found, now) {
                // A healthy claim whose condition is not written yet is looked at again next time, so a lost
                // write does not wait ten minutes; one with issues has had its Events.
                Some(conditions) => {
                    if !found.is_empty() {
                        checked.insert(uid, Instant::now());
                    }
                    writes.push(Mark {
                        claim: name,
                        resource_version: claim.metadata.resource_version.clone(),
                        conditions,
                        changed: vec![CONSISTENT_STATE_FOUND],
                    });
                }
                None => {
                    checked.insert(uid, Instant::now());
                }
            }
        }
        marks::write(&ctx, writes).await;
    }
}
