//! The `kerf webhook` binary under hostile load, as an attacker or a careless client would send it: 150 clients
//! posting 3 MB reviews at once (wrong-typed list items, huge strings, UPDATEs carrying two objects) while
//! hundreds of connections sit idle or send half a TLS hello. The server must stay within the chart's memory
//! limit, answer every review it reads with an AdmissionReview carrying the request's uid (or shed it with 429 and
//! `Retry-After`), keep `/healthz` answering within a second, and answer a fresh TLS connection quickly.
//!
//! Needs only the binary (no control plane); the memory limit is read from the chart's values.

use anyhow::{bail, ensure, Context, Result};
use kerf_e2e::kerf::{free_port, kerf_binary, start_kerf};
use kerf_e2e::{announce, repo_root, required};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncWriteExt;

/// Concurrent clients posting big reviews, as in the issue's report.
const CLIENTS: usize = 150;
/// Idle connections held open beside them, more than the server's default connection cap (256).
const IDLE_CONNECTIONS: usize = 300;

/// `webhook.resources.limits.memory` of the chart, in bytes.
fn chart_memory_limit() -> Result<u64> {
    let text = std::fs::read_to_string(repo_root().join("charts/kerf/values.yaml"))?;
    let values: Value = serde_yaml::from_str(&text)?;
    let limit = values
        .pointer("/webhook/resources/limits/memory")
        .and_then(Value::as_str)
        .context("the chart sets no webhook memory limit")?;
    let mib: u64 = limit
        .strip_suffix("Mi")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("webhook memory limit {limit:?} is not in Mi"))?;
    Ok(mib * 1024 * 1024)
}

/// Resident memory of process `pid` (`VmRSS`, or the peak `VmHWM`), in bytes.
fn memory(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A review of `object` (and `old` on UPDATE) with `uid`.
fn review(uid: &str, kind: (&str, &str), object: Value, old: Option<Value>) -> Value {
    let (group, kind) = kind;
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": "x"},
        "name": "hostile", "operation": if old.is_some() { "UPDATE" } else { "CREATE" }, "userInfo": {},
        "object": object, "oldObject": old}})
}

fn nodepool(requirements: Value, label: &str) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "hostile"},
        "spec": {"template": {"metadata": {"labels": {"team": label}}, "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": requirements}}}})
}

fn nodeclass(subnets: Value) -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "hostile"},
        "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": subnets, "securityGroupSelectorTerms": [{"id": "sg-1"}]}})
}

/// The `i`th hostile body, each about 3 MB: wrong-typed list items (just under the server's value limit, and far
/// over it), a huge string, nested arrays where objects belong, and an UPDATE whose old and new objects are both
/// full of wrong items.
fn hostile_body(i: usize) -> (String, Vec<u8>) {
    const SIZE: usize = 2_900_000;
    let uid = format!("hostile-{i}");
    // The big lists are written as text in place of a marker: building them as JSON values first takes a debug
    // build many seconds.
    const LIST: &str = "@list@";
    let list = |item: &str, n: usize| format!("[{}]", vec![item; n].join(","));
    let (body, big) = match i % 4 {
        // Just under the server's value limit: each wrong-typed item is checked.
        0 => (
            review(
                &uid,
                ("karpenter.sh", "NodePool"),
                nodepool(json!(LIST), "a"),
                None,
            ),
            list(r#""xxxxxxxxxxxx""#, 190_000),
        ),
        1 => (
            review(
                &uid,
                ("karpenter.sh", "NodePool"),
                nodepool(json!([]), &"é".repeat(SIZE / 2)),
                None,
            ),
            String::new(),
        ),
        2 => (
            review(
                &uid,
                ("karpenter.k8s.aws", "EC2NodeClass"),
                nodeclass(json!(LIST)),
                None,
            ),
            list("[[1]]", SIZE / 8),
        ),
        _ => (
            review(
                &uid,
                ("karpenter.sh", "NodePool"),
                nodepool(json!(LIST), "a"),
                Some(nodepool(json!(LIST), "b")),
            ),
            list("1", SIZE / 4),
        ),
    };
    let text = body.to_string().replace(&format!("\"{LIST}\""), &big);
    (uid, text.into_bytes())
}

/// What one answer was, once checked.
enum Answer {
    Reviewed,
    Shed,
}

/// Checks an answer: a review carrying `uid`, or 429 with `Retry-After`.
async fn check_answer(uid: &str, response: reqwest::Response) -> Result<Answer> {
    let status = response.status();
    if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        ensure!(
            response.headers().contains_key("retry-after"),
            "{uid}: 429 without Retry-After"
        );
        return Ok(Answer::Shed);
    }
    ensure!(status.is_success(), "{uid}: answered {status}");
    let answer: Value = response.json().await.context("a review")?;
    ensure!(
        answer["kind"] == "AdmissionReview" && answer["response"]["uid"] == uid,
        "{uid}: not a review with its uid: {:.300}",
        answer.to_string()
    );
    Ok(Answer::Reviewed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_holds_under_hostile_load() -> Result<()> {
    if kerf_binary().is_err() && !required() {
        announce("SKIPPED admission_load: no kerf binary (set KERF_BIN)");
        return Ok(());
    }
    let limit = chart_memory_limit()?;
    let dir = tempfile::tempdir()?;
    let certs = kerf_certs::SelfSigned::generate(
        ["127.0.0.1"],
        SystemTime::now(),
        kerf_certs::DEFAULT_VALIDITY,
    )?;
    let paths = certs.write_files(dir.path())?;
    let port = free_port()?;
    let args = [
        "webhook".to_owned(),
        format!("--bind=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", paths.cert.display()),
        format!("--tls-private-key-file={}", paths.key.display()),
        "--pod-advice=false".to_owned(),
    ];
    let log = dir.path().join("kerf-webhook.log");
    let mut webhook = start_kerf(&args, &[], &log, port).await?;
    let pid = webhook.id();
    let idle_rss = memory(pid, "VmRSS:").unwrap_or(0);
    let base = format!("https://127.0.0.1:{port}");
    let ca = reqwest::Certificate::from_pem(certs.ca_cert_pem.as_bytes())?;
    let client = |pooled: bool| {
        let builder = reqwest::Client::builder()
            .tls_certs_only([ca.clone()])
            .timeout(Duration::from_secs(60));
        let builder = if pooled {
            builder
        } else {
            builder.pool_max_idle_per_host(0)
        };
        builder.build().context("client")
    };

    // The bodies are made before the attack starts (making them takes this process's CPU for many seconds, which
    // would slow the server it shares the cores with), so that every client is ready to send at once. Each client
    // is its own task, as separate apiservers or attackers would be.
    let bodies: Vec<(String, Vec<u8>)> = (0..CLIENTS).map(hostile_body).collect();

    // Resident memory, sampled every 10 ms for as long as the attack runs.
    let peak = Arc::new(AtomicU64::new(0));
    let attacking = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (peak, attacking) = (peak.clone(), attacking.clone());
        async move {
            while attacking.load(Ordering::Relaxed) {
                if let Some(rss) = memory(pid, "VmRSS:") {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });

    // Connections that never finish: half of them send nothing, the other half the first bytes of a TLS hello.
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for i in 0..IDLE_CONNECTIONS {
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            continue;
        };
        if i % 2 == 1 {
            let _ = stream.write_all(&[0x16, 0x03, 0x01, 0x02]).await;
        }
        idle.push(stream);
    }

    // /healthz on a fresh connection every 100 ms, each timed, as the kubelet probes it: from its own thread and
    // runtime, so that what is timed is the server, not this process's 150 clients queued on the same workers.
    let health = std::thread::spawn({
        let (client, attacking, base) = (client(false)?, attacking.clone(), base.clone());
        move || -> Result<(u32, Duration)> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let mut slowest = Duration::ZERO;
                let mut probes = 0u32;
                while attacking.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let answer = client
                        .get(format!("{base}/healthz"))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    let took = started.elapsed();
                    match answer {
                        Ok(r) if r.status().is_success() => {}
                        Ok(r) => bail!("/healthz answered {} under attack", r.status()),
                        Err(error) => bail!("/healthz did not answer under attack: {error}"),
                    }
                    slowest = slowest.max(took);
                    probes += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok((probes, slowest))
            })
        }
    });

    let flood_client = client(true)?;
    let started = Instant::now();
    let flood: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, (uid, body))| {
            let (client, base) = (flood_client.clone(), base.clone());
            tokio::spawn(async move {
                let path = if i % 2 == 0 { "validate" } else { "mutate" };
                let response = client
                    .post(format!("{base}/{path}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .with_context(|| format!("{uid}: no answer"))?;
                check_answer(&uid, response).await
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(flood.len());
    for client in flood {
        answers.push(client.await?);
    }
    let flood_took = started.elapsed();
    attacking.store(false, Ordering::Relaxed);
    sampler.await?;
    let (probes, slowest_health) = tokio::task::spawn_blocking(move || health.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the /healthz prober panicked"))??;
    drop(idle);

    let (mut reviewed, mut shed) = (0, 0);
    for answer in answers {
        match answer? {
            Answer::Reviewed => reviewed += 1,
            Answer::Shed => shed += 1,
        }
    }
    let peak_rss = peak
        .load(Ordering::Relaxed)
        .max(memory(pid, "VmHWM:").unwrap_or(0));

    // A fresh TLS connection's first answer, once the flood is over: a small valid review each time.
    let mut firsts = Vec::new();
    for i in 0..20 {
        let fresh = client(false)?;
        let uid = format!("fresh-{i}");
        let body = review(
            &uid,
            ("karpenter.sh", "NodePool"),
            nodepool(json!([]), "a"),
            None,
        );
        let started = Instant::now();
        let response = fresh
            .post(format!("{base}/validate"))
            .json(&body)
            .send()
            .await?;
        let took = started.elapsed();
        ensure!(matches!(
            check_answer(&uid, response).await?,
            Answer::Reviewed
        ));
        firsts.push(took);
    }
    firsts.sort();
    let first_p50 = firsts[firsts.len() / 2];

    eprintln!(
        "figures admission_load: {CLIENTS} clients x ~2.9 MB in {flood_took:?}: {reviewed} reviewed, {shed} shed; \
         peak RSS {} MiB (idle {} MiB, limit {} MiB); /healthz {probes} probes, slowest {slowest_health:?}; \
         first answer on a fresh TLS connection p50 {first_p50:?}, max {:?}",
        peak_rss >> 20,
        idle_rss >> 20,
        limit >> 20,
        firsts[firsts.len() - 1],
    );
    ensure!(
        webhook.try_wait()?.is_none(),
        "kerf webhook exited under load; see {}",
        log.display()
    );
    ensure!(
        peak_rss < limit,
        "peak RSS {} MiB over the chart's limit of {} MiB",
        peak_rss >> 20,
        limit >> 20
    );
    ensure!(
        reviewed > 0,
        "every review was shed: the budget admits none"
    );
    ensure!(probes > 0, "/healthz was never probed during the attack");
    ensure!(
        slowest_health < Duration::from_secs(1),
        "/healthz took {slowest_health:?} under attack"
    );
    // Nagle's algorithm against the client's delayed ACK shows as ~40 ms; a debug build on a busy machine stays
    // well under this.
    ensure!(
        first_p50 < Duration::from_millis(30),
        "first answer on a fresh TLS connection: p50 {first_p50:?}"
    );
    Ok(())
}
