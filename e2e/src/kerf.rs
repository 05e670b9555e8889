//! Running `kerf` and helm against a test [`Cluster`]: the binary under test, processes that die with the test,
//! `kubectl apply` of one object.

use crate::{cache_dir, poll, repo_root, Cluster};
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `kerf` binary under test: `KERF_BIN` (the Makefile builds it), else the default target dir's.
pub fn kerf_binary() -> Result<PathBuf> {
    // The debug build where cargo puts it: under `CARGO_TARGET_DIR` when that is set, as `make` sets it.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let path = std::env::var_os("KERF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("debug/kerf"));
    ensure!(
        path.exists(),
        "no kerf binary at {} (build it with `cargo test --workspace --no-run`, or set KERF_BIN)",
        path.display()
    );
    Ok(path)
}

/// A port nothing listens on right now, below the kernel's ephemeral range: a port from that range (what binding
/// port 0 gives) can become the source port of an outgoing connection before the process that is to listen on it
/// binds it ("address already in use").
pub fn free_port() -> Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .filter(|low| *low > 12_000)
        .unwrap_or(32_768);
    let span = u32::from(low - 10_000);
    // A different start per call and process; then every port of the span in turn.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    for step in 0..span {
        let port = 10_000
            + u16::try_from((seed.wrapping_add(step.wrapping_mul(7919))) % span).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port below the ephemeral range")
}

/// A child process that is killed when dropped, also while a failing test unwinds.
pub struct Process(Child);

impl Process {
    /// The exit status, once the process has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.0.try_wait()
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kerf ARGS` with `env`, its stderr appended to `log`, and waits until it listens on `port`.
pub async fn start_kerf(
    args: &[String],
    env: &[(&str, &str)],
    log: &Path,
    port: u16,
) -> Result<Process> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = Command::new(kerf_binary()?)
        .args(args)
        .env_remove("KUBECONFIG")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .context("starting kerf")?;
    let mut process = Process(child);
    let process_ref = &mut process;
    poll("kerf listening", Duration::from_secs(60), || {
        let exited = process_ref.0.try_wait();
        async move {
            if let Some(status) = exited? {
                bail!(
                    "kerf exited ({status}) before listening; see {}",
                    log.display()
                );
            }
            Ok(std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ()))
        }
    })
    .await?;
    Ok(process)
}

impl Cluster {
    /// Runs the cached helm (`e2e/scripts/helm.sh` installs it) against this cluster from the repository root;
    /// returns its stdout, or fails with its stderr.
    pub async fn helm(&self, args: &[&str]) -> Result<String> {
        let helm = cache_dir().join("bin/helm");
        let out = tokio::process::Command::new(&helm)
            .args(args)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .current_dir(repo_root())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("running {}", helm.display()))?;
        if !out.status.success() {
            bail!(
                "helm {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply` of one object; returns whether it succeeded, and kubectl's stderr.
    pub async fn apply(&self, object: &Value) -> Result<(bool, String)> {
        let file = self.dir().join(format!("object-{}.json", free_port()?));
        std::fs::write(&file, serde_json::to_vec(object)?)?;
        let out = self
            .kubectl(&[
                std::ffi::OsStr::new("apply"),
                "-f".as_ref(),
                file.as_os_str(),
            ])
            .await?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}
