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

#[cfg(test)]
mod tests {
    //! The controller's part of zonal shifts: which pools hear of a change and how ([`publish`]), and what the
    //! polling loop remembers between polls ([`run`], on a paused clock, over a cloud whose answers are
    //! scripted). Which notices a change makes is [`crate::engine::zonal_shift`]'s, tested there.

    use super::*;
    use crate::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec};
    use crate::api::nodepool::NodePool;
    use crate::catalog::InstanceType;
    use crate::cloud::sim::SimCloud;
    use crate::cloud::{
        CloudError, Instance, InstanceHealth, LaunchRefusal, LaunchRequest, NodeClass, OfferingKey,
    };
    use crate::controllers::state::{store_of, ClusterState};
    use crate::controllers::testkit::{self, event, ApiServer, Exchange, WAIT};
    use serde_json::{json, Value};
    use std::collections::{BTreeMap, VecDeque};
    use std::sync::Mutex;
    use std::time::SystemTime;
    use tokio::sync::{mpsc, oneshot};
    use tokio::task::JoinHandle;
    use tokio::time::timeout;

    const AZ1: &str = "usw2-az1";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    fn discovery() -> BTreeMap<String, String> {
        BTreeMap::from([("discovery".to_owned(), "test".to_owned())])
    }

    /// The in-memory cloud with subnets in us-west-2a (`usw2-az1`) and us-west-2b (`usw2-az2`), a security group
    /// and an AL2023 AMI: the `default` class resolves in it.
    fn sim() -> SimCloud {
        let cloud = SimCloud::new("test", Vec::new());
        testkit::add_network(
            &cloud,
            &[
                ("subnet-1", "us-west-2a", "usw2-az1"),
                ("subnet-2", "us-west-2b", "usw2-az2"),
            ],
            100,
            &discovery(),
        );
        cloud
    }

    /// An EC2NodeClass `name` selecting [`sim`]'s subnets, whose status lists `subnets`.
    fn class(name: &str, subnets: Value) -> EC2NodeClass {
        let mut class = kerf_testkit::ec2nodeclass(
            name,
            json!({"subnetSelectorTerms": [{"tags": discovery()}],
                   "securityGroupSelectorTerms": [{"tags": discovery()}]}),
        );
        class.status = Some(kerf_testkit::object(
            "EC2NodeClass status",
            json!({"subnets": subnets}),
        ));
        class
    }

    /// The `default` class, in both zones of [`sim`].
    fn default_class() -> EC2NodeClass {
        class(
            "default",
            json!([{"id": "subnet-1", "zone": "us-west-2a", "zoneID": "usw2-az1"},
                   {"id": "subnet-2", "zone": "us-west-2b", "zoneID": "usw2-az2"}]),
        )
    }

    /// A NodePool `name` of the EC2NodeClass `class`, with no requirements.
    fn pool(name: &str, class: &str) -> NodePool {
        kerf_testkit::nodepool(
            name,
            json!({"template": {"spec": {"nodeClassRef": {"name": class}}}}),
        )
    }

    fn scripted<C>(
        cloud: C,
        pools: Vec<NodePool>,
        classes: Vec<EC2NodeClass>,
    ) -> (Context<C>, ApiServer) {
        let (client, server) = testkit::apiserver();
        let mut state = ClusterState::of(Vec::new(), Vec::new(), Vec::new());
        state.node_pools = store_of(pools);
        state.node_classes = store_of(classes);
        (testkit::context(client, cloud, state, t0()), server)
    }

    /// An Event of `type_` and `reason` on NodePool `pool` whose message contains `message`.
    fn told(
        pool: &'static str,
        type_: &'static str,
        reason: &'static str,
        message: &'static str,
    ) -> Exchange {
        event(reason, message).check(move |seen| {
            let body = &seen.body;
            assert_eq!(body["type"], type_, "{body}");
            assert_eq!(body["involvedObject"]["kind"], "NodePool", "{body}");
            assert_eq!(body["involvedObject"]["name"], pool, "{body}");
        })
    }

    fn shifted_away(pool: &'static str) -> Exchange {
        told(
            pool,
            "Warning",
            "ZonalShiftActive",
            "offerings in zone us-west-2a (usw2-az1) are unavailable",
        )
    }

    fn back(pool: &'static str) -> Exchange {
        told(
            pool,
            "Normal",
            "ZonalShiftCleared",
            "offerings in zone us-west-2a (usw2-az1) are restored",
        )
    }

    /// Each pool's zones come from its own class's status: a pool whose class is not in the cluster state, and
    /// a class subnet without a zone ID (shifts are listed by zone ID), tell no pool anything.
    #[tokio::test]
    async fn a_new_shift_warns_the_pools_whose_class_has_a_subnet_in_the_zone() {
        let pools = vec![
            pool("open", "default"),
            pool("classless", "missing"),
            pool("unmapped", "no-zone-ids"),
        ];
        let no_zone_ids = class(
            "no-zone-ids",
            json!([{"id": "subnet-1", "zone": "us-west-2a"}]),
        );
        let (ctx, mut server) = scripted(sim(), pools, vec![default_class(), no_zone_ids]);
        server
            .serve(
                vec![shifted_away("open")],
                publish(&ctx, &set(&[]), &set(&[AZ1])),
            )
            .await;
    }

    #[tokio::test]
    async fn a_cleared_shift_is_a_normal_event_on_the_pool() {
        let pools = vec![pool("open", "default")];
        let (ctx, mut server) = scripted(sim(), pools, vec![default_class()]);
        server
            .serve(vec![back("open")], publish(&ctx, &set(&[AZ1]), &set(&[])))
            .await;
    }

    type Answer = Result<BTreeSet<String>, CloudError>;

    /// [`sim`], but the zonal shifts answer `answers` in turn, and each ask is reported on `asked`.
    struct Shifting {
        sim: SimCloud,
        answers: Mutex<VecDeque<Answer>>,
        asked: mpsc::UnboundedSender<()>,
    }

    impl CloudProvider for Shifting {
        async fn resolve_node_class(
            &self,
            name: &str,
            spec: &EC2NodeClassSpec,
        ) -> Result<NodeClass, CloudError> {
            self.sim.resolve_node_class(name, spec).await
        }

        async fn instance_types(
            &self,
            node_class: &NodeClass,
            now: SystemTime,
        ) -> Result<Vec<InstanceType>, CloudError> {
            self.sim.instance_types(node_class, now).await
        }

        async fn create(
            &self,
            request: &LaunchRequest<'_>,
            now: SystemTime,
        ) -> Result<Instance, CloudError> {
            self.sim.create(request, now).await
        }

        async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
            self.sim.get(provider_id).await
        }

        async fn list(&self) -> Result<Vec<Instance>, CloudError> {
            self.sim.list().await
        }

        async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
            self.sim.delete(provider_id).await
        }

        fn mark_unavailable(&self, key: OfferingKey, now: SystemTime) {
            self.sim.mark_unavailable(key, now);
        }

        async fn check_launch(
            &self,
            request: &LaunchRequest<'_>,
            now: SystemTime,
        ) -> Result<Option<LaunchRefusal>, CloudError> {
            self.sim.check_launch(request, now).await
        }

        async fn delete_node_class(
            &self,
            name: &str,
            spec: &EC2NodeClassSpec,
        ) -> Result<(), CloudError> {
            self.sim.delete_node_class(name, spec).await
        }

        async fn instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
            self.sim.instance_health().await
        }

        async fn zonal_shifts(&self, _now: SystemTime) -> Answer {
            let answer = self.answers.lock().expect("lock").pop_front();
            let _ = self.asked.send(());
            answer.expect("an answer scripted for every poll")
        }

        async fn collect_garbage(&self, now: SystemTime) -> Result<usize, CloudError> {
            self.sim.collect_garbage(now).await
        }
    }

    /// Fetches the `default` class's catalog into the cache.
    async fn fill_catalogs(ctx: &Context<Shifting>) {
        let fetched = ctx.catalogs.get(&ctx.cloud, &default_class(), t0()).await;
        assert!(fetched.is_some(), "the default class resolves");
    }

    /// [`run`] on its own task over a [`Shifting`] cloud, with the pool `open` of the `default` class.
    struct Running {
        ctx: Arc<Context<Shifting>>,
        server: ApiServer,
        asked: mpsc::UnboundedReceiver<()>,
        task: JoinHandle<Result<(), Error>>,
    }

    impl Running {
        /// Fills the catalog cache, then starts the loop: its first poll is at once.
        async fn start(answers: Vec<Answer>) -> Running {
            let (tx, asked) = mpsc::unbounded_channel();
            let cloud = Shifting {
                sim: sim(),
                answers: Mutex::new(answers.into()),
                asked: tx,
            };
            let (ctx, server) =
                scripted(cloud, vec![pool("open", "default")], vec![default_class()]);
            let ctx = Arc::new(ctx);
            fill_catalogs(&ctx).await;
            Running {
                task: tokio::spawn(run(ctx.clone())),
                ctx,
                server,
                asked,
            }
        }

        async fn fill_catalogs(&self) {
            fill_catalogs(&self.ctx).await;
        }

        /// Whether the cached catalog is still in use (not expired).
        async fn catalogs_kept(&self) -> bool {
            self.ctx
                .catalogs
                .resolved(&default_class(), t0())
                .await
                .is_some()
        }

        /// Answers the Events of the poll under way, `script` in order (its ask of the cloud is taken, so that
        /// [`Running::quiet`] waits for the next one).
        async fn told(&mut self, mut script: Vec<Exchange>) {
            let (answered, last) = oneshot::channel();
            let final_exchange = script.pop().expect("an Event");
            script.push(final_exchange.check(move |_| {
                let _ = answered.send(());
            }));
            self.server
                .serve(script, async {
                    last.await.expect("the last Event was answered");
                })
                .await;
            self.asked.try_recv().expect("the poll asked the cloud");
        }

        /// Waits for the poll under way to ask the cloud, and lets the loop finish with its answer; it must
        /// make no request (the next `told` would get it first).
        async fn quiet(&mut self) {
            timeout(WAIT, self.asked.recv())
                .await
                .expect("the cloud is asked in time")
                .expect("the cloud is still there");
            tokio::task::yield_now().await;
        }

        /// Moves the paused clock on to the next poll.
        async fn next_poll(&self) {
            tokio::time::advance(POLL).await;
        }

        async fn stop(self) {
            self.task.abort();
            match self.task.await {
                Err(e) if e.is_cancelled() => {}
                other => panic!("the loop ended on its own: {other:?}"),
            }
        }
    }

    /// The loop tells the pools of a change once: a poll that answers what the last one did publishes nothing and
    /// keeps the cached catalogs; a changed answer expires them (the next solve sees the zone go or come back)
    /// and tells the pools.
    #[tokio::test(start_paused = true)]
    async fn only_a_changed_answer_expires_the_catalogs_and_tells_the_pools() {
        let mut running =
            Running::start(vec![Ok(set(&[AZ1])), Ok(set(&[AZ1])), Ok(set(&[]))]).await;
        running.told(vec![shifted_away("open")]).await;
        assert!(
            !running.catalogs_kept().await,
            "a new shift expires the catalogs"
        );

        running.fill_catalogs().await;
        running.next_poll().await;
        running.quiet().await;
        assert!(running.catalogs_kept().await, "the same answer keeps them");

        running.next_poll().await;
        running.told(vec![back("open")]).await;
        assert!(
            !running.catalogs_kept().await,
            "a cleared shift expires them"
        );
        running.stop().await;
    }

    /// A poll the cloud fails is skipped: the last answer stands, so the same shifts seen after the failure are
    /// no change (no second Warning), and their clearing still is.
    #[tokio::test(start_paused = true)]
    async fn a_failed_poll_keeps_the_last_answer() {
        let refused = CloudError::Api {
            operation: "ListZonalShifts",
            code: "ThrottlingException".into(),
            message: "slow down".into(),
        };
        let answers = vec![Ok(set(&[AZ1])), Err(refused), Ok(set(&[AZ1])), Ok(set(&[]))];
        let mut running = Running::start(answers).await;
        running.told(vec![shifted_away("open")]).await;
        running.fill_catalogs().await;

        running.next_poll().await;
        running.quiet().await;
        running.next_poll().await;
        running.quiet().await;
        assert!(running.catalogs_kept().await);

        running.next_poll().await;
        running.told(vec![back("open")]).await;
        running.stop().await;
    }
}
