//! End-to-end harness for kerf on a real control plane (issue 4); see `docs/testing.md`.
//!
//! A [`Cluster`] is etcd + kube-apiserver + kube-scheduler + kube-controller-manager v1.20.2 on
//! 127.0.0.1, started by `e2e/scripts/cluster.sh` in a temporary directory and stopped (by PID) when the
//! handle is dropped, also when the test panics. A test that cannot start one because the control-plane
//! binaries are missing is skipped with a printed message, unless `KERF_E2E=1`, which makes it a failure.
//! `KERF_E2E_CLUSTER=DIR` reuses a cluster that `cluster.sh up DIR` started (it is then left running).

pub mod aws;
pub mod controller;
pub mod figures;
pub mod kubelet;
pub mod testbed;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Deserialize;
use tempfile::TempDir;

pub mod kerf;

/// The Kubernetes version the harness builds and runs.
pub const K8S_VERSION: &str = "v1.20.2";
/// How often [`poll`] retries.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Upper bound for `cluster.sh up` (it has its own, shorter, per-component deadlines).
const UP_TIMEOUT: Duration = Duration::from_secs(300);
const CONTROL_PLANE_BINARIES: [&str; 3] = [
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
];

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// `e2e/scripts`.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

/// `$KERF_CACHE`, or `~/.cache/kerf`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = non_empty_env("KERF_CACHE") {
        return PathBuf::from(dir);
    }
    let home = non_empty_env("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache").join("kerf")
}

/// Where `build-control-plane.sh` caches the three binaries (`$KERF_K8S_BIN` overrides).
pub fn k8s_bin_dir() -> PathBuf {
    non_empty_env("KERF_K8S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("k8s-1.20.2").join("bin"))
}

/// True when `KERF_E2E=1`: end-to-end tests must run, and a missing prerequisite is a failure.
pub fn required() -> bool {
    std::env::var("KERF_E2E").is_ok_and(|v| v == "1")
}

/// The kubectl to run (`$KUBECTL`, default `kubectl` on PATH).
pub fn kubectl_program() -> String {
    non_empty_env("KUBECTL").unwrap_or_else(|| "kubectl".into())
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn on_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What is missing to start a cluster; empty when everything is there.
pub fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    let bin = k8s_bin_dir();
    for b in CONTROL_PLANE_BINARIES {
        if !is_executable(&bin.join(b)) {
            missing.push(bin.join(b).display().to_string());
        }
    }
    let etcd = non_empty_env("KERF_ETCD").unwrap_or_else(|| "etcd".into());
    if on_path(&etcd).is_none() && !is_executable(Path::new("/usr/bin/etcd")) {
        missing.push(format!("{etcd} (Debian package etcd-server)"));
    }
    for tool in [
        kubectl_program(),
        "openssl".into(),
        "curl".into(),
        "setsid".into(),
        "bash".into(),
    ] {
        if on_path(&tool).is_none() {
            missing.push(tool);
        }
    }
    missing
}

/// Writes a line to the real stderr, past the test harness's output capture, so that a skip is visible
/// in a normal `cargo test` run.
pub fn announce(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

/// Decides whether an end-to-end test runs: `Ok(true)` when the prerequisites are there (or a cluster
/// is given by `KERF_E2E_CLUSTER`), `Ok(false)` after printing why the test is skipped, and an error
/// when `KERF_E2E=1` and something is missing.
pub fn should_run(test: &str) -> Result<bool> {
    if non_empty_env("KERF_E2E_CLUSTER").is_some() {
        return Ok(true);
    }
    let missing = missing_prerequisites();
    if missing.is_empty() {
        return Ok(true);
    }
    if required() {
        bail!(
            "KERF_E2E=1 but the real control plane cannot start; missing: {}. \
             Run e2e/scripts/build-control-plane.sh (see docs/testing.md).",
            missing.join(", ")
        );
    }
    announce(&format!(
        "SKIPPED {test}: no real control plane (missing: {}). Run e2e/scripts/build-control-plane.sh \
         to build it (~10 min), or set KERF_E2E=1 to make this a failure.",
        missing.join(", ")
    ));
    Ok(false)
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns `Ok(Some(_))`, for at most `timeout`.
/// `Ok(None)` means "not yet"; an error is treated as transient and reported if the deadline passes.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_error {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Every non-empty document of a multi-document YAML file, as JSON values.
pub fn yaml_documents(path: &Path) -> Result<Vec<serde_json::Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc)
            .with_context(|| format!("parsing {}", path.display()))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Stops the processes of a cluster this process started (by the PIDs `cluster.sh` recorded), when
/// dropped: on success, on an error return, and while unwinding from a panic.
struct Teardown {
    dir: PathBuf,
    tmp: Option<TempDir>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let result = std::process::Command::new("bash")
            .arg(scripts_dir().join("cluster.sh"))
            .arg("down")
            .arg(&self.dir)
            .env_remove("KERF_E2E_OWNER_PID")
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => announce(&format!(
                "kerf-e2e: cluster.sh down {} failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => announce(&format!("kerf-e2e: could not run cluster.sh down: {e}")),
        }
        // Keep the logs of a failed test (or on request); otherwise the directory goes with `tmp`.
        if std::thread::panicking() || std::env::var("KERF_E2E_KEEP").is_ok_and(|v| v == "1") {
            if let Some(tmp) = self.tmp.take() {
                let dir = tmp.keep();
                announce(&format!(
                    "kerf-e2e: kept {} (component logs in logs/)",
                    dir.display()
                ));
            }
        }
    }
}

/// A running control plane.
pub struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
    config: Config,
    // Declared last: dropped after everything else.
    _teardown: Option<Teardown>,
}

impl Cluster {
    /// The cluster for a test: `None` (after printing why) when the test is to be skipped, the one
    /// named by `KERF_E2E_CLUSTER` when set, otherwise a new one that stops when dropped.
    pub async fn start_or_skip(test: &str) -> Result<Option<Cluster>> {
        if !should_run(test)? {
            return Ok(None);
        }
        if let Some(dir) = non_empty_env("KERF_E2E_CLUSTER") {
            return Cluster::reuse(Path::new(&dir)).await.map(Some);
        }
        Cluster::start().await.map(Some)
    }

    /// Starts a new control plane in a temporary directory. It is stopped when the handle is dropped,
    /// and by `cluster.sh`'s watchdog if this process dies without dropping it. A start that fails is tried once
    /// more in a new directory: with the suite's tests running side by side, two control planes can pick the same
    /// free port at the same moment, and one of them then cannot bind it.
    pub async fn start() -> Result<Cluster> {
        match Self::start_once().await {
            Ok(cluster) => Ok(cluster),
            Err(first) => {
                announce(&format!("kerf-e2e: starting again after: {first:#}"));
                Self::start_once()
                    .await
                    .map_err(|second| second.context(format!("and before that: {first:#}")))
            }
        }
    }

    async fn start_once() -> Result<Cluster> {
        let tmp = tempfile::Builder::new()
            .prefix("kerf-e2e-")
            .tempdir()
            .context("creating the cluster directory")?;
        let dir = tmp.path().to_path_buf();
        // Armed before `up` starts anything: whatever happens next, the processes are stopped.
        let teardown = Teardown {
            dir: dir.clone(),
            tmp: Some(tmp),
        };
        let started = Instant::now();
        let up = tokio::process::Command::new("bash")
            .arg(scripts_dir().join("cluster.sh"))
            .arg("up")
            .arg(&dir)
            .env("KERF_E2E_OWNER_PID", std::process::id().to_string())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(UP_TIMEOUT, up)
            .await
            .map_err(|_| anyhow!("cluster.sh up did not finish within {UP_TIMEOUT:?}"))?
            .context("running cluster.sh up")?;
        if !out.status.success() {
            bail!(
                "cluster.sh up {} failed ({}):\n{}",
                dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        announce(&format!(
            "kerf-e2e: control plane up in {:.1}s in {}",
            started.elapsed().as_secs_f64(),
            dir.display()
        ));
        Cluster::connect(dir, Some(teardown)).await
    }

    /// Uses a cluster that `cluster.sh up DIR` started; it is left running.
    pub async fn reuse(dir: &Path) -> Result<Cluster> {
        Cluster::connect(dir.to_path_buf(), None).await
    }

    async fn connect(dir: PathBuf, teardown: Option<Teardown>) -> Result<Cluster> {
        let kubeconfig = dir.join("kubeconfig");
        let kc = Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .context("loading the kubeconfig")?;
        let cluster = Cluster {
            dir,
            kubeconfig,
            config,
            _teardown: teardown,
        };
        let version = cluster
            .client()?
            .apiserver_version()
            .await
            .context("asking the apiserver its version")?;
        if version.git_version != K8S_VERSION {
            announce(&format!(
                "kerf-e2e: warning: the apiserver is {}, not {K8S_VERSION}",
                version.git_version
            ));
        }
        Ok(cluster)
    }

    /// A new client for this cluster. Make one per tokio runtime (each `#[tokio::test]` has its own):
    /// a client's connections belong to the runtime that opened them.
    pub fn client(&self) -> Result<Client> {
        Client::try_from(self.config.clone()).context("building a kube client")
    }

    /// The admin kubeconfig (token of a `system:masters` user).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The cluster's directory: kubeconfig, `logs/`, `pids/`, `pki/`, `ports`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The apiserver's URL.
    pub fn server_url(&self) -> String {
        self.config.cluster_url.to_string()
    }

    /// The PIDs `cluster.sh` recorded, by component name.
    pub fn pids(&self) -> Result<Vec<(String, u32)>> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir(self.dir.join("pids"))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "pid") {
                let name = path
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let pid = std::fs::read_to_string(&path)?.trim().parse()?;
                pids.push((name, pid));
            }
        }
        pids.sort();
        Ok(pids)
    }

    /// Runs kubectl against this cluster from the repository root; returns its output whatever the
    /// exit status.
    pub async fn kubectl<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<Output> {
        tokio::process::Command::new(kubectl_program())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(repo_root())
            .kill_on_drop(true)
            .output()
            .await
            .context("running kubectl")
    }

    /// Runs kubectl and returns its stdout; fails with its stderr when it exits non-zero.
    pub async fn kubectl_ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        let out = self.kubectl(args).await?;
        let shown: Vec<_> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        if !out.status.success() {
            bail!(
                "kubectl {} failed ({}): {}",
                shown.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f charts/kerf/crds/crds.yaml`, then waits until every CRD in it is Established.
    /// Returns the CRD names.
    pub async fn install_crds(&self) -> Result<Vec<String>> {
        let path = repo_root().join("charts/kerf/crds/crds.yaml");
        self.kubectl_ok(&["apply".as_ref(), "-f".as_ref(), path.as_os_str()])
            .await?;
        let names: Vec<String> = yaml_documents(&path)?
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        for name in &names {
            self.wait_crd_established(name, Duration::from_secs(60))
                .await?;
        }
        Ok(names)
    }

    /// Waits until the CRD `name` has the condition Established=True.
    pub async fn wait_crd_established(&self, name: &str, timeout: Duration) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client()?);
        let api = &api;
        poll(
            &format!("CRD {name} to be Established"),
            timeout,
            || async move {
                let crd = api.get(name).await?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established.then_some(()))
            },
        )
        .await
    }

    /// Creates a namespace named `<prefix>-<random>` and waits until pods can be created in it (on 1.20
    /// that needs the default ServiceAccount and its token Secret). Returns its name.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String> {
        let client = self.client()?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = namespaces
            .create(&PostParams::default(), &ns)
            .await
            .context("creating a namespace")?;
        let name = created
            .metadata
            .name
            .context("the created namespace has no name")?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, &name);
        let accounts = &accounts;
        poll(
            &format!("the default ServiceAccount token in namespace {name}"),
            Duration::from_secs(60),
            || async move {
                let sa = accounts.get_opt("default").await?;
                Ok(sa
                    .filter(|sa| sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
                    .map(|_| ()))
            },
        )
        .await?;
        Ok(name)
    }
}
