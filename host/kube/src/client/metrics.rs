//! The clients' request counter: every request the host sends, so that its
//! cost (requests per parent, requests per minute when idle) is read from
//! the host itself.
//!
//! `api_requests_total{client,method,code}`: `client` is the client's name
//! (`host`, `leader-election`, `aggregated-api`, or the plugin's), `method`
//! the HTTP method or `WATCH` for a watch (counted once, when it starts),
//! `code` the answer's status or `error` when none came (connection
//! error, timeout). The labels map one to one onto client-go's
//! `rest_client_requests_total{host,method,code}` (`WATCH` is its `GET`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    client: String,
    method: String,
    code: String,
}

/// `api_requests_total`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
}

impl RequestMetrics {
    /// The family, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "api_requests",
            "Requests sent to the API server by client, method (WATCH: a watch, counted when it starts) and status code (error: no answer)",
            metrics.requests.clone(),
        );
        metrics
    }

    /// One request of `client` answered with `code` (`None`: no answer).
    pub fn request(&self, client: &str, method: &str, code: Option<u16>) {
        self.requests
            .get_or_create(&RequestLabels {
                client: client.into(),
                method: method.into(),
                code: code.map_or_else(|| "error".into(), |c| c.to_string()),
            })
            .inc();
    }

    /// Requests counted so far with these labels.
    #[cfg(test)]
    pub(crate) fn count(&self, client: &str, method: &str, code: &str) -> u64 {
        self.requests
            .get_or_create(&RequestLabels {
                client: client.into(),
                method: method.into(),
                code: code.into(),
            })
            .get()
    }
}
