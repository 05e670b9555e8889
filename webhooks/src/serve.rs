//! Serving the router over HTTPS with graceful shutdown.

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use axum_server::{tls_rustls::RustlsConfig, Handle};
use tokio::task::{JoinError, JoinHandle};

/// How long in-flight requests may finish after shutdown is asked for. They end within the
/// request timeout (10 s by default); 15 s covers that and stays under a pod's default 30 s
/// termination grace period.
const GRACE_PERIOD: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("the HTTPS server stopped")]
    Serve(#[source] io::Error),
    #[error("the HTTPS server task panicked")]
    Task(#[source] JoinError),
}

/// A running HTTPS server. Knowing its address matters when it was bound to port 0.
pub struct Server {
    local_addr: SocketAddr,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// Binds `addr` and serves `router` with `tls` (see `kerf_certs::server_config`) until
    /// `shutdown` completes, then drains connections for up to 15 s. Returns once listening,
    /// or with [`ServeError::Bind`] if the address cannot be bound.
    pub async fn start(
        router: Router,
        addr: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        let handle = Handle::new();
        let server = axum_server::bind_rustls(addr, RustlsConfig::from_config(tls))
            .handle(handle.clone())
            .serve(router.into_make_service());
        let mut task = tokio::spawn({
            let handle = handle.clone();
            async move {
                tokio::pin!(server);
                tokio::select! {
                    result = &mut server => result,
                    () = shutdown => {
                        handle.graceful_shutdown(Some(GRACE_PERIOD));
                        server.await
                    }
                }
            }
        });
        // `listening` never resolves if binding failed before it was called, so race it
        // against the task, which ends with the bind error in that case.
        tokio::select! {
            Some(local_addr) = handle.listening() => Ok(Self { local_addr, task }),
            ended = &mut task => Err(match ended {
                Ok(Err(source)) => ServeError::Bind { addr, source },
                Ok(Ok(())) => ServeError::Bind {
                    addr,
                    source: io::Error::other("the server stopped before listening"),
                },
                Err(error) => ServeError::Task(error),
            }),
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits until the server has shut down.
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(result) => result.map_err(ServeError::Serve),
            Err(error) => Err(ServeError::Task(error)),
        }
    }
}

/// [`Server::start`] and [`Server::wait`] in one call, for `main`.
pub async fn serve(
    router: Router,
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::start(router, addr, tls, shutdown)
        .await?
        .wait()
        .await
}
