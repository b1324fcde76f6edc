//! The host's Kubernetes clients: a rate limit, a per-request timeout,
//! retries of 429/503/504 that honour `Retry-After`, a count of every
//! request, and what their outcomes say about the API server's health.
//!
//! client-go gives every client a token-bucket rate limiter (QPS and burst)
//! and retries throttled requests as the server says; kube-rs leaves both to
//! the caller. Ours is adaptive by default ([`pace`]): no pacing until the
//! server throttles. Every client of the host is built here, each with its own
//! bucket and its own connections: the host's own (watches, reviews), leader
//! election's (Leases only, so that no other load delays a renewal), the
//! aggregated API's (its callers' reviews), and one per plugin,
//! impersonating its ServiceAccount. One busy plugin cannot use up another's
//! share, a flood of previews cannot cost a replica its Leases, and a slow
//! API server cannot hold a worker forever.
//!
//! Stack, outermost first: retry (backoff with jitter, at least the server's
//! `Retry-After`) → the guard: rate limit, request counter
//! ([`metrics`]), API health ([`crate::health`]), timeout (not for watches,
//! which stay open by design and are bounded by the watcher's own idle
//! timeout) → a buffer (so the stack below can be cloned) → kube's stack.
//! Each retry passes the guard again: it is paced and counted.

pub mod metrics;
pub mod pace;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::{BoxError, Layer, Service};

use self::metrics::RequestMetrics;
use self::pace::Pace;
pub use self::pace::RateLimit;
use crate::health::ApiHealth;

/// Limits every client of the host gets, and where it reports.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The client's name in metrics (`host`, a plugin's name, ...).
    pub name: String,
    /// How fast it may send (adaptive by default).
    pub limit: RateLimit,
    /// Longest wait for an answer to one request (watches excepted).
    pub timeout: Duration,
    /// Sent as `User-Agent`, so audit logs tell replicas apart.
    pub user_agent: String,
    /// Where every request is counted.
    pub requests: Option<RequestMetrics>,
    /// Told of every answer and every failure.
    pub health: Option<Arc<ApiHealth>>,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            name: "host".into(),
            limit: RateLimit::Adaptive,
            timeout: Duration::from_secs(30),
            user_agent: format!("kubeplug/{}", env!("CARGO_PKG_VERSION")),
            requests: None,
            health: None,
        }
    }
}

impl ClientSettings {
    /// The same settings for the client named `name`.
    pub fn named(&self, name: &str) -> ClientSettings {
        ClientSettings {
            name: name.into(),
            ..self.clone()
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
    let host = api_host(config);
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
        .with_layer(&GuardLayer::new(settings, &host))
        .with_layer(&tower::retry::RetryLayer::new(retry_policy()))
        .build())
}

/// The API server's authority (`host:port`) in `config`, client-go's
/// `host` label.
fn api_host(config: &Config) -> String {
    config
        .cluster_url
        .authority()
        .map_or_else(String::new, ToString::to_string)
}

/// What the guard of one client shares between its requests.
struct Shared {
    pace: Pace,
    timeout: Duration,
    name: String,
    /// The API server's authority, for client-go's request counter.
    host: String,
    requests: Option<RequestMetrics>,
    health: Option<Arc<ApiHealth>>,
}

impl Shared {
    /// Count a request of `method` that got `code` (`None`: no answer) and
    /// tell the pace and the API health what it says.
    fn outcome(&self, method: &str, code: Option<StatusCode>, error: &dyn std::fmt::Display) {
        if let Some(requests) = &self.requests {
            requests.request(&self.name, &self.host, method, code.map(|c| c.as_u16()));
        }
        if let Some(health) = &self.health {
            match code {
                Some(
                    StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT,
                )
                | None => health.failed(error),
                Some(_) => health.answered(),
            }
        }
    }
}

/// Whether an answer says the server is overloaded: 429, or 503 with
/// `Retry-After` (what the API server sends when it sheds load).
fn is_throttling<B>(response: &Response<B>) -> bool {
    let status = response.status();
    status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::SERVICE_UNAVAILABLE
            && response.headers().contains_key(http::header::RETRY_AFTER))
}

/// Rate limit, counter, health and timeout, see the module doc.
#[derive(Clone)]
struct GuardLayer {
    shared: Arc<Shared>,
}

impl GuardLayer {
    fn new(settings: &ClientSettings, host: &str) -> Self {
        GuardLayer {
            shared: Arc::new(Shared {
                pace: Pace::new(settings.limit),
                timeout: settings.timeout,
                name: settings.name.clone(),
                host: host.into(),
                requests: settings.requests.clone(),
                health: settings.health.clone(),
            }),
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;
    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            shared: self.shared.clone(),
        }
    }
}

#[derive(Clone)]
struct Guard<S> {
    inner: S,
    shared: Arc<Shared>,
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
    B: http_body::Body + Unpin + Send + 'static,
    B::Error: std::fmt::Display,
{
    type Response = Response<Observed<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The instance polled ready serves this call; a clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let wait = shared.pace.reserve();
        let watch = is_watch(request.uri());
        let method = if watch {
            "WATCH".to_string()
        } else {
            request.method().to_string()
        };
        let (http_method, path) = (request.method().clone(), request.uri().path().to_string());
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let response = inner.call(request);
            let result = if watch {
                response.await.map_err(Into::into)
            } else {
                match tokio::time::timeout(shared.timeout, response).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(Timeout {
                        method: http_method,
                        path,
                        timeout: shared.timeout,
                    }) as BoxError),
                }
            };
            match result {
                Ok(response) => {
                    if is_throttling(&response) {
                        shared.pace.throttled();
                    }
                    let status = response.status();
                    shared.outcome(&method, Some(status), &status);
                    let watch_data = watch && status.is_success();
                    Ok(response.map(|body| Observed {
                        body,
                        watch_data,
                        shared: shared.clone(),
                    }))
                }
                Err(error) => {
                    shared.outcome(&method, None, &error);
                    Err(error)
                }
            }
        })
    }
}

/// A response body that tells the API health of a watch's data (its events
/// and bookmarks are the server answering) and of a body broken midway.
struct Observed<B> {
    body: B,
    /// A watch the server accepted: its data counts as answers.
    watch_data: bool,
    shared: Arc<Shared>,
}

impl<B> http_body::Body for Observed<B>
where
    B: http_body::Body + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Some(health) = &self.shared.health {
            match &polled {
                Poll::Ready(Some(Ok(_))) if self.watch_data => health.answered(),
                Poll::Ready(Some(Err(error))) => health.failed(error),
                _ => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    use http_body::Body as _;

    /// A guard named `test` over a server that answers every request with
    /// `status` (and `Retry-After: 1` if `retry_after`) and a small body.
    #[allow(clippy::type_complexity, reason = "a test's service stack")]
    fn guard(
        limit: RateLimit,
        status: StatusCode,
        retry_after: bool,
    ) -> (
        Guard<
            tower::util::ServiceFn<
                impl FnMut(Request<Body>) -> std::future::Ready<Result<Response<Body>, Infallible>>
                + Clone,
            >,
        >,
        Arc<Shared>,
    ) {
        let settings = ClientSettings {
            name: "test".into(),
            limit,
            requests: Some(RequestMetrics::default()),
            health: Some(Arc::new(ApiHealth::default())),
            ..ClientSettings::default()
        };
        let layer = GuardLayer::new(&settings, "api.test:6443");
        let shared = layer.shared.clone();
        let server = tower::service_fn(move |_: Request<Body>| {
            let mut response = Response::new(Body::from(b"{}".to_vec()));
            *response.status_mut() = status;
            if retry_after {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            std::future::ready(Ok(response))
        });
        (layer.layer(server), shared)
    }

    fn request(uri: &str) -> Request<Body> {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    /// Send `request` through `service` and read its body to the end.
    async fn send<S>(service: &mut S, request: Request<Body>) -> StatusCode
    where
        S: Service<Request<Body>, Response = Response<Observed<Body>>, Error = BoxError>,
    {
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        let response = service.call(request).await.unwrap();
        let status = response.status();
        let mut body = response.into_body();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            frame.unwrap();
        }
        status
    }

    #[tokio::test(start_paused = true)]
    async fn every_request_is_counted_by_client_method_and_code_and_watches_apart() {
        let (mut service, shared) = guard(RateLimit::Adaptive, StatusCode::OK, false);
        send(&mut service, request("/api/v1/pods?limit=500")).await;
        send(&mut service, request("/api/v1/pods?watch=true")).await;
        send(&mut service, request("/api/v1/pods?watch=1")).await;
        let requests = shared.requests.as_ref().unwrap();
        assert_eq!(requests.count("test", "GET", "200"), 1);
        assert_eq!(requests.count("test", "WATCH", "200"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_are_counted_as_client_go_counts_them_watches_as_gets() {
        let (mut service, shared) = guard(RateLimit::Adaptive, StatusCode::OK, false);
        send(&mut service, request("/api/v1/pods?limit=500")).await;
        send(&mut service, request("/api/v1/pods?watch=true")).await;
        let requests = shared.requests.as_ref().unwrap();
        assert_eq!(requests.rest_client_count("api.test:6443", "GET", "200"), 2);
        assert_eq!(
            requests.rest_client_count("api.test:6443", "WATCH", "200"),
            0
        );
        requests.request("test", "api.test:6443", "PATCH", None);
        assert_eq!(
            requests.rest_client_count("api.test:6443", "PATCH", "<error>"),
            1,
            "no answer"
        );
        assert_eq!(requests.count("test", "PATCH", "error"), 1);
    }

    #[test]
    fn the_host_label_is_the_api_servers_authority() {
        let config = Config::new("https://10.0.0.1:6443/".parse().unwrap());
        assert_eq!(api_host(&config), "10.0.0.1:6443");
    }

    #[tokio::test(start_paused = true)]
    async fn any_answer_is_the_api_server_answering_but_a_bad_gateway_is_not() {
        let (mut service, shared) = guard(RateLimit::Adaptive, StatusCode::NOT_FOUND, false);
        let health = shared.health.clone().unwrap();
        health.failed(&"a connection reset");
        send(&mut service, request("/api/v1/pods/x")).await;
        assert_eq!(health.failures(), 0, "a 404 is an answer");

        let (mut service, shared) = guard(RateLimit::Adaptive, StatusCode::BAD_GATEWAY, false);
        let health = shared.health.clone().unwrap();
        send(&mut service, request("/api/v1/pods")).await;
        send(&mut service, request("/api/v1/pods?watch=true")).await;
        assert_eq!(
            health.failures(),
            2,
            "a proxy's 502 and its body are no answer"
        );
        let requests = shared.requests.as_ref().unwrap();
        assert_eq!(requests.count("test", "WATCH", "502"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_answers_pace_an_adaptive_client() {
        let (mut service, shared) =
            guard(RateLimit::Adaptive, StatusCode::TOO_MANY_REQUESTS, false);
        send(&mut service, request("/api/v1/pods")).await;
        assert!(shared.pace.adaptive_limit().is_some(), "429 paces");
        let (mut service, shared) =
            guard(RateLimit::Adaptive, StatusCode::SERVICE_UNAVAILABLE, true);
        send(&mut service, request("/api/v1/pods")).await;
        assert!(
            shared.pace.adaptive_limit().is_some(),
            "503 with Retry-After paces"
        );
        let (mut service, shared) =
            guard(RateLimit::Adaptive, StatusCode::SERVICE_UNAVAILABLE, false);
        send(&mut service, request("/api/v1/pods")).await;
        assert_eq!(
            shared.pace.adaptive_limit(),
            None,
            "a bare 503 is no throttling"
        );
    }

    #[test]
    fn watches_are_recognised() {
        let watch: http::Uri = "/api/v1/pods?watch=true&resourceVersion=1".parse().unwrap();
        let list: http::Uri = "/api/v1/pods?limit=500".parse().unwrap();
        assert!(is_watch(&watch));
        assert!(!is_watch(&list));
    }
}
