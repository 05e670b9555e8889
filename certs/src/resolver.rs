//! Serving the current certificate and picking up rotated files.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Weak,
    },
    time::{Duration, SystemTime},
};

use arc_swap::ArcSwap;
use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio::{task::JoinHandle, time::MissedTickBehavior};

use crate::{
    pem::{self, Loaded, PemFile},
    CertError,
};

/// A [`ResolvesServerCert`] that always answers with the newest good key pair from disk.
///
/// Kubernetes updates a mounted Secret by writing a new directory and swapping a symlink, so
/// neither inotify on the files nor their mtime is a reliable signal. The watcher therefore
/// re-reads both files every tick and reloads when their bytes differ from the last attempt.
/// A pair that does not load (half rotated, garbage) is logged once per change and the
/// previous key keeps being served; the next change of either file is tried again. Files
/// that cannot be read at all are logged every tick.
///
/// A pair whose certificate is expired or not yet valid is refused too: at start with an error
/// naming both dates, on rotation by keeping the previous pair (logged and counted once per
/// change). A pair that is not valid *yet* is tried again every tick, silently, and served
/// from its `notBefore` on.
#[derive(Debug)]
pub struct ReloadingCertResolver {
    current: ArcSwap<Loaded>,
    reloads: AtomicU64,
    failed_reloads: AtomicU64,
}

impl ReloadingCertResolver {
    /// Loads the pair once (failing if it cannot) and spawns the task that polls for changes.
    ///
    /// Must be called inside a tokio runtime. The task ends on its own when the resolver is
    /// dropped; the handle lets the caller stop it sooner.
    pub fn watch(
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
        poll_interval: Duration,
    ) -> Result<(Arc<Self>, JoinHandle<()>), CertError> {
        let (cert_path, key_path) = (cert_path.into(), key_path.into());
        let files = read_pair(&cert_path, &key_path)?;
        let loaded = pem::parse(&files.0, &files.1)?;
        loaded.validity.check(&cert_path, SystemTime::now())?;
        let resolver = Arc::new(Self {
            current: ArcSwap::from_pointee(loaded),
            reloads: AtomicU64::new(0),
            failed_reloads: AtomicU64::new(0),
        });
        let task = tokio::spawn(poll(
            Arc::downgrade(&resolver),
            cert_path,
            key_path,
            poll_interval,
            files,
        ));
        Ok((resolver, task))
    }

    /// The key pair handshakes get now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load().key.clone()
    }

    /// When the served leaf certificate expires; worth exporting as a metric.
    pub fn not_after(&self) -> SystemTime {
        self.current.load().validity.not_after
    }

    /// How many times a rotated pair has been swapped in since [`Self::watch`].
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// How many re-reads found files that could not be read or loaded, or whose certificate was
    /// expired or not yet valid; a growing count means rotation is broken and the served
    /// certificate will eventually expire.
    pub fn failed_reloads(&self) -> u64 {
        self.failed_reloads.load(Ordering::Relaxed)
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<(PemFile, PemFile), CertError> {
    Ok((PemFile::read(cert_path)?, PemFile::read(key_path)?))
}

async fn poll(
    resolver: Weak<ReloadingCertResolver>,
    cert_path: PathBuf,
    key_path: PathBuf,
    poll_interval: Duration,
    mut last_attempt: (PemFile, PemFile),
) {
    let mut ticker = tokio::time::interval(poll_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate; the files were just read
                         // Set while the files on disk hold a good pair whose certificate is not valid yet.
    let mut not_yet_valid = false;
    loop {
        ticker.tick().await;
        let Some(resolver) = resolver.upgrade() else {
            return;
        };
        let files = match read_pair(&cert_path, &key_path) {
            Ok(files) => files,
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "cannot re-read the TLS files; still serving the previous certificate");
                resolver.failed_reloads.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let changed = files != last_attempt;
        if !changed && !not_yet_valid {
            continue;
        }
        let now = SystemTime::now();
        not_yet_valid = false;
        let checked = pem::parse(&files.0, &files.1).and_then(|loaded| {
            not_yet_valid = now < loaded.validity.not_before;
            loaded.validity.check(&cert_path, now).map(|()| loaded)
        });
        match checked {
            Ok(loaded) => {
                tracing::info!(cert = %cert_path.display(), not_after = ?loaded.validity.not_after, "serving a rotated TLS certificate");
                // Count first: whoever sees the new key through the swap also sees the count.
                resolver.reloads.fetch_add(1, Ordering::Relaxed);
                resolver.current.store(Arc::new(loaded));
            }
            Err(error) if changed => {
                tracing::warn!(error = %error_chain(&error), "rotated TLS files do not load; still serving the previous certificate");
                resolver.failed_reloads.fetch_add(1, Ordering::Relaxed);
            }
            // The same not-yet-valid pair as last tick: already logged and counted.
            Err(_) => {}
        }
        last_attempt = files;
    }
}

/// "outer: inner: innermost", since tracing's `%` shows only the outermost message.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn watch_fails_when_the_first_load_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("tls.crt");
        std::fs::write(&cert, "garbage").expect("write");
        let error =
            ReloadingCertResolver::watch(&cert, dir.path().join("tls.key"), Duration::from_secs(1))
                .expect_err("no key file");
        assert!(matches!(error, CertError::Read { .. }), "{error:?}");
    }

    #[test]
    fn error_chain_joins_sources() {
        let error = CertError::Read {
            path: PathBuf::from("tls.crt"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        };
        assert_eq!(error_chain(&error), "cannot read tls.crt: gone");
    }
}
