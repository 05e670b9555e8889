//! The NodePool VALIDATE path over real HTTPS: `kerf webhook`'s router behind the real TLS
//! server, a self-signed certificate and reqwest, all on 127.0.0.1 in this process.
//!
//! Two parts in one binary (`harness = false`):
//!
//! 1. criterion group `webhook_https`: one review at a time on a keep-alive connection, for an
//!    allowed NodePool (`validate_nodepool`) and a denied one (`validate_nodepool_invalid`);
//! 2. load phases printed afterwards, with per-request latency percentiles and reviews/s: one
//!    connection back to back; 64 concurrent connections (64 tasks, a client each) back to back,
//!    which finds the throughput; and the same 64 connections offering a fixed total rate (the
//!    5,000 reviews/s target), which shows latency at that load rather than at saturation.
//!
//! The server runs on its own runtime (2 worker threads) and the load on another (2 threads).
//! Both share the machine's cores, so the figures are conservative for a dedicated server.
//!
//! 3. hostile-load figures: the first response on fresh TLS connections (p50/p99, handshake
//!    included: a new client per request), and the process's memory (VmHWM, the peak RSS; the
//!    load side holds one shared copy of the body) while 150 clients each send a 3 MB NodePool
//!    review at once, with how many were answered and how many shed (429 + Retry-After).
//!
//! `cargo bench -p kerf --bench webhook_https`; `KERF_BENCH_SECONDS` sets the length of each
//! load phase (default 10; 0 skips them), `KERF_BENCH_RATE` the paced phase's reviews/s
//! (default 5000; 0 skips it). Under `cargo test` the load phases are a short smoke run.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use criterion::{Criterion, Throughput};
use kerf_certs::{server_config, ReloadingCertResolver, SelfSigned, DEFAULT_VALIDITY};
use kerf_webhooks::{ConnectionLimits, Server};
use reqwest::{Certificate, Client, StatusCode};
use serde_json::{json, Value};
use tokio::{runtime::Runtime, sync::oneshot};

/// The NodePool of the getting-started example (first document).
const EXAMPLE: &str = include_str!("../examples/default.yaml");

/// Connections in the concurrent load phase.
const CONNECTIONS: usize = 64;
/// Load sent before latencies are recorded (handshakes, pool and allocator warm-up).
const WARM_UP: Duration = Duration::from_secs(1);
/// Default length of a load phase's measurement.
const DEFAULT_SECONDS: u64 = 10;
/// Offered load of the paced phase, in reviews/s over all connections: the throughput target.
const DEFAULT_RATE: f64 = 5000.0;
/// Bounds every loop besides its deadline.
const MAX_REQUESTS_PER_CONNECTION: usize = 2_000_000;
/// A load task gives up after this many failed requests.
const MAX_FAILURES_PER_CONNECTION: u64 = 100;
/// No single request may hang a loop.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The server, what a client needs to reach it, and how to stop it.
struct Fixture {
    server: Server,
    stop: oneshot::Sender<()>,
    url: String,
    ca: Certificate,
    _dir: tempfile::TempDir,
}

/// Starts `kerf webhook`'s router on 127.0.0.1:0 over HTTPS; call inside the server runtime.
async fn start() -> Fixture {
    let certs =
        SelfSigned::generate(["127.0.0.1"], SystemTime::now(), DEFAULT_VALIDITY).expect("certs");
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = certs.write_files(dir.path()).expect("write certs");
    let (resolver, _reloader) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, Duration::from_secs(60))
            .expect("watch certs");
    let tls = Arc::new(server_config(resolver).expect("tls config"));
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let catalog = kerf::catalog::Catalog::embedded(
        "us-east-1",
        &Default::default(),
        &kerf::catalog::Pricing::none(),
    )
    .expect("embedded catalog");
    let router =
        kerf::cli::webhook::router(Duration::from_secs(10), Some(std::sync::Arc::new(catalog)));
    let server = Server::start(
        router,
        "127.0.0.1:0".parse().expect("addr"),
        tls,
        ConnectionLimits::default(),
        shutdown,
    )
    .await
    .expect("start server");
    let url = format!("https://127.0.0.1:{}/validate", server.local_addr().port());
    let ca = Certificate::from_pem(certs.ca_cert_pem.as_bytes()).expect("ca");
    Fixture {
        server,
        stop,
        url,
        ca,
        _dir: dir,
    }
}

/// An HTTP/1.1 client trusting only the fixture's CA, keeping one idle connection.
fn client(ca: &Certificate) -> Client {
    Client::builder()
        .tls_certs_only([ca.clone()])
        .http1_only()
        .pool_max_idle_per_host(1)
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client")
}

/// The example NodePool as the apiserver sends it: JSON, with `metadata.creationTimestamp: null`.
fn example_nodepool() -> Value {
    let document = serde_yaml::Deserializer::from_str(EXAMPLE)
        .next()
        .expect("a first document");
    let mut nodepool: Value = serde::Deserialize::deserialize(document).expect("yaml");
    assert_eq!(nodepool["kind"], "NodePool", "first document of {EXAMPLE}");
    nodepool["metadata"]["creationTimestamp"] = Value::Null;
    nodepool
}

/// Weight 0 (minimum 1) and a schedule with hour 25.
fn invalid_nodepool() -> Value {
    let mut nodepool = example_nodepool();
    nodepool["spec"]["weight"] = json!(0);
    nodepool["spec"]["disruption"]["budgets"][1]["schedule"] = json!("0 25 * * mon-fri");
    nodepool
}

/// An AdmissionReview v1 for CREATE of `nodepool`, serialized once: the body is `'static`, so
/// each request sends it without copying.
fn review(nodepool: Value) -> &'static [u8] {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d6c9e2f-6f4b-4a43-9b6e-6a4f7f3f2b10",
            "kind": {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"},
            "resource": {"group": "karpenter.sh", "version": "v1", "resource": "nodepools"},
            "requestKind": {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"},
            "requestResource": {"group": "karpenter.sh", "version": "v1", "resource": "nodepools"},
            "operation": "CREATE",
            "name": "default",
            "object": nodepool,
            "userInfo": {},
            "dryRun": false,
        }
    });
    Box::leak(review.to_string().into_bytes().into_boxed_slice())
}

/// One review: 200 and the expected verdict, or what went wrong. The verdict is checked on
/// the compact JSON the server writes, so the check costs next to nothing.
async fn post(
    client: &Client,
    url: &str,
    body: &'static [u8],
    allowed: bool,
) -> Result<(), String> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|error| format!("send: {error}"))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|error| format!("body: {error}"))?;
    let expected: &[u8] = if allowed {
        b"\"allowed\":true"
    } else {
        b"\"allowed\":false"
    };
    if status != StatusCode::OK || !bytes.windows(expected.len()).any(|w| w == expected) {
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        ));
    }
    Ok(())
}

/// Sends `body` once and checks the whole answer, so the benchmark cannot measure a broken path.
async fn check(client: &Client, url: &str, body: &'static [u8], allowed: bool) {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.expect("json");
    let response = &answer["response"];
    assert_eq!(response["uid"], "0d6c9e2f-6f4b-4a43-9b6e-6a4f7f3f2b10");
    assert_eq!(response["allowed"], allowed, "{answer}");
    if !allowed {
        assert_eq!(response["status"]["code"], 422, "{answer}");
        let causes = response["status"]["details"]["causes"].to_string();
        assert!(causes.contains("spec.weight"), "{answer}");
        assert!(causes.contains("schedule"), "{answer}");
    }
}

fn single_requests(
    criterion: &mut Criterion,
    load: &Runtime,
    fixture: &Fixture,
    cases: &[(&str, &'static [u8], bool)],
) {
    let client = client(&fixture.ca);
    let mut group = criterion.benchmark_group("webhook_https");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(8));
    for &(name, body, allowed) in cases {
        load.block_on(check(&client, &fixture.url, body, allowed));
        group.bench_function(name, |b| {
            b.to_async(load).iter(|| async {
                post(&client, &fixture.url, body, allowed)
                    .await
                    .expect("review");
            });
        });
    }
    group.finish();
}

/// What one load phase saw.
struct Report {
    connections: usize,
    /// The offered rate in reviews/s, when the phase was paced.
    rate: Option<f64>,
    latencies: Vec<Duration>,
    failures: u64,
    first_failure: Option<String>,
    elapsed: Duration,
}

impl Report {
    fn percentile(&self, p: f64) -> Duration {
        // Nearest rank on the sorted latencies.
        let rank = (p / 100.0 * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    fn print(&self) {
        if self.latencies.is_empty() {
            println!(
                "load {:>2} connection(s): no successful review, {} failed; first failure: {:?}",
                self.connections, self.failures, self.first_failure
            );
            return;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let pace = self.rate.map_or_else(
            || "back to back".to_owned(),
            |rate| format!("paced at {rate:.0}/s"),
        );
        println!(
            "load {:>2} connection(s), {pace}: {} reviews in {:.2} s = {:.0} reviews/s; \
             p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {} failed",
            self.connections,
            self.latencies.len(),
            self.elapsed.as_secs_f64(),
            self.latencies.len() as f64 / self.elapsed.as_secs_f64(),
            ms(self.percentile(50.0)),
            ms(self.percentile(90.0)),
            ms(self.percentile(99.0)),
            ms(self.percentile(100.0)),
            self.failures,
        );
        if let Some(failure) = &self.first_failure {
            println!("  first failure: {failure}");
        }
    }
}

/// `connections` tasks, each with its own client and connection, sending `body` for `warm_up`
/// then `measure`: back to back, or spread evenly to offer `rate` reviews/s in total. Latencies
/// are recorded for requests sent after the warm-up, from send to the whole answer.
fn load_phase(
    load: &Runtime,
    fixture: &Fixture,
    body: &'static [u8],
    connections: usize,
    rate: Option<f64>,
    warm_up: Duration,
    measure: Duration,
) -> Report {
    load.block_on(async {
        let started = Instant::now();
        let measure_from = started + warm_up;
        let until = measure_from + measure;
        // Each connection sends every `connections / rate` s, the connections staggered.
        let interval = rate.map(|rate| Duration::from_secs_f64(connections as f64 / rate));
        let tasks: Vec<_> = (0..connections)
            .map(|i| {
                let client = client(&fixture.ca);
                let url = fixture.url.clone();
                let pace = interval.map(|interval| Pace {
                    first: started + interval.mul_f64(i as f64 / connections as f64),
                    interval,
                });
                tokio::spawn(connection(client, url, body, pace, measure_from, until))
            })
            .collect();
        let mut report = Report {
            connections,
            rate,
            latencies: Vec::new(),
            failures: 0,
            first_failure: None,
            elapsed: Duration::ZERO,
        };
        for task in tasks {
            let (latencies, failures, first_failure) = task.await.expect("load task");
            report.latencies.extend(latencies);
            report.failures += failures;
            report.first_failure = report.first_failure.take().or(first_failure);
        }
        report.elapsed = measure_from.elapsed();
        report.latencies.sort_unstable();
        report
    })
}

/// When a paced connection sends: at `first`, then every `interval` (or as soon as the
/// previous answer arrives, if that is later).
#[derive(Clone, Copy)]
struct Pace {
    first: Instant,
    interval: Duration,
}

/// One load task: latencies of its successful reviews, its failures and the first one's text.
async fn connection(
    client: Client,
    url: String,
    body: &'static [u8],
    pace: Option<Pace>,
    measure_from: Instant,
    until: Instant,
) -> (Vec<Duration>, u64, Option<String>) {
    let mut latencies = Vec::with_capacity(64 * 1024);
    let mut failures = 0;
    let mut first_failure = None;
    for n in 0..MAX_REQUESTS_PER_CONNECTION {
        if let Some(Pace { first, interval }) = pace {
            let at = first + interval.mul_f64(n as f64);
            if at >= until {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        let sent = Instant::now();
        if sent >= until || failures >= MAX_FAILURES_PER_CONNECTION {
            break;
        }
        match post(&client, &url, body, true).await {
            Ok(()) if sent >= measure_from => latencies.push(sent.elapsed()),
            Ok(()) => {}
            Err(error) => {
                failures += 1;
                first_failure.get_or_insert(error);
            }
        }
    }
    (latencies, failures, first_failure)
}

/// Sends `body` once on each of `connections` fresh TLS connections (a new client each) and
/// prints the time to the whole answer, handshake included.
fn fresh_connections(load: &Runtime, fixture: &Fixture, body: &'static [u8], connections: usize) {
    let mut latencies: Vec<Duration> = load.block_on(async {
        let mut latencies = Vec::with_capacity(connections);
        for _ in 0..connections {
            let client = client(&fixture.ca);
            let sent = Instant::now();
            post(&client, &fixture.url, body, true)
                .await
                .expect("review on a fresh connection");
            latencies.push(sent.elapsed());
        }
        latencies
    });
    latencies.sort_unstable();
    let at = |p: f64| {
        latencies
            [((p / 100.0 * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "fresh TLS connection, handshake + first review: {connections} connections, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(at(50.0)),
        ms(at(99.0)),
        ms(at(100.0)),
    );
}

/// A process figure from `/proc/self/status` in MiB (`VmRSS`, `VmHWM`), when there is one.
fn proc_status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A review of about 3 MB: the example NodePool with a long annotation.
fn large_review() -> &'static [u8] {
    let mut nodepool = example_nodepool();
    nodepool["metadata"]["annotations"]["example.com/padding"] = json!("x".repeat(3_000_000));
    review(nodepool)
}

/// `clients` tasks each send `body` at once on its own connection; prints the answers by
/// status and the process's peak RSS before and after.
fn concurrent_bodies(load: &Runtime, fixture: &Fixture, body: &'static [u8], clients: usize) {
    let before = proc_status_mib("VmHWM:");
    let statuses = load.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = client(&fixture.ca);
                let url = fixture.url.clone();
                tokio::spawn(async move {
                    let response = client
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await;
                    match response {
                        Ok(response) => {
                            let status = response.status();
                            let retry = response.headers().contains_key("retry-after");
                            let _ = response.bytes().await;
                            Ok((status, retry))
                        }
                        Err(error) => Err(error.to_string()),
                    }
                })
            })
            .collect();
        let mut statuses = Vec::with_capacity(clients);
        for task in tasks {
            statuses.push(task.await.expect("task"));
        }
        statuses
    });
    let ok = statuses
        .iter()
        .filter(|s| matches!(s, Ok((StatusCode::OK, _))))
        .count();
    let shed = statuses
        .iter()
        .filter(|s| matches!(s, Ok((StatusCode::TOO_MANY_REQUESTS, true))))
        .count();
    let other: Vec<_> = statuses
        .iter()
        .filter(|s| {
            !matches!(
                s,
                Ok((StatusCode::OK, _)) | Ok((StatusCode::TOO_MANY_REQUESTS, true))
            )
        })
        .take(3)
        .collect();
    let mib = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v:.0} MiB"));
    println!(
        "{clients} concurrent {:.1} MB reviews: {ok} answered, {shed} shed with 429 + Retry-After, {} other {other:?}; \
         peak RSS (VmHWM) {} before, {} after; RSS now {}",
        body.len() as f64 / 1e6,
        clients - ok - shed,
        mib(before),
        mib(proc_status_mib("VmHWM:")),
        mib(proc_status_mib("VmRSS:")),
    );
    assert!(
        other.is_empty(),
        "answers other than 200 and 429 + Retry-After"
    );
}

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The same allocator as the `kerf` binary, so the server in this process behaves like the real one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    // As criterion decides: `cargo bench` passes --bench; `cargo test --benches` does not.
    let benchmarking = has("--bench") && !has("--test");

    let server_runtime = runtime("kerf-server");
    let load_runtime = runtime("kerf-load");
    let fixture = server_runtime.block_on(start());
    let valid = review(example_nodepool());
    let invalid = review(invalid_nodepool());

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .configure_from_args();
    single_requests(
        &mut criterion,
        &load_runtime,
        &fixture,
        &[
            ("validate_nodepool", valid, true),
            ("validate_nodepool_invalid", invalid, false),
        ],
    );
    criterion.final_summary();

    if !has("--list") {
        let (warm_up, measure) = if benchmarking {
            let seconds = std::env::var("KERF_BENCH_SECONDS")
                .ok()
                .map(|s| s.parse::<u64>().expect("KERF_BENCH_SECONDS: whole seconds"))
                .unwrap_or(DEFAULT_SECONDS);
            (WARM_UP, Duration::from_secs(seconds))
        } else {
            (Duration::from_millis(100), Duration::from_millis(200))
        };
        if !measure.is_zero() {
            println!(
                "\nload phase: validate_nodepool, {} s warm-up, {} s measured per phase; \
                 server and load each on 2 worker threads, sharing the machine's cores",
                warm_up.as_secs_f64(),
                measure.as_secs_f64()
            );
            let mut failed = false;
            let rate = std::env::var("KERF_BENCH_RATE")
                .ok()
                .map(|s| s.parse::<f64>().expect("KERF_BENCH_RATE: reviews/s"))
                .unwrap_or(DEFAULT_RATE);
            let mut phases = vec![(1, None), (CONNECTIONS, None)];
            if rate > 0.0 {
                phases.push((CONNECTIONS, Some(rate)));
            }
            for (connections, rate) in phases {
                let report = load_phase(
                    &load_runtime,
                    &fixture,
                    valid,
                    connections,
                    rate,
                    warm_up,
                    measure,
                );
                report.print();
                failed |= report.failures > 0 || report.latencies.is_empty();
            }
            assert!(!failed, "the load phase saw failed reviews");
        }
    }

    if !has("--list") {
        let (fresh, clients) = if benchmarking { (500, 150) } else { (20, 16) };
        println!("\nhostile load:");
        fresh_connections(&load_runtime, &fixture, valid, fresh);
        concurrent_bodies(&load_runtime, &fixture, large_review(), clients);
        fresh_connections(&load_runtime, &fixture, valid, fresh);
    }

    let Fixture { server, stop, .. } = fixture;
    let _ = stop.send(());
    let stopped = server_runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), server.wait()).await });
    match stopped {
        Ok(Ok(())) => {}
        Ok(Err(error)) => eprintln!("server: {error}"),
        Err(_) => eprintln!("server: still draining connections after 5 s"),
    }
}
