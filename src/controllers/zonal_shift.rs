//! ARC zonal shifts (`--enable-zonal-shift`; Karpenter's AWS `zonalshift` controller): every 30 s the cloud is
//! asked which zones the cluster's traffic is shifted away from. The cloud provider then offers nothing in them
//! and terminates nothing there; when the set changes, the cached catalogs are fetched again at once (so the next
//! solve avoids the zone) and each NodePool that can launch into a zone that shifted or cleared gets an Event
//! ([`crate::engine::zonal_shift`]).

use super::{Context, Error};
use crate::cloud::CloudProvider;
use crate::engine::zonal_shift::{notices, ZoneInfo};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// How often the shifts are asked for (Karpenter requeues its singleton after 30 s).
pub const POLL: Duration = Duration::from_secs(30);

/// Polls until the task is dropped; a failed poll is logged and the last answer kept until the next.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut previous = BTreeSet::new();
    let mut ticker = tokio::time::interval(POLL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = ctx.clock.now();
        let current = match ctx.cloud.zonal_shifts(now).await {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(%error, "could not list the zonal shifts; retrying in 30 s");
                continue;
            }
        };
        if current == previous {
            continue;
        }
        tracing::info!(shifted = ?current, "the zones shifted away from changed");
        ctx.catalogs.expire().await;
        publish(&ctx, &previous, &current).await;
        previous = current;
    }
}

/// The Events for a change from `previous` to `current`, on the pools that can launch into the zones.
async fn publish<C: CloudProvider>(
    ctx: &Context<C>,
    previous: &BTreeSet<String>,
    current: &BTreeSet<String>,
) {
    let classes: HashMap<String, Vec<ZoneInfo>> = ctx
        .state
        .node_classes
        .state()
        .iter()
        .map(|class| {
            let zones = class
                .status
                .as_ref()
                .and_then(|s| s.subnets.as_deref())
                .unwrap_or_default()
                .iter()
                .filter_map(|s| {
                    Some(ZoneInfo {
                        zone: s.zone.clone(),
                        zone_id: s.zone_id.clone()?,
                    })
                })
                .collect();
            (class.metadata.name.clone().unwrap_or_default(), zones)
        })
        .collect();
    let pools = ctx.state.node_pools.state();
    let with_zones: Vec<_> = pools
        .iter()
        .filter_map(|pool| {
            let zones = classes.get(&pool.spec.template.spec.node_class_ref.name)?;
            Some((pool.as_ref(), zones.clone()))
        })
        .collect();
    for notice in notices(previous, current, &with_zones) {
        let Some(pool) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(notice.nodepool.as_str()))
        else {
            continue;
        };
        if notice.is_warning() {
            ctx.events
                .warning(pool.as_ref(), notice.reason(), notice.message())
                .await;
        } else {
            ctx.events
                .normal(pool.as_ref(), notice.reason(), notice.message())
                .await;
        }
    }
}
