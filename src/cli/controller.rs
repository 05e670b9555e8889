//! `kerf controller`: its flags (Karpenter's setting names as environment fallbacks). The command itself runs
//! in the `kerf-cmd` crate, which builds the AWS cloud provider and hands it to [`crate::controllers::run`].

use crate::cli::validate::{CatalogArgs, DEFAULT_REGION};
use crate::cli::webhook::shutdown_signal;
use crate::cloud::api_limits::{ApiAttempts, ApiRateLimits};
use crate::cloud::metered::Metered;
use crate::cloud::CloudProvider;
use crate::controllers::catalogs::Catalogs;
use crate::controllers::metrics::Metrics;
use crate::controllers::provisioning::advice_refresh::AdviceCatalog;
use crate::controllers::serve;
use crate::controllers::state::ClusterState;
use crate::controllers::{self, Context, Settings};
use crate::engine::{FeatureGates, SystemClock};
use crate::interruption::MessageQueue;
use crate::kube::events::Events;
use crate::kube::leader::{LeaderElector, LeaseConfig};
use crate::kube::throttle::Throttle;
use crate::scheduling::{MinValuesPolicy, Policies, PreferencePolicy, SchedulerConfig};
use anyhow::Context as _;
use kerf_webhooks::ReadyFlag;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

#[derive(clap::Args, Debug)]
pub struct ControllerArgs {
    /// The cluster's name: instances are tagged `kubernetes.io/cluster/<name>` and join it.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// The API server URL nodes join (their user data); when unset or empty, EKS `DescribeCluster` on the
    /// cluster's name gives it (and the CA bundle and service CIDR, where those are unset too).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// Base64 PEM of the cluster CA, for the nodes' user data.
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR, for the nodes' user data.
    #[arg(long, env = "CLUSTER_CIDR")]
    pub cluster_cidr: Option<String>,
    /// The Kubernetes minor version (`1.30`) AMI aliases resolve EKS-optimized AMIs for; by default the
    /// apiserver's, read at start as Karpenter reads it.
    #[arg(long, env = "KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
    /// AWS region; by default the standard chain's (`AWS_REGION`, profile, instance metadata).
    #[arg(long, env = "AWS_REGION")]
    pub aws_region: Option<String>,
    /// One endpoint for every AWS service (an emulator such as moto); AWS itself when unset.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
    /// Prices (USD per hour) of on-demand and spot offerings, used where AWS's price APIs give none (over the
    /// shipped on-demand snapshot, which prices what neither knows).
    #[arg(long, env = "KERF_PRICING_FILE")]
    pub pricing_file: Option<PathBuf>,
    /// Client-side rate limits of the EC2, IAM and SSM APIs kerf calls, `API=RATE[:BURST]` (calls per second, bucket
    /// size) separated by commas; `read` and `write` set every `Describe*`/`Get*` call and every other call. Over
    /// kerf's defaults (reads 20/s with bursts of 100, writes 5/s with bursts of 50); an unknown API stops the
    /// controller at start.
    #[arg(long, env = "KERF_AWS_API_RATE_LIMITS", default_value = "", hide_default_value = true, value_parser = parse_api_limits)]
    pub aws_api_rate_limits: ApiRateLimits,
    /// Attempts per AWS call: throttling, 5xx answers and connection errors are retried with jittered exponential
    /// backoff (the AWS SDK's standard retry).
    #[arg(long, env = "KERF_AWS_MAX_ATTEMPTS", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub aws_max_attempts: u32,
    /// Attempts of the APIs that get their own number, `API=N` (1 to 10) separated by commas, e.g. `CreateFleet=1`
    /// to leave a failed launch to the next reconcile; the others make `--aws-max-attempts`.
    #[arg(long, env = "KERF_AWS_API_MAX_ATTEMPTS", default_value = "", hide_default_value = true, value_parser = parse_api_attempts)]
    pub aws_api_max_attempts: ApiAttempts,
    /// The longest backoff between two attempts of an AWS call.
    #[arg(long, env = "KERF_AWS_RETRY_MAX_BACKOFF", default_value = "20s", value_parser = parse_backoff)]
    pub aws_retry_max_backoff: Duration,
    /// No route to AWS's public endpoints: on-demand prices come from the pricing file and the shipped snapshot,
    /// the Price List API is not called.
    #[arg(long, env = "ISOLATED_VPC", default_value_t = false, action = clap::ArgAction::Set)]
    pub isolated_vpc: bool,
    /// How long a batch of pending pods waits for more pods after the last one arrived.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub batch_idle_duration: Duration,
    /// How long a batch waits at most from its first pod.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub batch_max_duration: Duration,
    /// Calls per second to the apiserver, smoothed (Karpenter's `--kube-client-qps`).
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_client_qps: u32,
    /// The most calls to the apiserver at once above that rate (Karpenter's `--kube-client-burst`).
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_client_burst: u32,
    /// How the solves treat preferences (preferred node and pod affinity and anti-affinity, `ScheduleAnyway`
    /// topology spread): `Respect` them while they can be met, or `Ignore` them.
    #[arg(long, env = "PREFERENCE_POLICY", default_value = "Respect", value_parser = parse_policy::<PreferencePolicy>)]
    pub preference_policy: PreferencePolicy,
    /// What a solve does when a NodePool's `minValues` cannot be met: `Strict` leaves the pods pending,
    /// `BestEffort` launches with as many distinct values as there are.
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict", value_parser = parse_policy::<MinValuesPolicy>)]
    pub min_values_policy: MinValuesPolicy,
    /// What of the cluster's kube-scheduler configuration the solves must mirror, as YAML or JSON: today
    /// `{podTopologySpread: {defaultConstraints: [...]}}`, the topology spread kube-scheduler gives every pod that
    /// declares none (each pod's selector deduced from its Services and controller). Empty: none. An invalid
    /// document stops the controller at start.
    #[arg(long, env = "SCHEDULER_CONFIG", default_value = "", hide_default_value = true, value_parser = parse_scheduler_config)]
    pub scheduler_config: SchedulerConfig,
    /// Karpenter's feature gates, `Name=true,Other=false`; gates left out keep Karpenter's defaults. An unknown
    /// gate, or one kerf does not implement switched on, stops the controller at start.
    #[arg(long, env = "FEATURE_GATES", default_value = "", value_parser = parse_gates)]
    pub feature_gates: FeatureGates,
    /// Follow the cluster's ARC zonal shifts: at start EKS DescribeCluster and ARC GetManagedResource must find the
    /// cluster (registered with zonal shift), else the controller stops; then every 30 s no offering is used and no
    /// instance terminated in a zone traffic is shifted away from.
    #[arg(long, env = "ENABLE_ZONAL_SHIFT", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_zonal_shift: bool,
    /// SQS queue of interruption events (spot interruption, scheduled changes, state changes).
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// Address of `/metrics` (Prometheus text).
    #[arg(long, env = "KERF_METRICS_BIND", default_value = "0.0.0.0:8080")]
    pub metrics_bind: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, env = "KERF_HEALTH_BIND", default_value = "0.0.0.0:8081")]
    pub health_bind: SocketAddr,
    /// Elect one active replica through a coordination.k8s.io Lease; off only for a single local process.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How often instances and NodeClaims are checked against each other: leaked instances terminated, NodeClaims
    /// whose instance is gone deleted.
    #[arg(long, env = "KERF_GC_INTERVAL", default_value = "2m", value_parser = humantime::parse_duration)]
    pub gc_interval: Duration,
    /// How often NodeClaims in capacity reservations are checked against EC2: demoted to on-demand once their
    /// reservation has ended, deleted once their capacity block is expiring (Karpenter checks every minute).
    #[arg(long, env = "KERF_RESERVATION_SYNC_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub reservation_sync_interval: Duration,
    /// Namespace of the Lease (the chart passes the pod's).
    #[arg(long, env = "KERF_NAMESPACE", default_value = "kube-system")]
    pub namespace: String,
}

impl ControllerArgs {
    /// The settings the controllers run with.
    pub fn settings(&self) -> Settings {
        Settings {
            cluster_name: self.cluster_name.clone(),
            batch_idle: self.batch_idle_duration,
            batch_max: self.batch_max_duration,
            gc_interval: self.gc_interval,
            reservation_sync_interval: self.reservation_sync_interval,
            policies: Policies {
                preferences: self.preference_policy,
                min_values: self.min_values_policy,
            },
            scheduler_config: self.scheduler_config.clone(),
            feature_gates: self.feature_gates,
            zonal_shift: self.enable_zonal_shift,
            ..Settings::default()
        }
    }
}

fn parse_gates(value: &str) -> Result<FeatureGates, String> {
    FeatureGates::parse(value).map_err(|e| e.to_string())
}

fn parse_api_limits(value: &str) -> Result<ApiRateLimits, String> {
    ApiRateLimits::parse(value)
}

fn parse_api_attempts(value: &str) -> Result<ApiAttempts, String> {
    ApiAttempts::parse(value)
}

/// A backoff bound: at least 1 s (the SDK's first backoff), at most 5 minutes (a call's whole budget is smaller).
fn parse_backoff(value: &str) -> Result<Duration, String> {
    let backoff = humantime::parse_duration(value).map_err(|e| e.to_string())?;
    if backoff < Duration::from_secs(1) || backoff > Duration::from_secs(300) {
        return Err(format!("{value}: must be 1s to 5m"));
    }
    Ok(backoff)
}

fn parse_scheduler_config(value: &str) -> Result<SchedulerConfig, String> {
    SchedulerConfig::parse(value).map_err(|e| e.to_string())
}

fn parse_policy<P: std::str::FromStr<Err = String>>(value: &str) -> Result<P, String> {
    value.parse()
}

/// The Lease the replicas elect their leader on.
pub const LEASE_NAME: &str = "kerf-leader-election";

/// Runs the controllers with `cloud` (and the interruption queue, when one is configured) until one fails,
/// leadership is lost or the process is told to stop:
/// connects to the cluster (in-cluster configuration or `KUBECONFIG`), starts the reflectors and the health and
/// metrics endpoints, waits for the leader Lease (with `--leader-elect`) and hands over to
/// [`crate::controllers::run`]. Losing the Lease is an error, so the pod restarts with a clean state. `metrics`
/// come from the caller, so that the cloud provider built before may feed some of them (its batcher's).
pub async fn run<C, Q>(
    args: &ControllerArgs,
    cloud: C,
    interruption_queue: Option<Q>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()>
where
    C: CloudProvider + 'static,
    Q: MessageQueue + 'static,
{
    let config = ::kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API")?;
    let client = crate::kube::client::build(
        config,
        &Throttle::new(args.kube_client_qps, args.kube_client_burst),
    )
    .context("connecting to the Kubernetes API")?;
    let mut background = JoinSet::new();
    let settings = args.settings();
    // Services and the controllers that select pods are watched only for a default spread.
    let spread_sources = !settings.scheduler_config.default_constraints.is_empty();
    let state = ClusterState::start(
        &client,
        &mut background,
        spread_sources,
        settings.feature_gates.node_overlay,
        settings.feature_gates.capacity_buffer,
    );
    let readiness = ReadyFlag::new(false);
    let mut servers = JoinSet::new();
    servers.spawn(serve::serve(
        args.health_bind,
        serve::health_router(readiness.clone()),
    ));
    servers.spawn(serve::serve(
        args.metrics_bind,
        serve::metrics_router(metrics.clone()),
    ));
    let synced = state.clone();
    background.spawn(async move {
        if synced.synced().await.is_ok() {
            readiness.set(true);
        }
    });
    let identity = identity();
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), "kerf", Some(identity.clone())),
        client: client.clone(),
        // kerf's controller runs on AWS: Karpenter's AWS provider names itself "aws" in the cloud metrics.
        cloud: Metered::new(cloud, metrics.cloud.clone(), "aws"),
        settings,
        state,
        clock: Arc::new(SystemClock),
        metrics,
        backoff: Default::default(),
        created_here: Default::default(),
        nominations: Default::default(),
        registration_health: Default::default(),
        catalogs: Catalogs::default(),
        advice_catalog: advice_catalog(args),
        buffer_pods: Default::default(),
    });
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    if !args.leader_elect {
        tokio::select! {
            result = controllers::run(ctx, interruption_queue) => result?,
            failed = server_failed(&mut servers) => return Err(failed),
            () = &mut shutdown => {}
        }
        return Ok(());
    }
    let config = LeaseConfig::new(&args.namespace, LEASE_NAME, &identity);
    let mut elector = LeaderElector::new(client, config);
    tokio::select! {
        () = elector.acquire() => {}
        failed = server_failed(&mut servers) => return Err(failed),
        () = &mut shutdown => return Ok(()),
    }
    let outcome = tokio::select! {
        result = controllers::run(ctx, interruption_queue) => result.map_err(anyhow::Error::from),
        lost = elector.hold() => return Err(lost.into()),
        failed = server_failed(&mut servers) => Err(failed),
        () = &mut shutdown => Ok(()),
    };
    elector.release().await;
    outcome
}

/// The catalog pod advice is recomputed against: the one `kerf webhook` loads for the same region and pricing
/// file (the region of the AWS chain's environment variable, else the webhook's default).
fn advice_catalog(args: &ControllerArgs) -> AdviceCatalog {
    let catalog = CatalogArgs {
        region: args
            .aws_region
            .clone()
            .unwrap_or_else(|| DEFAULT_REGION.to_owned()),
        pricing_file: args.pricing_file.clone(),
        instance_types: None,
    };
    AdviceCatalog::new(move || catalog.load())
}

/// This replica's name in the Lease: the pod name, else host and process id.
fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| String::from("kerf"));
    format!("{host}-{}", std::process::id())
}

/// Waits for the first endpoint server to stop (it only stops on an error, such as a port in use).
async fn server_failed(servers: &mut JoinSet<std::io::Result<()>>) -> anyhow::Error {
    match servers.join_next().await {
        Some(Ok(Ok(()))) => anyhow::anyhow!("an endpoint server stopped"),
        Some(Ok(Err(error))) => {
            anyhow::Error::new(error).context("serving the health or metrics endpoints")
        }
        Some(Err(panic)) => anyhow::anyhow!("an endpoint server panicked: {panic}"),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn settings(args: &[&str]) -> Result<Settings, clap::Error> {
        let argv = [
            "kerf",
            "controller",
            "--cluster-name=c",
            "--cluster-endpoint=https://k",
        ]
        .into_iter()
        .chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Controller(args) => Ok(args.settings()),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn args(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        let argv = ["kerf", "controller", "--cluster-name=c"]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Controller(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// The AWS call budget's flags: the defaults, values that reach the settings, and refusals naming the
    /// mistake.
    #[test]
    fn the_aws_call_budget_flags_parse_or_say_what_is_wrong() {
        let defaults = args(&[]).expect("defaults");
        assert_eq!(defaults.aws_api_rate_limits, ApiRateLimits::default());
        assert_eq!(defaults.aws_max_attempts, 3);
        assert_eq!(defaults.aws_retry_max_backoff, Duration::from_secs(20));
        let set = args(&[
            "--aws-api-rate-limits=CreateFleet=2:4",
            "--aws-max-attempts=5",
            "--aws-retry-max-backoff=5s",
            "--aws-api-max-attempts=CreateFleet=1",
        ])
        .expect("parse");
        assert_eq!(set.aws_api_rate_limits.limit("CreateFleet").burst, 4);
        assert_eq!(set.aws_max_attempts, 5);
        assert_eq!(set.aws_retry_max_backoff, Duration::from_secs(5));
        assert_eq!(set.aws_api_max_attempts.of("CreateFleet"), Some(1));
        assert_eq!(defaults.aws_api_max_attempts, ApiAttempts::default());
        for (flag, says) in [
            (
                "--aws-api-rate-limits=CreatFleet=2",
                "unknown API \"CreatFleet\"",
            ),
            ("--aws-max-attempts=0", "0"),
            ("--aws-max-attempts=11", "11"),
            ("--aws-retry-max-backoff=10ms", "must be 1s to 5m"),
            ("--aws-api-max-attempts=CreateFleet=0", "must be 1 to 10"),
        ] {
            let error = args(&[flag]).expect_err(flag).to_string();
            assert!(error.contains(says), "{flag}: {error}");
        }
    }

    /// Karpenter's `--kube-client-qps` / `--kube-client-burst`: its defaults, values taken, zero refused.
    #[test]
    fn the_apiserver_call_bound_is_karpenters_flags() {
        let defaults = args(&[]).expect("defaults");
        assert_eq!(
            (defaults.kube_client_qps, defaults.kube_client_burst),
            (200, 300)
        );
        let set = args(&["--kube-client-qps=50", "--kube-client-burst=80"]).expect("parse");
        assert_eq!((set.kube_client_qps, set.kube_client_burst), (50, 80));
        for flag in [
            "--kube-client-qps=0",
            "--kube-client-burst=0",
            "--kube-client-qps=fast",
        ] {
            assert!(args(&[flag]).is_err(), "{flag}");
        }
    }

    /// Karpenter's `--preference-policy` and `--min-values-policy` (and their environment variables, which the
    /// chart sets from `settings.preferencePolicy` / `settings.minValuesPolicy`) reach the solves' settings.
    #[test]
    fn the_solve_policies_are_flags_and_refuse_unknown_values() {
        assert_eq!(
            settings(&[]).expect("defaults").policies,
            Policies::default()
        );
        let set = settings(&[
            "--preference-policy=Ignore",
            "--min-values-policy=BestEffort",
        ])
        .expect("parse");
        assert_eq!(
            set.policies,
            Policies {
                preferences: PreferencePolicy::Ignore,
                min_values: MinValuesPolicy::BestEffort,
            }
        );
        let error = settings(&["--preference-policy=Sometimes"]).expect_err("refused");
        assert!(error.to_string().contains("Respect or Ignore"), "{error}");
        assert!(settings(&["--min-values-policy=Loose"]).is_err());
    }

    /// Karpenter's `--scheduler-config` (the chart renders `settings.schedulerConfig` as JSON into
    /// `SCHEDULER_CONFIG`): YAML or JSON, empty for none; an invalid document is refused before anything starts,
    /// with the field that is wrong.
    #[test]
    fn the_scheduler_config_is_a_flag_that_refuses_an_invalid_document() {
        assert_eq!(
            settings(&[]).expect("defaults").scheduler_config,
            SchedulerConfig::default()
        );
        let json = r#"--scheduler-config={"podTopologySpread":{"defaultConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]}}"#;
        let set = settings(&[json]).expect("parse");
        assert_eq!(set.scheduler_config.default_constraints.len(), 1);
        assert_eq!(
            set.scheduler_config.default_constraints[0].when_unsatisfiable,
            "ScheduleAnyway"
        );
        let yaml = "--scheduler-config=podTopologySpread:\n  defaultConstraints: []\n";
        assert!(settings(&[yaml]).is_ok());
        let error = settings(&[
            "--scheduler-config={podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}}",
        ])
        .expect_err("refused")
        .to_string();
        assert!(
            error.contains("podTopologySpread.defaultConstraints[0].maxSkew"),
            "{error}"
        );
    }

    /// `--feature-gates` (the chart's `FEATURE_GATES`) in Karpenter's syntax reaches the disruption engine;
    /// an unknown gate, or one kerf lacks switched on, stops the controller before it connects anywhere.
    #[test]
    fn feature_gates_are_a_flag_that_refuses_what_kerf_cannot_do() {
        let defaults = settings(&[]).expect("defaults");
        assert_eq!(defaults.feature_gates, FeatureGates::default());
        assert!(!defaults.disruption().spot_to_spot);
        let on = settings(&["--feature-gates=ReservedCapacity=true,SpotToSpotConsolidation=true"])
            .expect("parse");
        assert!(on.disruption().spot_to_spot);
        let repair = settings(&["--feature-gates=NodeRepair=true"]).expect("node repair");
        assert!(repair.feature_gates.node_repair);
        for (flag, want) in [
            (
                "--feature-gates=Hello=true",
                "unknown feature gate \"Hello\"",
            ),
            ("--feature-gates=SpotToSpotConsolidation", "malformed pair"),
        ] {
            let error = settings(&[flag]).expect_err(flag).to_string();
            assert!(error.contains(want), "{flag}: {error}");
        }
    }
}
