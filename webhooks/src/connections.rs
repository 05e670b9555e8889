//! Accepted connections: `TCP_NODELAY`, a cap on how many are open, and reaping of the idle ones.
//!
//! Every accepted TCP connection is registered with a [`Tracker`] before its TLS handshake. The
//! tracker knows, per connection, whether a request is being answered on it (the service is
//! wrapped to count calls) and since when it has been idle. It closes connections that are idle
//! too long — never-used ones after [`ConnectionLimits::header_timeout`] (a slow or stalled
//! handshake, a partial header, nothing at all), used ones after
//! [`ConnectionLimits::idle_timeout`] — and, when the cap is reached, makes room for a new
//! connection by closing the one idle the longest. So a flood of idle or slowloris connections
//! cannot take the file descriptors, and a new connection (a kubelet probe of `/healthz`, the
//! apiserver) always gets in while any connection is idle. Only when every connection has a
//! request in flight is a new one refused. This works the same for HTTP/1.1 and HTTP/2, which
//! is why it is done here rather than with hyper's HTTP/1-only header timeout.
//!
//! Closing a connection makes its reads end (EOF), which ends the TLS session and hyper's
//! connection task; its descriptor is released when that task ends.

use std::{
    collections::HashMap,
    future::{Future, Ready},
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
    task::{Context, Poll, Waker},
    time::Duration,
};

use axum_server::accept::Accept;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::Instant,
};

/// Limits on the connections of one server; see the module documentation for how they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most, idle and busy. Each costs a descriptor and up to ~200 KiB of
    /// TLS and HTTP buffers before its request reaches the admission budget.
    pub max_connections: usize,
    /// How long a new connection has to finish its TLS handshake and send a whole request header.
    pub header_timeout: Duration,
    /// How long a connection that has answered a request may stay open without another.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
        }
    }
}

impl ConnectionLimits {
    /// How often the tracker looks for idle connections: a tenth of the shorter timeout, so a
    /// connection is closed at most 10% late, and not more than ten times a second.
    pub(crate) fn reap_interval(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 10).max(Duration::from_millis(100))
    }
}

/// The open connections of one server.
#[derive(Debug)]
pub(crate) struct Tracker {
    limits: ConnectionLimits,
    /// Times are kept as milliseconds since this instant, so they fit in atomics.
    epoch: Instant,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    connections: HashMap<u64, Arc<Connection>>,
}

/// What the tracker knows of one connection.
#[derive(Debug)]
struct Connection {
    /// The tracker's epoch.
    epoch: Instant,
    /// Requests being answered on it (HTTP/2 may answer several at once).
    busy: AtomicUsize,
    /// Whether a request has started on it: the header timeout applies until then.
    used: AtomicBool,
    /// Milliseconds since the tracker's epoch when it was opened or its last request ended.
    idle_since: AtomicU64,
    closed: AtomicBool,
    /// The task reading the connection, woken to see the EOF when it is closed.
    reader: Mutex<Option<Waker>>,
}

impl Connection {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(waker) = lock(&self.reader).take() {
            waker.wake();
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    fn idle_for(&self, now_ms: u64) -> Option<u64> {
        (self.busy.load(Ordering::Acquire) == 0)
            .then(|| now_ms.saturating_sub(self.idle_since.load(Ordering::Acquire)))
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A poisoned lock only means another connection's task panicked; the data is still coherent.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tracker {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            epoch: Instant::now(),
            open: Mutex::new(Open::default()),
        })
    }

    fn now_ms(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    /// Registers a new connection, closing the longest-idle one when the cap is reached; `None`
    /// when every open connection is answering a request.
    fn admit(self: &Arc<Self>) -> Option<Registration> {
        self.admit_at(self.now_ms())
    }

    fn admit_at(self: &Arc<Self>, now_ms: u64) -> Option<Registration> {
        let mut open = lock(&self.open);
        if open.connections.len() >= self.limits.max_connections {
            let idlest = open
                .connections
                .iter()
                .filter_map(|(id, connection)| Some((connection.idle_for(now_ms)?, *id)))
                .max()
                .map(|(_, id)| id);
            let evicted = idlest.and_then(|id| open.connections.remove(&id))?;
            evicted.close();
            tracing::debug!(
                max = self.limits.max_connections,
                "connection cap reached: closed the longest-idle connection"
            );
        }
        let connection = Arc::new(Connection {
            epoch: self.epoch,
            busy: AtomicUsize::new(0),
            used: AtomicBool::new(false),
            idle_since: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            reader: Mutex::new(None),
        });
        let id = open.next_id;
        open.next_id += 1;
        open.connections.insert(id, connection.clone());
        Some(Registration {
            tracker: self.clone(),
            id,
            connection,
        })
    }

    /// Closes the connections idle longer than their timeout; returns how many.
    pub(crate) fn reap(&self) -> usize {
        self.reap_at(self.now_ms())
    }

    fn reap_at(&self, now_ms: u64) -> usize {
        let (header, idle) = (
            millis(self.limits.header_timeout),
            millis(self.limits.idle_timeout),
        );
        let mut open = lock(&self.open);
        let before = open.connections.len();
        open.connections.retain(|_, connection| {
            let limit = if connection.used.load(Ordering::Acquire) {
                idle
            } else {
                header
            };
            let expired = connection
                .idle_for(now_ms)
                .is_some_and(|idle| idle >= limit);
            if expired {
                connection.close();
            }
            !expired
        });
        before - open.connections.len()
    }

    /// Open connections, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.open).connections.len()
    }
}

/// A connection's place in the tracker, given up when the connection ends.
#[derive(Debug)]
struct Registration {
    tracker: Arc<Tracker>,
    id: u64,
    connection: Arc<Connection>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.tracker.open).connections.remove(&self.id);
    }
}

/// The acceptor under TLS: sets `TCP_NODELAY` (without it, Nagle's algorithm and the peer's
/// delayed ACK hold the first response on a new TLS connection back ~40 ms) and registers the
/// connection.
#[derive(Clone, Debug)]
pub(crate) struct GuardedAcceptor {
    pub(crate) tracker: Arc<Tracker>,
}

impl<S> Accept<TcpStream, S> for GuardedAcceptor {
    type Stream = Guarded<TcpStream>;
    type Service = Counted<S>;
    type Future = Ready<io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        std::future::ready(self.guard(stream, service))
    }
}

impl GuardedAcceptor {
    fn guard<S>(
        &self,
        stream: TcpStream,
        service: S,
    ) -> io::Result<(Guarded<TcpStream>, Counted<S>)> {
        stream.set_nodelay(true)?;
        let Some(registration) = self.tracker.admit() else {
            tracing::warn!(
                max = self.tracker.limits.max_connections,
                "connection refused: every open connection is answering a request"
            );
            return Err(io::Error::other("connection cap reached"));
        };
        let connection = registration.connection.clone();
        Ok((
            Guarded {
                inner: stream,
                registration,
            },
            Counted {
                inner: service,
                connection,
            },
        ))
    }
}

/// A stream that reads EOF once the tracker closes its connection.
#[derive(Debug)]
pub(crate) struct Guarded<T> {
    inner: T,
    registration: Registration,
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let connection = &self.registration.connection;
        {
            let mut reader = lock(&connection.reader);
            if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *reader = Some(cx.waker().clone());
            }
        }
        if connection.closed.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connection's service, counting the requests in flight on it.
#[derive(Clone, Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    connection: Arc<Connection>,
}

/// Marks a connection busy while it lives; when the last request ends the idle clock restarts.
struct Busy(Arc<Connection>);

impl Busy {
    fn start(connection: &Arc<Connection>) -> Self {
        connection.busy.fetch_add(1, Ordering::AcqRel);
        connection.used.store(true, Ordering::Release);
        Self(connection.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let connection = &self.0;
        connection
            .idle_since
            .store(connection.now_ms(), Ordering::Release);
        connection.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, R> tower::Service<R> for Counted<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let busy = Busy::start(&self.connection);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(busy);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(max_connections: usize) -> Arc<Tracker> {
        Tracker::new(ConnectionLimits {
            max_connections,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
        })
    }

    fn closed(registration: &Registration) -> bool {
        registration.connection.closed.load(Ordering::Acquire)
    }

    #[test]
    fn the_cap_closes_the_longest_idle_connection_and_never_a_busy_one() {
        let tracker = tracker(2);
        let oldest = tracker.admit_at(0).expect("room");
        let newer = tracker.admit_at(10).expect("room");
        let third = tracker.admit_at(20).expect("room made");
        assert!(closed(&oldest) && !closed(&newer) && !closed(&third));
        assert_eq!(tracker.len(), 2);

        let _busy = (
            Busy::start(&newer.connection),
            Busy::start(&third.connection),
        );
        assert!(tracker.admit_at(30).is_none(), "every connection is busy");
        assert_eq!(tracker.len(), 2);
        drop(newer);
        assert_eq!(tracker.len(), 1, "a connection that ends leaves");
    }

    #[test]
    fn idle_connections_are_reaped_after_their_timeout() {
        let tracker = tracker(10);
        let unused = tracker.admit_at(0).expect("room");
        let used = tracker.admit_at(0).expect("room");
        drop(Busy::start(&used.connection));
        let busy = tracker.admit_at(0).expect("room");
        let _request = Busy::start(&busy.connection);

        assert_eq!(tracker.reap_at(4_999), 0);
        assert_eq!(tracker.reap_at(5_000), 1, "the header timeout");
        assert!(closed(&unused) && !closed(&used));
        assert_eq!(tracker.reap_at(29_000), 0);
        assert_eq!(tracker.reap_at(31_000), 1, "the idle timeout");
        assert!(
            closed(&used) && !closed(&busy),
            "a request in flight keeps its connection"
        );
        assert_eq!(tracker.len(), 1);
    }
}
