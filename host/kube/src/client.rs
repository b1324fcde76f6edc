//! The host's Kubernetes clients: a rate limit, a per-request timeout and
//! retries of 429/503/504 that honour `Retry-After`.
//!
//! client-go gives every client a token-bucket rate limiter (QPS and burst)
//! and retries throttled requests as the server says; kube-rs leaves both to
//! the caller. Every client of the host is built here, each with its own
//! bucket and its own connections: the host's own (watches, reviews), leader
//! election's (Leases only, so that no other load delays a renewal), the
//! aggregated API's (its callers' reviews), and one per plugin,
//! impersonating its ServiceAccount. One busy plugin cannot use up another's
//! share, a flood of previews cannot cost a replica its Leases, and a slow
//! API server cannot hold a worker forever.
//!
//! Stack, outermost first: retry (backoff with jitter, at least the server's
//! `Retry-After`) → rate limit → timeout (not for watches, which stay open by
//! design and are bounded by the watcher's own idle timeout) → a buffer (so
//! the stack below can be cloned) → kube's stack.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Limits every client of the host gets.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Requests per second, sustained (`<= 0`: unlimited).
    pub qps: f64,
    /// Requests allowed at once above the sustained rate.
    pub burst: u32,
    /// Longest wait for an answer to one request (watches excepted).
    pub timeout: Duration,
    /// Sent as `User-Agent`, so audit logs tell replicas apart.
    pub user_agent: String,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            qps: 100.0,
            burst: 200,
            timeout: Duration::from_secs(30),
            user_agent: format!("kubeplug/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Retries of one request: 429/503/504 only, up to 8 times, 200 ms doubling
/// to 30 s with jitter, never sooner than the server's `Retry-After`.
fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(30), 8, true)
        .expect("static retry parameters are valid")
}

/// A client for `config` with the limits of `settings`.
pub fn build(config: &Config, settings: &ClientSettings) -> Result<Client, kube::Error> {
    let mut config = config.clone();
    // Ours instead: kube's default retries up to 15 times over many minutes.
    config.default_retry = false;
    if let Ok(agent) = HeaderValue::from_str(&settings.user_agent) {
        config
            .headers
            .push((HeaderName::from_static("user-agent"), agent));
    }
    let builder = ClientBuilder::try_from(config)?;
    Ok(builder
        // kube's stack is not `Clone`; retries need it to be.
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&GuardLayer::new(settings))
        .with_layer(&tower::retry::RetryLayer::new(retry_policy()))
        .build())
}

/// A token bucket shared by every request of one client. Reservations are
/// taken in arrival order (like Go's `rate.Limiter.Reserve`): a request waits
/// for its own token, never starves.
struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Bucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait for its token (zero if one is free).
    fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let mut state = self.state.lock().expect("bucket lock");
        let now = Instant::now();
        let (tokens, last) = *state;
        let tokens =
            (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
        *state = (tokens, now);
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }
}

/// Rate limit and timeout, see the module doc.
#[derive(Clone)]
struct GuardLayer {
    bucket: Arc<Bucket>,
    timeout: Duration,
}

impl GuardLayer {
    fn new(settings: &ClientSettings) -> Self {
        GuardLayer {
            bucket: Arc::new(Bucket::new(settings.qps, settings.burst)),
            timeout: settings.timeout,
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;
    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            bucket: self.bucket.clone(),
            timeout: self.timeout,
        }
    }
}

#[derive(Clone)]
struct Guard<S> {
    inner: S,
    bucket: Arc<Bucket>,
    timeout: Duration,
}

/// A watch (`watch=true`/`watch=1`) stays open for minutes by design.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// The error of a request the API server did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer {method} {path} within {timeout:?}")]
pub struct Timeout {
    method: http::Method,
    path: String,
    timeout: Duration,
}

impl<S, B> Service<Request<Body>> for Guard<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The instance polled ready serves this call; a clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let wait = self.bucket.reserve();
        let timeout = (!is_watch(request.uri())).then_some(self.timeout);
        let (method, path) = (request.method().clone(), request.uri().path().to_string());
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let response = inner.call(request);
            match timeout {
                None => response.await.map_err(Into::into),
                Some(timeout) => match tokio::time::timeout(timeout, response).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(Timeout {
                        method,
                        path,
                        timeout,
                    }) as BoxError),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_a_burst_then_the_sustained_rate() {
        let bucket = Bucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(), Duration::ZERO);
        }
        // Tokens are reserved in order: the 4th waits 0.1 s, the 5th 0.2 s.
        assert_eq!(bucket.reserve(), Duration::from_millis(100));
        assert_eq!(bucket.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            bucket.reserve(),
            Duration::ZERO,
            "refilled, capped at burst"
        );
    }

    #[test]
    fn a_zero_rate_means_unlimited() {
        let bucket = Bucket::new(0.0, 1);
        for _ in 0..100 {
            assert_eq!(bucket.reserve(), Duration::ZERO);
        }
    }

    #[test]
    fn watches_are_recognised() {
        let watch: http::Uri = "/api/v1/pods?watch=true&resourceVersion=1".parse().unwrap();
        let list: http::Uri = "/api/v1/pods?limit=500".parse().unwrap();
        assert!(is_watch(&watch));
        assert!(!is_watch(&list));
    }
}
