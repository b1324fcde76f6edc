//! The exporter's HTTP client: hyper and rustls, as kube's client uses
//! them, on a Tokio runtime of its own.
//!
//! Why a runtime of its own: the SDK's batch processor exports from its own
//! thread, outside any Tokio runtime, and hyper needs one. Each request
//! runs to its end on a current-thread runtime this client owns, on that
//! thread, so an export never waits on the host's runtime (nor a reconcile
//! on an export), and the last flush still works after `run` has stopped
//! the host's runtime.

use std::time::Duration;

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most of a collector's answer that is read: an OTLP answer is a few
/// bytes (a partial success at most); anything bigger is not one.
const MAX_ANSWER: usize = 64 * 1024;

/// HTTP or HTTPS (the system's roots) to the collector.
#[derive(Debug)]
pub struct Client {
    hyper: Hyper<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Runtime,
    /// One request, answer included (the exporter retries within the same
    /// bound: see `config::Config::timeout`).
    timeout: Duration,
}

impl Client {
    pub fn new(timeout: Duration) -> anyhow::Result<Self> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(kubeplug_api::tls::provider())
            .context("failed to read the system's trust roots for the trace exporter")?
            .https_or_http()
            .enable_http1()
            .build();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("failed to start the trace exporter's runtime")?;
        let hyper = Hyper::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Ok(Client {
            hyper,
            runtime,
            timeout,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.runtime.block_on(async {
            let exchange = async {
                let response = self.hyper.request(request.map(Full::new)).await?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            };
            tokio::time::timeout(self.timeout, exchange)
                .await
                .map_err(|_| format!("no answer within {:?}", self.timeout))?
        })
    }
}
