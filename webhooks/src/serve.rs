//! Serving the router over HTTPS with graceful shutdown.

use std::{convert::Infallible, future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use axum_server::{
    tls_rustls::{RustlsAcceptor, RustlsConfig},
    Handle,
};
use tokio::task::{JoinError, JoinHandle};

use crate::connections::{ConnectionLimits, GuardedAcceptor, Tracker};

/// How long in-flight requests may finish after shutdown is asked for. They end within the
/// request timeout (10 s by default); 15 s covers that and stays under a pod's default 30 s
/// termination grace period.
const GRACE_PERIOD: Duration = Duration::from_secs(15);

/// What hyper may buffer per connection before a handler reads it, outside the admission
/// budget: HTTP/1.1 reads a request header into at most this (a bigger header gets 431), and
/// HTTP/2 lets a client send this much on a connection before the server reads it. Bodies are
/// read by the handlers, under the budget; genuine request headers are a few KiB.
const HTTP1_MAX_BUFFER: usize = 64 * 1024;
const HTTP2_STREAM_WINDOW: u32 = 64 * 1024;
const HTTP2_CONNECTION_WINDOW: u32 = 128 * 1024;
const HTTP2_MAX_HEADER_LIST: u32 = 32 * 1024;
/// Streams one HTTP/2 connection may have open at once; the apiserver multiplexes its reviews
/// over few connections.
const HTTP2_MAX_STREAMS: u32 = 128;

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
    /// Binds `addr` and serves `router` with `tls` (see `kerf_certs::server_config`) within
    /// `limits` until `shutdown` completes, then drains connections for up to 15 s. Returns
    /// once listening, or with [`ServeError::Bind`] if the address cannot be bound.
    pub async fn start(
        router: Router,
        addr: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        limits: ConnectionLimits,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        let handle = Handle::new();
        let tracker = Tracker::new(limits);
        let acceptor = RustlsAcceptor::new(RustlsConfig::from_config(tls))
            .handshake_timeout(limits.header_timeout)
            .acceptor(GuardedAcceptor {
                tracker: tracker.clone(),
            });
        let mut server = axum_server::bind(addr)
            .acceptor(acceptor)
            .handle(handle.clone());
        let http = server.http_builder();
        http.http1().max_buf_size(HTTP1_MAX_BUFFER);
        http.http2()
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .max_header_list_size(HTTP2_MAX_HEADER_LIST)
            .max_concurrent_streams(HTTP2_MAX_STREAMS);
        let server = server.serve(router.into_make_service());
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
                    never = reap(&tracker, limits.reap_interval()) => match never {},
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

/// Closes idle connections every `interval`, for as long as the server runs.
async fn reap(tracker: &Tracker, interval: Duration) -> Infallible {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let closed = tracker.reap();
        if closed > 0 {
            tracing::debug!(closed, "closed idle connections");
        }
    }
}

/// [`Server::start`] and [`Server::wait`] in one call, for `main`.
pub async fn serve(
    router: Router,
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    Server::start(router, addr, tls, limits, shutdown)
        .await?
        .wait()
        .await
}
