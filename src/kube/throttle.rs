//! The controller's bound on calls to the apiserver, as Karpenter's `--kube-client-qps` / `--kube-client-burst`
//! (client-go's token bucket, default 200 a second with bursts of 300): every request of the client takes a token,
//! and waits for one when the bucket is empty, so that no loop of the controller (a burst of NodeClaim creates,
//! a drain's evictions, a pass's status writes) can flood the apiserver, whatever its own parallelism.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket shared by every clone of the client.
#[derive(Debug)]
struct Bucket {
    /// Tokens added per second.
    qps: f64,
    /// The most tokens the bucket holds.
    burst: f64,
    /// Tokens now, as of `at`; negative when requests are waiting for tokens not yet added.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Takes a token at `now`: how long to wait until it exists.
    fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// The layer: `qps` tokens a second, at most `burst` at once (both at least 1).
#[derive(Clone, Debug)]
pub struct Throttle {
    bucket: Arc<Mutex<Bucket>>,
}

impl Throttle {
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Throttle {
            bucket: Arc::new(Mutex::new(Bucket {
                qps: f64::from(qps.max(1)),
                burst,
                tokens: burst,
                at: Instant::now(),
            })),
        }
    }
}

impl<S> Layer<S> for Throttle {
    type Service = Throttled<S>;

    fn layer(&self, inner: S) -> Throttled<S> {
        Throttled {
            inner,
            bucket: self.bucket.clone(),
            token: Token::None,
        }
    }
}

/// Where a service is with the token of its next request.
enum Token {
    None,
    Waiting(Pin<Box<Sleep>>),
    Held,
}

/// The service under [`Throttle`]: ready once the next request's token exists and the inner service is ready.
pub struct Throttled<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    token: Token,
}

impl<S, R> Service<R> for Throttled<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        loop {
            match &mut self.token {
                Token::None => {
                    let wait = self
                        .bucket
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take(Instant::now());
                    self.token = if wait.is_zero() {
                        Token::Held
                    } else {
                        Token::Waiting(Box::pin(tokio::time::sleep(wait)))
                    };
                }
                Token::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.token = Token::Held;
                }
                Token::Held => return self.inner.poll_ready(cx),
            }
        }
    }

    fn call(&mut self, request: R) -> S::Future {
        self.token = Token::None;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    /// A service that answers at once with the (paused) clock's time.
    #[derive(Clone)]
    struct Now;

    impl Service<()> for Now {
        type Response = Instant;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Instant, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: ()) -> Self::Future {
            std::future::ready(Ok(Instant::now()))
        }
    }

    async fn times(service: &mut Throttled<Now>, requests: usize) -> Vec<Duration> {
        let start = Instant::now();
        let mut times = Vec::new();
        for _ in 0..requests {
            let answered = service.ready().await.expect("ready").call(()).await;
            times.push(answered.expect("answered") - start);
        }
        times
    }

    /// client-go's token bucket: a burst goes out at once, then one request per 1/qps.
    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let mut service = Throttle::new(10, 3).layer(Now);
        let times = times(&mut service, 5).await;
        assert_eq!(
            times,
            [0, 0, 0, 100, 200].map(Duration::from_millis),
            "3 at once, then every 100 ms"
        );
    }

    /// Tokens come back with time, up to the burst.
    #[tokio::test(start_paused = true)]
    async fn an_idle_bucket_refills_up_to_its_burst() {
        let throttle = Throttle::new(10, 2);
        let mut service = throttle.layer(Now);
        times(&mut service, 2).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        let times = times(&mut service, 3).await;
        assert_eq!(times, [0, 0, 100].map(Duration::from_millis));
    }

    /// Every clone of the client takes from the same bucket.
    #[tokio::test(start_paused = true)]
    async fn clones_share_the_bucket() {
        let throttle = Throttle::new(10, 1);
        let mut first = throttle.layer(Now);
        let mut second = throttle.layer(Now);
        let a = times(&mut first, 1).await;
        let b = times(&mut second, 1).await;
        assert_eq!(a, [Duration::ZERO]);
        assert_eq!(b, [Duration::from_millis(100)]);
    }
}
